/**
 * The training loop, one for every preset:
 *   sample train tasks → G rollouts each, concurrently → rewards → advantages per group →
 *   dynamic sampling (drop zero-variance groups, sample more) → TrainBatch → learner step →
 *   the policy reloads the new weights → held-out evaluation every K steps.
 * Everything a person needs is written to the run directory: metrics.jsonl (one line per step),
 * trajectories.jsonl, eval.jsonl, checkpoints, report.html (refreshed every step), state.json.
 * A learner that dies is restarted from the last checkpoint; a run stopped (Ctrl-C) or killed
 * resumes from its last checkpoint with `resume`.
 */
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { basename, join, posix, resolve } from 'node:path';
import { OnnxPolicy } from '../agents/index.ts';
import { Environment, JsonlWriter, rollout, type EnvironmentOptions, type Task, type Trajectory } from '../env/index.ts';
import { generateSuite } from '../env/suites/index.ts';
import { seededRng } from '../tools/index.ts';
import { groupAdvantages, isZeroVariance, mean, std, turnAdvantages } from './advantages.ts';
import { buildBatch, overlongPenalty, sequenceOf, type BatchItem } from './batch.ts';
import { learnerConfig, type TrainConfig } from './config.ts';
import { HttpLearner, LearnerClient, LearnerError, type Learner } from './learner-client.ts';
import { writeReport } from './report.ts';

export interface EvalResult {
  step: number;
  success: number;
  ci95: [number, number];
  episodes: number;
  mean_reward: number;
}

export interface TrainResult {
  runDir: string;
  before: EvalResult;
  after: EvalResult;
  steps: number;
  train_seconds: number;
  report: string;
  stopped: boolean;
}

export interface TrainOptions {
  config: TrainConfig;
  runDir: string;
  resume?: boolean;
  signal?: AbortSignal;
  /** Held-out tasks; default: the suite's eval split. */
  evalTasks?: Task[];
  trainTasks?: Task[];
  onStep?: (m: Record<string, unknown>) => void;
  onLog?: (line: string) => void;
  /** Options of the environment (e.g. a tool server's delay, for tests); `bundled_servers` in the config wins. */
  environment?: EnvironmentOptions;
  /** For tests: called as a step's rollouts start (e.g. to kill a tool server mid-run). */
  beforeRollout?: (step: number) => void | Promise<void>;
  /** For tests: called as a step's learner request is sent (e.g. to kill the learner mid-step). */
  beforeLearnerStep?: (step: number, learner: Learner) => void | Promise<void>;
}

/** Wilson score interval for a proportion (95%). */
export function wilson(successes: number, n: number, z = 1.96): [number, number] {
  if (n === 0) return [0, 1];
  const p = successes / n;
  const d = 1 + (z * z) / n;
  const c = (p + (z * z) / (2 * n)) / d;
  const h = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / d;
  return [Math.max(0, c - h), Math.min(1, c + h)];
}

interface State {
  step: number;
  evals: EvalResult[];
  checkpoint?: string;
  train_seconds: number;
  rng_draws: number;
}

function writeJsonAtomic(file: string, value: unknown): void {
  writeFileSync(file + '.tmp', JSON.stringify(value, null, 2) + '\n');
  renameSync(file + '.tmp', file);
}

export async function train(o: TrainOptions): Promise<TrainResult> {
  const c = o.config;
  const log = o.onLog ?? (() => {});
  const runDir = resolve(o.runDir);
  const modelDir = join(runDir, 'model');
  const ckptRoot = join(runDir, 'checkpoints');
  const stateFile = join(runDir, 'state.json');
  mkdirSync(runDir, { recursive: true });
  let state: State = { step: 0, evals: [], train_seconds: 0, rng_draws: 0 };
  if (o.resume) {
    if (!existsSync(stateFile)) throw new Error(`${runDir}: nothing to resume (no state.json)`);
    state = JSON.parse(readFileSync(stateFile, 'utf8'));
    log(`resuming ${runDir} at step ${state.step}`);
  } else {
    if (existsSync(stateFile)) throw new Error(`${runDir} already holds a run: pass --resume to continue it, or choose another run directory`);
    if (!existsSync(join(c.model, 'config.json'))) throw new Error(`model: no model directory at ${c.model} (make one with: mcp-gym sft --out ${c.model})`);
    rmSync(modelDir, { recursive: true, force: true });
    cpSync(c.model, modelDir, { recursive: true, filter: (src) => !src.endsWith('sft-data.jsonl') });
    writeJsonAtomic(join(runDir, 'config.json'), c);
  }

  // Large pools, so that training rarely repeats a task and the held-out estimate is tight.
  const suite = generateSuite(c.suite, { seed: c.seed === 0 ? undefined : c.seed, train: 4000, eval: 500 }).filter((t) => t.difficulty <= c.max_difficulty);
  const trainTasks = o.trainTasks ?? suite.filter((t) => t.split === 'train');
  let evalTasks = o.evalTasks ?? suite.filter((t) => t.split === 'eval');
  if (c.eval_tasks > 0) evalTasks = evalTasks.slice(0, c.eval_tasks);
  if (trainTasks.length === 0) throw new Error(`suite '${c.suite}' has no train tasks`);

  const metricsOut = new JsonlWriter<Record<string, unknown>>(join(runDir, 'metrics.jsonl'), { sync: false });
  const trajOut = new JsonlWriter<Trajectory>(join(runDir, 'trajectories.jsonl'), { sync: false });
  const evalOut = new JsonlWriter<EvalResult>(join(runDir, 'eval.jsonl'), { sync: true });
  const metricsRows: Record<string, unknown>[] = o.resume ? readRows(join(runDir, 'metrics.jsonl')).filter((m) => Number(m.step) <= state.step) : [];
  let samples: { label: string; trajectory: Trajectory }[] = [];

  // The learner: spawned here, or reached over HTTP; restarted from the last checkpoint if it dies.
  // One reached over HTTP may not share this file system: the model directory is sent to it
  // (put_files), its exports come back in the answers, and its checkpoints stay on its side.
  const remote = c.learner !== undefined;
  let learnerModelDir = modelDir;
  let learnerCkptRoot = ckptRoot;
  const startLearner = async (): Promise<Learner> => {
    const l: Learner = c.learner ? new HttpLearner(c.learner, c.learner_token) : LearnerClient.start({ threads: c.threads });
    if (remote) {
      const files = Object.fromEntries(
        ['config.json', 'weights.pt', 'model.onnx', 'model.onnx.data'].filter((f) => existsSync(join(modelDir, f))).map((f) => [f, readFileSync(join(modelDir, f)).toString('base64')]),
      );
      const id = `${basename(runDir).replace(/[^A-Za-z0-9._-]/g, '_')}-${createHash('sha256').update(runDir).digest('hex').slice(0, 8)}`;
      const put = await l.request<{ dir: string }>('put_files', { dir: `runs/${id}/model`, files });
      learnerModelDir = put.dir;
      learnerCkptRoot = posix.join(posix.dirname(put.dir), 'checkpoints');
    }
    await l.request('load', { model_dir: learnerModelDir, device: c.device === 'auto' ? undefined : c.device, ...(c.threads ? { threads: c.threads } : {}) });
    if (state.checkpoint) await l.request('checkpoint_load', { dir: state.checkpoint });
    return l;
  };
  let learner = await startLearner();
  let learnerRestarts = 0;
  /** Whether `err` says the learner died (then it is restarted from `state`'s checkpoint); otherwise false. */
  const restartedAfter = async (err: unknown, what: string): Promise<boolean> => {
    if (!(err instanceof LearnerError) || learner.alive) return false;
    learnerRestarts++;
    log(`the learner died during ${what} (${(err as Error).message.slice(0, 160)}); restarting it from ${state.checkpoint ?? 'the start of the run'}`);
    await learner.close().catch(() => {});
    learner = await startLearner();
    return true;
  };

  const policy = await OnnxPolicy.load(modelDir, { temperature: c.temperature, topK: c.top_k, topP: c.top_p, maxNewTokens: c.max_new_tokens, seed: c.seed + 1 + state.step });
  const env = new Environment({ ...o.environment, bundled: c.bundled_servers, rewards: { total: c.reward } });
  let rng = seededRng(c.seed + 7);
  let draws = 0;
  const seek = (n: number) => {
    rng = seededRng(c.seed + 7);
    for (let i = 0; i < n; i++) rng();
    draws = n;
  };
  seek(state.rng_draws);
  const draw = () => {
    draws++;
    return rng();
  };
  /** The learner writes the new weights (and, remote, sends them: written here data first, config last). */
  const exportWeights = async () => {
    const r = await learner.request<{ files?: Record<string, string> }>('export', { model_dir: learnerModelDir, ...(remote ? { inline: true } : {}) });
    if (!remote) return;
    const names = Object.keys(r.files ?? {}).sort((a, b) => Number(a === 'config.json') - Number(b === 'config.json'));
    if (!names.includes('config.json')) throw new Error('the remote learner\'s export sent no config.json');
    for (const name of names) {
      writeFileSync(join(modelDir, name + '.tmp'), Buffer.from(r.files![name]!, 'base64'));
      renameSync(join(modelDir, name + '.tmp'), join(modelDir, name));
    }
  };
  const saveCheckpoint = async (step: number) => {
    const name = `step-${String(step).padStart(5, '0')}`;
    const dir = remote ? posix.join(learnerCkptRoot, name) : join(ckptRoot, name);
    await learner.request('checkpoint_save', { dir });
    const previous = state.checkpoint;
    state.checkpoint = dir;
    writeJsonAtomic(stateFile, state);
    if (previous && previous !== dir && !remote) rmSync(previous, { recursive: true, force: true });
  };

  const evaluate = async (step: number): Promise<EvalResult> => {
    const r = await rollout(env, policy, evalTasks, { group: c.eval_samples, concurrency: c.concurrency, iteration: -1 - step });
    const ok = r.trajectories.filter((t) => t.success).length;
    const e: EvalResult = { step, success: ok / r.trajectories.length, ci95: wilson(ok, r.trajectories.length), episodes: r.trajectories.length, mean_reward: mean(r.trajectories.map((t) => t.reward)) };
    evalOut.write(e);
    samples = [...r.trajectories.filter((t) => t.success).slice(0, 2), ...r.trajectories.filter((t) => !t.success).slice(0, 2)].map((t) => ({ label: `eval @ step ${step}`, trajectory: t }));
    return e;
  };

  const refreshReport = (summary?: Record<string, unknown>) =>
    writeReport(join(runDir, 'report.html'), { title: `mcp-gym training run: ${c.preset} on ${c.suite}`, metrics: metricsRows, evals: state.evals, samples, summary: summary ?? { config: c, step: state.step } });

  let stopped = false;
  try {
    if (!o.resume || state.evals.length === 0) {
      const before = await evaluate(0);
      state.evals.push(before);
      log(`held-out success before: ${(100 * before.success).toFixed(1)}% [${(100 * before.ci95[0]).toFixed(1)}, ${(100 * before.ci95[1]).toFixed(1)}] over ${before.episodes} episodes`);
      refreshReport();
    }
    // Step 0's checkpoint: a learner that dies before the first periodic one restarts from here.
    if (!state.checkpoint) {
      try {
        await saveCheckpoint(0);
      } catch (err) {
        if (!(await restartedAfter(err, 'the first checkpoint'))) throw err;
        await saveCheckpoint(0);
      }
    }
    let t0 = performance.now() - state.train_seconds * 1000;
    const cfgForLearner = learnerConfig(c, c.steps);
    let deathsThisStep = 0;
    while (state.step < c.steps) {
      if (o.signal?.aborted) {
        stopped = true;
        break;
      }
      const step = state.step + 1;
      const ts = performance.now();
      // Rollouts, with dynamic sampling.
      const kept: { group_id: string; trajectories: Trajectory[]; rewards: number[] }[] = [];
      let groupsSeen = 0;
      let dropped = 0;
      const allTraj: Trajectory[] = [];
      await o.beforeRollout?.(step);
      for (let round = 0; round <= (c.dynamic_sampling ? c.max_resample_rounds : 0); round++) {
        const need = c.tasks_per_step - kept.length;
        if (need <= 0) break;
        const tasks = Array.from({ length: need }, () => trainTasks[Math.floor(draw() * trainTasks.length)]!);
        const unique = [...new Map(tasks.map((t) => [t.id, t])).values()];
        const r = await rollout(env, policy, unique, { group: c.group, concurrency: c.concurrency, iteration: step * 10 + round, signal: o.signal });
        allTraj.push(...r.trajectories);
        for (const g of r.groups) {
          groupsSeen++;
          // A group holds the episodes that finished; those that a tool server's failure ended
          // (finish 'error') are counted in the metrics, not learned from: the policy did nothing
          // wrong in them.
          const trajectories = g.trajectories;
          if (trajectories.length < 2) {
            dropped++;
            continue;
          }
          const rewards = trajectories.map((t) => t.reward + (c.overlong_max > 0 ? overlongPenalty(t.metrics.policy_tokens, c.overlong_max, c.overlong_cache) : 0));
          if (c.dynamic_sampling && isZeroVariance(rewards)) {
            dropped++;
            continue;
          }
          kept.push({ group_id: g.group_id, trajectories, rewards });
        }
        if (!c.dynamic_sampling) break;
      }
      if (o.signal?.aborted) {
        stopped = true;
        break;
      }
      for (const t of allTraj) trajOut.write(t);
      const rolloutSeconds = (performance.now() - ts) / 1000;

      // Advantages and the batch.
      const items: BatchItem[] = [];
      let zeroVar = 0;
      for (const g of kept) {
        if (isZeroVariance(g.rewards)) zeroVar++;
        if (c.per_turn) {
          const adv = turnAdvantages(
            g.trajectories.map((t, i) => ({ stepRewards: t.turns.map((u) => u.step_reward), final: g.rewards[i]! - t.turns.reduce((s, u) => s + u.step_reward, 0) })),
            c.advantage,
          );
          g.trajectories.forEach((t, i) => items.push({ trajectory: t, group_id: g.group_id, advantage: adv[i]! }));
        } else {
          const adv = groupAdvantages(g.rewards, c.advantage);
          g.trajectories.forEach((t, i) => items.push({ trajectory: t, group_id: g.group_id, advantage: adv[i]! }));
        }
      }
      const maxLen = policy.model.maxLen;
      const fitting = items.filter((i) => (sequenceOf(i.trajectory)?.ids.length ?? 0) <= maxLen);
      const batch = buildBatch(fitting);
      const tl = performance.now();
      let lm: Record<string, unknown> = {};
      const checkpointDue = step % c.checkpoint_every === 0 || step === c.steps;
      try {
        if (batch.ids.length > 0) {
          await o.beforeLearnerStep?.(step, learner);
          const res = await learner.request<{ metrics: Record<string, unknown> }>('train', { batch, config: cfgForLearner });
          lm = res.metrics ?? {};
          await exportWeights();
        }
        if (checkpointDue) {
          // state.json always describes its checkpoint: both are written here, together.
          Object.assign(state, { step, rng_draws: draws, train_seconds: (performance.now() - t0) / 1000 });
          await saveCheckpoint(step);
        }
      } catch (err) {
        // The learner died mid-step: restart it from the last checkpoint, roll the run back to
        // that checkpoint's step (what was done since is the work lost) and go on from there.
        if (++deathsThisStep > 2 || !(await restartedAfter(err, `step ${step}`))) throw err;
        state = JSON.parse(readFileSync(stateFile, 'utf8')) as State; // that checkpoint's
        await exportWeights();
        await policy.reload();
        seek(state.rng_draws);
        metricsRows.splice(0, metricsRows.length, ...metricsRows.filter((m) => Number(m.step) <= state.step));
        t0 = performance.now() - state.train_seconds * 1000;
        continue;
      }
      deathsThisStep = 0;
      const learnerSeconds = (performance.now() - tl) / 1000;
      await policy.reload();

      // Metrics of the step.
      const rewards = allTraj.map((t) => t.reward);
      const calls = allTraj.reduce((s, t) => s + t.metrics.tool_calls, 0);
      const errs = allTraj.reduce((s, t) => s + t.metrics.tool_errors, 0);
      const policyTokens = allTraj.reduce((s, t) => s + t.metrics.policy_tokens, 0);
      state.step = step;
      // The learner's metrics first, so that the loop's win where both use a name.
      const m: Record<string, unknown> = {
        ...lm,
        step,
        reward_mean: mean(rewards),
        reward_std: std(rewards),
        success_rate: mean(allTraj.map((t) => (t.success ? 1 : 0))),
        episodes: allTraj.length,
        groups_seen: groupsSeen,
        groups_kept: kept.length,
        dropped_fraction: groupsSeen ? dropped / groupsSeen : 0,
        zero_variance_groups: zeroVar,
        too_long_dropped: items.length - fitting.length,
        turns_mean: mean(allTraj.map((t) => t.metrics.turns)),
        tool_calls: calls,
        tool_error_rate: calls ? errs / calls : 0,
        failed_episodes: allTraj.filter((t) => t.finish === 'error').length,
        policy_tokens_mean: allTraj.length ? policyTokens / allTraj.length : 0,
        rollout_tokens_per_s: rolloutSeconds > 0 ? policyTokens / rolloutSeconds : 0,
        rollout_seconds: rolloutSeconds,
        learner_seconds: learnerSeconds,
        learner_restarts: learnerRestarts,
        policy_version: policy.version,
      };
      if (c.eval_every > 0 && step % c.eval_every === 0 && step < c.steps) {
        const e = await evaluate(step);
        state.evals.push(e);
        m.eval_success = e.success;
      }
      state.train_seconds = (performance.now() - t0) / 1000;
      state.rng_draws = draws;
      if (checkpointDue) writeJsonAtomic(stateFile, state); // with this step's evaluation
      metricsOut.write(m);
      metricsRows.push(m);
      o.onStep?.(m);
      refreshReport();
    }
    if (stopped) {
      // Ctrl-C: a checkpoint of what is done, so that `resume` continues from here.
      if (!state.checkpoint?.endsWith(String(state.step).padStart(5, '0'))) {
        try {
          await saveCheckpoint(state.step);
        } catch (err) {
          if (!(err instanceof LearnerError) || learner.alive) throw err;
          // The learner is gone: state.json still describes the last checkpoint; resume goes from there.
          log(`the learner died while saving step ${state.step}'s checkpoint; --resume continues from ${state.checkpoint}`);
        }
      }
      refreshReport();
      log(`stopped at step ${state.step}; continue with --resume`);
      return { runDir, before: state.evals[0]!, after: state.evals.at(-1)!, steps: state.step, train_seconds: state.train_seconds, report: join(runDir, 'report.html'), stopped };
    }
    const after = state.evals.at(-1)?.step === state.step && state.evals.length > 1 ? state.evals.at(-1)! : await evaluate(state.step);
    if (state.evals.at(-1) !== after) state.evals.push(after);
    writeJsonAtomic(stateFile, state);
    const result: TrainResult = { runDir, before: state.evals[0]!, after, steps: state.step, train_seconds: state.train_seconds, report: join(runDir, 'report.html'), stopped };
    refreshReport({ before: result.before, after: result.after, train_seconds: result.train_seconds, steps: result.steps, config: c });
    return result;
  } finally {
    metricsOut.close();
    trajOut.close();
    evalOut.close();
    await env.close();
    await policy.close();
    await learner.close().catch(() => {});
  }
}

function readRows(file: string): Record<string, unknown>[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return [];
      }
    });
}
