/**
 * The first stage of a training step, sampling tasks: a seeded sampler over the train tasks that
 * can be replayed to any point (resume, rollback), and the draw of a step's distinct tasks.
 */
import { CountedRandom } from '../../lib/index.ts';
import type { Task } from '../env/index.ts';

/** Draws train tasks with a seeded generator that can be replayed to any point (resume, rollback). */
export class TaskSampler {
  private readonly rng: CountedRandom;

  constructor(
    private readonly tasks: Task[],
    seed: number,
    draws = 0,
  ) {
    if (tasks.length === 0) throw new Error('TaskSampler: no tasks to sample from');
    this.rng = new CountedRandom(seed, draws);
  }

  /** Draws made so far (recorded with each checkpoint). */
  get draws(): number {
    return this.rng.count;
  }

  /** Replays the generator to `draws` draws from its start. */
  seek(draws: number): void {
    this.rng.seek(draws);
  }

  draw(): Task {
    return this.tasks[Math.floor(this.random() * this.tasks.length)]!;
  }

  /** One number of the generator, in [0, 1), counted as a draw (the curriculum draws with these). */
  random(): number {
    return this.rng.next();
  }
}

/**
 * `need` distinct tasks from `draw` (the sampler, or the curriculum over it): a task drawn twice is
 * drawn again, so that a step trains on tasks_per_step groups, not fewer. Bounded: a pool with
 * fewer distinct tasks than `need` gives what it has after `maxDraws` draws.
 */
export function drawDistinct<T extends { id: string }>(need: number, draw: () => T, maxDraws = 20 * need): T[] {
  const out = new Map<string, T>();
  for (let n = 0; out.size < need && n < maxDraws; n++) {
    const t = draw();
    if (!out.has(t.id)) out.set(t.id, t);
  }
  return [...out.values()];
}
