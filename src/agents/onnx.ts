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
import { seededRng, type Rng } from '../tools/index.ts';
import type { Observation, Policy, PolicyAction } from '../env/index.ts';
import { readModelConfig, type ModelConfig } from './model-config.ts';
import { sampleToken, type SamplingOptions } from './sampling.ts';
import { ChatTemplate, parseAssistantTokens, T } from './template.ts';

export interface GenerateOptions extends SamplingOptions {
  maxNewTokens: number;
  rng: Rng;
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
   * Samples a continuation of each prompt, all in one batch: prefill (left-padded), then one
   * token per step for every row until each has stopped or reached its limit.
   */
  async generate(prompts: number[][], o: GenerateOptions): Promise<Generation[]> {
    const { L, H, Dh, V } = this;
    const B = prompts.length;
    const stop = o.stop ?? T.end;
    const P = Math.max(...prompts.map((p) => p.length));
    if (P === 0) throw new Error('generate: an empty prompt');
    if (P >= this.maxLen) throw new Error(`generate: a prompt of ${P} tokens does not fit the context of ${this.maxLen}`);
    const C = Math.min(this.maxLen, P + o.maxNewTokens); // cache capacity (slots)
    const cacheK = Array.from({ length: L }, () => new Float32Array(B * H * Dh * C));
    const cacheV = Array.from({ length: L }, () => new Float32Array(B * H * C * Dh));
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const cacheMask = new Float32Array(B * C); // 1 where a slot holds a real token

    // Prefill: all prompts, left-padded to P.
    const ids = new BigInt64Array(B * P);
    const pos = new BigInt64Array(B * P);
    const mask0 = new Float32Array(B * P);
    const next = new Array<number>(B); // next position of each row
    for (let b = 0; b < B; b++) {
      const p = prompts[b]!;
      const pad = P - p.length;
      for (let t = 0; t < P; t++) {
        const real = t >= pad;
        ids[b * P + t] = BigInt(real ? p[t - pad]! : T.pad);
        pos[b * P + t] = BigInt(real ? t - pad : 0);
        mask0[b * P + t] = real ? 1 : 0;
        cacheMask[b * C + t] = real ? 1 : 0;
      }
      next[b] = p.length;
    }
    let r = await this.forward(ids, pos, mask0, B, P, 0, none, none);
    this.store(r.newK, r.newV, cacheK, cacheV, B, P, 0, C);

    const gens: Generation[] = prompts.map(() => ({ tokens: [], logprobs: [], stopped: false }));
    const done = new Array<boolean>(B).fill(false);
    const scratch = new Float64Array(V);
    const stepIds = new BigInt64Array(B);
    const stepPos = new BigInt64Array(B);
    const stepMask = new Float32Array(B * (C + 1));
    for (let slot = P; ; slot++) {
      // Sample from the last logits.
      for (let b = 0; b < B; b++) {
        if (done[b]) continue;
        const { token, logprob } = sampleToken(r.logits, b * V, V, o, o.rng, scratch);
        gens[b]!.tokens.push(token);
        gens[b]!.logprobs.push(logprob);
        if (token === stop) {
          done[b] = true;
          gens[b]!.stopped = true;
        } else if (gens[b]!.tokens.length >= o.maxNewTokens || slot >= C || next[b]! + 1 >= this.maxLen) {
          done[b] = true;
        }
      }
      if (done.every(Boolean) || slot >= C) break;
      // Feed the sampled tokens (finished rows feed padding that nothing attends to).
      for (let b = 0; b < B; b++) {
        const g = gens[b]!;
        stepIds[b] = BigInt(done[b] ? T.pad : g.tokens[g.tokens.length - 1]!);
        stepPos[b] = BigInt(done[b] ? 0 : next[b]!);
        if (!done[b]) next[b]!++;
        stepMask.set(cacheMask.subarray(b * C, (b + 1) * C), b * (C + 1));
        stepMask[b * (C + 1) + C] = 1;
      }
      r = await this.forward(stepIds, stepPos, stepMask, B, 1, C, cacheK, cacheV);
      this.store(r.newK, r.newV, cacheK, cacheV, B, 1, slot, C);
      for (let b = 0; b < B; b++) cacheMask[b * C + slot] = done[b] ? 0 : 1;
    }
    return gens;
  }

  /** Writes new keys/values [L, B, H, Tn, Dh] into cache slots [slot, slot + Tn) (keys transposed). */
  private store(newK: Float32Array, newV: Float32Array, cacheK: Float32Array[], cacheV: Float32Array[], B: number, Tn: number, slot: number, C: number): void {
    const { L, H, Dh } = this;
    const n = Tn * Dh;
    for (let l = 0; l < L; l++) {
      const K = cacheK[l]!;
      const V = cacheV[l]!;
      for (let bh = 0; bh < B * H; bh++) {
        const src = (l * B * H + bh) * n;
        V.set(newV.subarray(src, src + n), bh * C * Dh + slot * Dh);
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
  private readonly rng: Rng;
  readonly sampling: SamplingOptions;

  private constructor(
    readonly model: OnnxModel,
    private readonly options: OnnxPolicyOptions,
  ) {
    this.id = `onnx:${model.config.name}`;
    this.rng = seededRng(options.seed ?? 1);
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
