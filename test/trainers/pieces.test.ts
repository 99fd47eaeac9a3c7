/**
 * The three pieces of a training step, without a learner: collectGroups (rollouts against the
 * real calculator server, reward shaping, dynamic sampling), buildTrainBatch (advantages from the
 * rewards that are logged, per-turn advantages from the step rewards of the reward in use), and
 * the learner config (Dr. GRPO's constant). Each test names the fix it guards.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import { defineTask, Environment, registerReward, resolveReward, rewardNames, type Policy } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { buildTrainBatch, collectGroups, learnerConfig, policyTokenBudget, resolveConfig, TaskSampler, withoutSignal } from '../../src/trainers/index.ts';

const tasks = generateSuite('calculator', { train: 40, eval: 4 }).filter((t) => t.split === 'train' && t.difficulty <= 2);
const envs: Environment[] = [];
const envWith = (o: ConstructorParameters<typeof Environment>[0] = {}) => {
  const e = new Environment(o);
  envs.push(e);
  return e;
};
afterAll(async () => {
  for (const e of envs) await e.close();
});

const collect = (env: Environment, policy: Policy, extra: Partial<Parameters<typeof collectGroups>[0]> = {}) =>
  collectGroups({
    env,
    policy,
    sampler: new TaskSampler(tasks, 3),
    step: 2,
    tasksPerStep: 3,
    group: 4,
    concurrency: 8,
    dynamicSampling: false,
    dynamicSamplingOn: 'outcome',
    maxResampleRounds: 0,
    overlong: { max: 0, cache: 1 },
    ...extra,
  });

describe('collectGroups', () => {
  it('gives structured group ids, unique per step and round', async () => {
    const got = await collect(envWith(), new ExpertPolicy());
    expect(got.kept.map((g) => g.group_id).every((id) => /^calc[\w.-]*@train\.2\.0$/.test(id))).toBe(true);
    expect(new Set(got.kept.map((g) => g.group_id)).size).toBe(got.kept.length);
    expect(got.rounds).toBe(1);
  });

  it('DAPO dynamic sampling drops groups whose outcome is all-equal, not only equal rewards, and stops at the cap', async () => {
    // The expert solves everything: every group is all-solved, yet the ART rewards within a group are
    // equal too, so use a reward that differs per episode while the outcome does not.
    let n = 0;
    const env = envWith({ reward: (e) => ({ reward: (e.solved ? 1 : 0) + 0.01 * (n++ % 3) }) });
    const got = await collect(env, new ExpertPolicy(), { dynamicSampling: true, maxResampleRounds: 2 });
    expect(got.kept).toHaveLength(0); // all solved: no signal, whatever the rewards say
    expect(got.droppedNoSignal).toBe(got.groupsSeen);
    expect(got.rounds).toBe(3); // the first round and the 2 of the cap
    expect(got.full).toBe(false);
    // On the shaped reward (the option), the same groups have signal and are kept.
    const byReward = await collect(env, new ExpertPolicy(), { dynamicSampling: true, dynamicSamplingOn: 'reward', maxResampleRounds: 2 });
    expect(byReward.kept.length).toBe(3);
    expect(byReward.rounds).toBe(1);
    expect(byReward.full).toBe(true);
  });

  it('withoutSignal: outcome looks at success, reward at the rewards', () => {
    const t = (success: boolean, reward: number) => ({ success, reward }) as never;
    expect(withoutSignal([t(true, 1), t(true, 1.3)], 'outcome')).toBe(true);
    expect(withoutSignal([t(true, 1), t(true, 1.3)], 'reward')).toBe(false);
    expect(withoutSignal([t(false, 0), t(true, 0)], 'outcome')).toBe(false);
  });

  it('overlong shaping changes the logged reward, and the advantages use exactly the logged reward', async () => {
    const got = await collect(envWith(), new ExpertPolicy(), { overlong: { max: 1, cache: 1 } });
    // The expert's turns carry no tokens (0 policy tokens): shaping is 0 there; use a policy with tokens instead.
    expect(got.trajectories.every((t) => t.reward_parts.overlong === 0)).toBe(true);
    const shaped = await collect(envWith(), withTokens(new ExpertPolicy()), { overlong: { max: 12, cache: 6 } });
    for (const t of shaped.trajectories) {
      const p = t.reward_parts.overlong!;
      expect(p).toBeLessThanOrEqual(0);
      expect(t.reward).toBeCloseTo(t.reward_parts.art! + p, 12);
    }
    const built = buildTrainBatch(shaped.kept, { advantage: 'dr_grpo', perTurn: false, maxLen: 10_000 });
    for (const [i, item] of built.items.entries()) {
      const g = shaped.kept.find((k) => k.group_id === item.group_id)!;
      const mean = g.trajectories.reduce((s, t) => s + t.reward, 0) / g.trajectories.length;
      expect(built.batch.advantages[i]).toBeCloseTo(item.trajectory.reward - mean, 12);
    }
  });
});

describe('rewards', () => {
  const task = defineTask({
    id: 'r1',
    split: 'train',
    difficulty: 1,
    prompt: 'What is 2 + 3?',
    servers: { calc: 'calculator' },
    checks: [{ kind: 'answer', expect: { kind: 'number', value: '5' } }],
    solution: { calls: [{ server: 'calc', tool: 'evaluate', arguments: { expression: '2 + 3' } }], answer: '5' },
  });

  it('a registered reward is used by name and recorded; an unknown one is refused with the list', async () => {
    registerReward('test-half', (e) => ({ reward: e.solved ? 0.5 : 0, parts: { half: e.solved ? 0.5 : 0 } }), { replace: true });
    expect(rewardNames()).toContain('test-half');
    const env = envWith({ reward: 'test-half' });
    const t = await env.runEpisode(task, new ExpertPolicy());
    expect(t.reward).toBe(0.5);
    expect(t.reward_parts).toEqual({ half: 0.5 });
    expect(t.reward_name).toBe('test-half');
    expect(() => resolveReward('nope')).toThrow(/unknown reward 'nope'; registered: art, rlvr, composer, verifier/);
    expect(() => registerReward('art', () => ({ reward: 0 }))).toThrow(/built in/);
  });

  it("each turn records the step rewards of the reward in use (not always ART's), and per-turn advantages subtract them", async () => {
    const env = envWith({ reward: 'rlvr' });
    const policies = [new ExpertPolicy(), new ExpertPolicy(), new RandomPolicy(11), new RandomPolicy(12), new RandomPolicy(13)];
    const ts = await Promise.all(policies.map((p, sample) => env.runEpisode(task, withTokens(p), { groupId: 'g', sample })));
    for (const t of ts) {
      const steps = t.turns.reduce((s, u) => s + u.step_reward, 0);
      // RLVR's step rewards add up to 0.3 · the fraction of correct steps.
      expect(steps).toBeCloseTo(0.3 * t.reward_parts.steps_fraction!, 12);
    }
    // ART's step rewards (0.1 per successful call, ...) would differ for some of them.
    expect(ts.some((t) => Math.abs(t.turns.reduce((s, u) => s + u.step_reward, 0) - t.reward_parts.tools!) > 1e-9)).toBe(true);
    const built = buildTrainBatch([{ group_id: 'g', trajectories: ts }], { advantage: 'dr_grpo', perTurn: true, maxLen: 10_000 });
    // Turn 0's advantage: the return from turn 0 (= the reward) minus the group's mean return at turn 0.
    const mean0 = ts.reduce((s, t) => s + t.reward, 0) / ts.length;
    built.items.forEach((item, i) => {
      const perToken = built.batch.advantages[i] as number[];
      const first = perToken[built.batch.mask[i]!.indexOf(1)]!;
      expect(first).toBeCloseTo(item.trajectory.reward - mean0, 12);
    });
  });
});

/** A policy that also reports token ids and logprobs (as a model would), so its episodes can be batched. */
function withTokens(p: Policy): Policy {
  return {
    id: `tokens:${p.id}`,
    async act(obs) {
      const r = await p.act(obs);
      const n = 3 + (obs.episodeId.length % 5);
      return { ...r, tokens: Array.from({ length: n }, (_, i) => i + 1), logprobs: Array.from({ length: n }, () => -0.5), envTokens: [1, 2] };
    },
  };
}

describe('the learner config', () => {
  it('Dr. GRPO gets a fixed budget of policy tokens, the same every step', () => {
    const c = resolveConfig({ preset: 'dr_grpo', max_new_tokens: 64 });
    const budget = policyTokenBudget(c, 8, 384);
    expect(budget).toBe(384); // 64 x 8 = 512, capped at the context
    expect(policyTokenBudget(c, 4, 384)).toBe(256);
    expect(policyTokenBudget(resolveConfig({ preset: 'dr_grpo', policy_token_budget: 100 }), 8, 384)).toBe(100);
    const a = learnerConfig(c, { totalSteps: 5, policyTokenBudget: budget });
    expect(a.dr_grpo_constant).toBe(384);
    expect(learnerConfig(resolveConfig({ preset: 'grpo' }), { totalSteps: 5, policyTokenBudget: budget }).dr_grpo_constant).toBeUndefined();
  });
});
