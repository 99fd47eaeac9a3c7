/**
 * The curriculum (src/trainers/curriculum.ts) over the real generated suites: the draw rule (the
 * share at the level, the rest below it, per suite), the adaptive band and window, the schedule,
 * and resume: a curriculum restored from its JSON state and the sampler's count draws what an
 * uninterrupted one draws.
 */
import { describe, expect, it } from 'vitest';
import { generateSuite } from '../../src/env/suites/index.ts';
import type { Task, Trajectory } from '../../src/env/index.ts';
import { Curriculum, difficultyMix, parseSchedule, resolveConfig, suiteOf, TaskSampler, type CurriculumOptions } from '../../src/trainers/index.ts';

const calc = generateSuite('calculator', { train: 500, eval: 0 });
const kv = generateSuite('kv', { train: 500, eval: 0 });
const opts = (o: Partial<CurriculumOptions> = {}): CurriculumOptions => ({
  mode: 'adaptive',
  share: 0.5,
  low: 0.3,
  high: 0.7,
  window: 2,
  start: 1,
  schedule: '1:0',
  ...o,
});
/** The episodes of a batch: `n` per task, solved when `solved` says so. */
const episodes = (tasks: Task[], solved: (t: Task) => boolean, step = 1, n = 4): Trajectory[] =>
  tasks.flatMap((t) =>
    Array.from(
      { length: n },
      (_, i) =>
        ({
          task_id: t.id,
          group_id: `${t.id}@train.${step}.0`,
          difficulty: t.difficulty,
          success: solved(t),
          sample: i,
          finish: 'answer',
        }) as unknown as Trajectory,
    ),
  );
const count = <T>(xs: T[], key: (x: T) => string) => xs.reduce<Record<string, number>>((m, x) => ((m[key(x)] = (m[key(x)] ?? 0) + 1), m), {});

describe('curriculum', () => {
  it("knows a task's suite by its family, else by its id", () => {
    expect(suiteOf(calc[0]!)).toBe('calculator');
    expect(suiteOf({ id: 'kv-train-0001', family: 'kv.multi' })).toBe('kv');
    expect(suiteOf({ id: 'billing-42' })).toBe('billing');
    expect(suiteOf({ id: 'single' })).toBe('(tasks)');
  });

  it("draws the share at each suite's level and the rest uniformly below it", () => {
    const cur = new Curriculum([...calc, ...kv], opts(), { levels: { calculator: 4, kv: 1 }, windows: {} });
    const sampler = new TaskSampler([...calc, ...kv], 3);
    const drawn = Array.from({ length: 8000 }, () => cur.draw(sampler, 1));
    expect(sampler.draws).toBe(3 * 8000); // three numbers per draw: replayable from the count
    const c = drawn.filter((t) => suiteOf(t) === 'calculator');
    const k = drawn.filter((t) => suiteOf(t) === 'kv');
    expect(c.length / drawn.length).toBeCloseTo(0.5, 1); // suites weigh as many as their tasks
    expect(Object.keys(count(k, (t) => String(t.difficulty)))).toEqual(['1']); // the lowest level: nothing below
    const mix = count(c, (t) => String(t.difficulty));
    expect(Object.keys(mix).sort()).toEqual(['1', '2', '3', '4']);
    expect(mix['4']! / c.length).toBeGreaterThan(0.46);
    expect(mix['4']! / c.length).toBeLessThan(0.54);
    for (const d of ['1', '2', '3']) expect(mix[d]! / c.length).toBeCloseTo(0.5 / 3, 1);
    expect(difficultyMix(episodes(c.slice(0, 6), () => true))).toEqual(count(c.slice(0, 6), (t) => String(t.difficulty)));
  });

  it("adaptive: a full window above the band moves the level up, below it down, within the tasks' difficulties", () => {
    const upTo3 = calc.filter((t) => t.difficulty <= 3); // max_difficulty 3
    const cur = new Curriculum(upTo3, opts({ window: 2 }));
    const at = (d: number) => upTo3.filter((t) => t.difficulty === d).slice(0, 5);
    expect(cur.level('calculator', 1)).toBe(1);
    // One step above the band: the window (2 steps) is not full yet.
    expect(
      cur.update(
        1,
        episodes(at(1), () => true, 1),
      ),
    ).toEqual([]);
    // Episodes at other difficulties do not count for the level's window.
    expect(
      cur.update(
        2,
        episodes(at(2), () => true, 2),
      ),
    ).toEqual([]);
    expect(cur.snapshot().windows.calculator).toHaveLength(1);
    const up = cur.update(
      3,
      episodes(at(1), () => true, 3),
    );
    expect(up).toEqual([{ step: 3, suite: 'calculator', from: 1, to: 2, rate: 1, episodes: 40 }]);
    expect(cur.snapshot().windows.calculator).toEqual([]); // a new level starts a new window
    // Within the band (half solved): the level holds.
    const half = (t: Task) => Number(t.id.slice(-1)) % 2 === 0;
    const mixed = at(2)
      .filter(half)
      .slice(0, 2)
      .concat(
        at(2)
          .filter((t) => !half(t))
          .slice(0, 2),
      );
    cur.update(4, episodes(mixed, half, 4));
    expect(cur.update(5, episodes(mixed, half, 5))).toEqual([]);
    expect(cur.level('calculator', 6)).toBe(2);
    for (let s = 6; s < 12; s++)
      cur.update(
        s,
        episodes(at(cur.level('calculator', s)), () => true, s),
      );
    expect(cur.level('calculator', 12)).toBe(3); // never above the tasks' largest difficulty
    const down = [
      cur.update(
        12,
        episodes(at(3), () => false, 12),
      ),
      cur.update(
        13,
        episodes(at(3), () => false, 13),
      ),
    ].flat();
    expect(down.map((m) => [m.from, m.to, m.rate])).toEqual([[3, 2, 0]]);
    for (let s = 14; s < 24; s++)
      cur.update(
        s,
        episodes(at(cur.level('calculator', s)), () => false, s),
      );
    expect(cur.level('calculator', 24)).toBe(1); // never below the lowest
    // Failed episodes (finish error, a tool server's fault) are not counted.
    const errs = episodes(at(1), () => false, 24).map((t) => ({ ...t, finish: 'error' }) as Trajectory);
    const before = cur.snapshot();
    cur.update(24, errs);
    expect(cur.snapshot()).toEqual(before);
  });

  it('schedule: the difficulty of the last entry started, clamped to each suite', () => {
    expect(parseSchedule('1:0, 3:5,5:10')).toEqual([
      { difficulty: 1, from: 0 },
      { difficulty: 3, from: 5 },
      { difficulty: 5, from: 10 },
    ]);
    expect(() => parseSchedule('1:0,2:0')).toThrow(/curriculum_schedule: from_step must increase/);
    expect(() => parseSchedule('6:0')).toThrow(/curriculum_schedule: difficulty 6/);
    const cur = new Curriculum(
      calc.filter((t) => t.difficulty <= 4),
      opts({ mode: 'schedule', schedule: '2:3,5:10' }),
    );
    expect([1, 2, 3, 9, 10, 50].map((s) => cur.level('calculator', s))).toEqual([1, 1, 2, 2, 4, 4]);
    expect(
      cur.update(
        3,
        episodes(calc.slice(0, 3), () => true),
      ),
    ).toEqual([]);
    // The config checks it, naming the field.
    expect(() => resolveConfig({ curriculum: 'schedule', curriculum_schedule: '2:5,1:3' })).toThrow(/curriculum_schedule: from_step must increase/);
    expect(() => resolveConfig({ curriculum_schedule: 'two at 5' })).toThrow(/curriculum_schedule: /);
    expect(() => resolveConfig({ curriculum: 'adaptive', curriculum_low: 0.8, curriculum_high: 0.6 })).toThrow(/curriculum_low: 0.8 is above curriculum_high/);
  });

  it("a curriculum restored from its JSON state and the sampler's count draws what an uninterrupted one draws", () => {
    const tasks = [...calc, ...kv];
    // Success decided by the task (easy ones solved): the levels move, up and down.
    const solved = (t: Task) => t.difficulty <= 2 || Number(t.id.slice(-2)) % 3 === 0;
    const run = (steps: number[], cur: Curriculum, sampler: TaskSampler) =>
      steps.map((s) => {
        const drawn = Array.from({ length: 6 }, () => cur.draw(sampler, s));
        cur.update(s, episodes(drawn, solved, s));
        return { ids: drawn.map((t) => t.id), levels: cur.levels(s + 1) };
      });
    const straight = run([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], new Curriculum(tasks, opts({ window: 1 })), new TaskSampler(tasks, 11));
    expect(new Set(straight.map((x) => x.levels.calculator)).size).toBeGreaterThan(1);
    const cur = new Curriculum(tasks, opts({ window: 1 }));
    const sampler = new TaskSampler(tasks, 11);
    const first = run([1, 2, 3, 4], cur, sampler);
    // What a checkpoint stores, through JSON; then a new process.
    const stored = JSON.parse(JSON.stringify({ curriculum: cur.snapshot(), draws: sampler.draws }));
    const resumed = run([5, 6, 7, 8, 9, 10], new Curriculum(tasks, opts({ window: 1 }), stored.curriculum), new TaskSampler(tasks, 11, stored.draws));
    expect([...first, ...resumed]).toEqual(straight);
  });
});
