/**
 * PPO with GAE (the `ppo` preset: a value head, GAE, token-level PPO clip) against GRPO (group
 * advantages, the `grpo` loss) in one process, one after the other: the same suite (calculator,
 * max_difficulty 1), the same reward (ART's, the ppo preset's), the same budget (steps × tasks_per_step
 * × group), the same seed, the same optimizer schedule (lr, epochs, minibatches, beta 0) and the
 * synchronous loop (max_staleness 0), so that the two differ only in how the advantages are made
 * and aggregated. For each: held-out success before and after with 95% intervals over tasks (lib/evaluator.ts), pass^k, the
 * wall-clock of training (evaluations excluded) and per step; for PPO the value head's metrics at
 * the first and last steps (value_loss, explained_variance). Then the ratio PPO / GRPO of the
 * wall-clock and the difference of the held-out success after.
 *
 *   npx tsx bench/ppo-vs-grpo.ts [--steps 15] [--tasks 6] [--group 4] [--seed 0] [--eval-limit 40]
 *                                [--eval-samples 2] [--lr 5e-4] [--threads N] [--set field=value ...]
 *
 * --set applies to both runs. Last line: one JSON object with both runs' figures.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { finalEval, train, type TrainConfigInput } from '../src/trainers/index.ts';
import { parseSets } from './sets.ts';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '15' },
    tasks: { type: 'string', default: '6' },
    group: { type: 'string', default: '4' },
    seed: { type: 'string', default: '0' },
    'eval-limit': { type: 'string', default: '40' },
    'eval-samples': { type: 'string', default: '2' },
    lr: { type: 'string', default: '5e-4' },
    threads: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
    keep: { type: 'boolean', default: false },
  },
});

const extra = parseSets(values.set as string[]);
const tasks = Number(values.tasks);
const group = Number(values.group);
const common: Partial<TrainConfigInput> = {
  suite: 'calculator',
  max_difficulty: 1,
  steps: Number(values.steps),
  tasks_per_step: tasks,
  group,
  seed: Number(values.seed),
  reward: 'art',
  beta: 0,
  lr: Number(values.lr),
  epochs: 2,
  minibatch_size: Math.max(1, Math.ceil((tasks * group) / 2)), // two optimizer steps per epoch
  max_staleness: 0,
  eval_every: 0,
  eval_limit: Number(values['eval-limit']),
  eval_samples: Number(values['eval-samples']),
  ...(values.threads ? { threads: Number(values.threads) } : {}),
  ...extra,
};
const subjects: { name: string; config: Partial<TrainConfigInput> }[] = [
  { name: 'ppo', config: { ...common, preset: 'ppo' } },
  { name: 'grpo', config: { ...common, preset: 'grpo', advantage: 'grpo', loss: 'grpo' } },
];

interface Row {
  name: string;
  steps: number;
  samples: number;
  train_seconds: number;
  step_seconds: number;
  learner_seconds: number;
  before: number;
  before_ci95: [number, number];
  after: number;
  after_ci95: [number, number];
  eval_episodes: number;
  pass_hat_k_after: number | null;
  reward_first: number | null;
  reward_last: number | null;
  value_loss: [number | null, number | null];
  explained_variance: [number | null, number | null];
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const num = (x: unknown) => (typeof x === 'number' ? x : null);
const f3 = (x: number | null) => (x === null ? '-' : x.toFixed(3));
const rows: Row[] = [];
console.log(
  `ppo-vs-grpo bench: calculator (difficulty <= 1), ${common.steps} steps of ${tasks} tasks x ${group} (${Number(common.steps) * tasks * group} episodes each), reward art, seed ${common.seed}, lr ${common.lr}, epochs ${common.epochs}, minibatch ${common.minibatch_size}, held-out ${common.eval_limit} tasks x ${common.eval_samples}${Object.keys(extra).length ? `; ${JSON.stringify(extra)}` : ''}`,
);
for (const s of subjects) {
  const dir = mkdtempSync(join(tmpdir(), `mcp-gym-bench-ppo-${s.name}-`));
  const metrics: Record<string, unknown>[] = [];
  const r = await train({ config: s.config, runDir: join(dir, 'run'), onStep: (m) => metrics.push(m) });
  const sum = (k: string) => metrics.reduce((t, m) => t + Number(m[k] ?? 0), 0);
  const first = metrics[0] ?? {};
  const last = metrics[metrics.length - 1] ?? {};
  const K = String(common.eval_samples);
  const row: Row = {
    name: s.name,
    steps: r.steps,
    samples: r.steps * tasks * group,
    train_seconds: r.train_seconds,
    step_seconds: sum('step_seconds') / Math.max(1, metrics.length),
    learner_seconds: sum('learner_seconds') / Math.max(1, metrics.length),
    before: r.before.success,
    before_ci95: r.before.ci95,
    after: finalEval(r).success,
    after_ci95: finalEval(r).ci95,
    eval_episodes: Number(common.eval_limit) * Number(common.eval_samples),
    pass_hat_k_after: finalEval(r).pass_hat_k?.[K] ?? null,
    reward_first: num(first.reward_mean),
    reward_last: num(last.reward_mean),
    value_loss: [num(first.value_loss), num(last.value_loss)],
    explained_variance: [num(first.explained_variance), num(last.explained_variance)],
  };
  rows.push(row);
  console.log(
    `${s.name}: held-out ${pct(row.before)} [${pct(row.before_ci95[0])}, ${pct(row.before_ci95[1])}] -> ${pct(row.after)} [${pct(row.after_ci95[0])}, ${pct(row.after_ci95[1])}], pass^${K} ${row.pass_hat_k_after === null ? '-' : pct(row.pass_hat_k_after)}, ` +
      `train ${row.train_seconds.toFixed(1)} s (${row.step_seconds.toFixed(2)} s/step, learner ${row.learner_seconds.toFixed(2)} s), reward ${f3(row.reward_first)} -> ${f3(row.reward_last)}` +
      (s.name === 'ppo'
        ? `, value_loss ${f3(row.value_loss[0])} -> ${f3(row.value_loss[1])}, explained_variance ${f3(row.explained_variance[0])} -> ${f3(row.explained_variance[1])}`
        : ''),
  );
  if (s.name === 'ppo') {
    console.log('  step | value_loss | explained_variance | value_mean | return_mean | reward_mean');
    for (const m of metrics)
      console.log(
        `  ${String(m.step).padStart(4)} | ${f3(num(m.value_loss)).padStart(10)} | ${f3(num(m.explained_variance)).padStart(18)} | ${f3(num(m.value_mean)).padStart(10)} | ${f3(num(m.return_mean)).padStart(11)} | ${f3(num(m.reward_mean)).padStart(11)}`,
      );
  }
  if (!values.keep) rmSync(dir, { recursive: true, force: true });
  else console.log(`  run kept in ${join(dir, 'run')}`);
}
const [ppo, grpo] = rows as [Row, Row];
console.log('');
console.log('run  | held-out before | held-out after (95% CI)     | train s | s/step | vs grpo wall-clock');
for (const r of rows) {
  console.log(
    `${r.name.padEnd(4)} | ${pct(r.before).padStart(15)} | ${`${pct(r.after)} [${pct(r.after_ci95[0])}, ${pct(r.after_ci95[1])}]`.padEnd(27)} | ${r.train_seconds.toFixed(1).padStart(7)} | ${r.step_seconds.toFixed(2).padStart(6)} | ${(r.train_seconds / grpo.train_seconds).toFixed(2).padStart(17)}x`,
  );
}
console.log(
  `ppo / grpo wall-clock ${(ppo.train_seconds / grpo.train_seconds).toFixed(2)}x; held-out after: ppo − grpo = ${(100 * (ppo.after - grpo.after)).toFixed(1)} points`,
);
console.log(JSON.stringify({ config: common, runs: rows, wall_clock_ratio: ppo.train_seconds / grpo.train_seconds, after_difference: ppo.after - grpo.after }));
