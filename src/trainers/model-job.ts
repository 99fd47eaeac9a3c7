/**
 * The real-model job (docs/models.md, "The job"): a pretrained Hugging Face model from its base to
 * SFT to GRPO, measured on the same held-out tasks at each stage.
 *
 *   1. base   held-out evaluation of the checkpoint as it is (k samples per task)
 *   2. sft    SFT cold start on expert demonstrations rendered by the model's own template (runSft)
 *   3.        held-out evaluation of the SFT checkpoint  (the training run's evaluation before step 1)
 *   4. rl     GRPO from the SFT checkpoint on the training split (train)
 *   5.        held-out evaluation of the RL checkpoint   (the training run's evaluation after its last step)
 *
 * Every stage writes into the job directory (base/, sft/, rl/, job.json) and is skipped when it is
 * already there, so the same command resumes a job that was stopped. Success is given with its 95%
 * interval over tasks (a task's k episodes are one cluster) and RL's gain over SFT with the paired
 * interval of the per-task differences (lib/evaluator.ts).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { OnnxPolicy } from '../agents/index.ts';
import { assertSomeEpisodeRan, Environment, parseToolMode, readTrajectories, rollout, type Task, type Trajectory } from '../env/index.ts';
import { Interrupted, pairedDifference, summarizeEpisodes, taskRates } from '../../lib/index.ts';
import type { TrainConfigInput } from './config.ts';
import { resolveConfig } from './resolve-config.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { finalEval, train } from './loop.ts';
import { trainingTasks } from './run-context.ts';
import { runSft } from './sft.ts';
import { bfclJobTasks, bfclStage, isBfclJob, type BfclStage } from './bfcl-job.ts';
import { paramsKey, rephraseSqlTask } from '../env/suites/index.ts';

export interface ModelJobConfig {
  /** The base checkpoint's directory (resolved: models.ts resolveModel). */
  model: string;
  /** Its name as given (recorded). */
  model_name: string;
  suite: string;
  min_difficulty: number;
  max_difficulty: number;
  /** Held-out tasks (the first N of the suite's eval split at these difficulties). */
  eval_tasks: number;
  /** Samples per held-out task. */
  k: number;
  seed: number;
  tool_format: 'auto' | 'native' | 'hermes';
  /** The held-out evaluations' sampling temperature (0: greedy, BFCL's protocol); default: the rollouts' (rl.temperature, 1). */
  eval_temperature?: number;
  /**
   * sql: the SFT and RL checkpoints are also evaluated on the held-out questions asked in the wording no
   * training task or demonstration uses (rephraseSqlTask; each question once), beside the usual held-out tasks.
   */
  reworded?: boolean;
  /** The learner's compute dtype for SFT and GRPO (TrainConfig compute_dtype: bfloat16, a bf16 copy of float32 weights); default float32. */
  compute_dtype?: 'float32' | 'bfloat16';
  /** How the agent sees its tools in every stage (src/env/tool-modes.ts: toolbelt, search, search:K); default all. */
  tools?: string;
  /**
   * warmup: steps (default 5% of them); min_lr_ratio: where the cosine ends (default 0.1; 1: constant lr);
   * prompt_grad: false trains without the gradient through the prompts' keys and values (runSft's promptGrad);
   * train_layers: only the top N decoder layers (runSft's trainLayers).
   */
  sft: {
    demos: number;
    epochs: number;
    batch: number;
    lr: number;
    lora_rank: number;
    warmup?: number;
    min_lr_ratio?: number;
    prompt_grad?: boolean;
    train_layers?: number;
  };
  /** The GRPO run's config fields (a preset and what it overrides). */
  rl: Partial<TrainConfigInput>;
}

export interface StageEval {
  success: number;
  /** 95% interval over tasks. */
  ci95: [number, number];
  pass_hat_k: Record<string, number>;
  episodes: number;
  tasks: number;
  /** How the turns' tool calls were read: strict, lenient, failed; and the turns with none. */
  tool_call_parse: Record<string, number>;
  trajectories: string;
  /** BFCL jobs: per held-out category, BFCL's accuracy (first samples) and pass@1; per multi-turn category, BFCL's accuracy on its sample. */
  bfcl?: BfclStage;
}

export interface ModelJobResult {
  model: string;
  suite: string;
  base: StageEval;
  sft: StageEval;
  rl: StageEval;
  rl_minus_sft: { points: number; ci95: [number, number]; tasks: number };
  /** `reworded`: the SFT and RL checkpoints on the held-out questions in the held-out wording. */
  reworded?: { sft: StageEval; rl: StageEval; rl_minus_sft: { points: number; ci95: [number, number]; tasks: number } };
  seconds: { sft: number; rl: number; eval: number; total: number };
  checkpoints: { sft: string; rl: string };
  tool_format: string;
}

export interface ModelJobProgress {
  stage: JobStage | 'done';
  /** Stage-local progress: done / total (episodes, SFT steps or RL steps). */
  done: number;
  total: number;
  detail?: string;
}

export interface ModelJobOptions {
  config: ModelJobConfig;
  dir: string;
  signal?: AbortSignal;
  /**
   * Taking turns with other work in the process (bench/model-job.ts): awaited before each unit of the job's
   * work (an evaluation, the SFT, an RL step), which then runs until it calls the function returned.
   */
  turn?: () => Promise<() => void>;
  onLog?: (line: string) => void;
  onProgress?: (p: ModelJobProgress) => void;
}

/** The job's stages in order: the base's evaluation, SFT, the SFT checkpoint's evaluation, the RL steps, the RL checkpoint's evaluation. */
export const JOB_STAGES = ['base', 'sft', 'sft-eval', 'rl', 'rl-eval'] as const;
export type JobStage = (typeof JOB_STAGES)[number];

/**
 * Seconds per unit of the job's work alone on this machine's 2 cores (the sql recipe, bench/RESULTS.md "A real
 * model", the means over seeds 0, 1 and 2 on 2026-12-07): an episode of the base model's evaluation (it writes prose to the token limit), an episode of a
 * trained checkpoint's evaluation, a demonstration of an SFT epoch, an episode of an RL step (its rollout and
 * its share of the learner). The whole job's ETA starts from them and follows the machine's pace as it goes.
 */
export const JOB_UNIT_SECONDS = { base_episode: 0.72, eval_episode: 0.42, sft_demo: 1.55, rl_episode: 1.1 };

/** The seconds each stage is expected to take (JOB_UNIT_SECONDS; evaluations of `held` tasks and `reworded` ones). */
export function jobPlan(c: ModelJobConfig, held: number, reworded = 0): Record<JobStage, number> {
  const u = JOB_UNIT_SECONDS;
  const evalEpisodes = (held + reworded) * c.k;
  return {
    base: held * c.k * u.base_episode,
    sft: c.sft.demos * c.sft.epochs * u.sft_demo,
    'sft-eval': evalEpisodes * u.eval_episode,
    rl: Number(c.rl.steps ?? 0) * Number(c.rl.tasks_per_step ?? 0) * Number(c.rl.group ?? 0) * u.rl_episode,
    'rl-eval': evalEpisodes * u.eval_episode,
  };
}

/**
 * The whole job's ETA from its progress (`mcp-gym start --model` prints it from the first minute): the plan's
 * remaining seconds times the pace so far (seconds taken over seconds planned for the work done, with a
 * minute's worth of the plan as its prior, so the first figures are the plan's). Stages finished before this
 * process started (a resumed job) count neither way.
 */
export class JobEta {
  private first: number | undefined;
  private stage = -1;
  private stageStart = 0;
  private start = 0;

  constructor(private readonly plan: Record<JobStage, number>) {}

  /** Seconds left after progress `p` at `now` (seconds, any clock). */
  update(p: ModelJobProgress, now: number): number {
    if (p.stage === 'done') return 0;
    const i = JOB_STAGES.indexOf(p.stage);
    if (this.first === undefined) {
      this.first = i;
      this.start = now;
    }
    if (i !== this.stage) {
      this.stage = i;
      this.stageStart = now;
    }
    const plan = JOB_STAGES.map((s) => this.plan[s]);
    const f = p.total > 0 ? Math.min(1, p.done / p.total) : 0;
    const before = plan.slice(this.first, i).reduce((a, b) => a + b, 0);
    const after = plan.slice(i + 1).reduce((a, b) => a + b, 0);
    const here = plan[i]!;
    // Within a stage with no progress yet (an evaluation inside training), its elapsed time counts as done.
    const doneHere = f > 0 ? f * here : Math.min(here, now - this.stageStart);
    const prior = 60;
    const pace = (now - this.start + prior) / (before + doneHere + prior);
    const leftHere = f > 0 ? (1 - f) * here * pace : Math.max(0, here * pace - (now - this.stageStart));
    return leftHere + after * pace;
  }
}

/** An evaluation's figures from its episodes. */
export function stageEval(trajectories: Trajectory[], k: number, file: string): StageEval {
  const parse: Record<string, number> = { strict: 0, lenient: 0, failed: 0, none: 0 };
  for (const t of trajectories) for (const turn of t.turns) parse[turn.call_parse ?? 'none']!++;
  const s = summarizeEpisodes(trajectories, k);
  return {
    success: s.success,
    ci95: s.ci95,
    pass_hat_k: s.pass_hat_k,
    episodes: s.episodes,
    tasks: s.tasks,
    tool_call_parse: parse,
    trajectories: file,
  };
}

/**
 * The suite's held-out tasks for the job (the first N at its difficulties), its training tasks and, with
 * `reworded`, the held-out questions in the held-out wording (each question once).
 */
export function jobTasks(c: ModelJobConfig): { train: Task[]; held: Task[]; multiTurn?: Task[]; reworded?: Task[] } {
  if (isBfclJob(c.suite)) return bfclJobTasks(c.eval_tasks);
  const rc = resolveConfig({ ...c.rl, suite: c.suite, min_difficulty: c.min_difficulty, max_difficulty: c.max_difficulty, seed: c.seed, model: c.model });
  const { train: t, held: all } = trainingTasks(rc);
  const held = all.slice(0, c.eval_tasks);
  if (!c.reworded) return { train: t, held };
  if (c.suite !== 'sql') throw new Error(`reworded: the held-out wording is the sql suite's, not ${c.suite}'s`);
  const reworded = new Map<string, Task>();
  for (const task of held) {
    const r = rephraseSqlTask(task);
    reworded.set(paramsKey(r), r);
  }
  return { train: t, held, reworded: [...reworded.values()] };
}

/** A checkpoint's held-out evaluation as the job runs it (k samples per task, the job's sampling settings); `model` defaults to the job's base. */
export async function evaluateCheckpoint(
  c: ModelJobConfig,
  held: Task[],
  file: string,
  o: Pick<ModelJobOptions, 'onLog' | 'onProgress' | 'signal'>,
  model = c.model,
  stage: JobStage = 'base',
): Promise<Trajectory[]> {
  ensureHfOnnx(model, o.onLog);
  const temperature = c.eval_temperature ?? c.rl.temperature;
  const policy = await OnnxPolicy.load(model, {
    seed: c.seed + 101,
    maxNewTokens: c.rl.max_new_tokens ?? 96,
    ...(temperature !== undefined ? { temperature } : {}),
    threads: 2,
    chatTemplate: { toolFormat: c.tool_format },
  });
  const env = new Environment({ reward: c.rl.reward ?? 'art', ...(c.tools && c.tools !== 'all' ? { tools: parseToolMode(c.tools) } : {}) });
  let done = 0;
  try {
    const r = await rollout(env, policy, held, {
      group: c.k,
      concurrency: 64,
      iteration: 'eval.base',
      out: file,
      ...(o.signal ? { signal: o.signal } : {}),
      onEpisode: () => o.onProgress?.({ stage, done: ++done, total: held.length * c.k }),
    });
    if (o.signal?.aborted) throw new Interrupted(`stopped during the evaluation of ${model}; run the same command again to resume`);
    assertSomeEpisodeRan(r.trajectories, `the evaluation of ${model}`);
    return r.trajectories;
  } finally {
    await env.close();
    await policy.close();
  }
}

const readJson = <T>(file: string): T | undefined => (existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as T) : undefined);

export async function runModelJob(o: ModelJobOptions): Promise<ModelJobResult> {
  const c = o.config;
  const dir = resolve(o.dir);
  const log = o.onLog ?? (() => {});
  mkdirSync(dir, { recursive: true });
  const jobFile = join(dir, 'job.json');
  const was = readJson<{ config: ModelJobConfig }>(jobFile);
  if (was && JSON.stringify(was.config) !== JSON.stringify(c))
    throw new Error(`${dir} holds a job made with other settings (its job.json): use another --run directory`);
  const seconds = { sft: 0, rl: 0, eval: 0, total: 0, ...(readJson<{ seconds?: ModelJobResult['seconds'] }>(jobFile)?.seconds ?? {}) };
  // Wall time accumulates over resumed runs: each save records the time so far.
  const t0 = performance.now() - seconds.total * 1000;
  const save = (extra: Record<string, unknown> = {}) => {
    seconds.total = (performance.now() - t0) / 1000;
    writeFileSync(jobFile, JSON.stringify({ config: c, seconds, ...extra }, null, 2) + '\n');
  };
  save();
  const { train: trainTasks, held, multiTurn, reworded } = jobTasks(c);
  // One unit of work at a time when the caller takes turns (bench/model-job.ts); a no-op otherwise.
  const take = async () => (o.turn ? await o.turn() : () => {});
  // The held-out tasks as a task file: `mcp-gym eval --tasks <dir>/heldout-tasks.jsonl --model <checkpoint> -k K` evaluates any checkpoint on them.
  writeFileSync(join(dir, 'heldout-tasks.jsonl'), held.map((t) => JSON.stringify(t)).join('\n') + '\n');
  log(
    `${held.length} held-out tasks x ${c.k} samples${reworded ? ` (and ${reworded.length} questions in the held-out wording for SFT and RL)` : ''}, ${trainTasks.length} training tasks (${c.suite}, difficulty ${c.min_difficulty}-${c.max_difficulty})`,
  );

  // 1. the base model
  const baseDir = join(dir, 'base');
  const baseFile = join(baseDir, 'trajectories.jsonl');
  let base = readJson<StageEval>(join(baseDir, 'eval.json'));
  if (!base) {
    mkdirSync(baseDir, { recursive: true });
    const release = await take();
    const te = performance.now();
    const trajectories = await evaluateCheckpoint(c, held, baseFile, o);
    base = stageEval(trajectories, c.k, 'base/trajectories.jsonl');
    if (multiTurn) base.bfcl = bfclStage(held, trajectories, c.k, await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(baseDir, 'multi-turn.jsonl'), o));
    writeFileSync(join(baseDir, 'eval.json'), JSON.stringify(base, null, 2) + '\n');
    seconds.eval += (performance.now() - te) / 1000;
    save();
    release();
  }
  log(`base: held-out success ${(100 * base.success).toFixed(1)}% [${(100 * base.ci95[0]).toFixed(1)}, ${(100 * base.ci95[1]).toFixed(1)}]`);

  // 2. SFT on expert demonstrations of the training tasks
  const sftDir = join(dir, 'sft');
  if (!existsSync(join(sftDir, 'sft.json'))) {
    const release = await take();
    const ts = performance.now();
    const steps = Math.max(1, Math.round((c.sft.epochs * c.sft.demos) / c.sft.batch));
    o.onProgress?.({ stage: 'sft', done: 0, total: steps });
    const r = await runSft({
      tasks: trainTasks,
      model: c.model,
      demos: c.sft.demos,
      out: sftDir,
      steps,
      batchSize: c.sft.batch,
      lr: c.sft.lr,
      seed: c.seed,
      ...(c.sft.warmup !== undefined ? { warmup: c.sft.warmup } : {}),
      ...(c.sft.min_lr_ratio !== undefined ? { minLrRatio: c.sft.min_lr_ratio } : {}),
      ...(c.sft.prompt_grad === false ? { promptGrad: false } : {}),
      ...(c.sft.train_layers !== undefined ? { trainLayers: c.sft.train_layers } : {}),
      ...(c.compute_dtype !== undefined ? { computeDtype: c.compute_dtype } : {}),
      ...(c.tools && c.tools !== 'all' ? { tools: parseToolMode(c.tools) } : {}),
      toolFormat: c.tool_format,
      ...(c.sft.lora_rank > 0 ? { lora: { r: c.sft.lora_rank, alpha: 2 * c.sft.lora_rank } } : {}),
      onLog: log,
      onProgress: (line) => {
        const m = /sft step (\d+)\/(\d+)/.exec(line);
        if (m) o.onProgress?.({ stage: 'sft', done: Number(m[1]), total: Number(m[2]), detail: line.replace(/^sft step \d+\/\d+ /, '') });
      },
    });
    seconds.sft += (performance.now() - ts) / 1000;
    writeFileSync(join(sftDir, 'sft.json'), JSON.stringify(r, null, 2) + '\n');
    save();
    release();
  }

  // 3-5. GRPO from the SFT checkpoint; its evaluations before and after are the SFT's and the RL's
  const rlDir = join(dir, 'rl');
  const resume = existsSync(join(rlDir, 'state.json'));
  const config: Partial<TrainConfigInput> = {
    ...c.rl,
    model: sftDir,
    suite: c.suite,
    // GRPO may train on fewer difficulties than the job's (rl.min_difficulty / rl.max_difficulty); SFT and the held-out tasks span the job's.
    min_difficulty: c.rl.min_difficulty ?? c.min_difficulty,
    max_difficulty: c.rl.max_difficulty ?? c.max_difficulty,
    seed: c.seed,
    eval_samples: c.k,
    ...(c.eval_temperature !== undefined ? { eval_temperature: c.eval_temperature } : {}),
    tool_format: c.tool_format,
    ...(c.compute_dtype !== undefined ? { compute_dtype: c.compute_dtype } : {}),
    ...(c.tools !== undefined ? { tools: c.tools } : {}),
  };
  let evalSeconds = 0;
  const steps = Number(config.steps ?? 0);
  o.onProgress?.({ stage: 'sft-eval', done: 0, total: 1, detail: 'evaluating the SFT checkpoint' });
  // The evaluations inside train(): the SFT checkpoint's before the first step, the RL checkpoint's after the last.
  let evalStage: JobStage = 'sft-eval';
  // The turn: held from the SFT checkpoint's evaluation through step 1, then one step at a time, then through the last evaluation.
  // A step's turn ends as the next step's rollouts start (the step's checkpoint overlaps them: step-persist.ts).
  let release: (() => void) | undefined = await take();
  let rollouts = 0;
  const result = await train({
    config,
    runDir: rlDir,
    resume,
    // The reworded questions are evaluated with the usual ones (one batch), and told apart by their ids below.
    evalTasks: reworded ? [...held, ...reworded] : held,
    // BFCL: the job's own training pool (the live categories), not the suite's.
    ...(multiTurn ? { trainTasks } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
    onLog: log,
    beforeRollout: async () => {
      if (rollouts++ > 0) {
        release?.();
        release = undefined;
      }
      release ??= await take();
    },
    onStep: (m) => {
      o.onProgress?.({
        stage: 'rl',
        done: Number(m.step),
        total: steps,
        detail: `success ${(100 * Number(m.success_rate)).toFixed(0)}%${m.eval_success !== undefined ? `, held-out ${(100 * Number(m.eval_success)).toFixed(0)}%` : ''}`,
      });
      if (Number(m.step) >= steps) {
        evalStage = 'rl-eval';
        o.onProgress?.({ stage: 'rl-eval', done: 0, total: 1, detail: 'evaluating the RL checkpoint' });
      }
    },
    onEvalEpisode: (done, total) => o.onProgress?.({ stage: evalStage, done, total }),
    onEval: (s) => {
      if (evalSeconds === 0) o.onProgress?.({ stage: 'rl', done: 0, total: steps });
      evalSeconds += s;
    },
  });
  seconds.eval += evalSeconds;
  if (result.stopped) throw new Interrupted(`the RL stage stopped at step ${result.steps}; run the same command again to resume`);
  // train_seconds: the steps (evaluations between them included: eval_every 0 keeps them out)
  seconds.rl = result.train_seconds;
  const read = (file: string) => readTrajectories(join(rlDir, file));
  const rewordedIds = new Set((reworded ?? []).map((t) => t.id));
  const isReworded = (t: Trajectory) => rewordedIds.has(t.task_id);
  const sftAll = read(result.before.trajectories!);
  const rlAll = read(finalEval(result).trajectories!);
  const sftTraj = sftAll.filter((t) => !isReworded(t));
  const rlTraj = rlAll.filter((t) => !isReworded(t));
  const sft = stageEval(sftTraj, c.k, join('rl', result.before.trajectories!));
  const rl = stageEval(rlTraj, c.k, join('rl', finalEval(result).trajectories!));
  if (multiTurn) {
    // Every multi-turn category at each checkpoint, whatever it scores.
    const te = performance.now();
    sft.bfcl = bfclStage(held, sftTraj, c.k, await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(sftDir, 'multi-turn.jsonl'), o, sftDir, 'rl-eval'));
    rl.bfcl = bfclStage(
      held,
      rlTraj,
      c.k,
      await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(rlDir, 'multi-turn.jsonl'), o, join(rlDir, 'model'), 'rl-eval'),
    );
    seconds.eval += (performance.now() - te) / 1000;
  }
  release?.();
  const gain = (a: Trajectory[], b: Trajectory[]) => {
    const d = pairedDifference(taskRates(a), taskRates(b), { a: a.length, b: b.length });
    return { points: 100 * d.mean, ci95: [100 * d.ci95[0], 100 * d.ci95[1]] as [number, number], tasks: d.tasks };
  };
  const rw = reworded ? { sft: sftAll.filter(isReworded), rl: rlAll.filter(isReworded) } : undefined;
  seconds.total = (performance.now() - t0) / 1000;
  const out: ModelJobResult = {
    model: c.model_name,
    suite: `${c.suite} (difficulty ${c.min_difficulty}-${c.max_difficulty})`,
    base,
    sft,
    rl,
    rl_minus_sft: gain(sftTraj, rlTraj),
    ...(rw
      ? {
          reworded: {
            sft: stageEval(rw.sft, c.k, join('rl', result.before.trajectories!)),
            rl: stageEval(rw.rl, c.k, join('rl', finalEval(result).trajectories!)),
            rl_minus_sft: gain(rw.sft, rw.rl),
          },
        }
      : {}),
    seconds: { sft: round(seconds.sft), rl: round(seconds.rl), eval: round(seconds.eval), total: round(seconds.total) },
    checkpoints: { sft: sftDir, rl: join(rlDir, 'model') },
    tool_format: c.tool_format,
  };
  save({ result: out });
  return out;
}

const round = (x: number) => Math.round(x * 10) / 10;
