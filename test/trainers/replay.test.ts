/**
 * The replay buffer (src/trainers/replay.ts): what goes in (groups with signal only), what goes
 * out (capacity, age), how it draws (uniform, by |advantage|), resume from its JSON snapshot, and
 * a short real run (the committed model, the PyTorch learner, the calculator server) with replay
 * and the adaptive curriculum on: replayed groups reach the learner with their real staleness,
 * corrected by the truncated importance weights.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Trajectory } from '../../src/env/index.ts';
import { groupPriority, learnerConfig, ReplayBuffer, resolveConfig, train, type KeptGroup, type ReplayOptions } from '../../src/trainers/index.ts';

const opts = (o: Partial<ReplayOptions> = {}): ReplayOptions => ({
  fraction: 0.5,
  capacity: 8,
  maxAge: 3,
  priority: 'uniform',
  seed: 5,
  advantage: 'grpo',
  ...o,
});
const group = (id: string, rewards: number[]): KeptGroup => ({
  group_id: id,
  trajectories: rewards.map((reward, i) => ({ id: `${id}/${i}`, reward, success: reward > 0, turns: [] }) as unknown as Trajectory),
});

describe('replay buffer', () => {
  it('takes only groups with signal; drops the oldest over capacity and the too old at a draw', () => {
    const b = new ReplayBuffer(opts({ capacity: 3, maxAge: 2 }));
    expect(b.add(1, [group('a', [1, 0, 0, 1]), group('zero', [1, 1, 1, 1]), group('none', [0, 0, 0, 0]), group('b', [0.5, 0.2])])).toBe(2);
    expect(b.snapshot().entries.map((e) => e.group.group_id)).toEqual(['a', 'b']);
    b.add(2, [group('c', [1, 0]), group('d', [0, 1])]);
    expect(b.snapshot().entries.map((e) => e.group.group_id)).toEqual(['b', 'c', 'd']); // capacity 3: 'a' went first
    // Step 4: groups of step 1 are 3 steps old (> maxAge 2): evicted before the draw.
    const d = b.draw(4, 5);
    expect(d.evicted).toBe(1);
    expect(d.groups.map((g) => g.group_id).sort()).toEqual(['c', 'd']);
    expect(d.ages).toEqual([2, 2]);
    expect(b.size).toBe(2); // drawn groups stay (until too old or pushed out)
    // Never a group of the step's own batch.
    b.add(4, [group('e', [1, 0])]);
    expect(
      b
        .draw(4, 5)
        .groups.map((g) => g.group_id)
        .sort(),
    ).toEqual(['c', 'd']);
    // round(fraction × tasks_per_step), at most tasks_per_step − 1.
    expect(new ReplayBuffer(opts({ fraction: 0.25 })).target(12)).toBe(3);
    expect(new ReplayBuffer(opts({ fraction: 0.9 })).target(4)).toBe(3);
    expect(() => new ReplayBuffer(opts({ capacity: 0 }))).toThrow(/replay_capacity: /);
  });

  it('priority advantage draws in proportion to the mean |advantage|; uniform does not', () => {
    // Centred advantages (dr_grpo): [1, 0] → ±0.5, mean |A| 0.5; [3, 0] → ±1.5, mean |A| 1.5.
    expect(groupPriority(group('x', [3, 0]), 'dr_grpo')).toBeCloseTo(1.5, 12);
    expect(groupPriority(group('x', [1, 1]), 'grpo')).toBe(0);
    const share = (priority: ReplayOptions['priority']) => {
      const b = new ReplayBuffer(opts({ priority, advantage: 'dr_grpo', maxAge: 100000 }));
      b.add(0, [group('low', [1, 0]), group('high', [3, 0])]);
      let high = 0;
      for (let s = 1; s <= 6000; s++) if (b.draw(s, 1).groups[0]!.group_id === 'high') high++;
      return high / 6000;
    };
    expect(share('advantage')).toBeGreaterThan(0.73);
    expect(share('advantage')).toBeLessThan(0.77);
    expect(share('uniform')).toBeGreaterThan(0.48);
    expect(share('uniform')).toBeLessThan(0.52);
  });

  it('a buffer restored from its JSON snapshot draws what an uninterrupted one draws', () => {
    const steps = (b: ReplayBuffer, from: number, to: number) => {
      const out: string[][] = [];
      for (let s = from; s <= to; s++) {
        out.push(b.draw(s, 3).groups.map((g) => g.group_id));
        b.add(
          s,
          Array.from({ length: 4 }, (_, i) => group(`s${s}g${i}`, i === 3 ? [1, 1] : [i, 0, 1])),
        );
      }
      return out;
    };
    const straight = steps(new ReplayBuffer(opts({ priority: 'advantage' })), 1, 12);
    const first = new ReplayBuffer(opts({ priority: 'advantage' }));
    const a = steps(first, 1, 6);
    const stored = JSON.parse(JSON.stringify(first.snapshot()));
    const b = steps(new ReplayBuffer(opts({ priority: 'advantage' }), stored), 7, 12);
    expect([...a, ...b]).toEqual(straight);
    expect(straight.flat().some((id) => id.endsWith('g3'))).toBe(false); // the zero-advantage groups never
  });

  it('replay on: is_correction auto is token_truncate, also in the synchronous loop', () => {
    const lc = (o: Parameters<typeof resolveConfig>[0]) => learnerConfig(resolveConfig(o), { totalSteps: 1, policyTokenBudget: 1 }).is_correction;
    expect(lc({ max_staleness: 0 })).toBe('none');
    expect(lc({ max_staleness: 0, replay_fraction: 0.25 })).toBe('token_truncate');
    expect(lc({ max_staleness: 0, replay_fraction: 0.25, is_correction: 'sequence_mask' })).toBe('sequence_mask');
    expect(() => resolveConfig({ replay_fraction: 1 })).toThrow(/replay_fraction: /);
  });

  it('a short real run: replayed groups reach the learner with their real staleness, corrected, and the buffer is stored with the checkpoint', async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-replay-')), 'run');
    const MODEL = join(import.meta.dirname, '..', '..', 'models', 'calc-tiny');
    const logs: string[] = [];
    await train({
      config: resolveConfig({
        preset: 'art',
        suite: 'calculator',
        max_difficulty: 2,
        model: MODEL,
        steps: 3,
        tasks_per_step: 4,
        group: 4,
        eval_limit: 4,
        eval_samples: 1,
        eval_every: 0,
        max_staleness: 0,
        dynamic_sampling: true,
        replay_fraction: 0.5,
        replay_max_age: 2,
        curriculum: 'adaptive',
      }),
      runDir,
      onLog: (l) => logs.push(l),
    });
    const m = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown> & { staleness_hist: Record<string, number>; replayed_group_ids: string[] });
    expect(m.map((x) => x.step)).toEqual([1, 2, 3]);
    expect(m[0]!.replay_groups).toBe(0); // nothing in the buffer yet
    for (const x of m.slice(1)) {
      expect(x.replay_groups).toBe(2); // round(0.5 × 4); dynamic sampling filled the buffer with groups with signal
      expect(x.replayed_group_ids.every((id) => !id.includes(`@train.${x.step}.`))).toBe(true);
      // The learner trained the replayed groups with the fresh ones, corrected (token_truncate).
      expect(x.groups).toBe(Number(x.groups_kept) + 2);
      expect(typeof x.is_weight_mean).toBe('number');
      // Synchronous: fresh groups are 0 steps stale, replayed ones 1 or 2 (never dropped).
      expect(x.stale_groups_dropped).toBe(0);
      const stale = Object.entries(x.staleness_hist)
        .filter(([k]) => Number(k) > 0)
        .reduce((n, [, v]) => n + v, 0);
      expect(stale).toBeGreaterThanOrEqual(2 * 2);
      expect(Number(x.replay_age_mean)).toBeGreaterThanOrEqual(1);
      expect(Number(x.replay_fraction)).toBeCloseTo(2 / Number(x.groups), 12);
    }
    expect(m[0]!.curriculum_levels).toEqual({ calculator: 1 });
    expect(m[0]!.difficulty_mix).toBeDefined();
    // state.json names the buffer of its step; the files of earlier steps are gone.
    const state = JSON.parse(readFileSync(join(runDir, 'state.json'), 'utf8')) as {
      step: number;
      replay_file: string;
      curriculum: { levels: Record<string, number> };
    };
    expect(state.replay_file).toBe(join('replay', 'step-00003.json'));
    expect(readdirSync(join(runDir, 'replay'))).toEqual(['step-00003.json']);
    const stored = JSON.parse(readFileSync(join(runDir, state.replay_file), 'utf8')) as { entries: { step: number }[] };
    expect(stored.entries.length).toBe(Number(m[2]!.replay_buffer_size));
    expect(state.curriculum.levels).toHaveProperty('calculator');
    const html = readFileSync(join(runDir, 'report.html'), 'utf8');
    expect(html).toContain('id="chart-replay"');
    expect(html).toContain('id="chart-curriculum"');
    expect(existsSync(join(runDir, 'model'))).toBe(true);
  }, 240_000);
});
