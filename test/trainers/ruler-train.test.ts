/**
 * RULER in the training loop, with the real parts (the committed cold-start model, the PyTorch
 * learner as a child process, the bundled calculator server) and a judge given in code: a scripted
 * ChatModel (the judge's judgement is not under test; the wiring is). Tiny runs: 2 steps of
 * 2 tasks x 4 rollouts.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ChatModel, ChatRequest, Trajectory } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { flagsOf } from '../../src/cli/flags.ts';
import { rulerJudge } from '../../src/trainers/collect.ts';
import { PRESETS, resolveConfig, train, TrainConfigSchema, type TrainConfigInput } from '../../src/trainers/index.ts';

const MODEL = join(import.meta.dirname, '..', '..', 'models', 'calc-tiny');
const suite = generateSuite('calculator', { train: 200, eval: 10 }).filter((t) => t.difficulty === 1);
const trainTasks = suite.filter((t) => t.split === 'train').slice(0, 6);
const evalTasks = suite.filter((t) => t.split === 'eval').slice(0, 2);
const tiny: Partial<TrainConfigInput> = {
  preset: 'ruler',
  model: MODEL,
  steps: 2,
  tasks_per_step: 2,
  group: 4,
  concurrency: 8,
  eval_every: 0,
  eval_samples: 1,
  max_new_tokens: 48,
  lr: 1e-4,
};
/** A metrics.jsonl row: the judge's metrics and the counts asserted on. */
interface Row {
  [k: string]: number | undefined;
  judge_calls: number;
  judge_failures: number;
  judge_cached: number;
  ruler_mean: number;
  groups_seen: number;
  groups_kept: number;
  dropped_too_few: number;
  policy_version: number;
  loss?: number;
}
const tmp = (name: string) => join(mkdtempSync(join(tmpdir(), `mcp-gym-ruler-${name}-`)), 'run');
const rows = <T>(file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);

/**
 * Scores each trajectory of the prompt as a checker would: 1 when it ended with an answer that
 * holds the last tool result's value, 0.3 when it ended with another answer, 0 without an answer.
 */
function scriptedJudge(): ChatModel & { calls: number } {
  const judge = {
    id: 'scripted-judge',
    calls: 0,
    async complete(r: ChatRequest) {
      judge.calls++;
      const text = r.messages[0]!.content;
      const blocks = [...text.matchAll(/<trajectory id="(\d+)">\n([\s\S]*?)\n<\/trajectory>/g)];
      const scores = blocks.map(([, id, body]) => {
        const lines = body!.split('\n');
        const results = lines.filter((l) => l.startsWith('[tool result') && !l.includes(', an error]'));
        const value = results
          .at(-1)
          ?.replace(/^\[[^\]]*\]\s*/, '')
          .trim();
        const answered = lines.at(-1)!.includes('ended with the final answer');
        const final = lines.at(-2) ?? '';
        const score = !answered ? 0 : value && final.startsWith('[assistant]') && final.includes(value) ? 1 : 0.3;
        return { trajectory_id: id, explanation: 'scripted', score };
      });
      return { text: JSON.stringify({ scores }) };
    },
  };
  return judge;
}

describe('the RULER config', () => {
  it('the ruler preset: GRPO on RULER listwise and the verifier, half and half; ruler without a judge is refused', () => {
    expect(PRESETS.ruler).toMatchObject({
      reward: 'verifier',
      advantage: 'grpo',
      loss: 'grpo',
      ruler: 'listwise',
      ruler_weight: 0.5,
      ruler_verifier_weight: 0.5,
    });
    expect(resolveConfig({ preset: 'ruler', judge: 'openai:gpt-4o-mini' })).toMatchObject({
      ruler: 'listwise',
      judge: 'openai:gpt-4o-mini',
      ruler_votes: 3,
      reward: 'verifier',
      beta: 0.04,
    });
    expect(() => resolveConfig({ preset: 'ruler' })).toThrow(
      "ruler: 'listwise' (the ruler preset) needs a judge: set judge (--judge openai:<model> or anthropic:<model>), or ruler: 'off'",
    );
    expect(() => resolveConfig({ preset: 'grpo', ruler: 'pairwise' })).toThrow(/ruler: 'pairwise' needs a judge: set judge/);
    expect(resolveConfig({ preset: 'grpo' })).toMatchObject({ ruler: 'off', judge: '', ruler_weight: 1, ruler_verifier_weight: 0 });
    expect(resolveConfig({ preset: 'ruler', ruler: 'off' }).ruler).toBe('off');
  });

  it("the run's judge: none when ruler is off; the one given in code, with the config's options; a bad spec names the field", async () => {
    expect((await rulerJudge(resolveConfig({ preset: 'grpo' }), '/run')).judge).toBeUndefined();
    const given = { id: 'given', complete: async () => ({ text: '' }) };
    const j = await rulerJudge(resolveConfig({ preset: 'ruler', judge: 'openai:unused', ruler_rubric: 'R' }), '/run', given);
    expect(j.judge!.model).toBe(given);
    expect(j.judge!.options).toEqual({
      mode: 'listwise',
      votes: 3,
      rubric: 'R',
      weights: { ruler: 0.5, verifier: 0.5 },
      cacheDir: join('/run', 'judge-cache'),
    });
    await expect(rulerJudge(resolveConfig({ preset: 'ruler', judge: 'nope:model' }), '/run')).rejects.toThrow(/^judge: /);
  });

  it('every RULER field is a train flag, with its help', () => {
    const flags = Object.fromEntries(flagsOf(TrainConfigSchema).map((f) => [f.flag, f]));
    for (const f of ['judge', 'judge-base-url', 'judge-api-key-env', 'ruler', 'ruler-votes', 'ruler-weight', 'ruler-verifier-weight', 'ruler-rubric'])
      expect(flags[f]?.help, f).toBeTruthy();
    expect(flags.ruler!.values).toEqual(['off', 'listwise', 'pairwise']);
    expect(flags['ruler-votes']!.kind).toBe('int');
    expect(flags.preset!.values).toContain('ruler');
  });
});

describe('RULER in training', () => {
  it('the ruler preset judges every group: judge metrics, ruler and verifier parts, the combined reward', async () => {
    const runDir = tmp('ok');
    const judge = scriptedJudge();
    const r = await train({ config: tiny, runDir, trainTasks, evalTasks, judge });
    expect(r.steps).toBe(2);
    const m = rows<Row>(join(runDir, 'metrics.jsonl'));
    expect(m).toHaveLength(2);
    for (const row of m) {
      expect(row.judge_calls).toBeGreaterThan(0);
      expect(row.judge_calls).toBeLessThanOrEqual(row.groups_seen); // one request per group: every answer was valid
      expect(row.judge_failures).toBe(0);
      expect(row.judge_cached).toBe(0);
      expect(row.ruler_mean).toBeGreaterThanOrEqual(0);
      expect(row.ruler_mean).toBeLessThanOrEqual(1);
    }
    expect(judge.calls).toBe(m.reduce((n, row) => n + row.judge_calls, 0));
    expect(m.some((row) => row.groups_kept > 0 && row.loss !== undefined)).toBe(true); // judged groups were trained on
    // Every finished training episode carries the judge's score and the verifier's, combined half and half.
    const traj = rows<Trajectory>(join(runDir, 'trajectories.jsonl')).filter((t) => t.finish !== 'error');
    expect(traj.length).toBeGreaterThan(0);
    for (const t of traj) {
      expect(t.reward_parts.ruler).toBeGreaterThanOrEqual(0);
      expect(t.reward_parts.ruler).toBeLessThanOrEqual(1);
      expect(t.reward_parts.verifier).toBe(t.reward_parts.correctness); // the preset's reward is the verifier
      expect(t.reward).toBeCloseTo(0.5 * t.reward_parts.ruler! + 0.5 * t.reward_parts.verifier!, 12);
    }
    // The answers are cached in the run; the config records the judge given in code.
    expect(readdirSync(join(runDir, 'judge-cache')).length).toBe(judge.calls);
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({ preset: 'ruler', ruler: 'listwise', judge: 'scripted-judge', ruler_weight: 0.5, ruler_verifier_weight: 0.5 });
  }, 240_000);

  it('a judge that answers garbage drops every group: counted, and nothing is trained on a made-up score', async () => {
    const runDir = tmp('garbage');
    let calls = 0;
    const garbage: ChatModel = {
      id: 'garbage-judge',
      async complete() {
        calls++;
        return { text: 'The first one looks good, I guess.' };
      },
    };
    const logs: string[] = [];
    const r = await train({ config: tiny, runDir, trainTasks, evalTasks, judge: garbage, onLog: (l) => logs.push(l) });
    expect(r.steps).toBe(2);
    const m = rows<Row>(join(runDir, 'metrics.jsonl'));
    for (const row of m) {
      expect(row.groups_kept).toBe(0);
      expect(row.judge_failures).toBe(row.groups_seen - row.dropped_too_few);
      expect(row.judge_failures).toBeGreaterThan(0);
      expect(row.judge_calls).toBe(2 * row.judge_failures); // each group asked twice (the retry), then dropped
      expect(row.loss).toBeUndefined(); // no learner step
      expect(row.policy_version).toBe(m[0]!.policy_version);
    }
    expect(calls).toBe(m.reduce((n, row) => n + row.judge_calls, 0));
    expect(logs.some((l) => /the judge failed on \d+ group\(s\), dropped; first: .*invalid answer twice: no JSON object was found/.test(l))).toBe(true);
    // Nothing cached: a failure is asked again next time.
    expect(existsSync(join(runDir, 'judge-cache')) ? readdirSync(join(runDir, 'judge-cache')) : []).toEqual([]);
    // The logged episodes keep their verifier reward, without a ruler part.
    const traj = rows<Trajectory>(join(runDir, 'trajectories.jsonl'));
    expect(traj.every((t) => t.reward_parts.ruler === undefined)).toBe(true);
  }, 240_000);
});
