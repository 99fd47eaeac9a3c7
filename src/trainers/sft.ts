/**
 * The SFT cold start (stage 1 of the DeepSeek-R1 pipeline): expert demonstrations by rollouts,
 * tokenised with the loss on the assistant's tokens only, a model trained from scratch by the
 * learner and exported for the rollout side.
 */
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ChatTemplate, ExpertPolicy, HfTurns, hfDemoExample, toChatMessages, toToolSpecs, writeChatTemplate, type ToolFormatChoice } from '../agents/index.ts';
import { Environment, rollout, type Task, type ToolModeOptions, type Trajectory } from '../env/index.ts';
import { seededRandom } from '../../lib/index.ts';
import { writeToolSurfaces } from '../tools/index.ts';
import { isHfModelDir, LearnerClient } from './learner-client.ts';
import { ensureHfOnnx } from './hf-onnx.ts';

/** The SFT run's settings, for a new model and for one continued alike. */
export interface SftSchedule {
  steps: number;
  batchSize: number;
  lr: number;
  seed: number;
  threads?: number;
  onLog?: (line: string) => void;
  /** The learner's per-step lines ("sft step 3/40 loss 0.41 lr 1.0e-04 950 tok/s"); default: onLog. */
  onProgress?: (line: string) => void;
  /** Warm-up steps (default 5% of the steps, at least 1). */
  warmup?: number;
  /** Where the cosine schedule ends, as a fraction of lr (default 0.1; 1: constant after the warm-up). */
  minLrRatio?: number;
  /**
   * Hugging Face models: false runs each demonstration's prompt (everything before its first scored
   * token) once without the gradient, its keys and values kept (the learner's `prompt_grad`,
   * learner/PROTOCOL.md): the same loss, a gradient without what flows through the prompt's keys and
   * values, about 3x faster on long tool lists with short answers (bench/sft_speed.py). Default true.
   */
  promptGrad?: boolean;
  /**
   * Hugging Face models, full fine-tuning: train only the top N decoder layers and the final norm
   * (the learner's `train_layers`): the trained weights get the full model's gradient, and the
   * backward pass stops below them (top 10 of SmolLM2-135M's 30 layers: 1.8x the tokens/s,
   * bench/sft_speed.py). Default: every weight.
   */
  trainLayers?: number;
  /**
   * Hugging Face models, full fine-tuning on the CPU: 'bfloat16' runs the forwards and backwards on a bf16
   * copy of the float32 weights (the learner's `compute_dtype`, learner/PROTOCOL.md). Default: float32 throughout.
   */
  computeDtype?: 'float32' | 'bfloat16';
}

/** The learner's `sft` schedule fields for a SftSchedule. */
function sftSchedule(o: SftSchedule) {
  return {
    steps: o.steps,
    batch_size: o.batchSize,
    lr: o.lr,
    seed: o.seed,
    warmup: o.warmup ?? Math.max(1, Math.round(o.steps * 0.05)),
    ...(o.minLrRatio !== undefined ? { min_lr_ratio: o.minLrRatio } : {}),
    ...(o.promptGrad === false ? { prompt_grad: false } : {}),
    ...(o.trainLayers !== undefined ? { train_layers: o.trainLayers } : {}),
  };
}

export interface SftOptions extends SftSchedule {
  tasks: Task[];
  /**
   * A Hugging Face checkpoint to fine-tune (copied to `out`; its chat template renders the
   * demonstrations); without it a new embedded model is trained from scratch.
   */
  model?: string;
  /** How the Hugging Face model's template renders tools (default auto: its own, else the Hermes format). */
  toolFormat?: ToolFormatChoice;
  /** How the demonstrations' agent sees its tools (src/env/tool-modes.ts): in the toolbelt and search modes the expert's meta-calls are demonstrated too. */
  tools?: ToolModeOptions;
  /** LoRA on the Hugging Face model (else full fine-tuning). */
  lora?: { r: number; alpha?: number; dropout?: number; target_modules?: string | string[] };
  demos: number;
  out: string;
  architecture?: Record<string, number | boolean>;
  maxToolResultBytes?: number;
  /** List the tool names in a system turn (longer prompts; useful when tasks mix servers). */
  systemTools?: boolean;
  /**
   * Hugging Face only: also write the weights after each pass over the demonstrations but the last,
   * as checkpoints `<saveEpochs>/epoch-<e>` (SftResult.epochDirs). With `minLrRatio: 1` and a
   * warm-up in steps, checkpoint e holds the weights of a run of e passes: one run measures every epoch.
   */
  saveEpochs?: string;
}

export interface SftResult {
  demos: number;
  dropped: number;
  tokens: number;
  masked_tokens: number;
  learner: Record<string, unknown>;
  export: Record<string, unknown>;
  seconds: number;
  /** With saveEpochs: the checkpoints after pass 1, 2, ... (the last pass is `out`). */
  epochDirs?: string[];
}

export function demoExamples(trajectories: Trajectory[], template: ChatTemplate, maxLen: number) {
  const examples: { ids: number[]; mask: number[] }[] = [];
  let dropped = 0;
  for (const t of trajectories) {
    if (!t.success) continue;
    const ex = template.conversation(
      t.messages as never,
      (t.tools ?? []).map((x) => x.name),
    );
    if (ex.ids.length > maxLen) {
      dropped++;
      continue;
    }
    examples.push(ex);
  }
  return { examples, dropped };
}

/**
 * The expert's demonstrations on `demos` train tasks drawn with the seed (repeats allowed: a task
 * drawn twice is demonstrated once and its trajectory used twice).
 */
export async function expertDemos(tasks: Task[], demos: number, seed: number, tools?: ToolModeOptions): Promise<Trajectory[]> {
  const rng = seededRandom(seed);
  const pool = tasks.filter((t) => t.split === 'train');
  if (pool.length === 0) throw new Error('sft needs train tasks');
  const chosen: Task[] = [];
  for (let i = 0; i < demos; i++) chosen.push(pool[Math.floor(rng() * pool.length)]!);
  const unique = [...new Map(chosen.map((t) => [t.id, t])).values()];
  const env = new Environment(tools ? { tools } : {});
  const got = await rollout(env, new ExpertPolicy(), unique, { concurrency: 16 });
  await env.close();
  const byId = new Map(got.trajectories.map((t) => [t.task_id, t]));
  return chosen.map((t) => byId.get(t.id)!).filter(Boolean);
}

/** The tool surface of the servers a model was trained on, into its directory (`eval` warns when it drifts). */
export async function recordSurfaces(dir: string, tasks: Task[]): Promise<void> {
  const env = new Environment();
  try {
    const surfaces = await env.toolSurfaces(tasks);
    if (Object.keys(surfaces).length) writeToolSurfaces(dir, surfaces);
  } finally {
    await env.close();
  }
}

export async function runSft(o: SftOptions): Promise<SftResult> {
  const t0 = performance.now();
  const log = o.onLog ?? (() => {});
  const out = resolve(o.out);
  if (o.saveEpochs !== undefined && o.model === undefined) throw new Error('sft: saveEpochs (a checkpoint per epoch) needs a Hugging Face model');
  mkdirSync(out, { recursive: true });
  // Expert demonstrations on train tasks, drawn with the seed.
  const trajectories = await expertDemos(o.tasks, o.demos, o.seed, o.tools);

  if (o.model !== undefined) return runHfSft(o, out, trajectories, t0);
  const maxLen = Number(o.architecture?.max_seq_len ?? 1024);
  const template = new ChatTemplate({ maxToolResultBytes: o.maxToolResultBytes ?? 256, systemTools: o.systemTools ?? false });
  const { examples, dropped } = demoExamples(trajectories, template, maxLen);
  const data = join(out, 'sft-data.jsonl');
  writeFileSync(data, examples.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const tokens = examples.reduce((s, e) => s + e.ids.length, 0);
  const masked = examples.reduce((s, e) => s + e.mask.reduce((a, b) => a + b, 0), 0);
  log(`${examples.length} demonstrations (${dropped} longer than ${maxLen} tokens dropped), ${tokens} tokens, ${masked} with loss`);

  const learner = LearnerClient.start({ threads: o.threads, forwardStderr: false });
  try {
    await learner.request('create', {
      model_dir: out,
      name: o.out.split('/').filter(Boolean).pop(),
      architecture: o.architecture ?? {},
      chat_template: { max_tool_result_bytes: o.maxToolResultBytes ?? 256, system_tools: o.systemTools ?? false },
      seed: o.seed,
    });
    await learner.request('load', { model_dir: out, device: 'cpu' });
    log(`training: ${o.steps} steps of ${o.batchSize}, lr ${o.lr}`);
    const trained = await learner.request('sft', { data, ...sftSchedule(o) });
    log(
      `trained: loss ${Number(trained.loss_first).toFixed(3)} -> ${Number(trained.loss_last).toFixed(3)}, ${Math.round(Number(trained.tokens_per_s))} tokens/s`,
    );
    const exported = await learner.request('export', { model_dir: out, full: true });
    await recordSurfaces(out, o.tasks);
    return { demos: examples.length, dropped, tokens, masked_tokens: masked, learner: trained, export: exported, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await learner.close();
  }
}

/** The tools shown at each turn of an episode in the toolbelt or search mode (its turns' tools_in_context); undefined otherwise. */
function toolsAtTurns(t: Trajectory): ReturnType<typeof toToolSpecs>[] | undefined {
  if (!t.turns.some((turn) => turn.tools_in_context)) return undefined;
  const byName = new Map((t.tools ?? []).map((tool) => [tool.name, tool]));
  return t.turns.map((turn) => toToolSpecs((turn.tools_in_context ?? []).flatMap((n) => (byName.has(n) ? [byName.get(n)!] : []))));
}

/** The demonstrations rendered by a Hugging Face checkpoint's own chat template (hfDemoExample). */
export function hfDemoExamples(trajectories: Trajectory[], turns: HfTurns, maxLen: number) {
  const examples: { ids: number[]; mask: number[] }[] = [];
  let dropped = 0;
  let unrenderable = 0;
  for (const t of trajectories) {
    if (!t.success) continue;
    const ex = hfDemoExample(turns, toChatMessages(t.messages), toToolSpecs(t.tools ?? []), toolsAtTurns(t));
    if (!ex) unrenderable++;
    else if (ex.ids.length > maxLen) dropped++;
    else examples.push(ex);
  }
  return { examples, dropped, unrenderable };
}

/** SFT of a Hugging Face checkpoint: copied to `out`, fine-tuned (fully or with LoRA), written back and exported to ONNX. */
async function runHfSft(o: SftOptions, out: string, trajectories: Trajectory[], t0: number): Promise<SftResult> {
  const log = o.onLog ?? (() => {});
  const src = resolve(o.model!);
  if (!isHfModelDir(src)) throw new Error(`model: ${src} is not a Hugging Face checkpoint (config.json with model_type)`);
  if (src !== out) {
    // The checkpoint's files (not an earlier export or adapter: the learner writes those anew).
    cpSync(src, out, { recursive: true, filter: (f) => f === src || !/[/\\](onnx|adapter)([/\\]|$)/.test(f.slice(src.length)) });
  }
  const hfConfig = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as { max_position_embeddings?: number };
  const maxLen = Number(o.architecture?.max_seq_len ?? Math.min(hfConfig.max_position_embeddings ?? 4096, 4096));
  const turns = HfTurns.load(out, o.toolFormat ? { toolFormat: o.toolFormat } : {});
  // The checkpoint carries the template its demonstrations are rendered with (the Hermes tool block
  // included, when mcp-gym added it): transformers and vLLM then render the prompts it learned.
  writeChatTemplate(out, turns.template);
  const { examples, dropped, unrenderable } = hfDemoExamples(trajectories, turns, maxLen);
  if (examples.length === 0)
    throw new Error(`sft: none of the ${trajectories.length} demonstrations could be rendered by ${src}'s chat template within ${maxLen} tokens`);
  const data = join(out, 'sft-data.jsonl');
  writeFileSync(data, examples.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const tokens = examples.reduce((s, e) => s + e.ids.length, 0);
  const masked = examples.reduce((s, e) => s + e.mask.reduce((a, b) => a + b, 0), 0);
  log(
    `${examples.length} demonstrations in ${turns.family} format (tools: ${turns.toolFormat}) (${dropped} longer than ${maxLen} tokens dropped${unrenderable ? `, ${unrenderable} the template cannot render` : ''}), ${tokens} tokens, ${masked} with loss`,
  );
  // The learner logs each step ("sft step 3/40 loss ... lr ... tok/s"): passed on as progress.
  const learner = LearnerClient.start({
    threads: o.threads,
    forwardStderr: false,
    hf: true,
    onLog: (l) => l.startsWith('sft step') && (o.onProgress ?? log)(l),
  });
  try {
    await learner.request('load', {
      model_dir: out,
      device: 'cpu',
      ...(o.lora ? { lora: o.lora } : {}),
      ...(o.computeDtype === 'bfloat16' ? { compute_dtype: 'bfloat16' as const } : {}),
    });
    const what = o.lora ? `LoRA r=${o.lora.r}` : o.trainLayers !== undefined ? `the top ${o.trainLayers} decoder layers` : 'all weights';
    log(`training ${what}: ${o.steps} steps of ${o.batchSize}, lr ${o.lr}`);
    const trained = await learner.request('sft', { data, ...sftSchedule(o), ...(o.saveEpochs ? { save_epochs: resolve(o.saveEpochs) } : {}) });
    log(
      `trained: loss ${Number(trained.loss_first).toFixed(3)} -> ${Number(trained.loss_last).toFixed(3)}, ${Math.round(Number(trained.tokens_per_s))} tokens/s`,
    );
    const epochDirs = (trained.epoch_dirs as string[] | undefined) ?? [];
    for (const d of epochDirs) await recordSurfaces(d, o.tasks);
    const exported = await learner.request('export', { model_dir: out, full: true });
    // The copy has no ONNX export yet (the learner only keeps an existing one current): make it, for sampling.
    ensureHfOnnx(out, log);
    await recordSurfaces(out, o.tasks);
    return {
      demos: examples.length,
      dropped: dropped + unrenderable,
      tokens,
      masked_tokens: masked,
      learner: trained,
      export: exported,
      seconds: (performance.now() - t0) / 1000,
      ...(o.saveEpochs ? { epochDirs } : {}),
    };
  } finally {
    await learner.close();
  }
}

export interface ContinueSftOptions extends SftSchedule {
  /** The model directory to train in place (the embedded model or a Hugging Face checkpoint, already exported). */
  modelDir: string;
  /** Token sequences with their loss masks (1 on the tokens to learn: the assistant's). */
  examples: { ids: number[]; mask: number[] }[];
}

export interface ContinueSftResult {
  examples: number;
  tokens: number;
  masked_tokens: number;
  learner: Record<string, unknown>;
  seconds: number;
}

/**
 * SFT of an existing model on given token sequences, in place: the learner loads `modelDir`
 * (its weights, not a new model), trains with the loss on the masked tokens only, and exports the
 * weights back (ONNX included) for the rollout side. The R1 pipeline's stage 3 feeds it the
 * policy's own verified trajectories (their token sequences as sampled: nothing re-tokenised).
 */
export async function continueSft(o: ContinueSftOptions): Promise<ContinueSftResult> {
  const t0 = performance.now();
  const log = o.onLog ?? (() => {});
  const dir = resolve(o.modelDir);
  if (o.examples.length === 0) throw new Error('sft: no examples to train on');
  o.examples.forEach((e, i) => {
    if (e.ids.length !== e.mask.length) throw new Error(`sft: example ${i}: mask length ${e.mask.length} differs from ids length ${e.ids.length}`);
  });
  const data = join(dir, 'sft-data.jsonl');
  writeFileSync(data, o.examples.map((e) => JSON.stringify({ ids: e.ids, mask: e.mask })).join('\n') + '\n');
  const tokens = o.examples.reduce((s, e) => s + e.ids.length, 0);
  const masked = o.examples.reduce((s, e) => s + e.mask.reduce((a, b) => a + b, 0), 0);
  const hf = isHfModelDir(dir);
  const learner = LearnerClient.start({ threads: o.threads, forwardStderr: false, hf });
  try {
    await learner.request('load', { model_dir: dir, device: 'cpu' });
    log(`sft: ${o.examples.length} sequences, ${tokens} tokens, ${masked} with loss; ${o.steps} steps of ${o.batchSize}, lr ${o.lr}`);
    const trained = await learner.request('sft', { data, ...sftSchedule(o) });
    log(`sft: loss ${Number(trained.loss_first).toFixed(3)} -> ${Number(trained.loss_last).toFixed(3)}`);
    await learner.request('export', { model_dir: dir, full: true });
    if (hf) ensureHfOnnx(dir, log);
    return { examples: o.examples.length, tokens, masked_tokens: masked, learner: trained, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await learner.close();
  }
}
