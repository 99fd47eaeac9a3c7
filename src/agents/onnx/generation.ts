/** What a generation is asked for and gives back: the call's and each row's settings, the rows OnnxModel.serve takes, and the generation. */
import type { RandomFn } from '../../../lib/index.ts';
import type { SamplingOptions } from '../sampling.ts';

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

export interface Generation {
  tokens: number[];
  logprobs: number[];
  /** Ended with the stop token (not cut by the token limit or the context). */
  stopped: boolean;
}
