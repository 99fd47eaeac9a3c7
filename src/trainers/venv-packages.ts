/**
 * Optional Python packages installed into the learner's venv (.venv) the first time something needs
 * them, from a lock file of exact pins next to learner/requirements.lock: the experiment trackers'
 * clients (requirements-trackers.lock) and OpenEnv's (requirements-openenv.lock).
 */
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { LEARNER_DIR } from '../paths.ts';
import { learnerPython } from './learner-client.ts';
import { StartFailure } from '../../lib/index.ts';

export const OPENENV_LOCK = join(LEARNER_DIR, 'requirements-openenv.lock');

/**
 * Installs `lock` into the learner's venv when one of `modules` does not import there; returns the
 * venv's Python. Throws StartFailure with pip's last lines when the install fails.
 */
export function ensureVenvPackages(modules: string[], lock: string, what: string, log: (line: string) => void = () => {}): string {
  const python = learnerPython({ hf: true });
  const missing = () => modules.filter((m) => spawnSync(python, ['-c', `import ${m}`], { stdio: 'ignore' }).status !== 0);
  if (missing().length === 0) return python;
  // One pip at a time in the venv: two processes installing at once break each other's files.
  const release = lockVenv(join(dirname(dirname(python)), '.mcp-gym-pip.lock'));
  try {
    const still = missing(); // installed meanwhile by the process that held the lock?
    if (still.length === 0) return python;
    log(`installing ${what} (${still.join(', ')}) into the learner's venv (${lock}; once, about a minute)`);
    const r = spawnSync(python, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '-r', lock], { encoding: 'utf8' });
    if (r.status !== 0)
      throw new StartFailure(
        `could not install ${what} (${python} -m pip install -r ${lock}): ${(r.stderr || r.stdout || String(r.error)).trim().split('\n').slice(-6).join('\n')}`,
      );
    return python;
  } finally {
    release();
  }
}

/** Takes `file` as a lock (created exclusively; one older than 20 minutes is a crashed holder's, taken over); returns its release. */
function lockVenv(file: string): () => void {
  const limit = 20 * 60_000;
  const deadline = Date.now() + limit;
  for (;;) {
    try {
      closeSync(openSync(file, 'wx'));
      return () => rmSync(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    try {
      if (Date.now() - statSync(file).mtimeMs > limit) rmSync(file, { force: true });
    } catch {
      // released meanwhile
    }
    if (Date.now() > deadline) throw new StartFailure(`another process has held ${file} (installing into the learner's venv) for 20 minutes`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500); // a synchronous sleep of 0.5 s
  }
}

/** openenv-core in the learner's venv (its Python returned). */
export function ensureOpenEnvPackages(log?: (line: string) => void): string {
  return ensureVenvPackages(['openenv'], OPENENV_LOCK, "OpenEnv's client (openenv-core)", log);
}

export const TRL_LOCK = join(LEARNER_DIR, 'requirements-trl.lock');

/** TRL and openenv-core in the learner's venv, for examples/trl_openenv.py (its Python returned). */
export function ensureTrlPackages(log?: (line: string) => void): string {
  ensureOpenEnvPackages(log);
  return ensureVenvPackages(['trl', 'datasets'], TRL_LOCK, 'TRL (trl, datasets)', log);
}
