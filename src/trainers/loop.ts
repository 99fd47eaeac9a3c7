/**
 * The training loop, one for every preset (docs/architecture.md, "Training"): a short loop over
 * three pieces, each exported and usable on its own:
 *   collectGroups (collect.ts)    rollouts, reward shaping, dynamic sampling → the step's groups
 *   buildTrainBatch (batch.ts)    advantages and the TrainBatch, a pure function
 *   LearnerSession (session.ts)   the learner's step, the new weights, checkpoints, restarts
 * and the run directory (run-dir.ts). A learner that dies is restarted from the last checkpoint
 * and the run rolls back to it; a run stopped (Ctrl-C) or killed resumes from its last
 * checkpoint with `resume`.
 */
import { cpSync, existsSync, rmSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { OnnxPolicy, OpenAIPolicy } from '../agents/index.ts';
import { ServerEndpointError } from '../agents/openai.ts';
import { assertSomeEpisodeRan, Environment, failureCauses, loadTasks, rollout, type ChatModel, type EnvironmentOptions, type Policy, type RewardFn, type Task, type Trajectory } from '../env/index.ts';
import { generateSuite } from '../env/suites/index.ts';
import { NoLearningSignal, summarizeEpisodes } from '../../lib/index.ts';
import { isZeroVariance, mean, std } from './advantages.ts';
import { buildTrainBatch, type BuiltBatch } from './batch.ts';
import { collectGroups, rulerJudge, TaskSampler, type Collected } from './collect.ts';
import { hfLoadOptions, learnerConfig, policyTokenBudget, resolveConfig, samplerThreads, type TrainConfig, type TrainConfigInput } from './config.ts';
import { isHfModelDir, type LearnerConnection } from './learner-client.ts';
import { RunDir, type EvalResult } from './run-dir.ts';
import { LearnerSession } from './session.ts';
import { splitStale, StepPipeline, VersionSteps } from './pipeline.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { meanRewardParts } from '../env/rewards.ts';
import { Curriculum, difficultyMix, type CurriculumState, type LevelMove } from './curriculum.ts';
import { ReplayBuffer, type ReplayDraw, type ReplaySnapshot } from './replay.ts';
import { parseReportTo, trajectoryTable, Trackers } from './trackers.ts';

export type { EvalResult } from './run-dir.ts';

export interface TrainResult {
  runDir: string;
  before: EvalResult;
  /** The held-out evaluation after the last step; absent when the run was stopped before its end (Ctrl-C): no final evaluation ran. */
  after?: EvalResult;
  steps: number;
  train_seconds: number;
  report: string;
  stopped: boolean;
}

/** The final held-out evaluation of a run that ran to its end; throws, saying so, for a stopped one. */
export function finalEval(r: TrainResult): EvalResult {
  if (!r.after) throw new Error(`the run in ${r.runDir} stopped at step ${r.steps} before its end: no final evaluation ran (continue it with resume)`);
  return r.after;
}

export interface TrainOptions {
  /** The training config: a preset's settings, overridden by the fields given (TrainConfigSchema). */
  config: Partial<TrainConfigInput>;
  runDir: string;
  resume?: boolean;
  /** Stops the run after the step in flight (it is finished, checkpointed; no final evaluation runs: `after` is absent). */
  signal?: AbortSignal;
  /** Train tasks; default: the config's task file's train split, else the suite's. */
  trainTasks?: Task[];
  /** Held-out tasks; default: the config's eval_tasks file, else the eval split of the tasks or the suite. */
  evalTasks?: Task[];
  /** The reward: a function, or a registered name; default: the config's `reward`. */
  reward?: string | RewardFn;
  /** RULER's judge (with `ruler` on in the config); it wins over the config's `judge` spec, which it fills when empty. */
  judge?: ChatModel;
  onStep?: (m: Record<string, unknown>) => void;
  /** Hears each held-out evaluation's seconds and its result. */
  onEval?: (seconds: number, e: EvalResult) => void;
  onLog?: (line: string) => void;
  /** Warnings (a resumed run whose tools drifted from those it was trained with); default: onLog as `warning: ...`. */
  onWarning?: (message: string) => void;
  /** Options of the environment (e.g. a tool server's delay, the built-in rewards' weights); `bundled_servers` in the config wins. */
  environment?: EnvironmentOptions;
  /** For tests: called as a step's rollouts start (e.g. to kill a tool server mid-run). */
  beforeRollout?: (step: number) => void | Promise<void>;
  /** For tests: called as a step's learner request is sent (e.g. to kill the learner mid-step). */
  beforeLearnerStep?: (step: number, learner: LearnerConnection) => void | Promise<void>;
}

/**
 * A held-out evaluation's figures from its episodes, through the one evaluator
 * (lib/evaluator.ts): success over tasks with its cluster-robust interval, pass@k and pass^k.
 */
export function evalFigures(step: number, trajectories: Trajectory[], K: number): EvalResult {
  const s = summarizeEpisodes(trajectories, K);
  return { step, success: s.success, ci95: s.ci95, episodes: s.episodes, tasks: s.tasks, n_eff: s.n_eff, mean_reward: mean(trajectories.map((t) => t.reward)), pass_at_k: s.pass_at_k, pass_hat_k: s.pass_hat_k };
}

/**
 * Why a step gave the learner nothing to learn from, or undefined when it did: every kept group's
 * rewards equal (every episode failed, or every group all failed / all solved), or the learner's
 * step (`learner`, its metrics; undefined when no batch was sent) left the weights bit-identical.
 */
export function noSignalReason(groups: { trajectories: Trajectory[] }[], got: Collected, learner: Record<string, unknown> | undefined): string | undefined {
  if (learner && learner.weights_changed === false) return `the learner's step left the weights bit-identical (lr ${String(learner.lr)}; grad norm ${String(learner.grad_norm)}): its updates are 0 or below the weights' precision`;
  if (groups.some((g) => !isZeroVariance(g.trajectories.map((t) => t.reward)))) return undefined;
  const all = got.trajectories;
  if (all.length > 0 && all.every((t) => t.finish === 'error')) {
    const top = failureCauses(all)[0];
    return `every one of the ${all.length} episodes failed${top ? ` (${top.episodes} x ${top.cause})` : ''}`;
  }
  const solved = groups.filter((g) => g.trajectories.every((t) => t.success)).length;
  const failed = groups.filter((g) => g.trajectories.every((t) => !t.success)).length;
  const dropped = got.droppedNoSignal > 0 ? `; ${got.droppedNoSignal} more dropped by dynamic sampling for the same reason` : '';
  return `every one of the ${groups.length} groups had equal rewards (${failed} all failed, ${solved} all solved, ${groups.length - failed - solved} other)${dropped}`;
}

/** A step's row of metrics.jsonl: the learner's metrics, then the loop's (which win where both use a name). */
function stepMetrics(step: number, learner: Record<string, unknown>, got: Collected, built: BuiltBatch, o: { reward: string; learnerSeconds: number; restarts: number; version: number }): Record<string, unknown> {
  const all = got.trajectories;
  const scored = all.filter((t) => t.finish !== 'error'); // failed episodes and task errors are counted apart
  const calls = all.reduce((n, t) => n + t.metrics.tool_calls, 0);
  const policyTokens = all.reduce((n, t) => n + t.metrics.policy_tokens, 0);
  // What an API policy's server counted (policy openai:...): the step's requests' tokens.
  const billed = all.flatMap((t) => t.turns).reduce((u, turn) => ({ prompt: u.prompt + (turn.usage?.prompt_tokens ?? 0), completion: u.completion + (turn.usage?.completion_tokens ?? 0) }), { prompt: 0, completion: 0 });
  const drift = all.reduce((n, t) => n + t.turns.filter((turn) => turn.token_drift !== undefined).length, 0);
  return {
    ...learner,
    step,
    reward: o.reward,
    reward_mean: mean(scored.map((t) => t.reward)),
    reward_std: std(scored.map((t) => t.reward)),
    success_rate: mean(all.map((t) => (t.success ? 1 : 0))),
    episodes: all.length,
    groups_seen: got.groupsSeen,
    groups_kept: got.kept.length,
    dropped_fraction: got.groupsSeen ? (got.droppedNoSignal + got.droppedTooFew + got.droppedJudge) / got.groupsSeen : 0,
    dropped_no_signal: got.droppedNoSignal,
    dropped_too_few: got.droppedTooFew,
    judge_failures: got.droppedJudge,
    judge_calls: got.judgeCalls,
    judge_cached: got.judgeCached,
    ruler_mean: mean(all.filter((t) => t.reward_parts.ruler !== undefined).map((t) => t.reward_parts.ruler!)),
    reward_parts_mean: meanRewardParts(scored), // every part, built-in and registered (registerRewardPart)
    sampling_rounds: got.rounds,
    batch_full: got.full,
    zero_variance_groups: built.zeroVarianceGroups,
    too_long_dropped: built.tooLong,
    turns_mean: mean(all.map((t) => t.metrics.turns)),
    tool_calls: calls,
    tool_error_rate: calls ? all.reduce((n, t) => n + t.metrics.tool_errors, 0) / calls : 0,
    failed_episodes: all.filter((t) => t.finish === 'error' && !t.task_error).length,
    task_errors: all.filter((t) => t.task_error).length,
    policy_tokens_mean: all.length ? policyTokens / all.length : 0,
    rollout_tokens_per_s: got.seconds > 0 ? policyTokens / got.seconds : 0,
    ...(billed.prompt + billed.completion > 0 ? { api_prompt_tokens: billed.prompt, api_completion_tokens: billed.completion } : {}),
    ...(drift > 0 ? { token_drift_turns: drift } : {}),
    rollout_seconds: got.seconds,
    learner_seconds: o.learnerSeconds,
    learner_restarts: o.restarts,
    policy_version: o.version,
  };
}

/**
 * The train and held-out tasks: given in code, or from the config's task files, or drawn from the
 * suite (large pools, so that training rarely repeats a task). Only tasks up to max_difficulty.
 */
export function trainingTasks(c: TrainConfig, o: Pick<TrainOptions, 'trainTasks' | 'evalTasks'> = {}): { train: Task[]; held: Task[]; source: string } {
  const upTo = (ts: Task[]) => ts.filter((t) => t.difficulty <= c.max_difficulty && t.difficulty >= c.min_difficulty);
  const fromFile = c.tasks ? upTo(loadTasks(c.tasks)) : undefined;
  // The seed draws the suite's training tasks; its held-out tasks are the suite's own (drawn with the
  // suite's default seed), the same for every seed, so that runs with different seeds are compared on
  // the same tasks. The two never share a task: the split is a hash of the task's parameters.
  const suite = !fromFile && !o.trainTasks ? upTo(generateSuite(c.suite, { seed: c.seed === 0 ? undefined : c.seed, train: 4000, eval: 0 })) : [];
  const suiteHeld = !fromFile && !o.evalTasks && !c.eval_tasks ? upTo(generateSuite(c.suite, { train: 0, eval: 500 })) : [];
  const source = o.trainTasks ? 'the given tasks' : c.tasks ? c.tasks : `the ${c.suite} suite`;
  const train = o.trainTasks ?? (fromFile ?? suite).filter((t) => t.split === 'train');
  let held = o.evalTasks ?? (c.eval_tasks ? upTo(loadTasks(c.eval_tasks)) : (fromFile ?? suiteHeld).filter((t) => t.split === 'eval'));
  if (c.eval_limit > 0) held = held.slice(0, c.eval_limit);
  const limit = c.max_difficulty < 5 || c.min_difficulty > 1 ? ` of difficulty ${c.min_difficulty}-${c.max_difficulty}` : '';
  if (train.length === 0) throw new Error(o.trainTasks ? 'trainTasks: no tasks' : `${c.tasks ? `tasks: ${c.tasks}` : `suite '${c.suite}'`} has no train tasks${limit} (a task's "split" says where it goes)`);
  if (held.length === 0) {
    throw new Error(o.evalTasks ? 'evalTasks: no tasks' : c.eval_tasks ? `eval_tasks: ${c.eval_tasks} has no tasks${limit}` : `${c.tasks ? `tasks: ${c.tasks}` : `suite '${c.suite}'`} has no eval tasks${limit}: give held-out tasks with --eval-tasks FILE (or "split": "eval" in the task file)`);
  }
  return { train, held, source };
}

/** What samples a run's rollouts: the model in-process, or a server that loads the run's weights. */
interface RolloutPolicy {
  policy: Policy;
  /** The model's context, in tokens. */
  maxLen: number;
  version: () => string | number | undefined;
  /**
   * Picks up the weights the learner just exported to the run's model directory, those of `step`
   * (`changed` false: the step trained nothing, the weights are the ones already served).
   */
  reload: (step: number, changed: boolean) => Promise<unknown>;
  close: () => Promise<void>;
}

/** A served policy's failure, with what to do for the cases that have a known cause. */
function servedPolicyError(c: TrainConfig, what: string, err: unknown): Error {
  const e = err as Error;
  let hint = '';
  if (e instanceof ServerEndpointError && e.status === 404 && /_lora_adapter/.test(e.endpoint) && /Not Found/i.test(e.message)) {
    hint = ' (vLLM has these endpoints only when started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora; docs/architecture.md, "Training through vLLM")';
  } else if (e instanceof Error && /\/reload/.test(what) && /\b404\b/.test(e.message)) {
    hint = ' (the server has no POST /v1/reload: full fine-tuning needs a server that loads a model directory, e.g. mcp-gym serve-policy; with vLLM train a LoRA adapter (--lora-rank R) or restart it on the new weights)';
  }
  return new Error(`policy ${c.policy}: ${what} at ${c.base_url}: ${e.message}${hint}`, { cause: err });
}

/**
 * The rollout policy of a run. `onnx`: the run's model directory loaded in-process. `openai:<model>`:
 * a server sampling with the run's settings and returning token ids and logprobs (a turn the
 * server re-tokenised is not trained on), kept on the run's weights:
 * - the embedded GPT model, or a Hugging Face model trained in full: the server is told to serve
 *   the run's model directory (`POST <base>/reload {model_dir}`: mcp-gym serve-policy) now and
 *   after each step;
 * - a Hugging Face model with LoRA (lora_rank > 0, or an adapter in the model directory): after each step the adapter the learner wrote
 *   (`<model>/adapter/`) is copied to `<run>/adapters/<run>-v<step>/` (the server may read it again
 *   later, and the learner rewrites its own) and loaded into the server under that name (vLLM's
 *   `POST <base>/load_lora_adapter`); the requests name it as their model, and the adapter before
 *   it is unloaded and its copy removed. Before the first step the adapter already in the model
 *   directory samples (the cold-start model's, or a resumed run's), else the base model (a fresh
 *   adapter is the identity).
 * Every sampled turn records the version it was sampled with (`policy_version`).
 */
async function rolloutPolicy(c: TrainConfig, modelDir: string, o: { step: number; runDir: string; log: (line: string) => void }): Promise<RolloutPolicy> {
  const hf = isHfModelDir(modelDir);
  if (c.policy === 'onnx') {
    const p = await OnnxPolicy.load(modelDir, { temperature: c.temperature, topK: c.top_k, topP: c.top_p, maxNewTokens: c.max_new_tokens, seed: c.seed + 1 + o.step, threads: samplerThreads(c), chatTemplate: { toolFormat: c.tool_format } });
    return { policy: p, maxLen: p.model.maxLen, version: () => p.version, reload: () => p.reload(), close: () => p.close() };
  }
  const base = c.policy.slice('openai:'.length);
  const p = new OpenAIPolicy(base, {
    baseURL: c.base_url,
    apiKeyEnv: c.api_key_env,
    temperature: c.temperature,
    topP: c.top_p,
    maxTokens: c.max_new_tokens,
    tokenIds: true,
    concurrency: c.concurrency,
    seed: c.seed + 1 + o.step,
    ...(c.top_k > 0 ? { extraBody: { top_k: c.top_k } } : {}),
  });
  const maxLenOf = async () => {
    const maxLen = await p.contextLength().catch((err: unknown) => {
      throw servedPolicyError(c, 'GET /v1/models', err);
    });
    if (!maxLen) throw new Error(`policy ${c.policy}: the server at ${c.base_url} does not say its context length (max_model_len in /v1/models)`);
    return maxLen;
  };

  // LoRA: asked for, or the model directory holds an adapter (which the learner continues).
  if (hf && (c.lora_rank > 0 || existsSync(join(modelDir, 'adapter', 'adapter_config.json')))) {
    const maxLen = await maxLenOf();
    const runName = basename(o.runDir).replace(/[^A-Za-z0-9._-]/g, '_');
    const ours = new RegExp(`^${runName.replace(/[.]/g, '\\.')}-v(\\d+)$`);
    const adapterDir = resolve(modelDir, 'adapter');
    const copies = resolve(o.runDir, 'adapters');
    // The adapters loaded, oldest first: the newest samples; with asynchronous training the
    // max_staleness before it stay loaded for the requests still in flight that name them.
    const loaded: string[] = [];
    const unload = async (name: string) => {
      await p.unloadLoraAdapter(name).catch((err: unknown) => {
        throw servedPolicyError(c, `unloading the LoRA adapter ${name} (POST /v1/unload_lora_adapter)`, err);
      });
    };
    const push = async (version: number) => {
      const missing = ['adapter_config.json', 'adapter_model.safetensors'].filter((f) => !existsSync(join(adapterDir, f)));
      if (missing.length) throw new Error(`policy ${c.policy}: the learner wrote no LoRA adapter to push to the server: ${adapterDir} lacks ${missing.join(', ')}`);
      const name = `${runName}-v${version}`;
      if (loaded.includes(name)) {
        // The same step's weights again (the run rolled back to it): vLLM refuses a name twice.
        await unload(name);
        loaded.splice(loaded.indexOf(name), 1);
        p.useModel(base, 0);
      }
      const copy = join(copies, name);
      rmSync(copy, { recursive: true, force: true });
      cpSync(adapterDir, copy, { recursive: true });
      await p.loadLoraAdapter(name, copy).catch((err: unknown) => {
        throw servedPolicyError(c, `loading the LoRA adapter ${name} from ${copy} (POST /v1/load_lora_adapter)`, err);
      });
      p.useModel(name, version);
      loaded.push(name);
      const retired: string[] = [];
      while (loaded.length > c.max_staleness + 1) {
        const old = loaded.shift()!;
        await unload(old);
        rmSync(join(copies, old), { recursive: true, force: true });
        retired.push(old);
      }
      o.log(`policy: the server samples from the LoRA adapter ${name}${retired.length ? ` (${retired.join(', ')} unloaded)` : ''}`);
    };
    // Adapters of this run that an earlier process left loaded (a kill, then --resume).
    const listed = await p.models().catch((err: unknown) => {
      throw servedPolicyError(c, 'GET /v1/models', err);
    });
    for (const m of listed) {
      if (!ours.test(m.id)) continue;
      o.log(`policy: unloading the LoRA adapter ${m.id}, left loaded on the server by an earlier process of this run (or a run of the same name)`);
      await unload(m.id);
    }
    rmSync(copies, { recursive: true, force: true });
    // An adapter there already (a resumed run's, or the cold-start model's, which the learner continues) samples from the start.
    if (existsSync(join(adapterDir, 'adapter_config.json'))) await push(o.step);
    else p.useModel(base, o.step);
    return {
      policy: p,
      maxLen,
      version: () => p.version,
      reload: async (step, changed) => {
        if (changed) await push(step);
      },
      close: async () => {
        // The last adapter stays loaded: the trained policy, served as <run>-v<last step>.
        await p.close();
      },
    };
  }

  // The run's model directory, whole: serve-policy's /v1/reload (the embedded model, or a Hugging Face checkpoint trained in full).
  const reload = async (step: number) => {
    const v = await p.reload(modelDir).catch((err: unknown) => {
      throw servedPolicyError(c, `loading the run's model ${modelDir} (POST /v1/reload)`, err);
    });
    if (v === undefined) p.useModel(base, step); // a server that does not say its weights' version: the step's
  };
  await reload(o.step);
  const maxLen = await maxLenOf();
  return { policy: p, maxLen, version: () => p.version, reload: (step) => reload(step), close: () => p.close() };
}

export async function train(o: TrainOptions): Promise<TrainResult> {
  const c = resolveConfig(o.judge && !o.config.judge ? { ...o.config, judge: o.judge.id } : o.config);
  const log = o.onLog ?? (() => {});
  const run = new RunDir(o.runDir, { resume: o.resume === true, model: c.model, config: c });
  if (o.resume) log(`resuming ${run.dir} at step ${run.state.step}`);
  const { train: trainTasks, held, source } = trainingTasks(c, o);
  log(`${trainTasks.length} train tasks and ${held.length} held-out tasks from ${source}`);
  const title = `mcp-gym training run: ${c.preset} on ${source}`;
  // The composer's weights: the config's composer_weights, those given in environment.rewards win.
  const env = new Environment({ ...o.environment, rewards: { ...o.environment?.rewards, composer: { ...c.composer_weights, ...(o.environment?.rewards?.composer as Record<string, number> | undefined) } }, bundled: c.bundled_servers, reward: o.reward ?? o.environment?.reward ?? c.reward });
  // Robustness training (`faults`): the training rollouts meet the faults, the held-out evaluations see the true servers.
  const collectEnv = c.faults.trim() ? env.withFaults({ spec: c.faults, seed: c.seed }) : env;
  let session: LearnerSession | undefined;
  let policy: RolloutPolicy | undefined;
  let judging: Awaited<ReturnType<typeof rulerJudge>> | undefined;
  let stopPipeline: (() => Promise<void>) | undefined;
  let trackers: Trackers | undefined;
  const warn = o.onWarning ?? ((m: string) => log(`warning: ${m}`));
  try {
    const reportTo = parseReportTo(c.report_to);
    if (reportTo.length) {
      trackers = await Trackers.start({ runDir: run.dir, names: reportTo, log, warn });
      log(`reporting to ${reportTo.join(', ')}: ${Object.values(trackers.dirs).join(', ')}`);
      void trackers.send({ type: 'config', config: c as unknown as Record<string, unknown> });
    }
    // The servers' tool surfaces (src/tools/surface.ts), recorded in the run and its model; a resumed run says what drifted.
    const drift = run.recordToolSurfaces(await env.toolSurfaces([...trainTasks, ...held]), o.resume === true);
    if (drift) warn(drift);
    judging = await rulerJudge(c, run.dir, o.judge);
    // In-process sampling of a Hugging Face checkpoint needs its ONNX export (the learner keeps it
    // current after each step); a resumed run's is updated by exportWeights below.
    if (c.policy === 'onnx' && isHfModelDir(run.modelDir)) ensureHfOnnx(run.modelDir, log);
    session = await LearnerSession.open({ modelDir: run.modelDir, runDir: run.dir, url: c.learner, token: c.learner_token, threads: c.threads, device: c.device === 'auto' ? undefined : c.device, hf: hfLoadOptions(c), checkpoint: run.state.checkpoint, log });
    // A resumed run samples from its checkpoint's weights: the model directory may hold weights
    // exported after that checkpoint (by the steps a kill undid).
    if (o.resume && run.state.checkpoint) await session.exportWeights();
    policy = await rolloutPolicy(c, run.modelDir, { step: run.state.step, runDir: run.dir, log });
    const sampler = new TaskSampler(trainTasks, c.seed + 7, run.state.rng_draws);
    // The curriculum and the replay buffer (curriculum.ts, replay.ts) live in the producer, like the
    // sampler: each batch records their state after it, which its step's checkpoint stores.
    const curriculum = c.curriculum === 'off' ? undefined : new Curriculum(trainTasks, { mode: c.curriculum, share: c.curriculum_share, low: c.curriculum_low, high: c.curriculum_high, window: c.curriculum_window, start: c.curriculum_start, schedule: c.curriculum_schedule }, run.state.curriculum);
    const replay = c.replay_fraction > 0 ? new ReplayBuffer({ fraction: c.replay_fraction, capacity: c.replay_capacity, maxAge: c.replay_max_age, priority: c.replay_priority, seed: c.seed + 13, advantage: c.advantage === 'dr_grpo' ? 'dr_grpo' : 'grpo' }, run.readReplay()) : undefined;
    if (curriculum) log(`curriculum ${c.curriculum}: ${Object.entries(curriculum.levels(run.state.step + 1)).map(([s, l]) => `${s} at level ${l}`).join(', ')}`);
    const budget = policyTokenBudget(c, Math.max(...trainTasks.map((t) => t.max_turns)), policy.maxLen);
    const cfgForLearner = learnerConfig(c, { totalSteps: c.steps, policyTokenBudget: budget });
    const s = session;
    const p = policy;
    const pol = policy.policy;

    const evaluate = async (step: number): Promise<EvalResult> => {
      const te = performance.now();
      const r = await rollout(env, pol, held, { group: c.eval_samples, concurrency: c.concurrency, iteration: `eval.${step}` });
      // Every held-out episode failed (a server that cannot start, broken tasks): no figure to give.
      assertSomeEpisodeRan(r.trajectories, step === 0 ? 'the held-out evaluation before training' : `the held-out evaluation at step ${step}`);
      const e = evalFigures(step, r.trajectories, c.eval_samples);
      run.writeEval(e, r.trajectories);
      if (trackers) {
        const { trajectories: _file, step: _step, ...values } = e;
        void trackers.send({ type: 'eval', step, values: { ...values, ci95_low: e.ci95[0], ci95_high: e.ci95[1] } });
        void trackers.send({ type: 'table', step, name: 'eval_trajectories', ...trajectoryTable(r.trajectories) });
      }
      o.onEval?.((performance.now() - te) / 1000, e);
      return e;
    };
    const checkpoint = (step: number) => s.saveCheckpoint(step, (dir) => {
      run.state.checkpoint = dir;
      run.commit();
    });

    if (!o.resume || run.state.evals.length === 0) {
      const before = await evaluate(0);
      log(`held-out success before: ${(100 * before.success).toFixed(1)}% [${(100 * before.ci95[0]).toFixed(1)}, ${(100 * before.ci95[1]).toFixed(1)}] over ${before.episodes} episodes`);
      run.refreshReport(title, { config: c, step: run.state.step });
    }
    // Step 0's checkpoint: a learner that dies before the first periodic one restarts from here.
    if (!run.state.checkpoint) {
      await checkpoint(0).catch(async (err) => {
        if (!(await s.recover(err, 'the first checkpoint'))) throw err;
        await checkpoint(0);
      });
    }

    // The pipeline (pipeline.ts): the batches of the next steps are collected while the learner
    // trains, at most max_staleness steps ahead (0: the synchronous loop). Each batch records the
    // sampler's draws after it, which its step's checkpoint stores (resume draws the same tasks).
    interface Produced {
      got: Collected;
      drawsAfter: number;
      /** The curriculum's levels this batch was drawn at, its moves after it, and its state after it. */
      levels?: Record<string, number>;
      moves: LevelMove[];
      curriculumAfter?: CurriculumState;
      /** The groups replayed in this batch, the groups added to the buffer after it, and the buffer after it. */
      replayed?: ReplayDraw;
      replayAdded: number;
      replayAfter?: ReplaySnapshot;
    }
    const versions = new VersionSteps(run.state.versions);
    versions.note(p.version(), run.state.step);
    const judge = judging.judge;
    const produce = async (step: number, signal: AbortSignal): Promise<Produced> => {
      await o.beforeRollout?.(step);
      const levels = curriculum?.levels(step);
      const replayed = replay?.draw(step, replay.target(c.tasks_per_step));
      const got = await collectGroups({
        env: collectEnv, policy: pol, sampler, curriculum, step, tasksPerStep: c.tasks_per_step - (replayed?.groups.length ?? 0), group: c.group, concurrency: c.concurrency,
        dynamicSampling: c.dynamic_sampling, dynamicSamplingOn: c.dynamic_sampling_on, maxResampleRounds: c.max_resample_rounds,
        overlong: { max: c.overlong_max, cache: c.overlong_cache }, judge, signal,
      });
      // In batch order, from the fresh rollouts (never from training): the same whatever the timing.
      const moves = curriculum?.update(step, got.trajectories) ?? [];
      const replayAdded = replay?.add(step, got.kept) ?? 0;
      return { got, drawsAfter: sampler.draws, levels, moves, curriculumAfter: curriculum?.snapshot(), replayed, replayAdded, replayAfter: replay?.snapshot() };
    };
    // The versions replayed groups may still come from (with replay on), stored with each checkpoint.
    const stateVersions = () => (replay ? { versions: versions.since(run.state.step - c.max_staleness - c.replay_max_age - 2) } : {});
    // The run's signal does not reach the rollouts: Ctrl-C ends the step in flight, then the loop stops (below).
    const startPipeline = () => new StepPipeline<Produced>(run.state.step + 1, c.steps, c.max_staleness, produce);
    let pipe = startPipeline();
    stopPipeline = () => pipe.stop();

    let t0 = performance.now() - run.state.train_seconds * 1000;
    let deathsThisStep = 0;
    let stopped = false;
    let stepStart = performance.now();
    let cpuStart = process.cpuUsage(); // this process's CPU (rollouts, sampling, in-process tool servers)
    let budgetSpent = false;
    let quietSteps = 0; // steps in a row without a learning signal
    let noSignalStop: string | undefined;
    while (run.state.step < c.steps) {
      if (o.signal?.aborted) break;
      if (c.time_budget_minutes > 0 && run.state.train_seconds >= c.time_budget_minutes * 60) {
        log(`the time budget of ${c.time_budget_minutes} minutes is spent after step ${run.state.step} (${(run.state.train_seconds / 60).toFixed(1)} minutes): training ends here`);
        budgetSpent = true;
        break;
      }
      const step = run.state.step + 1;
      const tw = performance.now();
      const item = await pipe.next(step);
      if (!item) break;
      const waited = (performance.now() - tw) / 1000;
      const { got } = item;
      if (got.judgeError) log(`step ${step}: the judge failed on ${got.droppedJudge} group(s), dropped; first: ${got.judgeError}`);
      run.writeTrajectories(got.trajectories);
      for (const mv of item.moves) log(`step ${step}: curriculum: ${mv.suite} level ${mv.from} -> ${mv.to} (success ${(100 * mv.rate).toFixed(0)}% over ${mv.episodes} episodes at level ${mv.from})`);
      // Replayed groups are stale by design: their limit is replay_max_age steps more than fresh ones'.
      const replayedGroups = item.replayed?.groups ?? [];
      const replayedIds = new Set(replayedGroups.map((g) => g.group_id));
      const stale = splitStale([...got.kept, ...replayedGroups], step, (g) => (replayedIds.has(g.group_id) ? c.max_staleness + c.replay_max_age : c.max_staleness), versions);
      if (stale.dropped) log(`step ${step}: ${stale.dropped} group(s) sampled more than max_staleness ${c.max_staleness} steps ago (replayed: ${c.max_staleness + c.replay_max_age}), dropped`);
      const replayedKept = stale.kept.filter((g) => replayedIds.has(g.group_id));
      // drop_zero_variance: groups whose advantages are all 0 cost the learner a pass and add no gradient.
      const signal = c.drop_zero_variance ? stale.kept.filter((g) => !isZeroVariance(g.trajectories.map((t) => t.reward))) : stale.kept;
      const built = buildTrainBatch(signal, { advantage: c.advantage, perTurn: c.per_turn, maxLen: p.maxLen });
      if (c.drop_zero_variance) built.zeroVarianceGroups = stale.kept.length - signal.length;

      const tl = performance.now();
      const checkpointDue = step % c.checkpoint_every === 0 || step === c.steps;
      let lm: Record<string, unknown> = {};
      try {
        if (built.batch.ids.length > 0) {
          await o.beforeLearnerStep?.(step, s.connection);
          lm = (await s.train(built.batch, cfgForLearner)).metrics;
          await s.exportWeights();
        }
        if (item.replayAfter) run.setReplay(step, item.replayAfter);
        if (checkpointDue) {
          Object.assign(run.state, { step, rng_draws: item.drawsAfter, curriculum: item.curriculumAfter, ...stateVersions(), train_seconds: (performance.now() - t0) / 1000 });
          await checkpoint(step); // state.json always describes its checkpoint: both are written here, together
        }
      } catch (err) {
        // The learner died mid-step: it restarts from the last checkpoint, the run rolls back to
        // that checkpoint's step (what was done since, and the batches collected ahead, are the
        // work lost) and goes on from there.
        if (++deathsThisStep > 2 || !(await s.recover(err, `step ${step}`))) throw err;
        await pipe.stop();
        run.rollback();
        await s.exportWeights();
        await p.reload(run.state.step, true);
        versions.note(p.version(), run.state.step);
        sampler.seek(run.state.rng_draws);
        curriculum?.restore(run.state.curriculum);
        replay?.restore(run.readReplay());
        t0 = performance.now() - run.state.train_seconds * 1000;
        pipe = startPipeline();
        stepStart = performance.now();
        cpuStart = process.cpuUsage();
        continue;
      }
      deathsThisStep = 0;
      const learnerSeconds = (performance.now() - tl) / 1000;
      // The sampler picks up the new weights between batches: turns in flight keep the version that sampled them.
      await p.reload(step, built.batch.ids.length > 0);
      versions.note(p.version(), step);
      const stepSeconds = (performance.now() - stepStart) / 1000;
      const cpu = process.cpuUsage(cpuStart);

      if (lm.ref_reset === true) log(`step ${step}: the reference and the optimizer were reset to the current policy (ref_reset_every ${c.ref_reset_every})`);

      run.state.step = step;
      const m = stepMetrics(step, lm, got, built, { reward: env.reward.name, learnerSeconds, restarts: s.restarts, version: Number(p.version() ?? 0) });
      Object.assign(m, {
        max_staleness: c.max_staleness,
        staleness_hist: stale.histogram,
        staleness_mean: stale.mean,
        staleness_max: stale.max,
        stale_groups_dropped: stale.dropped,
        step_seconds: stepSeconds,
        trainer_cpu_seconds: (cpu.user + cpu.system) / 1e6,
        learner_wait_seconds: waited,
        learner_idle_fraction: stepSeconds > 0 ? Math.min(1, Math.max(0, (stepSeconds - learnerSeconds) / stepSeconds)) : 0,
        difficulty_mix: difficultyMix(got.trajectories),
        ...(item.levels ? { curriculum_levels: item.levels } : {}),
        ...(item.replayed
          ? {
              replay_groups: replayedKept.length,
              replay_fraction: stale.kept.length ? replayedKept.length / stale.kept.length : 0,
              replay_buffer_size: item.replayAfter!.entries.length,
              replay_added: item.replayAdded,
              replay_evicted: item.replayed.evicted,
              replay_age_mean: item.replayed.ages.length ? mean(item.replayed.ages) : 0,
              replayed_group_ids: replayedKept.map((g) => g.group_id),
            }
          : {}),
      });
      // No silent zero: a step whose groups all have equal rewards (nothing to learn from), or whose
      // learner step left the weights bit-identical, is logged; no_signal_patience of them in a row stop the run.
      const quiet = noSignalReason(stale.kept, got, built.batch.ids.length > 0 ? lm : undefined);
      m.no_signal = quiet !== undefined;
      if (quiet) {
        quietSteps++;
        log(`step ${step}: no learning signal: ${quiet}${c.no_signal_patience > 0 ? ` (${quietSteps} of ${c.no_signal_patience} in a row before the run stops)` : ''}`);
        if (c.no_signal_patience > 0 && quietSteps >= c.no_signal_patience) {
          noSignalStop = `training stopped at step ${step}: ${quietSteps} steps in a row without a learning signal; the last: ${quiet}. Check that the policy can solve some of the tasks and others not (held-out success ${(100 * (run.state.evals.at(-1)?.success ?? 0)).toFixed(1)}% at step ${run.state.evals.at(-1)?.step ?? 0}), the reward and the learning rate; --no-signal-patience 0 trains on regardless (the run resumes with --resume)`;
        }
      } else quietSteps = 0;
      if (!noSignalStop && c.eval_every > 0 && step % c.eval_every === 0 && step < c.steps) {
        const e = await evaluate(step);
        m.eval_success = e.success;
        if (e.pass_hat_k) m.eval_pass_hat_k = e.pass_hat_k[String(c.eval_samples)];
      }
      run.state.train_seconds = (performance.now() - t0) / 1000;
      Object.assign(run.state, { rng_draws: item.drawsAfter, curriculum: item.curriculumAfter, ...stateVersions() });
      if (checkpointDue) run.commit(); // with this step's evaluation
      run.writeMetrics(m);
      if (trackers) void trackers.send({ type: 'metrics', step, values: m });
      o.onStep?.(m);
      run.refreshReport(title, { config: c, step: run.state.step });
      stepStart = performance.now();
      cpuStart = process.cpuUsage();
      pipe.finished(step);
      if (noSignalStop) break;
    }
    await pipe.stop();
    stopped = run.state.step < c.steps && !budgetSpent;
    // Ctrl-C (or the time budget): a checkpoint of what is done, so that `resume` continues from here.
    if (run.state.step < c.steps && !run.state.checkpoint?.endsWith(String(run.state.step).padStart(5, '0'))) {
      await checkpoint(run.state.step).catch((err) => {
        if (s.connection.alive) throw err;
        log(`the learner died while saving step ${run.state.step}'s checkpoint; --resume continues from ${run.state.checkpoint}`);
      });
    }
    if (noSignalStop) {
      run.refreshReport(title, { config: c, step: run.state.step });
      throw new NoLearningSignal(noSignalStop);
    }
    if (stopped) {
      run.refreshReport(title, { config: c, step: run.state.step });
      log(`stopped at step ${run.state.step}; continue with --resume`);
      run.markStatus('stopped');
      // No final evaluation ran: `after` is absent, never a copy of an earlier one.
      return { runDir: run.dir, before: run.state.evals[0]!, steps: run.state.step, train_seconds: run.state.train_seconds, report: run.report, stopped };
    }
    const last = run.state.evals.at(-1);
    const after = last && last.step === run.state.step && run.state.evals.length > 1 ? last : await evaluate(run.state.step);
    run.commit();
    const result: TrainResult = { runDir: run.dir, before: run.state.evals[0]!, after, steps: run.state.step, train_seconds: run.state.train_seconds, report: run.report, stopped };
    run.refreshReport(title, { before: result.before, after: result.after, train_seconds: result.train_seconds, steps: result.steps, config: c });
    run.markStatus('finished');
    return result;
  } catch (err) {
    run.markStatus('failed', err instanceof Error ? err.message : String(err));
    throw err;
  } finally {
    await stopPipeline?.().catch(() => {});
    await trackers?.close().catch(() => {});
    run.close();
    await env.close();
    await policy?.close();
    await session?.close();
    await judging?.close();
  }
}
