/** bench/scaling.ts: a model directory's shape, weight files and sizes. */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { isHfModelDir } from '../../src/trainers/index.ts';
import { BenchError } from './options.ts';

// ---------------------------------------------------------------------------------------------
// The model: its directory, a private copy, its shape.

export interface Shape {
  family: string;
  n_layers: number;
  d_model: number;
  n_heads: number;
  n_kv_heads: number;
  head_dim: number;
  d_ff: number;
  vocab_size: number;
  context: number;
  tied: boolean;
  /** Parameters that are lookups, not matmuls, per token: the untied input embedding, learned positions. */
  lookup_params: number;
}

export function shapeOf(dir: string): Shape {
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  if (c.format === 'mcp-gym-model/1') {
    const a = c.architecture as Record<string, number | boolean>;
    const d = Number(a.d_model);
    const tied = Boolean(a.tie_embeddings);
    return {
      family: 'gpt',
      n_layers: Number(a.n_layers),
      d_model: d,
      n_heads: Number(a.n_heads),
      n_kv_heads: Number(a.n_heads),
      head_dim: d / Number(a.n_heads),
      d_ff: Number(a.d_ff),
      vocab_size: Number(a.vocab_size),
      context: Number(a.max_seq_len),
      tied,
      lookup_params: Number(a.max_seq_len) * d + (tied ? 0 : Number(a.vocab_size) * d),
    };
  }
  const n = (k: string) => {
    const v = c[k];
    if (typeof v !== 'number') throw new BenchError(`${join(dir, 'config.json')}: no number '${k}' (a Llama/Qwen-style config is expected)`);
    return v;
  };
  const d = n('hidden_size');
  const heads = n('num_attention_heads');
  const tied = c.tie_word_embeddings !== false;
  return {
    family: String(c.model_type ?? 'hf'),
    n_layers: n('num_hidden_layers'),
    d_model: d,
    n_heads: heads,
    n_kv_heads: typeof c.num_key_value_heads === 'number' ? c.num_key_value_heads : heads,
    head_dim: typeof c.head_dim === 'number' ? c.head_dim : d / heads,
    d_ff: n('intermediate_size'),
    vocab_size: n('vocab_size'),
    context: n('max_position_embeddings'),
    tied,
    lookup_params: tied ? 0 : n('vocab_size') * d,
  };
}

/** Bytes of the weight files a push moves (the learner's own formats). */
export function weightFiles(dir: string): { files: string[]; bytes: number } {
  const names = isHfModelDir(dir)
    ? [...readdirSync(dir).filter((f) => f.endsWith('.safetensors')), ...(existsSync(join(dir, 'onnx')) ? ['onnx/model.onnx.data'] : [])]
    : ['weights.pt', 'model.onnx.data'];
  const files = names.filter((f) => existsSync(join(dir, f)));
  return { files, bytes: files.reduce((s, f) => s + statSync(join(dir, f)).size, 0) };
}

export function dirBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  return readdirSync(dir, { withFileTypes: true }).reduce((s, e) => s + (e.isDirectory() ? dirBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size), 0);
}
