/**
 * Rollouts: G episodes per task, run concurrently under a p-limit, written to JSONL as each
 * finishes, gathered into groups with explicit group ids. A run resumed on the same file skips
 * the episodes it already holds, so nothing is repeated or lost.
 */
import pLimit from 'p-limit';
import type { Environment } from './environment.ts';
import { episodeKey, readTrajectories, TrajectoryWriter } from './store.ts';
import type { Task } from './task.ts';
import type { Policy, Trajectory } from './types.ts';

export interface TrajectoryGroup {
  group_id: string;
  task_id: string;
  trajectories: Trajectory[];
  /** Episodes that failed (a crashed server, a failing policy, a failed setup), with the reason. */
  failed: { sample: number; error: string }[];
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

function collectGroup(task: Task, gid: string, G: number, byKey: Map<string, Trajectory>, maxFailures: number): TrajectoryGroup {
  const trajectories: Trajectory[] = [];
  const failed: TrajectoryGroup['failed'] = [];
  for (let sample = 0; sample < G; sample++) {
    const t = byKey.get(`${gid}#${sample}`);
    if (!t) failed.push({ sample, error: 'not run (cancelled)' });
    else if (t.finish === 'error') failed.push({ sample, error: t.error ?? 'failed' });
    else trajectories.push(t);
  }
  return { group_id: gid, task_id: task.id, trajectories, failed, ok: failed.length <= maxFailures };
}

/** G rollouts of one task, gathered as a group; tolerates `maxFailures` failed episodes and reports them. */
export async function gatherGroup(env: Environment, policy: Policy, task: Task, G: number, options: Omit<RolloutOptions, 'group'> = {}): Promise<TrajectoryGroup> {
  const r = await rollout(env, policy, [task], { ...options, group: G });
  return r.groups[0]!;
}

export interface RolloutSummary {
  episodes: number;
  success_rate: number;
  mean_reward: number;
  reward_parts: Record<string, number>;
  mean_turns: number;
  mean_tool_calls: number;
  tool_errors: number;
  tool_error_rate: number;
  failed_episodes: number;
  seconds: number;
  episodes_per_s: number;
  by_family?: Record<string, { episodes: number; success_rate: number }>;
}

export function summarize(trajectories: Trajectory[], seconds: number): RolloutSummary {
  const n = trajectories.length;
  const mean = (f: (t: Trajectory) => number) => (n ? trajectories.reduce((s, t) => s + f(t), 0) / n : 0);
  const parts: Record<string, number> = {};
  for (const t of trajectories) for (const [k, v] of Object.entries(t.reward_parts)) parts[k] = (parts[k] ?? 0) + v;
  for (const k of Object.keys(parts)) parts[k] = Number((parts[k]! / n).toFixed(6));
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
    mean_reward: Number(mean((t) => t.reward).toFixed(6)),
    reward_parts: parts,
    mean_turns: mean((t) => t.metrics.turns),
    mean_tool_calls: mean((t) => t.metrics.tool_calls),
    tool_errors: errors,
    tool_error_rate: calls ? errors / calls : 0,
    failed_episodes: trajectories.filter((t) => t.finish === 'error').length,
    seconds,
    episodes_per_s: seconds > 0 ? n / seconds : 0,
    by_family: fam,
  };
}
