/**
 * POST /v1/reload: new weights, from the served directory (when its version changed) or from
 * another directory with a model of the same kind, vocabulary and context; the reloads run one
 * after another, and a replaced model is closed once the rows sampling on it end.
 */
import { existsSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join, resolve } from 'node:path';
import { isHfModelDir, readModelConfig, type ModelConfig } from '../model-config.ts';
import type { OnnxModel } from '../onnx/index.ts';
import { bad, given, readJson, sendJson } from './http.ts';
import type { ServeState } from './state.ts';

/** `{}`: the served directory, if its version changed; `{model_dir}`: that directory (same vocabulary and context). */
export async function reload(s: ServeState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readJson(req, {});
  if (given(body.model_dir) && typeof body.model_dir !== 'string') throw bad("'model_dir' must be a string (a model directory's path)", 'model_dir');
  const run = s.reloading.then(() => reloadModel(s, body));
  s.reloading = run.catch(() => {});
  sendJson(res, 200, await run);
}

/** One reload, once the ones before it ended: the new model swapped in, or a 400 saying why not. */
async function reloadModel(s: ServeState, body: Record<string, unknown>) {
  const current = s.batcher.model;
  const dir = typeof body.model_dir === 'string' ? resolve(body.model_dir) : s.modelDir;
  if (!existsSync(join(dir, 'config.json'))) throw bad(`No model at ${dir}: it has no config.json`, 'model_dir');
  const hf = isHfModelDir(dir);
  if (hf !== (current.family !== 'gpt'))
    throw bad(
      `The model at ${dir} is ${hf ? 'a Hugging Face checkpoint' : 'an embedded GPT'}; the served one is ${current.family === 'gpt' ? 'an embedded GPT' : 'a Hugging Face checkpoint'}: reload a model of the same kind`,
      'model_dir',
    );
  if (!hf) {
    let config: ModelConfig;
    try {
      config = readModelConfig(dir);
    } catch (err) {
      throw bad((err as Error).message, 'model_dir');
    }
    const a = config.architecture;
    const b = current.config.architecture;
    const differs = [
      a.vocab_size !== b.vocab_size ? `vocab_size ${a.vocab_size} (served: ${b.vocab_size})` : '',
      a.max_seq_len !== b.max_seq_len ? `max_seq_len (the context) ${a.max_seq_len} (served: ${b.max_seq_len})` : '',
    ].filter(Boolean);
    if (differs.length) throw bad(`The model at ${dir} has another architecture: ${differs.join(', ')}`, 'model_dir');
    if (dir === s.modelDir && config.version === current.version) return { version: current.version, model_dir: dir, reloaded: false };
  }
  let next: OnnxModel;
  try {
    next = await s.models.load(dir);
  } catch (err) {
    throw bad(`Cannot load the model at ${dir}: ${(err as Error).message}`, 'model_dir');
  }
  if (hf) {
    const differs = [
      next.V !== current.V ? `vocab_size ${next.V} (served: ${current.V})` : '',
      next.maxLen !== current.maxLen ? `the context ${next.maxLen} (served: ${current.maxLen})` : '',
    ].filter(Boolean);
    if (differs.length) {
      await next.close();
      throw bad(`The model at ${dir} has another architecture: ${differs.join(', ')}`, 'model_dir');
    }
    if (dir === s.modelDir && next.version === current.version) {
      await next.close();
      return { version: current.version, model_dir: dir, reloaded: false };
    }
  }
  s.modelDir = dir;
  // The previous model is closed once the rows sampling on it (if any) have finished.
  s.retiring.push(s.batcher.swap(next).then((previous) => previous.close()));
  return { version: next.version, model_dir: dir, reloaded: true };
}
