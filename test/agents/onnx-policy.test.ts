/**
 * The SFT cold-start pipeline end to end at a toy size (expert demos -> learner -> ONNX), and the
 * OnnxPolicy in multi-turn episodes: the token sequence grows by appending, and the trajectory's
 * tokens are exactly what was sampled (what the learner will train on).
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxPolicy, TOKENS } from '../../src/agents/index.ts';
import { seededRandom } from '../../lib/index.ts';
import { Environment, defineTask, rollout, type Observation, type Policy, type PolicyAction } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { runSft, sequenceOf } from '../../src/trainers/index.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';

const dir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-sft-')), 'toy');
let policy: OnnxPolicy;

beforeAll(async () => {
  const tasks = generateSuite('calculator').filter((t) => t.difficulty <= 2);
  const r = await runSft({
    tasks,
    demos: 24,
    out: dir,
    steps: 4,
    batchSize: 8,
    lr: 3e-3,
    seed: 1,
    architecture: { d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 256 },
  });
  expect(r.demos).toBe(24);
  expect(r.masked_tokens).toBeGreaterThan(0);
  policy = await OnnxPolicy.load(dir, { maxNewTokens: 24, seed: 3 });
}, 180_000);
afterAll(() => policy?.close());

describe('the SFT cold start at toy size', () => {
  it('writes one model directory that both sides read', () => {
    for (const f of ['config.json', 'weights.pt', 'model.onnx', 'model.onnx.data', 'sft-data.jsonl']) expect(existsSync(join(dir, f)), f).toBe(true);
    const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    expect(cfg.architecture).toMatchObject({ d_model: 32, n_layers: 2, vocab_size: 264 });
    expect(cfg.tokenizer.special_tokens['<|end|>']).toBe(262);
    expect(cfg.version).toBeGreaterThanOrEqual(1);
    const line = JSON.parse(readFileSync(join(dir, 'sft-data.jsonl'), 'utf8').split('\n')[0]!);
    expect(line.ids).toHaveLength(line.mask.length);
  });
});

describe('OnnxPolicy in episodes', () => {
  it('grows each episode by appending, and records exactly the sampled tokens', async () => {
    const seen: number[][] = [];
    const recording: Policy = {
      id: policy.id,
      act: async (o: Observation): Promise<PolicyAction> => {
        const a = await policy.act(o);
        seen.push([...policy.sequence(o.episodeId)!]);
        return a;
      },
      endEpisode: () => {},
    };
    // A task whose turns the toy model will fill with whatever it samples: tool calls or not,
    // malformed or not, each turn is appended.
    const task = defineTask({
      id: 'multi',
      split: 'eval',
      difficulty: 1,
      prompt: 'Use the calculator tool evaluate to compute 2 + 3. Answer with the exact result only.',
      servers: { calculator: 'calculator' },
      max_turns: 3,
      checks: [{ kind: 'answer', expect: { kind: 'number', value: '5' } }],
    } as never);
    const env = new Environment();
    const t = await env.runEpisode(task, recording);
    await env.close();
    expect(seen.length).toBe(t.turns.length);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.slice(0, seen[i - 1]!.length)).toEqual(seen[i - 1]);
    const s = sequenceOf(t)!;
    expect(s.ids).toEqual(seen.at(-1));
    // Policy tokens carry logprobs; environment tokens do not.
    t.turns.forEach((turn) => {
      expect(turn.logprobs).toHaveLength(turn.tokens!.length);
      expect(turn.logprobs!.every((x) => x <= 0 && Number.isFinite(x))).toBe(true);
    });
    expect(t.turns[0]!.env_tokens![0]).toBe(TOKENS.user);
    policy.endEpisode(t.id);
  });

  it('samples many episodes at once in batches', async () => {
    const tasks = generateSuite('calculator')
      .filter((x) => x.split === 'eval')
      .slice(0, 6);
    const env = new Environment();
    const trajs = await Promise.all(tasks.flatMap((task) => [0, 1].map((sample) => env.runEpisode(task, policy, { sample }))));
    await env.close();
    expect(trajs).toHaveLength(12);
    expect(trajs.every((x) => x.finish !== 'error')).toBe(true);
    expect(trajs.every((x) => x.metrics.policy_tokens > 0)).toBe(true);
  });

  it('a seeded rollout is reproducible, however the turns happen to be batched and whatever the threads', async () => {
    // Each turn samples from its own random source (the policy's seed, the episode's group and
    // sample, the turn), so which turns share a batch (a matter of timing) changes nothing.
    const tasks = generateSuite('calculator')
      .filter((x) => x.split === 'eval')
      .slice(0, 6);
    const runOnce = async (concurrency: number, threads = 1) => {
      const env = new Environment();
      const p = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { temperature: 1, maxNewTokens: 64, seed: 5, threads });
      const r = await rollout(env, p, tasks, { group: 4, concurrency, iteration: 'eval.0' });
      await env.close();
      await p.close();
      return r.trajectories.sort((a, b) => a.id.localeCompare(b.id)).map((t) => t.turns.map((x) => [x.tokens, x.logprobs]));
    };
    const a = await runOnce(24);
    const b = await runOnce(24);
    const serial = await runOnce(1); // one turn per batch
    expect(b).toEqual(a);
    // onnxruntime's threads (the training config's sampler_threads) change neither tokens nor logprobs.
    expect(await runOnce(24, 2)).toEqual(a);
    expect(serial.map((t) => t.map(([tokens]) => tokens))).toEqual(a.map((t) => t.map(([tokens]) => tokens)));
    // Different samples of a group are different draws.
    expect(new Set(a.map((t) => JSON.stringify(t[0]![0]))).size).toBeGreaterThan(6);
  });

  it('a view with other sampling settings (withSampling) samples as a policy loaded with them, beside the policy own rows', async () => {
    const tasks = generateSuite('calculator')
      .filter((x) => x.split === 'eval')
      .slice(0, 4);
    const tokens = async (p: Policy) => {
      const env = new Environment();
      const r = await rollout(env, p, tasks, { group: 2, concurrency: 8, iteration: 'eval.0' });
      await env.close();
      return r.trajectories.sort((a, b) => a.id.localeCompare(b.id)).map((t) => t.turns.map((x) => [x.tokens, x.logprobs]));
    };
    for (const batching of ['static', 'continuous'] as const) {
      const greedy = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { temperature: 0, maxNewTokens: 48, seed: 5, batching });
      const expected = await tokens(greedy);
      await greedy.close();
      const sampled = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { temperature: 1, maxNewTokens: 48, seed: 5, batching });
      const view = sampled.withSampling({ temperature: 0 });
      expect(view.id).toBe(sampled.id);
      expect(view.version).toBe(sampled.version);
      // both at once: the view's rows and the policy's own share batches, each with its settings
      const [viewed, own] = await Promise.all([tokens(view), tokens(sampled)]);
      await sampled.close();
      expect(viewed, batching).toEqual(expected);
      // greedy: a group's two samples are the same; at temperature 1 they differ
      expect(
        viewed.every((t, i) => i % 2 === 0 || JSON.stringify(t) === JSON.stringify(viewed[i - 1])),
        batching,
      ).toBe(true);
      expect(own).not.toEqual(viewed);
    }
  });

  it("keeps an episode's keys and values between turns: the same turns for fewer prefilled tokens", async () => {
    const tasks = generateSuite('calculator')
      .filter((x) => x.split === 'eval')
      .slice(0, 6);
    const runOnce = async (keepRows: boolean) => {
      const env = new Environment();
      const p = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { temperature: 1, maxNewTokens: 64, seed: 5, keepRows });
      const r = await rollout(env, p, tasks, { group: 4, concurrency: 24, iteration: 'eval.0' });
      await env.close();
      const prefilled = p.model.timing.prefill.tokens;
      await p.close();
      const turns = r.trajectories.sort((a, b) => a.id.localeCompare(b.id)).map((t) => t.turns.map((x) => ({ tokens: x.tokens!, logprobs: x.logprobs! })));
      return { turns, prefilled };
    };
    const whole = await runOnce(false);
    const kept = await runOnce(true);
    expect(whole.turns.flat().length).toBeGreaterThan(24); // episodes of several turns: there is something to keep
    expect(kept.turns.map((t) => t.map((x) => x.tokens))).toEqual(whole.turns.map((t) => t.map((x) => x.tokens)));
    kept.turns.flat().forEach((x, i) => x.logprobs.forEach((lp, j) => expect(Math.abs(lp - whole.turns.flat()[i]!.logprobs[j]!)).toBeLessThan(1e-4)));
    // The later turns prefill only the environment's tokens.
    expect(kept.prefilled).toBeLessThan(0.7 * whole.prefilled);
  });

  it("prefills a batch's identical prompts (a group's first turn) once, and samples each row on its own", async () => {
    const m = policy.model;
    const prompt = [TOKENS.user, ...Buffer.from('Use the calculator tool evaluate to compute 2 + 3.'), TOKENS.end, TOKENS.assistant];
    const runs = () => m.timing.prefill.calls;
    const gen = (prompts: number[][]) =>
      m.generate(prompts, {
        temperature: 1,
        topK: 0,
        topP: 1,
        maxNewTokens: 8,
        rng: Math.random,
        rows: prompts.map((_, i) => ({ maxNewTokens: 8, rng: seededRandom(i + 1) })),
      });
    const before = runs();
    const same = await gen([prompt, prompt, prompt, prompt]);
    const sameRuns = runs() - before;
    const other = await gen([0, 1, 2, 3].map((i) => [...prompt.slice(0, -3), 48 + i, ...prompt.slice(-2)]));
    const otherRuns = runs() - before - sameRuns;
    expect(sameRuns).toBeLessThan(otherRuns);
    expect(otherRuns).toBeGreaterThanOrEqual(4);
    // Each row still draws from its own random source: the same logits, different samples.
    expect(new Set(same.map((g) => JSON.stringify(g.tokens))).size).toBeGreaterThan(1);
    expect(other).toHaveLength(4);
  });
});
