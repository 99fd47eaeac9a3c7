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
import { seededRng } from '../../src/tools/index.ts';

let learner: LearnerClient;
let model: OnnxModel;
const dir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-lp-')), 'tiny');

beforeAll(async () => {
  learner = LearnerClient.start();
  await learner.request('create', { model_dir: dir, name: 'tiny', architecture: { d_model: 64, n_layers: 2, n_heads: 4, d_ff: 256, max_seq_len: 256 }, seed: 3 });
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
    const gens = await model.generate(prompts, { ...sampling, maxNewTokens: 40, rng: seededRng(5), stop: -1 });
    const sequences = prompts.map((p, i) => [...p, ...gens[i]!.tokens]);
    const r = await learner.request<{ logprobs: number[][] }>('logprobs', {
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
