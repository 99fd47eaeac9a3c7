/**
 * The training configuration: one zod schema, filled from a preset, a config file and flags
 * (in that order). Presets are configurations of the one loop (DESIGN.md: presets over
 * subclasses): reward source, advantage estimator, loss, sampling, schedule.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';

export const LossConfigSchema = z.object({
  /** grpo: PPO clip, per-sequence mean; dapo: token-level; dr_grpo: sum / constant; gspo: sequence ratio. */
  loss: z.enum(['grpo', 'dapo', 'dr_grpo', 'gspo']).default('grpo'),
  clip_low: z.number().min(0).max(1).default(0.2),
  clip_high: z.number().min(0).default(0.2),
  /** Weight of the k3 KL to the frozen reference. */
  beta: z.number().min(0).default(0.04),
  entropy_coef: z.number().min(0).default(0),
  epochs: z.number().int().min(1).default(2),
  /** Sequences per optimizer step within an epoch (0 = the whole batch). */
  minibatch_size: z.number().int().min(0).default(0),
  /** Sequences per forward/backward (gradient accumulation inside a minibatch). */
  micro_batch_size: z.number().int().min(1).default(16),
  max_grad_norm: z.number().positive().default(1),
  lr: z.number().positive().default(1e-4),
  warmup_steps: z.number().int().min(0).default(0),
  min_lr_ratio: z.number().min(0).max(1).default(0.1),
  weight_decay: z.number().min(0).default(0),
  /** AdamW's epsilon and betas. */
  adam_eps: z.number().gt(0).max(1).default(1e-8),
  adam_beta1: z.number().min(0).lt(1).default(0.9),
  adam_beta2: z.number().min(0).lt(1).default(0.999),
  /** Learning-rate multiplier of the 1-D parameters (norm gains, biases). */
  vector_lr_scale: z.number().gt(0).max(1000).default(1),
  /** Reset the reference to the current policy every N steps (ProRL; 0 = never). */
  ref_reset_every: z.number().int().min(0).default(0),
});

export const TrainConfigSchema = z
  .object({
    preset: z.enum(['grpo', 'dapo', 'dr_grpo', 'gspo', 'rlvr', 'art']).default('art'),
    suite: z.string().default('calculator'),
    /** Only tasks up to this difficulty, for training and evaluation. */
    max_difficulty: z.number().int().min(1).max(5).default(5),
    /** The cold-start model directory (copied to the run; the copy is trained). */
    model: z.string().default('models/calc-tiny'),
    steps: z.number().int().min(0).default(30),
    /** Tasks per step (groups). */
    tasks_per_step: z.number().int().min(1).default(12),
    /** Rollouts per task (G). */
    group: z.number().int().min(2).default(8),
    concurrency: z.number().int().min(1).default(64),
    /** Reward: env reward source (art / rlvr shaping / plain verifier score). */
    reward: z.enum(['art', 'rlvr', 'verifier', 'composer']).default('art'),
    advantage: z.enum(['grpo', 'dr_grpo']).default('grpo'),
    per_turn: z.boolean().default(false),
    /** Drop groups whose rewards are all equal and sample more tasks until the batch is full. */
    dynamic_sampling: z.boolean().default(false),
    /** At most this many extra sampling rounds per step when dynamic sampling drops groups. */
    max_resample_rounds: z.number().int().min(0).default(2),
    /** DAPO overlong shaping over the policy's tokens in an episode (0 = off). */
    overlong_max: z.number().int().min(0).default(0),
    overlong_cache: z.number().int().min(1).default(64),
    temperature: z.number().positive().default(1),
    top_k: z.number().int().min(0).default(0),
    top_p: z.number().gt(0).max(1).default(1),
    max_new_tokens: z.number().int().min(8).default(96),
    /** Evaluate on held-out tasks every K steps (0 = only before and after). */
    eval_every: z.number().int().min(0).default(10),
    /** Held-out tasks evaluated (0 = all of the split), and rollouts of each. */
    eval_tasks: z.number().int().min(0).default(0),
    eval_samples: z.number().int().min(1).default(2),
    /** Learner checkpoint (and state.json) every N steps; a learner that dies costs the steps since. */
    checkpoint_every: z.number().int().min(1).default(1),
    /** How the bundled tool servers run: in this process (fastest) or as stdio child processes. */
    bundled_servers: z.enum(['inprocess', 'stdio']).default('inprocess'),
    seed: z.number().int().default(0),
    /** URL of a learner already running (e.g. on a GPU machine); default: spawn one here. */
    learner: z.string().optional(),
    learner_token: z.string().optional(),
    device: z.enum(['auto', 'cpu', 'cuda']).default('auto'),
    threads: z.number().int().min(1).optional(),
    ...LossConfigSchema.shape,
  })
  .strict();

export type TrainConfig = z.output<typeof TrainConfigSchema>;
export type TrainConfigInput = z.input<typeof TrainConfigSchema>;

export const PRESETS: Record<TrainConfig['preset'], Partial<TrainConfigInput>> = {
  grpo: { reward: 'verifier', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
  dapo: { reward: 'verifier', advantage: 'grpo', loss: 'dapo', clip_low: 0.2, clip_high: 0.28, beta: 0, dynamic_sampling: true, overlong_max: 160, overlong_cache: 48, entropy_coef: 0 },
  dr_grpo: { reward: 'verifier', advantage: 'dr_grpo', loss: 'dr_grpo', clip_low: 0.2, clip_high: 0.2, beta: 0 },
  gspo: { reward: 'verifier', advantage: 'grpo', loss: 'gspo', clip_low: 0.0003, clip_high: 0.0004, beta: 0 },
  rlvr: { reward: 'rlvr', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
  art: { reward: 'art', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
};

/** preset < config file < explicit overrides; errors name the field. */
export function resolveConfig(overrides: Partial<TrainConfigInput>, file?: string): TrainConfig {
  let fromFile: Record<string, unknown> = {};
  if (file) {
    try {
      fromFile = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`${file}: cannot read the config: ${(err as Error).message}`);
    }
  }
  const preset = (overrides.preset ?? fromFile.preset ?? 'art') as TrainConfig['preset'];
  if (!(preset in PRESETS)) throw new Error(`preset: unknown preset '${preset}'; presets: ${Object.keys(PRESETS).join(', ')}`);
  const merged = { ...PRESETS[preset], ...fromFile, ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)), preset };
  const r = TrainConfigSchema.safeParse(merged);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`${file ? `${file}: ` : ''}${i.path.join('.') || '(config)'}: ${i.message}`);
  }
  return r.data;
}

/** What the learner needs of the config for one train step. */
export function learnerConfig(c: TrainConfig, totalSteps: number) {
  return {
    loss: c.loss,
    clip_low: c.clip_low,
    clip_high: c.clip_high,
    beta: c.beta,
    entropy_coef: c.entropy_coef,
    epochs: c.epochs,
    minibatch_size: c.minibatch_size,
    micro_batch_size: c.micro_batch_size,
    max_grad_norm: c.max_grad_norm,
    lr: c.lr,
    warmup_steps: c.warmup_steps,
    total_steps: Math.max(1, totalSteps),
    min_lr_ratio: c.min_lr_ratio,
    weight_decay: c.weight_decay,
    eps: c.adam_eps,
    betas: [c.adam_beta1, c.adam_beta2],
    vector_lr_scale: c.vector_lr_scale,
    ref_reset_every: c.ref_reset_every,
    temperature: c.temperature,
    top_k: c.top_k,
    top_p: c.top_p,
    seed: c.seed,
  };
}
