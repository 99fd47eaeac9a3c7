/**
 * Estimates over tasks: an evaluation's k episodes of one task are not independent samples (they
 * share the task's difficulty), so a figure is the mean of per-task values and its interval treats
 * tasks as the units (a cluster-robust interval, with the task as the cluster). Two checkpoints
 * evaluated on the same tasks are compared by the per-task differences (a paired interval).
 */

/** A mean over tasks with its 95% interval. */
export interface Estimate {
  mean: number;
  ci95: [number, number];
}

/** Mean of per-task values and its 95% interval over tasks (normal approximation; rates clipped to [0, 1]). */
export function overTasks(values: number[], rate = false): Estimate {
  const T = values.length;
  if (T === 0) return { mean: 0, ci95: [0, 0] };
  const mean = values.reduce((a, b) => a + b, 0) / T;
  if (T === 1) return { mean, ci95: [mean, mean] };
  const s = Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (T - 1));
  const h = (1.96 * s) / Math.sqrt(T);
  const lo = mean - h;
  const hi = mean + h;
  return { mean, ci95: rate ? [Math.max(0, lo), Math.min(1, hi)] : [lo, hi] };
}

/** Per-task success rates of an evaluation's episodes. */
export function taskRates(episodes: readonly { task_id: string; success: boolean }[]): Map<string, number> {
  const n = new Map<string, [number, number]>();
  for (const e of episodes) {
    const c = n.get(e.task_id) ?? [0, 0];
    c[0] += e.success ? 1 : 0;
    c[1]++;
    n.set(e.task_id, c);
  }
  return new Map([...n].map(([k, [s, t]]) => [k, s / t]));
}

/**
 * b minus a on the tasks both evaluated: the mean of the per-task differences of success rates and
 * its paired 95% interval over tasks. Throws when they share no task.
 */
export function pairedDifference(a: Map<string, number>, b: Map<string, number>): Estimate & { tasks: number } {
  const diffs = [...b].filter(([k]) => a.has(k)).map(([k, v]) => v - a.get(k)!);
  if (diffs.length === 0) throw new Error('pairedDifference: the two evaluations share no task');
  return { ...overTasks(diffs), tasks: diffs.length };
}
