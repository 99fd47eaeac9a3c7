/**
 * Building the TrainBatch, a pure function of the step's kept groups (docs/architecture.md,
 * "Contracts"): for each trajectory the full token sequence (prompt, environment and policy tokens
 * in order, as generated: nothing re-tokenised), a loss mask (1 on policy tokens only), the
 * sampling logprobs of the policy tokens, its advantage (per trajectory, or per token for per-turn
 * advantages) and its group id. The rewards used are the trajectories' `reward` fields: the same
 * numbers that are logged. With PPO with GAE (advantage `gae`) the batch carries per-token rewards
 * instead (`rewards`, advantages 0) and the learner computes the advantages from its value head.
 */
import type { Trajectory } from '../env/index.ts';
import { groupAdvantages, isZeroVariance, turnAdvantages, turnRewards, type AdvantageMode } from './advantages.ts';
import type { TrainBatch } from './protocol.ts';

export type { TrainBatch } from './protocol.ts';

export interface BatchItem {
  trajectory: Trajectory;
  group_id: string;
  /** A number: the trajectory's advantage; an array: one advantage per turn. */
  advantage: number | number[];
  /** PPO with GAE: the reward each turn ends with (turnRewards); the batch then carries rewards, advantages 0. */
  turnRewards?: number[];
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

/**
 * PPO with GAE: the rewards of a sequence, aligned with its ids. Turn t's reward goes on its last policy
 * token; a turn without policy tokens passes its reward to the last policy token before it (the action
 * it rewards), or, when it has none before it, to the next turn's last. The learner's turns are the
 * runs of mask 1 (a turn whose policy tokens follow the previous turn's without a token of mask 0
 * between them is one turn with it: its rewards still land on its last token).
 */
export function tokenRewards(s: { mask: (0 | 1)[]; turnOf: number[] }, rewards: number[]): number[] {
  const out = s.mask.map(() => 0);
  const last = new Map<number, number>(); // turn -> its last policy token
  s.mask.forEach((m, k) => {
    if (m) last.set(s.turnOf[k]!, k);
  });
  let pending = 0;
  let prev = -1;
  rewards.forEach((r, turn) => {
    const k = last.get(turn);
    if (k === undefined) {
      if (prev >= 0) out[prev]! += r;
      else pending += r;
      return;
    }
    out[k]! += r + pending;
    pending = 0;
    prev = k;
  });
  if (pending !== 0 && prev >= 0) out[prev]! += pending;
  return out;
}

export function buildBatch(items: BatchItem[]): TrainBatch {
  const gae = items.some((i) => i.turnRewards !== undefined);
  const perToken = !gae && items.some((i) => Array.isArray(i.advantage));
  const batch: TrainBatch = { ids: [], mask: [], old_logprobs: [], advantages: [], group_ids: [], ...(gae ? { rewards: [] } : {}) };
  for (const item of items) {
    const s = sequenceOf(item.trajectory);
    if (!s) continue;
    batch.ids.push(s.ids);
    batch.mask.push(s.mask);
    batch.old_logprobs.push(s.logprobs);
    batch.group_ids.push(item.group_id);
    if (gae) {
      (batch.advantages as number[]).push(0); // the learner computes them
      batch.rewards!.push(
        tokenRewards(
          s,
          item.turnRewards ??
            turnRewards(
              item.trajectory.turns.map((u) => u.step_reward),
              item.trajectory.reward,
            ),
        ),
      );
    } else if (perToken) {
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
  /** A group estimator, or gae: per-token rewards for the learner's GAE (perTurn must then be false). */
  advantage: AdvantageMode;
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
 * that the returns add up to the reward. With gae, no group advantages: each trajectory's turn
 * rewards (turnRewards: the same split of the reward), for the learner's GAE; a group whose rewards
 * are all equal is still counted, and still trained on (its value targets teach the value head).
 */
export function buildTrainBatch(groups: KeptGroup[], o: BatchOptions): BuiltBatch {
  if (o.advantage === 'gae' && o.perTurn) throw new Error("per_turn: not with advantage 'gae' (GAE credits the turns itself: gae_level turn or token)");
  const items: BatchItem[] = [];
  let zeroVarianceGroups = 0;
  for (const g of groups) {
    const rewards = g.trajectories.map((t) => t.reward);
    if (isZeroVariance(rewards)) zeroVarianceGroups++;
    if (o.advantage === 'gae') {
      g.trajectories.forEach((t) =>
        items.push({
          trajectory: t,
          group_id: g.group_id,
          advantage: 0,
          turnRewards: turnRewards(
            t.turns.map((u) => u.step_reward),
            t.reward,
          ),
        }),
      );
      continue;
    }
    const estimator = o.advantage;
    const adv: (number | number[])[] = o.perTurn
      ? turnAdvantages(
          g.trajectories.map((t) => {
            const stepRewards = t.turns.map((u) => u.step_reward);
            return { stepRewards, final: t.reward - stepRewards.reduce((a, b) => a + b, 0) };
          }),
          estimator,
        )
      : groupAdvantages(rewards, estimator);
    g.trajectories.forEach((t, i) => items.push({ trajectory: t, group_id: g.group_id, advantage: adv[i]! }));
  }
  const withTokens = items.filter((i) => sequenceOf(i.trajectory) !== undefined); // a trajectory without policy tokens has nothing to train on
  const fitting = withTokens.filter((i) => sequenceOf(i.trajectory)!.ids.length <= o.maxLen);
  return { batch: buildBatch(fitting), items: fitting, zeroVarianceGroups, tooLong: withTokens.length - fitting.length };
}
