/**
 * The adaptive curriculum against the uniform draw: the same preset, tasks (calculator, difficulties
 * 1-5), steps, tasks per step, group and seed, run with `curriculum: adaptive` (the subject) and
 * `curriculum: off` (the baseline), one after the other, in one process. Then the cold-start model
 * and each trained model are evaluated on the same held-out tasks, N per difficulty (the eval
 * split's first N of each), with a 95% interval per difficulty (cluster-robust over tasks, lib/evaluator.ts); and the highest curriculum
 * level reached (the subject), and for both the highest difficulty whose held-out success is above
 * the curriculum's band top (curriculum_high, 0.7).
 *
 * Both runs are also measured by the adaptive curriculum's own rule, applied to each run's training
 * episodes after the fact: the highest difficulty whose training success passed curriculum_high over
 * curriculum_window consecutive steps with episodes there (what promotes a level), and the training
 * success per difficulty in each third of the run.
 *
 *   npx tsx bench/curriculum.ts [--steps 90] [--tasks 24] [--group 8] [--seed 0] [--per-difficulty 50]
 *                               [--eval-samples 4] [--threads N] [--set field=value ...] [--keep]
 *
 * The config is the main job's (src/cli/train.ts MAIN_JOB: art, one epoch, minibatches of 48, lr
 * 5e-4, synchronous, 90 steps of 24 tasks x 8) with max_difficulty 5, eval_every 0 and the training
 * run's own evaluations cut to 5 tasks (the bench evaluates itself). About 35 minutes on 2 cores.
 * Last line: one JSON object with both runs' figures.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxPolicy } from '../src/agents/index.ts';
import { Environment, readTrajectories, rollout, type Task } from '../src/env/index.ts';
import { resolveConfig, train, trainingTasks } from '../src/trainers/index.ts';
import { summarizeEpisodes } from '../lib/index.ts';
import { benchConfig, parseSets } from './sets.ts';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '90' },
    tasks: { type: 'string', default: '24' },
    group: { type: 'string', default: '8' },
    seed: { type: 'string', default: '0' },
    'per-difficulty': { type: 'string', default: '50' },
    'eval-samples': { type: 'string', default: '4' },
    threads: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
    keep: { type: 'boolean', default: false },
  },
});

const extra = parseSets(values.set as string[]);
const base = benchConfig(values, { max_difficulty: 5 });
const cfg = resolveConfig({ ...base, curriculum: 'adaptive' });
const perDifficulty = Number(values['per-difficulty']);
const samples = Number(values['eval-samples']);
const held = trainingTasks(resolveConfig({ ...base, eval_limit: 0 })).held;
const evalTasks: Task[] = [1, 2, 3, 4, 5].flatMap((d) => held.filter((t) => t.difficulty === d).slice(0, perDifficulty));

interface PerDifficulty {
  success: number;
  ci95: [number, number];
  episodes: number;
}
/** Held-out success per difficulty of the model in `modelDir` (the run's sampling settings, a fixed seed). */
async function heldOut(modelDir: string): Promise<Record<string, PerDifficulty>> {
  const env = new Environment({ bundled: 'inprocess', reward: cfg.reward });
  const policy = await OnnxPolicy.load(modelDir, {
    temperature: cfg.temperature,
    topK: cfg.top_k,
    topP: cfg.top_p,
    maxNewTokens: cfg.max_new_tokens,
    seed: 4242,
  });
  try {
    const r = await rollout(env, policy, evalTasks, { group: samples, concurrency: cfg.concurrency, iteration: 'bench' });
    const out: Record<string, PerDifficulty> = {};
    for (const d of [1, 2, 3, 4, 5]) {
      const ts = r.trajectories.filter((t) => t.difficulty === d);
      const e = summarizeEpisodes(ts, samples);
      out[d] = { success: e.success, ci95: e.ci95, episodes: e.episodes };
    }
    const e = summarizeEpisodes(r.trajectories, samples);
    out.all = { success: e.success, ci95: e.ci95, episodes: e.episodes };
    return out;
  } finally {
    await policy.close();
    await env.close();
  }
}

/**
 * The adaptive rule on a run's own training episodes: per difficulty, each step's fresh finished
 * episodes there (iteration train.<step>.<round>), windows of `window` consecutive such steps; the
 * highest difficulty with a window above `high` (0: none), and the success per difficulty in each
 * third of the run.
 */
function trainingByRule(
  runDir: string,
  steps: number,
  window: number,
  high: number,
): { passed: number; first_pass_step: Record<string, number>; by_third: Record<string, (number | null)[]> } {
  const per = new Map<number, Map<number, { n: number; ok: number }>>();
  for (const t of readTrajectories(join(runDir, 'trajectories.jsonl'))) {
    const m = /@train\.(\d+)\./.exec(t.group_id);
    if (!m || t.finish === 'error') continue;
    const step = Number(m[1]);
    const byStep = per.get(t.difficulty) ?? new Map<number, { n: number; ok: number }>();
    per.set(t.difficulty, byStep);
    const c = byStep.get(step) ?? { n: 0, ok: 0 };
    byStep.set(step, c);
    c.n++;
    if (t.success) c.ok++;
  }
  let passed = 0;
  const first: Record<string, number> = {};
  const thirds: Record<string, (number | null)[]> = {};
  for (const [d, byStep] of [...per].sort((a, b) => a[0] - b[0])) {
    const ks = [...byStep.keys()].sort((a, b) => a - b);
    for (let i = 0; i + window <= ks.length; i++) {
      const w = ks.slice(i, i + window).map((k) => byStep.get(k)!);
      if (w.reduce((a, c) => a + c.ok, 0) / w.reduce((a, c) => a + c.n, 0) > high) {
        first[d] = ks[i + window - 1]!;
        passed = Math.max(passed, d);
        break;
      }
    }
    thirds[d] = [0, 1, 2].map((j) => {
      const cs = ks.filter((k) => Math.min(2, Math.floor(((k - 1) * 3) / steps)) === j).map((k) => byStep.get(k)!);
      const n = cs.reduce((a, c) => a + c.n, 0);
      return n ? cs.reduce((a, c) => a + c.ok, 0) / n : null;
    });
  }
  return { passed, first_pass_step: first, by_third: thirds };
}

interface Row {
  curriculum: string;
  train_seconds: number;
  held_out: Record<string, PerDifficulty>;
  /** The highest level the curriculum reached (adaptive only). */
  highest_level: number | null;
  /** The highest difficulty whose held-out success is above curriculum_high (0: none). */
  highest_mastered: number;
  /** Groups trained per difficulty over the run. */
  trained_mix: Record<string, number>;
  level_by_step: number[];
  /** The adaptive rule applied to the run's training episodes (see trainingByRule). */
  training: ReturnType<typeof trainingByRule>;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const mastered = (h: Record<string, PerDifficulty>) => Math.max(0, ...[1, 2, 3, 4, 5].filter((d) => h[d]!.success > cfg.curriculum_high));
console.log(
  `curriculum bench: ${base.preset} on ${base.suite} (difficulties 1-5), ${base.steps} steps of ${base.tasks_per_step} tasks x ${base.group}, seed ${base.seed}; held-out: ${perDifficulty} tasks per difficulty x ${samples} samples${Object.keys(extra).length ? `; ${JSON.stringify(extra)}` : ''}`,
);
const t0 = performance.now();
const root = mkdtempSync(join(tmpdir(), 'mcp-gym-bench-curriculum-'));
const coldStart = await heldOut(String(base.model));
const rows: Row[] = [];
for (const mode of ['adaptive', 'off'] as const) {
  const metrics: Record<string, unknown>[] = [];
  const runDir = join(root, mode);
  const r = await train({
    config: { ...base, curriculum: mode },
    runDir,
    onStep: (m) => metrics.push(m),
    onLog: (l) => {
      if (/curriculum/.test(l)) console.log(`  ${mode}: ${l}`);
    },
  });
  const levels = metrics.map((m) => (m.curriculum_levels as Record<string, number> | undefined)?.calculator ?? 0);
  const mix: Record<string, number> = {};
  for (const m of metrics) for (const [d, n] of Object.entries((m.difficulty_mix as Record<string, number>) ?? {})) mix[d] = (mix[d] ?? 0) + n;
  const h = await heldOut(join(runDir, 'model'));
  const training = trainingByRule(runDir, Number(base.steps), cfg.curriculum_window, cfg.curriculum_high);
  const row: Row = {
    curriculum: mode,
    train_seconds: r.train_seconds,
    held_out: h,
    highest_level: mode === 'adaptive' ? Math.max(...levels, 0) : null,
    highest_mastered: mastered(h),
    trained_mix: mix,
    level_by_step: levels,
    training,
  };
  rows.push(row);
  console.log(
    `curriculum ${mode}: trained ${r.train_seconds.toFixed(0)} s, tasks per difficulty ${JSON.stringify(mix)}${row.highest_level !== null ? `, highest level ${row.highest_level} (by step: ${levels.join('')})` : ''}`,
  );
}
const [subject, baseline] = rows as [Row, Row];
console.log('');
console.log(`held-out success per difficulty (${perDifficulty} tasks x ${samples} samples each; 95% intervals over tasks, lib/evaluator.ts):`);
console.log('difficulty | cold start              | adaptive curriculum     | uniform (baseline)      | adaptive / uniform');
for (const d of ['1', '2', '3', '4', '5']) {
  const cell = (x: PerDifficulty) => `${pct(x.success).padStart(6)} [${pct(x.ci95[0])}, ${pct(x.ci95[1])}]`.padEnd(23);
  const ratio =
    baseline.held_out[d]!.success > 0
      ? `${(subject.held_out[d]!.success / baseline.held_out[d]!.success).toFixed(2)}x`
      : subject.held_out[d]!.success > 0
        ? 'inf'
        : '-';
  console.log(`${d.padEnd(10)} | ${cell(coldStart[d]!)} | ${cell(subject.held_out[d]!)} | ${cell(baseline.held_out[d]!)} | ${ratio}`);
}
const all = (h: Record<string, PerDifficulty>) => h.all!;
const [sa, ba, ca] = [all(subject.held_out), all(baseline.held_out), all(coldStart)];
console.log(
  `all        | ${pct(ca.success)} [${pct(ca.ci95[0])}, ${pct(ca.ci95[1])}] | ${pct(sa.success)} [${pct(sa.ci95[0])}, ${pct(sa.ci95[1])}] | ${pct(ba.success)} [${pct(ba.ci95[0])}, ${pct(ba.ci95[1])}] | ${ba.success > 0 ? (sa.success / ba.success).toFixed(2) : '-'}x`,
);
console.log(
  `highest curriculum level reached: adaptive ${subject.highest_level}; highest difficulty with held-out success > ${cfg.curriculum_high}: adaptive ${subject.highest_mastered || 'none'}, uniform ${baseline.highest_mastered || 'none'}`,
);
console.log(
  `highest difficulty whose training success passed ${cfg.curriculum_high} over ${cfg.curriculum_window} steps (the rule that promotes a level): adaptive ${subject.training.passed || 'none'}${subject.training.passed ? ` (first at step ${subject.training.first_pass_step[subject.training.passed]})` : ''}, uniform ${baseline.training.passed || 'none'}${baseline.training.passed ? ` (first at step ${baseline.training.first_pass_step[baseline.training.passed]})` : ''}`,
);
console.log('training success per difficulty in each third of the run (adaptive | uniform):');
for (const d of ['1', '2', '3', '4', '5']) {
  const thirds = (r: Row) => (r.training.by_third[d] ?? [null, null, null]).map((x) => (x === null ? '   -' : pct(x).padStart(6))).join(' ');
  console.log(`  ${d}: ${thirds(subject)} | ${thirds(baseline)}`);
}
console.log(`bench wall time: ${((performance.now() - t0) / 1000).toFixed(0)} s`);
if (!values.keep) rmSync(root, { recursive: true, force: true });
else console.log(`runs kept in ${root}`);
console.log(
  JSON.stringify({
    config: { ...base, model: undefined },
    per_difficulty: perDifficulty,
    eval_samples: samples,
    cold_start: coldStart,
    runs: rows,
    overall: { adaptive: sa, uniform: ba, cold_start: ca },
  }),
);
