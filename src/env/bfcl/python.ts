/**
 * BFCL's Python: the interpreter of `.venv-bfcl` (bfcl-eval 2026.3.23 and what its data, checkers
 * and backends import, from bfcl/requirements.lock; made by `node scripts/bfcl-venv.mjs`, which
 * `npm start` and `npm test` run), or the one `MCP_GYM_BFCL_PYTHON` names; and the environment
 * every BFCL process of ours gets (its package on PYTHONPATH, a writable BFCL_PROJECT_ROOT).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../../paths.ts';

/** The BFCL release the tasks, tools and verdicts come from. */
export const BFCL_VERSION = '2026.3.23';

/** Where exported entries and BFCL's scratch files go (`MCP_GYM_BFCL_CACHE` overrides). */
export function bfclCacheDir(): string {
  const dir = process.env.MCP_GYM_BFCL_CACHE ?? join(PACKAGE_ROOT, '.cache', 'bfcl');
  mkdirSync(dir, { recursive: true });
  return dir;
}

export class BfclMissingError extends Error {
  override name = 'BfclMissingError';
}

let checked: string | undefined;

/**
 * The Python that has bfcl-eval, checked once per process: `node scripts/bfcl-venv.mjs` makes
 * `.venv-bfcl` when it is missing or its lock changed (about a minute, once), and verifies every
 * file of the installed bfcl-eval against its RECORD (a tampered or incomplete download is refused,
 * naming the file). `MCP_GYM_BFCL_PYTHON` names another Python instead (verified the same way).
 */
export function bfclPython(): string {
  if (checked) return checked;
  const named = process.env.MCP_GYM_BFCL_PYTHON;
  if (named && !existsSync(named)) throw new BfclMissingError(`MCP_GYM_BFCL_PYTHON names ${named}, which does not exist`);
  const script = join(PACKAGE_ROOT, 'scripts', 'bfcl-venv.mjs');
  if (!existsSync(script)) {
    // An installed package has no scripts/: the Python is the user's (made from bfcl/requirements.lock, docs/bfcl.md).
    const python = named ?? join(PACKAGE_ROOT, '.venv-bfcl', 'bin', 'python');
    if (!existsSync(python))
      throw new BfclMissingError(
        `BFCL's Python environment is missing: make one with \`python3 -m venv V && V/bin/pip install --no-deps --require-hashes -r ${join(PACKAGE_ROOT, 'bfcl', 'requirements.lock')}\` and set MCP_GYM_BFCL_PYTHON=V/bin/python (docs/bfcl.md)`,
      );
    checked = python;
    return python;
  }
  const r = spawnSync(process.execPath, [script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) {
    const why = (r.stderr || r.error?.message || '').trim().split('\n').slice(-4).join('\n');
    throw new BfclMissingError(`BFCL's Python environment is not usable: ${why || `scripts/bfcl-venv.mjs exited ${r.status}`} (docs/bfcl.md)`);
  }
  const python = r.stdout.trim().split('\n').pop()!;
  if (!python || !existsSync(python)) throw new BfclMissingError(`scripts/bfcl-venv.mjs printed no Python (${r.stdout.trim().slice(-200)})`);
  checked = python;
  return python;
}

/** The environment of a BFCL process: our package on PYTHONPATH, BFCL's project root in the cache, no API key of the user's. */
export function bfclEnv(): NodeJS.ProcessEnv {
  const project = join(bfclCacheDir(), 'project');
  mkdirSync(project, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: join(PACKAGE_ROOT, 'bfcl'), BFCL_PROJECT_ROOT: project, PYTHONUNBUFFERED: '1' };
  // BFCL's decoding handler builds an OpenAI client; mcp_gym_bfcl gives it a stand-in key. A real one never reaches it.
  delete env.OPENAI_API_KEY;
  delete env.ANTHROPIC_API_KEY;
  return env;
}
