/** The policy server's public types: its options, its stats, and the handle startPolicyServer returns. */
import type { BatcherStats, OnnxModel } from '../onnx/index.ts';
import type { ToolFormatChoice } from '../hf/index.ts';

export interface PolicyServerOptions {
  /** The exported model directory (config.json with an onnx section). */
  modelDir: string;
  /** Interface to bind. Default 127.0.0.1 (localhost only). */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  /** When set, every request must carry `Authorization: Bearer <token>` (the scheme in any case). Must not be empty. */
  token?: string;
  /** Host names accepted in the Host and Origin headers beyond localhost names and the bound host (without a port). */
  allowedHosts?: string[];
  /** Requests sampled together at most. Default 32. */
  maxBatch?: number;
  /** Threads of onnxruntime's operators. Default 1. */
  threads?: number;
  /** Seeds the random source of requests that bring no `seed`. Default 1. */
  seed?: number;
  /** The model's name in the API. Default the model config's name. */
  modelName?: string;
  /**
   * How concurrent requests are batched (GenerationBatcher's mode). Default static: measured
   * faster with 16 clients (bench/serve-policy.ts: 1757 tok/s against 1473 continuous), since
   * clients answered together come back together and their prompts' common prefix is computed once.
   */
  batching?: 'continuous' | 'static';
  /**
   * A Hugging Face model's tool format (hf/tool-format.ts): `auto` (default) renders tools with
   * the template's own format, or adds the Hermes format to a template without tools.
   */
  toolFormat?: ToolFormatChoice;
  /**
   * Called with a model directory before it is loaded (the first, and each one /v1/reload names
   * or re-reads): the CLI exports a Hugging Face checkpoint's ONNX graph here (ensureHfOnnx).
   */
  prepare?: (dir: string) => void | Promise<void>;
}

export interface PolicyServerStats extends BatcherStats {
  /** Chat completions accepted (rendered and queued). */
  requests: number;
  /**
   * Completions whose message does not render back to their tokens (plus the `<|end|>` a cut
   * turn gets): sent back, they make the next prompt differ from prompt + completion.
   */
  inexact: number;
  /** The served weights' version and directory. */
  version: number;
  modelDir: string;
}

export interface PolicyServer {
  /** The API's base URL, ending in /v1 (an OpenAI client's `baseURL`). */
  url: string;
  port: number;
  /** The name requests must use (`model`). */
  modelName: string;
  /** The model new requests are sampled with. */
  readonly model: OnnxModel;
  stats(): PolicyServerStats;
  close(): Promise<void>;
}
