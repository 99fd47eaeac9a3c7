import { describe, expect, it } from 'vitest';
import { buildTrainBatch, learnerConfig, resolveConfig } from '../../src/trainers/index.ts';
import { tokenRewards } from '../../src/trainers/batch.ts';
import { turnRewards } from '../../src/trainers/advantages.ts';
import { TrainBatchSchema } from '../../src/trainers/protocol.ts';

/** A trajectory as the environment records it: per turn, the environment's tokens (prompt or tool results), the policy's tokens, its step reward. */
function traj(reward: number, turns: { env: number; pol: number; step: number }[]) {
  let id = 300;
  return {
    reward,
    turns: turns.map((t) => ({
      env_tokens: Array.from({ length: t.env }, () => id++),
      tokens: Array.from({ length: t.pol }, () => id++),
      logprobs: Array.from({ length: t.pol }, () => -0.5),
      step_reward: t.step,
    })),
  } as never;
}

describe('PPO with GAE: the batch', () => {
  it("puts each turn's step reward on its last policy token and the rest of the reward on the last one", () => {
    // prompt 3, turn 1: 2 policy tokens (step 0.2), tool result 2, turn 2: 3 policy tokens (step 0.1), tool result 1, turn 3: 1 token (step 0)
    const t = traj(1.5, [
      { env: 3, pol: 2, step: 0.2 },
      { env: 2, pol: 3, step: 0.1 },
      { env: 1, pol: 1, step: 0 },
    ]);
    const built = buildTrainBatch([{ group_id: 'g', trajectories: [t, traj(0, [{ env: 2, pol: 2, step: 0.3 }])] }], {
      advantage: 'gae',
      perTurn: false,
      maxLen: 100,
    });
    const b = built.batch;
    expect(b.mask[0]).toEqual([0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1]);
    // 1.5 − (0.2 + 0.1 + 0) = 1.2 on the episode's last policy token
    expect(b.rewards![0]!.map((x) => Number(x.toFixed(12)))).toEqual([0, 0, 0, 0, 0.2, 0, 0, 0, 0, 0.1, 0, 1.2]);
    expect(b.rewards![1]!.map((x) => Number(x.toFixed(12)))).toEqual([0, 0, 0, 0.3 + (0 - 0.3)]);
    expect(b.advantages).toEqual([0, 0]); // the learner computes them
    // the rewards add up to each trajectory's reward, and sit on policy tokens only
    expect(b.rewards![0]!.reduce((a, x) => a + x, 0)).toBeCloseTo(1.5, 12);
    b.rewards!.forEach((r, i) => r.forEach((x, k) => x !== 0 && expect(b.mask[i]![k]).toBe(1)));
    expect(TrainBatchSchema.safeParse(b).success).toBe(true);
    // a group with equal rewards is counted, and still trained on
    expect(built.zeroVarianceGroups).toBe(0);
    const same = buildTrainBatch([{ group_id: 'h', trajectories: [traj(1, [{ env: 2, pol: 2, step: 0 }]), traj(1, [{ env: 2, pol: 1, step: 0 }])] }], {
      advantage: 'gae',
      perTurn: false,
      maxLen: 100,
    });
    expect(same.zeroVarianceGroups).toBe(1);
    expect(same.batch.ids.length).toBe(2);
    expect(same.batch.rewards).toEqual([
      [0, 0, 0, 1],
      [0, 0, 1],
    ]);
  });

  it("passes the reward of a turn without policy tokens to the last policy token before it (or the next turn's)", () => {
    const s = { mask: [0, 1, 1, 0, 0, 1] as (0 | 1)[], turnOf: [0, 0, 0, 1, 2, 2] };
    expect(tokenRewards(s, [0.5, 0.25, 1])).toEqual([0, 0, 0.75, 0, 0, 1]);
    const first = { mask: [0, 0, 1] as (0 | 1)[], turnOf: [0, 1, 1] };
    expect(tokenRewards(first, [0.5, 1])).toEqual([0, 0, 1.5]);
    expect(turnRewards([0.2, 0.1], 1)).toEqual([0.2, 0.1 + 0.7]);
    expect(turnRewards([], 1)).toEqual([]);
  });

  it('leaves the group advantages as they were without gae', () => {
    const built = buildTrainBatch([{ group_id: 'g', trajectories: [traj(1, [{ env: 2, pol: 2, step: 0 }]), traj(0, [{ env: 2, pol: 2, step: 0 }])] }], {
      advantage: 'grpo',
      perTurn: false,
      maxLen: 100,
    });
    expect(built.batch.rewards).toBeUndefined();
    expect((built.batch.advantages as number[]).map((x) => Number(x.toFixed(5)))).toEqual([0.70711, -0.70711]);
    expect(() => buildTrainBatch([], { advantage: 'gae', perTurn: true, maxLen: 100 })).toThrow(/per_turn: not with advantage 'gae'/);
  });
});

describe('PPO with GAE: the config', () => {
  it('the ppo preset: gae, token-level PPO clip, no KL, several epochs and minibatches', () => {
    const c = resolveConfig({ preset: 'ppo' });
    expect(c).toMatchObject({
      advantage: 'gae',
      reward: 'art',
      loss: 'dapo',
      clip_low: 0.2,
      clip_high: 0.2,
      beta: 0,
      gae_gamma: 0.99,
      gae_lambda: 0.95,
      gae_level: 'turn',
      value_coef: 0.5,
      value_clip: 0.2,
      whiten_advantages: true,
    });
    expect(c.epochs).toBeGreaterThanOrEqual(2);
    expect(c.minibatch_size).toBeGreaterThan(0);
    expect(c.group).toBeGreaterThanOrEqual(2);
    const lc = learnerConfig(resolveConfig({ preset: 'ppo', gae_level: 'token', gae_lambda: 0.9 }), { totalSteps: 3, policyTokenBudget: 1 });
    expect(lc).toMatchObject({ gae_level: 'token', gae_lambda: 0.9, value_coef: 0.5, value_clip: 0.2, whiten_advantages: true });
  });

  it('refuses the combinations that make no sense, naming the field', () => {
    expect(() => resolveConfig({ preset: 'ppo', per_turn: true })).toThrow(/^per_turn: not with advantage 'gae'/);
    expect(() => resolveConfig({ preset: 'ppo', loss: 'gspo' })).toThrow(/^loss: gspo/);
    expect(() => resolveConfig({ preset: 'grpo', gae_level: 'turn' })).toThrow(/^gae_level: only with advantage 'gae'/);
    expect(() => resolveConfig({ preset: 'art', value_coef: 1 })).toThrow(/^value_coef: only with advantage 'gae'/);
    expect(() => resolveConfig({ preset: 'art', whiten_advantages: false })).toThrow(/^whiten_advantages: only with advantage 'gae'/);
    expect(() => resolveConfig({ preset: 'ppo', gae_gamma: 1.5 })).toThrow(/^gae_gamma: /);
    expect(() => resolveConfig({ preset: 'ppo', gae_level: 'episode' as never })).toThrow(/^gae_level: /);
    expect(resolveConfig({ preset: 'grpo', advantage: 'gae' }).advantage).toBe('gae'); // any preset may switch to GAE
  });
});
