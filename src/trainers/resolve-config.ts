/**
 * A run's config, resolved: preset < config file < flags (flat or grouped), validated by the one
 * schema (config.ts), with the combinations that make no sense refused by name; and what the
 * learner (`learnerConfig`, `hfLoadOptions`) and the sampler (`samplerThreads`, `policyTokenBudget`)
 * get of it.
 */
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { isHfModelDir } from '../agents/index.ts';
import { CONFIG_GROUPS, flattenConfig, GROUP_OF, TrainConfigSchema, type ConfigInput, type TrainConfig, type TrainConfigInput } from './config.ts';
import { parseReportTo, parseSchedule } from './options.ts';
import { PRESETS } from './presets.ts';
import { LearnerConfigSchema, type LearnerConfigInput } from './protocol.ts';

/** preset < config file < explicit overrides; errors name the field. */
export function resolveConfig(overridesIn: ConfigInput, file?: string): TrainConfig {
  let fromFile: Record<string, unknown> = {};
  const grouped = new Set<string>(); // the fields given in their group: errors name them so (rollout.group)
  if (file) {
    try {
      fromFile = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`${file}: cannot read the config: ${(err as Error).message}`);
    }
    if (fromFile === null || typeof fromFile !== 'object' || Array.isArray(fromFile))
      throw new Error(`${file}: the config is a JSON object of fields (flat, or grouped: ${Object.keys(CONFIG_GROUPS).join(', ')})`);
    fromFile = flattenConfig(fromFile, file, grouped);
  }
  const overrides = flattenConfig(overridesIn as Record<string, unknown>, undefined, grouped) as Partial<TrainConfigInput>;
  const preset = (overrides.preset ?? fromFile.preset ?? 'art') as TrainConfig['preset'];
  if (!(preset in PRESETS)) throw new Error(`preset: unknown preset '${preset}'; presets: ${Object.keys(PRESETS).join(', ')}`);
  const merged = { ...PRESETS[preset], ...fromFile, ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)), preset };
  const r = TrainConfigSchema.safeParse(merged);
  if (!r.success) {
    const i = r.error.issues[0]!;
    const field = String(i.path[0] ?? '');
    const named = grouped.has(field) ? [`${GROUP_OF[field]}.${field}`, ...i.path.slice(1)].join('.') : i.path.join('.');
    throw new Error(`${file ? `${file}: ` : ''}${named || '(config)'}: ${i.message}`);
  }
  if (r.data.policy !== 'onnx' && !r.data.base_url) {
    throw new Error(
      `${file ? `${file}: ` : ''}policy: '${r.data.policy}' needs base_url (--base-url URL, repeated for several servers, or --base-urls-file FILE): training samples through a server that returns token ids and loads the new weights (mcp-gym serve-policy, vLLM)`,
    );
  }
  if (r.data.eval_temperature !== undefined && r.data.policy !== 'onnx') {
    throw new Error(
      `${file ? `${file}: ` : ''}eval_temperature: for the in-process onnx policy (a served policy's evaluations sample with temperature, as its rollouts): leave it out with policy '${r.data.policy}'`,
    );
  }
  const hfOnly = hfOnlyFields(r.data);
  if (hfOnly.length && existsSync(join(r.data.model, 'config.json')) && !isHfModelDir(r.data.model)) {
    throw new Error(
      `${file ? `${file}: ` : ''}${hfOnly[0]}: for Hugging Face models only; ${r.data.model} is an embedded GPT model (mcp-gym's format), trained in full: leave out ${hfOnly.join(', ')}`,
    );
  }
  if (r.data.learner_parallel === 'fsdp' && r.data.learner_procs < 2 && !r.data.learner) {
    throw new Error(
      `${file ? `${file}: ` : ''}learner_parallel: fsdp shards the model over the learner's processes: set learner_procs to 2 or more (one per GPU)`,
    );
  }
  if (r.data.learner && r.data.learner_procs > 1) {
    throw new Error(
      `${file ? `${file}: ` : ''}learner_procs: the processes of a remote learner (${r.data.learner}) are the ones its torchrun started there: leave out learner_procs`,
    );
  }
  if (r.data.learner_shared_fs && !r.data.learner) {
    throw new Error(`${file ? `${file}: ` : ''}learner_shared_fs: for a remote learner (learner: its URL); a local learner shares this file system anyway`);
  }
  if (r.data.learner && isHfModelDir(r.data.model) && !r.data.learner_shared_fs) {
    throw new Error(
      `${file ? `${file}: ` : ''}learner: a remote learner (${r.data.learner}) trains the embedded model only; ${r.data.model} is a Hugging Face checkpoint, whose learner writes the whole weights after every step into the directory the sampler reloads (540 MB for a 135M model in float32; docs/models.md, "Not here"): run this command where the checkpoint and a GPU are (the learner then starts locally with the venv), or sample with vLLM (--policy openai:..., LoRA adapters pushed to it), or leave out learner; a learner that mounts this run's directory at the same path (a cluster's shared file system): learner_shared_fs (--learner-shared-fs)`,
    );
  }
  try {
    parseReportTo(r.data.report_to);
  } catch (err) {
    throw new Error(`${file ? `${file}: ` : ''}${(err as Error).message}`);
  }
  if (r.data.drop_zero_variance && (r.data.beta > 0 || r.data.entropy_coef > 0 || r.data.advantage === 'gae')) {
    const why =
      r.data.beta > 0
        ? `beta ${r.data.beta} (the KL term trains on every sequence)`
        : r.data.entropy_coef > 0
          ? `entropy_coef ${r.data.entropy_coef}`
          : "advantage 'gae' (the value head trains on every sequence)";
    throw new Error(
      `${file ? `${file}: ` : ''}drop_zero_variance: groups without signal add no gradient only with beta 0, entropy_coef 0 and a group advantage; this run has ${why}`,
    );
  }
  if (r.data.curriculum_low > r.data.curriculum_high) {
    throw new Error(
      `${file ? `${file}: ` : ''}curriculum_low: ${r.data.curriculum_low} is above curriculum_high ${r.data.curriculum_high} (the band that keeps the level)`,
    );
  }
  if (r.data.curriculum === 'schedule') {
    try {
      parseSchedule(r.data.curriculum_schedule);
    } catch (err) {
      throw new Error(`${file ? `${file}: ` : ''}${(err as Error).message}`);
    }
  }
  gaeRefusals(r.data, file);
  if (r.data.ruler !== 'off' && !r.data.judge) {
    throw new Error(
      `${file ? `${file}: ` : ''}ruler: '${r.data.ruler}'${preset === 'ruler' ? ' (the ruler preset)' : ''} needs a judge: set judge (--judge openai:<model> or anthropic:<model>), or ruler: 'off'`,
    );
  }
  return r.data;
}

/** PPO with GAE: the combinations that make no sense are refused, naming the field. */
function gaeRefusals(c: TrainConfig, file?: string): void {
  const at = file ? `${file}: ` : '';
  if (c.advantage !== 'gae') {
    const gaeOnly = (['gae_gamma', 'gae_lambda', 'gae_level', 'value_coef', 'value_clip', 'whiten_advantages'] as const).filter(
      (k) => c[k] !== LearnerConfigSchema.shape[k].parse(undefined),
    );
    if (gaeOnly.length) throw new Error(`${at}${gaeOnly[0]}: only with advantage 'gae' (PPO with GAE); advantage is '${c.advantage}'`);
    return;
  }
  if (c.per_turn) throw new Error(`${at}per_turn: not with advantage 'gae': GAE credits the turns itself (gae_level turn or token)`);
  if (c.loss === 'gspo')
    throw new Error(
      `${at}loss: gspo takes one sequence-level ratio for all of a sequence's tokens, which does not fit GAE's per-token advantages: use dapo (token-level, as PPO), grpo, dr_grpo or cispo`,
    );
}

/** The Hugging Face-only fields the config sets to other than their defaults. */
function hfOnlyFields(c: TrainConfig): string[] {
  const out: string[] = [];
  if (c.lora_rank > 0) out.push('lora_rank');
  if (c.lora_alpha !== undefined) out.push('lora_alpha');
  if (c.lora_dropout !== 0) out.push('lora_dropout');
  if (c.lora_targets !== 'all-linear') out.push('lora_targets');
  if (c.dtype !== 'auto') out.push('dtype');
  if (c.gradient_checkpointing) out.push('gradient_checkpointing');
  if (c.compute_dtype !== 'float32') out.push('compute_dtype');
  if (c.learner_parallel === 'fsdp') out.push('learner_parallel');
  return out;
}

/** What the learner's `load` gets for a Hugging Face model: dtype, gradient checkpointing, the compute copy's dtype and LoRA (with lora_rank > 0). */
export function hfLoadOptions(c: TrainConfig): HfLoadOptions {
  const targets =
    c.lora_targets.trim() === 'all-linear'
      ? 'all-linear'
      : c.lora_targets
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean);
  return {
    dtype: c.dtype,
    gradient_checkpointing: c.gradient_checkpointing,
    ...(c.compute_dtype === 'bfloat16' ? { compute_dtype: 'bfloat16' as const } : {}),
    ...(c.lora_rank > 0 ? { lora: { r: c.lora_rank, alpha: c.lora_alpha ?? 2 * c.lora_rank, dropout: c.lora_dropout, target_modules: targets } } : {}),
  };
}

export interface HfLoadOptions {
  dtype: TrainConfig['dtype'];
  gradient_checkpointing: boolean;
  compute_dtype?: 'bfloat16';
  lora?: { r: number; alpha: number; dropout: number; target_modules: string | string[] };
}

/**
 * What the learner gets of the config for each `train` call: the contract's fields, by the same
 * names, plus the two the run sets: the schedule's length and Dr. GRPO's constant (a fixed
 * budget of policy tokens, the same every step: docs/algorithms.md, "Dr. GRPO").
 */
export function learnerConfig(c: TrainConfig, o: { totalSteps: number; policyTokenBudget: number }): LearnerConfigInput {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(LearnerConfigSchema.shape)) {
    const v = (c as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = v;
  }
  // Replayed groups were sampled by older weights: correct them as stale ones.
  out.is_correction = c.is_correction === 'auto' ? (c.max_staleness > 0 || c.replay_fraction > 0 ? 'token_truncate' : 'none') : c.is_correction;
  out.total_steps = Math.max(1, o.totalSteps);
  if (c.loss === 'dr_grpo') out.dr_grpo_constant = o.policyTokenBudget;
  return LearnerConfigSchema.parse(out);
}

/** Dr. GRPO's budget of policy tokens per episode: the config's, or max_new_tokens × the largest max_turns, at most the context. */
export function policyTokenBudget(c: TrainConfig, maxTurns: number, contextLength: number): number {
  if (c.policy_token_budget > 0) return c.policy_token_budget;
  return Math.max(1, Math.min(contextLength, c.max_new_tokens * Math.max(1, maxTurns)));
}

/** The embedded policy's onnxruntime threads (config `sampler_threads`, else its default). */
export function samplerThreads(c: Pick<TrainConfig, 'sampler_threads' | 'max_staleness'>): number {
  return c.sampler_threads ?? (c.max_staleness === 0 && availableParallelism() >= 2 ? 2 : 1);
}
