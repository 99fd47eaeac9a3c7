/**
 * The real-model job (`mcp-gym start --model smollm2-135m`, issue 49) with its previous recipe and its
 * current one, side by side in one process: the same seed, training tasks and held-out tasks (the job's
 * 128 × 2 and the same questions in the held-out wording), each from the base checkpoint through SFT and
 * GRPO, with the job's three evaluations. The two jobs take turns (bench/main-job.ts does the same for the
 * embedded model's job): a job holds the turn for one unit of its work at a time (an evaluation, its SFT,
 * an RL step; the SFT checkpoint's evaluation goes with step 1, the last evaluation with the last step), so
 * both meet the machine as it is at the same minutes, and each counts the seconds of the units it held.
 *
 *   npx tsx bench/model-job.ts [--seed 0] [--only old|new] [--eval-tasks 128] [--dir DIR] [--keep]
 *
 * The previous recipe is MODEL_JOB as it was before issue 49 (OLD_RECIPE below: SFT 64 demonstrations × 5
 * epochs, 18 GRPO steps of 8 tasks × 8 at every difficulty of the job), run as the code ran it then: the learner lays a micro-batch's
 * rests side by side (MCP_GYM_HF_TRIE=0) instead of as a prefix tree. The current one is MODEL_JOB
 * (src/cli/model-job.ts) with the code as it is.
 *
 * Prints each job's figures (held-out success at each stage, RL − SFT on the usual held-out tasks and in
 * the held-out wording, its seconds), then one JSON line:
 * {"seed", "old": {"sft", "rl", "rl_minus_sft", "reworded", "seconds"}, "new": {...}, "speedup"}
 * (sft, rl: held-out success in %; rl_minus_sft: {"points", "ci95"}; reworded: the same for the held-out
 * wording; seconds: the units the job held; speedup: old seconds / new seconds).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MODEL_JOB } from '../src/cli/model-job.ts';
import { resolveModel, runModelJob, type ModelJobConfig, type ModelJobResult } from '../src/trainers/index.ts';
import { takeTurn } from './lib/turns.ts';

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '0' },
    only: { type: 'string' },
    'eval-tasks': { type: 'string', default: '128' },
    model: { type: 'string', default: 'smollm2-135m' },
    dir: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});

/**
 * MODEL_JOB before issue 49 (bench/RESULTS.md, "The recipe with SFT at its plateau" with 18 steps): SFT to
 * its plateau (5 epochs), 18 GRPO steps at lr 2e-5, micro-batches of 16 sequences (the protocol's default), the
 * learner in float32 throughout.
 */
const OLD_RECIPE = {
  compute_dtype: 'float32' as const,
  sft: { ...MODEL_JOB.sft, epochs: 5 },
  rl: { ...MODEL_JOB.rl, steps: 18, lr: 2e-5, micro_batch_size: 16, max_difficulty: MODEL_JOB.max_difficulty },
};
/**
 * Both jobs' learners give their freed heap back after each call (MCP_GYM_LEARNER_TRIM=1): a learner keeps its last
 * step's activations for the next step (up to ~12 GB here), and the idle one's would leave the busy one too little of
 * this machine's 24 GB (the first run of this bench had its new learner killed for memory at step 4).
 */
const BOTH_ENV: Record<string, string> = { MCP_GYM_LEARNER_TRIM: '1' };
/** ... and the code it ran on: the learner's rests side by side. */
const OLD_ENV: Record<string, string> = { ...BOTH_ENV, MCP_GYM_HF_TRIE: '0' };

const seed = Number(values.seed);
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed: a non-negative integer, got ${values.seed}`);
const evalTasks = Number(values['eval-tasks']);
if (!Number.isInteger(evalTasks) || evalTasks < 1) throw new Error(`--eval-tasks: a positive integer, got ${values['eval-tasks']}`);
if (values.only !== undefined && values.only !== 'old' && values.only !== 'new') throw new Error(`--only: old or new, got ${values.only}`);

const model = await resolveModel(values.model!, (l) => process.stderr.write(`${l}\n`));
const root = values.dir ?? mkdtempSync(join(tmpdir(), 'mcp-gym-bench-model-job-'));
mkdirSync(root, { recursive: true });

function config(recipe: { sft: ModelJobConfig['sft']; rl: ModelJobConfig['rl']; compute_dtype: 'float32' | 'bfloat16' }): ModelJobConfig {
  return {
    model,
    model_name: values.model!,
    suite: MODEL_JOB.suite,
    min_difficulty: MODEL_JOB.min_difficulty,
    max_difficulty: MODEL_JOB.max_difficulty,
    eval_tasks: evalTasks,
    k: MODEL_JOB.k,
    seed,
    tool_format: 'auto',
    reworded: true,
    sft: { ...recipe.sft },
    rl: { ...recipe.rl },
    ...(recipe.compute_dtype !== 'float32' ? { compute_dtype: recipe.compute_dtype } : {}),
  };
}

interface Side {
  result: ModelJobResult;
  seconds: number;
}

async function runSide(name: 'old' | 'new', c: ModelJobConfig, env: Record<string, string>): Promise<Side> {
  let own = 0;
  // Every variable either side sets, as this process had it: a turn restores them before setting its own.
  const saved = Object.fromEntries([...new Set([...Object.keys(OLD_ENV), ...Object.keys(BOTH_ENV)])].map((k) => [k, process.env[k]]));
  const result = await runModelJob({
    config: c,
    dir: join(root, name),
    // The learner reads its environment when it starts, inside a unit this job holds.
    turn: async () => {
      const release = await takeTurn();
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      Object.assign(process.env, env);
      const t = performance.now();
      return () => {
        own += (performance.now() - t) / 1000;
        release();
      };
    },
    onLog: (l) => process.stderr.write(`[${name}] ${l}\n`),
    onProgress: (p) => {
      if (p.done === p.total || p.stage === 'rl') process.stderr.write(`[${name}] ${p.stage} ${p.done}/${p.total}${p.detail ? ` ${p.detail}` : ''}\n`);
    },
  });
  return { result, seconds: own };
}

const recipes: ['old' | 'new', ModelJobConfig, Record<string, string>][] = [
  ['old', config(OLD_RECIPE), OLD_ENV],
  ['new', config(MODEL_JOB), BOTH_ENV],
];
const got: Partial<Record<'old' | 'new', Side>> = {};
try {
  await Promise.all(recipes.filter(([name]) => !values.only || values.only === name).map(async ([name, c, env]) => (got[name] = await runSide(name, c, env))));
} finally {
  if (!values.keep && !values.dir) rmSync(root, { recursive: true, force: true });
}

const pct = (x: number) => Math.round(1000 * x) / 10;
const r1 = (x: number) => Math.round(10 * x) / 10;
const gain = (g: { points: number; ci95: [number, number] }) => ({ points: r1(g.points), ci95: [r1(g.ci95[0]), r1(g.ci95[1])] });
const summary = (s: Side) => ({
  base: pct(s.result.base.success),
  sft: pct(s.result.sft.success),
  rl: pct(s.result.rl.success),
  rl_minus_sft: gain(s.result.rl_minus_sft),
  ...(s.result.reworded
    ? { reworded: { sft: pct(s.result.reworded.sft.success), rl: pct(s.result.reworded.rl.success), rl_minus_sft: gain(s.result.reworded.rl_minus_sft) } }
    : {}),
  seconds: Math.round(s.seconds),
});
const out: Record<string, unknown> = { seed };
for (const [name, c] of recipes) {
  const s = got[name];
  if (!s) continue;
  const m = summary(s);
  out[name] = m;
  console.log(
    `${name}: SFT ${c.sft.demos} demos x ${c.sft.epochs}, GRPO ${c.rl.steps} steps of ${c.rl.tasks_per_step} x ${c.rl.group} | base ${m.base}%, SFT ${m.sft}%, RL ${m.rl}%, RL - SFT ${m.rl_minus_sft.points} [${m.rl_minus_sft.ci95.join(', ')}]` +
      (m.reworded
        ? `; held-out wording: SFT ${m.reworded.sft}%, RL ${m.reworded.rl}%, RL - SFT ${m.reworded.rl_minus_sft.points} [${m.reworded.rl_minus_sft.ci95.join(', ')}]`
        : '') +
      ` | ${(m.seconds / 60).toFixed(1)} min`,
  );
}
if (got.old && got.new) out.speedup = Math.round((100 * got.old.seconds) / got.new.seconds) / 100;
console.log(JSON.stringify(out));
