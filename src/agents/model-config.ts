/** The model directory's config.json (learner/PROTOCOL.md), read by both Node and Python. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

export const SPECIAL_TOKENS = {
  '<|system|>': 256,
  '<|user|>': 257,
  '<|assistant|>': 258,
  '<|tool|>': 259,
  '<|tool_call|>': 260,
  '<|/tool_call|>': 261,
  '<|end|>': 262,
  '<|pad|>': 263,
} as const;

export const ModelConfigSchema = z.looseObject({
  format: z.literal('mcp-gym-model/1'),
  name: z.string(),
  version: z.number().int().default(0),
  architecture: z.looseObject({
    type: z.literal('gpt'),
    vocab_size: z.number().int().positive(),
    d_model: z.number().int().positive(),
    n_layers: z.number().int().positive(),
    n_heads: z.number().int().positive(),
    d_ff: z.number().int().positive(),
    max_seq_len: z.number().int().positive(),
  }),
  tokenizer: z.looseObject({
    type: z.literal('byte'),
    special_tokens: z.record(z.string(), z.number().int()),
  }),
  chat_template: z.looseObject({ max_tool_result_bytes: z.number().int().positive().default(256), system_tools: z.boolean().default(true) }).prefault({}),
  onnx: z.looseObject({ graph: z.string(), data: z.string().optional() }).optional(),
});
export type ModelConfig = z.output<typeof ModelConfigSchema>;

export function readModelConfig(dir: string): ModelConfig {
  const file = join(dir, 'config.json');
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`Cannot read the model config ${file}: ${(err as Error).message}`);
  }
  const r = ModelConfigSchema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`${file}: ${i.path.join('.') || '(root)'}: ${i.message}`);
  }
  for (const [name, id] of Object.entries(SPECIAL_TOKENS)) {
    if (r.data.tokenizer.special_tokens[name] !== id) throw new Error(`${file}: tokenizer.special_tokens: ${name} must be ${id}`);
  }
  return r.data;
}

/** Whether a model directory holds a Hugging Face checkpoint (config.json without mcp-gym's `format`). */
export function isHfModelDir(dir: string): boolean {
  try {
    const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    return c.format === undefined && (typeof c.model_type === 'string' || Array.isArray(c.architectures));
  } catch {
    return false;
  }
}
