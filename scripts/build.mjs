#!/usr/bin/env node
// `npm run build` (and `prepack`): compiles src/, servers/ and lib/ into dist/ (JavaScript and
// .d.ts, with tsconfig.build.json), then copies next to the compiled code the plain files that it
// loads by path at run time (code-runner-child.js, sql-worker.js, any data file). dist/.build-stamp
// records when the build started; scripts/ensure.mjs rebuilds when a source is newer (isStale).
//
//   node scripts/build.mjs            clean build; fails on a type error
//   node scripts/build.mjs --if-stale build only when dist/ is missing or older than a source
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The folders compiled into dist/ (lib/ may not exist yet). */
const SOURCE_DIRS = ['src', 'servers', 'lib'];
/** Files whose change also makes dist/ stale. */
const BUILD_INPUTS = ['tsconfig.json', 'tsconfig.build.json', 'scripts/build.mjs'];
const STAMP = '.build-stamp';

/** Every file under `dir` (relative to `root`), skipping dot-entries; with `dirs`, the folders too. */
function walk(root, dir, { dirs = false } = {}, out = []) {
  if (!existsSync(join(root, dir))) return out;
  if (dirs) out.push(dir);
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    if (entry.name.startsWith('.')) continue;
    const rel = join(dir, entry.name);
    if (entry.isDirectory()) walk(root, rel, { dirs }, out);
    else if (entry.isFile()) out.push(rel);
  }
  return out;
}

/** Files that are not compiled but read by path at run time, so must sit next to the compiled code. */
function isAsset(file) {
  const ext = extname(file);
  return ext !== '.ts' && ext !== '.md' && !/\.test\.[cm]?js$/.test(file);
}

/** Why dist/ needs a build, or null when it is up to date. */
export function staleReason(root = ROOT) {
  const stamp = join(root, 'dist', STAMP);
  if (!existsSync(stamp)) return 'dist/ has not been built';
  const built = statSync(stamp).mtimeMs;
  // Folders count too: deleting or renaming a source changes its folder's mtime, and a deleted
  // source's compiled file must not linger in dist/.
  for (const file of [...SOURCE_DIRS.flatMap((d) => walk(root, d, { dirs: true })), ...BUILD_INPUTS]) {
    const abs = join(root, file);
    if (existsSync(abs) && statSync(abs).mtimeMs > built) return `${file} changed since the last build`;
  }
  return null;
}

/**
 * Builds dist/. With `strict` (the default), a type error fails the build; without it (the test and
 * start flows, where `tsc --noEmit` reports type errors on its own), the JavaScript is still
 * emitted but no stamp is written, so the next run builds again.
 */
export function build({ root = ROOT, strict = true, log = (m) => process.stderr.write(`[build] ${m}\n`) } = {}) {
  const started = Date.now();
  // Built into a fresh sibling folder, then swapped in by rename: a process running the old dist/
  // (a test starting the CLI, a concurrent build) never sees a half-written one.
  const final = join(root, 'dist');
  const dist = join(root, `dist.tmp-${process.pid}`);
  rmSync(dist, { recursive: true, force: true });
  const tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
  log('tsc -p tsconfig.build.json');
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', dist], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0 && (strict || !existsSync(dist))) {
    rmSync(dist, { recursive: true, force: true });
    throw new Error(`tsc -p tsconfig.build.json failed (exit ${r.status ?? r.signal})`);
  }

  let copied = 0;
  for (const file of SOURCE_DIRS.flatMap((d) => walk(root, d)).filter(isAsset)) {
    const target = join(dist, file);
    if (existsSync(target)) throw new Error(`${file} would overwrite the compiled ${relative(root, target)}`);
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(join(root, file), target);
    copied++;
  }
  log(`copied ${copied} asset file(s) into dist/`);
  if (r.status === 0) {
    const stamp = join(dist, STAMP);
    writeFileSync(stamp, `${new Date(started).toISOString()}\n`);
    utimesSync(stamp, started / 1000, started / 1000); // a source saved during the build stays newer
  }
  const old = join(root, `dist.old-${process.pid}`);
  if (existsSync(final)) renameSync(final, old);
  renameSync(dist, final);
  rmSync(old, { recursive: true, force: true });
  if (r.status !== 0) {
    log('type errors: JavaScript emitted anyway, dist/ stays marked stale');
    return false;
  }
  log(`dist/ built in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return true;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    const reason = process.argv.includes('--if-stale') ? staleReason() : 'requested';
    if (reason) build();
  } catch (err) {
    process.stderr.write(`[build] ${err.message}\n`);
    process.exit(1);
  }
}
