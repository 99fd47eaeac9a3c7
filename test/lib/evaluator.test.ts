/**
 * The one evaluator (lib/evaluator.ts): exact values on small cases, and the 95% intervals'
 * coverage measured by simulation with known truth: per-task success rates drawn from a Beta
 * distribution (mean p, intra-task correlation rho), k episodes per task, many evaluations.
 */
import { describe, expect, it } from 'vitest';
import { mulberry32, pairedDifference, passAtK, passHatK, rateOverTasks, summarizeEpisodes, t975, wilson, wilsonInterval } from '../../lib/index.ts';

const rnd = mulberry32(2026);
const normal = () => Math.sqrt(-2 * Math.log(rnd() || 1e-300)) * Math.cos(2 * Math.PI * rnd());
/** Gamma(a) by Marsaglia and Tsang. */
function gamma(a: number): number {
  if (a < 1) return gamma(a + 1) * rnd() ** (1 / a);
  const d = a - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v ** 3;
    if (Math.log(rnd()) < 0.5 * x * x + d - d * v + d * Math.log(v)) return d * v;
  }
}
const beta = (a: number, b: number) => {
  const x = gamma(a);
  return x / (x + gamma(b));
};
/** One simulated evaluation: T tasks of k episodes, task rates ~ Beta(mean p, correlation rho); per-task success fractions. */
function evaluation(p: number, T: number, k: number, rho: number): number[] {
  const out: number[] = [];
  for (let t = 0; t < T; t++) {
    const q = rho === 0 ? p : beta(p * (1 / rho - 1), (1 - p) * (1 / rho - 1));
    let c = 0;
    for (let j = 0; j < k; j++) if (rnd() < q) c++;
    out.push(c / k);
  }
  return out;
}

describe('the evaluator', () => {
  it('Wilson and the t quantile', () => {
    const [lo, hi] = wilson(29, 80);
    expect(lo).toBeCloseTo(0.2657, 3);
    expect(hi).toBeCloseTo(0.4719, 3);
    expect(wilson(0, 0)).toEqual([0, 1]);
    // Student's t 0.975 quantiles (tables): df 5, 10, 30, 63.
    expect(t975(5)).toBeCloseTo(2.5706, 2);
    expect(t975(10)).toBeCloseTo(2.2281, 3);
    expect(t975(30)).toBeCloseTo(2.0423, 3);
    expect(t975(63)).toBeCloseTo(1.9983, 3);
  });

  it('a rate over tasks: mean of per-task rates, Wilson at the effective sample size p(1-p)/(s²/T)', () => {
    const x = [0, 0.25, 0.5, 1, 1, 0.75];
    const e = rateOverTasks(x, 24);
    const m = 3.5 / 6;
    const s2 = x.reduce((a, v) => a + (v - m) ** 2, 0) / 5;
    expect(e.mean).toBeCloseTo(m, 12);
    expect(e.n_eff).toBeCloseTo((m * (1 - m)) / (s2 / 6), 12);
    expect(e.ci95).toEqual(wilsonInterval(m, e.n_eff, t975(5)));
    // A spread smaller than the binomial one claims no more units than there are episodes.
    expect(rateOverTasks([0.5, 0.5, 0.5, 0.5], 16).n_eff).toBe(16);
  });

  it('never collapses to [0, 0] or [1, 1]: all-fail and all-pass evaluations have the tasks as their units', () => {
    const zero = rateOverTasks(Array(64).fill(0), 256);
    expect(zero.mean).toBe(0);
    expect(zero.n_eff).toBe(64);
    expect(zero.ci95[0]).toBe(0);
    expect(zero.ci95[1]).toBeGreaterThan(0.05);
    const one = rateOverTasks(Array(64).fill(1), 256);
    expect(one.ci95[1]).toBe(1);
    expect(one.ci95[0]).toBeLessThan(0.95);
    // One task: its episodes are the units.
    expect(rateOverTasks([0], 4).ci95).toEqual(wilson(0, 4));
    const s = summarizeEpisodes([{ task_id: 'a', success: false }], 1);
    expect(s.ci95[1]).toBeGreaterThan(0.5);
  });

  it('summarizeEpisodes: success, pass@k and pass^k per task, averaged over tasks', () => {
    const ep = (task_id: string, success: boolean) => ({ task_id, success });
    const s = summarizeEpisodes([ep('a', true), ep('a', false), ep('a', false), ep('a', false), ep('b', true), ep('b', true), ep('b', true), ep('b', true)], 4);
    expect(s.success).toBeCloseTo(0.625, 12);
    expect(s.tasks).toBe(2);
    expect(s.episodes).toBe(8);
    expect(s.pass_at_k['2']).toBeCloseTo((passAtK(4, 1, 2) + 1) / 2, 12);
    expect(s.pass_hat_k['2']).toBeCloseTo((passHatK(4, 1, 2) + 1) / 2, 12);
    expect(s.pass_at_K.mean).toBeCloseTo(1, 12);
    expect(s.pass_hat_K.mean).toBeCloseTo(0.5, 12);
  });

  it('95% coverage measured by simulation: 93-97% pooled over 27 designs, and episode-level Wilson fails the same check', () => {
    const N = 1500;
    let covered = 0;
    let naive = 0;
    let naiveClustered = 0;
    let clusteredDesigns = 0;
    let total = 0;
    const cells: string[] = [];
    for (const T of [40, 64, 128])
      for (const [k, rho] of [
        [1, 0],
        [4, 0.3],
        [8, 0.7],
      ] as const)
        for (const p of [0.2, 0.5, 0.8]) {
          let c = 0;
          let cn = 0;
          for (let i = 0; i < N; i++) {
            const x = evaluation(p, T, k, rho);
            const e = rateOverTasks(x, T * k);
            if (e.ci95[0] <= p && p <= e.ci95[1]) c++;
            const ok = Math.round(x.reduce((a, v) => a + v, 0) * k);
            const w = wilson(ok, T * k);
            if (w[0] <= p && p <= w[1]) cn++;
          }
          covered += c;
          naive += cn;
          total += N;
          if (rho >= 0.3) {
            naiveClustered += cn;
            clusteredDesigns += N;
          }
          cells.push(`T${T} k${k} rho${rho} p${p}: ${((100 * c) / N).toFixed(1)}%`);
          // Every design on its own: within 91-98.5% (1,500 evaluations: ±1.1 points of noise).
          expect((100 * c) / N, cells.at(-1)).toBeGreaterThan(91);
          expect((100 * c) / N, cells.at(-1)).toBeLessThan(98.5);
        }
    const pooled = (100 * covered) / total;
    expect(pooled, cells.join('\n')).toBeGreaterThanOrEqual(93);
    expect(pooled, cells.join('\n')).toBeLessThanOrEqual(97);
    // The check can fail: Wilson over episodes, as if they were independent, is too narrow where tasks differ.
    expect((100 * naiveClustered) / clusteredDesigns).toBeLessThan(85);
    expect((100 * naive) / total).toBeLessThan(91);
  });

  it('paired difference (MOVER): exact combination, and 93-97% coverage by simulation', () => {
    const a = new Map([
      ['t1', 0],
      ['t2', 0.5],
      ['t3', 1],
      ['t4', 0.25],
    ]);
    const b = new Map([
      ['t1', 0.5],
      ['t2', 0.75],
      ['t3', 1],
      ['t4', 0.25],
      ['t5', 1],
    ]);
    const d = pairedDifference(a, b);
    expect(d.tasks).toBe(4);
    expect(d.mean).toBeCloseTo(0.1875, 12);
    expect(d.ci95[0]).toBeLessThan(d.mean);
    expect(d.ci95[1]).toBeGreaterThan(d.mean);
    // Identical evaluations: the difference is 0 and its interval is not [0, 0].
    const same = pairedDifference(a, a);
    expect(same.mean).toBe(0);
    expect(same.ci95[0]).toBeLessThan(0);
    expect(same.ci95[1]).toBeGreaterThan(0);
    expect(() => pairedDifference(a, new Map([['x', 1]]))).toThrow(/share no task/);

    // Simulation: a shared task effect u (sd s on the logit scale), checkpoint b shifted by delta with its own noise e.
    const sig = (v: number) => 1 / (1 + Math.exp(-v));
    let covered = 0;
    let total = 0;
    for (const [ma, mb, s, e] of [
      [-1, 0, 0.5, 0.3],
      [0, 0.5, 2, 0.5],
      [1, 1, 2, 2],
    ] as const) {
      let truth = 0;
      const M = 200_000;
      for (let i = 0; i < M; i++) {
        const u = s * normal();
        truth += sig(mb + u + e * normal()) - sig(ma + u);
      }
      truth /= M;
      for (const [T, k] of [
        [40, 2],
        [64, 4],
      ] as const) {
        for (let i = 0; i < 1000; i++) {
          const xa = new Map<string, number>();
          const xb = new Map<string, number>();
          for (let t = 0; t < T; t++) {
            const u = s * normal();
            const qa = sig(ma + u);
            const qb = sig(mb + u + e * normal());
            let ca = 0;
            let cb = 0;
            for (let j = 0; j < k; j++) {
              if (rnd() < qa) ca++;
              if (rnd() < qb) cb++;
            }
            xa.set(`t${t}`, ca / k);
            xb.set(`t${t}`, cb / k);
          }
          const r = pairedDifference(xa, xb, { a: T * k, b: T * k });
          if (r.ci95[0] <= truth && truth <= r.ci95[1]) covered++;
          total++;
        }
      }
    }
    const pct = (100 * covered) / total;
    expect(pct).toBeGreaterThanOrEqual(93);
    expect(pct).toBeLessThanOrEqual(97);
  });
});
