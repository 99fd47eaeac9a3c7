/**
 * Asynchronous training (docs/training.md, "Asynchronous training"): the rollouts of the next
 * steps are collected while the learner trains, at most `maxStaleness` steps ahead.
 *
 * StepPipeline runs one producer, which makes the batches of steps first, first + 1, ... in order
 * (one at a time: the task sampler's draws stay in order whatever the timing), and hands them to
 * one consumer (the training loop). The batch of step k may start once the consumer has finished
 * step k − 1 − maxStaleness, so that its first turns are sampled by weights at most maxStaleness
 * steps older than those it is trained from. maxStaleness 0 is the synchronous loop: the batch of
 * step k starts only when step k − 1 is finished (trained, weights reloaded, evaluated).
 *
 * Staleness (stalenessOf): the learner trains step k from the weights of step k − 1; a turn
 * sampled by the weights of step j is k − 1 − j steps stale; a trajectory is as stale as its
 * oldest turn, a group as its stalest trajectory.
 */
import { setMaxListeners } from 'node:events';
import type { Trajectory } from '../env/index.ts';
import type { KeptGroup } from './batch.ts';

export class StepPipeline<T> {
  private finishedStep: number;
  private readonly ready = new Map<number, { value?: T; error?: unknown }>();
  private readonly ac = new AbortController();
  /** Who waits for something to change: the producer (at its gate), the consumer (for a batch). */
  private readonly waiters = new Set<() => void>();
  private readonly producer: Promise<void>;
  private ended = false;

  /**
   * Produces steps `first`..`last` with `produce(step, signal)`; the consumer has finished step
   * `first − 1`. `signal` (the run's) stops it too.
   */
  constructor(
    private readonly first: number,
    private readonly last: number,
    private readonly maxStaleness: number,
    private readonly produce: (step: number, signal: AbortSignal) => Promise<T>,
    signal?: AbortSignal,
  ) {
    if (!Number.isInteger(maxStaleness) || maxStaleness < 0) throw new Error(`max_staleness: must be an integer >= 0, got ${maxStaleness}`);
    this.finishedStep = first - 1;
    if (signal) {
      if (signal.aborted) this.ac.abort();
      else signal.addEventListener('abort', () => this.ac.abort(), { once: true });
    }
    setMaxListeners(100_000, this.ac.signal); // every episode and tool call in flight listens to it (and lets go when done)
    this.ac.signal.addEventListener('abort', () => this.poke(), { once: true });
    this.producer = this.run();
  }

  private poke(): void {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }

  private sleep(): Promise<void> {
    return new Promise((r) => this.waiters.add(r));
  }

  private async run(): Promise<void> {
    try {
      for (let k = this.first; k <= this.last; k++) {
        while (this.finishedStep < k - 1 - this.maxStaleness && !this.ac.signal.aborted) await this.sleep();
        if (this.ac.signal.aborted) return;
        try {
          const value = await this.produce(k, this.ac.signal);
          if (this.ac.signal.aborted) return;
          this.ready.set(k, { value });
        } catch (error) {
          this.ready.set(k, { error });
          return;
        } finally {
          this.poke();
        }
      }
    } finally {
      this.ended = true;
      this.poke();
    }
  }

  /** The batch of `step` (the steps are asked in order); undefined when the pipeline was stopped first. */
  async next(step: number): Promise<T | undefined> {
    for (;;) {
      const r = this.ready.get(step);
      if (r) {
        this.ready.delete(step);
        if ('error' in r && r.error !== undefined) throw r.error;
        return r.value;
      }
      if (this.ended || this.ac.signal.aborted) return undefined;
      await this.sleep();
    }
  }

  /** The consumer finished `step` (trained, weights reloaded, evaluated): later batches may start. */
  finished(step: number): void {
    this.finishedStep = step;
    this.poke();
  }

  /** Stops producing and waits for the batch in flight to end (its work is lost). */
  async stop(): Promise<void> {
    this.ac.abort();
    await this.producer;
  }
}

/** The training step each policy version's weights came from (recorded as the loop reloads them). */
export class VersionSteps {
  private readonly steps = new Map<string, number>();

  /** Versions noted before (a resumed run's, stored with its checkpoint). */
  constructor(known: Record<string, number> = {}) {
    for (const [v, s] of Object.entries(known)) this.steps.set(v, s);
  }

  /** The versions of the steps from `fromStep` on, as a record (what a checkpoint stores). */
  since(fromStep: number): Record<string, number> {
    return Object.fromEntries([...this.steps].filter(([, s]) => s >= fromStep));
  }

  note(version: string | number | undefined, step: number): void {
    if (version !== undefined) this.steps.set(String(version), step);
  }

  /** The step of a version; undefined for a version never noted (or none). */
  stepOf(version: string | number | undefined): number | undefined {
    return version === undefined ? undefined : this.steps.get(String(version));
  }
}

/**
 * How stale a trajectory is when step `step` trains on it: (step − 1) − the step of its oldest
 * turn's weights; 0 when no turn says its version (a policy that does not report one).
 */
export function stalenessOf(t: Trajectory, step: number, versions: VersionSteps): number {
  let oldest: number | undefined;
  for (const turn of t.turns) {
    const s = versions.stepOf(turn.policy_version);
    if (s !== undefined && (oldest === undefined || s < oldest)) oldest = s;
  }
  return oldest === undefined ? 0 : Math.max(0, step - 1 - oldest);
}

export interface StalenessSplit {
  kept: KeptGroup[];
  /** Groups with a trajectory staler than the limit (not trained on). */
  dropped: number;
  /** Trajectories of the kept groups by staleness: { "0": n, "1": n, ... }. */
  histogram: Record<string, number>;
  mean: number;
  max: number;
}

/**
 * Splits a step's groups by staleness: a group with a trajectory staler than its limit is dropped
 * (and counted). `limit` is one for all, or each group's (replayed groups, replay.ts, have their
 * own: they are stale by design, up to replay_max_age steps more than fresh ones).
 */
export function splitStale(groups: KeptGroup[], step: number, limit: number | ((g: KeptGroup) => number), versions: VersionSteps): StalenessSplit {
  const kept: KeptGroup[] = [];
  const histogram: Record<string, number> = {};
  let dropped = 0;
  let sum = 0;
  let n = 0;
  let max = 0;
  for (const g of groups) {
    const s = g.trajectories.map((t) => stalenessOf(t, step, versions));
    if (Math.max(...s) > (typeof limit === 'number' ? limit : limit(g))) {
      dropped++;
      continue;
    }
    kept.push(g);
    for (const x of s) {
      histogram[x] = (histogram[x] ?? 0) + 1;
      sum += x;
      n++;
      max = Math.max(max, x);
    }
  }
  return { kept, dropped, histogram, mean: n ? sum / n : 0, max };
}
