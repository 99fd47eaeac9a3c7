/**
 * What the policy server's routes share: the batcher and the served model's name and directory,
 * the counters of its stats, the reloads in order, and the loading of a model directory with its
 * dialect (serve-dialect.ts).
 */
import type { RandomFn } from '../../../lib/index.ts';
import { HfTurns } from '../hf-turns.ts';
import { OnnxModel, type GenerationBatcher } from '../onnx/index.ts';
import { gptDialect, hfDialect, type Dialect } from '../serve-dialect.ts';
import type { PolicyServerOptions } from './types.ts';

/** Loads model directories (the first, and each one a reload names or re-reads) and knows each loaded model's dialect. */
export interface ModelLoader {
  load(dir: string): Promise<OnnxModel>;
  dialectOf(model: OnnxModel): Dialect;
}

/** The ModelLoader of a server's options (`threads`, `prepare`, `toolFormat`). */
export function modelLoader(o: PolicyServerOptions): ModelLoader {
  const modelOptions = { threads: o.threads ?? 1 };
  // Each loaded model's dialect: how prompts are rendered and completions read (serve-dialect.ts).
  const dialects = new WeakMap<OnnxModel, Dialect>();
  const load = async (dir: string): Promise<OnnxModel> => {
    await o.prepare?.(dir);
    const model = await OnnxModel.load(dir, modelOptions);
    try {
      dialects.set(model, model.family === 'gpt' ? gptDialect(model.template) : hfDialect(HfTurns.load(dir, { toolFormat: o.toolFormat ?? 'auto' })));
    } catch (err) {
      await model.close();
      throw err;
    }
    return model;
  };
  const dialectOf = (model: OnnxModel): Dialect => dialects.get(model)!;
  return { load, dialectOf };
}

/** A running server's state (the fields without `readonly` change while it runs). */
export interface ServeState {
  readonly o: PolicyServerOptions;
  /** Host names accepted in the Host and Origin headers. */
  readonly allowed: Set<string>;
  readonly models: ModelLoader;
  readonly batcher: GenerationBatcher;
  /** The name requests must use (`model`). */
  readonly modelName: string;
  /** When the server started (the model card's `created`). */
  readonly created: number;
  /** Seeds the random source of requests that bring no `seed`. */
  readonly serverRng: RandomFn;
  /** The served directory: a reload that names another one makes it the served one. */
  modelDir: string;
  /** Chat completions accepted, and those whose message does not render back to their tokens (PolicyServerStats). */
  requests: number;
  inexact: number;
  /** The last reload (they run one after another); it never rejects. */
  reloading: Promise<unknown>;
  /** Replaced models being closed once the rows sampling on them end. */
  readonly retiring: Promise<void>[];
}
