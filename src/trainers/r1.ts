/**
 * The DeepSeek-R1 pipeline as one run (docs/algorithms.md, "DeepSeek-R1 pipeline"; arXiv 2501.12948):
 *
 *   1 sft      the cold start: SFT on expert demonstrations (runSft), or the given model as is
 *   2 grpo     GRPO from the stage-1 model (train() with a preset)
 *   3 rs-sft   rejection sampling from the stage-2 policy on train tasks (k samples per task; the
 *              verifier-correct ones kept, deduplicated, at most M per task), then SFT of the
 *              stage-2 model on their token sequences, the loss on the policy's own tokens only
 *   4 grpo     GRPO again, from the stage-3 model
 *
 * Each stage works in its own directory under `out`; `pipeline.json` records the config and each
 * finished stage's result (its model, held-out success with a cluster-robust interval on the same held-out
 * tasks, its wall time), so that running the same pipeline again resumes it: finished stages are
 * skipped, an interrupted GRPO stage resumes with train()'s resume, an interrupted SFT or
 * rejection-sampling stage is redone, and a changed config is refused naming the field.
 */
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { ChatTemplate, OnnxPolicy } from '../agents/index.ts';
import { assertSomeEpisodeRan, Environment, rollout, type Task, type Trajectory } from '../env/index.ts';
import { seededRandom } from '../../lib/index.ts';
import { PRESET_NAMES, resolveConfig, type TrainConfig, type TrainConfigInput } from './config.ts';
import { isHfModelDir } from './learner-client.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { finalEval, train } from './loop.ts';
import { trainingTasks } from './run-context.ts';
import { evalFigures } from './step-metrics.ts';
import { sequenceOf } from './batch.ts';
import { continueSft, demoExamples, expertDemos, recordSurfaces, runSft } from './sft.ts';
import { writeJsonAtomic } from './run-dir.ts';

const int = (min: number, def: number) => z.number().int().min(min).default(def);

/** The pipeline's config: every field is a flag of `mcp-gym pipeline r1` (its description the help). */
export const R1ConfigSchema = z
  .object({
    suite: z
      .string()
      .min(1)
      .default('calculator')
      .describe('the bundled task suite: the demonstrations, the train tasks of every stage and the held-out tasks'),
    max_difficulty: z.number().int().min(1).max(5).default(1).describe('only tasks up to this difficulty'),
    model: z
      .string()
      .min(1)
      .optional()
      .describe('the starting model directory, used as is by stage 1 (unless --sft); absent: stage 1 trains a new embedded model on expert demonstrations'),
    sft: z
      .boolean()
      .default(false)
      .describe('stage 1 runs the SFT cold start even with --model (a Hugging Face checkpoint is fine-tuned; the embedded model continues from its weights)'),
    seed: int(0, 0).describe('the seed of every stage'),
    sft_demos: int(1, 300).describe('stage 1: expert demonstrations'),
    sft_steps: int(1, 150).describe('stage 1: SFT steps'),
    sft_batch: int(1, 16).describe('stage 1: SFT batch size'),
    sft_lr: z.number().gt(0).default(3e-3).describe('stage 1: SFT learning rate (3e-3 trains a new model; use less to continue one)'),
    sft_d_model: int(8, 128).describe('stage 1, a new model: width'),
    sft_layers: int(1, 4).describe('stage 1, a new model: layers'),
    sft_heads: int(1, 4).describe('stage 1, a new model: attention heads (divides the width)'),
    sft_ctx: int(64, 384).describe('stage 1, a new model: context length in tokens'),
    preset: z.enum(PRESET_NAMES).default('grpo').describe('stages 2 and 4: the training preset (mcp-gym train --preset)'),
    grpo_steps: int(0, 10).describe('stage 2: GRPO steps'),
    grpo2_steps: int(0, 10).describe('stage 4: GRPO steps'),
    tasks_per_step: int(1, 8).describe('stages 2 and 4: tasks per step'),
    group: int(2, 4).describe('stages 2 and 4: rollouts per task (G)'),
    lr: z.number().gt(0).default(5e-4).describe('stages 2 and 4: the learning rate'),
    train_config: z
      .string()
      .min(1)
      .optional()
      .describe('a JSON file of further training-config fields for stages 2 and 4 (as mcp-gym train --config; the fields above win)'),
    rs_tasks: int(1, 32).describe('stage 3: train tasks sampled for rejection sampling'),
    rs_k: int(1, 4).describe('stage 3: samples per task (k)'),
    rs_max_per_task: int(1, 2).describe('stage 3: at most M verified, distinct samples kept per task'),
    rs_sft_steps: int(1, 40).describe('stage 3: SFT steps on the kept samples'),
    rs_sft_batch: int(1, 8).describe('stage 3: SFT batch size'),
    rs_sft_lr: z.number().gt(0).default(2e-4).describe('stage 3: SFT learning rate (the stage-2 model is fine-tuned, not trained anew)'),
    eval_limit: int(1, 48).describe('held-out tasks every stage is evaluated on (the first N of the eval split)'),
    eval_samples: int(1, 2).describe('rollouts of each held-out task'),
    concurrency: int(1, 32).describe('episodes at once'),
    threads: z.number().int().min(1).optional().describe("the learner's CPU threads (default: all cores)"),
  })
  .strict();
export type R1Config = z.output<typeof R1ConfigSchema>;
export type R1ConfigInput = z.input<typeof R1ConfigSchema>;

/** A config the pipeline refuses: a bad field, or settings that differ from those of the pipeline being resumed. */
export class R1ConfigError extends Error {}

/** Fields that may change between a run and its resumption (they change speed, not results). */
const FREE_FIELDS = new Set(['concurrency', 'threads']);

export const R1_STAGES = ['1-sft', '2-grpo', '3-rs-sft', '4-grpo'] as const;
export type R1StageName = (typeof R1_STAGES)[number];

export interface HeldOut {
  success: number;
  /** 95% interval over the held-out tasks (cluster-robust: lib/evaluator.ts). */
  ci95: [number, number];
  episodes: number;
  tasks?: number;
  mean_reward: number;
}

export interface R1Stage {
  name: R1StageName;
  /** The model this stage ends with. */
  model: string;
  /** Held-out success of that model, on the pipeline's held-out tasks. */
  eval: HeldOut;
  /** Wall time, seconds (a resumed stage: every attempt's together). */
  seconds: number;
  detail: Record<string, unknown>;
}

/** Stage 3's accounting: every sample is kept or rejected for one reason. */
export interface RejectionCounts {
  tasks: number;
  samples: number;
  kept: number;
  rejected: { incorrect: number; duplicate: number; over_max: number; untrainable: number };
}

export interface R1Record {
  format: 'mcp-gym-pipeline/1';
  pipeline: 'r1';
  config: Record<string, unknown>;
  held_out: { tasks: number; samples: number };
  stages: R1Stage[];
  /** Seconds spent in stages not finished yet (added to their wall time when they finish). */
  partial: Partial<Record<R1StageName, number>>;
}

export interface R1Options {
  config: R1ConfigInput;
  out: string;
  signal?: AbortSignal;
  onLog?: (line: string) => void;
  /** Each GRPO step's metrics (stage 2 or 4). */
  onTrainStep?: (stage: R1StageName, metrics: Record<string, unknown>) => void;
}

export interface R1Result {
  out: string;
  record: R1Record;
  /** Stopped by the signal before the last stage finished: run again to resume. */
  stopped: boolean;
  report: string;
}

/** A value as canonical JSON: object keys sorted, so that equal arguments give equal text. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/**
 * What makes two samples the same for deduplication: the same tool calls (names and arguments, in
 * order) and the same final answer (whitespace at the ends aside). Wording between calls does not count.
 */
export function trajectorySignature(t: Pick<Trajectory, 'turns' | 'answer'>): string {
  const calls = t.turns.flatMap((turn) => turn.action.tool_calls.map((c) => `${c.name}(${canonical(c.arguments)})`));
  return `${calls.join(';')}|${(t.answer ?? '').trim()}`;
}

/**
 * Rejection sampling's choice, per task in sample order: a sample that is not verifier-correct
 * (not solved, or a failed episode) is rejected as incorrect; one whose signature a kept sample of
 * its task has is a duplicate; one beyond M kept for its task is over_max; one without a token
 * sequence that fits the context cannot be trained on (untrainable). The rest are kept.
 */
export function selectVerified(trajectories: Trajectory[], o: { maxPerTask: number; maxLen: number }): { kept: Trajectory[]; counts: RejectionCounts } {
  const byTask = new Map<string, Trajectory[]>();
  for (const t of trajectories) byTask.set(t.task_id, [...(byTask.get(t.task_id) ?? []), t]);
  const counts: RejectionCounts = {
    tasks: byTask.size,
    samples: trajectories.length,
    kept: 0,
    rejected: { incorrect: 0, duplicate: 0, over_max: 0, untrainable: 0 },
  };
  const kept: Trajectory[] = [];
  for (const ts of byTask.values()) {
    const seen = new Set<string>();
    let n = 0;
    for (const t of [...ts].sort((a, b) => a.sample - b.sample)) {
      if (!t.success || t.finish === 'error') {
        counts.rejected.incorrect++;
        continue;
      }
      const sig = trajectorySignature(t);
      if (seen.has(sig)) {
        counts.rejected.duplicate++;
        continue;
      }
      if (n >= o.maxPerTask) {
        counts.rejected.over_max++;
        continue;
      }
      const seq = sequenceOf(t);
      if (!seq || seq.ids.length > o.maxLen) {
        counts.rejected.untrainable++;
        continue;
      }
      seen.add(sig);
      n++;
      kept.push(t);
    }
  }
  counts.kept = kept.length;
  return { kept, counts };
}

/** The SFT examples of kept samples: each one's token sequence as sampled, the loss on the policy's tokens only. */
export function rejectionExamples(kept: Trajectory[]): { ids: number[]; mask: number[] }[] {
  return kept.map((t) => {
    const s = sequenceOf(t)!;
    return { ids: s.ids, mask: s.mask };
  });
}

/** The config as recorded: resolved, the model's path absolute, the train_config file's fields in it. */
function recordOf(c: R1Config): Record<string, unknown> {
  let train_overrides: Record<string, unknown> = {};
  if (c.train_config) {
    try {
      train_overrides = JSON.parse(readFileSync(c.train_config, 'utf8')) as Record<string, unknown>;
    } catch (err) {
      throw new R1ConfigError(`train_config: cannot read ${c.train_config}: ${(err as Error).message}`);
    }
  }
  return { ...c, ...(c.model ? { model: resolve(c.model) } : {}), train_overrides };
}

/** The fields of a recorded config that differ from the one given, as `field: was X, now Y`. */
export function pipelineChanges(was: Record<string, unknown>, now: Record<string, unknown>): string[] {
  const keys = [...new Set([...Object.keys(was), ...Object.keys(now)])].filter((k) => !FREE_FIELDS.has(k));
  return keys.filter((k) => canonical(was[k]) !== canonical(now[k])).map((k) => `${k}: the pipeline has ${canonical(was[k])}, not ${canonical(now[k])}`);
}

export function parseR1Config(input: R1ConfigInput): R1Config {
  const r = R1ConfigSchema.safeParse(input);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new R1ConfigError(`${i.path.join('.') || '(config)'}: ${i.message}`);
  }
  if (r.data.sft_d_model % r.data.sft_heads !== 0)
    throw new R1ConfigError(`sft_d_model: ${r.data.sft_d_model} is not a multiple of sft_heads (${r.data.sft_heads})`);
  if (r.data.sft && !r.data.model) throw new R1ConfigError('sft: stage 1 always runs the SFT cold start without a model; --sft is for a given --model');
  if (r.data.model && !existsSync(join(r.data.model, 'config.json'))) throw new R1ConfigError(`model: no model directory at ${r.data.model} (config.json)`);
  return r.data;
}

/** Runs (or resumes) the pipeline in `out`. */
export async function runR1Pipeline(o: R1Options): Promise<R1Result> {
  const c = parseR1Config(o.config);
  const log = o.onLog ?? (() => {});
  const out = resolve(o.out);
  mkdirSync(out, { recursive: true });
  const file = join(out, 'pipeline.json');
  const now = recordOf(c);
  let record: R1Record;
  if (existsSync(file)) {
    record = JSON.parse(readFileSync(file, 'utf8')) as R1Record;
    const changes = pipelineChanges(record.config, now);
    if (changes.length)
      throw new R1ConfigError(
        `pipeline: ${out} holds a pipeline made with other settings (${changes.join('; ')}); run it with its own settings, or choose another --out`,
      );
    record.config = now; // the free fields as given now
    log(`resuming the pipeline in ${out}: ${record.stages.length} of ${R1_STAGES.length} stages done`);
  } else {
    record = { format: 'mcp-gym-pipeline/1', pipeline: 'r1', config: now, held_out: { tasks: 0, samples: c.eval_samples }, stages: [], partial: {} };
  }
  const save = () => writeJsonAtomic(file, record);

  // The training config of a GRPO stage; also what draws the train and held-out tasks.
  const trainOverrides = now.train_overrides as Partial<TrainConfigInput>;
  const trainConfig = (model: string | undefined, steps: number): Partial<TrainConfigInput> => ({
    ...trainOverrides,
    preset: c.preset,
    suite: c.suite,
    max_difficulty: c.max_difficulty,
    ...(model ? { model } : {}),
    steps,
    tasks_per_step: c.tasks_per_step,
    group: c.group,
    lr: c.lr,
    seed: c.seed,
    eval_limit: c.eval_limit,
    eval_samples: c.eval_samples,
    eval_every: 0,
    concurrency: c.concurrency,
    ...(c.threads ? { threads: c.threads } : {}),
  });
  let base: TrainConfig;
  try {
    base = resolveConfig(trainConfig(undefined, 1));
  } catch (err) {
    throw new R1ConfigError(`${c.train_config ? `train_config ${c.train_config}: ` : ''}${(err as Error).message}`);
  }
  const { train: trainTasks, held } = trainingTasks(base);
  record.held_out = { tasks: held.length, samples: c.eval_samples };
  save();
  log(`${trainTasks.length} train tasks and ${held.length} held-out tasks (x${c.eval_samples}) from the ${c.suite} suite (difficulty <= ${c.max_difficulty})`);

  const done = (name: R1StageName) => record.stages.find((s) => s.name === name);
  const finish = (stage: Omit<R1Stage, 'seconds'>, seconds: number) => {
    const s: R1Stage = { ...stage, seconds: seconds + (record.partial[stage.name] ?? 0) };
    delete record.partial[stage.name];
    record.stages.push(s);
    save();
    log(
      `stage ${s.name}: held-out success ${(100 * s.eval.success).toFixed(1)}% [${(100 * s.eval.ci95[0]).toFixed(1)}, ${(100 * s.eval.ci95[1]).toFixed(1)}] in ${s.seconds.toFixed(1)} s`,
    );
    return s;
  };
  const stoppedAt = (name: R1StageName, seconds: number): R1Result => {
    record.partial[name] = (record.partial[name] ?? 0) + seconds;
    save();
    log(`stopped in stage ${name}; run the same command again to resume`);
    return { out, record, stopped: true, report: writeR1Report(out, record) };
  };
  const evaluate = (model: string, stageDir: string) => evaluateModel(model, held, base, c.concurrency, join(stageDir, 'eval-trajectories.jsonl'));
  const stageDir = (name: R1StageName) => {
    const d = join(out, name);
    mkdirSync(d, { recursive: true });
    return d;
  };

  // ---- Stage 1: the cold start ----
  if (!done('1-sft')) {
    if (o.signal?.aborted) return stoppedAt('1-sft', 0);
    const t0 = performance.now();
    const dir = join(out, '1-sft');
    rmSync(dir, { recursive: true, force: true }); // an interrupted SFT is done again
    mkdirSync(dir, { recursive: true });
    // A given model is used in place only as is; an SFT (new, or of a given model) writes its own copy.
    let model = c.model && !c.sft ? resolve(c.model) : join(dir, 'model');
    let detail: Record<string, unknown>;
    if (!c.model || (c.sft && isHfModelDir(c.model))) {
      log(`stage 1-sft: ${c.sft_demos} expert demonstrations, ${c.sft_steps} SFT steps${c.model ? ` of ${c.model}` : ' of a new model'}`);
      const r = await runSft({
        tasks: trainTasks,
        ...(c.model ? { model: c.model } : {}),
        demos: c.sft_demos,
        out: model,
        steps: c.sft_steps,
        batchSize: c.sft_batch,
        lr: c.sft_lr,
        seed: c.seed,
        threads: c.threads,
        architecture: c.model ? {} : { d_model: c.sft_d_model, n_layers: c.sft_layers, n_heads: c.sft_heads, d_ff: 4 * c.sft_d_model, max_seq_len: c.sft_ctx },
        onLog: (l) => log(`stage 1-sft: ${l}`),
      });
      detail = {
        from: c.model ?? 'a new model',
        demos: r.demos,
        dropped: r.dropped,
        tokens: r.tokens,
        masked_tokens: r.masked_tokens,
        loss_first: r.learner.loss_first,
        loss_last: r.learner.loss_last,
        steps: r.learner.steps,
      };
    } else if (c.sft) {
      // The embedded model, continued on expert demonstrations rendered with its own chat template.
      log(`stage 1-sft: ${c.sft_demos} expert demonstrations, ${c.sft_steps} SFT steps continuing ${c.model}`);
      cpSync(resolve(c.model), model, { recursive: true, filter: (f) => !f.endsWith('sft-data.jsonl') });
      const cfg = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8')) as {
        architecture: { max_seq_len: number };
        chat_template?: { max_tool_result_bytes?: number; system_tools?: boolean };
      };
      const template = new ChatTemplate({
        maxToolResultBytes: cfg.chat_template?.max_tool_result_bytes ?? 256,
        systemTools: cfg.chat_template?.system_tools ?? false,
      });
      const demos = await expertDemos(trainTasks, c.sft_demos, c.seed);
      const { examples, dropped } = demoExamples(demos, template, cfg.architecture.max_seq_len);
      const r = await continueSft({
        modelDir: model,
        examples,
        steps: c.sft_steps,
        batchSize: c.sft_batch,
        lr: c.sft_lr,
        seed: c.seed,
        threads: c.threads,
        onLog: (l) => log(`stage 1-sft: ${l}`),
      });
      await recordSurfaces(model, trainTasks);
      detail = {
        from: resolve(c.model),
        demos: examples.length,
        dropped,
        tokens: r.tokens,
        masked_tokens: r.masked_tokens,
        loss_first: r.learner.loss_first,
        loss_last: r.learner.loss_last,
        steps: r.learner.steps,
      };
    } else {
      log(`stage 1-sft: the given model ${c.model}, as is`);
      if (isHfModelDir(model)) ensureHfOnnx(model, log);
      detail = { from: model, as_is: true };
    }
    model = resolve(model);
    const e = await evaluate(model, dir);
    finish({ name: '1-sft', model, eval: e, detail }, (performance.now() - t0) / 1000);
  }

  // ---- Stages 2 and 4: GRPO ----
  const grpo = async (name: '2-grpo' | '4-grpo', from: string, steps: number): Promise<R1Result | undefined> => {
    if (done(name)) return undefined;
    if (o.signal?.aborted) return stoppedAt(name, 0);
    const t0 = performance.now();
    const runDir = join(out, name);
    const resume = existsSync(join(runDir, 'state.json'));
    if (!resume) rmSync(runDir, { recursive: true, force: true }); // a run that never reached its first checkpoint starts again
    log(`stage ${name}: ${resume ? 'resuming ' : ''}${c.preset} for ${steps} steps of ${c.tasks_per_step} tasks x ${c.group} from ${from}`);
    const r = await train({
      config: trainConfig(from, steps),
      runDir,
      resume,
      trainTasks,
      evalTasks: held,
      signal: o.signal,
      onLog: (l) => log(`stage ${name}: ${l}`),
      onStep: (m) => o.onTrainStep?.(name, m),
    });
    const seconds = (performance.now() - t0) / 1000;
    if (r.stopped) return stoppedAt(name, seconds);
    finish(
      {
        name,
        model: join(resolve(runDir), 'model'),
        eval: { success: finalEval(r).success, ci95: finalEval(r).ci95, episodes: finalEval(r).episodes, mean_reward: finalEval(r).mean_reward },
        detail: { from, steps: r.steps, train_seconds: r.train_seconds, before: { success: r.before.success, ci95: r.before.ci95 }, report: r.report },
      },
      seconds,
    );
    return undefined;
  };

  const stopped2 = await grpo('2-grpo', done('1-sft')!.model, c.grpo_steps);
  if (stopped2) return stopped2;

  // ---- Stage 3: rejection sampling, then SFT on what was kept ----
  if (!done('3-rs-sft')) {
    if (o.signal?.aborted) return stoppedAt('3-rs-sft', 0);
    const t0 = performance.now();
    const dir = join(out, '3-rs-sft');
    rmSync(dir, { recursive: true, force: true }); // an interrupted stage 3 is done again
    stageDir('3-rs-sft');
    const from = done('2-grpo')!.model;
    const model = join(dir, 'model');
    cpSync(from, model, { recursive: true, filter: (f) => !f.endsWith('sft-data.jsonl') });
    // The train tasks sampled: a seeded draw without repeats.
    const rng = seededRandom(c.seed + 3);
    const pool = [...trainTasks];
    const tasks: Task[] = [];
    while (tasks.length < c.rs_tasks && pool.length) tasks.push(pool.splice(Math.floor(rng() * pool.length), 1)[0]!);
    log(`stage 3-rs-sft: ${c.rs_k} samples on each of ${tasks.length} train tasks from ${from}`);
    const policy = await OnnxPolicy.load(model, {
      temperature: base.temperature,
      topK: base.top_k,
      topP: base.top_p,
      maxNewTokens: base.max_new_tokens,
      seed: c.seed + 1000,
    });
    const env = new Environment({ bundled: base.bundled_servers, reward: 'verifier' });
    let samples: Trajectory[];
    let maxLen: number;
    try {
      maxLen = policy.model.maxLen;
      samples = (
        await rollout(env, policy, tasks, { group: c.rs_k, concurrency: c.concurrency, iteration: 'rs', out: join(dir, 'samples.jsonl'), signal: o.signal })
      ).trajectories;
    } finally {
      await env.close();
      await policy.close();
    }
    if (o.signal?.aborted) return stoppedAt('3-rs-sft', (performance.now() - t0) / 1000);
    const { kept, counts } = selectVerified(samples, { maxPerTask: c.rs_max_per_task, maxLen });
    writeFileSync(join(dir, 'kept.jsonl'), kept.map((t) => JSON.stringify(t)).join('\n') + (kept.length ? '\n' : ''));
    const r = counts.rejected;
    log(
      `stage 3-rs-sft: kept ${counts.kept} of ${counts.samples} samples (rejected: ${r.incorrect} incorrect, ${r.duplicate} duplicate, ${r.over_max} over M=${c.rs_max_per_task}${r.untrainable ? `, ${r.untrainable} untrainable` : ''})`,
    );
    let sft: Record<string, unknown> | null = null;
    if (kept.length > 0) {
      const s = await continueSft({
        modelDir: model,
        examples: rejectionExamples(kept),
        steps: c.rs_sft_steps,
        batchSize: c.rs_sft_batch,
        lr: c.rs_sft_lr,
        seed: c.seed,
        threads: c.threads,
        onLog: (l) => log(`stage 3-rs-sft: ${l}`),
      });
      sft = {
        examples: s.examples,
        tokens: s.tokens,
        masked_tokens: s.masked_tokens,
        steps: s.learner.steps,
        loss_first: s.learner.loss_first,
        loss_last: s.learner.loss_last,
      };
    } else {
      log('stage 3-rs-sft: no sample kept: the stage-2 model goes on unchanged');
    }
    const e = await evaluate(resolve(model), dir);
    finish(
      { name: '3-rs-sft', model: resolve(model), eval: e, detail: { from, k: c.rs_k, max_per_task: c.rs_max_per_task, ...counts, sft } },
      (performance.now() - t0) / 1000,
    );
  }

  const stopped4 = await grpo('4-grpo', done('3-rs-sft')!.model, c.grpo2_steps);
  if (stopped4) return stopped4;
  return { out, record, stopped: false, report: writeR1Report(out, record) };
}

/** Held-out success of a model directory: the same tasks, samples and sampling settings as train()'s evaluations. */
async function evaluateModel(model: string, held: Task[], c: TrainConfig, concurrency: number, outFile: string): Promise<HeldOut> {
  const policy = await OnnxPolicy.load(model, { temperature: c.temperature, topK: c.top_k, topP: c.top_p, maxNewTokens: c.max_new_tokens, seed: c.seed + 1 });
  const env = new Environment({ bundled: c.bundled_servers, reward: c.reward });
  try {
    rmSync(outFile, { force: true });
    const r = await rollout(env, policy, held, { group: c.eval_samples, concurrency, iteration: 'eval.0', out: outFile });
    assertSomeEpisodeRan(r.trajectories, `the held-out evaluation of ${model}`);
    const { success, ci95, episodes, tasks, mean_reward } = evalFigures(0, r.trajectories, c.eval_samples);
    return { success, ci95, episodes, tasks, mean_reward };
  } finally {
    await env.close();
    await policy.close();
  }
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** One row per stage: name, held-out success, its 95% interval, episodes, seconds, what the stage did. */
function stageRows(record: R1Record): string[][] {
  return R1_STAGES.map((name) => {
    const s = record.stages.find((x) => x.name === name);
    if (!s) return [name, '(not done)', '', '', record.partial[name] ? record.partial[name]!.toFixed(1) : '', ''];
    const d = s.detail;
    let note: string;
    if (name === '1-sft')
      note = d.as_is
        ? 'the given model, as is'
        : `SFT on ${d.demos} demonstrations, loss ${Number(d.loss_first).toFixed(3)} -> ${Number(d.loss_last).toFixed(3)}`;
    else if (name === '3-rs-sft') {
      const r = d.rejected as RejectionCounts['rejected'];
      const sft = d.sft as Record<string, number> | null;
      note = `kept ${d.kept}/${d.samples} (incorrect ${r.incorrect}, duplicate ${r.duplicate}, over M ${r.over_max}${r.untrainable ? `, untrainable ${r.untrainable}` : ''})${sft ? `; SFT loss ${Number(sft.loss_first).toFixed(3)} -> ${Number(sft.loss_last).toFixed(3)}` : '; no SFT'}`;
    } else note = `${d.steps} steps, from ${pct((d.before as HeldOut).success)}`;
    return [name, pct(s.eval.success), `[${pct(s.eval.ci95[0])}, ${pct(s.eval.ci95[1])}]`, String(s.eval.episodes), s.seconds.toFixed(1), note];
  });
}

/** The pipeline's table as text: one row per stage (held-out success with its 95% interval, wall time, what it did). */
export function r1Table(record: R1Record): string {
  const rows = [['stage', 'held-out success', '95% interval', 'episodes', 'seconds', 'notes'], ...stageRows(record)];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((v, i) => (i === r.length - 1 ? v : v.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** report.md in `out`: the table, the held-out tasks, stage 3's accounting, and where each stage's model is. */
export function writeR1Report(out: string, record: R1Record): string {
  const md = (v: string) => v.replace(/\|/g, '\\|');
  const lines = [
    '# DeepSeek-R1 pipeline',
    '',
    `Suite ${md(String(record.config.suite))} (difficulty <= ${record.config.max_difficulty}); every stage evaluated on the same ${record.held_out.tasks} held-out tasks x ${record.held_out.samples} samples; 95% intervals cluster-robust over tasks (docs/evaluation.md).`,
    '',
    '| stage | held-out success | 95% interval | episodes | seconds | notes |',
    '|---|---|---|---|---|---|',
    ...stageRows(record).map((r) => `| ${r.map(md).join(' | ')} |`),
  ];
  const rs = record.stages.find((s) => s.name === '3-rs-sft');
  if (rs) {
    const r = rs.detail.rejected as RejectionCounts['rejected'];
    lines.push(
      '',
      '## Stage 3: rejection sampling',
      '',
      `${rs.detail.k} samples on each of ${rs.detail.tasks} train tasks; kept ${rs.detail.kept} (at most ${rs.detail.max_per_task} per task), rejected: ${r.incorrect} incorrect, ${r.duplicate} duplicate, ${r.over_max} over M, ${r.untrainable} untrainable.`,
    );
  }
  lines.push('', '## Models', '', ...record.stages.map((s) => `- ${s.name}: \`${md(s.model)}\``), '');
  const file = join(out, 'report.md');
  writeFileSync(file, lines.join('\n'));
  return file;
}
