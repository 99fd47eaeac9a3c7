/**
 * The PPO ratio is only right if the learner's logprobs of the sampled tokens equal the
 * sampler's: same weights, same sequences, same temperature and truncation (|Δ| < 1e-4, fp32).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxModel } from '../../src/agents/index.ts';
import { LearnerClient } from '../../src/trainers/index.ts';
import { seededRandom } from '../../lib/index.ts';

let learner: LearnerClient;
let model: OnnxModel;
const dir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-lp-')), 'tiny');

beforeAll(async () => {
  learner = LearnerClient.start();
  await learner.request('create', {
    model_dir: dir,
    name: 'tiny',
    architecture: { d_model: 64, n_layers: 2, n_heads: 4, d_ff: 256, max_seq_len: 256 },
    seed: 3,
  });
  await learner.request('load', { model_dir: dir, device: 'cpu' });
  await learner.request('export', { model_dir: dir, full: true });
  model = await OnnxModel.load(dir);
}, 120_000);
afterAll(async () => {
  await model?.close();
  await learner?.close();
});

const prompts = [
  [257, ...Array.from(Buffer.from('Use the calculator to compute 12 * 34.')), 262, 258],
  [257, ...Array.from(Buffer.from('hi')), 262, 258],
  [256, ...Array.from(Buffer.from('tools: get, set')), 262, 257, ...Array.from(Buffer.from('Store 5 under a.')), 262, 258],
];

describe.each([
  { temperature: 1, topK: 0, topP: 1 },
  { temperature: 0.7, topK: 0, topP: 1 },
  { temperature: 1.3, topK: 20, topP: 1 },
])('logprobs at %o', (sampling) => {
  it('the learner recomputes the sampler logprobs of the sampled tokens to 1e-4', async () => {
    const gens = await model.generate(prompts, { ...sampling, maxNewTokens: 40, rng: seededRandom(5), stop: -1 });
    const sequences = prompts.map((p, i) => [...p, ...gens[i]!.tokens]);
    const r = await learner.request('logprobs', {
      sequences,
      starts: prompts.map((p) => p.length),
      temperature: sampling.temperature,
      top_k: sampling.topK,
      top_p: sampling.topP,
    });
    let worst = 0;
    gens.forEach((g, i) => {
      expect(r.logprobs[i]).toHaveLength(g.tokens.length);
      g.logprobs.forEach((lp, j) => (worst = Math.max(worst, Math.abs(lp - r.logprobs[i]![j]!))));
    });
    expect(gens.every((g) => g.tokens.length === 40)).toBe(true);
    expect(worst).toBeLessThan(1e-4);
  });
});

// The sampler's batch layouts: a prefix shared by every prompt (computed once, copied into each
// row; a GRPO group's identical prompts), rows split into chunks by the cache budget, and the
// plain per-row prefill. Each must give the learner's logprobs, or the KV cache is wrong.
const system = [256, ...Array.from(Buffer.from('You have tools: evaluate, add, subtract, multiply, divide. Call them.')), 262];
const shared = [
  [...system, 257, ...Array.from(Buffer.from('What is 2 + 3?')), 262, 258],
  [...system, 257, ...Array.from(Buffer.from('Divide 144 by 12, then add 7.')), 262, 258],
  [...system, 257, ...Array.from(Buffer.from('What is 2 + 3?')), 262, 258],
  [...system, 257, ...Array.from(Buffer.from('What is 2 + 3?')), 262, 258],
];
describe.each([
  { name: 'shared prefix', options: {} },
  { name: 'one row per chunk', options: { cacheBudgetBytes: 1 } },
  { name: 'no prefix sharing', options: { sharePrefix: false } },
])('batch layout: $name', ({ options }) => {
  it('matches the learner to 1e-4', async () => {
    const m = await OnnxModel.load(dir, options);
    try {
      const gens = await m.generate(shared, { temperature: 1, topK: 0, topP: 1, maxNewTokens: 30, rng: seededRandom(9), stop: -1 });
      const r = await learner.request('logprobs', {
        sequences: shared.map((p, i) => [...p, ...gens[i]!.tokens]),
        starts: shared.map((p) => p.length),
        temperature: 1,
        top_k: 0,
        top_p: 1,
      });
      let worst = 0;
      gens.forEach((g, i) => g.logprobs.forEach((lp, j) => (worst = Math.max(worst, Math.abs(lp - r.logprobs[i]![j]!)))));
      expect(gens.every((g) => g.tokens.length === 30)).toBe(true);
      expect(worst).toBeLessThan(1e-4);
    } finally {
      await m.close();
    }
  });
});
