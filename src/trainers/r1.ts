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
import { ChatTemplate, OnnxPolicy } from '../agents/index.ts';
import { assertSomeEpisodeRan, Environment, rollout, type Task, type Trajectory } from '../env/index.ts';
import { seededRandom } from '../../lib/index.ts';
import type { TrainConfig, TrainConfigInput } from './config.ts';
import { resolveConfig } from './resolve-config.ts';
import { isHfModelDir } from './learner-client.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { finalEval, train } from './loop.ts';
import { trainingTasks } from './run-context.ts';
import { evalFigures } from './step-evaluate.ts';
import { continueSft, demoExamples, expertDemos, recordSurfaces, runSft } from './sft.ts';
import { writeJsonAtomic } from './run-dir.ts';
import { parseR1Config, pipelineChanges, R1ConfigError, recordOf, type R1ConfigInput } from './r1-config.ts';
import { R1_STAGES, type HeldOut, type R1Record, type R1Stage, type R1StageName } from './r1-record.ts';
import { rejectionExamples, selectVerified } from './r1-rejection.ts';
import { writeR1Report } from './r1-report.ts';

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
