/**
 * A curriculum on task difficulty (docs/training.md, "Curriculum"). Tasks have a difficulty
 * 1..5; a suite's tasks (the part of a task's family before its first '.', else the part of its
 * id before the first '-': `calculator.arith`, `calculator-train-0007` → calculator) have a
 * current level. Each draw of a train task:
 *   1. a task drawn uniformly from all the train tasks picks the suite (suites weigh as many as
 *      they have tasks, as in the uniform draw);
 *   2. with probability `share` the difficulty is the suite's level, else one of the suite's
 *      difficulties below the level, uniformly (review of what came before; the level itself
 *      when none is lower);
 *   3. a task of that suite and difficulty, uniformly.
 * Three numbers of the run's TaskSampler per draw, so the draws replay from its count.
 *
 * adaptive: after each collected batch (in the producer, in batch order: the levels do not depend
 * on the learner's timing), each suite's finished fresh episodes at its level are added to a
 * window of the last `window` steps at that level; once the window is full, its success rate
 * moves the level to the next difficulty the suite has when above `high`, to the one before when
 * below `low` (within the suite's difficulties, which max_difficulty has already cut), and the
 * window starts again. schedule: a fixed list `difficulty:from_step,...`; the level of step k is
 * the difficulty of the last entry with from_step <= k (before the first: the lowest), clamped to
 * each suite's difficulties.
 *
 * The state (levels, windows) is small and JSON: the loop stores the state after each batch with
 * that step's checkpoint, so `--resume` draws what an uninterrupted run draws.
 */
import type { Task, Trajectory } from '../env/index.ts';
import { parseSchedule, type CurriculumMode } from './options.ts';
import type { TaskSampler } from './sampler.ts';

export interface CurriculumOptions {
  mode: CurriculumMode;
  /** The share of a step's draws at the current level (the rest below it). */
  share: number;
  /** adaptive: the band of success rates that keeps the level: below `low` down, above `high` up. */
  low: number;
  high: number;
  /** adaptive: steps at a level whose episodes decide (the window must be full to move). */
  window: number;
  /** adaptive: the first level (clamped to each suite's difficulties). */
  start: number;
  /** schedule: `difficulty:from_step` entries, separated by commas. */
  schedule: string;
}

export interface CurriculumState {
  /** adaptive: each suite's level. */
  levels: Record<string, number>;
  /** adaptive: each suite's window at its level, one entry per step with episodes there. */
  windows: Record<string, { step: number; n: number; ok: number }[]>;
}

export interface LevelMove {
  step: number;
  suite: string;
  from: number;
  to: number;
  /** The window's success rate that moved it. */
  rate: number;
  episodes: number;
}

/** The suite a task belongs to: its family's prefix, else its id's prefix before the first '-'. */
export function suiteOf(t: Pick<Task, 'id' | 'family'>): string {
  if (t.family) return t.family.split('.')[0]!;
  const i = t.id.indexOf('-');
  return i > 0 ? t.id.slice(0, i) : '(tasks)';
}

export class Curriculum {
  readonly suites: string[];
  /** Each suite's difficulties (ascending) and its tasks by difficulty. */
  private readonly pools = new Map<string, { difficulties: number[]; byDifficulty: Map<number, Task[]> }>();
  private readonly suiteOfTask = new Map<string, string>();
  private readonly schedule: { difficulty: number; from: number }[];
  private state: CurriculumState = { levels: {}, windows: {} };

  constructor(
    private readonly tasks: Task[],
    readonly o: CurriculumOptions,
    state?: CurriculumState,
  ) {
    if (o.mode === 'off') throw new Error('Curriculum: mode off has no curriculum (draw uniformly with TaskSampler.draw)');
    if (tasks.length === 0) throw new Error('Curriculum: no tasks');
    if (!(o.share >= 0 && o.share <= 1)) throw new Error(`curriculum_share: must be in [0, 1], got ${o.share}`);
    if (!(o.low >= 0 && o.low <= o.high && o.high <= 1))
      throw new Error(`curriculum_low, curriculum_high: need 0 <= low <= high <= 1, got ${o.low} and ${o.high}`);
    if (!(Number.isInteger(o.window) && o.window >= 1)) throw new Error(`curriculum_window: must be an integer >= 1, got ${o.window}`);
    this.schedule = o.mode === 'schedule' ? parseSchedule(o.schedule) : [];
    for (const t of tasks) {
      const s = suiteOf(t);
      this.suiteOfTask.set(t.id, s);
      let p = this.pools.get(s);
      if (!p) this.pools.set(s, (p = { difficulties: [], byDifficulty: new Map() }));
      const list = p.byDifficulty.get(t.difficulty) ?? [];
      list.push(t);
      p.byDifficulty.set(t.difficulty, list);
    }
    for (const p of this.pools.values()) p.difficulties = [...p.byDifficulty.keys()].sort((a, b) => a - b);
    this.suites = [...this.pools.keys()].sort();
    this.restore(state);
  }

  /** Back to a stored state (undefined: the start: every suite at `start`, clamped). */
  restore(state?: CurriculumState): void {
    const levels: Record<string, number> = {};
    const windows: CurriculumState['windows'] = {};
    for (const s of this.suites) {
      levels[s] = this.clamp(s, state?.levels[s] ?? this.o.start);
      windows[s] = (state?.windows[s] ?? []).map((w) => ({ ...w }));
    }
    this.state = { levels, windows };
  }

  /** A copy of the state (what a checkpoint stores). */
  snapshot(): CurriculumState {
    return { levels: { ...this.state.levels }, windows: Object.fromEntries(Object.entries(this.state.windows).map(([k, v]) => [k, v.map((w) => ({ ...w }))])) };
  }

  /** The suite's difficulty nearest `d` that it has, at most `d` where one is (else its lowest). */
  private clamp(suite: string, d: number): number {
    const ds = this.pools.get(suite)!.difficulties;
    let best = ds[0]!;
    for (const x of ds) if (x <= d) best = x;
    return best;
  }

  /** The level of a suite at a step. */
  level(suite: string, step: number): number {
    if (this.o.mode === 'schedule') {
      let d = this.schedule[0]!.difficulty;
      let lowest = true;
      for (const e of this.schedule) {
        if (e.from <= step) {
          d = e.difficulty;
          lowest = false;
        }
      }
      return lowest ? this.pools.get(suite)!.difficulties[0]! : this.clamp(suite, d);
    }
    return this.state.levels[suite]!;
  }

  /** Every suite's level at a step. */
  levels(step: number): Record<string, number> {
    return Object.fromEntries(this.suites.map((s) => [s, this.level(s, step)]));
  }

  /** Draws a train task for `step` (three of the sampler's numbers). */
  draw(sampler: TaskSampler, step: number): Task {
    const pick = this.tasks[Math.floor(sampler.random() * this.tasks.length)]!;
    const suite = this.suiteOfTask.get(pick.id)!;
    const pool = this.pools.get(suite)!;
    const level = this.level(suite, step);
    const below = pool.difficulties.filter((d) => d < level);
    const u = sampler.random();
    const difficulty =
      u < this.o.share || below.length === 0 ? level : below[Math.min(below.length - 1, Math.floor(((u - this.o.share) / (1 - this.o.share)) * below.length))]!;
    const list = pool.byDifficulty.get(difficulty)!;
    return list[Math.floor(sampler.random() * list.length)]!;
  }

  /**
   * adaptive: after the batch of `step` (drawn at the levels of `levels`), the finished episodes at
   * each suite's level go into its window; a full window moves the level. Returns the moves.
   * schedule: nothing to learn (no moves).
   */
  update(step: number, trajectories: Trajectory[]): LevelMove[] {
    if (this.o.mode !== 'adaptive') return [];
    const moves: LevelMove[] = [];
    for (const s of this.suites) {
      const level = this.state.levels[s]!;
      const at = trajectories.filter((t) => t.finish !== 'error' && t.difficulty === level && this.suiteOfTask.get(t.task_id) === s);
      if (at.length === 0) continue;
      const win = this.state.windows[s]!;
      win.push({ step, n: at.length, ok: at.filter((t) => t.success).length });
      while (win.length > this.o.window) win.shift();
      if (win.length < this.o.window) continue;
      const n = win.reduce((a, w) => a + w.n, 0);
      const rate = win.reduce((a, w) => a + w.ok, 0) / n;
      const ds = this.pools.get(s)!.difficulties;
      const i = ds.indexOf(level);
      const to = rate > this.o.high && i + 1 < ds.length ? ds[i + 1]! : rate < this.o.low && i > 0 ? ds[i - 1]! : level;
      if (to !== level) {
        this.state.levels[s] = to;
        this.state.windows[s] = [];
        moves.push({ step, suite: s, from: level, to, rate, episodes: n });
      }
    }
    return moves;
  }
}

/** The groups of a batch per difficulty: { "1": n, ... } (a group is one task's rollouts). */
export function difficultyMix(trajectories: Pick<Trajectory, 'group_id' | 'difficulty'>[]): Record<string, number> {
  const seen = new Map<string, number>();
  for (const t of trajectories) seen.set(t.group_id, t.difficulty);
  const mix: Record<string, number> = {};
  for (const d of seen.values()) mix[d] = (mix[d] ?? 0) + 1;
  return mix;
}
