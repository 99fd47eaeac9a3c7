/**
 * The presets: configurations of the one loop (docs/training.md, "Presets"): reward, advantage
 * estimator, loss, sampling, schedule. A preset fills the fields a config file and flags do not give.
 */
import type { TrainConfig, TrainConfigInput } from './config.ts';

export const PRESETS: Record<TrainConfig['preset'], Partial<TrainConfigInput>> = {
  grpo: { reward: 'verifier', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
  dapo: {
    reward: 'verifier',
    advantage: 'grpo',
    loss: 'dapo',
    clip_low: 0.2,
    clip_high: 0.28,
    beta: 0,
    dynamic_sampling: true,
    overlong_max: 160,
    overlong_cache: 48,
    entropy_coef: 0,
  },
  dr_grpo: { reward: 'verifier', advantage: 'dr_grpo', loss: 'dr_grpo', clip_low: 0.2, clip_high: 0.2, beta: 0 },
  gspo: { reward: 'verifier', advantage: 'grpo', loss: 'gspo', clip_low: 0.0003, clip_high: 0.0004, beta: 0 },
  rlvr: { reward: 'rlvr', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
  art: { reward: 'art', advantage: 'grpo', loss: 'grpo', clip_low: 0.2, clip_high: 0.2, beta: 0.04 },
  // GRPO on RULER's listwise score combined half and half with the verifier's (needs a judge).
  ruler: {
    reward: 'verifier',
    advantage: 'grpo',
    loss: 'grpo',
    clip_low: 0.2,
    clip_high: 0.2,
    beta: 0.04,
    ruler: 'listwise',
    ruler_weight: 0.5,
    ruler_verifier_weight: 0.5,
  },
  // PPO with GAE (docs/algorithms.md, "PPO with GAE"): ART's reward (its step rewards give the value head
  // signal inside the episode), PPO's token-level loss and symmetric clip, 2 epochs of 2 minibatches, GAE
  // per turn (per token, γλ = 0.94 per token fades the credit within ~20 tokens: bench/RESULTS.md).
  ppo: {
    reward: 'art',
    advantage: 'gae',
    loss: 'dapo',
    clip_low: 0.2,
    clip_high: 0.2,
    beta: 0,
    epochs: 2,
    minibatch_size: 48,
    gae_gamma: 0.99,
    gae_lambda: 0.95,
    gae_level: 'turn',
    value_coef: 0.5,
    value_clip: 0.2,
    whiten_advantages: true,
  },
  // ProRL (docs/algorithms.md, "ProRL"): GRPO with the KL kept and the reference and AdamW reset
  // every 20 steps, DAPO's clip-higher (0.28: ProRL's 0.4 went with lr 2e-6 over thousands of steps,
  // against entropy collapse; on runs of ~100 steps at this repository's learning rates it mostly
  // widens the trust region) and dynamic sampling, warm-up then cosine, the adaptive curriculum,
  // a quarter of each batch replayed (by |advantage|), an evaluation every 10 steps.
  prorl: {
    reward: 'verifier',
    advantage: 'grpo',
    loss: 'grpo',
    clip_low: 0.2,
    clip_high: 0.28,
    beta: 0.01,
    ref_reset_every: 20,
    dynamic_sampling: true,
    warmup_steps: 5,
    min_lr_ratio: 0.1,
    curriculum: 'adaptive',
    replay_fraction: 0.25,
    replay_priority: 'advantage',
    replay_max_age: 4,
    eval_every: 10,
  },
};
