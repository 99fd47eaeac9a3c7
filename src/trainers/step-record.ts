/**
 * Between learning and evaluation: the step's row of metrics.jsonl (the learner's and the rollouts'
 * figures, staleness, timing, curriculum, replay) and the no-silent-zero check (why a step had no
 * learning signal). A held-out evaluation's figures are in step-evaluate.ts.
 */
import type { FleetServerStats } from '../agents/index.ts';
import { failureCauses, meanRewardParts, type Trajectory } from '../env/index.ts';
import { isZeroVariance, mean, std } from './advantages.ts';
import type { BuiltBatch } from './batch.ts';
import type { Collected } from './collect.ts';
import { difficultyMix } from './curriculum.ts';
import type { Produced, RunContext } from './run-context.ts';
import type { Filtered } from './step-filter.ts';
import type { Learned } from './step-learn.ts';

/** What the record stage gives: the step's row of metrics.jsonl, and the reason the run stops for want of a learning signal (else undefined). */
export interface Recorded {
  m: Record<string, unknown>;
  noSignalStop: string | undefined;
}

/** The step's row (stepRecord) and the no-silent-zero check (checkSignal), which marks it. */
export function recordStep(ctx: RunContext, step: number, item: Produced, f: Filtered, built: BuiltBatch, learned: Learned, t: StepTimes): Recorded {
  const m = stepRecord(ctx, step, item, f, built, learned, t);
  return { m, noSignalStop: checkSignal(ctx, step, f, item, built, learned, m) };
}

/** What the loop timed of a step: the wait for its batch (the rollouts, in the synchronous loop) and the filtering and batch building. */
export interface StepTimes {
  waited: number;
  batch: number;
}

/**
 * Where a step's seconds went (docs/training.md, "Time"): the in-process sampler's prefill and decode
 * graph runs, the episodes' tool calls and scoring (summed over episodes that run concurrently: busy
 * seconds, not wall), the batch building, the learner's export and the policy's reload; the
 * learner's own split (forward_backward_seconds, optimizer_seconds) comes with its metrics, and
 * persistStep adds checkpoint_seconds and eval_seconds.
 */
export function stepProfile(item: Produced, learned: Learned, t: StepTimes): Record<string, number> {
  const eps = item.got.trajectories;
  const sum = (f: (x: Trajectory) => number) => eps.reduce((s, x) => s + f(x), 0) / 1000;
  return {
    ...(item.samplerSeconds
      ? {
          prefill_seconds: item.samplerSeconds.prefill,
          decode_seconds: item.samplerSeconds.decode,
          prefill_calls: item.samplerSeconds.prefill_calls,
          decode_steps: item.samplerSeconds.decode_calls,
          // rows a decode step ran on average (continuous batching: rows join and leave between steps)
          decode_rows_mean: item.samplerSeconds.decode_calls ? item.samplerSeconds.decode_rows / item.samplerSeconds.decode_calls : 0,
        }
      : {}),
    tool_seconds: sum((x) => x.timings.tool_ms),
    score_seconds: sum((x) => x.timings.score_ms ?? 0),
    batch_seconds: t.batch,
    export_seconds: learned.exportSeconds,
    reload_seconds: learned.reloadSeconds,
  };
}

/** The step's row of metrics.jsonl: the learner's and the rollouts' (stepMetrics), the staleness, timing, curriculum and replay. */
function stepRecord(ctx: RunContext, step: number, item: Produced, f: Filtered, built: BuiltBatch, learned: Learned, t: StepTimes): Record<string, unknown> {
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
  const servers = p.servers ? serverFigures(ctx, p.servers(), item.got.trajectories) : undefined;
  if (servers && Object.keys(servers).length > 1) ctx.log(`step ${step}: ${serverLine(servers)}`);
  return Object.assign(m, {
    ...(servers ? { policy_servers: servers, policy_servers_healthy: Object.values(servers).filter((x) => x.healthy).length } : {}),
    max_staleness: c.max_staleness,
    staleness_hist: stale.histogram,
    staleness_mean: stale.mean,
    staleness_max: stale.max,
    stale_groups_dropped: stale.dropped,
    step_seconds: stepSeconds,
    trainer_cpu_seconds: (cpu.user + cpu.system) / 1e6,
    learner_wait_seconds: t.waited,
    ...stepProfile(item, learned, t),
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

/** One server's figures in a step's row (`policy_servers`, by URL). */
export interface ServerFigures {
  /** The step's training turns it sampled (from the trajectories' policy_server). */
  turns: number;
  /** Since the previous row: requests that failed there, times it was taken out, weight loads it answered. */
  failed_requests: number;
  failures: number;
  pushes: number;
  healthy: boolean;
  state: FleetServerStats['state'];
  /** The version of the weights it samples with now. */
  version?: string | number;
  last_error?: string;
}

/** Each run's servers' counts at its previous row: the next row's are the differences. */
const previousCounts = new WeakMap<object, Map<string, FleetServerStats>>();

/** The servers' figures of a step's row (a served policy): turns from the step's trajectories, counts since the previous row. */
export function serverFigures(ctx: Pick<RunContext, 'policy'>, stats: FleetServerStats[], trajectories: Trajectory[]): Record<string, ServerFigures> {
  const turns = new Map<string, number>();
  for (const t of trajectories) for (const u of t.turns) if (u.policy_server !== undefined) turns.set(u.policy_server, (turns.get(u.policy_server) ?? 0) + 1);
  const before = previousCounts.get(ctx.policy);
  previousCounts.set(ctx.policy, new Map(stats.map((x) => [x.url, x])));
  return Object.fromEntries(
    stats.map((x) => {
      const was = before?.get(x.url);
      return [
        x.url,
        {
          turns: turns.get(x.url) ?? 0,
          failed_requests: x.failed_requests - (was?.failed_requests ?? 0),
          failures: x.failures - (was?.failures ?? 0),
          pushes: x.pushes - (was?.pushes ?? 0),
          healthy: x.healthy,
          state: x.state,
          ...(x.version !== undefined ? { version: x.version } : {}),
          ...(!x.healthy && x.last_error !== undefined ? { last_error: x.last_error } : {}),
        },
      ];
    }),
  );
}

/** The servers in one line: each one's turns this step and its weights, or why it is out. */
export function serverLine(servers: Record<string, ServerFigures>): string {
  return `servers: ${Object.entries(servers)
    .map(
      ([url, x]) =>
        `${url} ${x.turns} turns${x.healthy ? (x.version !== undefined ? ` (v${x.version})` : '') : ` (${x.state}${x.last_error ? `: ${x.last_error.slice(0, 120)}` : ''})`}`,
    )
    .join('; ')}`;
}

/**
 * No silent zero: a step whose groups all have equal rewards (nothing to learn from), or whose
 * learner step left the weights bit-identical, is logged (`no_signal` in its row);
 * no_signal_patience of them in a row stop the run: the reason is returned, else undefined.
 */
function checkSignal(
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
