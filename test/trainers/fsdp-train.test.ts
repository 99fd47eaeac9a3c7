/**
 * `train` with the learner under torchrun with FSDP2 (learner_procs 2, learner_parallel fsdp: 2 gloo
 * ranks on the CPU) on a tiny Hugging Face Qwen3 sampled in-process: the library path the flags
 * `--learner-procs 2 --learner-parallel fsdp` take.
 *
 * - full fine-tuning, 2 steps: the learner reports 2 ranks; its first step's loss figures equal a
 *   one-process run's on the same rollouts (same seed, same weights: the same samples); the importance
 *   ratios are 1, so the ONNX export rank 0 writes from the gathered shards holds the trained weights
 *   (the sampler's logprobs of step 2 are the learner's); the weights change.
 * - LoRA rank 4, 1 step, through a learner started by torchrun itself (`serve --http --fsdp`, as
 *   on each node of a cluster) and given as a URL with learner_shared_fs (it writes the run's paths):
 *   a trained adapter (lora_B not zero), the base weights byte-identical.
 *
 * Needs the learner's venv with torch >= 2.6 (FSDP2); without it the file is skipped.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { RewardFn } from '../../src/env/index.ts';
import { train } from '../../src/trainers/index.ts';
import { HAVE_HF_PY, HF_PY, hfPython, makeTinyCheckpoints, REPO } from '../helpers/hf-fixtures.ts';

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const rows = <T>(file: string) =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);

/** A reward that differs within a group of a random model's episodes: the share of even code points in its turns' text. */
const evenShare: RewardFn = (e) => {
  const codes = [...e.turns.map((u) => u.action.content).join('')].map((c) => c.codePointAt(0)!);
  const r = codes.filter((c) => c % 2 === 0).length / Math.max(1, codes.length);
  return { reward: r, parts: { even_share: r } };
};

const HAVE_FSDP =
  HAVE_HF_PY &&
  (() => {
    try {
      return hfPython('from torch.distributed.fsdp import fully_shard; print("yes")', [], 60_000) === 'yes';
    } catch {
      return false;
    }
  })();

const BASE = {
  preset: 'art',
  suite: 'calculator',
  tasks_per_step: 2,
  group: 4,
  eval_limit: 2,
  eval_samples: 1,
  eval_every: 0,
  max_new_tokens: 24,
  epochs: 1,
  device: 'cpu',
  threads: 2,
  max_staleness: 0,
  lr: 1e-2,
} as const;

type Row = Record<string, number>;
let src = '';

describe.skipIf(!HAVE_FSDP)(`train with the learner under FSDP2 on 2 CPU ranks (learner Python: ${HF_PY})`, () => {
  beforeAll(() => {
    src = makeTinyCheckpoints([{ name: 'qwen3', family: 'qwen3', initStd: 0.2 }]).qwen3!;
  }, 120_000);

  it('full fine-tuning: 2 ranks, step 1 equal to one process, ratios 1 (the export from the shards is the trained model), weights change', async () => {
    const root = mkdtempSync(join(tmpdir(), 'mcp-gym-fsdp-train-'));
    const logs: string[] = [];
    const sharded = await train({
      config: { ...BASE, model: src, steps: 2, learner_procs: 2, learner_parallel: 'fsdp' },
      runDir: join(root, 'fsdp'),
      reward: evenShare,
      onLog: (l) => logs.push(l),
    });
    const one = await train({ config: { ...BASE, model: src, steps: 1 }, runDir: join(root, 'one'), reward: evenShare });
    expect(sharded.steps).toBe(2);
    expect(one.steps).toBe(1);
    const m = rows<Row>(join(root, 'fsdp', 'metrics.jsonl'));
    const o = rows<Row>(join(root, 'one', 'metrics.jsonl'));
    expect(m.map((r) => r.step)).toEqual([1, 2]);
    const world = m.map((r) => r.world_size ?? r.learner_world_size);
    expect(world).toEqual([2, 2]);
    expect(o[0]!.world_size ?? o[0]!.learner_world_size).toBe(1);
    // Step 1: the same samples (same seed and weights), so the same batch: the learner's figures agree to float32 rounding.
    expect(m[0]!.reward_mean).toBe(o[0]!.reward_mean);
    for (const k of ['loss', 'pg_loss', 'grad_norm', 'entropy']) {
      if (typeof o[0]![k] !== 'number') continue;
      expect(Math.abs(m[0]![k]! - o[0]![k]!)).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(o[0]![k]!)));
    }
    expect(m[0]!.grad_norm).toBeGreaterThan(0);
    // Step 2 was sampled from the ONNX export rank 0 wrote from the gathered shards: the learner's logprobs equal the sampler's.
    for (const r of m) {
      expect(Math.abs(r.ratio_mean! - 1)).toBeLessThan(1e-3);
      expect(Math.abs(r.ratio_max! - 1)).toBeLessThan(1e-2);
    }
    expect(sha(join(root, 'fsdp', 'model', 'model.safetensors'))).not.toBe(sha(join(src, 'model.safetensors')));
    console.log(
      `fsdp 2 ranks: loss ${m.map((r) => r.loss?.toFixed(6)).join(',')} grad_norm ${m.map((r) => r.grad_norm?.toExponential(4)).join(',')}; ` +
        `one process step 1: loss ${o[0]!.loss?.toFixed(6)} grad_norm ${o[0]!.grad_norm?.toExponential(4)}; ratio_mean ${m.map((r) => r.ratio_mean?.toFixed(6)).join(',')}`,
    );
  }, 400_000);

  it('LoRA rank 4 through a learner started by torchrun itself (serve --http --fsdp, learner_shared_fs): a trained adapter from the shards, the base byte-identical', async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-fsdp-lora-')), 'run');
    // What each node of a cluster runs (docs/distributed.md), here with one node of 2 CPU ranks.
    const learner = spawn(
      HF_PY,
      [
        '-m',
        'mcp_gym_learner.torchrun',
        '--standalone',
        '--nproc_per_node',
        '2',
        '-m',
        'mcp_gym_learner',
        'serve',
        '--http',
        '--port',
        '0',
        '--fsdp',
        '--token',
        'fsdp-test',
      ],
      {
        cwd: join(REPO, 'learner'),
        env: { ...process.env, PYTHONPATH: join(REPO, 'learner'), OMP_NUM_THREADS: '1' },
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: true,
      },
    );
    try {
      const url = await new Promise<string>((ok, fail) => {
        let err = '';
        const timer = setTimeout(() => fail(new Error(`the learner did not listen in 120 s: ${err.slice(-2000)}`)), 120_000);
        learner.stderr.setEncoding('utf8').on('data', (chunk: string) => {
          err += chunk;
          const m = /listening on (http:\/\/[^\s]+)/.exec(err);
          if (m) {
            clearTimeout(timer);
            ok(m[1]!);
          }
        });
        learner.on('exit', (code) => fail(new Error(`the learner exited (${code}): ${err.slice(-2000)}`)));
      });
      const r = await train({
        config: { ...BASE, model: src, steps: 1, lora_rank: 4, learner: url, learner_token: 'fsdp-test', learner_shared_fs: true },
        runDir,
        reward: evenShare,
      });
      expect(r.steps).toBe(1);
    } finally {
      // torchrun runs each rank in a session of its own; SIGKILL to torchrun: the ranks die with it (PR_SET_PDEATHSIG)
      const gone = new Promise((r) => learner.once('exit', r));
      try {
        process.kill(-learner.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      await gone;
      await new Promise((r) => setTimeout(r, 1000));
      const left = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
        .split('\n')
        .filter((l) => l.includes('--token fsdp-test'));
      expect(left).toEqual([]);
    }
    const model = join(runDir, 'model');
    const adapter = JSON.parse(readFileSync(join(model, 'adapter', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(adapter).toMatchObject({ r: 4, peft_type: 'LORA' });
    const m = rows<Row>(join(runDir, 'metrics.jsonl'));
    expect(m[0]!.world_size ?? m[0]!.learner_world_size).toBe(2);
    expect(m[0]!.grad_norm).toBeGreaterThan(0);
    expect(Math.abs(m[0]!.ratio_mean! - 1)).toBeLessThan(1e-3);
    const buf = readFileSync(join(model, 'adapter', 'adapter_model.safetensors'));
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
    const nonzero = Object.entries(header).some(([name, t]) => {
      if (!/lora_B/.test(name)) return false;
      const f = new Float32Array(buf.buffer.slice(buf.byteOffset + 8 + n + t.data_offsets[0], buf.byteOffset + 8 + n + t.data_offsets[1]));
      return f.some((x) => x !== 0);
    });
    expect(nonzero).toBe(true);
    expect(sha(join(model, 'model.safetensors'))).toBe(sha(join(src, 'model.safetensors')));
  }, 300_000);
});
