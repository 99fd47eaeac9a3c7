/**
 * Agent success: K rollouts of each task through the environment, and per task the success
 * rate, pass@k (at least one of k draws succeeds, the unbiased estimator 1 − C(n−c, k)/C(n, k))
 * and pass^k (all k draws succeed, C(c, k)/C(n, k)), turns, tool calls, tool errors and latency;
 * averaged over the tasks. Failed episodes are counted apart from task errors (a broken task, not
 * the agent's failure), and both are grouped by cause with the first line of their error.
 */
import { Environment, failureCauses, rollout, type EnvironmentOptions, type FailureCause, type Policy, type Task, type Trajectory } from '../env/index.ts';

export { passAtK, passHatK } from '../../lib/index.ts';
import { passAtK, passHatK, rateOverTasks } from '../../lib/index.ts';
import { toolFeedback, type Feedback } from './feedback.ts';

export interface TaskAgentStats {
  task: string;
  runs: number;
  successes: number;
  success_rate: number;
  /** pass@k for k = 1..runs (index k − 1). */
  pass_at: number[];
  /** pass^k for k = 1..runs. */
  pass_hat: number[];
  mean_turns: number;
  mean_tool_calls: number;
  tool_errors: number;
  /** Mean wall time of an episode, ms. */
  mean_episode_ms: number;
  /** Mean wall time of a tool call, ms. */
  mean_tool_ms: number;
  /** Episodes that failed (a server, the policy), task errors not included. */
  failed_episodes: number;
  /** Episodes of this task that could not be checked because the task is broken. */
  task_errors: number;
}

export interface AgentReport {
  policy: string;
  k: number;
  tasks: number;
  episodes: number;
  success_rate: number;
  /** success_rate's 95% interval, cluster-robust over tasks (lib/evaluator.ts). */
  success_ci95: [number, number];
  /** Averaged over tasks, by k = 1..K: `{"1": ..., "K": ...}`. */
  pass_at_k: Record<string, number>;
  pass_hat_k: Record<string, number>;
  mean_turns: number;
  mean_tool_calls: number;
  tool_errors: number;
  tool_error_rate: number;
  mean_episode_ms: number;
  mean_tool_ms: number;
  failed_episodes: number;
  task_errors: number;
  /** Failed episodes and task errors by cause (the first line of the error), most frequent first. */
  failures: FailureCause[];
  seconds: number;
  per_task: TaskAgentStats[];
  /** Per tool of each server: calls, argument errors by field, errors, empty results, time (src/bench/feedback.ts); set by runAgentBench. */
  feedback?: Feedback;
}

/** The statistics of one task's trajectories (`k` = how many were asked for). */
export function taskStats(task: string, trajectories: Trajectory[]): TaskAgentStats {
  const n = trajectories.length;
  const c = trajectories.filter((t) => t.success).length;
  const mean = (f: (t: Trajectory) => number) => (n ? trajectories.reduce((s, t) => s + f(t), 0) / n : 0);
  const calls = trajectories.reduce((s, t) => s + t.metrics.tool_calls, 0);
  const toolMs = trajectories.reduce((s, t) => s + t.timings.tool_ms, 0);
  const ks = Array.from({ length: n }, (_, i) => i + 1);
  return {
    task,
    runs: n,
    successes: c,
    success_rate: n ? c / n : 0,
    pass_at: ks.map((k) => passAtK(n, c, k)),
    pass_hat: ks.map((k) => passHatK(n, c, k)),
    mean_turns: mean((t) => t.metrics.turns),
    mean_tool_calls: mean((t) => t.metrics.tool_calls),
    tool_errors: trajectories.reduce((s, t) => s + t.metrics.tool_errors, 0),
    mean_episode_ms: mean((t) => t.timings.total_ms),
    mean_tool_ms: calls ? toolMs / calls : 0,
    failed_episodes: trajectories.filter((t) => t.finish === 'error' && !t.task_error).length,
    task_errors: trajectories.filter((t) => t.finish === 'error' && t.task_error).length,
  };
}

/** Averages per-task statistics into a report; `failures` are the failed episodes by cause (failureCauses). */
export function agentReport(policy: string, k: number, perTask: TaskAgentStats[], seconds: number, failures: FailureCause[] = []): AgentReport {
  const T = perTask.length;
  const avg = (f: (s: TaskAgentStats) => number) => (T ? perTask.reduce((s, x) => s + f(x), 0) / T : 0);
  const episodes = perTask.reduce((s, x) => s + x.runs, 0);
  const calls = perTask.reduce((s, x) => s + x.mean_tool_calls * x.runs, 0);
  const errors = perTask.reduce((s, x) => s + x.tool_errors, 0);
  const pass_at_k: Record<string, number> = {};
  const pass_hat_k: Record<string, number> = {};
  for (let j = 1; j <= k; j++) {
    const ok = perTask.filter((x) => x.runs >= j);
    pass_at_k[String(j)] = ok.length ? ok.reduce((s, x) => s + x.pass_at[j - 1]!, 0) / ok.length : 0;
    pass_hat_k[String(j)] = ok.length ? ok.reduce((s, x) => s + x.pass_hat[j - 1]!, 0) / ok.length : 0;
  }
  const weighted = (f: (s: TaskAgentStats) => number) => (episodes ? perTask.reduce((s, x) => s + f(x) * x.runs, 0) / episodes : 0);
  return {
    policy,
    k,
    tasks: T,
    episodes,
    success_rate: avg((x) => x.success_rate),
    success_ci95: rateOverTasks(
      perTask.map((x) => x.success_rate),
      episodes,
    ).ci95,
    pass_at_k,
    pass_hat_k,
    mean_turns: weighted((x) => x.mean_turns),
    mean_tool_calls: weighted((x) => x.mean_tool_calls),
    tool_errors: errors,
    tool_error_rate: calls ? errors / calls : 0,
    mean_episode_ms: weighted((x) => x.mean_episode_ms),
    mean_tool_ms: calls ? perTask.reduce((s, x) => s + x.mean_tool_ms * x.mean_tool_calls * x.runs, 0) / calls : 0,
    failed_episodes: perTask.reduce((s, x) => s + x.failed_episodes, 0),
    task_errors: perTask.reduce((s, x) => s + (x.task_errors ?? 0), 0),
    failures,
    seconds,
    per_task: perTask,
  };
}

export interface AgentBenchOptions {
  /** Runs per task (the group size K). Default 4. */
  k?: number;
  /** Episodes at once. Default 8. */
  concurrency?: number;
  env?: EnvironmentOptions;
  signal?: AbortSignal;
  onEpisode?: (t: Trajectory, done: number, total: number) => void;
}

/** Runs every task K times with `policy` (through `Environment` and `rollout`) and reports. */
export async function runAgentBench(policy: Policy, tasks: Task[], options: AgentBenchOptions = {}): Promise<AgentReport> {
  const k = options.k ?? 4;
  if (!Number.isInteger(k) || k < 1) throw new Error(`k must be a positive integer, got ${k}`);
  const env = new Environment(options.env ?? {});
  try {
    const r = await rollout(env, policy, tasks, {
      group: k,
      concurrency: options.concurrency ?? 8,
      signal: options.signal,
      onEpisode: options.onEpisode,
      maxFailures: k,
    });
    const byTask = new Map<string, Trajectory[]>();
    for (const t of r.trajectories) {
      const list = byTask.get(t.task_id) ?? [];
      list.push(t);
      byTask.set(t.task_id, list);
    }
    const perTask = tasks.filter((t) => byTask.has(t.id)).map((t) => taskStats(t.id, byTask.get(t.id)!));
    const servers = new Map(tasks.map((t) => [t.id, Object.keys(t.servers)]));
    return {
      ...agentReport(policy.id, k, perTask, r.seconds, failureCauses(r.trajectories)),
      feedback: toolFeedback(r.trajectories, { serversOf: (id) => servers.get(id) }),
    };
  } finally {
    await env.close();
  }
}
