/** When the learner died (in stage 7 or at the checkpoint of stage 9): the run goes back to its last checkpoint. */
import type { StepPipeline } from './pipeline.ts';
import type { Produced, RunContext } from './run-context.ts';

/**
 * After the learner died and restarted from the last checkpoint: the run rolls back to that
 * checkpoint's step (what was done since, and the batches collected ahead, are the work lost) and
 * goes on from there with a new pipeline.
 */
export async function rollBack(ctx: RunContext, pipe: StepPipeline<Produced>): Promise<StepPipeline<Produced>> {
  const { run } = ctx;
  await pipe.stop();
  run.rollback();
  await ctx.session.exportWeights();
  await ctx.policy.reload(run.state.step, true);
  ctx.versions.note(ctx.policy.version(), run.state.step);
  ctx.sampler.seek(run.state.rng_draws);
  ctx.curriculum?.restore(run.state.curriculum);
  ctx.replay?.restore(run.readReplay());
  ctx.clock.t0 = performance.now() - run.state.train_seconds * 1000;
  const next = ctx.startPipeline();
  ctx.clock.stepStart = performance.now();
  ctx.clock.cpuStart = process.cpuUsage();
  return next;
}
