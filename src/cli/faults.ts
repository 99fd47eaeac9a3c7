/**
 * `--faults SPEC` of rollout, eval and train (src/env/faults.ts): the spec read (or a usage error
 * that says what is wrong), and eval's second run with the faults, reported beside the first.
 */
import { join } from 'node:path';
import { faultComparison, faultRows, type EvalReport, type FaultComparison } from '../bench/index.ts';
import { evalReport } from '../bench/index.ts';
import { formatFaults, parseFaults, rollout, type Environment, type FaultOptions, type Policy, type Task, type Trajectory } from '../env/index.ts';
import { intFlag, UsageError } from './args.ts';
import { ProgressBar, table } from './ui.ts';

export const FAULTS_HELP = `  --faults SPEC            inject faults into the agent's tool calls (never the setup or the checks), drawn
                          from --seed, e.g. timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5`;

/** The faults of `--faults` (seeded by `--seed`, default 0), or undefined without the flag. */
export function faultOptions(values: { faults?: string; seed?: string }): FaultOptions | undefined {
  if (values.faults === undefined) return undefined;
  try {
    const spec = parseFaults(values.faults);
    return { spec, seed: values.seed === undefined ? 0 : intFlag(values.seed, '--seed', 0) };
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** The spec as run.json records it (a fixed order), or null. */
export function faultsSetting(faults: FaultOptions | undefined): string | null {
  return faults ? formatFaults(typeof faults.spec === 'string' ? parseFaults(faults.spec) : faults.spec) : null;
}

/**
 * eval --faults: the same tasks and samples (the same group ids, so a seeded policy draws the
 * same) run again in an environment with the faults, into `DIR/faults/trajectories.jsonl`
 * (resumed with the run); the comparison with the run without faults.
 */
export async function faultedEval(o: {
  env: Environment;
  policy: Policy;
  tasks: Task[];
  k: number;
  concurrency: number;
  outDir: string;
  resume: boolean;
  signal: AbortSignal;
  faults: FaultOptions;
  without: EvalReport;
}): Promise<{ report: EvalReport; trajectories: Trajectory[]; comparison: FaultComparison; out: string }> {
  const out = join(o.outDir, 'faults', 'trajectories.jsonl');
  const bar = new ProgressBar('eval --faults', o.tasks.length * o.k);
  let successes = 0;
  const r = await rollout(o.env, o.policy, o.tasks, {
    group: o.k,
    concurrency: o.concurrency,
    out,
    resume: o.resume,
    signal: o.signal,
    iteration: 'eval',
    maxFailures: o.k,
    onEpisode: (t, done) => {
      if (t.success) successes++;
      bar.update(done, `success ${((100 * successes) / Math.max(1, done)).toFixed(0)}%`);
    },
  });
  bar.done();
  const report = evalReport(o.policy.id, o.k, o.tasks, r.trajectories, r.seconds);
  const comparison = faultComparison(o.without, report, r.trajectories, faultsSetting(o.faults)!, o.faults.seed ?? 0);
  return { report, trajectories: r.trajectories, comparison, out };
}

/** The side-by-side table. */
export function printFaultComparison(c: FaultComparison, k: number): void {
  console.log(`\nWith and without faults (the same tasks and samples; intervals 95% over tasks; seed ${c.seed}):`);
  console.log(table(faultRows(c, k)));
}
