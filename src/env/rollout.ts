/**
 * Rollouts: G episodes per task, run concurrently under a p-limit, written to JSONL as each
 * finishes, gathered into groups with explicit group ids. A run resumed on the same file skips
 * the episodes it already holds, so nothing is repeated or lost; it refuses a file whose episodes
 * another policy or reward made, or a bigger group, so that runs cannot be mixed.
 */
import pLimit from 'p-limit';
import type { Environment } from './environment.ts';
import { episodeKey, readTrajectories, TrajectoryWriter } from './store.ts';
import type { Task } from './task.ts';
import type { ErrorKind, Policy, Trajectory } from './types.ts';
import { AllEpisodesFailed, EXIT, RunFailure, StartFailure } from '../../lib/index.ts';

export interface TrajectoryGroup {
  group_id: string;
  task_id: string;
  trajectories: Trajectory[];
  /** Episodes that failed (a crashed server, a failing policy, a failed setup, a broken task), with the reason. */
  failed: { sample: number; error: string; task_error?: true }[];
  /** At most `maxFailures` episodes failed. */
  ok: boolean;
}

export interface RolloutOptions {
  /** Episodes per task (the group size G). Default 1. */
  group?: number;
  /** Episodes at once. Default 8. */
  concurrency?: number;
  /** JSONL file the trajectories are appended to. */
  out?: string;
  /** Keep the trajectories already in `out` and run only the missing episodes. */
  resume?: boolean;
  runId?: string;
  /** Part of every group id (`<task>@<iteration>`): a training step and round, say (`train.3.0`). Default 0. */
  iteration?: number | string;
  /** A group with more failed episodes than this is not ok. Default: G − 2 (GRPO needs 2). */
  maxFailures?: number;
  signal?: AbortSignal;
  onEpisode?: (t: Trajectory, done: number, total: number) => void;
}

export interface RolloutResult {
  groups: TrajectoryGroup[];
  trajectories: Trajectory[];
  /** Episodes found in `out` and not run again. */
  resumed: number;
  seconds: number;
}

export function groupId(task: Task, iteration: number | string = 0): string {
  return `${task.id}@${iteration}`;
}

export async function rollout(env: Environment, policy: Policy, tasks: Task[], options: RolloutOptions = {}): Promise<RolloutResult> {
  const G = options.group ?? 1;
  const iteration = options.iteration ?? 0;
  const t0 = performance.now();
  const byKey = new Map<string, Trajectory>();
  if (options.out && options.resume) {
    for (const t of readTrajectories(options.out)) byKey.set(episodeKey(t), t);
    const mixed = resumeMismatch([...byKey.values()], { policy: policy.id, reward: env.reward.name, group: G });
    if (mixed) throw new Error(`resume: ${options.out} ${mixed}; continue it with the same settings, or write to another file`);
  }
  const resumed = byKey.size;
  const writer = options.out ? new TrajectoryWriter(options.out) : undefined;
  const limit = pLimit(Math.max(1, options.concurrency ?? 8));
  const total = tasks.length * G;
  let done = resumed;
  try {
    const jobs: Promise<void>[] = [];
    for (const task of tasks) {
      const gid = groupId(task, iteration);
      for (let sample = 0; sample < G; sample++) {
        if (byKey.has(`${gid}#${sample}`)) continue;
        jobs.push(
          limit(async () => {
            if (options.signal?.aborted) return;
            const t = await env.runEpisode(task, policy, { groupId: gid, sample, runId: options.runId, signal: options.signal });
            if (options.signal?.aborted && t.finish === 'error') return; // cut short: not finished, so not written
            writer?.write(t);
            byKey.set(episodeKey(t), t);
            options.onEpisode?.(t, ++done, total);
          }),
        );
      }
    }
    await Promise.all(jobs);
  } finally {
    writer?.close();
  }
  const trajectories = [...byKey.values()];
  const maxFailures = options.maxFailures ?? Math.max(0, G - 2);
  const groups = tasks.map((task) => collectGroup(task, groupId(task, iteration), G, byKey, maxFailures));
  return { groups, trajectories, resumed, seconds: (performance.now() - t0) / 1000 };
}

/** Why the episodes of a file cannot be continued with these settings, or undefined when they can. */
export function resumeMismatch(held: Trajectory[], now: { policy: string; reward: string; group: number }): string | undefined {
  for (const t of held) {
    if (t.policy?.id !== undefined && t.policy.id !== now.policy) return `holds episodes of the policy '${t.policy.id}', not '${now.policy}'`;
    if (t.reward_name !== undefined && t.reward_name !== now.reward) return `holds episodes scored with the reward '${t.reward_name}', not '${now.reward}'`;
    if (t.sample >= now.group) return `holds sample ${t.sample} of group ${t.group_id}: it was run with a group bigger than ${now.group}`;
  }
  return undefined;
}

function collectGroup(task: Task, gid: string, G: number, byKey: Map<string, Trajectory>, maxFailures: number): TrajectoryGroup {
  const trajectories: Trajectory[] = [];
  const failed: TrajectoryGroup['failed'] = [];
  for (let sample = 0; sample < G; sample++) {
    const t = byKey.get(`${gid}#${sample}`);
    if (!t) failed.push({ sample, error: 'not run (cancelled)' });
    else if (t.finish === 'error') failed.push({ sample, error: t.error ?? 'failed', ...(t.task_error ? { task_error: true as const } : {}) });
    else trajectories.push(t);
  }
  return { group_id: gid, task_id: task.id, trajectories, failed, ok: failed.length <= maxFailures };
}

/** G rollouts of one task, gathered as a group; tolerates `maxFailures` failed episodes and reports them. */
export async function gatherGroup(
  env: Environment,
  policy: Policy,
  task: Task,
  G: number,
  options: Omit<RolloutOptions, 'group'> = {},
): Promise<TrajectoryGroup> {
  const r = await rollout(env, policy, [task], { ...options, group: G });
  return r.groups[0]!;
}

/** Failed episodes that share a cause: the first line of their error. */
export interface FailureCause {
  cause: string;
  /** `task_error`: the task is broken (a setup call or check that cannot run); `error`: the episode failed (a server, the policy, the reward). */
  kind: 'error' | 'task_error';
  /** What failed (the trajectories' error_kind): server_start, server, policy, task, reward, replay, other. */
  error_kind?: ErrorKind;
  episodes: number;
  /** The id of one such episode, to look it up in the trajectories. */
  example: string;
}

/** The first line of an error, at most 300 characters. */
function firstLine(error: string | undefined): string {
  const line = (error ?? 'failed (no error recorded)').split('\n', 1)[0]!.trim();
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

/** The failed episodes (finish `error`, task errors included) grouped by cause, most frequent first. */
export function failureCauses(trajectories: Trajectory[]): FailureCause[] {
  const by = new Map<string, FailureCause>();
  for (const t of trajectories) {
    if (t.finish !== 'error') continue;
    const kind = t.task_error ? 'task_error' : 'error';
    const cause = firstLine(t.error);
    const key = `${kind}\0${cause}`;
    const f = by.get(key);
    if (f) f.episodes++;
    else by.set(key, { cause, kind, ...(t.error_kind ? { error_kind: t.error_kind } : {}), episodes: 1, example: t.id });
  }
  return [...by.values()].sort((a, b) => b.episodes - a.episodes || a.cause.localeCompare(b.cause));
}

/**
 * Throws when every one of the episodes failed (none ran to an answer or its turn limit): a
 * StartFailure (exit 3) when the tool servers could not be started, a RunFailure with the usage
 * status (2) when every task is broken, else AllEpisodesFailed (4); the message names `what`
 * and the causes, most frequent first. No episodes at all is no failure.
 */
export function assertSomeEpisodeRan(trajectories: Trajectory[], what: string): void {
  if (trajectories.length === 0 || trajectories.some((t) => t.finish !== 'error')) return;
  throw allFailed(what, trajectories.length, failureCauses(trajectories));
}

/** The failure of `what`, whose `episodes` episodes all failed, by their causes (failureCauses). */
export function allFailed(what: string, episodes: number, causes: FailureCause[]): RunFailure {
  const list = causes
    .slice(0, 3)
    .map((c) => `${c.episodes} x ${c.cause}`)
    .join('\n  ');
  const more = causes.length > 3 ? `\n  (${causes.length - 3} more causes)` : '';
  const head = `${what}: every one of the ${episodes} episodes failed`;
  if (causes.length > 0 && causes.every((c) => c.error_kind === 'server_start'))
    return new StartFailure(`${head}: a tool server could not be started:\n  ${list}${more}`);
  if (causes.length > 0 && causes.every((c) => c.kind === 'task_error')) return new RunFailure(`${head}: the tasks are broken:\n  ${list}${more}`, EXIT.usage);
  return new AllEpisodesFailed(`${head}:\n  ${list}${more}`);
}

export interface RolloutSummary {
  episodes: number;
  /** Successes over all episodes (a failed one is no success). */
  success_rate: number;
  /** Over the scored episodes: failed ones and task errors are left out (they score 0 with no parts). */
  mean_reward: number;
  reward_parts: Record<string, number>;
  /** Episodes that ran to an answer or to max_turns, and were scored. */
  scored_episodes: number;
  mean_turns: number;
  mean_tool_calls: number;
  tool_errors: number;
  tool_error_rate: number;
  /** Episodes that failed (a server, the policy, the reward), task errors not included. */
  failed_episodes: number;
  /** Episodes of broken tasks (a setup call or a check that cannot run): the task author's bug, not the agent's. */
  task_errors: number;
  /** Failed episodes and task errors by cause, most frequent first. */
  failures: FailureCause[];
  seconds: number;
  episodes_per_s: number;
  by_family?: Record<string, { episodes: number; success_rate: number }>;
}

export function summarize(trajectories: Trajectory[], seconds: number): RolloutSummary {
  const n = trajectories.length;
  const mean = (f: (t: Trajectory) => number) => (n ? trajectories.reduce((s, t) => s + f(t), 0) / n : 0);
  const scored = trajectories.filter((t) => t.finish !== 'error');
  const parts: Record<string, number> = {};
  for (const t of scored) for (const [k, v] of Object.entries(t.reward_parts)) parts[k] = (parts[k] ?? 0) + v;
  for (const k of Object.keys(parts)) parts[k] = Number((parts[k]! / scored.length).toFixed(6));
  const calls = trajectories.reduce((s, t) => s + t.metrics.tool_calls, 0);
  const errors = trajectories.reduce((s, t) => s + t.metrics.tool_errors, 0);
  const fam: Record<string, { episodes: number; success_rate: number }> = {};
  for (const t of trajectories) {
    const f = (fam[t.family ?? t.task_id.split('-')[0]!] ??= { episodes: 0, success_rate: 0 });
    f.episodes++;
    f.success_rate += t.success ? 1 : 0;
  }
  for (const f of Object.values(fam)) f.success_rate /= f.episodes;
  return {
    episodes: n,
    success_rate: mean((t) => (t.success ? 1 : 0)),
    mean_reward: Number((scored.length ? scored.reduce((s, t) => s + t.reward, 0) / scored.length : 0).toFixed(6)),
    reward_parts: parts,
    scored_episodes: scored.length,
    mean_turns: mean((t) => t.metrics.turns),
    mean_tool_calls: mean((t) => t.metrics.tool_calls),
    tool_errors: errors,
    tool_error_rate: calls ? errors / calls : 0,
    failed_episodes: trajectories.filter((t) => t.finish === 'error' && !t.task_error).length,
    task_errors: trajectories.filter((t) => t.finish === 'error' && t.task_error).length,
    failures: failureCauses(trajectories),
    seconds,
    episodes_per_s: seconds > 0 ? n / seconds : 0,
    by_family: fam,
  };
}
