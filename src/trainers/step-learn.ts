/**
 * Stage 7 of a step: the learner trains on the batch and exports the new weights, and the rollout
 * policy picks them up. When the learner dies, the run goes back to its last checkpoint
 * (step-rollback.ts).
 */
import type { BuiltBatch } from './batch.ts';
import type { RunContext } from './run-context.ts';

/** What stage 7 did: the learner's metrics (empty when the batch was empty), its seconds, and whether the step is to be checkpointed. */
export interface Learned {
  metrics: Record<string, unknown>;
  /** The learner's train and export calls, and of that the export's; the policy's reload of the new weights after them. */
  seconds: number;
  exportSeconds: number;
  reloadSeconds: number;
  checkpointDue: boolean;
}

/**
 * Stage 7: the learner trains on the batch and exports the new weights; the rollout policy picks
 * them up. Undefined when the learner died and was restarted: the caller rolls the run back to
 * the last checkpoint (rollBack).
 */
export async function learn(ctx: RunContext, step: number, built: BuiltBatch): Promise<Learned | undefined> {
  const { c, session: s } = ctx;
  const tl = performance.now();
  let metrics: Record<string, unknown> = {};
  let exportSeconds = 0;
  try {
    if (built.batch.ids.length > 0) {
      await ctx.o.beforeLearnerStep?.(step, s.connection);
      metrics = (await s.train(built.batch, ctx.learnerConfig)).metrics;
      const te = performance.now();
      await s.exportWeights();
      exportSeconds = (performance.now() - te) / 1000;
    }
  } catch (err) {
    if (await learnerDied(ctx, err, `step ${step}`)) return undefined;
    throw err;
  }
  const seconds = (performance.now() - tl) / 1000;
  // The sampler picks up the new weights between batches: turns in flight keep the version that sampled them.
  const tr = performance.now();
  await ctx.policy.reload(step, built.batch.ids.length > 0);
  const reloadSeconds = (performance.now() - tr) / 1000;
  ctx.versions.note(ctx.policy.version(), step);
  if (metrics.ref_reset === true)
    ctx.log(`step ${step}: the reference and the optimizer were reset to the current policy (ref_reset_every ${c.ref_reset_every})`);
  return { metrics, seconds, exportSeconds, reloadSeconds, checkpointDue: step % c.checkpoint_every === 0 || step === c.steps };
}

/** Whether `err` is the learner's death mid-step and it was restarted from the last checkpoint (at most twice a step); the caller then rolls back. */
export async function learnerDied(ctx: RunContext, err: unknown, what: string): Promise<boolean> {
  return ++ctx.deathsThisStep <= 2 && (await ctx.session.recover(err, what));
}
