/** Stage 6 of a step: the advantages and the TrainBatch (batch.ts, a pure function). */
import { buildTrainBatch, type BuiltBatch } from './batch.ts';
import type { RunContext } from './run-context.ts';
import type { Filtered } from './step-filter.ts';

/** The batch of the groups stage 5 kept; with drop_zero_variance, how many it left out. */
export function buildBatch(ctx: RunContext, f: Filtered): BuiltBatch {
  const built = buildTrainBatch(f.signal, { advantage: ctx.c.advantage, perTurn: ctx.c.per_turn, maxLen: ctx.policy.maxLen });
  if (ctx.c.drop_zero_variance) built.zeroVarianceGroups = f.stale.kept.length - f.signal.length;
  return built;
}
