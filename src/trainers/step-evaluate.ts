/** Stage 8 of a step: the held-out evaluation (every eval_every steps, and before and after the run); it writes nothing. */
import { assertSomeEpisodeRan, rollout, type Trajectory } from '../env/index.ts';
import { summarizeEpisodes } from '../../lib/index.ts';
import { mean } from './advantages.ts';
import type { EvalResult } from './run-dir.ts';
import type { RunContext } from './run-context.ts';

/** An evaluation's figures and its episodes, not yet written to the run. */
export interface Evaluation {
  figures: EvalResult;
  trajectories: Trajectory[];
  /** Its wall time. */
  seconds: number;
}

/** Stage 8: the held-out evaluation at `step` (eval_samples per task); persistStep (or persistEval) writes it. */
export async function evaluateHeldOut(ctx: RunContext, step: number): Promise<Evaluation> {
  const { c } = ctx;
  const te = performance.now();
  // eval_temperature: the same model, another sampling temperature (greedy for BFCL's protocol).
  const policy = c.eval_temperature !== undefined && ctx.policy.withSampling ? ctx.policy.withSampling({ temperature: c.eval_temperature }) : ctx.policy.policy;
  const r = await rollout(ctx.env, policy, ctx.held, {
    group: c.eval_samples,
    concurrency: c.concurrency,
    iteration: `eval.${step}`,
    ...(ctx.o.onEvalEpisode ? { onEpisode: (_t: unknown, done: number, total: number) => ctx.o.onEvalEpisode!(done, total) } : {}),
  });
  // Every held-out episode failed (a server that cannot start, broken tasks): no figure to give.
  assertSomeEpisodeRan(r.trajectories, step === 0 ? 'the held-out evaluation before training' : `the held-out evaluation at step ${step}`);
  const figures = evalFigures(step, r.trajectories, c.eval_samples);
  const seconds = (performance.now() - te) / 1000;
  ctx.o.onEval?.(seconds, figures);
  return { figures, trajectories: r.trajectories, seconds };
}

/**
 * A held-out evaluation's figures from its episodes, through the one evaluator
 * (lib/evaluator.ts): success over tasks with its cluster-robust interval, pass@k and pass^k.
 */
export function evalFigures(step: number, trajectories: Trajectory[], K: number): EvalResult {
  const s = summarizeEpisodes(trajectories, K);
  return {
    step,
    success: s.success,
    ci95: s.ci95,
    episodes: s.episodes,
    tasks: s.tasks,
    n_eff: s.n_eff,
    mean_reward: mean(trajectories.map((t) => t.reward)),
    pass_at_k: s.pass_at_k,
    pass_hat_k: s.pass_hat_k,
  };
}
