/**
 * The learner contract, written once: every learner command's arguments and answer as one zod
 * schema. From it come the TypeScript types of `LearnerSession.request`, the JSON Schema the
 * Python learner validates requests against (`learner/mcp_gym_learner/protocol.schema.json`,
 * emitted by `scripts/gen-protocol.ts` and checked for staleness by a test), the tables of
 * `learner/PROTOCOL.md`, and (for the training config) the command-line flags of `mcp-gym train`.
 * See docs/architecture.md, "Contracts".
 *
 * Optional arguments may be sent as null: the learner drops null fields before validating.
 */
import { z } from 'zod';

/** Marks an array whose elements the learner checks itself (token ranges against the loaded model): the JSON Schema keeps only its outer shape, so that validating a large batch stays cheap. */
const shallow = <T extends z.ZodType>(s: T) => s.meta({ 'x-shallow': true });

// ---------------------------------------------------------------------------------------------
// The training config of one `train` call (the learner's half of TrainConfigSchema).

export const LearnerConfigSchema = z
  .object({
    loss: z
      .enum(['grpo', 'dapo', 'dr_grpo', 'gspo', 'cispo'])
      .default('grpo')
      .describe(
        'policy loss: grpo (PPO clip, per-sequence mean), dapo (token-level), dr_grpo (sum over a constant), gspo (sequence ratio), cispo (clipped IS-weight REINFORCE, token-level; clip_low unused)',
      ),
    clip_low: z.number().min(0).max(1).default(0.2).describe('ε_low: the ratio is clipped below at 1 − clip_low'),
    clip_high: z.number().min(0).default(0.2).describe('ε_high: the ratio is clipped above at 1 + clip_high (DAPO: 0.28)'),
    dual_clip: z
      .number()
      .min(0)
      .default(0)
      .describe('dual-clip bound c (verl clip_ratio_c, typically 3): for A < 0 the policy loss is at most c·|A| (0: off; else > 1; not with cispo)'),
    is_correction: z
      .enum(['none', 'token_truncate', 'token_mask', 'sequence_truncate', 'sequence_mask'])
      .default('none')
      .describe(
        "off-policy correction for a sampler older than the learner: the ratio is taken against the learner's logprobs at the start of the call, and the policy-gradient term is weighted by the sampler importance weight exp(learner − sampler) per token or per sequence, truncated to [is_min, is_cap] or masked outside it (none: the ratio is against the sampler's logprobs)",
      ),
    is_cap: z.number().gt(0).default(2).describe('C_max: the upper bound of the off-policy importance weight (is_correction)'),
    is_min: z.number().min(0).default(0).describe('C_min: the lower bound of the off-policy importance weight (0: none); must be below is_cap'),
    beta: z.number().min(0).default(0.04).describe('weight of the k3 KL to the frozen reference (0: no reference forward)'),
    entropy_coef: z.number().min(0).default(0).describe('weight of the entropy bonus'),
    epochs: z.number().int().min(1).max(1000).default(2).describe('PPO epochs: passes over each batch'),
    minibatch_size: z.number().int().min(0).default(0).describe('sequences per optimizer step within an epoch (0: the whole batch)'),
    micro_batch_size: z.number().int().min(1).default(16).describe('sequences per forward/backward (gradient accumulation)'),
    max_grad_norm: z.number().min(0).default(1).describe('gradient clipping norm (0: no clipping; the norm is still reported)'),
    lr: z.number().gt(0).max(10).default(1e-4).describe('peak learning rate (AdamW)'),
    warmup_steps: z.number().int().min(0).default(0).describe('linear learning-rate warm-up, in steps'),
    total_steps: z.number().int().min(0).default(0).describe("steps of the cosine schedule (0: constant after the warm-up); set from the run's steps"),
    min_lr_ratio: z.number().min(0).max(1).default(0.1).describe('the cosine schedule ends at lr × min_lr_ratio'),
    weight_decay: z.number().min(0).default(0).describe('AdamW weight decay of the matrices (not of biases and norms)'),
    adam_eps: z.number().gt(0).max(1).default(1e-8).describe('AdamW epsilon'),
    adam_beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW beta1'),
    adam_beta2: z.number().min(0).lt(1).default(0.999).describe('AdamW beta2'),
    vector_lr_scale: z.number().gt(0).max(1000).default(1).describe('learning-rate multiplier of the 1-D parameters (norm gains, biases)'),
    ref_reset_every: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('reset the reference (and the optimizer) to the current policy every N steps (ProRL; 0: never)'),
    temperature: z.number().gt(0).default(1).describe('sampling temperature (the learner scores tokens under the same distribution)'),
    top_k: z.number().int().min(0).default(0).describe('top-k sampling (0: off)'),
    top_p: z.number().gt(0).max(1).default(1).describe('nucleus sampling (1: off)'),
    seed: z.number().int().default(0).describe('seed of the run (task sampling, rollouts, minibatch shuffling)'),
    dr_grpo_constant: z
      .number()
      .gt(0)
      .optional()
      .describe(
        "Dr. GRPO's constant normaliser C: a fixed budget of policy tokens per sequence (required for dr_grpo; the trainer sends the run's policy_token_budget)",
      ),
    logit_chunk: z.number().int().min(1).optional().describe('tokens per chunk of the LM head (default: about 2^25 logits per chunk)'),
    gae_gamma: z
      .number()
      .min(0)
      .max(1)
      .default(0.99)
      .describe('GAE (a batch with rewards): the discount γ per policy token (gae_level token) or per turn (turn)'),
    gae_lambda: z
      .number()
      .min(0)
      .max(1)
      .default(0.95)
      .describe('GAE: λ, the bias/variance trade-off of the advantage (1: Monte-Carlo return minus V, 0: one-step TD error)'),
    gae_level: z
      .enum(['token', 'turn'])
      .default('token')
      .describe(
        "GAE's time axis: token (every policy token has a value; prompt and tool-result tokens are skipped) or turn (one value per turn, at its first policy token; the turn's advantage goes to all its tokens)",
      ),
    value_coef: z.number().min(0).default(0.5).describe("GAE: weight of the value head's loss in the total loss"),
    value_clip: z
      .number()
      .min(0)
      .default(0.2)
      .describe("GAE: PPO2's value clipping c: the loss is 0.5·max((V − R)², (V_old + clip(V − V_old, −c, c) − R)²) (0: no clipping, 0.5·(V − R)²)"),
    whiten_advantages: z
      .boolean()
      .default(true)
      .describe('GAE: whiten the advantages (mean 0, std 1 over all scored tokens of the batch) before the policy loss'),
  })
  .strict();
export type LearnerConfig = z.output<typeof LearnerConfigSchema>;
export type LearnerConfigInput = z.input<typeof LearnerConfigSchema>;

// ---------------------------------------------------------------------------------------------
// TrainBatch (docs/architecture.md, "Contracts").

export const TrainBatchSchema = z
  .object({
    ids: shallow(z.array(z.array(z.number().int().min(0)))).describe('each sequence whole: prompt, environment and policy tokens, as generated'),
    mask: shallow(z.array(z.array(z.union([z.literal(0), z.literal(1)])))).describe('1 on policy tokens (scored), 0 elsewhere'),
    old_logprobs: shallow(z.array(z.array(z.number()))).describe("the sampler's logprob of each policy token (anything elsewhere)"),
    advantages: shallow(z.union([z.array(z.number()), z.array(z.array(z.number()))])).describe(
      'one per sequence, or one list per sequence aligned with ids (per-turn advantages)',
    ),
    group_ids: z.array(z.string().min(1)).describe('the group of each sequence'),
    rewards: shallow(z.array(z.array(z.number())))
      .optional()
      .describe(
        "PPO with GAE: one list per sequence aligned with ids, the rewards on policy tokens (each turn's step reward on its last policy token, the final reward minus the step rewards on the last policy token of the sequence; 0 elsewhere); the learner computes the advantages (send advantages 0)",
      ),
  })
  .strict();
export type TrainBatch = z.output<typeof TrainBatchSchema>;

// ---------------------------------------------------------------------------------------------
// Answers.

const num = z.number();
const nnum = z.number().nullable();

export const TrainMetricsSchema = z.looseObject({
  loss: num.describe('mean over the optimizer steps of the aggregated loss'),
  pg_loss: num.describe('the policy-gradient part of the loss'),
  kl: nnum.describe('k3 KL to the reference (null when beta is 0)'),
  entropy: num.describe('entropy of the sampling distribution, nats per token'),
  kl_old: num.describe(
    "k3 KL to the old policy of the ratio: the sampling policy, or the learner's at the start of the call with an is_correction (monitoring)",
  ),
  clip_fraction: num.describe('scored tokens whose clipped branch is active'),
  ratio_mean: nnum.describe('mean importance ratio over scored tokens and epochs'),
  ratio_min: nnum,
  ratio_max: nnum,
  dual_clip_fraction: nnum.optional().describe('scored tokens (all epochs) with A < 0 whose dual-clip bound is active (null when dual_clip is 0)'),
  sampler_log_ratio_mean: nnum
    .optional()
    .describe(
      "mean over scored tokens of the learner's old logprob minus the sampler's, each clamped to [-20, 20] (null when is_correction is none and the call has more than one optimizer step)",
    ),
  sampler_log_ratio_abs_max: nnum
    .optional()
    .describe('largest |learner old logprob − sampler logprob| over scored tokens (clamped to 20; null like sampler_log_ratio_mean)'),
  is_weight_mean: nnum.optional().describe('mean off-policy importance weight over scored tokens (null when is_correction is none)'),
  is_truncated_fraction: nnum
    .optional()
    .describe('scored tokens whose importance weight truncation changed (0 for the mask modes; null when is_correction is none)'),
  is_masked_fraction: nnum
    .optional()
    .describe('scored tokens whose importance weight masking set to 0 (0 for the truncate modes; null when is_correction is none)'),
  value_loss: nnum.optional().describe('GAE: mean over the optimizer steps of the value loss (before value_coef; null without rewards)'),
  value_mean: nnum.optional().describe('GAE: mean of V_old (the value head at the start of the call) over the valued tokens'),
  explained_variance: nnum.optional().describe('GAE: 1 − Var(R − V_old) / Var(R) over the valued tokens (R the returns; null when Var(R) is 0)'),
  value_clip_fraction: nnum.optional().describe('GAE: valued tokens (all epochs) whose clipped value branch is the larger'),
  advantage_mean: nnum.optional().describe('GAE: mean of the advantages over the scored tokens, before whitening'),
  advantage_std: nnum.optional().describe('GAE: standard deviation of the advantages over the scored tokens, before whitening'),
  return_mean: nnum.optional().describe('GAE: mean of the returns R = A + V_old over the valued tokens'),
  value_head_fresh: z.boolean().optional().describe('GAE: this call created the value head (the first GAE call, or a checkpoint without one)'),
  grad_norm: num.describe('mean pre-clipping gradient norm over the optimizer steps'),
  grad_norm_max: num,
  lr: num.describe('the learning rate of this step'),
  tokens: num.describe('Σ len(ids)'),
  scored_tokens: num,
  sequences: num,
  groups: num.describe('distinct group ids in the batch'),
  optimizer_steps: num,
  idle_sequences: num
    .optional()
    .describe(
      'sequences left out of the forward and backward passes because every loss term of theirs is 0 (all advantages 0, no KL, entropy or value term, no off-policy statistics wanted); the gradients are unchanged, the monitoring figures (entropy, ratios, clip fraction) are over the other sequences',
    ),
  ref_reset: z.boolean(),
  world_size: num,
  seconds: num,
  forward_backward_seconds: num
    .optional()
    .describe("wall time of the optimizer steps' forward and backward passes (the pre-passes, e.g. the reference's logprobs, are the rest of `seconds`)"),
  optimizer_seconds: num.optional().describe('wall time of the gradient clipping and the optimizer steps'),
  cpu_seconds: num.optional().describe('CPU time of the learner process over the call, all its threads (seconds × cores busy)'),
  learner_tokens_per_s: nnum,
  weights_changed: z
    .boolean()
    .optional()
    .describe(
      "the call changed at least one bit of the trainable weights (an exact fingerprint before and after); false: its updates were 0 or below the weights' precision",
    ),
});
export type TrainMetrics = z.output<typeof TrainMetricsSchema>;

const Architecture = z
  .object({
    type: z.literal('gpt').optional(),
    vocab_size: z.number().int().min(1).optional(),
    d_model: z.number().int().min(1).optional(),
    n_layers: z.number().int().min(1).optional(),
    n_heads: z.number().int().min(1).optional(),
    d_ff: z.number().int().min(1).optional(),
    max_seq_len: z.number().int().min(1).optional(),
    tie_embeddings: z.literal(true).optional(),
    seed: z.number().int().optional(),
  })
  .strict();

const ExportResult = z.looseObject({
  seconds: num,
  full: z.boolean(),
  onnx: z.boolean(),
  version: z.number().int(),
  model_dir: z.string(),
  files: z.record(z.string(), z.string()).optional().describe('with inline: {name: base64} of the written files'),
});

const Dir = z.string().min(1);

/** Every command: its arguments (`request`) and its answer (`result`). */
export const LEARNER_COMMANDS = {
  create: {
    summary: 'write config.json and weights.pt with fresh weights (no ONNX yet); does not load',
    request: z
      .object({
        model_dir: Dir.describe('the directory to write'),
        architecture: Architecture.optional().describe('partial architecture; defaults in PROTOCOL.md'),
        seed: z.number().int().optional().describe('sets architecture.seed (default 0)'),
        name: z.string().min(1).optional().describe("default: the directory's name"),
        tokenizer: z.record(z.string(), z.unknown()).optional(),
        chat_template: z.record(z.string(), z.unknown()).optional(),
        overwrite: z.boolean().optional().describe('replace a model already there (default false)'),
      })
      .strict(),
    result: z.looseObject({ model_dir: z.string(), version: z.number().int(), params: num, architecture: z.record(z.string(), z.unknown()) }),
  },
  load: {
    summary: 'load a model directory; resets RL training (step 0, no optimizer state, the reference is these weights)',
    request: z
      .object({
        model_dir: Dir,
        threads: z.number().int().min(1).max(1024).optional().describe('CPU threads (default: the cores the process may use)'),
        device: z.enum(['cpu', 'cuda']).optional().describe('default: cuda when available'),
        hf: z.boolean().optional().describe('a Hugging Face model (default: detected from config.json)'),
        dtype: z.enum(['auto', 'float32', 'bfloat16']).optional().describe('Hugging Face models only'),
        gradient_checkpointing: z.boolean().optional().describe('Hugging Face models only'),
        compute_dtype: z
          .enum(['bfloat16'])
          .optional()
          .describe('Hugging Face models, full fine-tuning in one process: train and sft compute on a bf16 copy of the float32 weights'),
        lora: z
          .object({
            r: z.number().int().min(1).optional(),
            alpha: z.number().optional(),
            dropout: z.number().min(0).max(1).optional(),
            target_modules: z.union([z.string(), z.array(z.string())]).optional(),
          })
          .strict()
          .optional()
          .describe('Hugging Face models only: LoRA through peft'),
        reference: z.enum(['copy', 'swap']).optional().describe('how the frozen reference is kept (default copy; swap for LoRA)'),
      })
      .strict(),
    result: z.looseObject({ version: z.number().int(), params: num, device: z.string(), threads: num, world_size: num }),
  },
  sft: {
    summary: 'supervised training of the loaded model (embedded GPT or Hugging Face, full or LoRA) on a JSONL file of {ids, mask}',
    request: z
      .object({
        data: Dir.describe('path of a JSONL file: one {"ids": [...], "mask": [...]} per line'),
        epochs: z.number().int().min(1).optional().describe('default 1'),
        steps: z.number().int().min(1).optional().describe('overrides epochs'),
        batch_size: z.number().int().min(1).optional().describe('default 32'),
        lr: z.number().gt(0).optional().describe('default 3e-3 (embedded GPT), 1e-5 (Hugging Face, full), 1e-4 (Hugging Face, LoRA)'),
        warmup: z.number().min(0).optional().describe('steps if >= 1, a fraction of the steps if < 1 (default 0.05)'),
        seed: z.number().int().optional(),
        weight_decay: z.number().min(0).optional().describe('default 0.01'),
        grad_clip: z.number().min(0).optional().describe('default 1'),
        min_lr_ratio: z.number().min(0).max(1).optional().describe('default 0.1; 1: no decay after the warm-up'),
        betas: z
          .tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)])
          .optional()
          .describe('default [0.9, 0.95]'),
        save_epochs: Dir.optional().describe(
          "Hugging Face only: write the weights after each pass over the data but the last as checkpoints <save_epochs>/epoch-<e> (with min_lr_ratio 1 and warm-up in steps, those of a run of e passes); their paths in the result's epoch_dirs",
        ),
        prompt_grad: z
          .boolean()
          .optional()
          .describe(
            "Hugging Face only: default true; false: each example's tokens before its first scored token run once without the gradient (their keys and values kept), so the gradient leaves out what flows through the prompt's keys and values; the same loss, about three times cheaper on long prompts with short answers",
          ),
        train_layers: z
          .number()
          .int()
          .min(1)
          .optional()
          .describe(
            "Hugging Face, full fine-tuning only: train the top N decoder layers and the final norm, the embeddings, the LM head and the layers below frozen for this request; their gradient is the full model's, and the backward pass stops at layer L - N (default: every weight)",
          ),
      })
      .strict(),
    result: z.looseObject({ steps: num, loss_first: num, loss_last: num, tokens: num, tokens_per_s: num, seconds: num, examples: num }),
  },
  train: {
    summary: 'one RL step on a TrainBatch',
    request: z.object({ batch: TrainBatchSchema, config: LearnerConfigSchema.optional() }).strict(),
    result: z.looseObject({ step: z.number().int(), metrics: TrainMetricsSchema }),
  },
  checkpoint_save: {
    summary: 'model, optimizer, schedule, step, reference and RNG states into a directory (temp dir + rename)',
    request: z.object({ dir: Dir }).strict(),
    result: z.looseObject({ format: z.string(), step: z.number().int(), dir: z.string() }),
  },
  checkpoint_load: {
    summary: 'restore a checkpoint of the same model (after load): training continues as if never stopped',
    request: z.object({ dir: Dir }).strict(),
    result: z.looseObject({ step: z.number().int(), dir: z.string() }),
  },
  logprobs: {
    summary: 'the logprob of each token given those before it, from `starts` on',
    request: z
      .object({
        sequences: shallow(z.array(z.array(z.number().int().min(0)))).describe('[[token ids]]'),
        starts: z.array(z.number().int().min(1)).describe('index of the first scored token of each sequence, in [1, length]'),
        temperature: z.number().gt(0).optional(),
        top_k: z.number().int().min(0).optional(),
        top_p: z.number().gt(0).max(1).optional(),
      })
      .strict(),
    result: z.looseObject({ logprobs: z.array(z.array(z.number().nullable())) }),
  },
  export: {
    summary: 'write weights.pt and model.onnx.data (full: the graph too); bumps version',
    request: z
      .object({
        model_dir: Dir.optional().describe('default: the loaded one'),
        full: z.boolean().optional().describe('re-export the graph'),
        inline: z.boolean().optional().describe('also answer the written files (base64), for a caller on another file system'),
      })
      .strict(),
    result: ExportResult,
  },
  save: {
    summary: 'as export, but never writes a graph',
    request: z.object({ model_dir: Dir.optional() }).strict(),
    result: ExportResult,
  },
  put_files: {
    summary: 'write files sent inline under <working dir>/mcp-gym-files/<dir> and answer that path',
    request: z
      .object({ dir: Dir.describe('a relative path of plain names'), files: z.record(z.string(), z.string()).describe('{file name: base64 data}') })
      .strict(),
    result: z.looseObject({ dir: z.string(), files: z.array(z.string()), bytes: num }),
  },
  state: {
    summary: 'what the learner holds (loaded model, device, threads, steps)',
    request: z.object({}).strict(),
    result: z.looseObject({ protocol: num, pid: num, loaded: z.boolean(), rl_steps: num }),
  },
  shutdown: {
    summary: 'answer, then exit with status 0 (the process also exits on end of input)',
    request: z.object({}).strict(),
    result: z.looseObject({ dirty: z.boolean() }),
  },
} as const;

export type LearnerCommand = keyof typeof LEARNER_COMMANDS;
export type LearnerArgs<C extends LearnerCommand> = z.input<(typeof LEARNER_COMMANDS)[C]['request']>;
export type LearnerResult<C extends LearnerCommand> = z.output<(typeof LEARNER_COMMANDS)[C]['result']>;

export const PROTOCOL_VERSION = 2;

/** The JSON Schema document the Python learner validates requests (and the tests answers) against. */
export function protocolJsonSchema(): Record<string, unknown> {
  const emit = (s: z.ZodType, io: 'input' | 'output') =>
    z.toJSONSchema(s, {
      io,
      unrepresentable: 'any',
      override: (ctx) => {
        const js = ctx.jsonSchema as Record<string, unknown>;
        if (js['x-shallow']) {
          delete js['x-shallow'];
          const strip = (x: Record<string, unknown>) => {
            const items = x.items as Record<string, unknown> | undefined;
            if (items && typeof items === 'object') delete items.items;
          };
          strip(js);
          for (const alt of (js.anyOf as Record<string, unknown>[] | undefined) ?? []) strip(alt);
        }
      },
    });
  const commands: Record<string, unknown> = {};
  for (const [name, c] of Object.entries(LEARNER_COMMANDS)) {
    commands[name] = { summary: c.summary, request: emit(c.request, 'input'), result: emit(c.result, 'output') };
  }
  return {
    $comment: 'Generated from src/trainers/protocol.ts by scripts/gen-protocol.ts: do not edit (a test checks that it is current).',
    protocol: PROTOCOL_VERSION,
    commands,
  };
}

/** A JSON text of the schema document, as committed. */
export function protocolJsonText(): string {
  return JSON.stringify(protocolJsonSchema(), null, 1) + '\n';
}
