/**
 * The training loop, one for every preset (docs/training.md, "The training loop"): the one place the
 * stages of a step (a file each, step-*.ts) are composed, top to bottom:
 *   sample tasks -> roll out -> score -> filter (collectGroups, run ahead by the pipeline)
 *   -> filter for the learner -> build the batch -> learn -> evaluate -> persist
 * over what a run holds (run-context.ts: the run directory, the learner session, the policy). A learner that dies is restarted from the last checkpoint
 * and the run rolls back to it; a run stopped (Ctrl-C) or killed resumes from its last
 * checkpoint with `resume`.
 */
import { NoLearningSignal } from '../../lib/index.ts';
import { closeRun, openRun, runConfig, type Closers, type RunContext, type TrainOptions, type TrainResult } from './run-context.ts';
import { RunDir, type EvalResult } from './run-dir.ts';
import { buildBatch } from './step-build.ts';
import { evaluateHeldOut } from './step-evaluate.ts';
import { filterGroups, logRollouts } from './step-filter.ts';
import { learn } from './step-learn.ts';
import { checkpoint, persistEval, persistStep } from './step-persist.ts';
import { produceBatch } from './step-produce.ts';
import { recordStep } from './step-record.ts';
import { rollBack } from './step-rollback.ts';

/** The final held-out evaluation of a run that ran to its end; throws, saying so, for a stopped one. */
export function finalEval(r: TrainResult): EvalResult {
  if (!r.after) throw new Error(`the run in ${r.runDir} stopped at step ${r.steps} before its end: no final evaluation ran (continue it with resume)`);
  return r.after;
}

export async function train(o: TrainOptions): Promise<TrainResult> {
  const c = runConfig(o);
  const run = new RunDir(o.runDir, { resume: o.resume === true, model: c.model, config: c });
  const closers: Closers = { run };
  try {
    const ctx = await openRun(o, run, c, closers, produceBatch);
    const log = ctx.log;
    if (!o.resume || run.state.evals.length === 0) {
      const evaluated = await evaluateHeldOut(ctx, 0);
      // The evaluation before training is not training time (train_seconds, the time budget) nor step 1's.
      ctx.clock.t0 += evaluated.seconds * 1000;
      const before = persistEval(ctx, evaluated);
      log(
        `held-out success before: ${(100 * before.success).toFixed(1)}% [${(100 * before.ci95[0]).toFixed(1)}, ${(100 * before.ci95[1]).toFixed(1)}] over ${before.episodes} episodes`,
      );
      run.refreshReport(ctx.title, { config: c, step: run.state.step });
    }
    // Step 0's checkpoint: a learner that dies before the first periodic one restarts from here.
    if (!run.state.checkpoint) {
      await checkpoint(ctx, 0).catch(async (err) => {
        if (!(await ctx.session.recover(err, 'the first checkpoint'))) throw err;
        await checkpoint(ctx, 0);
      });
    }
    ctx.clock.stepStart = performance.now();
    ctx.clock.cpuStart = process.cpuUsage();
    const ran = await trainSteps(ctx, closers);
    return await finish(ctx, ran);
  } catch (err) {
    run.markStatus('failed', err instanceof Error ? err.message : String(err));
    throw err;
  } finally {
    await closeRun(closers);
  }
}

/** How the steps ended: the time budget spent, or training stopped for want of a learning signal (the reason). */
interface Ran {
  budgetSpent: boolean;
  noSignalStop?: string;
}

/** The steps, each through the stages in order, until the last step, Ctrl-C, the time budget or no_signal_patience. */
async function trainSteps(ctx: RunContext, closers: Closers): Promise<Ran> {
  const { c, run, o } = ctx;
  let pipe = ctx.startPipeline();
  closers.stopPipeline = () => pipe.stop();
  while (run.state.step < c.steps) {
    if (o.signal?.aborted) break;
    if (c.time_budget_minutes > 0 && run.state.train_seconds >= c.time_budget_minutes * 60) {
      ctx.log(
        `the time budget of ${c.time_budget_minutes} minutes is spent after step ${run.state.step} (${(run.state.train_seconds / 60).toFixed(1)} minutes): training ends here`,
      );
      return { budgetSpent: true };
    }
    const step = run.state.step + 1;
    const tw = performance.now();
    const item = await pipe.next(step); // 1-4: sample tasks -> roll out -> score -> filter (produceBatch, ahead)
    if (!item) break;
    const waited = (performance.now() - tw) / 1000;
    logRollouts(ctx, step, item);
    const tb = performance.now();
    const kept = filterGroups(ctx, step, item); // 5: too stale, no signal
    const built = buildBatch(ctx, kept); // 6: advantages, the TrainBatch
    const batch = (performance.now() - tb) / 1000;
    const learned = await learn(ctx, step, built); // 7: the learner's step, the new weights
    const recorded = learned && recordStep(ctx, step, item, kept, built, learned, { waited, batch }); // the step's row, the no-silent-zero check
    const evalDue = recorded && !recorded.noSignalStop && c.eval_every > 0 && step % c.eval_every === 0 && step < c.steps;
    const evaluated = evalDue ? await evaluateHeldOut(ctx, step) : undefined; // 8: held out, every eval_every steps
    // 9: every write of the step; the learner died (in 7, or at the checkpoint in 9) and restarted: back to its last checkpoint
    if (!learned || !recorded || !(await persistStep(ctx, { step, item, m: recorded.m, evaluated, checkpointDue: learned.checkpointDue }, pipe))) {
      pipe = await rollBack(ctx, pipe);
      continue;
    }
    const { noSignalStop } = recorded;
    if (noSignalStop) {
      await pipe.stop();
      return { budgetSpent: false, noSignalStop };
    }
  }
  await pipe.stop();
  return { budgetSpent: false };
}

/** The end of a run: a checkpoint of what is done when it stopped early, then the final evaluation (or the reason it has none). */
async function finish(ctx: RunContext, ran: Ran): Promise<TrainResult> {
  const { c, run, session: s } = ctx;
  const stopped = run.state.step < c.steps && !ran.budgetSpent;
  // Ctrl-C (or the time budget): a checkpoint of what is done, so that `resume` continues from here.
  if (run.state.step < c.steps && !run.state.checkpoint?.endsWith(String(run.state.step).padStart(5, '0'))) {
    await checkpoint(ctx, run.state.step).catch((err) => {
      if (s.connection.alive) throw err;
      ctx.log(`the learner died while saving step ${run.state.step}'s checkpoint; --resume continues from ${run.state.checkpoint}`);
    });
  }
  if (ran.noSignalStop) {
    run.refreshReport(ctx.title, { config: c, step: run.state.step });
    throw new NoLearningSignal(ran.noSignalStop);
  }
  if (stopped) {
    run.refreshReport(ctx.title, { config: c, step: run.state.step });
    ctx.log(`stopped at step ${run.state.step}; continue with --resume`);
    run.markStatus('stopped');
    // No final evaluation ran: `after` is absent, never a copy of an earlier one.
    return { runDir: run.dir, before: run.state.evals[0]!, steps: run.state.step, train_seconds: run.state.train_seconds, report: run.report, stopped };
  }
  const last = run.state.evals.at(-1);
  const after = last && last.step === run.state.step && run.state.evals.length > 1 ? last : persistEval(ctx, await evaluateHeldOut(ctx, run.state.step));
  run.commit();
  const result: TrainResult = {
    runDir: run.dir,
    before: run.state.evals[0]!,
    after,
    steps: run.state.step,
    train_seconds: run.state.train_seconds,
    report: run.report,
    stopped,
  };
  run.refreshReport(ctx.title, { before: result.before, after: result.after, train_seconds: result.train_seconds, steps: result.steps, config: c });
  run.markStatus('finished');
  return result;
}
