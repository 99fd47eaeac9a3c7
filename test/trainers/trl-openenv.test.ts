/**
 * TRL trains on mcp-gym through OpenEnv: examples/trl_openenv.py runs TRL's GRPOTrainer (trl 1.16.0,
 * learner/requirements-trl.lock) on a tiny random Qwen3 (a real architecture, the Qwen3 tokenizer)
 * against a serve-env server, its reward the server's episodes' (checks on the answer and on the kv
 * server's state, the composer's correctness). The tasks' answer check is one the random model passes
 * about half the time (a run of four Cyrillic letters), so that GRPO's groups have a signal; the test
 * checks that TRL's logged rewards are the server's, that the weights changed, and measures the same
 * task set's success with `mcp-gym eval` before and after.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Environment, type Trajectory } from '../../src/env/index.ts';
import { startEnvServer, type EnvServer } from '../../src/env/openenv/server.ts';
import { loadTasks } from '../../src/env/task.ts';
import { ensureTrlPackages } from '../../src/trainers/venv-packages.ts';
import { makeTinyCheckpoints } from '../helpers/hf-fixtures.ts';
import { ROOT, runCli } from '../helpers.ts';

const venv = existsSync(join(ROOT, '.venv', 'bin', 'python'));
const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-trl-'));
const taskFile = join(dir, 'tasks.jsonl');
writeFileSync(
  taskFile,
  Array.from({ length: 8 }, (_, i) =>
    JSON.stringify({
      id: `store-${i}`,
      split: 'eval',
      difficulty: 1,
      prompt: `Store the value ${i} under the key k${i}, then say done.`,
      servers: { kv: 'kv' },
      max_turns: 3,
      checks: [
        { kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: `k${i}` } }, path: 'value', expect: { kind: 'equals', value: String(i) } },
        { kind: 'answer', expect: { kind: 'regex', value: '[\\u0400-\\u04ff]{4}' } },
      ],
      solution: { calls: [{ server: 'kv', tool: 'set', arguments: { key: `k${i}`, value: String(i) } }], answer: 'Готово' },
    }),
  ).join('\n') + '\n',
);
const env = new Environment({ reward: 'composer' });
const played: Trajectory[] = [];
let server: EnvServer;
let python = '';
let model = '';

beforeAll(async () => {
  if (!venv) return;
  python = ensureTrlPackages();
  model = makeTinyCheckpoints([{ name: 'trl-qwen3', family: 'qwen3' }])['trl-qwen3']!;
  server = await startEnvServer({ env, tasks: loadTasks(taskFile), name: 'mcp-gym:store', onTrajectory: (t) => played.push(t) });
}, 900_000);
afterAll(async () => {
  await server?.close();
  await env.close();
});

async function evalSuccess(modelDir: string, out: string): Promise<number> {
  const r = await runCli(['eval', '--tasks', taskFile, '--model', modelDir, '-k', '2', '--reward', 'composer', '--out', out, '--json']);
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { pass_at_1: { mean: number } }).pass_at_1.mean;
}

describe.skipIf(!venv)("TRL's GRPOTrainer on serve-env", () => {
  it('trains a tiny Qwen3 for 3 steps on mcp-gym rewards; eval measures the task set before and after', async () => {
    const before = await evalSuccess(model, join(dir, 'eval-before'));
    const out = join(dir, 'trained');
    const { stdout } = await promisify(execFile)(
      python,
      [
        join(ROOT, 'examples', 'trl_openenv.py'),
        '--url',
        server.url,
        '--model',
        model,
        '--out',
        out,
        '--steps',
        '3',
        '--batch-size',
        '4',
        '--num-generations',
        '4',
        '--max-completion-length',
        '48',
        '--lr',
        '1e-3',
      ],
      { encoding: 'utf8', timeout: 600_000, maxBuffer: 64 * 2 ** 20 },
    );
    const r = JSON.parse(stdout.trim().split('\n').at(-1)!) as {
      steps: number;
      step_rewards: number[];
      episodes: number;
      tensors_changed: number;
      tensors: number;
    };
    expect(r.steps).toBe(3);
    expect(r.episodes).toBe(12);
    // TRL's rewards are the server's: the mean of its 12 answered episodes, each 0, 0.5 or 1 (composer: the checks' fraction)
    // (the probe session's episode, closed before its first turn, has no turn)
    const rewards = played.filter((t) => t.turns.length > 0).map((t) => t.reward);
    expect(rewards).toHaveLength(12);
    for (const x of rewards) expect([0, 0.5, 1]).toContain(x);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(mean(r.step_rewards)).toBeCloseTo(mean(rewards), 5);
    expect(new Set(rewards).size).toBeGreaterThan(1);
    expect(r.tensors_changed).toBeGreaterThan(0);
    const after = await evalSuccess(out, join(dir, 'eval-after'));
    console.log(
      `TRL GRPOTrainer on serve-env: 3 steps, step rewards ${r.step_rewards.map((x) => x.toFixed(3)).join(' ')}, ${r.tensors_changed} of ${r.tensors} tensors changed; mcp-gym eval success before ${before}, after ${after}`,
    );
    expect(after).toBeGreaterThanOrEqual(0);
  }, 900_000);
});
