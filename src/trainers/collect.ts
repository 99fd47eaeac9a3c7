/**
 * Collecting a step's groups, in one visible place: task sampling, G rollouts per task, reward
 * shaping (DAPO's overlong penalty, written into the trajectory's reward and its parts, so that
 * the reward logged is the reward trained on), and DAPO's dynamic sampling (docs/architecture.md,
 * "DAPO"): a group without signal (every episode solved, or every one failed) is dropped and more
 * tasks are sampled, round after round, until the batch is full or the cap of rounds is hit.
 * Group ids are structured, `<task id>@train.<step>.<round>`: unique within a run.
 *
 * With a judge (RULER, src/env/ruler.ts), each group of a round with at least two finished
 * episodes is judged (groups concurrently, `judge.concurrency` at once) before the overlong
 * shaping, so that reward = w_ruler·ruler + w_verifier·verifier + overlong: the overlong penalty
 * is not scaled by the verifier's weight (0 by default). A group the judge fails on (a JudgeError)
 * is dropped, counted as `droppedJudge`, never trained on a made-up score; dynamic sampling looks
 * at the judged rewards.
 */
import { join } from 'node:path';
import pLimit from 'p-limit';
import { makeChatModel } from '../agents/index.ts';
import { applyRuler, JudgeError, rollout, type ChatModel, type Environment, type Policy, type RulerOptions, type Trajectory } from '../env/index.ts';
import { isZeroVariance } from './advantages.ts';
import { overlongPenalty, type KeptGroup } from './batch.ts';
import type { TrainConfig } from './config.ts';
import type { Curriculum } from './curriculum.ts';
import { drawDistinct, type TaskSampler } from './sampler.ts';

export interface CollectOptions {
  env: Environment;
  policy: Policy;
  sampler: TaskSampler;
  /** Draws the tasks by difficulty (curriculum.ts) with the sampler's numbers; default: uniformly. */
  curriculum?: Curriculum;
  step: number;
  tasksPerStep: number;
  group: number;
  concurrency: number;
  /** Drop groups without signal and sample more (DAPO). */
  dynamicSampling: boolean;
  /** outcome: all solved or all failed (DAPO); reward: all (shaped) rewards equal. */
  dynamicSamplingOn: 'outcome' | 'reward';
  /** At most this many extra rounds of sampling (the cap). */
  maxResampleRounds: number;
  /** DAPO overlong shaping over the policy tokens of an episode; max 0 = off. */
  overlong: { max: number; cache: number };
  /** RULER: a judge that scores each group (its options: mode, rubric, weights, cache, ...). */
  judge?: { model: ChatModel; options: RulerOptions /** Groups judged at once (default 4). */; concurrency?: number };
  signal?: AbortSignal;
}

export interface Collected {
  /** The groups to train on: at least two finished episodes each, with signal when dynamic sampling is on. */
  kept: KeptGroup[];
  /** Every finished or failed trajectory of the step, shaped rewards included (what is logged). */
  trajectories: Trajectory[];
  groupsSeen: number;
  /** Groups dropped by dynamic sampling (no signal). */
  droppedNoSignal: number;
  /** Groups dropped because fewer than two of their episodes finished (tool servers failed). */
  droppedTooFew: number;
  /** Groups dropped because the judge failed on them (RULER: a request failed, or it answered invalidly twice). */
  droppedJudge: number;
  /** The first judge failure's message, for the log. */
  judgeError?: string;
  /** Judge requests made (retries included) and answers taken from the judge's cache. */
  judgeCalls: number;
  judgeCached: number;
  /** Sampling rounds it took (1 without dynamic sampling). */
  rounds: number;
  /** Whether the batch reached tasks_per_step groups (false when the cap of rounds was hit first). */
  full: boolean;
  seconds: number;
}

/** Applies DAPO's overlong penalty to a trajectory's reward, recorded as the part `overlong`. */
export function shapeOverlong(t: Trajectory, max: number, cache: number): void {
  if (max <= 0 || t.finish === 'error') return; // a failed episode keeps reward 0 and no parts
  const p = overlongPenalty(t.metrics.policy_tokens, max, cache);
  t.reward_parts = { ...t.reward_parts, overlong: p };
  t.reward += p;
}

/** Whether a group carries no learning signal. */
export function withoutSignal(trajectories: Trajectory[], on: 'outcome' | 'reward'): boolean {
  if (on === 'reward') return isZeroVariance(trajectories.map((t) => t.reward));
  return trajectories.every((t) => t.success) || trajectories.every((t) => !t.success);
}

/** What the score stage did to a round's groups: the judge's calls, and the groups it failed on. */
interface Scored {
  judgeCalls: number;
  judgeCached: number;
  /** Groups the judge failed on (dropped by the filter, never trained on a made-up score). */
  judgeFailed: Set<string>;
  judgeError?: string;
}

/**
 * Stage 3, score: RULER's judge (when the run has one) rescores each group with at least two
 * finished episodes, then DAPO's overlong shaping is added to every trajectory's reward.
 */
export async function scoreGroups(
  groups: { group_id: string; trajectories: Trajectory[] }[],
  o: Pick<CollectOptions, 'judge' | 'overlong' | 'signal'>,
): Promise<Scored> {
  const out: Scored = { judgeCalls: 0, judgeCached: 0, judgeFailed: new Set() };
  if (o.judge) {
    const j = o.judge;
    const limit = pLimit(Math.max(1, j.concurrency ?? 4));
    await Promise.all(
      groups
        .filter((g) => g.trajectories.length >= 2)
        .map((g) =>
          limit(async () => {
            if (o.signal?.aborted) return;
            try {
              const a = await applyRuler(g.trajectories, j.model, { ...j.options, signal: j.options.signal ?? o.signal });
              out.judgeCalls += a.calls;
              out.judgeCached += a.cached;
            } catch (err) {
              if (!(err instanceof JudgeError)) throw err;
              out.judgeCalls += err.calls; // the failed requests were made (and paid for) too
              out.judgeCached += err.cached;
              out.judgeFailed.add(g.group_id);
              out.judgeError ??= `${g.group_id}: ${err.message}`;
            }
          }),
        ),
    );
  }
  for (const g of groups) for (const t of g.trajectories) shapeOverlong(t, o.overlong.max, o.overlong.cache);
  return out;
}

/** Why the filter stage dropped a group, or undefined when it keeps it. */
export function dropReason(
  g: { group_id: string; trajectories: Trajectory[] },
  judgeFailed: Set<string>,
  o: Pick<CollectOptions, 'dynamicSampling' | 'dynamicSamplingOn'>,
): 'too_few' | 'judge' | 'no_signal' | undefined {
  // Episodes that a tool server's failure ended (finish 'error') are counted in the metrics,
  // not learned from: the policy did nothing wrong in them.
  if (g.trajectories.length < 2) return 'too_few';
  if (judgeFailed.has(g.group_id)) return 'judge';
  if (o.dynamicSampling && withoutSignal(g.trajectories, o.dynamicSamplingOn)) return 'no_signal';
  return undefined;
}

/**
 * A step's groups, round after round of the first four stages: sample tasks (sampler.ts) ->
 * roll out -> score -> filter (dynamic sampling), until tasks_per_step groups are kept or the cap
 * of rounds is hit.
 */
export async function collectGroups(o: CollectOptions): Promise<Collected> {
  const t0 = performance.now();
  const out: Collected = {
    kept: [],
    trajectories: [],
    groupsSeen: 0,
    droppedNoSignal: 0,
    droppedTooFew: 0,
    droppedJudge: 0,
    judgeCalls: 0,
    judgeCached: 0,
    rounds: 0,
    full: false,
    seconds: 0,
  };
  const maxRounds = o.dynamicSampling ? 1 + o.maxResampleRounds : 1;
  while (out.rounds < maxRounds && out.kept.length < o.tasksPerStep && !o.signal?.aborted) {
    const tasks = drawDistinct(o.tasksPerStep - out.kept.length, () => (o.curriculum ? o.curriculum.draw(o.sampler, o.step) : o.sampler.draw()));
    const r = await rollout(o.env, o.policy, tasks, {
      group: o.group,
      concurrency: o.concurrency,
      iteration: `train.${o.step}.${out.rounds}`,
      signal: o.signal,
    });
    out.rounds++;
    const scored = await scoreGroups(r.groups, o);
    out.judgeCalls += scored.judgeCalls;
    out.judgeCached += scored.judgeCached;
    out.judgeError ??= scored.judgeError;
    out.trajectories.push(...r.trajectories);
    for (const g of r.groups) {
      out.groupsSeen++;
      const why = dropReason(g, scored.judgeFailed, o);
      if (why === 'too_few') out.droppedTooFew++;
      else if (why === 'judge') out.droppedJudge++;
      else if (why === 'no_signal') out.droppedNoSignal++;
      else out.kept.push({ group_id: g.group_id, trajectories: g.trajectories });
    }
  }
  return { ...out, full: out.kept.length >= o.tasksPerStep, seconds: (performance.now() - t0) / 1000 };
}

/**
 * RULER's judge for a run (undefined when `ruler` is off): the ChatModel given in code, or one
 * made from the config's `judge` spec (makeChatModel of src/agents), with the config's mode,
 * votes, rubric and weights, and its answers cached in `<run dir>/judge-cache`. `close` closes a
 * judge made here (not one given).
 */
export async function rulerJudge(c: TrainConfig, runDir: string, given?: ChatModel): Promise<{ judge?: CollectOptions['judge']; close(): Promise<void> }> {
  if (c.ruler === 'off') return { close: async () => {} };
  let model = given;
  let close = async () => {};
  if (!model) {
    const made = await makeChatModel(c.judge, { baseURL: c.judge_base_url, apiKeyEnv: c.judge_api_key_env }).catch((err: Error) => {
      throw new Error(`judge: ${err.message}`, { cause: err });
    });
    model = made;
    close = async () => {
      await made.close?.();
    };
  }
  const options: RulerOptions = {
    mode: c.ruler,
    votes: c.ruler_votes,
    rubric: c.ruler_rubric,
    weights: { ruler: c.ruler_weight, verifier: c.ruler_verifier_weight },
    cacheDir: join(runDir, 'judge-cache'),
  };
  return { judge: { model, options }, close };
}
