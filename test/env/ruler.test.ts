/**
 * RULER's arithmetic on fixed judge answers: a scripted ChatModel returns set answers and records
 * the requests it got (the judge's judgement is not under test; the parsing, the retries, the
 * sums, the standardisation, the cache and the combined reward are).
 */
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  applyRuler,
  commonPrefixLength,
  JudgeError,
  parseListwise,
  parseVerdict,
  rulerScore,
  type ChatMessage,
  type ChatModel,
  type ChatRequest,
  type Trajectory,
} from '../../src/env/index.ts';

const PREFIX: ChatMessage[] = [
  { role: 'system', content: 'You are an agent with a calculator. SYSTEM-MARKER' },
  { role: 'user', content: 'What is 6 * 7? USER-MARKER' },
];

/** Trajectory i: one calc call (an error for i = 2), its result, the answer `ANSWER-i`. */
function traj(i: number, over: Partial<Trajectory> = {}): Trajectory {
  return {
    id: `t${i}`,
    task_id: 'calc-1',
    group_id: 'calc-1@0',
    sample: i,
    split: 'train',
    difficulty: 1,
    policy: { id: 'test' },
    messages: [
      ...PREFIX,
      {
        role: 'assistant',
        content: `thinking-${i}`,
        tool_calls: [{ id: `c${i}`, type: 'function', function: { name: 'calc', arguments: `{"expr":"6*${i}"}` } }],
      },
      { role: 'tool', tool_call_id: `c${i}`, name: 'calc', content: `RESULT-${i}` },
      { role: 'assistant', content: `ANSWER-${i}` },
    ],
    turns: [
      {
        action: { content: `thinking-${i}`, tool_calls: [{ id: `c${i}`, name: 'calc', arguments: { expr: `6*${i}` } }] },
        tool_results: [{ id: `c${i}`, name: 'calc', arguments: {}, isError: i === 2, ms: 1, text: `RESULT-${i}` }],
        step_reward: 0,
        policy_ms: 1,
      },
      { action: { content: `ANSWER-${i}`, tool_calls: [] }, tool_results: [], step_reward: 0, policy_ms: 1 },
    ],
    answer: `ANSWER-${i}`,
    success: i === 0,
    reward: 0.2 * i,
    reward_parts: { correctness: 0.2 * i },
    checks: [],
    metrics: { turns: 2, tool_calls: 1, tool_errors: i === 2 ? 1 : 0, policy_tokens: 10 },
    timings: { started_at: '2025-01-01T00:00:00.000Z', total_ms: 1, policy_ms: 1, tool_ms: 1 },
    finish: 'answer',
    ...over,
  };
}

/** A judge that answers `answer(request, call index)` and records every request. */
function scripted(answer: (r: ChatRequest, n: number) => string, id = 'scripted-judge'): ChatModel & { requests: ChatRequest[] } {
  const requests: ChatRequest[] = [];
  return {
    id,
    requests,
    async complete(r) {
      requests.push(r);
      return { text: answer(r, requests.length - 1) };
    },
  };
}

const listAnswer = (scores: [string, number][]) =>
  JSON.stringify({ scores: scores.map(([id, score]) => ({ trajectory_id: id, explanation: `why ${id}`, score })) });
const user = (r: ChatRequest) => r.messages[0]!.content;
const count = (text: string, part: string) => text.split(part).length - 1;

describe('RULER listwise', () => {
  it("states the shared prefix once, each trajectory's own part under its id, and the rubric", async () => {
    const judge = scripted(() =>
      listAnswer([
        ['1', 0.9],
        ['2', 0.5],
        ['3', 0.1],
      ]),
    );
    await rulerScore([traj(0), traj(1), traj(2)], judge, { rubric: 'RUBRIC-MARKER' });
    expect(judge.requests).toHaveLength(1);
    const r = judge.requests[0]!;
    const text = user(r);
    expect(count(text, 'SYSTEM-MARKER')).toBe(1);
    expect(count(text, 'USER-MARKER')).toBe(1);
    expect(text.indexOf('USER-MARKER')).toBeLessThan(text.indexOf('<trajectory id="1">'));
    for (const i of [0, 1, 2]) {
      const block = text.slice(text.indexOf(`<trajectory id="${i + 1}">`), text.indexOf('</trajectory>', text.indexOf(`<trajectory id="${i + 1}">`)));
      expect(block).toContain(`thinking-${i}`);
      expect(block).toContain(`calc({"expr":"6*${i}"})`); // the tool call with its arguments
      expect(block).toContain(`RESULT-${i}`);
      expect(block).toContain(`ANSWER-${i}`);
      expect(block).not.toContain('USER-MARKER');
    }
    expect(text).toContain('[tool result of calc, an error] RESULT-2'); // tool errors are shown as such
    expect(r.system).toContain('RUBRIC-MARKER');
    expect(r.system).toContain('"trajectory_id"');
  });

  it('parses scores in id order, clamps them to [0, 1], accepts JSON in a fence among text', async () => {
    // Ids out of order, 1.7 → 1, -0.2 → 0, wrapped in prose and a ```json fence.
    const fenced =
      'Here is my grading.\n```json\n' +
      listAnswer([
        ['3', -0.2],
        ['1', 1.7],
        ['2', 0.4],
      ]) +
      '\n```\nThanks.';
    const judge = scripted(() => fenced);
    const r = await rulerScore([traj(0), traj(1), traj(2)], judge);
    expect(r.scores).toEqual([1, 0.4, 0]);
    expect(r.explanations).toEqual(['why 1', 'why 2', 'why 3']);
    expect(r).toMatchObject({ calls: 1, cached: 0 });
    // Plain text around a bare object, numeric ids: accepted too.
    expect(parseListwise(`Sure: {"scores":[{"trajectory_id":1,"score":0.25},{"trajectory_id":2,"score":0.75}]} done`, 2)).toEqual({
      ok: true,
      value: { scores: [0.25, 0.75], explanations: ['', ''] },
    });
    // A score that is not a number is invalid.
    expect(parseListwise('{"scores":[{"trajectory_id":"1","score":"high"}]}', 1).ok).toBe(false);
  });

  it('an answer missing an id is asked again once, saying what was wrong; a second bad answer is a JudgeError', async () => {
    const missing = listAnswer([
      ['1', 0.9],
      ['3', 0.1],
    ]);
    const good = listAnswer([
      ['1', 0.9],
      ['2', 0.5],
      ['3', 0.1],
    ]);
    const once = scripted((_, n) => (n === 0 ? missing : good));
    const r = await rulerScore([traj(0), traj(1), traj(2)], once);
    expect(r.scores).toEqual([0.9, 0.5, 0.1]);
    expect(r.calls).toBe(2);
    const retry = once.requests[1]!;
    expect(retry.messages).toHaveLength(3);
    expect(retry.messages[1]).toEqual({ role: 'assistant', content: missing });
    expect(retry.messages[2]!.content).toContain('missing trajectory_id "2"');

    const always = scripted(() => missing);
    const err = await rulerScore([traj(0), traj(1), traj(2)], always).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JudgeError);
    expect((err as JudgeError).calls).toBe(2); // the requests a failure made are counted too
    expect((err as Error).message).toMatch(/invalid answer twice: missing trajectory_id "2"; asked again: missing trajectory_id "2"/);
    expect(always.requests).toHaveLength(2);

    // Duplicates and unknown ids are named; no JSON at all is said so.
    expect(
      parseListwise(
        listAnswer([
          ['1', 0.1],
          ['1', 0.2],
          ['7', 0.3],
        ]),
        2,
      ),
    ).toEqual({ ok: false, error: 'missing trajectory_id "2"; trajectory_id given more than once: 1; unknown trajectory_id "7" (the ids are "1" to "2")' });
    expect(parseListwise('I like the first one.', 2)).toEqual({ ok: false, error: 'no JSON object was found in the answer' });
  });

  it('a judge request that throws is a JudgeError, never a score', async () => {
    const broken: ChatModel = { id: 'down', complete: async () => Promise.reject(new Error('503 overloaded')) };
    await expect(rulerScore([traj(0), traj(1)], broken)).rejects.toThrow(JudgeError);
    await expect(rulerScore([traj(0), traj(1)], broken)).rejects.toThrow(/judge down: the request failed: 503 overloaded/);
  });

  it('caches answers on disk by content hash: a second scoring makes no call', async () => {
    const cacheDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-ruler-')), 'judge-cache');
    const answer = () =>
      listAnswer([
        ['1', 0.8],
        ['2', 0.3],
      ]);
    const first = scripted(answer);
    const a = await rulerScore([traj(0), traj(1)], first, { cacheDir });
    expect(a).toMatchObject({ scores: [0.8, 0.3], calls: 1, cached: 0 });
    const second = scripted(answer); // a new process's judge, same id
    const b = await rulerScore([traj(0), traj(1)], second, { cacheDir });
    expect(b).toMatchObject({ scores: [0.8, 0.3], calls: 0, cached: 1 });
    expect(second.requests).toHaveLength(0);
    // Another rubric, another judge id or other trajectories: asked again.
    await rulerScore([traj(0), traj(1)], second, { cacheDir, rubric: 'other' });
    await rulerScore([traj(0), traj(1)], scripted(answer, 'another-judge'), { cacheDir });
    await rulerScore([traj(1), traj(0)], second, { cacheDir });
    expect(second.requests).toHaveLength(2);
    const files = readdirSync(cacheDir);
    expect(files).toHaveLength(4);
    expect(files.every((f) => /^[0-9a-f]{64}\.json$/.test(f))).toBe(true); // no temporary file left
  });

  it('the shared prefix: identical or one-message lists keep their last message as their own part', () => {
    const m = (content: string): ChatMessage => ({ role: 'user', content });
    expect(
      commonPrefixLength([
        [m('a'), m('b'), m('c')],
        [m('a'), m('b'), m('d')],
      ]),
    ).toBe(2);
    expect(
      commonPrefixLength([
        [m('a'), m('b')],
        [m('a'), m('b')],
      ]),
    ).toBe(1);
    expect(
      commonPrefixLength([
        [m('a'), m('b')],
        [m('a'), m('b'), m('c')],
      ]),
    ).toBe(1);
    expect(commonPrefixLength([[m('a'), m('b')]])).toBe(1);
  });
});

/** The trajectories shown as A and as B in a pairwise request (by their ANSWER-i). */
function shown(r: ChatRequest): { a: number; b: number } {
  const text = user(r);
  const of = (id: string) => Number(/ANSWER-(\d)/.exec(text.slice(text.indexOf(`<trajectory id="${id}">`)))![1]);
  return { a: of('A'), b: of('B') };
}

describe('RULER pairwise', () => {
  it('a judge preferring the lower index everywhere: totals 2, 0, -2 → standardised 1, 0, -1 (sample std)', async () => {
    // Pairs (0,1), (0,2), (1,2): the better one wins all 3 votes, so rel = +1 for the better.
    // totals: t0 = 1 + 1 = 2, t1 = -1 + 1 = 0, t2 = -1 - 1 = -2; mean 0;
    // sample std = sqrt((4 + 0 + 4) / 2) = 2 → z = 1, 0, -1 (the population std would give ±1.2247).
    const judge = scripted((r) => {
      const { a, b } = shown(r);
      return `Reasoning...\nVERDICT: ${a < b ? 'A' : 'B'}`;
    });
    const r = await rulerScore([traj(0), traj(1), traj(2)], judge, { mode: 'pairwise', votes: 3 });
    [1, 0, -1].forEach((want, i) => expect(r.scores[i]).toBeCloseTo(want, 6));
    expect(r.calls).toBe(9); // 3 pairs x 3 votes
    expect(r.explanations[0]).toBe('pairwise: total 2.0000 over 2 opponents; votes won 6, lost 0, tied 0');
    // Position bias: votes alternate which trajectory is shown as A (vote n of the group: i as A when n is even).
    // Pair (0,1) votes 0,1,2: 0 as A twice; pair (0,2) votes 3,4,5: 0 as A once; pair (1,2) votes 6,7,8: 1 as A twice.
    const asA = (i: number, j: number) => judge.requests.filter((q) => shown(q).a === i && shown(q).b === j).length;
    expect([asA(0, 1), asA(1, 0), asA(0, 2), asA(2, 0), asA(1, 2), asA(2, 1)]).toEqual([2, 1, 1, 2, 2, 1]);
    // Every pairwise prompt also states the shared prefix once.
    expect(judge.requests.every((q) => count(user(q), 'USER-MARKER') === 1)).toBe(true);
  });

  it('a judge that always answers A scores everyone 0: the alternation cancels its position bias', async () => {
    // Pair (0,1): votes +1 (0 as A), -1 (1 as A), +1 → rel01 = 1/3; pair (0,2): -1, +1, -1 → rel02 = -1/3;
    // pair (1,2): +1, -1, +1 → rel12 = 1/3. t0 = 1/3 - 1/3 = 0, t1 = -1/3 + 1/3 = 0, t2 = 1/3 - 1/3 = 0.
    const r = await rulerScore(
      [traj(0), traj(1), traj(2)],
      scripted(() => 'VERDICT: A'),
      { mode: 'pairwise' },
    );
    expect(r.scores).toEqual([0, 0, 0]);
  });

  it('mixed verdicts, unparseable votes retried once then counted as ties, against hand-computed numbers', async () => {
    // Pair (0,1): the judge rambles without a verdict: each vote asked twice, then a tie → rel01 = 0.
    // Pair (0,2): 0 is better in every vote (in three formats) → rel02 = +1.
    // Pair (1,2): the judge always says A (votes 6, 7, 8 show 1, 2, 1 as A) → +1, -1, +1 → rel12 = 1/3.
    // totals: t0 = 0 + 1 = 1; t1 = -0 + 1/3 = 1/3; t2 = -1 - 1/3 = -4/3; mean = 0;
    // sample std = sqrt((1 + 1/9 + 16/9) / 2) = sqrt(13/9) = 1.2018504;
    // z = 1 / 1.2018504 = 0.8320503, (1/3) / 1.2018504 = 0.2773501, (-4/3) / 1.2018504 = -1.1094004.
    let format = 0;
    const judge = scripted((r) => {
      const { a, b } = shown(r);
      const pair = [a, b].sort().join('');
      if (pair === '01') return 'A is better than B in some ways, and B in others.';
      if (pair === '12') return 'VERDICT: A';
      const winner = a === 0 ? 'A' : 'B';
      return [`Clearly.\n**VERDICT: ${winner}**`, `{"verdict": "${winner}"}`, `Verdict: ${winner}.`][format++ % 3]!;
    });
    const r = await rulerScore([traj(0), traj(1), traj(2)], judge, { mode: 'pairwise', votes: 3 });
    [0.8320503, 0.2773501, -1.1094004].forEach((want, i) => expect(r.scores[i]).toBeCloseTo(want, 6));
    expect(r.calls).toBe(6 + 3 + 3); // pair (0,1)'s three votes were each asked twice
    const retries = judge.requests.filter((q) => q.messages.length === 3);
    expect(retries).toHaveLength(3);
    expect(retries[0]!.messages[2]!.content).toMatch(/last line is .* not one of "VERDICT: A", "VERDICT: B", "VERDICT: TIE"/);
    expect(r.explanations[1]).toBe('pairwise: total 0.3333 over 2 opponents; votes won 2, lost 1, tied 0, unparseable (counted as ties) 3');
  });

  it('verdicts are parsed strictly from the last line (the seed\'s `"A" in result` was a slip)', () => {
    expect(parseVerdict('A is clearly better than B').ok).toBe(false);
    expect(parseVerdict('VERDICT: B\nActually, A is better').ok).toBe(false);
    expect(parseVerdict('long reasoning\nVERDICT: tie.')).toEqual({ ok: true, value: 'TIE' });
    expect(parseVerdict('```json\n{"verdict": "b"}\n```')).toEqual({ ok: true, value: 'B' });
    expect(parseVerdict('B')).toEqual({ ok: true, value: 'B' });
  });

  it('a group where no vote parses is a JudgeError; all-equal totals give zeros', async () => {
    await expect(
      rulerScore(
        [traj(0), traj(1)],
        scripted(() => 'hmm'),
        { mode: 'pairwise', votes: 2 },
      ),
    ).rejects.toThrow(/none of the 2 pairwise verdicts could be parsed/);
    const ties = await rulerScore(
      [traj(0), traj(1), traj(2)],
      scripted(() => 'VERDICT: TIE'),
      { mode: 'pairwise', votes: 1 },
    );
    expect(ties.scores).toEqual([0, 0, 0]);
  });

  it('votes are cached per vote index: a rerun makes no call and gives the same scores', async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), 'mcp-gym-ruler-pw-'));
    let n = 0;
    const judge = scripted(() => (n++ % 2 === 0 ? 'VERDICT: A' : 'VERDICT: TIE'));
    const a = await rulerScore([traj(0), traj(1)], judge, { mode: 'pairwise', votes: 4, cacheDir });
    expect(a.calls).toBe(4);
    expect(readdirSync(cacheDir)).toHaveLength(4); // one per vote, though two prompts are the same
    const b = await rulerScore(
      [traj(0), traj(1)],
      scripted(() => 'VERDICT: B'),
      { mode: 'pairwise', votes: 4, cacheDir },
    );
    expect(b).toMatchObject({ calls: 0, cached: 4, scores: a.scores });
  });
});

describe('applyRuler: the combined reward', () => {
  it('failed episodes are not judged; reward = w_ruler·ruler + w_verifier·verifier, reward_parts keep both', async () => {
    const failed = traj(3, { finish: 'error', reward: 0, reward_parts: {}, error: 'a tool server failed' });
    const group = [traj(0), traj(1), failed, traj(2)];
    const judge = scripted(() =>
      listAnswer([
        ['1', 1],
        ['2', 0.5],
        ['3', 0],
      ]),
    );
    const cacheDir = mkdtempSync(join(tmpdir(), 'mcp-gym-ruler-apply-'));
    const r = await applyRuler(group, judge, { weights: { ruler: 0.5, verifier: 0.5 }, cacheDir });
    expect(r).toMatchObject({ judged: 3, scores: [1, 0.5, 0], calls: 1 });
    expect(user(judge.requests[0]!)).not.toContain('ANSWER-3');
    expect(user(judge.requests[0]!)).not.toContain('<trajectory id="4">');
    expect(failed.reward).toBe(0);
    expect(failed.reward_parts).toEqual({});
    // Before: rewards 0, 0.2, 0.4 (trajectories 0, 1, 2).
    expect(group[0]!.reward).toBeCloseTo(0.5 * 1 + 0.5 * 0, 12);
    expect(group[1]!.reward).toBeCloseTo(0.5 * 0.5 + 0.5 * 0.2, 12);
    expect(group[3]!.reward).toBeCloseTo(0.5 * 0 + 0.5 * 0.4, 12);
    expect(group[1]!.reward_parts).toEqual({ correctness: 0.2, verifier: 0.2, ruler: 0.5 });
    // Judged again (an evaluation rerun, from the cache): combined from the recorded verifier part, not compounded.
    const again = await applyRuler(group, judge, { weights: { ruler: 0.5, verifier: 0.5 }, cacheDir });
    expect(again).toMatchObject({ calls: 0, cached: 1 });
    expect(group[1]!.reward).toBeCloseTo(0.35, 12);
    expect(group[1]!.reward_parts).toEqual({ correctness: 0.2, verifier: 0.2, ruler: 0.5 });
    // Default weights: the judge's score alone.
    const solo = [traj(0), traj(1)];
    await applyRuler(
      solo,
      scripted(() =>
        listAnswer([
          ['1', 0.7],
          ['2', 0.1],
        ]),
      ),
    );
    expect(solo.map((t) => t.reward)).toEqual([0.7, 0.1]);
  });

  it('a judge failure changes nothing', async () => {
    const group = [traj(0), traj(1)];
    await expect(
      applyRuler(
        group,
        scripted(() => 'garbage'),
        { weights: { ruler: 1, verifier: 1 } },
      ),
    ).rejects.toThrow(JudgeError);
    expect(group.map((t) => t.reward)).toEqual([0, 0.2]);
    expect(group[1]!.reward_parts).toEqual({ correctness: 0.2 });
  });
});
