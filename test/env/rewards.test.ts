import { describe, expect, it } from 'vitest';
import { DEFAULT_REWARDS, RewardConfigSchema, defineTask, efficiency, scoreEpisode, stepReward, type CheckResult, type ToolStep } from '../../src/env/index.ts';

const task = defineTask({
  id: 'r',
  split: 'eval',
  difficulty: 1,
  prompt: 'p',
  servers: { kv: 'kv' },
  checks: [{ kind: 'answer', expect: { kind: 'number', value: '1' } }],
  solution: { calls: [{ server: 'kv', tool: 'get', arguments: { key: 'a' } }], answer: '1' },
} as never);

const step = (over: Partial<ToolStep>): ToolStep => ({ id: 's', name: 'get', server: 'kv', tool: 'get', arguments: {}, isError: false, ms: 1, text: '{}', structured: { found: true }, ...over });
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
    const s = scoreEpisode(task, [{ tool_results: [step({ isError: true, text: "Path '../x' is outside the sandbox", structured: undefined })] }, { tool_results: [step({})] }], answer, pass, cfg);
    expect(s.parts.correctness).toBe(1);
    expect(s.parts.think_format).toBe(1);
    expect(s.parts.reasoning).toBeCloseTo(0.5, 12);
    expect(s.parts.safety).toBeCloseTo(0.5, 12);
    expect(s.reward).toBeCloseTo(1 + 0.2 + 0.1 * 0.5 + 0.5 * 0.5, 12);
    for (const k of ['base', 'efficiency', 'tools', 'art', 'rlvr', 'composer']) expect(s.parts).toHaveProperty(k);
  });
});
