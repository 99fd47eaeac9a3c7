/**
 * The ONNX export the rollout side samples a Hugging Face checkpoint with (`<dir>/onnx/`, written
 * by the learner: learner/mcp_gym_learner/hf_export.py). A run's learner re-exports after each
 * step; for a checkpoint given to `rollout`, `eval` or `serve-policy`, `ensureHfOnnx` exports it
 * when the export is missing or older than the weights (model*.safetensors, adapter/).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { isHfModelDir, learnerPython, LEARNER_DIR } from './learner-client.ts';

/** Why `dir`'s ONNX export must be (re)made, or undefined when it is current (or `dir` is not a Hugging Face checkpoint). */
export function hfOnnxStale(dir: string): string | undefined {
  if (!isHfModelDir(dir)) return undefined;
  const stamp = join(dir, 'onnx', 'config.json');
  if (!existsSync(stamp)) return 'no ONNX export yet';
  try {
    if ((JSON.parse(readFileSync(stamp, 'utf8')) as { prefix?: unknown }).prefix !== true) return 'an older export, without the shared-prefix inputs';
  } catch {
    return `${stamp} is not valid JSON`;
  }
  const exported = statSync(stamp).mtimeMs;
  const weights = readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .map((f) => join(dir, f));
  const adapter = join(dir, 'adapter', 'adapter_model.safetensors');
  if (existsSync(adapter)) weights.push(adapter);
  const newer = weights.find((f) => statSync(f).mtimeMs > exported);
  return newer ? `${newer} is newer than the export` : undefined;
}

/** Exports `dir` to ONNX with the learner's venv when it is missing or stale; returns whether it exported. */
export function ensureHfOnnx(dir: string, log: (line: string) => void = () => {}): boolean {
  const why = hfOnnxStale(dir);
  if (!why) return false;
  log(`exporting ${dir} to ONNX for sampling (${why})`);
  const r = spawnSync(learnerPython({ hf: true }), ['-m', 'mcp_gym_learner.hf_export', '--model-dir', dir], {
    cwd: LEARNER_DIR,
    env: { ...process.env, PYTHONPATH: LEARNER_DIR },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0)
    throw new Error(
      `the ONNX export of ${dir} failed (${r.error?.message ?? `exit ${r.status}`}): ${(r.stderr ?? '').trim().split('\n').slice(-5).join('\n')}`,
    );
  return true;
}
