/**
 * Asynchronous training against the synchronous loop: the same preset, tasks, seed and number of
 * trained samples (steps × tasks_per_step × group), run with max_staleness 0 (the baseline), 1
 * and 2, one after the other, in one process. For each: wall-clock per training step (evaluations
 * excluded), the learner's idle fraction (the share of the step's wall time the learner was not
 * training: waiting for rollouts, reloading), held-out success before and after with 95%
 * intervals, pass^k, and the mean staleness and the correction metrics.
 *
 *   npx tsx bench/async.ts [--steps 40] [--staleness 0,1,2] [--seed 0] [--eval-samples 4] [--threads N]
 *                          [--is-correction auto] [--tool-delay-ms 0] [--set field=value ...]
 *
 * --tool-delay-ms makes every call to the bundled tool servers take that long (a server with
 * latency, a remote one: the rollouts then wait more than they compute).
 *
 * The config is the main job's (src/cli/train.ts MAIN_JOB) with eval_every 0 and the steps given.
 * It also prints where the cores went: the CPU seconds per step of this process (rollouts, sampling,
 * in-process tool servers) and of the learner, and the cores both kept busy over the step.
 *
 * Last line: one JSON object with each run's figures and the speed-up of each against the first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MAIN_JOB } from '../src/cli/train.ts';
import { finalEval, train, type TrainConfigInput } from '../src/trainers/index.ts';
import { parseSets } from './sets.ts';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '40' },
    staleness: { type: 'string', default: '0,1,2' },
    seed: { type: 'string', default: '0' },
    'eval-samples': { type: 'string', default: '4' },
    threads: { type: 'string' },
    'is-correction': { type: 'string' },
    'tool-delay-ms': { type: 'string', default: '0' },
    set: { type: 'string', multiple: true, default: [] },
    keep: { type: 'boolean', default: false },
  },
});

const extra = parseSets(values.set as string[]);
const modes = String(values.staleness).split(',').map(Number);
const base: Partial<TrainConfigInput> = {
  ...MAIN_JOB,
  steps: Number(values.steps),
  eval_every: 0,
  eval_samples: Number(values['eval-samples']),
  seed: Number(values.seed),
  ...(values.threads ? { threads: Number(values.threads) } : {}),
  ...(values['is-correction'] ? { is_correction: values['is-correction'] as TrainConfigInput['is_correction'] } : {}),
  ...extra,
};

interface Row {
  max_staleness: number;
  steps: number;
  samples: number;
  train_seconds: number;
  step_seconds: number;
  learner_seconds: number;
  learner_idle_fraction: number;
  rollout_seconds: number;
  /** CPU seconds per step: this process's (rollouts, sampling, in-process tools) and the learner's. */
  trainer_cpu_seconds: number | null;
  learner_cpu_seconds: number | null;
  staleness_mean: number;
  stale_groups_dropped: number;
  is_truncated_fraction: number | null;
  before: number;
  after: number;
  after_ci95: [number, number];
  pass_hat_k_after: number | null;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const rows: Row[] = [];
console.log(
  `async bench: ${base.preset} on ${base.suite} (difficulty <= ${base.max_difficulty}), ${base.steps} steps of ${base.tasks_per_step} tasks x ${base.group}, seed ${base.seed}; max_staleness ${modes.join(', ')}${Number(values['tool-delay-ms']) > 0 ? `; tool calls take ${values['tool-delay-ms']} ms` : ''}${Object.keys(extra).length ? `; ${JSON.stringify(extra)}` : ''}`,
);
for (const S of modes) {
  const dir = mkdtempSync(join(tmpdir(), `mcp-gym-bench-async-${S}-`));
  const metrics: Record<string, unknown>[] = [];
  const delayMs = Number(values['tool-delay-ms']);
  const r = await train({
    config: { ...base, max_staleness: S },
    runDir: join(dir, 'run'),
    onStep: (m) => metrics.push(m),
    ...(delayMs > 0 ? { environment: { serverOptions: { delayMs } } } : {}),
  });
  const sum = (k: string) => metrics.reduce((s, m) => s + Number(m[k] ?? 0), 0);
  const meanOf = (k: string) => {
    const xs = metrics.map((m) => m[k]).filter((v): v is number => typeof v === 'number');
    return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
  };
  const stepSeconds = sum('step_seconds');
  const learnerSeconds = sum('learner_seconds');
  const K = String(base.eval_samples);
  const row: Row = {
    max_staleness: S,
    steps: r.steps,
    samples: r.steps * Number(base.tasks_per_step) * Number(base.group),
    train_seconds: r.train_seconds,
    step_seconds: stepSeconds / Math.max(1, metrics.length),
    learner_seconds: learnerSeconds / Math.max(1, metrics.length),
    learner_idle_fraction: stepSeconds > 0 ? 1 - learnerSeconds / stepSeconds : 0,
    rollout_seconds: meanOf('rollout_seconds') ?? 0,
    trainer_cpu_seconds: meanOf('trainer_cpu_seconds'),
    learner_cpu_seconds: meanOf('cpu_seconds'),
    staleness_mean: meanOf('staleness_mean') ?? 0,
    stale_groups_dropped: sum('stale_groups_dropped'),
    is_truncated_fraction: meanOf('is_truncated_fraction'),
    before: r.before.success,
    after: finalEval(r).success,
    after_ci95: finalEval(r).ci95,
    pass_hat_k_after: finalEval(r).pass_hat_k?.[K] ?? null,
  };
  rows.push(row);
  console.log(
    `max_staleness ${S}: ${row.step_seconds.toFixed(2)} s/step (learner ${row.learner_seconds.toFixed(2)} s, idle ${pct(row.learner_idle_fraction)}), ` +
      `staleness ${row.staleness_mean.toFixed(2)}, held-out ${pct(row.before)} -> ${pct(row.after)} [${pct(row.after_ci95[0])}, ${pct(row.after_ci95[1])}], pass^${K} ${row.pass_hat_k_after === null ? '-' : pct(row.pass_hat_k_after)}, train ${row.train_seconds.toFixed(1)} s`,
  );
  if (!values.keep) rmSync(dir, { recursive: true, force: true });
  else console.log(`  run kept in ${join(dir, 'run')}`);
}
const baseRow = rows[0]!;
console.log('');
// Where the cores went: each phase's CPU seconds per step over its wall seconds (the synchronous loop
// has nothing to overlap where both phases already keep every core busy).
const cores = availableParallelism();
for (const r of rows) {
  if (r.trainer_cpu_seconds === null || r.learner_cpu_seconds === null) continue;
  console.log(
    `max_staleness ${r.max_staleness} per step on ${cores} cores: this process ${r.trainer_cpu_seconds.toFixed(2)} CPU s (rollouts ${r.rollout_seconds.toFixed(2)} s), ` +
      `the learner ${r.learner_cpu_seconds.toFixed(2)} CPU s in ${r.learner_seconds.toFixed(2)} s (${(r.learner_cpu_seconds / Math.max(1e-9, r.learner_seconds)).toFixed(2)} cores); ` +
      `both: ${((r.trainer_cpu_seconds + r.learner_cpu_seconds) / Math.max(1e-9, r.step_seconds)).toFixed(2)} cores busy over the step`,
  );
}
console.log('max_staleness | s/step | learner idle | speed-up vs first | held-out after | vs first (points)');
for (const r of rows) {
  console.log(
    `${String(r.max_staleness).padEnd(13)} | ${r.step_seconds.toFixed(2).padStart(6)} | ${pct(r.learner_idle_fraction).padStart(12)} | ${(baseRow.step_seconds / r.step_seconds).toFixed(2).padStart(16)}x | ${pct(r.after).padStart(14)} | ${(100 * (r.after - baseRow.after)).toFixed(1).padStart(6)}`,
  );
}
console.log(
  JSON.stringify({
    config: { ...base, model: undefined },
    tool_delay_ms: Number(values['tool-delay-ms']),
    cores,
    runs: rows,
    speedup: Object.fromEntries(rows.map((r) => [r.max_staleness, baseRow.step_seconds / r.step_seconds])),
  }),
);
