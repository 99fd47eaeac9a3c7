/** Stage 5 of a step: what the rollouts left to log, then the groups too stale or without signal left out of the batch. */
import { isZeroVariance } from './advantages.ts';
import type { KeptGroup } from './batch.ts';
import { splitStale, type StalenessSplit } from './pipeline.ts';
import type { Produced, RunContext } from './run-context.ts';

/** What the judge and the curriculum did while the batch was produced, logged (its trajectories are written by persistStep). */
export function logRollouts(ctx: RunContext, step: number, item: Produced): void {
  const { got } = item;
  if (got.judgeError) ctx.log(`step ${step}: the judge failed on ${got.droppedJudge} group(s), dropped; first: ${got.judgeError}`);
  for (const mv of item.moves)
    ctx.log(
      `step ${step}: curriculum: ${mv.suite} level ${mv.from} -> ${mv.to} (success ${(100 * mv.rate).toFixed(0)}% over ${mv.episodes} episodes at level ${mv.from})`,
    );
}

/** What stage 5 kept: the groups fresh enough (fresh and replayed), those of them with signal, and the replayed ones kept. */
export interface Filtered {
  stale: StalenessSplit;
  /** The groups the batch is built from (without the zero-variance ones with drop_zero_variance). */
  signal: KeptGroup[];
  replayedKept: KeptGroup[];
}

/** Stage 5: groups sampled too many steps ago are dropped (replayed ones are stale by design: their limit is replay_max_age more), then, with drop_zero_variance, groups whose advantages are all 0. */
export function filterGroups(ctx: RunContext, step: number, item: Produced): Filtered {
  const { c } = ctx;
  const replayedGroups = item.replayed?.groups ?? [];
  const replayedIds = new Set(replayedGroups.map((g) => g.group_id));
  const stale = splitStale(
    [...item.got.kept, ...replayedGroups],
    step,
    (g) => (replayedIds.has(g.group_id) ? c.max_staleness + c.replay_max_age : c.max_staleness),
    ctx.versions,
  );
  if (stale.dropped)
    ctx.log(
      `step ${step}: ${stale.dropped} group(s) sampled more than max_staleness ${c.max_staleness} steps ago (replayed: ${c.max_staleness + c.replay_max_age}), dropped`,
    );
  const replayedKept = stale.kept.filter((g) => replayedIds.has(g.group_id));
  // drop_zero_variance: groups whose advantages are all 0 cost the learner a pass and add no gradient.
  const signal = c.drop_zero_variance ? stale.kept.filter((g) => !isZeroVariance(g.trajectories.map((t) => t.reward))) : stale.kept;
  return { stale, signal, replayedKept };
}
