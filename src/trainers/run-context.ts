/**
 * What a training run holds while it runs (RunContext), opened and closed in one place: its config,
 * run directory, tasks, environment, learner session, rollout policy, task sampler, curriculum,
 * replay buffer, trackers and judge. The stages (step-*.ts) read and advance it; the loop
 * (loop.ts) composes them.
 */
import { generateSuite } from '../env/suites/index.ts';
import { Environment, loadTasks, parseToolMode, type ChatModel, type EnvironmentOptions, type RewardFn, type Task } from '../env/index.ts';
import { rulerJudge, type Collected } from './collect.ts';
import type { TrainConfig, TrainConfigInput } from './config.ts';
import { hfLoadOptions, learnerConfig, policyTokenBudget, resolveConfig } from './resolve-config.ts';
import { Curriculum, type CurriculumState, type LevelMove } from './curriculum.ts';
import { ensureHfOnnx } from './hf-onnx.ts';
import { isHfModelDir, type LearnerConnection } from './learner-client.ts';
import { parseReportTo } from './options.ts';
import { StepPipeline, VersionSteps } from './pipeline.ts';
import type { LearnerConfigInput } from './protocol.ts';
import { ReplayBuffer, type ReplayDraw, type ReplaySnapshot } from './replay.ts';
import { rolloutPolicy, type RolloutPolicy, type SamplerTotals } from './rollout-policy.ts';
import { RunDir, type EvalResult } from './run-dir.ts';
import { TaskSampler } from './sampler.ts';
import { LearnerSession } from './session.ts';
import { Trackers } from './trackers.ts';

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
  /** Hears each episode of a held-out evaluation as it ends: how many have, of how many. */
  onEvalEpisode?: (done: number, total: number) => void;
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
 * A step's batch as the first stages made it (step-produce.ts, produceBatch), collected ahead of the
 * learner by the pipeline (pipeline.ts). It records the sampler's draws after it, which its
 * step's checkpoint stores (resume draws the same tasks).
 */
export interface Produced {
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
  /** The in-process sampler's seconds while the batch was collected (prefill and decode graph runs); absent for a served policy. */
  samplerSeconds?: SamplerTotals;
}

export interface RunContext {
  c: TrainConfig;
  o: TrainOptions;
  run: RunDir;
  title: string;
  held: Task[];
  env: Environment;
  /** The training rollouts' environment: `env` with the config's faults (robustness training), else `env`. */
  collectEnv: Environment;
  session: LearnerSession;
  policy: RolloutPolicy;
  sampler: TaskSampler;
  curriculum?: Curriculum;
  replay?: ReplayBuffer;
  versions: VersionSteps;
  judge?: Awaited<ReturnType<typeof rulerJudge>>['judge'];
  trackers?: Trackers;
  learnerConfig: LearnerConfigInput;
  log: (line: string) => void;
  /** Starts the pipeline of the batches of the next steps, collected while the learner trains (at most max_staleness ahead). */
  startPipeline: () => StepPipeline<Produced>;
  /** Training time: its origin (counting a resumed run's seconds), and the current step's start and CPU. */
  clock: { t0: number; stepStart: number; cpuStart: NodeJS.CpuUsage };
  /** Learner deaths during the current step, and steps in a row without a learning signal. */
  deathsThisStep: number;
  quietSteps: number;
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
  if (train.length === 0)
    throw new Error(
      o.trainTasks
        ? 'trainTasks: no tasks'
        : `${c.tasks ? `tasks: ${c.tasks}` : `suite '${c.suite}'`} has no train tasks${limit} (a task's "split" says where it goes)`,
    );
  if (held.length === 0) {
    throw new Error(
      o.evalTasks
        ? 'evalTasks: no tasks'
        : c.eval_tasks
          ? `eval_tasks: ${c.eval_tasks} has no tasks${limit}`
          : `${c.tasks ? `tasks: ${c.tasks}` : `suite '${c.suite}'`} has no eval tasks${limit}: give held-out tasks with --eval-tasks FILE (or "split": "eval" in the task file)`,
    );
  }
  return { train, held, source };
}

/** The parts of a run that need closing, filled in as openRun opens them. */
export interface Closers {
  run?: RunDir;
  env?: Environment;
  policy?: RolloutPolicy;
  session?: LearnerSession;
  judging?: { close(): Promise<void> };
  trackers?: Trackers;
  /** Stops the pipeline running now. */
  stopPipeline?: () => Promise<void>;
}

/** Closes what openRun opened (each at most once; errors of the pipeline's and trackers' close are ignored). */
export async function closeRun(x: Closers): Promise<void> {
  await x.stopPipeline?.().catch(() => {});
  await x.trackers?.close().catch(() => {});
  x.run?.close();
  await x.env?.close();
  await x.policy?.close();
  await x.session?.close();
  await x.judging?.close();
}

/**
 * Opens a run: its directory (a resumed one's state), tasks, environment, trackers, tool surfaces,
 * judge, learner session, rollout policy, sampler, curriculum and replay buffer. What it opened is
 * put in `closers` as it goes, so that a failure half-way closes it.
 */
export async function openRun(
  o: TrainOptions,
  run: RunDir,
  c: TrainConfig,
  closers: Closers,
  produce: (ctx: RunContext, step: number, signal: AbortSignal) => Promise<Produced>,
): Promise<RunContext> {
  const log = o.onLog ?? (() => {});
  if (o.resume) log(`resuming ${run.dir} at step ${run.state.step}`);
  const { train: trainTasks, held, source } = trainingTasks(c, o);
  log(`${trainTasks.length} train tasks and ${held.length} held-out tasks from ${source}`);
  // The composer's weights: the config's composer_weights, those given in environment.rewards win.
  const env = (closers.env = new Environment({
    ...o.environment,
    rewards: { ...o.environment?.rewards, composer: { ...c.composer_weights, ...(o.environment?.rewards?.composer as Record<string, number> | undefined) } },
    bundled: c.bundled_servers,
    reward: o.reward ?? o.environment?.reward ?? c.reward,
    ...(c.tools !== 'all' ? { tools: parseToolMode(c.tools) } : {}),
  }));
  const warn = o.onWarning ?? ((m: string) => log(`warning: ${m}`));
  const reportTo = parseReportTo(c.report_to);
  if (reportTo.length) {
    const trackers = (closers.trackers = await Trackers.start({ runDir: run.dir, names: reportTo, log, warn }));
    log(`reporting to ${reportTo.join(', ')}: ${Object.values(trackers.dirs).join(', ')}`);
    void trackers.send({ type: 'config', config: c as unknown as Record<string, unknown> });
  }
  // The servers' tool surfaces (src/tools/surface.ts), recorded in the run and its model; a resumed run says what drifted.
  const drift = run.recordToolSurfaces(await env.toolSurfaces([...trainTasks, ...held]), o.resume === true);
  if (drift) warn(drift);
  const judging = (closers.judging = await rulerJudge(c, run.dir, o.judge));
  // In-process sampling of a Hugging Face checkpoint needs its ONNX export (the learner keeps it
  // current after each step); a resumed run's is updated by exportWeights below.
  if (c.policy === 'onnx' && isHfModelDir(run.modelDir)) ensureHfOnnx(run.modelDir, log);
  const session = (closers.session = await LearnerSession.open({
    modelDir: run.modelDir,
    runDir: run.dir,
    url: c.learner,
    token: c.learner_token,
    threads: c.threads,
    sharedFs: c.learner_shared_fs,
    procs: c.learner_procs,
    parallel: c.learner_parallel,
    device: c.device === 'auto' ? undefined : c.device,
    hf: hfLoadOptions(c),
    checkpoint: run.state.checkpoint,
    log,
  }));
  // A resumed run samples from its checkpoint's weights: the model directory may hold weights
  // exported after that checkpoint (by the steps a kill undid).
  if (o.resume && run.state.checkpoint) await session.exportWeights();
  const policy = (closers.policy = await rolloutPolicy(c, run.modelDir, { step: run.state.step, runDir: run.dir, log }));
  // The curriculum and the replay buffer (curriculum.ts, replay.ts) live in the producer, like the
  // sampler: each batch records their state after it, which its step's checkpoint stores.
  const curriculum =
    c.curriculum === 'off'
      ? undefined
      : new Curriculum(
          trainTasks,
          {
            mode: c.curriculum,
            share: c.curriculum_share,
            low: c.curriculum_low,
            high: c.curriculum_high,
            window: c.curriculum_window,
            start: c.curriculum_start,
            schedule: c.curriculum_schedule,
          },
          run.state.curriculum,
        );
  const replay =
    c.replay_fraction > 0
      ? new ReplayBuffer(
          {
            fraction: c.replay_fraction,
            capacity: c.replay_capacity,
            maxAge: c.replay_max_age,
            priority: c.replay_priority,
            seed: c.seed + 13,
            advantage: c.advantage === 'dr_grpo' ? 'dr_grpo' : 'grpo',
          },
          run.readReplay(),
        )
      : undefined;
  if (curriculum)
    log(
      `curriculum ${c.curriculum}: ${Object.entries(curriculum.levels(run.state.step + 1))
        .map(([s, l]) => `${s} at level ${l}`)
        .join(', ')}`,
    );
  const budget = policyTokenBudget(c, Math.max(...trainTasks.map((t) => t.max_turns)), policy.maxLen);
  const versions = new VersionSteps(run.state.versions);
  versions.note(policy.version(), run.state.step);
  const now = performance.now();
  const ctx: RunContext = {
    c,
    o,
    run,
    title: `mcp-gym training run: ${c.preset} on ${source}`,
    held,
    env,
    // Robustness training (`faults`): the training rollouts meet the faults, the held-out evaluations see the true servers.
    collectEnv: c.faults.trim() ? env.withFaults({ spec: c.faults, seed: c.seed }) : env,
    session,
    policy,
    sampler: new TaskSampler(trainTasks, c.seed + 7, run.state.rng_draws),
    curriculum,
    replay,
    versions,
    judge: judging.judge,
    trackers: closers.trackers,
    learnerConfig: learnerConfig(c, { totalSteps: c.steps, policyTokenBudget: budget }),
    log,
    // The run's signal does not reach the rollouts: Ctrl-C ends the step in flight, then the loop stops.
    startPipeline: () => new StepPipeline<Produced>(run.state.step + 1, c.steps, c.max_staleness, (step, signal) => produce(ctx, step, signal)),
    clock: { t0: now - run.state.train_seconds * 1000, stepStart: now, cpuStart: process.cpuUsage() },
    deathsThisStep: 0,
    quietSteps: 0,
  };
  return ctx;
}

/** The resolved config of a run's options (a judge given in code fills an empty `judge` spec). */
export function runConfig(o: TrainOptions): TrainConfig {
  return resolveConfig(o.judge && !o.config.judge ? { ...o.config, judge: o.judge.id } : o.config);
}
