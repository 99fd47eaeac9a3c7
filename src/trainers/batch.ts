/**
 * Building the TrainBatch, a pure function of the step's kept groups (docs/architecture.md,
 * "Contracts"): for each trajectory the full token sequence (prompt, environment and policy tokens
 * in order, as generated: nothing re-tokenised), a loss mask (1 on policy tokens only), the
 * sampling logprobs of the policy tokens, its advantage (per trajectory, or per token for per-turn
 * advantages) and its group id. The rewards used are the trajectories' `reward` fields: the same
 * numbers that are logged.
 */
import type { Trajectory } from '../env/index.ts';
import { groupAdvantages, isZeroVariance, turnAdvantages, type AdvantageEstimator } from './advantages.ts';
import type { TrainBatch } from './protocol.ts';

export type { TrainBatch } from './protocol.ts';

export interface BatchItem {
  trajectory: Trajectory;
  group_id: string;
  /** A number: the trajectory's advantage; an array: one advantage per turn. */
  advantage: number | number[];
}

/** The token sequence of a trajectory with its mask and old logprobs; undefined without tokens. */
export function sequenceOf(t: Trajectory): { ids: number[]; mask: (0 | 1)[]; logprobs: number[]; turnOf: number[] } | undefined {
  const ids: number[] = [];
  const mask: (0 | 1)[] = [];
  const logprobs: number[] = [];
  const turnOf: number[] = [];
  let policyTokens = 0;
  // A sequence with a turn the server re-tokenised (token drift), or with turns sampled without
  // tokens among turns with them, is not the sequence sampled: it is not trained on.
  if (t.turns.some((turn) => turn.token_drift !== undefined)) return undefined;
  const withTokens = t.turns.filter((turn) => turn.tokens !== undefined).length;
  if (withTokens > 0 && withTokens < t.turns.length) return undefined;
  t.turns.forEach((turn, i) => {
    for (const id of turn.env_tokens ?? []) {
      ids.push(id);
      mask.push(0);
      logprobs.push(0);
      turnOf.push(i);
    }
    const toks = turn.tokens ?? [];
    const lps = turn.logprobs ?? [];
    toks.forEach((id, j) => {
      ids.push(id);
      mask.push(1);
      logprobs.push(lps[j] ?? 0);
      turnOf.push(i);
      policyTokens++;
    });
  });
  return policyTokens > 0 ? { ids, mask, logprobs, turnOf } : undefined;
}

export function buildBatch(items: BatchItem[]): TrainBatch {
  const perToken = items.some((i) => Array.isArray(i.advantage));
  const batch: TrainBatch = { ids: [], mask: [], old_logprobs: [], advantages: [], group_ids: [] };
  for (const item of items) {
    const s = sequenceOf(item.trajectory);
    if (!s) continue;
    batch.ids.push(s.ids);
    batch.mask.push(s.mask);
    batch.old_logprobs.push(s.logprobs);
    batch.group_ids.push(item.group_id);
    if (perToken) {
      const a = item.advantage;
      (batch.advantages as number[][]).push(s.turnOf.map((turn, k) => (s.mask[k] ? (Array.isArray(a) ? (a[turn] ?? 0) : a) : 0)));
    } else {
      (batch.advantages as number[]).push(item.advantage as number);
    }
  }
  return batch;
}

/** DAPO overlong shaping: 0 up to L_max − L_cache tokens, a linear penalty in the cache window, −1 beyond L_max. */
export function overlongPenalty(length: number, lMax: number, lCache: number): number {
  if (lMax <= 0) return 0;
  const soft = lMax - lCache;
  if (length <= soft) return 0;
  if (length <= lMax) return (soft - length) / lCache;
  return -1;
}

/** A group of one task's rollouts, kept for training. */
export interface KeptGroup {
  group_id: string;
  trajectories: Trajectory[];
}

export interface BatchOptions {
  advantage: AdvantageEstimator;
  /** Per-turn advantages from the step rewards of the reward in use (each turn's `step_reward`). */
  perTurn: boolean;
  /** Sequences longer than this (the model's context) are left out, and counted. */
  maxLen: number;
}

export interface BuiltBatch {
  batch: TrainBatch;
  /** What went into the batch, in its order, with each trajectory's advantage. */
  items: BatchItem[];
  /** Groups whose rewards were all equal (their advantages are exactly 0). */
  zeroVarianceGroups: number;
  /** Trajectories longer than the context, left out. */
  tooLong: number;
}

/**
 * Advantages per group, then the TrainBatch. Per turn, a trajectory's final reward is its reward
 * minus the step rewards of its turns (each turn's `step_reward`, set by the reward in use), so
 * that the returns add up to the reward.
 */
export function buildTrainBatch(groups: KeptGroup[], o: BatchOptions): BuiltBatch {
  const items: BatchItem[] = [];
  let zeroVarianceGroups = 0;
  for (const g of groups) {
    const rewards = g.trajectories.map((t) => t.reward);
    if (isZeroVariance(rewards)) zeroVarianceGroups++;
    const adv: (number | number[])[] = o.perTurn
      ? turnAdvantages(
          g.trajectories.map((t) => {
            const stepRewards = t.turns.map((u) => u.step_reward);
            return { stepRewards, final: t.reward - stepRewards.reduce((a, b) => a + b, 0) };
          }),
          o.advantage,
        )
      : groupAdvantages(rewards, o.advantage);
    g.trajectories.forEach((t, i) => items.push({ trajectory: t, group_id: g.group_id, advantage: adv[i]! }));
  }
  const withTokens = items.filter((i) => sequenceOf(i.trajectory) !== undefined); // a trajectory without policy tokens has nothing to train on
  const fitting = withTokens.filter((i) => sequenceOf(i.trajectory)!.ids.length <= o.maxLen);
  return { batch: buildBatch(fitting), items: fitting, zeroVarianceGroups, tooLong: withTokens.length - fitting.length };
}
