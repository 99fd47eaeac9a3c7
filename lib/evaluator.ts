/**
 * The one evaluator: success, pass@k, pass^k and their 95% intervals for every evaluation mcp-gym
 * reports (training's held-out evaluations, the R1 pipeline's stages, the real-model job,
 * `mcp-gym eval`, `mcp-gym bench`'s agent success, and so the viewer, which shows what they
 * recorded). docs/evaluation.md gives the method with its references and the coverage measured.
 *
 * Episodes of one task are not independent samples: they share the task's difficulty, so a hard
 * task fails all k. A figure is therefore the mean of per-task values x_1..x_T (the task is the
 * cluster), and its interval is a cluster-robust Wilson score interval: the Wilson interval of
 * the mean at the effective sample size
 *     n_eff = p(1 − p) / v,   v = s² / T   (s² the sample variance of the x_t)
 * (the design-effect adjustment of Korn & Graubard 1998), bounded by the number of episodes
 * above, with Student's t quantile at T − 1 degrees of freedom in place of 1.96. Where the x_t do
 * not vary (every task at 0, or every one at 1) the data say nothing about the spread and n_eff
 * is T, the number of independent units there surely are. The interval therefore never
 * collapses to [0, 0] or [1, 1].
 *
 * Two checkpoints evaluated on the same tasks are compared by the paired difference of their
 * per-task rates, its interval by the MOVER method (Newcombe 1998; Zou & Donner 2008): the two
 * cluster-robust Wilson intervals combined with the correlation of the per-task rates.
 *
 * lib/ imports nothing: this file is plain arithmetic over { task_id, success } episodes.
 */

/** A mean over tasks with its 95% interval. */
export interface Estimate {
  mean: number;
  ci95: [number, number];
}

/** The 0.975 quantile of Student's t with `df` degrees of freedom (Cornish–Fisher; exact for df 1, 2). */
export function t975(df: number): number {
  if (!(df >= 1)) return 1.959963984540054;
  if (df === 1) return 12.706204736174698;
  if (df === 2) return 4.302652729749464;
  const z = 1.959963984540054;
  const z3 = z ** 3;
  const z5 = z ** 5;
  const z7 = z ** 7;
  return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df ** 2) + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df ** 3);
}

/** Wilson's score interval for a proportion p observed over n (possibly fractional, effective) trials. */
export function wilsonInterval(p: number, n: number, z = 1.959963984540054): [number, number] {
  if (!(n > 0)) return [0, 1];
  const z2 = z * z;
  const d = 1 + z2 / n;
  const c = (p + z2 / (2 * n)) / d;
  const h = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / d;
  return [Math.max(0, c - h), Math.min(1, c + h)];
}

/** Wilson's score interval for `successes` of `n` independent trials. */
export function wilson(successes: number, n: number, z = 1.959963984540054): [number, number] {
  return n > 0 ? wilsonInterval(successes / n, n, z) : [0, 1];
}

/** A rate over tasks: its mean, its cluster-robust 95% interval, the effective sample size and the task count. */
export interface RateEstimate extends Estimate {
  n_eff: number;
  tasks: number;
}

/**
 * The mean of per-task rates (each in [0, 1]) with its cluster-robust Wilson interval. `episodes`
 * (default: the number of tasks) bounds the effective sample size above; with one task, whose
 * episodes are then the only units, the interval is Wilson's over them.
 */
export function rateOverTasks(values: readonly number[], episodes = values.length): RateEstimate {
  const T = values.length;
  if (T === 0) return { mean: 0, ci95: [0, 1], n_eff: 0, tasks: 0 };
  const mean = values.reduce((a, b) => a + b, 0) / T;
  const n = Math.max(episodes, T);
  if (T === 1) return { mean, ci95: wilsonInterval(mean, n), n_eff: n, tasks: 1 };
  const s2 = values.reduce((a, b) => a + (b - mean) ** 2, 0) / (T - 1);
  const pq = mean * (1 - mean);
  const nEff = s2 > 0 && pq > 0 ? Math.min(n, pq / (s2 / T)) : pq > 0 ? n : T;
  return { mean, ci95: wilsonInterval(mean, nEff, t975(T - 1)), n_eff: nEff, tasks: T };
}

/**
 * Mean of per-task values and its 95% interval over tasks. For rates (`rate` true) the
 * cluster-robust Wilson interval (rateOverTasks); for other quantities (reward, turns, tokens)
 * mean ± t·s/√T, which is the point itself when there is one task.
 */
export function overTasks(values: readonly number[], rate = false, episodes?: number): Estimate {
  if (rate) {
    const r = rateOverTasks(values, episodes);
    return { mean: r.mean, ci95: r.ci95 };
  }
  const T = values.length;
  if (T === 0) return { mean: 0, ci95: [0, 0] };
  const mean = values.reduce((a, b) => a + b, 0) / T;
  if (T === 1) return { mean, ci95: [mean, mean] };
  const s = Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (T - 1));
  const h = (t975(T - 1) * s) / Math.sqrt(T);
  return { mean, ci95: [mean - h, mean + h] };
}

/** Episodes grouped by task: successes and count, in order of first sight. */
export function taskCounts(episodes: readonly { task_id: string; success: boolean }[]): Map<string, { c: number; n: number }> {
  const by = new Map<string, { c: number; n: number }>();
  for (const e of episodes) {
    const x = by.get(e.task_id) ?? { c: 0, n: 0 };
    x.n++;
    if (e.success) x.c++;
    by.set(e.task_id, x);
  }
  return by;
}

/** Per-task success rates of an evaluation's episodes. */
export function taskRates(episodes: readonly { task_id: string; success: boolean }[]): Map<string, number> {
  return new Map([...taskCounts(episodes)].map(([k, { c, n }]) => [k, c / n]));
}

/** C(n, k)/C(m, k) computed as a product, stable for large n. */
function binomRatio(n: number, m: number, k: number): number {
  if (k > n) return 0;
  let r = 1;
  for (let i = 0; i < k; i++) r *= (n - i) / (m - i);
  return r;
}

/** pass@k (at least one of k draws succeeds) from n samples with c successes, unbiased: 1 − C(n−c, k)/C(n, k). */
export function passAtK(n: number, c: number, k: number): number {
  if (!(n >= 1) || k < 1 || k > n || c < 0 || c > n) throw new Error(`pass@k needs 1 <= k <= n and 0 <= c <= n (n=${n}, c=${c}, k=${k})`);
  if (n - c < k) return 1;
  return 1 - binomRatio(n - c, n, k);
}

/** pass^k (all k draws succeed, tau-bench's reliability) from n samples with c successes: C(c, k)/C(n, k). */
export function passHatK(n: number, c: number, k: number): number {
  if (!(n >= 1) || k < 1 || k > n || c < 0 || c > n) throw new Error(`pass^k needs 1 <= k <= n and 0 <= c <= n (n=${n}, c=${c}, k=${k})`);
  return binomRatio(c, n, k);
}

/** An evaluation's figures: success with its interval, pass@j and pass^j for j = 1..K. */
export interface EpisodeSummary {
  /** Mean over tasks of each task's success rate (with K episodes per task, the fraction of episodes). */
  success: number;
  /** Cluster-robust 95% interval of `success`. */
  ci95: [number, number];
  /** The effective sample size behind `ci95` (between the number of tasks and of episodes, roughly). */
  n_eff: number;
  episodes: number;
  tasks: number;
  /** pass@j and pass^j for j = 1..K (keys "1".."K"), unbiased estimators averaged over tasks; a task with fewer than j episodes counts with the ones it has. */
  pass_at_k: Record<string, number>;
  pass_hat_k: Record<string, number>;
  /** pass@K and pass^K with their cluster-robust intervals. */
  pass_at_K: Estimate;
  pass_hat_K: Estimate;
}

/** The one summary of an evaluation's episodes (K asked per task). */
export function summarizeEpisodes(episodes: readonly { task_id: string; success: boolean }[], K: number): EpisodeSummary {
  const counts = [...taskCounts(episodes).values()];
  const rate = rateOverTasks(
    counts.map((x) => x.c / x.n),
    episodes.length,
  );
  const pass_at_k: Record<string, number> = {};
  const pass_hat_k: Record<string, number> = {};
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  for (let k = 1; k <= Math.max(1, K); k++) {
    pass_at_k[k] = mean(counts.map((x) => passAtK(x.n, x.c, Math.min(k, x.n))));
    pass_hat_k[k] = mean(counts.map((x) => passHatK(x.n, x.c, Math.min(k, x.n))));
  }
  const Kk = Math.max(1, K);
  const at = rateOverTasks(counts.map((x) => passAtK(x.n, x.c, Math.min(Kk, x.n))));
  const hat = rateOverTasks(counts.map((x) => passHatK(x.n, x.c, Math.min(Kk, x.n))));
  return {
    success: rate.mean,
    ci95: rate.ci95,
    n_eff: rate.n_eff,
    episodes: episodes.length,
    tasks: counts.length,
    pass_at_k,
    pass_hat_k,
    pass_at_K: { mean: at.mean, ci95: at.ci95 },
    pass_hat_K: { mean: hat.mean, ci95: hat.ci95 },
  };
}

/**
 * b minus a on the tasks both evaluated (two checkpoints on the same tasks): the mean of the
 * per-task differences of success rates and its paired 95% interval (MOVER: each side's
 * cluster-robust Wilson interval, combined with the correlation r of the per-task rates:
 *     lo = d − √((p_b − l_b)² − 2r(p_b − l_b)(u_a − p_a) + (u_a − p_a)²)
 *     hi = d + √((u_b − p_b)² − 2r(u_b − p_b)(p_a − l_a) + (p_a − l_a)²)).
 * `episodes` (default: each side's task count) bounds each side's effective sample size. Throws
 * when they share no task.
 */
export function pairedDifference(a: Map<string, number>, b: Map<string, number>, episodes?: { a: number; b: number }): Estimate & { tasks: number } {
  const keys = [...b.keys()].filter((k) => a.has(k));
  if (keys.length === 0) throw new Error('pairedDifference: the two evaluations share no task');
  const xa = keys.map((k) => a.get(k)!);
  const xb = keys.map((k) => b.get(k)!);
  const T = keys.length;
  const ea = rateOverTasks(xa, episodes ? Math.round((episodes.a * T) / a.size) : T);
  const eb = rateOverTasks(xb, episodes ? Math.round((episodes.b * T) / b.size) : T);
  const d = eb.mean - ea.mean;
  const r = correlation(xa, xb);
  const [la, ua] = ea.ci95;
  const [lb, ub] = eb.ci95;
  const lo = d - Math.sqrt(Math.max(0, (eb.mean - lb) ** 2 - 2 * r * (eb.mean - lb) * (ua - ea.mean) + (ua - ea.mean) ** 2));
  const hi = d + Math.sqrt(Math.max(0, (ub - eb.mean) ** 2 - 2 * r * (ub - eb.mean) * (ea.mean - la) + (ea.mean - la) ** 2));
  return { mean: d, ci95: [Math.max(-1, lo), Math.min(1, hi)], tasks: T };
}

/** Pearson's correlation; 0 where either side does not vary. */
function correlation(x: readonly number[], y: readonly number[]): number {
  const n = x.length;
  const mx = x.reduce((s, v) => s + v, 0) / n;
  const my = y.reduce((s, v) => s + v, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (x[i]! - mx) * (y[i]! - my);
    sxx += (x[i]! - mx) ** 2;
    syy += (y[i]! - my) ** 2;
  }
  return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : 0;
}
