/**
 * A step's figures: a held-out evaluation's (through the one evaluator, lib/evaluator.ts), the
 * row of metrics.jsonl, and why a step had no learning signal.
 */
import { failureCauses, meanRewardParts, type Trajectory } from '../env/index.ts';
import { summarizeEpisodes } from '../../lib/index.ts';
import { isZeroVariance, mean, std } from './advantages.ts';
import type { BuiltBatch } from './batch.ts';
import type { Collected } from './collect.ts';
import type { EvalResult } from './run-dir.ts';

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

/**
 * Why a step gave the learner nothing to learn from, or undefined when it did: every kept group's
 * rewards equal (every episode failed, or every group all failed / all solved), or the learner's
 * step (`learner`, its metrics; undefined when no batch was sent) left the weights bit-identical.
 */
export function noSignalReason(groups: { trajectories: Trajectory[] }[], got: Collected, learner: Record<string, unknown> | undefined): string | undefined {
  if (learner && learner.weights_changed === false)
    return `the learner's step left the weights bit-identical (lr ${String(learner.lr)}; grad norm ${String(learner.grad_norm)}): its updates are 0 or below the weights' precision`;
  if (groups.some((g) => !isZeroVariance(g.trajectories.map((t) => t.reward)))) return undefined;
  const all = got.trajectories;
  if (all.length > 0 && all.every((t) => t.finish === 'error')) {
    const top = failureCauses(all)[0];
    return `every one of the ${all.length} episodes failed${top ? ` (${top.episodes} x ${top.cause})` : ''}`;
  }
  const solved = groups.filter((g) => g.trajectories.every((t) => t.success)).length;
  const failed = groups.filter((g) => g.trajectories.every((t) => !t.success)).length;
  const dropped = got.droppedNoSignal > 0 ? `; ${got.droppedNoSignal} more dropped by dynamic sampling for the same reason` : '';
  return `every one of the ${groups.length} groups had equal rewards (${failed} all failed, ${solved} all solved, ${groups.length - failed - solved} other)${dropped}`;
}

/** A step's row of metrics.jsonl: the learner's metrics, then the loop's (which win where both use a name). */
export function stepMetrics(
  step: number,
  learner: Record<string, unknown>,
  got: Collected,
  built: BuiltBatch,
  o: { reward: string; learnerSeconds: number; restarts: number; version: number },
): Record<string, unknown> {
  const all = got.trajectories;
  const scored = all.filter((t) => t.finish !== 'error'); // failed episodes and task errors are counted apart
  const calls = all.reduce((n, t) => n + t.metrics.tool_calls, 0);
  const policyTokens = all.reduce((n, t) => n + t.metrics.policy_tokens, 0);
  // What an API policy's server counted (policy openai:...): the step's requests' tokens.
  const billed = all
    .flatMap((t) => t.turns)
    .reduce((u, turn) => ({ prompt: u.prompt + (turn.usage?.prompt_tokens ?? 0), completion: u.completion + (turn.usage?.completion_tokens ?? 0) }), {
      prompt: 0,
      completion: 0,
    });
  const drift = all.reduce((n, t) => n + t.turns.filter((turn) => turn.token_drift !== undefined).length, 0);
  return {
    ...learner,
    step,
    reward: o.reward,
    reward_mean: mean(scored.map((t) => t.reward)),
    reward_std: std(scored.map((t) => t.reward)),
    success_rate: mean(all.map((t) => (t.success ? 1 : 0))),
    episodes: all.length,
    groups_seen: got.groupsSeen,
    groups_kept: got.kept.length,
    dropped_fraction: got.groupsSeen ? (got.droppedNoSignal + got.droppedTooFew + got.droppedJudge) / got.groupsSeen : 0,
    dropped_no_signal: got.droppedNoSignal,
    dropped_too_few: got.droppedTooFew,
    judge_failures: got.droppedJudge,
    judge_calls: got.judgeCalls,
    judge_cached: got.judgeCached,
    ruler_mean: mean(all.filter((t) => t.reward_parts.ruler !== undefined).map((t) => t.reward_parts.ruler!)),
    reward_parts_mean: meanRewardParts(scored), // every part, built-in and registered (registerRewardPart)
    sampling_rounds: got.rounds,
    batch_full: got.full,
    zero_variance_groups: built.zeroVarianceGroups,
    too_long_dropped: built.tooLong,
    turns_mean: mean(all.map((t) => t.metrics.turns)),
    tool_calls: calls,
    tool_error_rate: calls ? all.reduce((n, t) => n + t.metrics.tool_errors, 0) / calls : 0,
    failed_episodes: all.filter((t) => t.finish === 'error' && !t.task_error).length,
    task_errors: all.filter((t) => t.task_error).length,
    policy_tokens_mean: all.length ? policyTokens / all.length : 0,
    rollout_tokens_per_s: got.seconds > 0 ? policyTokens / got.seconds : 0,
    ...(billed.prompt + billed.completion > 0 ? { api_prompt_tokens: billed.prompt, api_completion_tokens: billed.completion } : {}),
    ...(drift > 0 ? { token_drift_turns: drift } : {}),
    rollout_seconds: got.seconds,
    learner_seconds: o.learnerSeconds,
    learner_restarts: o.restarts,
    policy_version: o.version,
  };
}
