/** The R1 pipeline's config: its schema (every field a flag), parsing it, its recorded form, and what changed since a recorded one. */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { PRESET_NAMES } from './config.ts';

const int = (min: number, def: number) => z.number().int().min(min).default(def);

/** The pipeline's config: every field is a flag of `mcp-gym pipeline r1` (its description the help). */
export const R1ConfigSchema = z
  .object({
    suite: z
      .string()
      .min(1)
      .default('calculator')
      .describe('the bundled task suite: the demonstrations, the train tasks of every stage and the held-out tasks'),
    max_difficulty: z.number().int().min(1).max(5).default(1).describe('only tasks up to this difficulty'),
    model: z
      .string()
      .min(1)
      .optional()
      .describe('the starting model directory, used as is by stage 1 (unless --sft); absent: stage 1 trains a new embedded model on expert demonstrations'),
    sft: z
      .boolean()
      .default(false)
      .describe('stage 1 runs the SFT cold start even with --model (a Hugging Face checkpoint is fine-tuned; the embedded model continues from its weights)'),
    seed: int(0, 0).describe('the seed of every stage'),
    sft_demos: int(1, 300).describe('stage 1: expert demonstrations'),
    sft_steps: int(1, 150).describe('stage 1: SFT steps'),
    sft_batch: int(1, 16).describe('stage 1: SFT batch size'),
    sft_lr: z.number().gt(0).default(3e-3).describe('stage 1: SFT learning rate (3e-3 trains a new model; use less to continue one)'),
    sft_d_model: int(8, 128).describe('stage 1, a new model: width'),
    sft_layers: int(1, 4).describe('stage 1, a new model: layers'),
    sft_heads: int(1, 4).describe('stage 1, a new model: attention heads (divides the width)'),
    sft_ctx: int(64, 384).describe('stage 1, a new model: context length in tokens'),
    preset: z.enum(PRESET_NAMES).default('grpo').describe('stages 2 and 4: the training preset (mcp-gym train --preset)'),
    grpo_steps: int(0, 10).describe('stage 2: GRPO steps'),
    grpo2_steps: int(0, 10).describe('stage 4: GRPO steps'),
    tasks_per_step: int(1, 8).describe('stages 2 and 4: tasks per step'),
    group: int(2, 4).describe('stages 2 and 4: rollouts per task (G)'),
    lr: z.number().gt(0).default(5e-4).describe('stages 2 and 4: the learning rate'),
    train_config: z
      .string()
      .min(1)
      .optional()
      .describe('a JSON file of further training-config fields for stages 2 and 4 (as mcp-gym train --config; the fields above win)'),
    rs_tasks: int(1, 32).describe('stage 3: train tasks sampled for rejection sampling'),
    rs_k: int(1, 4).describe('stage 3: samples per task (k)'),
    rs_max_per_task: int(1, 2).describe('stage 3: at most M verified, distinct samples kept per task'),
    rs_sft_steps: int(1, 40).describe('stage 3: SFT steps on the kept samples'),
    rs_sft_batch: int(1, 8).describe('stage 3: SFT batch size'),
    rs_sft_lr: z.number().gt(0).default(2e-4).describe('stage 3: SFT learning rate (the stage-2 model is fine-tuned, not trained anew)'),
    eval_limit: int(1, 48).describe('held-out tasks every stage is evaluated on (the first N of the eval split)'),
    eval_samples: int(1, 2).describe('rollouts of each held-out task'),
    concurrency: int(1, 32).describe('episodes at once'),
    threads: z.number().int().min(1).optional().describe("the learner's CPU threads (default: all cores)"),
  })
  .strict();
export type R1Config = z.output<typeof R1ConfigSchema>;
export type R1ConfigInput = z.input<typeof R1ConfigSchema>;

/** A config the pipeline refuses: a bad field, or settings that differ from those of the pipeline being resumed. */
export class R1ConfigError extends Error {}

/** Fields that may change between a run and its resumption (they change speed, not results). */
const FREE_FIELDS = new Set(['concurrency', 'threads']);

/** A value as canonical JSON: object keys sorted, so that equal arguments give equal text. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** The config as recorded: resolved, the model's path absolute, the train_config file's fields in it. */
export function recordOf(c: R1Config): Record<string, unknown> {
  let train_overrides: Record<string, unknown> = {};
  if (c.train_config) {
    try {
      train_overrides = JSON.parse(readFileSync(c.train_config, 'utf8')) as Record<string, unknown>;
    } catch (err) {
      throw new R1ConfigError(`train_config: cannot read ${c.train_config}: ${(err as Error).message}`);
    }
  }
  return { ...c, ...(c.model ? { model: resolve(c.model) } : {}), train_overrides };
}

/** The fields of a recorded config that differ from the one given, as `field: was X, now Y`. */
export function pipelineChanges(was: Record<string, unknown>, now: Record<string, unknown>): string[] {
  const keys = [...new Set([...Object.keys(was), ...Object.keys(now)])].filter((k) => !FREE_FIELDS.has(k));
  return keys.filter((k) => canonical(was[k]) !== canonical(now[k])).map((k) => `${k}: the pipeline has ${canonical(was[k])}, not ${canonical(now[k])}`);
}

export function parseR1Config(input: R1ConfigInput): R1Config {
  const r = R1ConfigSchema.safeParse(input);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new R1ConfigError(`${i.path.join('.') || '(config)'}: ${i.message}`);
  }
  if (r.data.sft_d_model % r.data.sft_heads !== 0)
    throw new R1ConfigError(`sft_d_model: ${r.data.sft_d_model} is not a multiple of sft_heads (${r.data.sft_heads})`);
  if (r.data.sft && !r.data.model) throw new R1ConfigError('sft: stage 1 always runs the SFT cold start without a model; --sft is for a given --model');
  if (r.data.model && !existsSync(join(r.data.model, 'config.json'))) throw new R1ConfigError(`model: no model directory at ${r.data.model} (config.json)`);
  return r.data;
}
