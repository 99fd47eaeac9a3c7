/**
 * OnnxModel: an exported model directory loaded into an onnxruntime session, and sampled in
 * batches (`generate`) or with continuous batching (`serve`). It composes the parts of the sampler:
 * the graph (graph.ts), the KV slots (kv-slots.ts), the shared prefixes (prefix-cache.ts), the
 * rows kept between turns (row-cache.ts) and the decode loop (sampler.ts).
 */
import { basename, join, resolve } from 'node:path';
import type * as ort from 'onnxruntime-node';
import { readModelConfig, type ModelConfig } from '../model-config.ts';
import { ChatTemplate, T } from '../template.ts';
import { hfOnnxConfigPath, isHfConfig, readAnyConfig, readHfOnnxConfig, type HfOnnxConfig, type ModelFamily } from './config.ts';
import type { GenerateOptions, Generation, ResolvedRow, RowSource } from './generation.ts';
import { Graph } from './graph.ts';
import { KvSlots } from './kv-slots.ts';
import { commonLength, PrefixCache } from './prefix-cache.ts';
import { RowCaches } from './row-cache.ts';
import { LaneSampler } from './sampler.ts';
import { createSession, SessionUsers } from './session.ts';

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
  /**
   * Whether onnxruntime's operator threads spin while they wait for work (default true,
   * onnxruntime's own default). false yields the core instead: slower alone, but with more threads
   * than free cores (a machine other work shares) spinning threads take the cores the working ones need.
   */
  spinning?: boolean;
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
  private readonly graph: Graph;
  private readonly kv: KvSlots;
  private readonly prefixes: PrefixCache;
  private readonly rowCaches: RowCaches;
  private readonly sampler: LaneSampler;
  /** Generations running on each session (a retired session is released when its count drops to 0). */
  private readonly users = new SessionUsers();

  private constructor(
    readonly dir: string,
    private cfg: ModelConfig | HfOnnxConfig,
    private session: ort.InferenceSession,
    private readonly options: OnnxModelOptions,
  ) {
    const config = cfg;
    this.graphPrefix = session.inputNames.includes('prefix_mask');
    // The parts read the model's shape (set below) as they run.
    this.graph = new Graph(this, this.timing);
    this.kv = new KvSlots(this);
    this.prefixes = new PrefixCache(this, this.graph, this.kv, options);
    this.rowCaches = new RowCaches(this);
    this.sampler = new LaneSampler(this, this.graph, this.kv, this.rowCaches);
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
    if (!this.gptTemplate)
      throw new Error(
        `OnnxModel.template: ${this.dir} is a Hugging Face ${this.family} model; the template of template.ts is the embedded GPT's (render with src/agents/hf instead)`,
      );
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
    const session = await createSession(dir, config, options);
    return new OnnxModel(dir, config, session, options);
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
      const same =
        config.family === this.family &&
        a.n_layers === this.L &&
        a.n_kv_heads === this.H &&
        a.head_dim === this.Dh &&
        a.vocab_size === this.V &&
        a.max_seq_len === this.maxLen;
      if (!same) throw new Error(`OnnxModel.reload: ${hfOnnxConfigPath(this.dir)} now describes another architecture; load the model again`);
      (this as { eosTokenIds: readonly number[] }).eosTokenIds = [...config.eos_token_ids];
    }
    const session = await createSession(this.dir, config, this.options);
    if (session.inputNames.includes('prefix_mask') !== this.graphPrefix) {
      await session.release();
      throw new Error(`OnnxModel.reload: ${this.dir}'s new graph ${this.graphPrefix ? 'lacks' : 'has'} the shared-prefix inputs; load the model again`);
    }
    const old = this.session;
    this.session = session;
    this.cfg = config;
    await this.users.retire(old);
    return true;
  }

  async close(): Promise<void> {
    await this.users.retire(this.session);
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
  async forward(
    ids: BigInt64Array,
    positions: BigInt64Array,
    mask: Float32Array,
    B: number,
    Tn: number,
    C: number,
    keys: Float32Array[],
    values: Float32Array[],
  ) {
    return this.graph.run(this.session, ids, positions, mask, B, Tn, C, keys, values);
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
      return {
        sampling: r?.sampling ?? o,
        maxNewTokens: r?.maxNewTokens ?? o.maxNewTokens,
        rng: r?.rng ?? o.rng,
        onToken: r?.onToken,
        signal: r?.signal,
        ...(r?.cacheKey !== undefined ? { cacheKey: r.cacheKey } : {}),
      };
    });
    const session = this.users.acquire(this.session);
    try {
      // The shared prefix of the rows that start from scratch: a row that continues its episode from the keys and values it kept
      // (the embedded GPT's later turns) reads none.
      const fresh = this.graphPrefix ? prompts : prompts.filter((p, i) => !this.rowCaches.covers(session, rows[i]!.cacheKey, p));
      const prefix = await this.prefixes.sharedPrefix(session, fresh);
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
        const lane = this.kv.newLane(
          session,
          j - i,
          C,
          prefix,
          this.sampler.scoresFor(
            session,
            order.slice(i, j).map((r) => rows[r]!.sampling),
          ),
        );
        for (const r of order.slice(i, j)) await this.sampler.laneAdd(lane, { prompt: prompts[r]!, opts: rows[r]!, gen: out[r]!, slot: 0, next: 0, base: 0 });
        await this.sampler.runLane(lane, this.stopTokens(o.stop), undefined, o.onStep);
        i = j;
      }
      return out;
    } finally {
      await this.users.release(session);
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
    const session = this.users.acquire(this.session);
    const version = this.version;
    try {
      const lane = this.kv.newLane(session, 0, 0);
      // Rows come with their own settings: each graph run asks for what its rows can sample from.
      lane.perRow = true;
      lane.elastic = true;
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
        if (n >= 16) lane.prefix = await this.prefixes.prefixOf(session, p.slice(0, n));
      };
      const admit = async () => {
        for (;;) {
          // After a reload, rows join the next run, on the new weights.
          if (lane.B >= o.maxRows || this.session !== session) return;
          const head = source.peek();
          if (!head) return;
          const base = this.graphPrefix && lane.prefix ? Math.min(commonLength(lane.prefix.tokens, head.prompt), head.prompt.length - 1) : 0;
          // The budget counts the most slots each row may still come to use: the new row's prompt and
          // token limit, the running rows' tokens so far and the tokens they may still sample.
          let need = Math.min(this.maxLen - base, head.prompt.length - base + head.maxNewTokens);
          for (const row of lane.order) need = Math.max(need, row.next + 1 + row.opts.maxNewTokens - row.gen.tokens.length);
          const round = (n: number) => Math.min(this.maxLen, Math.ceil(n / 32) * 32);
          if (lane.B > 0 && (lane.B + 1) * this.rowBytes(round(need)) > this.budget) return;
          // The lane's capacity is elastic (runLane fits it to the longest row before each step): the row joins with room for its prompt.
          const C = Math.max(lane.C, round(head.prompt.length - base + 1));
          const r = source.take()!;
          await sharePrefix(r.prompt);
          recent.push(r.prompt);
          if (recent.length > 16) recent.shift();
          this.kv.laneReserve(lane, lane.B + 1, C);
          await this.sampler.laneAdd(lane, {
            prompt: r.prompt,
            opts: r.opts,
            gen: { tokens: [], logprobs: [], stopped: false },
            slot: 0,
            next: 0,
            base: 0,
            onDone: (g) => r.onDone(g, version),
          });
        }
      };
      await this.sampler.runLane(lane, this.stopTokens(o.stop), admit, o.onStep);
    } finally {
      await this.users.release(session);
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
   * Where the sampler's time went: graph runs that prefill (several new tokens, or a first token)
   * and decode steps (one new token per row): calls, rows, tokens and seconds of each (the
   * bookkeeping between runs is the rest of a generation's time).
   */
  readonly timing = {
    prefill: { calls: 0, rows: 0, tokens: 0, seconds: 0 },
    decode: { calls: 0, rows: 0, tokens: 0, seconds: 0 },
  };

  /** Times a continuous batch's capacity followed its rows: grown for a long row, shrunk after long rows left. */
  get capacityFits(): { grown: number; shrunk: number } {
    return { ...this.kv.fits };
  }

  /** Drops what `cacheKey` kept (an episode that ended). */
  forgetRow(cacheKey: string): void {
    this.rowCaches.forgetRow(cacheKey);
  }
}
