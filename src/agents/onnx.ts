/**
 * The embedded policy: the project's small transformer, exported by the learner to ONNX and run
 * here with onnxruntime-node. Sampling is batched across concurrent episodes, with a KV cache
 * kept in slots that the graph reads in place (no per-step copy of the cache); each episode's
 * token sequence grows by appending, and every sampled token comes with its logprob under the
 * distribution it was sampled from.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { seededRandom, type RandomFn } from '../../lib/index.ts';
import type { Observation, Policy, PolicyAction } from '../env/index.ts';
import { readModelConfig, type ModelConfig } from './model-config.ts';
import { sampleToken, type SamplingOptions } from './sampling.ts';
import { ChatTemplate, parseAssistantTokens, T } from './template.ts';

export interface GenerateOptions extends SamplingOptions {
  maxNewTokens: number;
  rng: RandomFn;
  /** Token that ends a sequence. Default <|end|>. */
  stop?: number;
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
  /** KV cache bytes a decode step may read (rows are sampled in chunks under it). Default 12 MiB. */
  cacheBudgetBytes?: number;
  /** Compute the prompts' common prefix once per batch (default true). */
  sharePrefix?: boolean;
}

/** An exported model directory, loaded into an onnxruntime session. */
export class OnnxModel {
  readonly L: number;
  readonly H: number;
  readonly Dh: number;
  readonly V: number;
  readonly maxLen: number;
  readonly template: ChatTemplate;

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    private session: ort.InferenceSession,
    private readonly options: OnnxModelOptions,
  ) {
    const a = config.architecture;
    this.L = a.n_layers;
    this.H = a.n_heads;
    this.Dh = a.d_model / a.n_heads;
    this.V = a.vocab_size;
    this.maxLen = a.max_seq_len;
    this.template = new ChatTemplate({ maxToolResultBytes: config.chat_template.max_tool_result_bytes, systemTools: config.chat_template.system_tools });
  }

  static async load(dir: string, options: OnnxModelOptions = {}): Promise<OnnxModel> {
    const config = readModelConfig(dir);
    if (!config.onnx) throw new Error(`${join(dir, 'config.json')}: no onnx section: export the model first (mcp-gym sft does)`);
    const session = await OnnxModel.session(dir, config, options);
    return new OnnxModel(dir, config, session, options);
  }

  private static async session(dir: string, config: ModelConfig, options: OnnxModelOptions): Promise<ort.InferenceSession> {
    const graph = join(dir, config.onnx!.graph);
    if (!existsSync(graph)) throw new Error(`The ONNX graph ${graph} is missing`);
    return ort.InferenceSession.create(graph, {
      intraOpNumThreads: options.threads ?? 1,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
  }

  get version(): number {
    return this.config.version;
  }

  /** Reloads the session if the learner wrote new weights (config.json's version changed). */
  async reload(): Promise<boolean> {
    const config = readModelConfig(this.dir);
    if (config.version === this.config.version) return false;
    const session = await OnnxModel.session(this.dir, config, this.options);
    await this.session.release();
    this.session = session;
    (this as { config: ModelConfig }).config = config;
    return true;
  }

  async close(): Promise<void> {
    await this.session.release();
  }

  /**
   * One forward pass over the new tokens [B, T] with a slot cache of capacity C (per layer: keys
   * [B, H, Dh, C], values [B, H, C, Dh]): returns the last position's logits [B, V] and the new
   * keys/values [L, B, H, T, Dh].
   */
  async forward(ids: BigInt64Array, positions: BigInt64Array, mask: Float32Array, B: number, Tn: number, C: number, keys: Float32Array[], values: Float32Array[]) {
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
    const out = await this.session.run(feeds);
    return { logits: out.logits!.data as Float32Array, newK: out.new_keys!.data as Float32Array, newV: out.new_values!.data as Float32Array };
  }

  /**
   * Samples a continuation of each prompt. Rows are sorted by length and split into chunks whose
   * KV cache fits the processor's cache (`cacheBudgetBytes`; a 16-row cache of 323 slots is 21
   * MB, and a step over it ran 2.6x slower than two steps over halves); the prompts' common
   * prefix is computed once; within a chunk each prompt's rest is prefilled on its own (no
   * padding: positions equal slots), then the chunk decodes one token per step for every row
   * until each has stopped or reached its limit. Row order does not change the results' order.
   */
  async generate(prompts: number[][], o: GenerateOptions): Promise<Generation[]> {
    if (prompts.length === 0) return [];
    for (const p of prompts) {
      if (p.length === 0) throw new Error('generate: an empty prompt');
      if (p.length >= this.maxLen) throw new Error(`generate: a prompt of ${p.length} tokens does not fit the context of ${this.maxLen}`);
    }
    // Chunks of rows of similar length (shortest first), each with its own capacity C and as many
    // rows as the budget allows.
    const { L, H, Dh } = this;
    const budget = this.options.cacheBudgetBytes ?? 12 * 2 ** 20;
    const capacity = (i: number) => Math.min(this.maxLen, prompts[i]!.length + o.maxNewTokens);
    const order = prompts.map((_, i) => i).sort((a, b) => prompts[a]!.length - prompts[b]!.length || a - b);
    const prefix = await this.sharedPrefix(prompts);
    const out = new Array<Generation>(prompts.length);
    for (let i = 0; i < order.length; ) {
      let j = i + 1;
      while (j < order.length && (j - i + 1) * 2 * L * H * Dh * capacity(order[j]!) * 4 <= budget) j++;
      const rows = order.slice(i, j);
      const gens = await this.generateChunk(
        rows.map((r) => prompts[r]!),
        capacity(order[j - 1]!),
        o,
        prefix,
      );
      rows.forEach((r, k) => (out[r] = gens[k]!));
      i = j;
    }
    return out;
  }

  /**
   * The keys and values of the prompts' longest common prefix (a group's identical prompts, the
   * system prompt and tool list of a batch), computed once and copied into every row's slots
   * instead of being recomputed per row; undefined when it is too short to pay. At least one
   * token of each prompt is left to the row's own prefill, which yields its logits.
   */
  private async sharedPrefix(prompts: number[][]): Promise<{ n: number; K: Float32Array[]; V: Float32Array[] } | undefined> {
    if (this.options.sharePrefix === false || prompts.length < 2) return undefined;
    let n = Math.min(...prompts.map((p) => p.length)) - 1;
    const first = prompts[0]!;
    for (const p of prompts) {
      let i = 0;
      while (i < n && p[i] === first[i]) i++;
      n = i;
    }
    if (n < 16) return undefined;
    const { L } = this;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(first.slice(0, n), (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(t));
    const r = await this.forward(ids, pos, new Float32Array(n).fill(1), 1, n, 0, none, none);
    const K = Array.from({ length: L }, () => new Float32Array(this.H * this.Dh * n));
    const V = Array.from({ length: L }, () => new Float32Array(this.H * n * this.Dh));
    this.store(r.newK, r.newV, 1, 0, n, K, V, 0, 0, n);
    return { n, K, V };
  }

  private async generateChunk(prompts: number[][], C: number, o: GenerateOptions, prefix?: { n: number; K: Float32Array[]; V: Float32Array[] }): Promise<Generation[]> {
    const { L, H, Dh, V } = this;
    const B = prompts.length;
    const stop = o.stop ?? T.end;
    const cacheK = Array.from({ length: L }, () => new Float32Array(B * H * Dh * C));
    const cacheV = Array.from({ length: L }, () => new Float32Array(B * H * C * Dh));
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const cacheMask = new Float32Array(B * C); // 1 where a slot holds a real token
    const next = prompts.map((p) => p.length); // each row's next slot (= its next position)

    // Prefill, one prompt at a time (rows of different lengths waste nothing on padding), after
    // the shared prefix if there is one.
    const logits = new Float32Array(B * V);
    const p0 = prefix?.n ?? 0;
    const past = prefix ? { K: prefix.K, V: prefix.V } : { K: none, V: none };
    for (let b = 0; b < B; b++) {
      const p = prompts[b]!;
      const n = p.length - p0;
      const ids = BigInt64Array.from(p.slice(p0), (t) => BigInt(t));
      const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(p0 + t));
      const r = await this.forward(ids, pos, new Float32Array(p0 + n).fill(1), 1, n, p0, past.K, past.V);
      logits.set(r.logits, b * V);
      if (prefix) this.copyPrefix(prefix, cacheK, cacheV, b, C);
      this.store(r.newK, r.newV, 1, 0, n, cacheK, cacheV, b, p0, C);
      cacheMask.fill(1, b * C, b * C + p.length);
    }

    const gens: Generation[] = prompts.map(() => ({ tokens: [], logprobs: [], stopped: false }));
    const done = new Array<boolean>(B).fill(false);
    const scratch = new Float64Array(2 * V);
    const stepIds = new BigInt64Array(B);
    const stepPos = new BigInt64Array(B);
    const stepMask = new Float32Array(B * (C + 1));
    let last: Float32Array = logits;
    for (;;) {
      // Sample from the last logits.
      for (let b = 0; b < B; b++) {
        if (done[b]) continue;
        const { token, logprob } = sampleToken(last, b * V, V, o, o.rng, scratch);
        const g = gens[b]!;
        g.tokens.push(token);
        g.logprobs.push(logprob);
        if (token === stop) {
          done[b] = true;
          g.stopped = true;
        } else if (g.tokens.length >= o.maxNewTokens || next[b]! >= C || next[b]! + 1 >= this.maxLen) {
          done[b] = true;
        }
      }
      if (done.every(Boolean)) break;
      // Feed the sampled tokens at each row's next slot (finished rows feed padding that
      // nothing stores or reads).
      for (let b = 0; b < B; b++) {
        const g = gens[b]!;
        stepIds[b] = BigInt(done[b] ? T.pad : g.tokens[g.tokens.length - 1]!);
        stepPos[b] = BigInt(done[b] ? 0 : next[b]!);
        stepMask.set(cacheMask.subarray(b * C, (b + 1) * C), b * (C + 1));
        stepMask[b * (C + 1) + C] = 1;
      }
      const r = await this.forward(stepIds, stepPos, stepMask, B, 1, C, cacheK, cacheV);
      for (let b = 0; b < B; b++) {
        if (done[b]) continue;
        this.store(r.newK, r.newV, B, b, 1, cacheK, cacheV, b, next[b]!, C);
        cacheMask[b * C + next[b]!] = 1;
        next[b]!++;
      }
      last = r.logits;
    }
    return gens;
  }

  /** Copies the shared prefix's keys/values (one row of capacity n) into slots [0, n) of row `dstRow`. */
  private copyPrefix(prefix: { n: number; K: Float32Array[]; V: Float32Array[] }, cacheK: Float32Array[], cacheV: Float32Array[], dstRow: number, C: number): void {
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

export interface OnnxPolicyOptions extends Partial<SamplingOptions>, OnnxModelOptions {
  /** Tokens an assistant turn may have. Default 160. */
  maxNewTokens?: number;
  /** Requests sampled together at most. Default 32. */
  maxBatch?: number;
  seed?: number;
}

interface Pending {
  prompt: number[];
  resolve: (g: Generation) => void;
  reject: (e: unknown) => void;
}

/** A Policy backed by an OnnxModel; concurrent episodes' turns are sampled in one batch. */
export class OnnxPolicy implements Policy {
  readonly id: string;
  private readonly sequences = new Map<string, number[]>();
  private readonly queue: Pending[] = [];
  private running = false;
  private readonly rng: RandomFn;
  readonly sampling: SamplingOptions;

  private constructor(
    readonly model: OnnxModel,
    private readonly options: OnnxPolicyOptions,
  ) {
    this.id = `onnx:${model.config.name}`;
    this.rng = seededRandom(options.seed ?? 1);
    this.sampling = { temperature: options.temperature ?? 1, topK: options.topK ?? 0, topP: options.topP ?? 1 };
  }

  static async load(dir: string, options: OnnxPolicyOptions = {}): Promise<OnnxPolicy> {
    return new OnnxPolicy(await OnnxModel.load(dir, options), options);
  }

  get version(): number {
    return this.model.version;
  }

  /** The whole token sequence of an episode so far (prompt, environment and policy tokens). */
  sequence(episodeId: string): number[] | undefined {
    return this.sequences.get(episodeId);
  }

  async act(obs: Observation): Promise<PolicyAction> {
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
    const g = await this.enqueue(prompt);
    this.sequences.set(obs.episodeId, prompt.concat(g.tokens));
    const parsed = parseAssistantTokens(g.tokens);
    return {
      content: parsed.content,
      ...(parsed.calls.length ? { toolCalls: parsed.calls } : {}),
      ...(parsed.error ? { parseError: parsed.error } : {}),
      tokens: g.tokens,
      logprobs: g.logprobs,
      envTokens: env,
    };
  }

  endEpisode(episodeId: string): void {
    this.sequences.delete(episodeId);
  }

  private enqueue(prompt: number[]): Promise<Generation> {
    return new Promise((resolve, reject) => {
      this.queue.push({ prompt, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  /** Samples queued turns in batches until the queue is empty. */
  private async drain(): Promise<void> {
    this.running = true;
    try {
      // Let the other episodes of this tick queue their turns too.
      await new Promise((r) => setImmediate(r));
      while (this.queue.length) {
        const batch = this.queue.splice(0, this.options.maxBatch ?? 32);
        const maxNew = Math.min(this.options.maxNewTokens ?? 160, ...batch.map((p) => this.model.maxLen - 1 - p.prompt.length));
        try {
          const gens = await this.model.generate(batch.map((p) => p.prompt), { ...this.sampling, maxNewTokens: maxNew, rng: this.rng });
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

  /** Picks up new weights written by the learner. */
  async reload(): Promise<boolean> {
    return this.model.reload();
  }

  async close(): Promise<void> {
    await this.model.close();
  }
}
