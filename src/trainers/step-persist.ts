/** Stage 9 of a step: every write of it, in one place (persistStep); persistEval for the evaluations before and after the run; the learner checkpoint. */
import type { StepPipeline } from './pipeline.ts';
import type { EvalResult } from './run-dir.ts';
import type { Produced, RunContext } from './run-context.ts';
import type { Evaluation } from './step-evaluate.ts';
import { trajectoryTable } from './trackers.ts';
import { learnerDied } from './step-learn.ts';

/** The learner's checkpoint of `step`, recorded in the run's state as it is written. */
export function checkpoint(ctx: RunContext, step: number): Promise<string> {
  return ctx.session.saveCheckpoint(step, (dir) => {
    ctx.run.state.checkpoint = dir;
    ctx.run.commit();
  });
}

/** The versions replayed groups may still come from (with replay on), stored with each checkpoint. */
export function stateVersions(ctx: RunContext): { versions?: Record<string, number> } {
  const { c, run } = ctx;
  return ctx.replay ? { versions: ctx.versions.since(run.state.step - c.max_staleness - c.replay_max_age - 2) } : {};
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
 * learner's checkpoint when due, which commits state.json with it (the next step's batch may start
 * as it is written: the write overlaps its rollouts); then the rows (trajectories,
 * evaluation, metrics), the trackers, the listener and the report. False when the learner died
 * while saving the checkpoint: nothing of the step is in the rows, and the caller rolls back.
 */
export async function persistStep(ctx: RunContext, s: StepOutcome, pipe: StepPipeline<Produced>): Promise<boolean> {
  const { c, run } = ctx;
  const { step, item, m, evaluated } = s;
  if (evaluated) {
    run.addEval(evaluated.figures, evaluated.trajectories);
    m.eval_seconds = evaluated.seconds;
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
    // The next step's rollouts start now, while the learner writes the checkpoint (its weights are
    // reloaded and its evaluation is done): the write (seconds of serialising and fsync) overlaps them.
    // The rows below still wait for the checkpoint, and a learner that dies writing it rolls the
    // run back as before (the rollouts in flight are the work lost).
    nextMayStart(ctx, step, pipe);
    const tc = performance.now();
    try {
      await checkpoint(ctx, step); // state.json always describes its checkpoint: both are written here, together
      m.checkpoint_seconds = (performance.now() - tc) / 1000;
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
  if (!s.checkpointDue) nextMayStart(ctx, step, pipe);
  return true;
}

/** The step is trained, its weights reloaded, its evaluation done: the next step's clock starts and its batch may be collected. */
function nextMayStart(ctx: RunContext, step: number, pipe: StepPipeline<Produced>): void {
  ctx.clock.stepStart = performance.now();
  ctx.clock.cpuStart = process.cpuUsage();
  pipe.finished(step);
}
