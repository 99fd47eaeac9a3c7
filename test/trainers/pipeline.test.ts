/**
 * The asynchronous pipeline's scheduling (StepPipeline) and staleness accounting (splitStale),
 * with a producer whose batches take real time: when each batch may start relative to the
 * consumer's steps, for max_staleness 0, 1 and 2; a stop; a producer's error. And the held-out
 * evaluation's pass@k / pass^k.
 */
import { describe, expect, it } from 'vitest';
import { splitStale, stalenessOf, StepPipeline, VersionSteps } from '../../src/trainers/pipeline.ts';
import { drawDistinct, evalFigures, noSignalReason } from '../../src/trainers/index.ts';
import type { Trajectory } from '../../src/env/index.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `steps` steps: producing a batch takes `produceMs`, training one `trainMs`; returns the event log. */
async function schedule(maxStaleness: number, steps: number, produceMs: number, trainMs: number) {
  const events: string[] = [];
  const pipe = new StepPipeline<number>(1, steps, maxStaleness, async (k) => {
    events.push(`start ${k}`);
    await sleep(produceMs);
    events.push(`made ${k}`);
    return k * 10;
  });
  const got: number[] = [];
  for (let k = 1; k <= steps; k++) {
    const v = await pipe.next(k);
    got.push(v!);
    events.push(`train ${k}`);
    await sleep(trainMs);
    events.push(`trained ${k}`);
    pipe.finished(k);
  }
  await pipe.stop();
  return { events, got };
}

const at = (events: string[], e: string) => {
  const i = events.indexOf(e);
  if (i < 0) throw new Error(`no event ${e} in ${events.join(', ')}`);
  return i;
};

describe('StepPipeline', () => {
  it('max_staleness 0 is the synchronous loop: a batch starts only after the step before it is finished', async () => {
    const { events, got } = await schedule(0, 4, 15, 15);
    expect(got).toEqual([10, 20, 30, 40]);
    expect(events).toEqual([
      'start 1',
      'made 1',
      'train 1',
      'trained 1',
      'start 2',
      'made 2',
      'train 2',
      'trained 2',
      'start 3',
      'made 3',
      'train 3',
      'trained 3',
      'start 4',
      'made 4',
      'train 4',
      'trained 4',
    ]);
  });

  it('max_staleness 1: the next batch is collected while the learner trains, never two ahead', async () => {
    const { events, got } = await schedule(1, 5, 20, 30);
    expect(got).toEqual([10, 20, 30, 40, 50]);
    for (let k = 1; k < 5; k++) expect(at(events, `start ${k + 1}`)).toBeLessThan(at(events, `trained ${k}`)); // overlap
    for (let k = 1; k + 2 <= 5; k++) expect(at(events, `start ${k + 2}`)).toBeGreaterThan(at(events, `trained ${k}`)); // bound
  });

  it('max_staleness 2: up to two batches ahead when training is the slow part', async () => {
    const { events } = await schedule(2, 5, 5, 40);
    expect(at(events, 'start 3')).toBeLessThan(at(events, 'trained 1'));
    for (let k = 1; k + 3 <= 5; k++) expect(at(events, `start ${k + 3}`)).toBeGreaterThan(at(events, `trained ${k}`));
  });

  it('stop ends the batch in flight through its signal; next then answers undefined', async () => {
    let sawAbort = false;
    const pipe = new StepPipeline<number>(1, 10, 1, async (k, signal) => {
      if (k === 1) return 1;
      await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
      sawAbort = true;
      return k;
    });
    expect(await pipe.next(1)).toBe(1);
    await sleep(10);
    await pipe.stop();
    expect(sawAbort).toBe(true);
    expect(await pipe.next(2)).toBeUndefined();
  });

  it("the run's own signal stops it too", async () => {
    const ac = new AbortController();
    const pipe = new StepPipeline<number>(3, 10, 0, async (k) => k, ac.signal);
    expect(await pipe.next(3)).toBe(3);
    ac.abort();
    expect(await pipe.next(4)).toBeUndefined();
    await pipe.stop();
  });

  it("a producer's error reaches the consumer at that step", async () => {
    const pipe = new StepPipeline<number>(1, 5, 1, async (k) => {
      if (k === 2) throw new Error('the tool server is gone');
      return k;
    });
    expect(await pipe.next(1)).toBe(1);
    await expect(pipe.next(2)).rejects.toThrow('the tool server is gone');
    await pipe.stop();
  });

  it('refuses a negative or fractional max_staleness', () => {
    expect(() => new StepPipeline(1, 2, -1, async () => 0)).toThrow(/max_staleness: must be an integer >= 0, got -1/);
    expect(() => new StepPipeline(1, 2, 0.5, async () => 0)).toThrow(/max_staleness/);
  });
});

const traj = (versions: (number | undefined)[]): Trajectory =>
  ({ turns: versions.map((v) => (v === undefined ? {} : { policy_version: v })) }) as unknown as Trajectory;

describe('staleness', () => {
  it('a trajectory is as stale as its oldest turn, measured against the weights the step trains from', () => {
    const v = new VersionSteps();
    v.note(7, 0); // the cold-start weights, version 7
    v.note(8, 1);
    v.note(9, 2);
    expect(stalenessOf(traj([9, 9]), 3, v)).toBe(0); // step 3 trains from step 2's weights (version 9)
    expect(stalenessOf(traj([8, 9]), 3, v)).toBe(1); // a reload between its turns: the first turn counts
    expect(stalenessOf(traj([7]), 3, v)).toBe(2);
    expect(stalenessOf(traj([undefined]), 3, v)).toBe(0); // a policy that reports no version
  });

  it('drops groups staler than the limit, counts them, and histograms the rest', () => {
    const v = new VersionSteps();
    v.note('a', 0);
    v.note('b', 1);
    v.note('c', 2);
    const groups = [
      { group_id: 'g1', trajectories: [traj(['c' as never]), traj(['c' as never])] },
      { group_id: 'g2', trajectories: [traj(['b' as never]), traj(['c' as never])] },
      { group_id: 'g3', trajectories: [traj(['a' as never]), traj(['c' as never])] },
    ];
    const s = splitStale(groups, 3, 1, v);
    expect(s.kept.map((g) => g.group_id)).toEqual(['g1', 'g2']);
    expect(s.dropped).toBe(1);
    expect(s.histogram).toEqual({ 0: 3, 1: 1 });
    expect(s.mean).toBeCloseTo(0.25, 12);
    expect(s.max).toBe(1);
  });
});

describe('held-out pass@k and pass^k (evalFigures)', () => {
  const ep = (task: string, success: boolean) => ({ task_id: task, success }) as unknown as Trajectory;
  it('averages the unbiased estimators over tasks: pass^4 needs all four samples of a task', () => {
    const ts = [
      ...[true, true, true, true].map((s) => ep('a', s)), // 4 of 4
      ...[true, true, true, false].map((s) => ep('b', s)), // 3 of 4
      ...[false, false, false, false].map((s) => ep('c', s)), // 0 of 4
      ...[true, false, false, false].map((s) => ep('d', s)), // 1 of 4
    ];
    const r = evalFigures(0, ts, 4);
    expect(r.pass_at_k!['1']).toBeCloseTo((1 + 0.75 + 0 + 0.25) / 4, 12);
    expect(r.pass_hat_k!['1']).toBeCloseTo(r.pass_at_k!['1']!, 12);
    // pass^2 = C(c,2)/C(4,2): a 6/6, b 3/6, c 0, d 0
    expect(r.pass_hat_k!['2']).toBeCloseTo((1 + 0.5) / 4, 12);
    expect(r.pass_hat_k!['4']).toBeCloseTo(1 / 4, 12); // only a
    expect(r.pass_at_k!['4']).toBeCloseTo(3 / 4, 12); // a, b, d
  });

  it('a task with fewer finished samples counts with those it has', () => {
    const r = evalFigures(0, [ep('a', true), ep('a', true), ep('b', true), ep('b', true), ep('b', false)], 3);
    expect(r.pass_hat_k!['3']).toBeCloseTo((1 + 0) / 2, 12); // a: 2 of 2 (k capped at 2); b: 2 of 3 → 0
  });
});

describe('no learning signal (noSignalReason)', () => {
  const ep = (task: string, success: boolean, reward: number, finish = 'answer', error?: string) =>
    ({ task_id: task, success, reward, finish, ...(error ? { error } : {}) }) as unknown as Trajectory;
  const got = (trajectories: Trajectory[], droppedNoSignal = 0) => ({ trajectories, droppedNoSignal }) as unknown as Parameters<typeof noSignalReason>[1];
  it('a group with different rewards is signal; equal rewards in every group are not, counted by kind', () => {
    const mixed = [{ trajectories: [ep('a', true, 1), ep('a', false, 0)] }];
    expect(noSignalReason(mixed, got(mixed[0]!.trajectories), { weights_changed: true })).toBeUndefined();
    const flat = [{ trajectories: [ep('a', true, 1), ep('a', true, 1)] }, { trajectories: [ep('b', false, 0), ep('b', false, 0)] }];
    expect(
      noSignalReason(
        flat,
        got(
          flat.flatMap((g) => g.trajectories),
          3,
        ),
        undefined,
      ),
    ).toBe('every one of the 2 groups had equal rewards (1 all failed, 1 all solved, 0 other); 3 more dropped by dynamic sampling for the same reason');
  });
  it('every episode failed: the most frequent cause; weights left bit-identical: the learner step', () => {
    const failed = [ep('a', false, 0, 'error', 'a tool server failed: gone'), ep('a', false, 0, 'error', 'a tool server failed: gone')];
    expect(noSignalReason([], got(failed), undefined)).toBe('every one of the 2 episodes failed (2 x a tool server failed: gone)');
    const mixed = [{ trajectories: [ep('a', true, 1), ep('a', false, 0)] }];
    expect(noSignalReason(mixed, got(mixed[0]!.trajectories), { weights_changed: false, lr: 1e-9, grad_norm: 0.5 })).toMatch(
      /^the learner's step left the weights bit-identical \(lr 1e-9; grad norm 0\.5\)/,
    );
  });
});

describe('a step draws tasks_per_step distinct tasks (drawDistinct)', () => {
  it('a task drawn twice is drawn again; a pool too small gives what it has', () => {
    const seq = ['a', 'b', 'a', 'c', 'b', 'd'].map((id) => ({ id }));
    let i = 0;
    expect(drawDistinct(4, () => seq[i++ % seq.length]!).map((t) => t.id)).toEqual(['a', 'b', 'c', 'd']);
    expect(i).toBe(6);
    let j = 0;
    const two = [{ id: 'x' }, { id: 'y' }];
    expect(drawDistinct(3, () => two[j++ % 2]!).map((t) => t.id)).toEqual(['x', 'y']);
    expect(j).toBe(60); // bounded: 20 draws per task asked for
  });
});
