/** Reading a model directory's config: the embedded GPT's config.json, or a Hugging Face checkpoint's ONNX export config (onnx/config.json). */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { readModelConfig, type ModelConfig } from '../model-config.ts';

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

/** Whether a directory's config is a Hugging Face checkpoint's ONNX export config (else the GPT's config.json). */
export function isHfConfig(c: ModelConfig | HfOnnxConfig): c is HfOnnxConfig {
  return c.format === 'mcp-gym-onnx/1';
}

/** A directory's config: a Hugging Face checkpoint's when it has onnx/config.json, else the GPT's config.json. */
export function readAnyConfig(dir: string): ModelConfig | HfOnnxConfig {
  if (existsSync(hfOnnxConfigPath(dir))) return readHfOnnxConfig(dir);
  let hfCheckpoint = false;
  try {
    const raw = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    hfCheckpoint = typeof raw.model_type === 'string';
  } catch {
    // readModelConfig reports it
  }
  if (hfCheckpoint) {
    throw new Error(
      `${dir} is a Hugging Face checkpoint without an ONNX export (${hfOnnxConfigPath(dir)}): export it first (python -m mcp_gym_learner.hf_export --model-dir ${dir})`,
    );
  }
  return readModelConfig(dir);
}
