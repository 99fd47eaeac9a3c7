/**
 * TrainBatch (DESIGN.md): for each trajectory the full token sequence (prompt, environment and
 * policy tokens in order, as generated: nothing re-tokenised), a loss mask (1 on policy tokens
 * only), the sampling logprobs of the policy tokens, its advantage (per trajectory, or per token
 * for per-turn advantages) and its group id.
 */
import type { Trajectory } from '../env/index.ts';

export interface TrainBatch {
  ids: number[][];
  mask: number[][];
  old_logprobs: number[][];
  /** One per sequence, or one per token when advantages are per turn. */
  advantages: number[] | number[][];
  group_ids: string[];
}

export interface BatchItem {
  trajectory: Trajectory;
  group_id: string;
  /** A number: the trajectory's advantage; an array: one advantage per turn. */
  advantage: number | number[];
}

/** The token sequence of a trajectory with its mask and old logprobs; undefined without tokens. */
export function sequenceOf(t: Trajectory): { ids: number[]; mask: number[]; logprobs: number[]; turnOf: number[] } | undefined {
  const ids: number[] = [];
  const mask: number[] = [];
  const logprobs: number[] = [];
  const turnOf: number[] = [];
  let policyTokens = 0;
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
