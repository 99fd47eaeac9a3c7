#!/usr/bin/env node
// BFCL's virtual environment (.venv-bfcl at the project's root): bfcl-eval 2026.3.23, used
// unmodified by import, without its declared dependencies (sentence-transformers, faiss, torch and
// a pinned numpy serve only the memory and web-search categories, which mcp-gym leaves out), plus
// what its data, checkers, CLI and model handlers import and the Python MCP SDK: every package
// pinned with its wheel's sha256 by bfcl/requirements.lock (bfcl/lock.py regenerates it).
// Created when missing, recreated when the lock changed (its hash is kept in the venv), installed
// with `pip install --no-deps --require-hashes`, then checked: both checkers import, and every file
// of the installed bfcl-eval matches the sha256 its dist-info RECORD gives (verifyBfclInstall).
//
//   node scripts/bfcl-venv.mjs                  ensure the venv, verify it, print its python
//   node scripts/bfcl-venv.mjs --download DIR   fill DIR with the lock's wheels (for offline installs)
//
// Environment: MCP_GYM_BFCL_PYTHON names another Python that has the packages (nothing is created;
// it is still verified); MCP_GYM_BFCL_WHEELS=DIR installs offline from DIR (--no-index
// --find-links DIR; fill it with --download). pip's own PIP_FIND_LINKS / PIP_NO_INDEX work too.
// bfcl_eval creates result/, score/ and .file_locks/ under BFCL_PROJECT_ROOT when imported (by
// default inside site-packages): run it with bfclEnv(root)'s variables.
// Node's built-ins only: scripts/ensure.mjs runs it before the npm install.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const LOCK_STAMP = '.mcp-gym-lock';
const VERIFIED_STAMP = '.mcp-gym-bfcl-verified.json';
const TAMPERED = 'bfcl-eval is tampered with or incomplete';
const CHECK_IMPORTS =
  'from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker\n' +
  'from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker\n' +
  'from bfcl_eval.eval_checker import eval_runner\n';
// Where the interpreter finds bfcl-eval's metadata and its package, without importing it (an
// import creates BFCL_PROJECT_ROOT's directories).
const LOCATE = [
  'import importlib.metadata as m, importlib.util as u, json',
  "d = m.distribution('bfcl-eval')",
  "s = u.find_spec('bfcl_eval')",
  "print(json.dumps({'version': d.version, 'site': str(d.locate_file('')), 'origin': s.origin if s else None}))",
].join('\n');

export const bfclLockFile = (root = ROOT) => join(root, 'bfcl', 'requirements.lock');
export const bfclVenvDir = (root = ROOT) => join(root, '.venv-bfcl');
/** The venv's interpreter (whether or not it exists yet). */
export const bfclVenvPython = (root = ROOT) => join(bfclVenvDir(root), 'bin', 'python');
/** The interpreter to run BFCL with: MCP_GYM_BFCL_PYTHON when set, else the venv's. */
export const bfclPython = (root = ROOT) => process.env.MCP_GYM_BFCL_PYTHON || bfclVenvPython(root);

/**
 * The environment variables to run bfcl_eval with: BFCL_PROJECT_ROOT, a writable scratch
 * directory (<root>/.cache/bfcl/project, created) for the result/, score/ and .file_locks/
 * directories bfcl_eval makes when imported (by default it would write into site-packages).
 */
export function bfclEnv(root = ROOT) {
  const dir = join(root, '.cache', 'bfcl', 'project');
  mkdirSync(dir, { recursive: true });
  return { BFCL_PROJECT_ROOT: dir };
}

function lockHash(root) {
  return createHash('sha256')
    .update(readFileSync(bfclLockFile(root)))
    .digest('hex')
    .slice(0, 16);
}

/** The bfcl-eval version bfcl/requirements.lock pins. */
export function lockedBfclVersion(root = ROOT) {
  const m = /^bfcl-eval==(\S+)/m.exec(readFileSync(bfclLockFile(root), 'utf8'));
  if (!m) throw new Error(`${bfclLockFile(root)} pins no bfcl-eval`);
  return m[1];
}

/** Why .venv-bfcl must be (re)built, or undefined when it is up to date. */
export function bfclVenvStale(root = ROOT) {
  const stamp = join(bfclVenvDir(root), LOCK_STAMP);
  if (!existsSync(bfclVenvPython(root))) return 'missing';
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8').trim() !== lockHash(root)) return 'bfcl/requirements.lock changed';
  return undefined;
}

const lastLine = (s) =>
  String(s ?? '')
    .trim()
    .split('\n')
    .pop();

/** pip's extra arguments for an offline install from MCP_GYM_BFCL_WHEELS. */
function offlineArgs() {
  const dir = process.env.MCP_GYM_BFCL_WHEELS;
  if (!dir) return [];
  if (!existsSync(dir)) throw new Error(`MCP_GYM_BFCL_WHEELS=${dir} does not exist (fill it with: node scripts/bfcl-venv.mjs --download ${dir})`);
  return ['--no-index', '--find-links', resolve(dir)];
}

/**
 * Creates .venv-bfcl when missing or when bfcl/requirements.lock changed, then verifies it (or
 * the Python MCP_GYM_BFCL_PYTHON names, which is never created). Returns the interpreter to use.
 * Throws when the install, the checkers' import or the tamper check fails.
 */
export function ensureBfclVenv({ root = ROOT, log = () => {}, basePython = '/usr/bin/python3' } = {}) {
  if (process.env.MCP_GYM_BFCL_PYTHON) {
    const python = process.env.MCP_GYM_BFCL_PYTHON;
    verifyBfclInstall(python);
    return python;
  }
  const why = bfclVenvStale(root);
  const python = bfclVenvPython(root);
  if (why) {
    const dir = bfclVenvDir(root);
    const offline = offlineArgs();
    log(`BFCL venv ${dir}: ${why}; installing bfcl/requirements.lock${offline.length ? ` from ${offline[2]}` : ''} (about a minute, 0.56 GB)`);
    const t0 = Date.now();
    rmSync(dir, { recursive: true, force: true });
    execFileSync(basePython, ['-m', 'venv', dir], { stdio: ['ignore', 'inherit', 'inherit'] });
    const pip = spawnSync(
      python,
      [
        '-m',
        'pip',
        'install',
        '--quiet',
        '--no-cache-dir',
        '--disable-pip-version-check',
        '--no-deps',
        '--require-hashes',
        '--only-binary',
        ':all:',
        ...offline,
        '-r',
        bfclLockFile(root),
      ],
      { stdio: ['ignore', 'inherit', 'inherit'] },
    );
    if (pip.status !== 0) throw new Error(`installing bfcl/requirements.lock into ${dir} failed (pip exit ${pip.status ?? pip.signal})`);
    const check = spawnSync(python, ['-c', CHECK_IMPORTS], { encoding: 'utf8', env: { ...process.env, ...bfclEnv(root) } });
    if (check.status !== 0) throw new Error(`the BFCL venv ${dir} cannot import bfcl-eval's checkers: ${lastLine(check.stderr)}`);
    verifyBfclInstall(python);
    writeFileSync(join(dir, LOCK_STAMP), lockHash(root) + '\n');
    log(`BFCL venv ready in ${Math.round((Date.now() - t0) / 1000)} s`);
  } else {
    try {
      verifyBfclInstall(python);
    } catch (err) {
      throw new Error(`${err.message}\n(remove ${bfclVenvDir(root)} and run node scripts/bfcl-venv.mjs to reinstall it)`);
    }
  }
  return python;
}

/** RECORD's rows (a CSV file: path, hash, size). */
function parseRecord(text) {
  const rows = [];
  for (const line of text.split(/\r?\n/)) {
    if (!line) continue;
    const cells = [];
    let cell = '';
    let quoted = false;
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quoted && c === '"' && line[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') {
        quoted = !quoted;
      } else if (c === ',' && !quoted) {
        cells.push(cell);
        cell = '';
      } else {
        cell += c;
      }
    }
    cells.push(cell);
    rows.push({ path: cells[0], hash: cells[1] ?? '', size: cells[2] ?? '' });
  }
  return rows;
}

/** Files under dir (relative to base, '/'-separated), __pycache__ directories left out. */
function walk(dir, base, out = []) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== '__pycache__') walk(p, base, out);
    } else out.push(relative(base, p).split(sep).join('/'));
  }
  return out;
}

function distInfoIn(site) {
  const found = existsSync(site) ? readdirSync(site).filter((n) => /^bfcl_eval-[^-]+\.dist-info$/i.test(n)) : [];
  if (found.length === 0) throw new Error(`${TAMPERED}: no bfcl_eval-*.dist-info in ${site}`);
  if (found.length > 1) throw new Error(`${TAMPERED}: several bfcl-eval installs in ${site}: ${found.join(', ')}`);
  return join(site, found[0]);
}

/** The files a check covers: RECORD's rows inside site-packages that carry a sha256 (the bin/ script pip wrote and .pyc files have none, or lie outside). */
function checkedRows(site, distInfo) {
  const recordFile = join(distInfo, 'RECORD');
  if (!existsSync(recordFile)) throw new Error(`${TAMPERED}: ${relative(site, recordFile)} is missing`);
  const rows = parseRecord(readFileSync(recordFile, 'utf8')).filter((r) => r.hash && !r.path.startsWith('../') && !r.path.startsWith('/'));
  return { recordFile, rows };
}

function statKey(file) {
  const s = statSync(file);
  return `${s.size}:${s.mtimeMs}`;
}

/**
 * The full check: every file RECORD lists (inside site-packages) exists with the sha256 and size
 * RECORD gives, RECORD lists bfcl_eval's data, and bfcl_eval/ holds no file RECORD does not list
 * (__pycache__ aside). Returns the stat keys of what it checked, for the stamp.
 */
function fullCheck(site, distInfo) {
  const { recordFile, rows } = checkedRows(site, distInfo);
  const problems = [];
  const stats = {};
  for (const { path: rel, hash, size } of rows) {
    const file = join(site, rel);
    const [algo, want] = hash.split('=', 2);
    if (!existsSync(file)) {
      problems.push(`${rel} is missing`);
      continue;
    }
    if (algo !== 'sha256') {
      problems.push(`${rel} has a ${algo} hash in RECORD, not sha256`);
      continue;
    }
    const data = readFileSync(file);
    const got = createHash('sha256').update(data).digest('base64url');
    if (got !== want) problems.push(`${rel} does not match its RECORD hash (sha256=${want}, found sha256=${got})`);
    else if (size && Number(size) !== data.length) problems.push(`${rel} has ${data.length} bytes, RECORD says ${size}`);
    stats[rel] = statKey(file);
  }
  if (!rows.some((r) => r.path.startsWith('bfcl_eval/data/'))) problems.push(`${relative(site, recordFile)} lists no bfcl_eval/data/ file`);
  const listed = new Set(rows.map((r) => r.path));
  const pkg = join(site, 'bfcl_eval');
  if (existsSync(pkg)) for (const rel of walk(pkg, site)) if (!listed.has(rel)) problems.push(`${rel} is not in the wheel's RECORD`);
  if (problems.length) {
    const more = problems.length > 5 ? ` (and ${problems.length - 5} more)` : '';
    throw new Error(`${TAMPERED}: ${problems.slice(0, 5).join('; ')}${more} [${distInfo}]`);
  }
  return { recordFile, files: rows.length, stats };
}

/** Whether the stamp still describes site-packages: the same RECORD (mtime, size), the same stat of every file checked, no file added to bfcl_eval/. */
function stampHolds(stamp, site, distInfo) {
  try {
    if (stamp.distInfo !== distInfo || stamp.record !== statKey(join(distInfo, 'RECORD'))) return false;
    for (const [rel, key] of Object.entries(stamp.stats)) if (statKey(join(site, rel)) !== key) return false;
    const known = new Set(Object.keys(stamp.stats));
    return walk(join(site, 'bfcl_eval'), site).every((rel) => known.has(rel));
  } catch {
    return false;
  }
}

/** Where a verified result for this interpreter is cached: in its venv when it has one, else under the temporary directory. */
function defaultStamp(python) {
  const venv = dirname(dirname(python));
  if (existsSync(join(venv, 'pyvenv.cfg'))) return join(venv, VERIFIED_STAMP);
  const id = createHash('sha256').update(resolve(python)).digest('hex').slice(0, 16);
  return join(tmpdir(), `mcp-gym-bfcl-verified-${process.getuid?.() ?? 'u'}-${id}.json`);
}

/**
 * Checks that the bfcl-eval `python` imports is the locked version and that every file of it
 * matches the sha256 its dist-info RECORD gives (a missing or changed file, or one added to
 * bfcl_eval/, throws "bfcl-eval is tampered with or incomplete: <file> ..."). Fast when nothing
 * changed since the last check: the result is cached in a stamp (RECORD's mtime and size and
 * those of every file checked), and then no Python starts.
 * `sitePackages` checks that directory instead of asking `python` (no stamp unless `stamp` is
 * given); `stamp: false` turns the cache off.
 * Returns { sitePackages, distInfo, files, cached }.
 */
export function verifyBfclInstall(python, { sitePackages, stamp, root = ROOT } = {}) {
  const stampFile = stamp === false ? undefined : (stamp ?? (sitePackages ? undefined : defaultStamp(python)));
  let site = sitePackages && resolve(sitePackages);
  let cached;
  if (stampFile && existsSync(stampFile)) {
    try {
      cached = JSON.parse(readFileSync(stampFile, 'utf8'));
    } catch {
      cached = undefined;
    }
  }
  const want = lockedBfclVersion(root);
  if (
    cached &&
    cached.version === want &&
    (sitePackages ? cached.site === site : cached.python === python) &&
    stampHolds(cached, cached.site, cached.distInfo)
  ) {
    return { sitePackages: cached.site, distInfo: cached.distInfo, files: Object.keys(cached.stats).length, cached: true };
  }
  if (!site) {
    const r = spawnSync(python, ['-c', LOCATE], { encoding: 'utf8' });
    if (r.error) throw new Error(`cannot run ${python}: ${r.error.message}`);
    if (r.status !== 0) throw new Error(`bfcl-eval is not installed for ${python}: ${lastLine(r.stderr)}`);
    const where = JSON.parse(lastLine(r.stdout));
    if (where.version !== want) throw new Error(`${python} has bfcl-eval ${where.version}; bfcl/requirements.lock pins ${want}`);
    site = realpathSync(where.site);
    const pkg = join(site, 'bfcl_eval');
    if (!where.origin || realpathSync(dirname(where.origin)) !== realpathSync(existsSync(pkg) ? pkg : site))
      throw new Error(`${python} imports bfcl_eval from ${where.origin}, not from the installed ${pkg}`);
  }
  const distInfo = distInfoIn(site);
  const installed = /^bfcl_eval-([^-]+)\.dist-info$/i.exec(basename(distInfo))[1];
  if (installed !== want) throw new Error(`${site} has bfcl-eval ${installed}; bfcl/requirements.lock pins ${want}`);
  const { recordFile, files, stats } = fullCheck(site, distInfo);
  if (stampFile) {
    try {
      writeFileSync(stampFile, JSON.stringify({ python, version: want, site, distInfo, record: statKey(recordFile), stats }) + '\n');
    } catch {
      // A read-only place: no cache, the next check is a full one.
    }
  }
  return { sitePackages: site, distInfo, files, cached: false };
}

/**
 * Fills `dir` with the lock's wheels (pip download --require-hashes, for CPython 3.11 on Linux
 * x86_64 whatever this machine is), for MCP_GYM_BFCL_WHEELS=dir installs without the index.
 */
export function downloadBfclWheels({ root = ROOT, dir, log = () => {}, basePython = '/usr/bin/python3' }) {
  const lock = readFileSync(bfclLockFile(root), 'utf8');
  const wheels = [...lock.matchAll(/^\s*#\s*(\S+\.whl)\s*$/gm)].map((m) => m[1]);
  // The platform tags of the wheels the lock names (a wheel's name ends -<platform tags>.whl).
  const platforms = new Set(wheels.flatMap((w) => w.slice(0, -4).split('-').pop().split('.')).filter((p) => p !== 'any'));
  // A pip: the venv's when there is one, else the base Python's, else a throwaway venv's.
  let python = existsSync(bfclVenvPython(root)) ? bfclVenvPython(root) : basePython;
  let scratch;
  if (spawnSync(python, ['-m', 'pip', '--version'], { stdio: 'ignore' }).status !== 0) {
    scratch = mkdtempSync(join(tmpdir(), 'bfcl-pip-'));
    execFileSync(basePython, ['-m', 'venv', scratch], { stdio: ['ignore', 'inherit', 'inherit'] });
    python = join(scratch, 'bin', 'python');
  }
  mkdirSync(dir, { recursive: true });
  log(`downloading the wheels of bfcl/requirements.lock into ${dir}`);
  try {
    const args = ['-m', 'pip', 'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--require-hashes', '--only-binary', ':all:'];
    args.push('--implementation', 'cp', '--python-version', '3.11', '--abi', 'cp311', ...[...platforms].flatMap((p) => ['--platform', p]));
    args.push('--dest', resolve(dir), '-r', bfclLockFile(root));
    const r = spawnSync(python, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) throw new Error(`pip download of bfcl/requirements.lock failed (exit ${r.status ?? r.signal})`);
  } finally {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  }
  const have = new Set(readdirSync(dir));
  const missing = wheels.filter((f) => !have.has(f));
  if (missing.length) throw new Error(`pip download left out ${missing.length} of the lock's wheels: ${missing.slice(0, 5).join(', ')}`);
  return wheels.length;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const log = (m) => process.stderr.write(`[bfcl-venv] ${m}\n`);
  const basePython = process.env.MCP_GYM_PYTHON ?? '/usr/bin/python3';
  try {
    const i = process.argv.indexOf('--download');
    if (i >= 0) {
      const dir = process.argv[i + 1];
      if (!dir) throw new Error('usage: node scripts/bfcl-venv.mjs --download DIR');
      const n = downloadBfclWheels({ dir, log, basePython });
      log(`${n} wheels in ${resolve(dir)}; install offline with MCP_GYM_BFCL_WHEELS=${resolve(dir)} node scripts/bfcl-venv.mjs`);
    } else {
      process.stdout.write(ensureBfclVenv({ log, basePython }) + '\n');
    }
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
