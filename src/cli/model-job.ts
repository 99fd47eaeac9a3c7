/**
 * `mcp-gym start --model <name | dir | file.gguf>`: the real-model job (src/trainers/model-job.ts):
 * base -> SFT -> GRPO on the CPU, a held-out evaluation at each stage, progress on the terminal,
 * and one JSON line at the end. Its defaults (MODEL_JOB) are the recipe measured in
 * bench/RESULTS.md, "A real model".
 */
import { stopOnSignals } from './signals.ts';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  JOB_STAGES,
  JobEta,
  jobPlan,
  jobTasks,
  runModelJob,
  resolveModel,
  type JobStage,
  type ModelJobConfig,
  type ModelJobProgress,
  type StageEval,
} from '../trainers/index.ts';
import { intFlag, numFlag, UsageError } from './args.ts';
import { isBfclSuite, toolModeSetting } from '../env/index.ts';
import { toolFormatFlag, toolModeFlag } from './rollout.ts';
import { minutes } from './ui.ts';

/** Held-out BFCL entries of the job on BFCL: 30 of each of its five held-out categories. */
const BFCL_JOB_EVAL_TASKS = 150;
/**
 * The job on BFCL's own recipe (docs/bfcl.md, "A real model trained on BFCL"), where it differs from
 * MODEL_JOB: more demonstrations (drawn from a pool that repeats the parallel entries), each once, with
 * a cosine schedule; GRPO takes fewer, smaller steps, since its prompts are long (a tool list of about
 * 500 tokens). prompt_grad stays on: off was 3x faster and learned the format but not the arguments
 * (bench/RESULTS.md, "BFCL").
 */
export const BFCL_JOB = {
  sft: { demos: 448, epochs: 1, batch: 8, lr: 1e-4, lora_rank: 0, warmup: 2, min_lr_ratio: 0.1, prompt_grad: true, train_layers: 10 },
  rl: { steps: 5, group: 4, max_new_tokens: 192, lr: 2e-5 },
  /** BFCL generates at temperature 0.001 (bfcl-eval's default): the held-out evaluations are greedy. */
  eval_temperature: 0,
} as const;

/** The job's defaults: the suite, the held-out set, the SFT and the GRPO recipe (bench/RESULTS.md, "A real model"). */
export const MODEL_JOB = {
  suite: 'sql',
  min_difficulty: 1,
  max_difficulty: 3,
  eval_tasks: 128,
  k: 2,
  /** The learner's compute dtype for SFT and GRPO (--compute-dtype; TrainConfig compute_dtype). */
  compute_dtype: 'float32' as 'float32' | 'bfloat16',
  sft: { demos: 64, epochs: 2, batch: 16, lr: 1e-4, lora_rank: 0, warmup: 2, min_lr_ratio: 1 },
  rl: {
    preset: 'art',
    steps: 12,
    tasks_per_step: 8,
    group: 8,
    lr: 3e-5,
    // whole groups per micro-batch, packed by their prefix tree's size (the learner's budget of 4096 tokens)
    micro_batch_size: 64,
    beta: 0,
    epochs: 1,
    minibatch_size: 0,
    warmup_steps: 0,
    eval_every: 0,
    max_staleness: 0,
    max_new_tokens: 160,
    drop_zero_variance: true,
    // GRPO's tasks: difficulties 1-2. The joins (difficulty 3) stayed near 0% success through GRPO and gave its groups
    // reward variance from partial credit only: a third of each step's groups (bench/RESULTS.md, "Issue 49, fourth session").
    max_difficulty: 2,
  },
} as const;

export const MODEL_JOB_HELP = `mcp-gym start --model M: a pretrained Hugging Face model from base to SFT to GRPO on the CPU

  --model M             a registered model (smollm2-135m), a checkpoint directory or a .gguf file
  --run DIR             the job's directory (default runs/model-<time>; the same command resumes it)
  --suite S             the task suite (default ${MODEL_JOB.suite}); bfcl: BFCL's live categories for training, 30 entries
                        of each of simple_python, multiple, parallel, parallel_multiple and irrelevance held out (docs/bfcl.md)
  --min-difficulty D --max-difficulty D (default ${MODEL_JOB.min_difficulty}-${MODEL_JOB.max_difficulty})
  --eval-tasks N        held-out tasks (default ${MODEL_JOB.eval_tasks})   -k K samples of each (default ${MODEL_JOB.k})
  --seed S              the training tasks and the sampling (default 0; the held-out tasks stay the same)
  --tool-format F       auto (default), native, hermes
  --sft-demos N --sft-epochs E --sft-lr X --sft-batch B --sft-lora-rank R   (default ${MODEL_JOB.sft.demos}, ${MODEL_JOB.sft.epochs}, ${MODEL_JOB.sft.lr}, ${MODEL_JOB.sft.batch}, 0: full)
  --sft-warmup N --sft-min-lr-ratio X   SFT's schedule: warm-up steps (default ${MODEL_JOB.sft.warmup}), then a cosine to lr x X (default ${MODEL_JOB.sft.min_lr_ratio}: a constant lr)
  --sft-prompt-grad on|off   off: SFT without the gradient through the prompt (3x faster on long tool lists; default on)
  --sft-train-layers N  SFT trains the top N decoder layers only (0: every weight; default 0, bfcl ${BFCL_JOB.sft.train_layers})
  --compute-dtype D     the learner's SFT and GRPO compute: float32, or bfloat16 (a bf16 copy of the float32 weights,
                        about 1.7x faster on a CPU with AVX512-BF16 or AMX; default ${MODEL_JOB.compute_dtype})
  --tools MODE          how the agent sees its tools in every stage: all (default), toolbelt, search, search:K (docs/tasks.md)
  --eval-temperature T  the held-out evaluations' temperature (0: greedy; default 1, bfcl ${BFCL_JOB.eval_temperature} as BFCL generates)
  --temperature T       the rollouts' sampling temperature, which the learner trains at too (default 1; the evaluations stay at 1)
  --steps N --tasks-per-step T --group G --lr X   GRPO (default ${MODEL_JOB.rl.steps}, ${MODEL_JOB.rl.tasks_per_step}, ${MODEL_JOB.rl.group}, ${MODEL_JOB.rl.lr})
  --rl-max-difficulty D GRPO's training tasks up to difficulty D (default ${MODEL_JOB.rl.max_difficulty} on sql, within the job's difficulties;
                        other suites: the job's --max-difficulty); SFT and the held-out tasks keep the job's difficulties
  --suite bfcl changes the defaults: SFT ${BFCL_JOB.sft.demos} demos x ${BFCL_JOB.sft.epochs} epoch, batch ${BFCL_JOB.sft.batch}, cosine to ${BFCL_JOB.sft.min_lr_ratio},
                        the top ${BFCL_JOB.sft.train_layers} layers; GRPO ${BFCL_JOB.rl.steps} steps, group ${BFCL_JOB.rl.group}, ${BFCL_JOB.rl.max_new_tokens} tokens a turn;
                        one greedy sample of each of 150 held-out entries

On sql, the SFT and RL checkpoints are also evaluated on the held-out questions in the wording no training
task uses ("reworded": each question once, k samples; docs/models.md, "Wordings").

Prints the stage, step and the whole job's ETA as it goes, then one JSON line:
{"model", "suite", "base", "sft", "rl", "rl_minus_sft": {"points", "ci95"}, "reworded": {"sft", "rl", "rl_minus_sft"},
 "seconds": {"sft", "rl", "eval", "total"}, "checkpoints"}
`;

/** One line of progress: the stage, its step, the whole job's ETA (JobEta) and its elapsed time. */
function progressLine(t0: number, plan: Record<JobStage, number>) {
  const tty = process.stderr.isTTY === true;
  const eta = new JobEta(plan);
  let stage = '';
  let last = 0;
  return (p: ModelJobProgress) => {
    const now = performance.now();
    const left = eta.update(p, now / 1000);
    if (p.stage !== stage) {
      if (tty && stage) process.stderr.write('\n');
      stage = p.stage;
    } else {
      if (tty && now - last < 200 && p.done < p.total) return;
      if (!tty && p.done < p.total && p.stage !== 'rl' && p.stage !== 'sft' && p.done % Math.max(1, Math.floor(p.total / 10)) !== 0) return;
    }
    last = now;
    const n = JOB_STAGES.indexOf(p.stage as JobStage) + 1;
    const line = `[${n}/${JOB_STAGES.length} ${p.stage}] ${p.done}/${p.total}${p.detail ? ` ${p.detail}` : ''}  job ${minutes((now - t0) / 1000)}, ETA ${minutes(left)}`;
    process.stderr.write(tty ? `\r${line.padEnd(100)}` : `${line}\n`);
  };
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const c2 = (e: StageEval) => Math.round(e.episodes / Math.max(1, e.tasks));
const line = (name: string, e: StageEval) =>
  `${name.padEnd(5)} held-out success ${pct(e.success)} [${pct(e.ci95[0])}, ${pct(e.ci95[1])}] over ${e.tasks} tasks x ${Math.round(e.episodes / Math.max(1, e.tasks))}; pass^k ${Object.entries(
    e.pass_hat_k,
  )
    .map(([k, v]) => `${k}: ${pct(v)}`)
    .join(', ')}; tool calls ${e.tool_call_parse.strict} strict, ${e.tool_call_parse.lenient} lenient, ${e.tool_call_parse.failed} failed`;

export async function modelJobCommand(argv: string[]): Promise<void> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: argv,
      options: {
        model: { type: 'string' },
        run: { type: 'string' },
        suite: { type: 'string' },
        'min-difficulty': { type: 'string' },
        'max-difficulty': { type: 'string' },
        'eval-tasks': { type: 'string' },
        k: { type: 'string', short: 'k' },
        seed: { type: 'string' },
        'tool-format': { type: 'string' },
        'sft-demos': { type: 'string' },
        'sft-epochs': { type: 'string' },
        'sft-lr': { type: 'string' },
        'sft-batch': { type: 'string' },
        'sft-lora-rank': { type: 'string' },
        'sft-warmup': { type: 'string' },
        'sft-min-lr-ratio': { type: 'string' },
        'sft-prompt-grad': { type: 'string' },
        'sft-train-layers': { type: 'string' },
        'compute-dtype': { type: 'string' },
        tools: { type: 'string' },
        'eval-temperature': { type: 'string' },
        temperature: { type: 'string' },
        steps: { type: 'string' },
        'tasks-per-step': { type: 'string' },
        group: { type: 'string' },
        lr: { type: 'string' },
        'rl-max-difficulty': { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    throw new UsageError(`${(err as Error).message} (mcp-gym start --model M --help lists the options)`);
  }
  if (values.help) {
    process.stdout.write(MODEL_JOB_HELP);
    return;
  }
  const s = (k: string) => values[k] as string | undefined;
  const int = (k: string, d: number, min = 1) => {
    const v = intFlag(s(k), `--${k}`, d);
    if (v < min) throw new UsageError(`--${k} must be at least ${min}, got '${s(k)}'`);
    return v;
  };
  const spec = s('model')!;
  const t0 = performance.now();
  const suite = s('suite') ?? MODEL_JOB.suite;
  const bfcl = isBfclSuite(suite);
  if (bfcl && suite !== 'bfcl')
    throw new UsageError(`--suite: the job on BFCL is --suite bfcl (live categories for training, five non-live ones held out; docs/bfcl.md), got '${suite}'`);
  const pg = s('sft-prompt-grad');
  if (pg !== undefined && pg !== 'on' && pg !== 'off') throw new UsageError(`--sft-prompt-grad: on or off, got '${pg}'`);
  // (checked before the model is resolved, which may convert it)
  const cd = s('compute-dtype') ?? MODEL_JOB.compute_dtype;
  if (cd !== 'float32' && cd !== 'bfloat16') throw new UsageError(`--compute-dtype: float32 or bfloat16, got '${cd}'`);
  const tools = toolModeFlag(s('tools'));
  const trainLayers = int('sft-train-layers', bfcl ? BFCL_JOB.sft.train_layers : 0, 0);
  const temperature = numFlag(s('temperature'), '--temperature', { min: 0.05 });
  // Rollouts at another temperature keep the evaluations at 1 (comparable with the base's and other jobs') unless told.
  const evalTemperature =
    numFlag(s('eval-temperature'), '--eval-temperature', { min: 0 }) ?? (bfcl ? BFCL_JOB.eval_temperature : temperature !== undefined ? 1 : undefined);
  // BFCL: the held-out categories span difficulties 1-4; the job's own split replaces the difficulty filter.
  const min = int('min-difficulty', bfcl ? 1 : MODEL_JOB.min_difficulty);
  const max = int('max-difficulty', bfcl ? 5 : MODEL_JOB.max_difficulty);
  if (min > max || max > 5) throw new UsageError(`--min-difficulty ${min} and --max-difficulty ${max}: difficulties are 1 to 5, min at most max`);
  // On sql, GRPO leaves out the hardest tasks (MODEL_JOB.rl.max_difficulty), within the job's difficulties.
  const rlMax = int('rl-max-difficulty', suite === MODEL_JOB.suite ? Math.min(max, Math.max(min, MODEL_JOB.rl.max_difficulty)) : max);
  if (rlMax < min || rlMax > max) throw new UsageError(`--rl-max-difficulty ${rlMax}: GRPO's tasks are within the job's difficulties, ${min} to ${max}`);
  let model: string;
  try {
    model = await resolveModel(spec, (l) => process.stderr.write(`${l}\n`));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const sftDefaults = bfcl ? BFCL_JOB.sft : MODEL_JOB.sft;
  const promptGrad = pg === undefined ? (bfcl ? BFCL_JOB.sft.prompt_grad : true) : pg === 'on';
  const config: ModelJobConfig = {
    model,
    model_name: spec,
    suite,
    min_difficulty: min,
    max_difficulty: max,
    eval_tasks: int('eval-tasks', bfcl ? BFCL_JOB_EVAL_TASKS : MODEL_JOB.eval_tasks),
    // BFCL scores one output per entry: one sample of each held-out entry.
    k: int('k', bfcl ? 1 : MODEL_JOB.k),
    seed: int('seed', 0, 0),
    tool_format: toolFormatFlag(s('tool-format')),
    sft: {
      demos: int('sft-demos', sftDefaults.demos),
      epochs: int('sft-epochs', sftDefaults.epochs),
      batch: int('sft-batch', sftDefaults.batch),
      lr: numFlag(s('sft-lr'), '--sft-lr', { min: 0 }) ?? sftDefaults.lr,
      lora_rank: int('sft-lora-rank', 0, 0),
      warmup: int('sft-warmup', sftDefaults.warmup, 0),
      min_lr_ratio: numFlag(s('sft-min-lr-ratio'), '--sft-min-lr-ratio', { min: 0, max: 1 }) ?? sftDefaults.min_lr_ratio,
      ...(promptGrad === false ? { prompt_grad: false } : {}),
      ...(trainLayers > 0 ? { train_layers: trainLayers } : {}),
    },
    rl: {
      ...MODEL_JOB.rl,
      steps: int('steps', bfcl ? BFCL_JOB.rl.steps : MODEL_JOB.rl.steps, 0),
      tasks_per_step: int('tasks-per-step', MODEL_JOB.rl.tasks_per_step),
      group: int('group', bfcl ? BFCL_JOB.rl.group : MODEL_JOB.rl.group, 2),
      lr: numFlag(s('lr'), '--lr', { min: 0 }) ?? (bfcl ? BFCL_JOB.rl.lr : MODEL_JOB.rl.lr),
      ...(bfcl ? { max_new_tokens: BFCL_JOB.rl.max_new_tokens } : {}),
      max_difficulty: rlMax,
      ...(temperature !== undefined ? { temperature } : {}),
    },
    ...(evalTemperature !== undefined ? { eval_temperature: evalTemperature } : {}),
    // sql: the SFT and RL checkpoints also on the held-out questions in the wording no training task uses
    ...(suite === 'sql' ? { reworded: true } : {}),
    ...(cd !== 'float32' ? { compute_dtype: cd } : {}),
    ...(tools ? { tools: toolModeSetting(tools) } : {}),
  };
  const dir = s('run') ?? join('runs', `model-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  console.log(
    `model job: ${spec} (${model}) on ${config.suite} difficulty ${min}-${max}: base eval, SFT (${config.sft.demos} demos x ${config.sft.epochs} epochs), GRPO (${config.rl.steps} steps of ${config.rl.tasks_per_step} x ${config.rl.group}${rlMax < max ? `, difficulty ${min}-${rlMax}` : ''}); in ${dir}`,
  );
  const stop = stopOnSignals((name) => `${name}: stopping after the step in flight; run the same command to resume`);
  const ac = stop.ac;
  const { held, reworded } = jobTasks(config);
  const progress = progressLine(t0, jobPlan(config, held.length, reworded?.length ?? 0));
  try {
    const r = await runModelJob({
      config,
      dir,
      signal: ac.signal,
      onLog: (l) => process.stderr.write(`${process.stderr.isTTY ? '\r' : ''}${l}\n`),
      onProgress: progress,
    });
    if (process.stderr.isTTY) process.stderr.write('\n');
    console.log(line('base', r.base));
    console.log(line('sft', r.sft));
    console.log(line('rl', r.rl));
    console.log(
      `rl - sft: ${r.rl_minus_sft.points.toFixed(1)} points [${r.rl_minus_sft.ci95[0].toFixed(1)}, ${r.rl_minus_sft.ci95[1].toFixed(1)}] (paired over ${r.rl_minus_sft.tasks} tasks); minutes: sft ${(r.seconds.sft / 60).toFixed(1)}, rl ${(r.seconds.rl / 60).toFixed(1)}, eval ${(r.seconds.eval / 60).toFixed(1)}, total ${(r.seconds.total / 60).toFixed(1)}`,
    );
    if (r.reworded)
      console.log(
        `held-out wording (${r.reworded.sft.tasks} questions x ${c2(r.reworded.sft)}): sft ${pct(r.reworded.sft.success)}, rl ${pct(r.reworded.rl.success)}, rl - sft ${r.reworded.rl_minus_sft.points.toFixed(1)} points [${r.reworded.rl_minus_sft.ci95[0].toFixed(1)}, ${r.reworded.rl_minus_sft.ci95[1].toFixed(1)}]`,
      );
    const { tasks: _t, ...diff } = r.rl_minus_sft;
    console.log(JSON.stringify({ ...r, rl_minus_sft: diff }));
  } finally {
    stop.dispose();
  }
}
