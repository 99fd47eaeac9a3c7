/**
 * `mcp-gym eval --faults`: the same tasks and samples run twice, without and with the injected
 * faults (src/env/faults.ts), side by side: pass@1, pass@k, pass^k and the mean reward with their
 * 95% intervals over tasks, the retention (pass@1 with faults / pass@1 without) and the drop of
 * pass@1, paired by task, with its interval.
 */
import { faultCounts, type Trajectory } from '../env/index.ts';
import { overTasks, type Estimate, type EvalReport } from './eval.ts';
import { fmt } from './report-format.ts';

export interface FaultComparison {
  /** The spec, in a fixed order. */
  faults: string;
  seed: number;
  without: { pass_at_1: Estimate; pass_at_k: Estimate; pass_hat_k: Estimate; mean_reward: Estimate; tool_error_rate: number };
  with: { pass_at_1: Estimate; pass_at_k: Estimate; pass_hat_k: Estimate; mean_reward: Estimate; tool_error_rate: number; injected: Record<string, number> };
  /** pass@1 with faults / pass@1 without (null when pass@1 without is 0). */
  retention: number | null;
  /** pass@1 without − pass@1 with, paired by task, with its interval over tasks. */
  drop: Estimate;
}

/** The two evaluations of the same tasks side by side. */
export function faultComparison(without: EvalReport, withFaults: EvalReport, faulted: Trajectory[], faults: string, seed: number): FaultComparison {
  const pick = (r: EvalReport) => ({
    pass_at_1: r.pass_at_1,
    pass_at_k: r.pass_at_k,
    pass_hat_k: r.pass_hat_k,
    mean_reward: r.mean_reward,
    tool_error_rate: r.tool_errors.rate,
  });
  const after = new Map(withFaults.per_task.map((t) => [t.task, t.pass_at[0] ?? 0]));
  const drops = without.per_task.filter((t) => after.has(t.task)).map((t) => (t.pass_at[0] ?? 0) - after.get(t.task)!);
  return {
    faults,
    seed,
    without: pick(without),
    with: { ...pick(withFaults), injected: faultCounts(faulted) },
    retention: without.pass_at_1.mean > 0 ? withFaults.pass_at_1.mean / without.pass_at_1.mean : null,
    drop: overTasks(drops),
  };
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const ci = (e: Estimate, rate: boolean) =>
  rate ? `${pct(e.mean)} [${pct(e.ci95[0])}, ${pct(e.ci95[1])}]` : `${fmt(e.mean)} [${fmt(e.ci95[0])}, ${fmt(e.ci95[1])}]`;

/** Rows of a three-column table: figure, without faults, with faults; then the retention and the drop. */
export function faultRows(c: FaultComparison, k: number): string[][] {
  const injected =
    Object.entries(c.with.injected)
      .map(([kind, n]) => `${kind} ${n}`)
      .join(', ') || 'none';
  return [
    ['', 'without faults', `with --faults ${c.faults}`],
    ['pass@1', ci(c.without.pass_at_1, true), ci(c.with.pass_at_1, true)],
    [`pass@${k}`, ci(c.without.pass_at_k, true), ci(c.with.pass_at_k, true)],
    [`pass^${k}`, ci(c.without.pass_hat_k, true), ci(c.with.pass_hat_k, true)],
    ['mean reward', ci(c.without.mean_reward, false), ci(c.with.mean_reward, false)],
    ['tool errors (of calls)', pct(c.without.tool_error_rate), pct(c.with.tool_error_rate)],
    ['injected faults', '-', injected],
    ['retention (pass@1 with / without)', '', c.retention === null ? 'n/a (pass@1 without faults is 0)' : c.retention.toFixed(3)],
    ['pass@1 drop (paired by task)', '', ci(c.drop, true)],
  ];
}
