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
import { assertSomeEpisodeRan, Environment, readTrajectories, rollout, type Task, type Trajectory } from '../env/index.ts';
import { Interrupted, pairedDifference, summarizeEpisodes, taskRates } from '../../lib/index.ts';
import type { TrainConfigInput } from './config.ts';
import { resolveConfig } from './resolve-config.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { finalEval, train } from './loop.ts';
import { trainingTasks } from './run-context.ts';
import { runSft } from './sft.ts';
import { bfclJobTasks, bfclStage, isBfclJob, type BfclStage } from './bfcl-job.ts';

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
  seconds: { sft: number; rl: number; eval: number; total: number };
  checkpoints: { sft: string; rl: string };
  tool_format: string;
}

export interface ModelJobProgress {
  stage: 'base' | 'sft' | 'sft-eval' | 'rl' | 'rl-eval' | 'done';
  /** Stage-local progress: done / total (episodes, SFT steps or RL steps). */
  done: number;
  total: number;
  detail?: string;
}

export interface ModelJobOptions {
  config: ModelJobConfig;
  dir: string;
  signal?: AbortSignal;
  onLog?: (line: string) => void;
  onProgress?: (p: ModelJobProgress) => void;
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

/** The suite's held-out tasks for the job (the first N at its difficulties) and its training tasks. */
export function jobTasks(c: ModelJobConfig): { train: Task[]; held: Task[]; multiTurn?: Task[] } {
  if (isBfclJob(c.suite)) return bfclJobTasks(c.eval_tasks);
  const rc = resolveConfig({ ...c.rl, suite: c.suite, min_difficulty: c.min_difficulty, max_difficulty: c.max_difficulty, seed: c.seed, model: c.model });
  const { train: t, held } = trainingTasks(rc);
  return { train: t, held: held.slice(0, c.eval_tasks) };
}

/** A checkpoint's held-out evaluation as the job runs it (k samples per task, the job's sampling settings); `model` defaults to the job's base. */
export async function evaluateCheckpoint(
  c: ModelJobConfig,
  held: Task[],
  file: string,
  o: Pick<ModelJobOptions, 'onLog' | 'onProgress' | 'signal'>,
  model = c.model,
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
  const env = new Environment({ reward: c.rl.reward ?? 'art' });
  let done = 0;
  try {
    const r = await rollout(env, policy, held, {
      group: c.k,
      concurrency: 64,
      iteration: 'eval.base',
      out: file,
      ...(o.signal ? { signal: o.signal } : {}),
      onEpisode: () => o.onProgress?.({ stage: 'base', done: ++done, total: held.length * c.k }),
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
  const { train: trainTasks, held, multiTurn } = jobTasks(c);
  // The held-out tasks as a task file: `mcp-gym eval --tasks <dir>/heldout-tasks.jsonl --model <checkpoint> -k K` evaluates any checkpoint on them.
  writeFileSync(join(dir, 'heldout-tasks.jsonl'), held.map((t) => JSON.stringify(t)).join('\n') + '\n');
  log(`${held.length} held-out tasks x ${c.k} samples, ${trainTasks.length} training tasks (${c.suite}, difficulty ${c.min_difficulty}-${c.max_difficulty})`);

  // 1. the base model
  const baseDir = join(dir, 'base');
  const baseFile = join(baseDir, 'trajectories.jsonl');
  let base = readJson<StageEval>(join(baseDir, 'eval.json'));
  if (!base) {
    mkdirSync(baseDir, { recursive: true });
    const te = performance.now();
    const trajectories = await evaluateCheckpoint(c, held, baseFile, o);
    base = stageEval(trajectories, c.k, 'base/trajectories.jsonl');
    if (multiTurn) base.bfcl = bfclStage(held, trajectories, c.k, await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(baseDir, 'multi-turn.jsonl'), o));
    writeFileSync(join(baseDir, 'eval.json'), JSON.stringify(base, null, 2) + '\n');
    seconds.eval += (performance.now() - te) / 1000;
    save();
  }
  log(`base: held-out success ${(100 * base.success).toFixed(1)}% [${(100 * base.ci95[0]).toFixed(1)}, ${(100 * base.ci95[1]).toFixed(1)}]`);

  // 2. SFT on expert demonstrations of the training tasks
  const sftDir = join(dir, 'sft');
  if (!existsSync(join(sftDir, 'sft.json'))) {
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
  }

  // 3-5. GRPO from the SFT checkpoint; its evaluations before and after are the SFT's and the RL's
  const rlDir = join(dir, 'rl');
  const resume = existsSync(join(rlDir, 'state.json'));
  const config: Partial<TrainConfigInput> = {
    ...c.rl,
    model: sftDir,
    suite: c.suite,
    min_difficulty: c.min_difficulty,
    max_difficulty: c.max_difficulty,
    seed: c.seed,
    eval_samples: c.k,
    ...(c.eval_temperature !== undefined ? { eval_temperature: c.eval_temperature } : {}),
    tool_format: c.tool_format,
  };
  let evalSeconds = 0;
  o.onProgress?.({ stage: 'rl', done: 0, total: Number(config.steps ?? 0), detail: 'evaluating the SFT checkpoint' });
  const result = await train({
    config,
    runDir: rlDir,
    resume,
    evalTasks: held,
    // BFCL: the job's own training pool (the live categories), not the suite's.
    ...(multiTurn ? { trainTasks } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
    onLog: log,
    onStep: (m) =>
      o.onProgress?.({
        stage: 'rl',
        done: Number(m.step),
        total: Number(config.steps ?? 0),
        detail: `success ${(100 * Number(m.success_rate)).toFixed(0)}%${m.eval_success !== undefined ? `, held-out ${(100 * Number(m.eval_success)).toFixed(0)}%` : ''}`,
      }),
    onEval: (s) => (evalSeconds += s),
  });
  seconds.eval += evalSeconds;
  if (result.stopped) throw new Interrupted(`the RL stage stopped at step ${result.steps}; run the same command again to resume`);
  // train_seconds: the steps (evaluations between them included: eval_every 0 keeps them out)
  seconds.rl = result.train_seconds;
  const read = (file: string) => readTrajectories(join(rlDir, file));
  const sftTraj = read(result.before.trajectories!);
  const rlTraj = read(finalEval(result).trajectories!);
  const sft = stageEval(sftTraj, c.k, join('rl', result.before.trajectories!));
  const rl = stageEval(rlTraj, c.k, join('rl', finalEval(result).trajectories!));
  if (multiTurn) {
    // Every multi-turn category at each checkpoint, whatever it scores.
    const te = performance.now();
    sft.bfcl = bfclStage(held, sftTraj, c.k, await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(sftDir, 'multi-turn.jsonl'), o, sftDir));
    rl.bfcl = bfclStage(held, rlTraj, c.k, await evaluateCheckpoint({ ...c, k: 1 }, multiTurn, join(rlDir, 'multi-turn.jsonl'), o, join(rlDir, 'model')));
    seconds.eval += (performance.now() - te) / 1000;
  }
  const diff = pairedDifference(taskRates(sftTraj), taskRates(rlTraj), { a: sftTraj.length, b: rlTraj.length });
  seconds.total = (performance.now() - t0) / 1000;
  const out: ModelJobResult = {
    model: c.model_name,
    suite: `${c.suite} (difficulty ${c.min_difficulty}-${c.max_difficulty})`,
    base,
    sft,
    rl,
    rl_minus_sft: { points: 100 * diff.mean, ci95: [100 * diff.ci95[0], 100 * diff.ci95[1]], tasks: diff.tasks },
    seconds: { sft: round(seconds.sft), rl: round(seconds.rl), eval: round(seconds.eval), total: round(seconds.total) },
    checkpoints: { sft: sftDir, rl: join(rlDir, 'model') },
    tool_format: c.tool_format,
  };
  save({ result: out });
  return out;
}

const round = (x: number) => Math.round(x * 10) / 10;
