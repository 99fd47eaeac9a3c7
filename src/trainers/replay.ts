/**
 * A replay buffer of past groups (docs/training.md, "Replay"). After each collected batch the
 * fresh groups with signal (rewards not all equal: a zero-advantage group never goes in) are
 * added, with the step they were collected for and their priority, the mean |advantage| of the
 * group; the oldest go when more than `capacity` are held. Each step, before the fresh tasks are
 * drawn, the groups older than `maxAge` steps (step − the step collected for) are evicted and
 * round(fraction × tasks_per_step) groups are drawn (distinct, at most tasks_per_step − 1 and at
 * most what is held) without being removed: uniformly, or with probability proportional to their
 * priority (`advantage`). A replayed group keeps its trajectories whole: token ids, the sampler's
 * logprobs and each turn's policy_version, so the pipeline sees its real staleness and the learner
 * corrects it (is_correction; `auto` is token_truncate with replay on).
 *
 * The buffer lives in the producer, updated in batch order, and draws with its own seeded
 * generator; `snapshot` (entries and the generator's count) is stored with each checkpoint, and
 * `restore` brings it back, so a resumed run draws what an uninterrupted one draws.
 */
import { CountedRandom } from '../../lib/index.ts';
import { groupAdvantages, isZeroVariance } from './advantages.ts';
import type { KeptGroup } from './batch.ts';
import type { ReplayPriority } from './options.ts';

export interface ReplayOptions {
  /** The share of a step's groups drawn from the buffer. */
  fraction: number;
  /** Groups held at most (the oldest go first). */
  capacity: number;
  /** Steps a group may be replayed for after the step it was collected for. */
  maxAge: number;
  priority: ReplayPriority;
  seed: number;
  /** The advantage estimator of the priority (group-normalised, or centred only). */
  advantage: 'grpo' | 'dr_grpo';
}

export interface ReplayEntry {
  /** The step the group was collected for. */
  step: number;
  /** Its mean |advantage|. */
  priority: number;
  group: KeptGroup;
}

export interface ReplaySnapshot {
  /** Numbers drawn from the buffer's generator so far. */
  draws: number;
  entries: ReplayEntry[];
}

export interface ReplayDraw {
  groups: KeptGroup[];
  /** Each replayed group's age: the step it is drawn for − the step it was collected for. */
  ages: number[];
  /** Groups evicted for age before the draw. */
  evicted: number;
}

/** The mean |advantage| of a group; 0 when its rewards are all equal (no signal). */
export function groupPriority(g: KeptGroup, advantage: ReplayOptions['advantage']): number {
  const rewards = g.trajectories.map((t) => t.reward);
  if (isZeroVariance(rewards)) return 0;
  const a = groupAdvantages(rewards, advantage);
  return a.reduce((s, x) => s + Math.abs(x), 0) / a.length;
}

export class ReplayBuffer {
  private entries: ReplayEntry[] = [];
  private readonly rng: CountedRandom;

  constructor(
    readonly o: ReplayOptions,
    snapshot?: ReplaySnapshot,
  ) {
    if (!(o.fraction > 0 && o.fraction < 1)) throw new Error(`replay_fraction: must be in (0, 1) for a replay buffer, got ${o.fraction}`);
    if (!(Number.isInteger(o.capacity) && o.capacity >= 1)) throw new Error(`replay_capacity: must be an integer >= 1, got ${o.capacity}`);
    if (!(Number.isInteger(o.maxAge) && o.maxAge >= 1)) throw new Error(`replay_max_age: must be an integer >= 1, got ${o.maxAge}`);
    this.rng = new CountedRandom(o.seed);
    this.restore(snapshot);
  }

  get size(): number {
    return this.entries.length;
  }

  /** Back to a snapshot (undefined: empty, the generator at its start). */
  restore(s?: ReplaySnapshot): void {
    this.entries = [...(s?.entries ?? [])];
    this.rng.seek(s?.draws ?? 0);
  }

  /** What a checkpoint stores: the entries (shared: never changed once added) and the generator's count. */
  snapshot(): ReplaySnapshot {
    return { draws: this.rng.count, entries: [...this.entries] };
  }

  /** The number of groups to replay in a batch of `tasksPerStep`: round(fraction × tasksPerStep), at most tasksPerStep − 1. */
  target(tasksPerStep: number): number {
    return Math.max(0, Math.min(tasksPerStep - 1, Math.round(this.o.fraction * tasksPerStep)));
  }

  /** Adds the groups collected for `step` that carry signal; returns how many went in. */
  add(step: number, groups: KeptGroup[]): number {
    let added = 0;
    for (const g of groups) {
      const priority = groupPriority(g, this.o.advantage);
      if (priority <= 0) continue; // zero advantage: nothing to learn from, ever
      this.entries.push({ step, priority, group: g });
      added++;
    }
    while (this.entries.length > this.o.capacity) this.entries.shift();
    return added;
  }

  /** Evicts the groups too old for `step`, then draws up to `n` distinct groups for it. */
  draw(step: number, n: number): ReplayDraw {
    const before = this.entries.length;
    this.entries = this.entries.filter((e) => step - e.step <= this.o.maxAge);
    const evicted = before - this.entries.length;
    const pool = this.entries.filter((e) => e.step < step); // never a group of this step's own batch
    const chosen: ReplayEntry[] = [];
    while (chosen.length < n && pool.length > 0) {
      const u = this.random();
      let i: number;
      if (this.o.priority === 'advantage') {
        const total = pool.reduce((s, e) => s + e.priority, 0);
        let acc = 0;
        i = pool.length - 1;
        for (let j = 0; j < pool.length; j++) {
          acc += pool[j]!.priority;
          if (u * total < acc) {
            i = j;
            break;
          }
        }
      } else {
        i = Math.floor(u * pool.length);
      }
      chosen.push(pool.splice(i, 1)[0]!);
    }
    return { groups: chosen.map((e) => e.group), ages: chosen.map((e) => step - e.step), evicted };
  }

  private random(): number {
    return this.rng.next();
  }
}
