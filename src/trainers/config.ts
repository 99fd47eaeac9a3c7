/**
 * The training configuration: one zod schema, filled from a preset, a config file and flags (in
 * that order). Its learner half is the contract's LearnerConfigSchema (src/trainers/protocol.ts):
 * one schema gives the types, the validation, the command-line flags of `mcp-gym train` (each
 * field's `.describe()` is its help) and the learner's JSON Schema; the fields by group
 * (CONFIG_GROUPS). The presets are in presets.ts, the resolution (preset < file < flags, the
 * refusals) and what the learner and the sampler get of it in resolve-config.ts.
 */
import { z } from 'zod';
import { httpUrlProblem } from '../../lib/index.ts';
import { BUNDLED_MODEL_DIR } from '../paths.ts';
import { LearnerConfigSchema } from './protocol.ts';
import { composerWeightsSchema, FaultSpecError, parseFaults, parseToolMode } from '../env/index.ts';
import { CURRICULUM_MODES, REPLAY_PRIORITIES } from './options.ts';

/** The learner's off-policy corrections (its is_correction field). */
const IS_CORRECTIONS = LearnerConfigSchema.shape.is_correction.unwrap().options;

/** The learner's fields that the run sets itself (not configurable on their own). */
const { total_steps: _total, dr_grpo_constant: _constant, ...learnerFields } = LearnerConfigSchema.shape;

export const PRESET_NAMES = ['grpo', 'dapo', 'dr_grpo', 'gspo', 'rlvr', 'art', 'ruler', 'prorl', 'ppo'] as const;

export const TrainConfigSchema = z
  .object({
    preset: z
      .enum(PRESET_NAMES)
      .default('art')
      .describe(
        'the recipe whose settings fill the fields not given: grpo, dapo, dr_grpo, gspo, rlvr, art, ruler (needs --judge), prorl, ppo (PPO with GAE: a value head)',
      ),
    suite: z.string().default('calculator').describe('the bundled task suite to train and evaluate on (when no task file is given)'),
    tasks: z
      .string()
      .min(1)
      .optional()
      .describe(
        'a task file (.json or .jsonl) to train on instead of a suite: its train split (and, without eval_tasks, its eval split as the held-out tasks)',
      ),
    eval_tasks: z
      .string()
      .min(1)
      .optional()
      .describe('a task file of held-out tasks (all of it; default: the eval split of the tasks, or of the suite, which is the same whatever the seed)'),
    max_difficulty: z.number().int().min(1).max(5).default(5).describe('only tasks up to this difficulty, for training and evaluation'),
    min_difficulty: z.number().int().min(1).max(5).default(1).describe('only tasks of this difficulty or above, for training and evaluation'),
    model: z.string().default(BUNDLED_MODEL_DIR).describe('the cold-start model directory (copied into the run; the copy is trained)'),
    steps: z.number().int().min(0).default(30).describe('training steps (the command line takes 1 or more; 0, in code, evaluates the model only)'),
    tasks_per_step: z.number().int().min(1).default(12).describe('groups (tasks) per step'),
    group: z.number().int().min(2).default(8).describe('rollouts per task (G)'),
    concurrency: z.number().int().min(1).default(64).describe('episodes at once'),
    reward: z.string().min(1).default('art').describe('the reward, by registered name: art, rlvr, composer, verifier, or one registered with registerReward'),
    composer_weights: composerWeightsSchema().describe(
      "the reward composer's weights by part name (correctness, think_format, reasoning, safety, or a part registered with registerRewardPart); on the command line name=w,name=w; parts not named weigh 0, except correctness (1)",
    ),
    advantage: z
      .enum(['grpo', 'dr_grpo', 'gae'])
      .default('grpo')
      .describe(
        "advantage estimator: grpo ((r − mean) / sample std), dr_grpo (r − mean) or gae (PPO with GAE: the learner's value head, gae_* fields; the batch carries the turns' rewards)",
      ),
    per_turn: z
      .boolean()
      .default(false)
      .describe("per-turn advantages: each turn gets the group-normalised return from that turn on (the reward's step rewards)"),
    dynamic_sampling: z.boolean().default(false).describe('DAPO dynamic sampling: drop groups without signal and sample more tasks until the batch is full'),
    drop_zero_variance: z
      .boolean()
      .default(false)
      .describe(
        "leave groups whose rewards are all equal out of the learner's batch (their advantages are 0: with beta 0 and no entropy bonus they add no gradient, only cost); the loss is then normalised over the groups with signal. Needs beta 0, entropy_coef 0 and a group advantage (not gae)",
      ),
    dynamic_sampling_on: z
      .enum(['outcome', 'reward'])
      .default('outcome')
      .describe('what "without signal" means: every episode solved or every one failed (outcome, as in DAPO), or all shaped rewards equal (reward)'),
    max_resample_rounds: z.number().int().min(0).default(4).describe('with dynamic sampling, at most this many extra sampling rounds per step (the cap)'),
    curriculum: z
      .enum(CURRICULUM_MODES)
      .default('off')
      .describe(
        'task difficulty over the run: off (uniform draws), adaptive (a level per suite moved by the recent success at it), schedule (curriculum_schedule); each draw is at the level with probability curriculum_share, else below it',
      ),
    curriculum_share: z
      .number()
      .min(0)
      .max(1)
      .default(0.5)
      .describe("curriculum: the share of draws at the current level (the rest uniformly at the suite's difficulties below it)"),
    curriculum_low: z.number().min(0).max(1).default(0.3).describe('curriculum adaptive: a success rate at the level below this moves the level down'),
    curriculum_high: z.number().min(0).max(1).default(0.7).describe('curriculum adaptive: a success rate at the level above this moves the level up'),
    curriculum_window: z
      .number()
      .int()
      .min(1)
      .default(3)
      .describe('curriculum adaptive: the steps at a level whose episodes decide a move (the window must be full)'),
    curriculum_start: z.number().int().min(1).max(5).default(1).describe('curriculum adaptive: the first level of every suite (clamped to its difficulties)'),
    curriculum_schedule: z
      .string()
      .regex(/^\s*\d+:\d+\s*(,\s*\d+:\d+\s*)*$/, 'difficulty:from_step entries separated by commas (e.g. "1:0,2:10,3:25")')
      .default('1:0')
      .describe(
        'curriculum schedule: difficulty:from_step entries, e.g. "1:0,2:10,3:25" (step k trains at the difficulty of the last entry with from_step <= k)',
      ),
    replay_fraction: z
      .number()
      .min(0)
      .lt(1)
      .default(0)
      .describe(
        "replay: the share of each step's groups drawn from a buffer of past groups with signal, round(replay_fraction × tasks_per_step) (fewer fresh tasks are collected; 0: off)",
      ),
    replay_capacity: z.number().int().min(1).default(64).describe('replay: groups the buffer holds (the oldest go first)'),
    replay_max_age: z.number().int().min(1).default(4).describe('replay: steps after the one it was collected for that a group may be replayed'),
    replay_priority: z
      .enum(REPLAY_PRIORITIES)
      .default('uniform')
      .describe("replay: how groups are drawn from the buffer: uniform, or advantage (in proportion to the group's mean |advantage|)"),
    report_to: z
      .string()
      .default('')
      .describe(
        "experiment trackers to log the run to, comma-separated: wandb (offline), tensorboard, mlflow (file store); each writes under the run directory (their packages are installed into the learner's venv on first use)",
      ),
    no_signal_patience: z
      .number()
      .int()
      .min(0)
      .default(5)
      .describe(
        "stop the run (exit 5) after this many steps in a row without a learning signal: every group's rewards equal (all failed or all solved), or a learner step that left the weights bit-identical; 0: never stop for it (each such step is still logged)",
      ),
    time_budget_minutes: z
      .number()
      .min(0)
      .default(0)
      .describe('stop training once the run has trained this many minutes (wall clock, evaluations included), then evaluate as at the end (0: no budget)'),
    overlong_max: z.number().int().min(0).default(0).describe('DAPO overlong shaping: the policy-token limit of an episode (0: off)'),
    overlong_cache: z.number().int().min(1).default(64).describe('DAPO overlong shaping: the soft-penalty window before overlong_max'),
    policy_token_budget: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe(
        "Dr. GRPO's constant normaliser: a fixed budget of policy tokens per episode (0: max_new_tokens × the tasks' largest max_turns, at most the model's context)",
      ),
    max_new_tokens: z.number().int().min(8).default(96).describe('tokens an assistant turn may have'),
    eval_every: z.number().int().min(0).default(10).describe('evaluate on held-out tasks every K steps (0: only before and after)'),
    eval_limit: z.number().int().min(0).default(0).describe('held-out tasks evaluated: the first N (0: all of them)'),
    eval_samples: z.number().int().min(1).default(2).describe('rollouts of each held-out task'),
    eval_temperature: z
      .number()
      .min(0)
      .optional()
      .describe("the held-out evaluations' sampling temperature (0: greedy, as BFCL generates; default: temperature); the in-process onnx policy"),
    max_staleness: z
      .number()
      .int()
      .min(0)
      .max(8)
      .default(1)
      .describe(
        'asynchronous training: the rollouts of the next steps are collected while the learner trains, sampled by weights at most this many steps older than those trained from (groups staler than that are dropped); 0: the synchronous loop',
      ),
    checkpoint_every: z
      .number()
      .int()
      .min(1)
      .default(1)
      .describe('a learner checkpoint (and state.json) every N steps; a learner that dies costs the steps since'),
    bundled_servers: z
      .enum(['inprocess', 'stdio'])
      .default('inprocess')
      .describe('how the bundled tool servers run: in this process (fastest) or as stdio child processes'),
    faults: z
      .string()
      .superRefine((v, ctx) => {
        if (v.trim() === '') return;
        try {
          parseFaults(v);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: err instanceof FaultSpecError ? err.detail : (err as Error).message });
        }
      })
      .default('')
      .describe(
        "robustness training: faults injected into the agent's tool calls of the training rollouts (not the held-out evaluations), drawn from the seed: timeout=p,error=p,malformed=p,slow=<ms>ms@p,distractors=N (empty: none)",
      ),
    tools: z
      .string()
      .superRefine((v, ctx) => {
        try {
          parseToolMode(v, 'tools');
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: (err as Error).message });
        }
      })
      .default('all')
      .describe(
        'how the agent sees its tools, in the training rollouts and the held-out evaluations: all, toolbelt (meta-tools to list, inspect, add and remove tools), search (search_tools; search:K for K results) (docs/tasks.md)',
      ),
    policy: z
      .string()
      .regex(/^(onnx|openai:.+)$/, 'onnx, or openai:<model> (a server: --base-url)')
      .default('onnx')
      .describe(
        'what samples the rollouts: onnx (the model in-process) or openai:<model> (an OpenAI-compatible server that returns token ids and loads new weights, e.g. mcp-gym serve-policy; needs base_url)',
      ),
    base_url: z
      .union([z.string(), z.array(z.string()).min(1, 'give at least one URL')])
      .superRefine((v, ctx) => {
        const urls = Array.isArray(v) ? v : [v];
        urls.forEach((u, i) => {
          const why = httpUrlProblem(u);
          if (why) ctx.addIssue({ code: 'custom', message: why, path: Array.isArray(v) ? [i] : [] });
          else if (urls.indexOf(u) !== i) ctx.addIssue({ code: 'custom', message: `${u} is given twice: each server once`, path: [i] });
        });
      })
      .optional()
      .describe(
        'the policy server\'s base URL (up to and with /v1), with policy openai:<model>; several servers of the same model: repeat --base-url (or --base-urls-file FILE, or a list in a config file): each turn goes to the least-loaded healthy one, a failing one is taken out and its turns go elsewhere (docs/training.md, "Many inference servers")',
      ),
    request_timeout_ms: z
      .number()
      .int()
      .min(1)
      .default(120_000)
      .describe(
        'policy openai:<model>: the limit of one request to a policy server, in ms (a server that does not answer in time is taken out, and the turn goes to another); also how long a turn waits for a healthy server when none is',
      ),
    api_key_env: z.string().min(1).optional().describe("the environment variable holding the policy server's key (default OPENAI_API_KEY)"),
    learner: z.string().optional().describe('URL of a learner already running (e.g. on a GPU machine); default: spawn one here'),
    learner_token: z.string().optional().describe('bearer token of that learner'),
    learner_shared_fs: z
      .boolean()
      .default(false)
      .describe(
        "with learner (a URL): the learner reads and writes this run's directory at the same path (a file system both machines mount, as on a cluster): nothing is shipped, exports and checkpoints are written in place; needed for a Hugging Face model's remote learner (e.g. FSDP2 on several nodes: docs/distributed.md)",
      ),
    device: z.enum(['auto', 'cpu', 'cuda']).default('auto').describe("the learner's device"),
    threads: z.number().int().min(1).optional().describe("the learner's CPU threads (default: all cores)"),
    learner_procs: z
      .number()
      .int()
      .min(1)
      .default(1)
      .describe(
        'learner processes under torchrun on this machine (one per GPU; on the CPU they share the cores); rank 0 speaks the protocol. A learner on several nodes: start it with torchrun there and give its URL (learner)',
      ),
    learner_parallel: z
      .enum(['ddp', 'fsdp'])
      .default('ddp')
      .describe(
        'with learner_procs > 1: ddp (every process holds the whole model) or fsdp (FSDP2: parameters, gradients and AdamW state sharded over the processes; Hugging Face models; docs/distributed.md)',
      ),
    sampler_threads: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe(
        "the embedded policy's onnxruntime threads for the rollouts and evaluations (the samples do not depend on it); default: 2 with max_staleness 0 on 2 or more cores (the learner is idle while the rollouts run), else 1",
      ),
    sampler_keep_rows: z
      .boolean()
      .default(false)
      .describe(
        'the embedded GPT\'s episodes keep their keys and values between turns, so that a turn prefills only what the environment added (about 1 MB per episode in flight); off by default: on the main job it cut the prefilled tokens by a third but cost more in copying than it saved (bench/RESULTS.md, "The main job\'s time")',
      ),
    lora_rank: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe(
        'Hugging Face models: the rank of a LoRA adapter to train (PEFT), pushed to the policy server after each step (vLLM /v1/load_lora_adapter); 0: full fine-tuning',
      ),
    lora_alpha: z.number().gt(0).optional().describe("Hugging Face models: LoRA's alpha (default 2 × lora_rank)"),
    lora_dropout: z.number().min(0).lt(1).default(0).describe("Hugging Face models: LoRA's dropout"),
    lora_targets: z
      .string()
      .min(1)
      .default('all-linear')
      .describe('Hugging Face models: the modules LoRA adapts: all-linear, or module names separated by commas (e.g. q_proj,v_proj)'),
    tool_format: z
      .enum(['auto', 'native', 'hermes'])
      .default('auto')
      .describe(
        'Hugging Face models: how the chat template renders tools: auto (its own when it has them, else the Hermes format), native, hermes (docs/models.md)',
      ),
    dtype: z
      .enum(['auto', 'float32', 'bfloat16'])
      .default('auto')
      .describe("Hugging Face models: the learner's parameter dtype (auto: float32, with bf16 autocast on a GPU that has it)"),
    gradient_checkpointing: z.boolean().default(false).describe('Hugging Face models: recompute activations in the backward pass (less memory, slower)'),
    compute_dtype: z
      .enum(['float32', 'bfloat16'])
      .default('float32')
      .describe(
        "Hugging Face models on the CPU, full fine-tuning: bfloat16 runs the learner's forwards and backwards on a bf16 copy of the float32 weights (AdamW stays float32; about 1.7x faster where the CPU has AVX512-BF16 or AMX)",
      ),
    judge: z.string().default('').describe("RULER's judge, a chat model: openai:<model> or anthropic:<model> (empty: no judge)"),
    judge_base_url: z.string().min(1).optional().describe("the judge's API base URL (OpenAI-compatible: up to and with /v1)"),
    judge_api_key_env: z
      .string()
      .min(1)
      .optional()
      .describe("the environment variable holding the judge's API key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)"),
    ruler: z
      .enum(['off', 'listwise', 'pairwise'])
      .default('off')
      .describe(
        'RULER: the judge scores each group, listwise (one request per group, scores in [0, 1]) or pairwise (A / B / TIE votes, standardised in the group); needs judge',
      ),
    ruler_votes: z.number().int().min(1).default(3).describe('RULER pairwise: judge requests per pair of trajectories'),
    ruler_weight: z.number().default(1).describe("RULER: the weight of the judge's score in the reward"),
    ruler_verifier_weight: z.number().default(0).describe("RULER: the weight of the reward before the judge (the config's reward) in the reward"),
    ruler_rubric: z
      .string()
      .min(1)
      .optional()
      .describe("RULER: the judge's grading standards (default: a goal reached beats one not reached; efficiency; tool errors count against)"),
    ...learnerFields,
    is_correction: z
      .enum(['auto', ...IS_CORRECTIONS])
      .default('auto')
      .describe(
        "off-policy correction of the sampler's lag (the learner's old logprobs against the sampler's): token_truncate, token_mask, sequence_truncate, sequence_mask (TRL's modes, bounds is_min..is_cap) or none; auto: token_truncate with max_staleness > 0 or replay_fraction > 0, else none",
      ),
  })
  .strict();

export type TrainConfig = z.output<typeof TrainConfigSchema>;
export type TrainConfigInput = z.input<typeof TrainConfigSchema>;

/**
 * The config's fields by group, the one place that says which field belongs where: `train --help`
 * lists the flags under these headings, and a JSON config (`--config FILE`, `resolveConfig`) may
 * give its fields flat or grouped (`{"rollout": {"group": 8}, "algorithm": {"lr": 5e-4}}`).
 * test/trainers/config.test.ts checks that every field is in exactly one group.
 */
export const CONFIG_GROUPS = {
  run: ['preset', 'suite', 'tasks', 'eval_tasks', 'min_difficulty', 'max_difficulty', 'model', 'seed'],
  rollout: [
    'tasks_per_step',
    'group',
    'concurrency',
    'max_new_tokens',
    'temperature',
    'top_k',
    'top_p',
    'policy',
    'base_url',
    'request_timeout_ms',
    'api_key_env',
    'sampler_threads',
    'sampler_keep_rows',
    'bundled_servers',
    'faults',
    'tools',
    'tool_format',
  ],
  algorithm: [
    'reward',
    'composer_weights',
    'advantage',
    'per_turn',
    'dynamic_sampling',
    'dynamic_sampling_on',
    'max_resample_rounds',
    'drop_zero_variance',
    'overlong_max',
    'overlong_cache',
    'policy_token_budget',
    'loss',
    'clip_low',
    'clip_high',
    'dual_clip',
    'is_correction',
    'is_cap',
    'is_min',
    'beta',
    'entropy_coef',
    'ref_reset_every',
    'gae_gamma',
    'gae_lambda',
    'gae_level',
    'value_coef',
    'value_clip',
    'whiten_advantages',
    'judge',
    'judge_base_url',
    'judge_api_key_env',
    'ruler',
    'ruler_votes',
    'ruler_weight',
    'ruler_verifier_weight',
    'ruler_rubric',
  ],
  learner: [
    'lr',
    'warmup_steps',
    'min_lr_ratio',
    'weight_decay',
    'adam_beta1',
    'adam_beta2',
    'adam_eps',
    'vector_lr_scale',
    'epochs',
    'minibatch_size',
    'micro_batch_size',
    'max_grad_norm',
    'logit_chunk',
    'learner',
    'learner_token',
    'learner_shared_fs',
    'device',
    'threads',
    'learner_procs',
    'learner_parallel',
    'lora_rank',
    'lora_alpha',
    'lora_dropout',
    'lora_targets',
    'dtype',
    'gradient_checkpointing',
    'compute_dtype',
  ],
  eval: ['eval_every', 'eval_limit', 'eval_samples', 'eval_temperature'],
  schedule: [
    'steps',
    'checkpoint_every',
    'time_budget_minutes',
    'no_signal_patience',
    'max_staleness',
    'report_to',
    'curriculum',
    'curriculum_share',
    'curriculum_low',
    'curriculum_high',
    'curriculum_window',
    'curriculum_start',
    'curriculum_schedule',
    'replay_fraction',
    'replay_capacity',
    'replay_max_age',
    'replay_priority',
  ],
} as const satisfies Record<string, readonly (keyof TrainConfig)[]>;

export type ConfigGroup = keyof typeof CONFIG_GROUPS;

/** The group of each field. */
export const GROUP_OF: Record<string, ConfigGroup> = Object.fromEntries(
  Object.entries(CONFIG_GROUPS).flatMap(([g, fields]) => fields.map((f) => [f, g as ConfigGroup])),
);

/**
 * A config given grouped (`{"rollout": {"group": 8}}`), flat, or both, as the flat fields; a
 * field in the wrong group, a group that is not an object, or a field given twice is refused,
 * naming it (`rollout.lr: lr belongs to the learner group`).
 */
export function flattenConfig(input: Record<string, unknown>, file?: string, grouped?: Set<string>): Record<string, unknown> {
  const at = file ? `${file}: ` : '';
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(input)) {
    // `learner` is a group (an object) and a field (the remote learner's URL, a string).
    if (!(k in CONFIG_GROUPS) || (k === 'learner' && typeof v === 'string')) {
      if (k in out) throw new Error(`${at}${k}: given twice (flat and in its group, ${GROUP_OF[k]})`);
      out[k] = v;
      continue;
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${at}${k}: a group of fields (an object), got ${JSON.stringify(v)}`);
    for (const [f, fv] of Object.entries(v as Record<string, unknown>)) {
      const g = GROUP_OF[f];
      if (g !== k)
        throw new Error(
          `${at}${k}.${f}: ${g ? `${f} belongs to the ${g} group` : `no such field in the ${k} group (its fields: ${CONFIG_GROUPS[k as ConfigGroup].join(', ')})`}`,
        );
      if (f in out) throw new Error(`${at}${k}.${f}: given twice (flat and in its group)`);
      out[f] = fv;
      grouped?.add(f);
    }
  }
  return out;
}

/** A grouped config's input: each group's fields, as a JSON config file may give them. */
export type GroupedConfigInput = { [G in ConfigGroup]?: Partial<Pick<TrainConfigInput, (typeof CONFIG_GROUPS)[G][number]>> };

/** A config as code gives it: fields flat, grouped, or both (`learner` is the URL's field when a string, the group when an object). */
export type ConfigInput = Omit<Partial<TrainConfigInput>, 'learner'> &
  Omit<GroupedConfigInput, 'learner'> & { learner?: string | GroupedConfigInput['learner'] };
