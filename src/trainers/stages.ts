/**
 * The stages of a training step, each a function with typed input and output, in the order the
 * loop (loop.ts) composes them:
 *   1-4. sample tasks -> roll out -> score -> filter (dynamic sampling): produceBatch, through
 *        collectGroups (collect.ts); the pipeline (pipeline.ts) runs these ahead of the learner
 *   5.   filter for the learner: groups too stale, groups without signal (filterGroups)
 *   6.   build the batch: advantages and the TrainBatch (buildBatch)
 *   7.   learn: the learner's step and the new weights, picked up by the policy (learn; rollBack
 *        when the learner died)
 *   8.   evaluate on the held-out tasks (evaluateHeldOut)
 *   9.   persist the step: every write of it, in one place: the run's state and the checkpoint
 *        when due, the trajectories, the evaluation, the metrics row, the trackers, the report
 *        (persistStep; persistEval for the evaluations before and after the run)
 * and between them the step's row of metrics (stepRecord) and the no-silent-zero check
 * (checkSignal). Stages 1-8 write nothing to the run directory.
 */
import { assertSomeEpisodeRan, rollout, type Trajectory } from '../env/index.ts';
import { isZeroVariance, mean } from './advantages.ts';
import { buildTrainBatch, type BuiltBatch, type KeptGroup } from './batch.ts';
import { collectGroups } from './collect.ts';
import { difficultyMix } from './curriculum.ts';
import { splitStale, type StalenessSplit, type StepPipeline } from './pipeline.ts';
import type { EvalResult } from './run-dir.ts';
import type { Produced, RunContext } from './run-context.ts';
import { evalFigures, noSignalReason, stepMetrics } from './step-metrics.ts';
import { trajectoryTable } from './trackers.ts';

/** Stages 1-4 for one step: the curriculum's levels and the replayed groups, then collectGroups; the curriculum and the buffer learn from the fresh rollouts. */
export async function produceBatch(ctx: RunContext, step: number, signal: AbortSignal): Promise<Produced> {
  const { c, curriculum, replay, sampler } = ctx;
  await ctx.o.beforeRollout?.(step);
  const levels = curriculum?.levels(step);
  const replayed = replay?.draw(step, replay.target(c.tasks_per_step));
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
  // In batch order, from the fresh rollouts (never from training): the same whatever the timing.
  const moves = curriculum?.update(step, got.trajectories) ?? [];
  const replayAdded = replay?.add(step, got.kept) ?? 0;
  return { got, drawsAfter: sampler.draws, levels, moves, curriculumAfter: curriculum?.snapshot(), replayed, replayAdded, replayAfter: replay?.snapshot() };
}

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

/** Stage 6: the advantages and the TrainBatch (batch.ts, a pure function). */
export function buildBatch(ctx: RunContext, f: Filtered): BuiltBatch {
  const built = buildTrainBatch(f.signal, { advantage: ctx.c.advantage, perTurn: ctx.c.per_turn, maxLen: ctx.policy.maxLen });
  if (ctx.c.drop_zero_variance) built.zeroVarianceGroups = f.stale.kept.length - f.signal.length;
  return built;
}

/** What stage 7 did: the learner's metrics (empty when the batch was empty), its seconds, and whether the step is to be checkpointed. */
export interface Learned {
  metrics: Record<string, unknown>;
  seconds: number;
  checkpointDue: boolean;
}

/** The learner's checkpoint of `step`, recorded in the run's state as it is written. */
export function checkpoint(ctx: RunContext, step: number): Promise<string> {
  return ctx.session.saveCheckpoint(step, (dir) => {
    ctx.run.state.checkpoint = dir;
    ctx.run.commit();
  });
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
  try {
    if (built.batch.ids.length > 0) {
      await ctx.o.beforeLearnerStep?.(step, s.connection);
      metrics = (await s.train(built.batch, ctx.learnerConfig)).metrics;
      await s.exportWeights();
    }
  } catch (err) {
    if (await learnerDied(ctx, err, `step ${step}`)) return undefined;
    throw err;
  }
  const seconds = (performance.now() - tl) / 1000;
  // The sampler picks up the new weights between batches: turns in flight keep the version that sampled them.
  await ctx.policy.reload(step, built.batch.ids.length > 0);
  ctx.versions.note(ctx.policy.version(), step);
  if (metrics.ref_reset === true)
    ctx.log(`step ${step}: the reference and the optimizer were reset to the current policy (ref_reset_every ${c.ref_reset_every})`);
  return { metrics, seconds, checkpointDue: step % c.checkpoint_every === 0 || step === c.steps };
}

/** Whether `err` is the learner's death mid-step and it was restarted from the last checkpoint (at most twice a step); the caller then rolls back. */
async function learnerDied(ctx: RunContext, err: unknown, what: string): Promise<boolean> {
  return ++ctx.deathsThisStep <= 2 && (await ctx.session.recover(err, what));
}

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

/** The versions replayed groups may still come from (with replay on), stored with each checkpoint. */
function stateVersions(ctx: RunContext): { versions?: Record<string, number> } {
  const { c, run } = ctx;
  return ctx.replay ? { versions: ctx.versions.since(run.state.step - c.max_staleness - c.replay_max_age - 2) } : {};
}

/** The step's row of metrics.jsonl: the learner's and the rollouts' (stepMetrics), the staleness, timing, curriculum and replay. */
export function stepRecord(
  ctx: RunContext,
  step: number,
  item: Produced,
  f: Filtered,
  built: BuiltBatch,
  learned: Learned,
  waited: number,
): Record<string, unknown> {
  const { c, policy: p } = ctx;
  const stepSeconds = (performance.now() - ctx.clock.stepStart) / 1000;
  const cpu = process.cpuUsage(ctx.clock.cpuStart);
  const { stale, replayedKept } = f;
  const m = stepMetrics(step, learned.metrics, item.got, built, {
    reward: ctx.env.reward.name,
    learnerSeconds: learned.seconds,
    restarts: ctx.session.restarts,
    version: Number(p.version() ?? 0),
  });
  return Object.assign(m, {
    max_staleness: c.max_staleness,
    staleness_hist: stale.histogram,
    staleness_mean: stale.mean,
    staleness_max: stale.max,
    stale_groups_dropped: stale.dropped,
    step_seconds: stepSeconds,
    trainer_cpu_seconds: (cpu.user + cpu.system) / 1e6,
    learner_wait_seconds: waited,
    learner_idle_fraction: stepSeconds > 0 ? Math.min(1, Math.max(0, (stepSeconds - learned.seconds) / stepSeconds)) : 0,
    difficulty_mix: difficultyMix(item.got.trajectories),
    ...(item.levels ? { curriculum_levels: item.levels } : {}),
    ...(item.replayed
      ? {
          replay_groups: replayedKept.length,
          replay_fraction: stale.kept.length ? replayedKept.length / stale.kept.length : 0,
          replay_buffer_size: item.replayAfter!.entries.length,
          replay_added: item.replayAdded,
          replay_evicted: item.replayed.evicted,
          replay_age_mean: item.replayed.ages.length ? mean(item.replayed.ages) : 0,
          replayed_group_ids: replayedKept.map((g) => g.group_id),
        }
      : {}),
  });
}

/**
 * No silent zero: a step whose groups all have equal rewards (nothing to learn from), or whose
 * learner step left the weights bit-identical, is logged (`no_signal` in its row);
 * no_signal_patience of them in a row stop the run: the reason is returned, else undefined.
 */
export function checkSignal(
  ctx: RunContext,
  step: number,
  f: Filtered,
  item: Produced,
  built: BuiltBatch,
  learned: Learned,
  m: Record<string, unknown>,
): string | undefined {
  const { c, run } = ctx;
  const quiet = noSignalReason(f.stale.kept, item.got, built.batch.ids.length > 0 ? learned.metrics : undefined);
  m.no_signal = quiet !== undefined;
  if (!quiet) {
    ctx.quietSteps = 0;
    return undefined;
  }
  ctx.quietSteps++;
  ctx.log(
    `step ${step}: no learning signal: ${quiet}${c.no_signal_patience > 0 ? ` (${ctx.quietSteps} of ${c.no_signal_patience} in a row before the run stops)` : ''}`,
  );
  if (c.no_signal_patience <= 0 || ctx.quietSteps < c.no_signal_patience) return undefined;
  const last = run.state.evals.at(-1);
  return `training stopped at step ${step}: ${ctx.quietSteps} steps in a row without a learning signal; the last: ${quiet}. Check that the policy can solve some of the tasks and others not (held-out success ${(100 * (last?.success ?? 0)).toFixed(1)}% at step ${last?.step ?? 0}), the reward and the learning rate; --no-signal-patience 0 trains on regardless (the run resumes with --resume)`;
}

/** An evaluation's figures and its episodes, not yet written to the run. */
export interface Evaluation {
  figures: EvalResult;
  trajectories: Trajectory[];
}

/** Stage 8: the held-out evaluation at `step` (eval_samples per task); persistStep (or persistEval) writes it. */
export async function evaluateHeldOut(ctx: RunContext, step: number): Promise<Evaluation> {
  const { c } = ctx;
  const te = performance.now();
  const r = await rollout(ctx.env, ctx.policy.policy, ctx.held, { group: c.eval_samples, concurrency: c.concurrency, iteration: `eval.${step}` });
  // Every held-out episode failed (a server that cannot start, broken tasks): no figure to give.
  assertSomeEpisodeRan(r.trajectories, step === 0 ? 'the held-out evaluation before training' : `the held-out evaluation at step ${step}`);
  const figures = evalFigures(step, r.trajectories, c.eval_samples);
  ctx.o.onEval?.((performance.now() - te) / 1000, figures);
  return { figures, trajectories: r.trajectories };
}

/** An evaluation outside a step (before and after the run): its episodes, its row and the run's state (committed by the checkpoint or the run's end that follows), the trackers. */
export function persistEval(ctx: RunContext, ev: Evaluation): EvalResult {
  ctx.run.addEval(ev.figures, ev.trajectories);
  ctx.run.appendRows({ eval: ev.figures });
  sendEval(ctx, ev);
  return ev.figures;
}

function sendEval(ctx: RunContext, { figures: e, trajectories }: Evaluation): void {
  if (!ctx.trackers) return;
  const { trajectories: _file, step: _step, ...values } = e;
  void ctx.trackers.send({ type: 'eval', step: e.step, values: { ...values, ci95_low: e.ci95[0], ci95_high: e.ci95[1] } });
  void ctx.trackers.send({ type: 'table', step: e.step, name: 'eval_trajectories', ...trajectoryTable(trajectories) });
}

/** What a step leaves to persist: its batch, its metrics row, its evaluation if one ran, whether it is checkpointed. */
export interface StepOutcome {
  step: number;
  item: Produced;
  m: Record<string, unknown>;
  evaluated: Evaluation | undefined;
  checkpointDue: boolean;
}

/**
 * Stage 9, every write of a step, in one place and in this order: the evaluation's episodes and the
 * run's state (the step, the sampler's draws, the curriculum, the replay buffer), then the
 * learner's checkpoint when due, which commits state.json with it; then the rows (trajectories,
 * evaluation, metrics), the trackers, the listener and the report. False when the learner died
 * while saving the checkpoint: nothing of the step is in the rows, and the caller rolls back.
 */
export async function persistStep(ctx: RunContext, s: StepOutcome, pipe: StepPipeline<Produced>): Promise<boolean> {
  const { c, run } = ctx;
  const { step, item, m, evaluated } = s;
  if (evaluated) {
    run.addEval(evaluated.figures, evaluated.trajectories);
    m.eval_success = evaluated.figures.success;
    if (evaluated.figures.pass_hat_k) m.eval_pass_hat_k = evaluated.figures.pass_hat_k[String(c.eval_samples)];
  }
  if (item.replayAfter) run.setReplay(step, item.replayAfter);
  run.state.step = step;
  Object.assign(run.state, {
    rng_draws: item.drawsAfter,
    curriculum: item.curriculumAfter,
    ...stateVersions(ctx),
    train_seconds: (performance.now() - ctx.clock.t0) / 1000,
  });
  if (s.checkpointDue) {
    try {
      await checkpoint(ctx, step); // state.json always describes its checkpoint: both are written here, together
    } catch (err) {
      if (await learnerDied(ctx, err, `step ${step}'s checkpoint`)) return false;
      throw err;
    }
  }
  ctx.deathsThisStep = 0;
  run.appendRows({ trajectories: item.got.trajectories, ...(evaluated ? { eval: evaluated.figures } : {}), metrics: m });
  if (evaluated) sendEval(ctx, evaluated);
  if (ctx.trackers) void ctx.trackers.send({ type: 'metrics', step, values: m });
  ctx.o.onStep?.(m);
  run.refreshReport(ctx.title, { config: c, step });
  ctx.clock.stepStart = performance.now();
  ctx.clock.cpuStart = process.cpuUsage();
  pipe.finished(step);
  return true;
}
