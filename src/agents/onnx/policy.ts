/** OnnxPolicy: the Policy of the embedded model, its episodes' turns sampled together (static batches, or a continuous GenerationBatcher). */
import { fnv1a, seededRandom, type RandomFn } from '../../../lib/index.ts';
import type { Observation, Policy, PolicyAction } from '../../env/index.ts';
import type { SamplingOptions } from '../sampling.ts';
import { parseAssistantTokens, T } from '../template.ts';
import { HfTurns, type HfTurnsOptions } from '../hf-turns.ts';
import { GenerationBatcher } from './batcher.ts';
import type { Generation } from './generation.ts';
import { OnnxModel, type OnnxModelOptions } from './model.ts';

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
  /**
   * The embedded GPT: keep each episode's keys and values between its turns, so that a turn prefills
   * only what the environment added (default false: on the main job's 1M-parameter model the copying
   * cost more than the prefill it saved).
   */
  keepRows?: boolean;
}

interface Pending {
  prompt: number[];
  maxNewTokens: number;
  rng: RandomFn;
  cacheKey?: string;
  sampling?: SamplingOptions;
  resolve: (g: Generation) => void;
  reject: (e: unknown) => void;
}

/** A Policy backed by an OnnxModel; concurrent episodes' turns are sampled in one batch. */
export class OnnxPolicy implements Policy {
  readonly id: string;
  private readonly sequences = new Map<string, number[]>();
  /** The embedded GPT: the tool names each episode's sequence has listed (a change adds the new ones). */
  private readonly toolNames = new Map<string, Set<string>>();
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
    this.sampling = {
      temperature: options.temperature ?? 1,
      topK: options.topK ?? 0,
      topP: options.topP ?? 1,
      ...(options.minP ? { minP: options.minP } : {}),
    };
    if ((options.batching ?? (hf ? 'continuous' : 'static')) === 'continuous') {
      this.batcher = new GenerationBatcher(model, {
        mode: 'continuous',
        maxBatch: options.maxBatch ?? (hf ? 64 : 32),
        sampling: this.sampling,
        rng: seededRandom(options.seed ?? 1),
      });
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
    return this.actWith(obs);
  }

  /**
   * The same policy (its model, its episodes' sequences, its batches) sampling with other settings:
   * e.g. greedy held-out evaluations (temperature 0) beside rollouts at temperature 1. The view's
   * rows are batched with the policy's own, each row with its settings.
   */
  withSampling(sampling: Partial<SamplingOptions>): Policy {
    const s: SamplingOptions = { ...this.sampling, ...sampling };
    const version = () => this.version;
    return {
      id: this.id,
      get version() {
        return version();
      },
      act: (obs) => this.actWith(obs, s),
      endEpisode: (id) => this.endEpisode(id),
    };
  }

  private async actWith(obs: Observation, sampling?: SamplingOptions): Promise<PolicyAction> {
    if (this.hf) return this.actHf(obs, this.hf, sampling);
    const tpl = this.model.template;
    let seq = this.sequences.get(obs.episodeId);
    let env: number[];
    if (!seq || obs.turn === 0) {
      env = tpl.prompt(
        obs.messages as never,
        obs.tools.map((t) => t.name),
      );
      seq = [];
    } else {
      // Tool results, a user's follow-up; tools added since the prompt listed them, by name first.
      const told = this.toolNames.get(obs.episodeId) ?? new Set<string>();
      const added = obs.tools.map((t) => t.name).filter((n) => !told.has(n));
      env = tpl.continuationOf(obs.newMessages, added);
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
    // keepRows: the episode's keys and values are kept between its turns, and the next turn prefills only what the environment added.
    const g = await this.enqueue({
      prompt,
      maxNewTokens: maxNew,
      rng,
      ...(sampling ? { sampling } : {}),
      ...(this.options.keepRows === true ? { cacheKey: obs.episodeId } : {}),
    });
    this.sequences.set(obs.episodeId, prompt.concat(g.tokens));
    const names = this.toolNames.get(obs.episodeId);
    if (obs.turn === 0 || !names) this.toolNames.set(obs.episodeId, new Set(obs.tools.map((t) => t.name)));
    else for (const t of obs.tools) names.add(t.name);
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
  private async actHf(obs: Observation, hf: HfTurns, sampling?: SamplingOptions): Promise<PolicyAction> {
    const p = hf.prompt(obs);
    const seq = !p.drift && obs.turn > 0 ? (this.sequences.get(obs.episodeId) ?? []) : [];
    const prompt = seq.concat(p.env);
    const drift = p.drift ? { tokenDrift: p.drift } : {};
    const maxNew = Math.min(this.options.maxNewTokens ?? 160, this.model.maxLen - 1 - prompt.length);
    if (maxNew < 8)
      return { content: 'The conversation no longer fits my context.', envTokens: [], tokens: [], logprobs: [], toolTokens: p.toolTokens, ...drift };
    const rng = seededRandom(fnv1a(`${this.options.seed ?? 1}:${obs.episodeKey ?? obs.episodeId}:${obs.turn}`));
    // The episode's keys and values are kept between its turns: the next turn prefills only what the environment added.
    const g = await this.enqueue({ prompt, maxNewTokens: maxNew, rng, cacheKey: obs.episodeId, ...(sampling ? { sampling } : {}) });
    this.sequences.set(obs.episodeId, prompt.concat(g.tokens));
    return { ...hf.sampled(obs, g.tokens), tokens: g.tokens, logprobs: g.logprobs, envTokens: p.env, toolTokens: p.toolTokens, ...drift };
  }

  endEpisode(episodeId: string): void {
    this.sequences.delete(episodeId);
    this.toolNames.delete(episodeId);
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

  private enqueue(row: { prompt: number[]; maxNewTokens: number; rng: RandomFn; cacheKey?: string; sampling?: SamplingOptions }): Promise<Generation> {
    if (this.batcher) {
      return this.batcher.submit({
        prompt: row.prompt,
        maxNewTokens: row.maxNewTokens,
        rng: row.rng,
        ...(row.sampling ? { sampling: row.sampling } : {}),
        ...(row.cacheKey !== undefined ? { cacheKey: row.cacheKey } : {}),
      });
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
            {
              ...this.sampling,
              maxNewTokens: Math.max(...batch.map((p) => p.maxNewTokens)),
              rng: batch[0]!.rng,
              rows: batch.map((p) => ({
                maxNewTokens: p.maxNewTokens,
                rng: p.rng,
                ...(p.sampling ? { sampling: p.sampling } : {}),
                ...(p.cacheKey !== undefined ? { cacheKey: p.cacheKey } : {}),
              })),
            },
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
