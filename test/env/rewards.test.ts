import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_REWARDS,
  Environment,
  RewardConfigSchema,
  defineTask,
  efficiency,
  scoreEpisode,
  stepReward,
  type CheckResult,
  type ToolStep,
  type Trajectory,
} from '../../src/env/index.ts';
import { COMPOSER_PARTS, registerRewardPart, rewardPartNames, type RewardPartFn } from '../../src/env/rewards.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { resolveConfig, train } from '../../src/trainers/index.ts';

const MODEL = join(import.meta.dirname, '..', '..', 'models', 'calc-tiny');

const task = defineTask({
  id: 'r',
  split: 'eval',
  difficulty: 1,
  prompt: 'p',
  servers: { kv: 'kv' },
  checks: [{ kind: 'answer', expect: { kind: 'number', value: '1' } }],
  solution: { calls: [{ server: 'kv', tool: 'get', arguments: { key: 'a' } }], answer: '1' },
} as never);

const step = (over: Partial<ToolStep>): ToolStep => ({
  id: 's',
  name: 'get',
  server: 'kv',
  tool: 'get',
  arguments: {},
  isError: false,
  ms: 1,
  text: '{}',
  structured: { found: true },
  ...over,
});
const pass: CheckResult[] = [{ kind: 'answer', score: 1, weight: 1, detail: '' }];
const fail: CheckResult[] = [{ kind: 'answer', score: 0, weight: 1, detail: '' }];

describe('ART rewards', () => {
  it('step reward: 0.1 success + 0.1 relevant tool + 0.1 useful result', () => {
    const relevant = new Set(['kv.get']);
    const art = DEFAULT_REWARDS.art;
    expect(stepReward(step({}), relevant, art)).toBeCloseTo(0.3, 12);
    expect(stepReward(step({ tool: 'list', structured: { entries: [] } }), relevant, art)).toBeCloseTo(0.1, 12); // success only
    expect(stepReward(step({ structured: { found: false } }), relevant, art)).toBeCloseTo(0.2, 12); // nothing found
    expect(stepReward(step({ isError: true, structured: undefined, text: 'boom' }), relevant, art)).toBeCloseTo(0.1, 12); // relevant only
  });

  it('efficiency = max(0, 1 - (steps - 3)/10), capped at 1', () => {
    const art = DEFAULT_REWARDS.art;
    expect(efficiency(3, art)).toBe(1);
    expect(efficiency(1, art)).toBe(1);
    expect(efficiency(8, art)).toBeCloseTo(0.5, 12);
    expect(efficiency(13, art)).toBe(0);
    expect(efficiency(30, art)).toBe(0);
  });

  it('trajectory reward = base + 0.3 efficiency + 0.2 sum of step rewards, each part logged', () => {
    // 2 turns: one useful relevant call, then the answer.
    const turns = [{ tool_results: [step({})] }, { tool_results: [] }];
    const s = scoreEpisode(task, turns, '1', pass);
    expect(s.success).toBe(true);
    expect(s.parts.base).toBe(1);
    expect(s.parts.efficiency).toBe(1);
    expect(s.parts.tools).toBeCloseTo(0.3, 12);
    expect(s.reward).toBeCloseTo(1 + 0.3 * 1 + 0.2 * 0.3, 12);
    expect(s.stepRewards.map((x) => Number(x.toFixed(6)))).toEqual([0.3, 0]);
    const failed = scoreEpisode(task, turns, '2', fail);
    expect(failed.reward).toBeCloseTo(0.3 + 0.06, 12);
    // 10 turns of failing calls: efficiency 0.3
    const long = Array.from({ length: 10 }, () => ({ tool_results: [step({ isError: true, structured: undefined, text: 'x' })] }));
    const l = scoreEpisode(task, long, null, fail);
    expect(l.parts.efficiency).toBeCloseTo(0.3, 12);
    expect(l.reward).toBeCloseTo(0.3 * 0.3 + 0.2 * 10 * 0.1, 12);
  });

  it('weights are configurable', () => {
    const cfg = RewardConfigSchema.parse({ art: { efficiency_weight: 0, steps_weight: 1, step_success: 0.5 } });
    const s = scoreEpisode(task, [{ tool_results: [step({})] }], '1', pass, cfg);
    expect(s.reward).toBeCloseTo(1 + 0 + (0.5 + 0.1 + 0.1), 12);
  });
});

describe('RLVR shaping and the composer', () => {
  it('RLVR: 0.1 format + 0.3 x correct-step fraction + 0.6 final', () => {
    const cfg = RewardConfigSchema.parse({ total: 'rlvr' });
    const turns = [{ tool_results: [step({}), step({ isError: true, text: 'x', structured: undefined })] }];
    const right = scoreEpisode(task, turns, '\\boxed{1}', pass, cfg);
    expect(right.parts.format).toBe(1);
    expect(right.parts.steps_fraction).toBe(0.5);
    expect(right.reward).toBeCloseTo(0.1 + 0.3 * 0.5 + 0.6, 12);
    const wrong = scoreEpisode(task, turns, '2', fail, cfg);
    expect(wrong.reward).toBeCloseTo(0.3 * 0.5, 12);
  });

  it('composer: weighted named parts, every part logged', () => {
    const cfg = RewardConfigSchema.parse({ total: 'composer', composer: { correctness: 1, format: 0.2, reasoning: 0.1, safety: 0.5 } });
    const answer = `<think>${'x'.repeat(100)}</think><answer>1</answer>`;
    const s = scoreEpisode(
      task,
      [{ tool_results: [step({ isError: true, text: "Path '../x' is outside the sandbox", structured: undefined })] }, { tool_results: [step({})] }],
      answer,
      pass,
      cfg,
    );
    expect(s.parts.correctness).toBe(1);
    expect(s.parts.think_format).toBe(1);
    expect(s.parts.reasoning).toBeCloseTo(0.5, 12);
    expect(s.parts.safety).toBeCloseTo(0.5, 12);
    expect(s.reward).toBeCloseTo(1 + 0.2 + 0.1 * 0.5 + 0.5 * 0.5, 12);
    for (const k of ['base', 'efficiency', 'tools', 'art', 'rlvr', 'composer']) expect(s.parts).toHaveProperty(k);
  });
});

describe('the composer with registered parts', () => {
  // A part of the user's: the number of tool calls of the episode (the argument a RewardFn gets).
  const toolCalls: RewardPartFn = (e) => e.turns.reduce((n, t) => n + t.tool_results.length, 0);
  registerRewardPart('tool_calls_n', toolCalls);

  it('weights by name apply to the built-in and the registered parts; every part is logged under its name', () => {
    const cfg = RewardConfigSchema.parse({ total: 'composer', composer: { correctness: 0.5, think_format: 2, tool_calls_n: 0.25 } });
    const turns = [{ tool_results: [step({}), step({})] }, { tool_results: [step({})] }];
    const s = scoreEpisode(task, turns, '<answer>1</answer>', pass, cfg);
    expect(s.parts.tool_calls_n).toBe(3);
    expect(s.parts.think_format).toBe(0.5);
    expect(s.reward).toBeCloseTo(0.5 * 1 + 2 * 0.5 + 0.25 * 3, 12);
    // Logged whatever the reward: the ART total does not weigh it, but it is there.
    const art = scoreEpisode(task, turns, '1', pass, RewardConfigSchema.parse({ total: 'art' }));
    expect(art.parts.tool_calls_n).toBe(3);
    // Parts not named weigh 0, except correctness (1); `format` is think_format's first name.
    const dflt = scoreEpisode(task, turns, '<answer>1</answer>', pass, RewardConfigSchema.parse({ total: 'composer', composer: { format: 1 } }));
    expect(dflt.reward).toBeCloseTo(1 + 0.5, 12);
    expect(rewardPartNames()).toEqual([...COMPOSER_PARTS, 'tool_calls_n']);
  });

  it('refuses an unknown part (naming it and listing the registered ones), bad names and bad weights', () => {
    expect(() => resolveConfig({ composer_weights: { correctness: 1, nope: 2 } })).toThrow(
      /composer_weights\.nope: unknown reward part 'nope'; registered: correctness, think_format, reasoning, safety, tool_calls_n/,
    );
    expect(() => RewardConfigSchema.parse({ composer: { typo: 1 } })).toThrow(/unknown reward part 'typo'/);
    expect(resolveConfig({ composer_weights: 'correctness=0.5, tool_calls_n=2' as never }).composer_weights).toEqual({ correctness: 0.5, tool_calls_n: 2 });
    expect(() => resolveConfig({ composer_weights: 'correctness=much' as never })).toThrow(/composer_weights: 'correctness=much' is not name=weight/);
    expect(() => registerRewardPart('safety', toolCalls)).toThrow(/reward part 'safety': the name of a built-in part/);
    expect(() => registerRewardPart('art', toolCalls)).toThrow(/built-in part/);
    expect(() => registerRewardPart('tool_calls_n', toolCalls)).toThrow(/already registered/);
    expect(() => registerRewardPart('9lives', toolCalls)).toThrow(/reward part name '9lives'/);
  });

  it('a part that returns no finite number fails the episode, naming the part', async () => {
    registerRewardPart('broken_part', () => Number.NaN);
    try {
      const env = new Environment({ reward: 'composer' });
      const [t] = generateSuite('calculator', { train: 1, eval: 0 });
      const traj = await env.runEpisode(t!, new ExpertPolicy(), { groupId: 'g', sample: 0 });
      await env.close();
      expect(traj.error).toMatch(/reward part 'broken_part' returned NaN/);
      expect(traj.reward).toBe(0);
    } finally {
      registerRewardPart('broken_part', () => 0, { replace: true });
    }
  });

  it('in training: composer_weights weigh a registered part, logged per trajectory, its step mean in metrics and plotted', async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-composer-')), 'run');
    const weights = { correctness: 0.5, tool_calls_n: 0.25 };
    await train({
      config: {
        preset: 'grpo',
        reward: 'composer',
        composer_weights: weights,
        suite: 'calculator',
        max_difficulty: 1,
        model: MODEL,
        steps: 2,
        tasks_per_step: 3,
        group: 2,
        eval_limit: 2,
        eval_samples: 1,
        eval_every: 0,
        beta: 0,
        lr: 1e-4,
        max_staleness: 0,
      },
      runDir,
    });
    const rows = (f: string) =>
      readFileSync(join(runDir, f), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    const trajs = rows('trajectories.jsonl') as unknown as Trajectory[];
    const scored = trajs.filter((t) => t.finish !== 'error');
    expect(scored.length).toBeGreaterThan(0);
    for (const t of scored) {
      expect(t.reward_parts.tool_calls_n).toBe(t.metrics.tool_calls);
      // The total is the configured weighted sum of the logged parts (think_format, reasoning, safety weigh 0).
      expect(t.reward).toBeCloseTo(0.5 * t.reward_parts.correctness! + 0.25 * t.reward_parts.tool_calls_n!, 12);
    }
    const metrics = rows('metrics.jsonl');
    expect(metrics.map((m) => m.step)).toEqual([1, 2]);
    for (const m of metrics) {
      const step = scored.filter((t) => t.group_id.includes(`train.${String(m.step)}.`));
      const parts = m.reward_parts_mean as Record<string, number>;
      expect(parts.tool_calls_n).toBeCloseTo(step.reduce((s, t) => s + t.reward_parts.tool_calls_n!, 0) / step.length, 9);
      for (const p of COMPOSER_PARTS) expect(parts).toHaveProperty(p);
    }
    const html = readFileSync(join(runDir, 'report.html'), 'utf8');
    const chart = /<figure class="chart" id="chart-reward-parts">[\s\S]*?<\/figure>/.exec(html)?.[0] ?? '';
    expect(chart).toContain('Reward parts (train, mean)');
    expect(chart).toMatch(/data-series="tool_calls_n" data-n="2"/);
    expect(chart).toMatch(/data-series="correctness" data-n="2"/);
  }, 240_000);
});
