/**
 * The embedded policy: the project's small transformer (or a Hugging Face Llama / Qwen2 / Qwen3
 * checkpoint), exported by the learner to ONNX and run here with onnxruntime-node. Sampling is batched across concurrent episodes, with a KV cache
 * kept in slots that the graph reads in place (no per-step copy of the cache); each episode's
 * token sequence grows by appending, and every sampled token comes with its logprob under the
 * distribution it was sampled from.
 *
 * Rows of one batch may differ in their sampling settings, token limit and random source
 * (`GenerateOptions.rows`). `OnnxModel.serve` batches continuously (rows join the running batch
 * between decode steps and leave it as they finish), and a `GenerationBatcher` feeds it
 * concurrent requests: the episodes of OnnxPolicy, the HTTP requests of serve-policy.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import * as ort from 'onnxruntime-node';
import { z } from 'zod';
import { fnv1a, seededRandom, StartFailure, type RandomFn } from '../../lib/index.ts';
import type { Observation, Policy, PolicyAction } from '../env/index.ts';
import { readModelConfig, type ModelConfig } from './model-config.ts';
import { sampleFromProbs, samplesWholeVocabulary, sampleToken, type SamplingOptions } from './sampling.ts';
import { ChatTemplate, parseAssistantTokens, T } from './template.ts';
import { HfTurns, type HfTurnsOptions } from './hf-turns.ts';

export interface GenerateOptions extends SamplingOptions {
  maxNewTokens: number;
  rng: RandomFn;
  /**
   * Token(s) that end a sequence. Default: the model's `eosTokenIds` (the GPT's <|end|>; a
   * Hugging Face model's eos_token_ids, e.g. Qwen's <|im_end|> and <|endoftext|>).
   */
  stop?: number | number[];
  /** Per-row settings (same order as the prompts); what a row leaves out is the call's. */
  rows?: (RowOptions | undefined)[];
  /** Hears the number of rows of each decode step. */
  onStep?: (rows: number) => void;
}

/** One row's own settings in a batch. */
export interface RowOptions {
  sampling?: SamplingOptions;
  maxNewTokens?: number;
  /** This row's random source (a seeded request is reproducible whatever else is in the batch). */
  rng?: RandomFn;
  /** Called with each sampled token as it is sampled (errors it throws are ignored). */
  onToken?: (token: number, logprob: number) => void;
  /** Once aborted, the row samples nothing more (its generation ends as cut off). */
  signal?: AbortSignal;
  /**
   * Keep this row's keys and values under this key when it ends, and start from them when a later
   * row with the same key continues its tokens (an episode's next turn: only the tokens the
   * environment added are prefilled). Graphs that read a shared prefix only (`graphPrefix`);
   * `forgetRow(key)` drops what is kept.
   */
  cacheKey?: string;
}

/** A row's settings resolved against the call's. */
export interface ResolvedRow {
  sampling: SamplingOptions;
  maxNewTokens: number;
  rng: RandomFn;
  onToken?: (token: number, logprob: number) => void;
  signal?: AbortSignal;
  cacheKey?: string;
}

/**
 * A finished row's keys and values, kept for its next turn: `tokens` (its prompt and the sampled
 * tokens fed back, i.e. all but the last) are positions 0 .. tokens.length - 1; the first `base` of
 * them were read from the lane's shared prefix, the next `n` are in K [H, Dh, n] / V [H, n, Dh].
 */
interface RowCache {
  session: ort.InferenceSession;
  tokens: number[];
  base: number;
  n: number;
  K: Float32Array[];
  V: Float32Array[];
}

/** Where OnnxModel.serve takes its rows from, in order. */
export interface RowSource {
  /** The rows waiting now (their prompts' common prefix is computed once). */
  pending(): readonly { prompt: number[] }[];
  /** The next row, without taking it; undefined when there is none (or no more for this model). */
  peek(): { prompt: number[]; maxNewTokens: number } | undefined;
  take(): SourceRow | undefined;
}

export interface SourceRow {
  prompt: number[];
  opts: ResolvedRow;
  /** The row's generation, and the version of the weights that sampled it. */
  onDone: (g: Generation, version: number) => void;
}

/** How many first tokens a and b have in common. */
function commonLength(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** A prompt prefix's keys [H, Dh, n] and values [H, n, Dh] per layer. */
interface Prefix {
  tokens: number[];
  n: number;
  K: Float32Array[];
  V: Float32Array[];
}

/**
 * A row being sampled: its prompt, settings, tokens so far, its row in the lane's cache and its
 * next cache slot. With a graph that reads the shared prefix itself, the row reads the first
 * `base` tokens of the lane's prefix and its slots hold the tokens after them (slot s is position
 * base + s); otherwise `base` is 0 and slot s is position s.
 */
interface LaneRow {
  prompt: number[];
  opts: ResolvedRow;
  gen: Generation;
  slot: number;
  next: number;
  base: number;
  onDone?: (g: Generation) => void;
  /** Prompt tokens this row took from a kept RowCache instead of prefilling them. */
  reused?: number;
}

/**
 * Rows sampled together: B running rows in the first B of `slots` slots, each with C cache slots
 * (per layer keys [slots, H, Dh, C], values [slots, H, C, Dh]), a mask [slots, C] that is 1 where
 * a slot holds a token, and each row's next logits [slots, V].
 */
/** What a lane's rows sample from: the logits, or the probabilities a Hugging Face graph also returns. */
type Scores = 'logits' | 'probs';

interface Lane {
  session: ort.InferenceSession;
  B: number;
  slots: number;
  C: number;
  K: Float32Array[];
  V: Float32Array[];
  mask: Float32Array;
  /** Each row's next-token scores: logits, or (`scores: 'probs'`) the graph's softmax at temperature 1. */
  logits: Float32Array;
  scores: Scores;
  /** The running rows by cache row, and in the order they joined (the order rows are sampled in). */
  rows: LaneRow[];
  order: LaneRow[];
  prefix?: Prefix;
  /** A decode step's inputs (ids, positions, mask), kept from step to step. */
  step?: { ids: BigInt64Array; pos: BigInt64Array; mask: Float32Array };
}

export interface Generation {
  tokens: number[];
  logprobs: number[];
  /** Ended with the stop token (not cut by the token limit or the context). */
  stopped: boolean;
}

export interface OnnxModelOptions {
  /** Threads of onnxruntime's operators. Default 1 (the model is small; rollouts run in parallel). */
  threads?: number;
  /**
   * KV cache bytes a decode step may read (rows are sampled in chunks under it). Default 12 MiB for
   * the embedded GPT (whose weights fit the processor's cache, so the cache's size decides); 1 GiB for
   * a Hugging Face model, whose decode step reads hundreds of MB of weights whatever the rows, so
   * more rows per step pay.
   */
  cacheBudgetBytes?: number;
  /** Compute the prompts' common prefix once per batch (default true). */
  sharePrefix?: boolean;
}

/** The model behind an OnnxModel: the embedded GPT, or a Hugging Face checkpoint of these families. */
export type ModelFamily = 'gpt' | 'qwen3' | 'qwen2' | 'llama';

/**
 * `<checkpoint>/onnx/config.json`: a Hugging Face checkpoint exported by the learner
 * (learner/mcp_gym_learner/hf_export.py; `python -m mcp_gym_learner.hf_export --model-dir DIR`).
 * The graph's caches have `n_kv_heads` heads of `head_dim`; `version` grows with each export or
 * weight update.
 */
export const HfOnnxConfigSchema = z.looseObject({
  format: z.literal('mcp-gym-onnx/1'),
  version: z.number().int().default(0),
  family: z.enum(['qwen3', 'qwen2', 'llama']),
  architecture: z.looseObject({
    n_layers: z.number().int().positive(),
    n_heads: z.number().int().positive(),
    n_kv_heads: z.number().int().positive(),
    head_dim: z.number().int().positive(),
    vocab_size: z.number().int().positive(),
    max_seq_len: z.number().int().positive(),
  }),
  eos_token_ids: z.array(z.number().int().nonnegative()),
  graph: z.string(),
  data: z.string().optional(),
  /** The graph takes a shared prefix (learner/mcp_gym_learner/hf_graph.py); an export without it is made again (hf-onnx.ts). */
  prefix: z.boolean().optional(),
});
export type HfOnnxConfig = z.output<typeof HfOnnxConfigSchema>;

/** The path of a Hugging Face checkpoint's ONNX export config (whether or not it exists). */
export function hfOnnxConfigPath(dir: string): string {
  return join(dir, 'onnx', 'config.json');
}

/** Reads and checks `<dir>/onnx/config.json`. */
export function readHfOnnxConfig(dir: string): HfOnnxConfig {
  const file = hfOnnxConfigPath(dir);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`Cannot read the ONNX export config ${file}: ${(err as Error).message}`);
  }
  const r = HfOnnxConfigSchema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`${file}: ${i.path.join('.') || '(root)'}: ${i.message}`);
  }
  return r.data;
}

function isHfConfig(c: ModelConfig | HfOnnxConfig): c is HfOnnxConfig {
  return c.format === 'mcp-gym-onnx/1';
}

/** A directory's config: a Hugging Face checkpoint's when it has onnx/config.json, else the GPT's config.json. */
function readAnyConfig(dir: string): ModelConfig | HfOnnxConfig {
  if (existsSync(hfOnnxConfigPath(dir))) return readHfOnnxConfig(dir);
  let hfCheckpoint = false;
  try {
    const raw = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    hfCheckpoint = typeof raw.model_type === 'string';
  } catch {
    // readModelConfig reports it
  }
  if (hfCheckpoint) {
    throw new Error(`${dir} is a Hugging Face checkpoint without an ONNX export (${hfOnnxConfigPath(dir)}): export it first (python -m mcp_gym_learner.hf_export --model-dir ${dir})`);
  }
  return readModelConfig(dir);
}

/**
 * An exported model directory, loaded into an onnxruntime session: the embedded GPT's (config.json
 * with an onnx section) or a Hugging Face checkpoint's (onnx/config.json beside it).
 */
export class OnnxModel {
  readonly family: ModelFamily;
  readonly L: number;
  /** Heads of the KV cache: the GPT's heads, a Hugging Face model's key/value heads (n_kv_heads). */
  readonly H: number;
  readonly Dh: number;
  readonly V: number;
  readonly maxLen: number;
  /** Tokens that end a generation unless `stop` says otherwise: the GPT's <|end|>, or the HF model's eos_token_ids. */
  readonly eosTokenIds: readonly number[];
  /** The model's name: the GPT config's `name`, or the checkpoint directory's name. */
  readonly name: string;
  /**
   * Whether the graph reads a shared prefix itself (a Hugging Face export: prefix_key_<l> inputs,
   * learner/mcp_gym_learner/hf_graph.py): rows then keep only their own tokens in their slots.
   * Otherwise (the embedded GPT) a shared prefix is computed once and copied into each row's slots.
   */
  readonly graphPrefix: boolean;
  private readonly gptTemplate?: ChatTemplate;

  private constructor(
    readonly dir: string,
    private cfg: ModelConfig | HfOnnxConfig,
    private session: ort.InferenceSession,
    private readonly options: OnnxModelOptions,
  ) {
    const config = cfg;
    this.graphPrefix = session.inputNames.includes('prefix_mask');
    if (isHfConfig(config)) {
      const a = config.architecture;
      this.family = config.family;
      this.L = a.n_layers;
      this.H = a.n_kv_heads;
      this.Dh = a.head_dim;
      this.V = a.vocab_size;
      this.maxLen = a.max_seq_len;
      this.eosTokenIds = [...config.eos_token_ids];
      this.name = basename(resolve(dir));
      return;
    }
    const a = config.architecture;
    this.family = 'gpt';
    this.L = a.n_layers;
    this.H = a.n_heads;
    this.Dh = a.d_model / a.n_heads;
    this.V = a.vocab_size;
    this.maxLen = a.max_seq_len;
    this.eosTokenIds = [T.end];
    this.name = config.name;
    this.gptTemplate = new ChatTemplate({ maxToolResultBytes: config.chat_template.max_tool_result_bytes, systemTools: config.chat_template.system_tools });
  }

  /**
   * The embedded GPT's chat template (template.ts). GPT models only: a Hugging Face model's prompts
   * are rendered with its own template (src/agents/hf), and this throws for one.
   */
  get template(): ChatTemplate {
    if (!this.gptTemplate) throw new Error(`OnnxModel.template: ${this.dir} is a Hugging Face ${this.family} model; the template of template.ts is the embedded GPT's (render with src/agents/hf instead)`);
    return this.gptTemplate;
  }

  /** The GPT's config.json (model-config.ts). GPT models only (a Hugging Face model's is `hfConfig`). */
  get config(): ModelConfig {
    if (isHfConfig(this.cfg)) throw new Error(`OnnxModel.config: ${this.dir} is a Hugging Face ${this.family} model (its export config is hfConfig)`);
    return this.cfg;
  }

  /** A Hugging Face model's onnx/config.json; undefined for the GPT. */
  get hfConfig(): HfOnnxConfig | undefined {
    return isHfConfig(this.cfg) ? this.cfg : undefined;
  }

  static async load(dir: string, options: OnnxModelOptions = {}): Promise<OnnxModel> {
    const config = readAnyConfig(dir);
    if (!isHfConfig(config) && !config.onnx) throw new Error(`${join(dir, 'config.json')}: no onnx section: export the model first (mcp-gym sft does)`);
    const session = await OnnxModel.session(dir, config, options);
    return new OnnxModel(dir, config, session, options);
  }

  private static async session(dir: string, config: ModelConfig | HfOnnxConfig, options: OnnxModelOptions): Promise<ort.InferenceSession> {
    const graph = isHfConfig(config) ? join(dir, 'onnx', config.graph) : join(dir, config.onnx!.graph);
    if (!existsSync(graph)) throw new Error(`The ONNX graph ${graph} is missing`);
    try {
      return await ort.InferenceSession.create(graph, {
        intraOpNumThreads: options.threads ?? 1,
        interOpNumThreads: 1,
        executionMode: 'sequential',
        graphOptimizationLevel: 'all',
      });
    } catch (err) {
      // The files are there and named right: the model itself cannot start (a damaged or foreign graph).
      throw new StartFailure(`could not start the model ${dir}: onnxruntime cannot load ${graph}: ${(err as Error).message}`);
    }
  }

  get version(): number {
    return this.cfg.version;
  }

  /**
   * Reloads the session if the learner wrote new weights (config.json's version changed). A
   * generation in flight finishes on the session it started with, which is released after it.
   */
  async reload(): Promise<boolean> {
    const config = isHfConfig(this.cfg) ? readHfOnnxConfig(this.dir) : readModelConfig(this.dir);
    if (config.version === this.cfg.version) return false;
    if (isHfConfig(config)) {
      // New weights only: a graph of other shapes (or another model) needs a new OnnxModel.
      const a = config.architecture;
      const same = config.family === this.family && a.n_layers === this.L && a.n_kv_heads === this.H && a.head_dim === this.Dh && a.vocab_size === this.V && a.max_seq_len === this.maxLen;
      if (!same) throw new Error(`OnnxModel.reload: ${hfOnnxConfigPath(this.dir)} now describes another architecture; load the model again`);
      (this as { eosTokenIds: readonly number[] }).eosTokenIds = [...config.eos_token_ids];
    }
    const session = await OnnxModel.session(this.dir, config, this.options);
    if (session.inputNames.includes('prefix_mask') !== this.graphPrefix) {
      await session.release();
      throw new Error(`OnnxModel.reload: ${this.dir}'s new graph ${this.graphPrefix ? 'lacks' : 'has'} the shared-prefix inputs; load the model again`);
    }
    const old = this.session;
    this.session = session;
    this.cfg = config;
    await this.retire(old);
    return true;
  }

  async close(): Promise<void> {
    await this.retire(this.session);
  }

  /** Generations running on each session (a retired session is released when its count drops to 0). */
  private readonly users = new Map<ort.InferenceSession, number>();
  private readonly retired = new Set<ort.InferenceSession>();

  private acquire(): ort.InferenceSession {
    const s = this.session;
    this.users.set(s, (this.users.get(s) ?? 0) + 1);
    return s;
  }

  private async releaseUse(s: ort.InferenceSession): Promise<void> {
    const n = (this.users.get(s) ?? 1) - 1;
    if (n > 0) return void this.users.set(s, n);
    this.users.delete(s);
    if (this.retired.delete(s)) await s.release();
  }

  private async retire(s: ort.InferenceSession): Promise<void> {
    if (this.users.has(s)) this.retired.add(s);
    else await s.release();
  }

  /** The tokens that end a generation: `stop` when given, else the model's eosTokenIds. */
  private stopTokens(stop: number | number[] | undefined): readonly number[] {
    return stop === undefined ? this.eosTokenIds : Array.isArray(stop) ? stop : [stop];
  }

  /**
   * One forward pass over the new tokens [B, T] with a slot cache of capacity C (per layer: keys
   * [B, H, Dh, C], values [B, H, C, Dh]; H the cache's heads): returns the last position's logits [B, V] and the new
   * keys/values [L, B, H, T, Dh].
   */
  async forward(ids: BigInt64Array, positions: BigInt64Array, mask: Float32Array, B: number, Tn: number, C: number, keys: Float32Array[], values: Float32Array[]) {
    return this.run(this.session, ids, positions, mask, B, Tn, C, keys, values);
  }

  /**
   * `prefix` (graphs that read one, `graphPrefix`): the shared prefix's keys and values and which of
   * its positions each row reads (`mask` [B, n]); without it the graph reads an empty prefix.
   */
  private async run(session: ort.InferenceSession, ids: BigInt64Array, positions: BigInt64Array, mask: Float32Array, B: number, Tn: number, C: number, keys: Float32Array[], values: Float32Array[], scores: Scores = 'logits', prefix?: { p: Prefix; mask: Float32Array }) {
    const { L, H, Dh } = this;
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', ids, [B, Tn]),
      position_ids: new ort.Tensor('int64', positions, [B, Tn]),
      attention_mask: new ort.Tensor('float32', mask, [B, C + Tn]),
    };
    for (let l = 0; l < L; l++) {
      feeds[`past_key_${l}`] = new ort.Tensor('float32', keys[l]!, [B, H, Dh, C]);
      feeds[`past_value_${l}`] = new ort.Tensor('float32', values[l]!, [B, H, C, Dh]);
    }
    if (this.graphPrefix) {
      // The graph needs a prefix of at least one position: without one, a position no row reads.
      const n = prefix?.p.n ?? 1;
      feeds.prefix_mask = new ort.Tensor('float32', prefix?.mask ?? new Float32Array(B), [B, n]);
      for (let l = 0; l < L; l++) {
        feeds[`prefix_key_${l}`] = new ort.Tensor('float32', prefix?.p.K[l] ?? new Float32Array(H * Dh), [1, H, Dh, n]);
        feeds[`prefix_value_${l}`] = new ort.Tensor('float32', prefix?.p.V[l] ?? new Float32Array(H * Dh), [1, H, n, Dh]);
      }
    }
    // Only the outputs used: the [B, V] scores the rows sample from, and the new keys and values.
    const t0 = performance.now();
    const out = await session.run(feeds, [scores, 'new_keys', 'new_values']);
    const kind = Tn > 1 || B === 1 && C === 0 ? 'prefill' : 'decode';
    const st = this.timing[kind];
    st.calls++;
    st.rows += B;
    st.tokens += B * Tn;
    st.seconds += (performance.now() - t0) / 1000;
    return { logits: out[scores]!.data as Float32Array, newK: out.new_keys!.data as Float32Array, newV: out.new_values!.data as Float32Array };
  }

  /**
   * Samples a continuation of each prompt. Rows are sorted by length and split into chunks whose
   * KV cache fits the processor's cache (`cacheBudgetBytes`; a 16-row cache of 323 slots is 21
   * MB, and a step over it ran 2.6x slower than two steps over halves); the prompts' common
   * prefix is computed once; within a chunk each prompt's rest is prefilled on its own (no
   * padding: positions equal slots), then the chunk decodes one token per step for every row
   * until each has stopped or reached its limit (a finished row leaves the step: the last row's
   * slot moves into its place). Row order does not change the results' order.
   */
  async generate(prompts: number[][], o: GenerateOptions): Promise<Generation[]> {
    if (prompts.length === 0) return [];
    for (const p of prompts) this.checkPrompt(p);
    const rows: ResolvedRow[] = prompts.map((_, i) => {
      const r = o.rows?.[i];
      return { sampling: r?.sampling ?? o, maxNewTokens: r?.maxNewTokens ?? o.maxNewTokens, rng: r?.rng ?? o.rng, onToken: r?.onToken, signal: r?.signal, ...(r?.cacheKey !== undefined ? { cacheKey: r.cacheKey } : {}) };
    });
    const session = this.acquire();
    try {
      const prefix = await this.sharedPrefix(session, prompts);
      // Chunks of rows of similar length (shortest first), each with its own capacity C and as many
      // rows as the budget allows. A graph that reads the prefix itself keeps only each row's own tokens in its slots.
      const base = (i: number) => (this.graphPrefix && prefix ? Math.min(commonLength(prefix.tokens, prompts[i]!), prompts[i]!.length - 1) : 0);
      const capacity = (i: number) => Math.min(this.maxLen - base(i), prompts[i]!.length - base(i) + rows[i]!.maxNewTokens);
      const order = prompts.map((_, i) => i).sort((a, b) => prompts[a]!.length - prompts[b]!.length || a - b);
      const out = prompts.map((): Generation => ({ tokens: [], logprobs: [], stopped: false }));
      for (let i = 0; i < order.length; ) {
        let j = i + 1;
        let C = capacity(order[i]!);
        for (; j < order.length; j++) {
          const c = Math.max(C, capacity(order[j]!));
          if ((j - i + 1) * this.rowBytes(c) > this.budget) break;
          C = c;
        }
        const lane = this.newLane(session, j - i, C, prefix, this.scoresFor(session, order.slice(i, j).map((r) => rows[r]!.sampling)));
        for (const r of order.slice(i, j)) await this.laneAdd(lane, { prompt: prompts[r]!, opts: rows[r]!, gen: out[r]!, slot: 0, next: 0, base: 0 });
        await this.runLane(lane, this.stopTokens(o.stop), undefined, o.onStep);
        i = j;
      }
      return out;
    } finally {
      await this.releaseUse(session);
    }
  }

  /**
   * Continuous batching: samples the rows of `source` in one running batch that rows join as
   * they come (between decode steps, each prefilled on its own) and leave as they finish (each
   * handed to its `onDone` at once), within `maxRows` rows and the cache budget (a row that does
   * not fit waits for others to finish). Returns when no row is running and `source` gives none.
   * `onStep` hears the number of rows of each decode step.
   */
  async serve(source: RowSource, o: { maxRows: number; stop?: number | number[]; onStep?: (rows: number) => void }): Promise<void> {
    const session = this.acquire();
    const version = this.version;
    try {
      const lane = this.newLane(session, 0, 0);
      // The prompts of the rows admitted last: a row that does not start with the lane's prefix
      // gets, if it shares one with them or with the rows still waiting, a new prefix to share.
      const recent: number[][] = [];
      const sharePrefix = async (p: number[]) => {
        if (this.options.sharePrefix === false || (lane.prefix && lane.prefix.n < p.length && commonLength(lane.prefix.tokens, p) === lane.prefix.n)) return;
        // The graph reads the lane's prefix for every running row: it changes only when none is running.
        if (this.graphPrefix && lane.B > 0) return;
        let n = 0;
        for (const q of [...recent, ...source.pending().map((r) => r.prompt)]) if (q !== p) n = Math.max(n, commonLength(p, q));
        n = Math.min(n, p.length - 1);
        if (n >= 16) lane.prefix = await this.prefixOf(session, p.slice(0, n));
      };
      const admit = async () => {
        for (;;) {
          // After a reload, rows join the next run, on the new weights.
          if (lane.B >= o.maxRows || this.session !== session) return;
          const head = source.peek();
          if (!head) return;
          const base = this.graphPrefix && lane.prefix ? Math.min(commonLength(lane.prefix.tokens, head.prompt), head.prompt.length - 1) : 0;
          const need = Math.min(this.maxLen - base, head.prompt.length - base + head.maxNewTokens);
          // Capacity grows in steps of 32 slots, so that rows of many lengths rarely re-lay the cache.
          const C = Math.max(lane.C, Math.min(this.maxLen, Math.ceil(need / 32) * 32));
          if (lane.B > 0 && (lane.B + 1) * this.rowBytes(C) > this.budget) return;
          const r = source.take()!;
          await sharePrefix(r.prompt);
          recent.push(r.prompt);
          if (recent.length > 16) recent.shift();
          this.laneReserve(lane, lane.B + 1, C);
          await this.laneAdd(lane, { prompt: r.prompt, opts: r.opts, gen: { tokens: [], logprobs: [], stopped: false }, slot: 0, next: 0, base: 0, onDone: (g) => r.onDone(g, version) });
        }
      };
      await this.runLane(lane, this.stopTokens(o.stop), admit, o.onStep);
    } finally {
      await this.releaseUse(session);
    }
  }

  private checkPrompt(p: number[]): void {
    if (p.length === 0) throw new Error('generate: an empty prompt');
    if (p.length >= this.maxLen) throw new Error(`generate: a prompt of ${p.length} tokens does not fit the context of ${this.maxLen}`);
  }

  private get budget(): number {
    return this.options.cacheBudgetBytes ?? (this.family === 'gpt' ? 12 * 2 ** 20 : 2 ** 30);
  }

  /** Bytes of one row's keys and values at capacity C. */
  private rowBytes(C: number): number {
    return 2 * this.L * this.H * this.Dh * C * 4;
  }

  /**
   * The keys and values of the prompts' longest common prefix (a group's identical prompts, the
   * system prompt and tool list of a batch), computed once and copied into every row's slots
   * instead of being recomputed per row; undefined when it is too short to pay. At least one
   * token of each prompt is left to the row's own prefill, which yields its logits.
   */
  private async sharedPrefix(session: ort.InferenceSession, prompts: number[][]): Promise<Prefix | undefined> {
    // A graph that reads the prefix keeps it for later calls (prefixOf): worth it for one prompt too.
    if (this.options.sharePrefix === false || (prompts.length < 2 && !this.graphPrefix)) return undefined;
    let n = Math.min(...prompts.map((p) => p.length)) - 1;
    const first = prompts[0]!;
    for (const p of prompts) n = Math.min(n, commonLength(first, p));
    return n < 16 ? undefined : this.prefixOf(session, first.slice(0, n));
  }

  /**
   * Where the sampler's time went: graph runs that prefill (several new tokens, or a first token)
   * and decode steps (one new token per row): calls, rows, tokens and seconds of each (the
   * bookkeeping between runs is the rest of a generation's time).
   */
  readonly timing = {
    prefill: { calls: 0, rows: 0, tokens: 0, seconds: 0 },
    decode: { calls: 0, rows: 0, tokens: 0, seconds: 0 },
  };

  /** Prefixes computed on each session, most recently used last (graphs that read the prefix: reused across calls). */
  private readonly prefixCache = new WeakMap<ort.InferenceSession, Prefix[]>();

  /**
   * The keys and values of `tokens` (a prompt prefix). With a graph that reads the prefix itself, a
   * prefix computed before on this session (the same weights) serves again: one that `tokens` extend
   * is extended by the new tokens only; one that shares at least three quarters of `tokens` (and 16)
   * is used as it is (each row reads as much of it as its prompt shares). So a chat template's tool
   * list is computed once per weights version, not once per batch.
   */
  private async prefixOf(session: ort.InferenceSession, tokens: number[]): Promise<Prefix> {
    if (!this.graphPrefix) return this.computePrefix(session, tokens);
    const cache = this.prefixCache.get(session) ?? [];
    this.prefixCache.set(session, cache);
    let best: Prefix | undefined;
    let m = 0;
    for (const c of cache) {
      const k = commonLength(c.tokens, tokens);
      if (k > m) [best, m] = [c, k];
    }
    let out: Prefix;
    if (best && m === best.n && m === tokens.length) out = best;
    else if (best && m === best.n && m >= 16) out = await this.extendPrefix(session, best, tokens.slice(m));
    else if (best && m >= 16 && 4 * m >= 3 * tokens.length) out = best;
    else out = await this.computePrefix(session, tokens);
    const i = cache.indexOf(out);
    if (i >= 0) cache.splice(i, 1);
    cache.push(out);
    if (cache.length > 4) cache.shift();
    return out;
  }

  /** `prefix` followed by `more` tokens: their keys and values computed reading `prefix`, appended to its own. */
  private async extendPrefix(session: ort.InferenceSession, prefix: Prefix, more: number[]): Promise<Prefix> {
    const { L, H, Dh } = this;
    const n = more.length;
    const N = prefix.n + n;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(more, (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(prefix.n + t));
    const r = await this.run(session, ids, pos, new Float32Array(n).fill(1), 1, n, 0, none, none, 'logits', { p: prefix, mask: new Float32Array(prefix.n).fill(1) });
    const K = Array.from({ length: L }, () => new Float32Array(H * Dh * N));
    const V = Array.from({ length: L }, () => new Float32Array(H * N * Dh));
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        V[l]!.set(prefix.V[l]!.subarray(h * prefix.n * Dh, (h + 1) * prefix.n * Dh), h * N * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(prefix.K[l]!.subarray((h * Dh + d) * prefix.n, (h * Dh + d + 1) * prefix.n), (h * Dh + d) * N);
      }
    }
    this.store(r.newK, r.newV, 1, 0, n, K, V, 0, prefix.n, N);
    return { tokens: [...prefix.tokens, ...more], n: N, K, V };
  }

  /** The keys and values of `tokens`, computed in one pass. */
  private async computePrefix(session: ort.InferenceSession, tokens: number[]): Promise<Prefix> {
    const { L } = this;
    const n = tokens.length;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(tokens, (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(t));
    const r = await this.run(session, ids, pos, new Float32Array(n).fill(1), 1, n, 0, none, none);
    const K = Array.from({ length: L }, () => new Float32Array(this.H * this.Dh * n));
    const V = Array.from({ length: L }, () => new Float32Array(this.H * n * this.Dh));
    this.store(r.newK, r.newV, 1, 0, n, K, V, 0, 0, n);
    return { tokens, n, K, V };
  }

  /**
   * What rows with these sampling options sample from: the graph's probabilities when it returns
   * them (Hugging Face exports) and every row samples the whole vocabulary at temperature 1 (a
   * cumulative walk, no exponential per vocabulary entry), else the logits.
   */
  private scoresFor(session: ort.InferenceSession, options: SamplingOptions[]): Scores {
    if (!session.outputNames.includes('probs')) return 'logits';
    return options.every((o) => o.temperature === 1 && samplesWholeVocabulary(o, this.V)) ? 'probs' : 'logits';
  }

  /** A lane with room for `slots` rows of capacity C (both grow with laneReserve). */
  private newLane(session: ort.InferenceSession, slots: number, C: number, prefix?: Prefix, scores: Scores = 'logits'): Lane {
    const { L, H, Dh, V } = this;
    return {
      session,
      scores,
      B: 0,
      slots,
      C,
      K: Array.from({ length: L }, () => new Float32Array(slots * H * Dh * C)),
      V: Array.from({ length: L }, () => new Float32Array(slots * H * C * Dh)),
      mask: new Float32Array(slots * C),
      logits: new Float32Array(slots * V),
      rows: [],
      order: [],
      prefix,
    };
  }

  /** Makes room for `slots` rows of capacity C, keeping the running rows' keys, values, masks and logits. */
  private laneReserve(lane: Lane, slots: number, C: number): void {
    if (slots <= lane.slots && C <= lane.C) return;
    const { L, H, Dh, V } = this;
    // Rows are added one at a time: room doubles (up to 64 rows) rather than growing by one.
    const S = slots > lane.slots ? Math.max(slots, Math.min(2 * lane.slots, 64)) : lane.slots;
    const C2 = Math.max(lane.C, C);
    const C1 = lane.C;
    const B = lane.B;
    const K = Array.from({ length: L }, () => new Float32Array(S * H * Dh * C2));
    const Vc = Array.from({ length: L }, () => new Float32Array(S * H * C2 * Dh));
    const mask = new Float32Array(S * C2);
    for (let l = 0; l < L; l++) {
      if (C2 === C1) {
        K[l]!.set(lane.K[l]!.subarray(0, B * H * Dh * C1));
        Vc[l]!.set(lane.V[l]!.subarray(0, B * H * C1 * Dh));
        continue;
      }
      for (let bh = 0; bh < B * H; bh++) {
        Vc[l]!.set(lane.V[l]!.subarray(bh * C1 * Dh, (bh + 1) * C1 * Dh), bh * C2 * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(lane.K[l]!.subarray((bh * Dh + d) * C1, (bh * Dh + d + 1) * C1), (bh * Dh + d) * C2);
      }
    }
    for (let b = 0; b < B; b++) mask.set(lane.mask.subarray(b * C1, (b + 1) * C1), b * C2);
    const logits = new Float32Array(S * V);
    logits.set(lane.logits.subarray(0, B * V));
    Object.assign(lane, { slots: S, C: C2, K, V: Vc, mask, logits });
  }

  /**
   * Prefills a row into the lane's next slot (after the shared prefix when the prompt starts
   * with it): its keys and values, its mask, and the logits of its first token.
   */
  private async laneAdd(lane: Lane, row: LaneRow): Promise<void> {
    if (this.graphPrefix) return this.laneAddRead(lane, row);
    const { L, V } = this;
    const p = row.prompt;
    this.laneReserve(lane, lane.B + 1, Math.min(this.maxLen, p.length + row.opts.maxNewTokens));
    const prefix = lane.prefix && lane.prefix.n < p.length && lane.prefix.tokens.every((t, i) => p[i] === t) ? lane.prefix : undefined;
    const p0 = prefix?.n ?? 0;
    const n = p.length - p0;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(p.slice(p0), (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(p0 + t));
    const r = await this.run(lane.session, ids, pos, new Float32Array(p0 + n).fill(1), 1, n, p0, prefix?.K ?? none, prefix?.V ?? none, lane.scores);
    const b = lane.B;
    const C = lane.C;
    lane.logits.set(r.logits, b * V);
    if (prefix) this.copyPrefix(prefix, lane.K, lane.V, b, C);
    this.store(r.newK, r.newV, 1, 0, n, lane.K, lane.V, b, p0, C);
    lane.mask.fill(0, b * C, (b + 1) * C);
    lane.mask.fill(1, b * C, b * C + p.length);
    row.next = p.length;
    row.slot = b;
    lane.rows.push(row);
    lane.order.push(row);
    lane.B++;
  }

  /**
   * laneAdd for a graph that reads the shared prefix itself: the row reads the lane prefix's first
   * `base` tokens (as many as its prompt shares, at most all but its last token); its slots hold the
   * rest of the prompt, prefilled on its own.
   */
  private async laneAddRead(lane: Lane, row: LaneRow): Promise<void> {
    const { L, V, H, Dh } = this;
    const p = row.prompt;
    const kept = this.reusable(lane, row);
    const base = kept ? kept.base : lane.prefix ? Math.min(commonLength(lane.prefix.tokens, p), p.length - 1) : 0;
    this.laneReserve(lane, lane.B + 1, Math.min(this.maxLen - base, p.length - base + row.opts.maxNewTokens));
    const c0 = kept?.n ?? 0; // slots taken from the kept cache
    const n = p.length - base - c0; // tokens to prefill
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(p.slice(base + c0), (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(base + c0 + t));
    const read = lane.prefix ? { p: lane.prefix, mask: new Float32Array(lane.prefix.n).fill(1, 0, base) } : undefined;
    const r = await this.run(lane.session, ids, pos, new Float32Array(c0 + n).fill(1), 1, n, c0, kept?.K ?? none, kept?.V ?? none, lane.scores, read);
    const b = lane.B;
    const C = lane.C;
    lane.logits.set(r.logits, b * V);
    if (kept) {
      for (let l = 0; l < L; l++) {
        for (let h = 0; h < H; h++) {
          const bh = b * H + h;
          lane.V[l]!.set(kept.V[l]!.subarray(h * c0 * Dh, (h + 1) * c0 * Dh), bh * C * Dh);
          for (let d = 0; d < Dh; d++) lane.K[l]!.set(kept.K[l]!.subarray((h * Dh + d) * c0, (h * Dh + d + 1) * c0), (bh * Dh + d) * C);
        }
      }
      row.reused = c0;
    }
    this.store(r.newK, r.newV, 1, 0, n, lane.K, lane.V, b, c0, C);
    lane.mask.fill(0, b * C, (b + 1) * C);
    lane.mask.fill(1, b * C, b * C + c0 + n);
    row.base = base;
    row.next = c0 + n;
    row.slot = b;
    lane.rows.push(row);
    lane.order.push(row);
    lane.B++;
  }

  /** Rows kept for their next turn (RowOptions.cacheKey), least recently kept first. */
  private readonly rowCaches = new Map<string, RowCache>();

  /** Drops what `cacheKey` kept (an episode that ended). */
  forgetRow(cacheKey: string): void {
    this.rowCaches.delete(cacheKey);
  }

  /** The kept cache a row can start from: same weights, the same prefix read, and its tokens a prefix of the row's prompt. */
  private reusable(lane: Lane, row: LaneRow): RowCache | undefined {
    const key = row.opts.cacheKey;
    const kept = key === undefined ? undefined : this.rowCaches.get(key);
    if (!kept || key === undefined) return undefined;
    this.rowCaches.delete(key);
    const p = row.prompt;
    const fits = kept.session === lane.session && kept.tokens.length < p.length && commonLength(kept.tokens, p) === kept.tokens.length;
    const samePrefix = kept.base === 0 || (lane.prefix !== undefined && commonLength(lane.prefix.tokens, kept.tokens) >= kept.base);
    return fits && samePrefix ? kept : undefined;
  }

  /** Keeps a finished row's keys and values under its cacheKey (at most 512 rows, oldest dropped). */
  private keepRow(lane: Lane, row: LaneRow): void {
    const key = row.opts.cacheKey;
    if (key === undefined || !this.graphPrefix || row.gen.tokens.length === 0) return;
    const { L, H, Dh } = this;
    const n = row.next;
    const C = lane.C;
    const b = row.slot;
    const K = Array.from({ length: L }, () => new Float32Array(H * Dh * n));
    const V = Array.from({ length: L }, () => new Float32Array(H * n * Dh));
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const bh = b * H + h;
        V[l]!.set(lane.V[l]!.subarray(bh * C * Dh, bh * C * Dh + n * Dh), h * n * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(lane.K[l]!.subarray((bh * Dh + d) * C, (bh * Dh + d) * C + n), (h * Dh + d) * n);
      }
    }
    // The last sampled token was never fed back: the slots hold the prompt and the sampled tokens before it.
    const tokens = row.prompt.concat(row.gen.tokens.slice(0, -1));
    this.rowCaches.delete(key);
    this.rowCaches.set(key, { session: lane.session, tokens, base: row.base, n, K, V });
    while (this.rowCaches.size > 512) this.rowCaches.delete(this.rowCaches.keys().next().value!);
  }

  /** Takes row b out of the lane: the last row moves into its slot. */
  private laneRemove(lane: Lane, b: number): void {
    const { L, H, Dh, V } = this;
    const last = lane.B - 1;
    if (b !== last) {
      const C = lane.C;
      const n = H * Dh * C;
      for (let l = 0; l < L; l++) {
        lane.K[l]!.copyWithin(b * n, last * n, (last + 1) * n);
        lane.V[l]!.copyWithin(b * n, last * n, (last + 1) * n);
      }
      lane.mask.copyWithin(b * C, last * C, (last + 1) * C);
      lane.logits.copyWithin(b * V, last * V, (last + 1) * V);
      lane.rows[b] = lane.rows[last]!;
      lane.rows[b]!.slot = b;
    }
    lane.rows.pop();
    lane.B--;
  }

  /**
   * Samples the lane's rows until none is left: each step samples every row's next token from
   * its logits, takes finished rows out, and feeds the others' tokens at their next slots. With
   * `admit`, rows join before each step. A row ends with any of the `stop` tokens.
   */
  private async runLane(lane: Lane, stop: readonly number[], admit?: () => Promise<void>, onStep?: (rows: number) => void): Promise<void> {
    const { V } = this;
    const scratch = new Float64Array(2 * V);
    const finished: LaneRow[] = [];
    for (;;) {
      if (admit) await admit();
      if (lane.B === 0) return;
      finished.length = 0;
      for (const row of lane.order) {
        const o = row.opts;
        if (o.signal?.aborted) {
          finished.push(row);
          continue;
        }
        const { token, logprob } = lane.scores === 'probs' ? sampleFromProbs(lane.logits, row.slot * V, V, o.rng) : sampleToken(lane.logits, row.slot * V, V, o.sampling, o.rng, scratch);
        const g = row.gen;
        g.tokens.push(token);
        g.logprobs.push(logprob);
        if (stop.includes(token)) {
          g.stopped = true;
          finished.push(row);
        } else if (g.tokens.length >= o.maxNewTokens || row.next >= lane.C || row.base + row.next + 1 >= this.maxLen) {
          finished.push(row);
        }
        if (o.onToken) {
          try {
            o.onToken(token, logprob);
          } catch {
            // a listener's failure is its own; the batch goes on
          }
        }
      }
      if (finished.length) {
        for (const row of finished) this.keepRow(lane, row);
        // Highest cache row first: the row moved into a freed one has not finished.
        for (const row of [...finished].sort((a, b) => b.slot - a.slot)) this.laneRemove(lane, row.slot);
        lane.order = lane.order.filter((r) => !finished.includes(r));
        for (const row of finished) row.onDone?.(row.gen);
      }
      if (lane.B === 0) continue;
      onStep?.(lane.B);
      await this.laneStep(lane);
    }
  }

  /** One decode step: every row's last sampled token at its next slot. */
  private async laneStep(lane: Lane): Promise<void> {
    const { B, C } = lane;
    const { H, Dh, V } = this;
    if (!lane.step || lane.step.ids.length < B || lane.step.mask.length < B * (C + 1)) {
      lane.step = { ids: new BigInt64Array(lane.slots), pos: new BigInt64Array(lane.slots), mask: new Float32Array(lane.slots * (lane.C + 1)) };
    }
    const ids = lane.step.ids.subarray(0, B);
    const pos = lane.step.pos.subarray(0, B);
    const mask = lane.step.mask.subarray(0, B * (C + 1));
    for (let b = 0; b < B; b++) {
      const row = lane.rows[b]!;
      ids[b] = BigInt(row.gen.tokens[row.gen.tokens.length - 1]!);
      pos[b] = BigInt(row.base + row.next);
      mask.set(lane.mask.subarray(b * C, (b + 1) * C), b * (C + 1));
      mask[b * (C + 1) + C] = 1;
    }
    // The prefix positions each row reads (graphs that read the shared prefix).
    let read: { p: Prefix; mask: Float32Array } | undefined;
    if (this.graphPrefix && lane.prefix) {
      const P = lane.prefix.n;
      const pm = new Float32Array(B * P);
      for (let b = 0; b < B; b++) pm.fill(1, b * P, b * P + lane.rows[b]!.base);
      read = { p: lane.prefix, mask: pm };
    }
    const r = await this.run(
      lane.session,
      ids,
      pos,
      mask,
      B,
      1,
      C,
      lane.K.map((k) => k.subarray(0, B * H * Dh * C)),
      lane.V.map((v) => v.subarray(0, B * H * C * Dh)),
      lane.scores,
      read,
    );
    for (let b = 0; b < B; b++) {
      const row = lane.rows[b]!;
      this.store(r.newK, r.newV, B, b, 1, lane.K, lane.V, b, row.next, C);
      lane.mask[b * C + row.next] = 1;
      row.next++;
    }
    lane.logits.set(r.logits.subarray(0, B * V));
  }

  /** Copies the shared prefix's keys/values (one row of capacity n) into slots [0, n) of row `dstRow`. */
  private copyPrefix(prefix: Prefix, cacheK: Float32Array[], cacheV: Float32Array[], dstRow: number, C: number): void {
    const { L, H, Dh } = this;
    const n = prefix.n;
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const bh = dstRow * H + h;
        cacheV[l]!.set(prefix.V[l]!.subarray(h * n * Dh, (h + 1) * n * Dh), bh * C * Dh);
        for (let d = 0; d < Dh; d++) cacheK[l]!.set(prefix.K[l]!.subarray((h * Dh + d) * n, (h * Dh + d + 1) * n), (bh * Dh + d) * C);
      }
    }
  }

  /**
   * Writes row `srcRow` of new keys/values [L, srcB, H, Tn, Dh] into row `dstRow` of the caches
   * (keys [dstB, H, Dh, C] transposed, values [dstB, H, C, Dh]) at slots [slot, slot + Tn).
   */
  private store(newK: Float32Array, newV: Float32Array, srcB: number, srcRow: number, Tn: number, cacheK: Float32Array[], cacheV: Float32Array[], dstRow: number, slot: number, C: number): void {
    const { L, H, Dh } = this;
    const n = Tn * Dh;
    for (let l = 0; l < L; l++) {
      const K = cacheK[l]!;
      const Vc = cacheV[l]!;
      for (let h = 0; h < H; h++) {
        const src = ((l * srcB + srcRow) * H + h) * n;
        const bh = dstRow * H + h;
        Vc.set(newV.subarray(src, src + n), bh * C * Dh + slot * Dh);
        const kBase = bh * Dh * C + slot;
        for (let t = 0; t < Tn; t++) {
          const row = src + t * Dh;
          for (let d = 0; d < Dh; d++) K[kBase + d * C + t] = newK[row + d]!;
        }
      }
    }
  }
}

/** One request to a GenerationBatcher: a prompt and its row's settings. */
export interface BatchRequest {
  prompt: number[];
  maxNewTokens: number;
  /** Default: the batcher's. */
  sampling?: SamplingOptions;
  /** Default: the batcher's shared random source (rows then draw from it in turn). */
  rng?: RandomFn;
  onToken?: (token: number, logprob: number) => void;
  /** Aborted while queued: the request is dropped (rejected); while sampled: its row stops. */
  signal?: AbortSignal;
  /** Keep the row's keys and values for a later request with the same key (RowOptions.cacheKey). */
  cacheKey?: string;
}

/** A generation and the version of the weights that sampled it. */
export interface BatchedGeneration extends Generation {
  version: number;
}

export interface BatcherOptions {
  /** Rows sampled together at most. Default 32. */
  maxBatch?: number;
  /**
   * `continuous` (default): requests join the running batch between decode steps. `static`: a
   * batch is the requests queued when the previous one ends (after waiting up to `gatherMs` for
   * as many as that one had), sampled together to the end (OnnxModel.generate): clients that are
   * answered together come back together, and their prompts' common prefix is computed once.
   */
  mode?: 'continuous' | 'static';
  /** static: how long to wait for the previous batch's number of requests. Default 5 ms. */
  gatherMs?: number;
  /** The settings of requests that bring none. */
  sampling: SamplingOptions;
  rng: RandomFn;
}

export interface BatcherStats {
  /** Runs of the sampler (a run lasts while rows keep coming), and the requests they sampled. */
  runs: number;
  rows: number;
  /** Decode steps, and the rows they stepped in all (rowSteps / steps: the mean batch). */
  steps: number;
  rowSteps: number;
  /** The most rows of one decode step. */
  largestBatch: number;
  /** Rows being sampled now, and requests waiting to join. */
  running: number;
  queued: number;
}

interface Queued {
  request: BatchRequest;
  resolve: (g: BatchedGeneration) => void;
  reject: (e: unknown) => void;
}

/**
 * Samples concurrent generation requests together with continuous batching (OnnxModel.serve):
 * a request joins the running batch at the next decode step, and is answered as soon as its own
 * row finishes; rows keep their own sampling settings, token limit and random source. The model
 * can be swapped: rows finish on the model they started with, and new rows go to the new one.
 */
export class GenerationBatcher {
  private readonly queue: Queued[] = [];
  private running = 0;
  private draining = false;
  private current?: { model: OnnxModel; done: Promise<void> };
  private closed = false;
  private readonly counts = { runs: 0, rows: 0, steps: 0, rowSteps: 0, largestBatch: 0 };

  constructor(
    private active: OnnxModel,
    private readonly options: BatcherOptions,
  ) {}

  /** The model new rows are sampled with. */
  get model(): OnnxModel {
    return this.active;
  }

  submit(request: BatchRequest): Promise<BatchedGeneration> {
    if (this.closed) return Promise.reject(new Error('the batcher is closed'));
    if (request.signal?.aborted) return Promise.reject(request.signal.reason ?? new Error('aborted'));
    const p = request.prompt;
    if (p.length === 0) return Promise.reject(new Error('generate: an empty prompt'));
    if (p.length >= this.active.maxLen) return Promise.reject(new Error(`generate: a prompt of ${p.length} tokens does not fit the context of ${this.active.maxLen}`));
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  stats(): BatcherStats {
    return { ...this.counts, running: this.running, queued: this.queue.length };
  }

  /**
   * Makes `next` the model of the rows to come; resolves with the previous model once no row
   * runs on it any more (the caller closes it).
   */
  async swap(next: OnnxModel): Promise<OnnxModel> {
    const previous = this.active;
    this.active = next;
    while (this.current?.model === previous) await this.current.done;
    return previous;
  }

  /** Rejects the queued requests and waits for the running rows. The model is the caller's to close. */
  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queue.splice(0)) q.reject(new Error('the batcher is closed'));
    while (this.current) await this.current.done;
  }

  /** Runs the sampler while requests come. */
  private async drain(): Promise<void> {
    this.draining = true;
    try {
      // Let the other requests of this tick queue theirs too (their common prefix is computed once).
      await new Promise((r) => setImmediate(r));
      while (this.queue.length && !this.closed) {
        if (this.options.mode === 'static') await this.runStatic();
        else await this.run();
      }
    } finally {
      this.draining = false;
    }
  }

  private lastBatch = 1;

  /** One static batch: the queued requests (after the gather wait), sampled together to the end. */
  private async runStatic(): Promise<void> {
    const deadline = performance.now() + (this.options.gatherMs ?? 5);
    while (this.queue.length < this.lastBatch && performance.now() < deadline && !this.closed) await new Promise((r) => setTimeout(r, 1));
    const batch: Queued[] = [];
    for (const q of this.queue.splice(0, this.options.maxBatch ?? 32)) {
      if (q.request.signal?.aborted) q.reject(q.request.signal.reason ?? new Error('aborted'));
      else batch.push(q);
    }
    if (batch.length === 0) return;
    this.lastBatch = batch.length;
    const model = this.active;
    let finish!: () => void;
    this.current = { model, done: new Promise<void>((r) => (finish = r)) };
    const c = this.counts;
    c.runs++;
    c.rows += batch.length;
    c.largestBatch = Math.max(c.largestBatch, batch.length);
    this.running += batch.length;
    const d = this.options;
    try {
      const gens = await model.generate(
        batch.map((q) => q.request.prompt),
        {
          ...d.sampling,
          maxNewTokens: Math.max(...batch.map((q) => q.request.maxNewTokens)),
          rng: d.rng,
          rows: batch.map(({ request: r }) => ({ sampling: r.sampling ?? d.sampling, maxNewTokens: r.maxNewTokens, rng: r.rng ?? d.rng, onToken: r.onToken, signal: r.signal })),
          onStep: (rows) => {
            c.steps++;
            c.rowSteps += rows;
          },
        },
      );
      batch.forEach((q, i) => q.resolve({ ...gens[i]!, version: model.version }));
    } catch (err) {
      for (const q of batch) q.reject(err);
    } finally {
      this.running -= batch.length;
      this.current = undefined;
      finish();
    }
  }

  private async run(): Promise<void> {
    const model = this.active;
    let finish!: () => void;
    this.current = { model, done: new Promise<void>((r) => (finish = r)) };
    const c = this.counts;
    c.runs++;
    const taken = new Set<Queued>();
    const defaults = this.options;
    const source: RowSource = {
      pending: () => this.queue.slice(0, defaults.maxBatch ?? 32).map((q) => q.request),
      peek: () => {
        // Requests whose client went away are dropped; new rows wait for a swapped-in model.
        while (this.queue[0]?.request.signal?.aborted) {
          const q = this.queue.shift()!;
          q.reject(q.request.signal!.reason ?? new Error('aborted'));
        }
        return this.active === model && !this.closed ? this.queue[0]?.request : undefined;
      },
      take: () => {
        const q = this.queue.shift();
        if (!q) return undefined;
        const r = q.request;
        taken.add(q);
        this.running++;
        c.rows++;
        return {
          prompt: r.prompt,
          opts: { sampling: r.sampling ?? defaults.sampling, maxNewTokens: r.maxNewTokens, rng: r.rng ?? defaults.rng, onToken: r.onToken, signal: r.signal, ...(r.cacheKey !== undefined ? { cacheKey: r.cacheKey } : {}) },
          onDone: (g, version) => {
            taken.delete(q);
            this.running--;
            q.resolve({ ...g, version });
          },
        };
      },
    };
    try {
      await model.serve(source, {
        maxRows: defaults.maxBatch ?? 32,
        onStep: (rows) => {
          c.steps++;
          c.rowSteps += rows;
          c.largestBatch = Math.max(c.largestBatch, rows);
        },
      });
    } catch (err) {
      for (const q of taken) q.reject(err);
      this.running -= taken.size;
    } finally {
      this.current = undefined;
      finish();
    }
  }
}

export interface OnnxPolicyOptions extends Partial<SamplingOptions>, OnnxModelOptions {
  /** A Hugging Face model's chat-template settings (e.g. `context: { enable_thinking: false }` for Qwen3, a fixed `now`). */
  chatTemplate?: HfTurnsOptions;
  /** Tokens an assistant turn may have. Default 160. */
  maxNewTokens?: number;
  /** Requests sampled together at most. Default 32 (64 for a Hugging Face model). */
  maxBatch?: number;
  seed?: number;
  /**
   * How concurrent episodes' turns are batched. `static` (the embedded GPT's default): a batch is
   * the turns queued when the previous one ends, sampled to its end. `continuous` (a Hugging Face
   * model's default): turns join the running batch between decode steps and leave it as they end,
   * so that an episode's next turn does not wait for the longest turn of a batch; each turn still
   * draws from its own seeded random source.
   */
  batching?: 'static' | 'continuous';
}

interface Pending {
  prompt: number[];
  maxNewTokens: number;
  rng: RandomFn;
  cacheKey?: string;
  resolve: (g: Generation) => void;
  reject: (e: unknown) => void;
}

/** A Policy backed by an OnnxModel; concurrent episodes' turns are sampled in one batch. */
export class OnnxPolicy implements Policy {
  readonly id: string;
  private readonly sequences = new Map<string, number[]>();
  private readonly queue: Pending[] = [];
  private running = false;
  private batches = { runs: 0, rows: 0, largest: 0 };
  readonly sampling: SamplingOptions;

  /** Continuous batching (options.batching): the batcher that runs the rows. */
  private readonly batcher?: GenerationBatcher;

  private constructor(
    readonly model: OnnxModel,
    private readonly options: OnnxPolicyOptions,
    /** A Hugging Face model's turns: its tokenizer and its own chat template (hf-turns.ts); undefined for the GPT. */
    readonly hf?: HfTurns,
  ) {
    this.id = `onnx:${model.name}`;
    this.sampling = { temperature: options.temperature ?? 1, topK: options.topK ?? 0, topP: options.topP ?? 1, ...(options.minP ? { minP: options.minP } : {}) };
    if ((options.batching ?? (hf ? 'continuous' : 'static')) === 'continuous') {
      this.batcher = new GenerationBatcher(model, { mode: 'continuous', maxBatch: options.maxBatch ?? (hf ? 64 : 32), sampling: this.sampling, rng: seededRandom(options.seed ?? 1) });
    }
  }

  /**
   * Loads a model directory: the embedded GPT's (prompts from template.ts) or a Hugging Face
   * checkpoint with its ONNX export (prompts from the checkpoint's tokenizer and chat template).
   */
  static async load(dir: string, options: OnnxPolicyOptions = {}): Promise<OnnxPolicy> {
    const model = await OnnxModel.load(dir, options);
    if (model.family === 'gpt') return new OnnxPolicy(model, options);
    try {
      return new OnnxPolicy(model, options, HfTurns.load(dir, options.chatTemplate ?? {}));
    } catch (err) {
      await model.close();
      throw new Error(`OnnxPolicy: ${dir}: ${(err as Error).message}`);
    }
  }

  get version(): number {
    return this.model.version;
  }

  /** The whole token sequence of an episode so far (prompt, environment and policy tokens). */
  sequence(episodeId: string): number[] | undefined {
    return this.sequences.get(episodeId);
  }

  async act(obs: Observation): Promise<PolicyAction> {
    if (this.hf) return this.actHf(obs, this.hf);
    const tpl = this.model.template;
    let seq = this.sequences.get(obs.episodeId);
    let env: number[];
    if (!seq || obs.turn === 0) {
      env = tpl.prompt(obs.messages as never, obs.tools.map((t) => t.name));
      seq = [];
    } else {
      const results = obs.newMessages.filter((m) => m.role === 'tool').map((m) => m.content);
      env = tpl.continuation(results);
      if (seq[seq.length - 1] !== T.end) env.unshift(T.end); // the last turn was cut off
    }
    const prompt = seq.concat(env);
    const maxNew = Math.min(this.options.maxNewTokens ?? 160, this.model.maxLen - 1 - prompt.length);
    if (maxNew < 8) {
      // Nothing more fits: the episode ends here, and nothing is appended to its sequence.
      return { content: 'The conversation no longer fits my context.', envTokens: [], tokens: [], logprobs: [] };
    }
    // Each turn draws from its own random source, seeded by the policy's seed, the episode and the
    // turn: what a turn samples does not depend on which other turns share its batch.
    const rng = seededRandom(fnv1a(`${this.options.seed ?? 1}:${obs.episodeKey ?? obs.episodeId}:${obs.turn}`));
    const g = await this.enqueue({ prompt, maxNewTokens: maxNew, rng });
    this.sequences.set(obs.episodeId, prompt.concat(g.tokens));
    const parsed = parseAssistantTokens(g.tokens);
    return {
      content: parsed.content,
      ...(parsed.calls.length ? { toolCalls: parsed.calls } : {}),
      ...(parsed.error ? { parseError: parsed.error } : {}),
      ...(parsed.error ? { callParse: 'failed' as const } : parsed.calls.length ? { callParse: 'strict' as const } : {}),
      tokens: g.tokens,
      logprobs: g.logprobs,
      envTokens: env,
    };
  }

  /** A Hugging Face model's turn: the template's tokens appended to the episode's sequence, the sampled turn kept as sampled. */
  private async actHf(obs: Observation, hf: HfTurns): Promise<PolicyAction> {
    const p = hf.prompt(obs);
    const seq = !p.drift && obs.turn > 0 ? (this.sequences.get(obs.episodeId) ?? []) : [];
    const prompt = seq.concat(p.env);
    const drift = p.drift ? { tokenDrift: p.drift } : {};
    const maxNew = Math.min(this.options.maxNewTokens ?? 160, this.model.maxLen - 1 - prompt.length);
    if (maxNew < 8) return { content: 'The conversation no longer fits my context.', envTokens: [], tokens: [], logprobs: [], ...drift };
    const rng = seededRandom(fnv1a(`${this.options.seed ?? 1}:${obs.episodeKey ?? obs.episodeId}:${obs.turn}`));
    // The episode's keys and values are kept between its turns: the next turn prefills only what the environment added.
    const g = await this.enqueue({ prompt, maxNewTokens: maxNew, rng, cacheKey: obs.episodeId });
    this.sequences.set(obs.episodeId, prompt.concat(g.tokens));
    return { ...hf.sampled(obs, g.tokens), tokens: g.tokens, logprobs: g.logprobs, envTokens: p.env, ...drift };
  }

  endEpisode(episodeId: string): void {
    this.sequences.delete(episodeId);
    this.hf?.end(episodeId);
    this.model.forgetRow(episodeId);
  }

  /** Batches sampled so far: how many, their rows, the largest. */
  stats(): { runs: number; rows: number; largestBatch: number } {
    if (this.batcher) {
      const b = this.batcher.stats();
      return { runs: b.runs, rows: b.rows, largestBatch: b.largestBatch };
    }
    return { runs: this.batches.runs, rows: this.batches.rows, largestBatch: this.batches.largest };
  }

  private enqueue(row: { prompt: number[]; maxNewTokens: number; rng: RandomFn; cacheKey?: string }): Promise<Generation> {
    if (this.batcher) {
      return this.batcher.submit({ prompt: row.prompt, maxNewTokens: row.maxNewTokens, rng: row.rng, ...(row.cacheKey !== undefined ? { cacheKey: row.cacheKey } : {}) });
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ ...row, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  /**
   * Samples the queued turns in batches (one OnnxModel.generate each) until the queue is empty.
   * A batch is what queued while the previous one ran (the concurrent episodes' next turns):
   * static batches, which keep a seeded training run reproducible (a row's numbers do not depend
   * on when it arrived) and measured faster in the RL loop than continuous batching, whose rows
   * join one by one. serve-policy, whose requests arrive independently, batches continuously.
   */
  private async drain(): Promise<void> {
    this.running = true;
    try {
      // Let the other episodes of this tick queue their turns too.
      await new Promise((r) => setImmediate(r));
      while (this.queue.length) {
        const batch = this.queue.splice(0, this.options.maxBatch ?? 32);
        this.batches.runs++;
        this.batches.rows += batch.length;
        this.batches.largest = Math.max(this.batches.largest, batch.length);
        try {
          const gens = await this.model.generate(
            batch.map((p) => p.prompt),
            { ...this.sampling, maxNewTokens: Math.max(...batch.map((p) => p.maxNewTokens)), rng: batch[0]!.rng, rows: batch.map((p) => ({ maxNewTokens: p.maxNewTokens, rng: p.rng, ...(p.cacheKey !== undefined ? { cacheKey: p.cacheKey } : {}) })) },
          );
          batch.forEach((p, i) => p.resolve(gens[i]!));
        } catch (err) {
          batch.forEach((p) => p.reject(err));
        }
        await new Promise((r) => setImmediate(r));
      }
    } finally {
      this.running = false;
    }
  }

  /** Picks up new weights written by the learner (a batch in flight finishes on the old ones). */
  async reload(): Promise<boolean> {
    return this.model.reload();
  }

  async close(): Promise<void> {
    await this.batcher?.close();
    await this.model.close();
  }
}
