// The learner's virtual environment for Hugging Face models (.venv at the project's root):
// torch, transformers, peft, safetensors, onnx, jsonschema and pytest, every version pinned by
// learner/requirements.lock (the hf, onnx and test extras of learner/pyproject.toml, resolved).
// Created when missing, recreated when the lock file changed (its hash is kept in the venv).
// Debian's python3-torch (1.13) stays the embedded model's learner: transformers releases that
// know Qwen3 need torch >= 2.1, and the registry's torch wheel is the CUDA build (5.7 GB with
// its nvidia-* libraries, which it needs to import even on a CPU).
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const venvDir = (root) => join(root, '.venv');
export const venvPython = (root) => join(venvDir(root), 'bin', 'python');

function lockHash(root) {
  return createHash('sha256')
    .update(readFileSync(join(root, 'learner', 'requirements.lock')))
    .digest('hex')
    .slice(0, 16);
}

/** Why the venv must be (re)built, or undefined when it is up to date. */
export function venvStale(root) {
  const stamp = join(venvDir(root), '.mcp-gym-lock');
  if (!existsSync(venvPython(root))) return 'missing';
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8').trim() !== lockHash(root)) return 'learner/requirements.lock changed';
  return undefined;
}

export function ensureVenv({ root, log, basePython = '/usr/bin/python3' }) {
  const why = venvStale(root);
  if (!why) return false;
  const dir = venvDir(root);
  log(`learner venv ${dir}: ${why}; installing learner/requirements.lock (about 2 minutes, 5.7 GB)`);
  const t0 = Date.now();
  rmSync(dir, { recursive: true, force: true });
  execFileSync(basePython, ['-m', 'venv', dir], { stdio: ['ignore', 'inherit', 'inherit'] });
  execFileSync(
    venvPython(root),
    ['-m', 'pip', 'install', '--quiet', '--no-cache-dir', '--disable-pip-version-check', '-r', join(root, 'learner', 'requirements.lock')],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  const check = spawnSync(venvPython(root), ['-c', 'import torch, transformers, peft, safetensors, onnx, jsonschema, pytest, gguf'], { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`the learner venv ${dir} cannot import its packages: ${check.stderr.trim().split('\n').pop()}`);
  writeFileSync(join(dir, '.mcp-gym-lock'), lockHash(root) + '\n');
  log(`learner venv ready in ${Math.round((Date.now() - t0) / 1000)} s`);
  return true;
}
