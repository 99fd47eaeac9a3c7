/** Stages 1-4 of a step: sample tasks, roll out, score, filter (dynamic sampling), through collectGroups (collect.ts); the pipeline (pipeline.ts) runs them ahead of the learner. */
import { collectGroups } from './collect.ts';
import type { Produced, RunContext } from './run-context.ts';

/** Stages 1-4 for one step: the curriculum's levels and the replayed groups, then collectGroups; the curriculum and the buffer learn from the fresh rollouts. */
export async function produceBatch(ctx: RunContext, step: number, signal: AbortSignal): Promise<Produced> {
  const { c, curriculum, replay, sampler } = ctx;
  await ctx.o.beforeRollout?.(step);
  const levels = curriculum?.levels(step);
  const replayed = replay?.draw(step, replay.target(c.tasks_per_step));
  const s0 = ctx.policy.samplerSeconds?.();
  const got = await collectGroups({
    env: ctx.collectEnv,
    policy: ctx.policy.policy,
    sampler,
    curriculum,
    step,
    tasksPerStep: c.tasks_per_step - (replayed?.groups.length ?? 0),
    group: c.group,
    concurrency: c.concurrency,
    dynamicSampling: c.dynamic_sampling,
    dynamicSamplingOn: c.dynamic_sampling_on,
    maxResampleRounds: c.max_resample_rounds,
    overlong: { max: c.overlong_max, cache: c.overlong_cache },
    judge: ctx.judge,
    signal,
  });
  const s1 = ctx.policy.samplerSeconds?.();
  const sampled =
    s0 && s1
      ? {
          prefill: s1.prefill - s0.prefill,
          decode: s1.decode - s0.decode,
          prefill_calls: s1.prefill_calls - s0.prefill_calls,
          decode_calls: s1.decode_calls - s0.decode_calls,
          decode_rows: s1.decode_rows - s0.decode_rows,
        }
      : undefined;
  // In batch order, from the fresh rollouts (never from training): the same whatever the timing.
  const moves = curriculum?.update(step, got.trajectories) ?? [];
  const replayAdded = replay?.add(step, got.kept) ?? 0;
  return {
    got,
    drawsAfter: sampler.draws,
    levels,
    moves,
    curriculumAfter: curriculum?.snapshot(),
    replayed,
    replayAdded,
    replayAfter: replay?.snapshot(),
    ...(sampled ? { samplerSeconds: sampled } : {}),
  };
}
