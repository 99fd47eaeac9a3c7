/**
 * Fixtures: a fresh copy of a third-party stdio server's state for every connection. A spec's
 * `fixtures` (`FixturesSchema`, src/tools/contracts.ts) names a file or directory to copy; each
 * connection gets a directory of its own under the system's temporary directory, holding a copy
 * of it (or nothing), and `{fixture}` in the spec's `args`, `env` values and `cwd` (and in
 * `fixtures.args` and `fixtures.env`) becomes that directory's path. `ToolClient` prepares the
 * directory when it connects and removes it when it closes (or when the connection fails): a
 * client per episode is a fresh state per episode, whatever the server keeps on disk.
 */
import { rmSync, statSync } from 'node:fs';
import { cp, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, isAbsolute, join, resolve } from 'node:path';
import type { StdioSpec } from './contracts.ts';

/** What is replaced by the per-connection fixture directory in `args`, `env` values and `cwd`. */
export const FIXTURE_PLACEHOLDER = '{fixture}';

/** A spec whose fixtures cannot be used; the message names the field (`fixtures.copy: ...`). */
export class FixtureError extends Error {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`Invalid server spec: ${field}: ${reason}`);
    this.name = 'FixtureError';
  }
}

/** The fields of a stdio spec that may hold the placeholder, with their values. */
function placeholderFields(spec: Pick<StdioSpec, 'args' | 'env' | 'cwd' | 'fixtures'>): [string, string][] {
  const out: [string, string][] = [];
  (spec.args ?? []).forEach((a, i) => out.push([`args[${i}]`, a]));
  for (const [k, v] of Object.entries(spec.env ?? {})) out.push([`env.${k}`, v]);
  if (spec.cwd !== undefined) out.push(['cwd', spec.cwd]);
  (spec.fixtures?.args ?? []).forEach((a, i) => out.push([`fixtures.args[${i}]`, a]));
  for (const [k, v] of Object.entries(spec.fixtures?.env ?? {})) out.push([`fixtures.env.${k}`, v]);
  return out;
}

/**
 * What is wrong with a stdio spec's fixtures, or undefined: `{fixture}` used without `fixtures`,
 * a `copy` that does not exist or is neither a file nor a directory. A relative `copy` is resolved
 * against `baseDir` (default: the working directory). Returns the spec with `copy` absolute.
 */
export function checkFixtures<S extends Pick<StdioSpec, 'args' | 'env' | 'cwd' | 'fixtures'>>(
  spec: S,
  baseDir = process.cwd(),
): { spec: S; problem?: { field: string; reason: string } } {
  if (!spec.fixtures) {
    const used = placeholderFields(spec).find(([, v]) => v.includes(FIXTURE_PLACEHOLDER));
    if (used)
      return {
        spec,
        problem: {
          field: used[0],
          reason: `uses ${FIXTURE_PLACEHOLDER}, but the spec has no fixtures (add "fixtures": {} for an empty directory per episode)`,
        },
      };
    return { spec };
  }
  const copy = spec.fixtures.copy;
  if (copy === undefined) return { spec };
  const abs = isAbsolute(copy) ? copy : resolve(baseDir, copy);
  let kind: string;
  try {
    const st = statSync(abs);
    kind = st.isDirectory() ? 'directory' : st.isFile() ? 'file' : 'other';
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return {
      spec,
      problem: { field: 'fixtures.copy', reason: code === 'ENOENT' ? `${abs} does not exist` : `cannot read ${abs} (${code ?? (err as Error).message})` },
    };
  }
  if (kind === 'other') return { spec, problem: { field: 'fixtures.copy', reason: `${abs} is neither a file nor a directory` } };
  return { spec: { ...spec, fixtures: { ...spec.fixtures, copy: abs } } };
}

/** How to start a stdio server: its spec's command line with the fixture directory filled in. */
export interface Launch {
  command: string;
  args: string[];
  env?: Record<string, string>;
  cwd?: string;
}

/** A connection's fixture directory and the command line that points the server at it. */
export interface Fixture {
  /** The per-connection directory (`{fixture}`). */
  dir: string;
  launch: Launch;
  /** Removes the directory (idempotent; never throws). */
  remove(): Promise<void>;
}

/** Directories made and not yet removed: removed when the process exits, whatever ended it. */
const live = new Set<string>();
let exitHook = false;

function track(dir: string): void {
  live.add(dir);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const d of live) {
      try {
        rmSync(d, { recursive: true, force: true });
      } catch {
        // Best effort: the process is ending.
      }
    }
  });
}

/**
 * Makes a fresh fixture directory for one connection of `spec` (copying `fixtures.copy` into it:
 * a directory's contents, or a file under its own name), and the command line with `{fixture}`
 * replaced. Undefined when the spec has no fixtures. Throws a `FixtureError` naming the field.
 */
export async function prepareFixture(spec: StdioSpec): Promise<Fixture | undefined> {
  const { spec: checked, problem } = checkFixtures(spec);
  if (problem) throw new FixtureError(problem.field, problem.reason);
  const fixtures = checked.fixtures;
  if (!fixtures) return undefined;
  const dir = await mkdtemp(join(tmpdir(), 'mcp-gym-fixture-'));
  track(dir);
  let removed: Promise<void> | undefined;
  const remove = () =>
    (removed ??= rm(dir, { recursive: true, force: true, maxRetries: 3 })
      .catch(() => {})
      .finally(() => live.delete(dir)));
  try {
    if (fixtures.copy !== undefined) {
      const src = fixtures.copy;
      const isDir = (await stat(src)).isDirectory();
      // Links are followed: a link copied as a link would let an episode write into the source.
      await cp(src, isDir ? dir : join(dir, basename(src)), { recursive: true, dereference: true, force: true, errorOnExist: false });
    }
  } catch (err) {
    await remove();
    const e = err as NodeJS.ErrnoException;
    throw new FixtureError(
      'fixtures.copy',
      `cannot copy ${fixtures.copy} into ${dir}: ${e.code ?? e.message}${e.path && e.path !== fixtures.copy ? ` (${e.path})` : ''}`,
    );
  }
  const fill = (s: string) => s.split(FIXTURE_PLACEHOLDER).join(dir);
  const fillAll = (env: Record<string, string> | undefined) => (env ? Object.fromEntries(Object.entries(env).map(([k, v]) => [k, fill(v)])) : undefined);
  const env = spec.env || fixtures.env ? { ...fillAll(spec.env), ...fillAll(fixtures.env) } : undefined;
  return {
    dir,
    launch: {
      command: spec.command,
      args: [...spec.args, ...(fixtures.args ?? [])].map(fill),
      ...(env ? { env } : {}),
      ...(spec.cwd !== undefined ? { cwd: fill(spec.cwd) } : {}),
    },
    remove,
  };
}
