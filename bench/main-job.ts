/**
 * The main job (`npm start`) with its old recipe and its new one, side by side in one process (issue
 * 34): the same seed, training tasks and held-out tasks, each trained from the bundled cold start and
 * evaluated before and after on the same 400 held-out episodes. The two runs take turns step by step
 * (one step of the old, one of the new, ...), and each counts the seconds of its own steps (its
 * rollouts to its writes, the evaluations during training included, like train_seconds): this VM's
 * speed varies from day to day and within the hour (the same seeded steps took 598 s one day and
 * 855 s the next; the same rollouts 0.74 s a step in one run and 0.96 s in the next), so the figure
 * that carries over is the ratio of two runs that met the machine at the same minutes.
 *
 *   npx tsx bench/main-job.ts [--seed 0] [--only old|new] [--keep]
 *
 * Both run the same algorithm and settings (MAIN_JOB, src/cli/train.ts: 90 steps of 24 tasks x 8,
 * four minibatches of 48, lr 5e-4). The old recipe runs it as the code did before issue 34: the
 * learner on Debian's torch 1.13, micro-batches of 16 with every sequence laid out whole and every
 * sequence given a forward and backward pass. The new one runs it as the code does now: the learner
 * on the venv's torch 2 when present, each minibatch one micro-batch laid out as a prefix tree (each
 * run of tokens that several sequences share computed once), and no pass spent on sequences whose
 * advantages are all 0 (the gradients are the same). The sampler's change is in both, since it
 * changes no number: a batch's identical prompts are prefilled once. For each it prints where a
 * step's seconds went (the rollouts' sampling:
 * prefill and decode graph runs; the tool calls and the scoring, summed over concurrent episodes;
 * the batch building; the learner's forward and backward passes and optimizer steps; the export of
 * the new weights and their reload; the checkpoint; the evaluations), then the two side by side.
 *
 * Last line: {"seed", "old": {"train_seconds", "after", ...}, "new": {...}, "speedup"} (train_seconds:
 * the seconds of the run's own steps; speedup: old train_seconds / new train_seconds).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MAIN_JOB } from '../src/cli/train.ts';
import { finalEval, train, type TrainConfigInput } from '../src/trainers/index.ts';
import { takeTurn } from './lib/turns.ts';

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '0' },
    only: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});

/** The main job as the code ran it before issue 34: the learner on Debian's torch, micro-batches of 16 laid out whole, every sequence given a pass. */
const OLD_RECIPE: Partial<TrainConfigInput> = { ...MAIN_JOB, micro_batch_size: 16 };
const OLD_ENV = {
  MCP_GYM_PYTHON: existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3',
  MCP_GYM_GPT_SHARE_PREFIX: '0',
  MCP_GYM_SKIP_IDLE: '0',
};

const seed = Number(values.seed);
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed: a non-negative integer, got ${values.seed}`);
if (values.only !== undefined && values.only !== 'old' && values.only !== 'new') throw new Error(`--only: old or new, got ${values.only}`);

/** The phases of a step's profile: the metrics row's field, and how it is shown. */
const PHASES: [string, string][] = [
  ['learner_wait_seconds', 'rollouts (wall)'],
  ['prefill_seconds', '  sampler prefill'],
  ['decode_seconds', '  sampler decode'],
  ['tool_seconds', '  tool calls (summed over episodes)'],
  ['score_seconds', '  checks + reward (summed over episodes)'],
  ['batch_seconds', 'batch building'],
  ['learner_seconds', 'learner (wall: train + export)'],
  ['forward_backward_seconds', '  forward + backward'],
  ['optimizer_seconds', '  clipping + AdamW'],
  ['export_seconds', '  export of the weights'],
  ['reload_seconds', 'policy reload'],
  ['checkpoint_seconds', 'checkpoint'],
  ['step_seconds', 'step (wall, evaluations excluded)'],
];

interface Outcome {
  train_seconds: number;
  before: number;
  after: number;
  after_ci95: [number, number];
  pass_hat_k_after: number | null;
  steps: number;
  /** Mean seconds per step of each phase; eval_seconds: all the evaluations during training, summed. */
  profile: Record<string, number>;
  eval_seconds: number;
}

/**
 * One recipe's run, one step at a time with the other (lib/turns.ts): it holds the turn from the start of a
 * step's rollouts to the end of its writes (and from its start to its first step, and through its final
 * evaluation), so that both recipes meet the machine as it is at the same minutes (this VM's speed drifts
 * within an hour: the same rollouts took 0.74 s a step in one run and 0.96 s in the next).
 */
async function runRecipe(name: 'old' | 'new', config: Partial<TrainConfigInput>, env: Record<string, string>): Promise<Outcome> {
  const dir = mkdtempSync(join(tmpdir(), `mcp-gym-bench-main-job-${name}-`));
  const rows: Record<string, unknown>[] = [];
  const steps = Number(config.steps);
  let release: (() => void) | undefined = await takeTurn();
  // The learner reads these when it starts (in train(), before the first step), while this run holds the turn.
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  const restore = () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  Object.assign(process.env, env);
  let own = 0; // seconds of this run's own steps (rollouts to writes, evaluations during training included)
  let t0 = 0;
  let waited = 0; // this step's wait for the turn, taken out of its step_seconds and learner_wait_seconds
  try {
    const r = await train({
      config: { ...config, seed },
      runDir: join(dir, 'run'),
      beforeRollout: async () => {
        restore();
        const tw = performance.now();
        if (!release) release = await takeTurn();
        waited = (performance.now() - tw) / 1000;
        t0 = performance.now();
      },
      onStep: (m) => {
        own += (performance.now() - t0) / 1000;
        for (const k of ['step_seconds', 'learner_wait_seconds']) if (typeof m[k] === 'number') m[k] = Math.max(0, (m[k] as number) - waited);
        rows.push(m);
        if (Number(m.step) < steps) {
          release?.();
          release = undefined;
        }
      },
    });
    const after = finalEval(r);
    const mean = (k: string) => rows.reduce((sum, m) => sum + (typeof m[k] === 'number' ? (m[k] as number) : 0), 0) / Math.max(1, rows.length);
    const K = String(config.eval_samples);
    const out: Outcome = {
      train_seconds: Math.round(own * 10) / 10,
      before: r.before.success,
      after: after.success,
      after_ci95: after.ci95,
      pass_hat_k_after: after.pass_hat_k?.[K] ?? null,
      steps: r.steps,
      profile: Object.fromEntries(PHASES.map(([k]) => [k, Math.round(mean(k) * 1000) / 1000])),
      eval_seconds: Math.round(rows.reduce((sum, m) => sum + (typeof m.eval_seconds === 'number' ? m.eval_seconds : 0), 0) * 10) / 10,
    };
    console.log(
      `${name}: ${out.steps} steps in ${out.train_seconds} s of its own; held-out ${pct(out.before)} -> ${pct(out.after)} [${pct(out.after_ci95[0])}, ${pct(out.after_ci95[1])}]${out.pass_hat_k_after === null ? '' : `, pass^${K} ${pct(out.pass_hat_k_after)}`}`,
    );
    if (values.keep) console.log(`  run kept in ${join(dir, 'run')}`);
    return out;
  } finally {
    restore();
    release?.();
    if (!values.keep) rmSync(dir, { recursive: true, force: true });
  }
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const recipes: ['old' | 'new', Partial<TrainConfigInput>, Record<string, string>][] = [
  ['old', OLD_RECIPE, OLD_ENV],
  ['new', MAIN_JOB, {}],
];
const got: Partial<Record<'old' | 'new', Outcome>> = {};
console.log(
  `main-job bench: seed ${seed}; ${describe(MAIN_JOB)}; old: the learner on ${OLD_ENV.MCP_GYM_PYTHON}, micro-batches of 16 laid out whole, a pass for every sequence; new: what the code does now`,
);
// Both at once, taking turns step by step (takeTurn); old first.
await Promise.all(
  recipes.filter(([name]) => !values.only || values.only === name).map(async ([name, config, env]) => (got[name] = await runRecipe(name, config, env))),
);

function describe(c: Partial<TrainConfigInput>): string {
  return `${c.steps} steps of ${c.tasks_per_step}x${c.group}, minibatch ${c.minibatch_size}, lr ${c.lr}`;
}

// Where a step's seconds went, the two recipes side by side.
const { old, new: nu } = got;
const cell = (o: Outcome | undefined, k: string) => (o ? o.profile[k]!.toFixed(3) : '-');
console.log('\nseconds per step (mean over the steps) | old | new | old / new');
for (const [k, label] of PHASES) {
  const ratio = old && nu && nu.profile[k]! > 0 ? `${(old.profile[k]! / nu.profile[k]!).toFixed(2)}x` : '-';
  console.log(`${label} | ${cell(old, k)} | ${cell(nu, k)} | ${ratio}`);
}
const evals = (o: Outcome | undefined) => (o ? o.eval_seconds.toFixed(1) : '-');
console.log(`evaluations during training (s, in all) | ${evals(old)} | ${evals(nu)} | -`);
const trained = (o: Outcome | undefined) => (o ? o.train_seconds.toFixed(1) : '-');
console.log(`training (s, in all) | ${trained(old)} | ${trained(nu)} | ${old && nu ? `${(old.train_seconds / nu.train_seconds).toFixed(2)}x` : '-'}`);
const fig = (o: Outcome | undefined) =>
  o
    ? { train_seconds: o.train_seconds, after: o.after, after_ci95: o.after_ci95, before: o.before, pass_hat_k_after: o.pass_hat_k_after, steps: o.steps }
    : null;
console.log(JSON.stringify({ seed, old: fig(old), new: fig(nu), speedup: old && nu ? Math.round((old.train_seconds / nu.train_seconds) * 100) / 100 : null }));
