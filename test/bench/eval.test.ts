/**
 * `mcp-gym eval` and its statistics: pass@k/pass^k and intervals over tasks on hand-computed
 * figures; the command on two bundled suites, on a task file whose server is a third-party stdio
 * server (server-everything from npm), and resumed after a cut.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evalReport, overTasks } from '../../src/bench/eval.ts';
import { t975 } from '../../lib/index.ts';
import { readTrajectories, type Task, type Trajectory } from '../../src/env/index.ts';
import { ROOT, runCli } from '../helpers.ts';

const EVERYTHING = join(ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');

function traj(task: string, sample: number, success: boolean, extra: Partial<Trajectory> = {}): Trajectory {
  return {
    id: `${task}#${sample}`,
    task_id: task,
    group_id: `${task}@eval`,
    sample,
    split: 'eval',
    difficulty: 1,
    policy: { id: 'p' },
    messages: [],
    turns: [],
    answer: null,
    success,
    reward: success ? 1 : 0,
    reward_parts: { base: success ? 1 : 0 },
    checks: [],
    metrics: { turns: 1, tool_calls: 0, tool_errors: 0, policy_tokens: 0 },
    timings: { started_at: '', total_ms: 1, policy_ms: 0, tool_ms: 0 },
    finish: 'answer',
    ...extra,
  };
}

const task = (id: string) => ({ id, difficulty: 1, split: 'eval' }) as unknown as Task;

describe('eval statistics', () => {
  it('pass@1, pass@k, pass^k over tasks on hand-computed figures', () => {
    // Task a: 1 of 4 solved; task b: 4 of 4.
    const ts = [0, 1, 2, 3].flatMap((i) => [traj('a', i, i === 2), traj('b', i, true)]);
    const r = evalReport('p', 4, [task('a'), task('b')], ts, 1);
    expect(r.pass_at_1.mean).toBeCloseTo((0.25 + 1) / 2, 12);
    // pass@2 of a: 1 − C(3,2)/C(4,2) = 1 − 3/6.
    expect(r.pass_at['2']).toBeCloseTo((0.5 + 1) / 2, 12);
    expect(r.pass_at_k.mean).toBe(1);
    // pass^2 of a: C(1,2)/C(4,2) = 0; of b: 1.
    expect(r.pass_hat['2']).toBeCloseTo(0.5, 12);
    expect(r.pass_hat_k.mean).toBeCloseTo(0.5, 12);
    expect(r.reward_parts.base!.mean).toBeCloseTo(0.625, 12);
    // One suite per task id prefix here (no family): a and b.
    expect(r.by_suite.a!.pass_at_1.mean).toBeCloseTo(0.25, 12);
    expect(r.by_suite.b!.pass_hat_k.mean).toBe(1);
  });

  it('intervals are over tasks: mean ± t·s/√T for a mean, the cluster-robust Wilson interval for a rate', () => {
    const e = overTasks([0.2, 0.4, 0.6, 0.8]);
    const s = Math.sqrt((0.09 + 0.01 + 0.01 + 0.09) / 3);
    expect(e.mean).toBeCloseTo(0.5, 12);
    expect(e.ci95[0]).toBeCloseTo(0.5 - (t975(3) * s) / 2, 12);
    expect(e.ci95[1]).toBeCloseTo(0.5 + (t975(3) * s) / 2, 12);
    expect(overTasks([0.3]).ci95).toEqual([0.3, 0.3]);
    // A rate stays inside [0, 1] and, at 0 or 1, is not a point.
    const r = overTasks([0, 1], true);
    expect(r.ci95[0]).toBeGreaterThanOrEqual(0);
    expect(r.ci95[1]).toBeLessThanOrEqual(1);
    expect(overTasks([0, 0, 0], true).ci95[1]).toBeGreaterThan(0);
  });

  it('tool errors by kind and by tool, tokens, stop reasons and drift from the turns', () => {
    const turn = (isError: boolean, kind?: string) => ({
      action: { content: '', tool_calls: [] },
      tool_results: [{ id: 'c', name: 'add', tool: 'add', arguments: {}, isError, ...(kind ? { errorKind: kind } : {}), ms: 1, text: '' }],
      step_reward: 0,
      policy_ms: 1,
      usage: { prompt_tokens: 100, completion_tokens: 7 },
      stop_reason: 'tool_calls',
    });
    const t1 = traj('a', 0, false, { turns: [turn(true, 'invalid_arguments'), { ...turn(false), token_drift: 'x' }] });
    const t2 = traj('a', 1, true, { turns: [turn(true, 'timeout')] });
    const r = evalReport('p', 2, [task('a')], [t1, t2], 1);
    expect(r.tool_errors).toEqual({ total: 2, rate: 2 / 3, by_kind: { invalid_arguments: 1, timeout: 1 }, by_tool: { add: { calls: 3, errors: 2 } } });
    expect(r.tokens.prompt).toBe(300);
    expect(r.tokens.completion).toBe(21);
    expect(r.stop_reasons).toEqual({ tool_calls: 3 });
    expect(r.token_drift_turns).toBe(1);
  });
});

describe('mcp-gym eval', () => {
  let tmp: string;
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-eval-'));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('runs a policy on two suites with k samples: figures, JSONL, eval.json, the HTML report', async () => {
    const out = join(tmp, 'two');
    const r = await runCli(['eval', '--suite', 'calculator,sql', '-k', '3', '--limit', '3', '--policy', 'expert', '--out', out, '--json']);
    expect(r.stderr).not.toMatch(/warning|error/i);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(report.tasks).toBe(6);
    expect(report.episodes).toBe(18);
    expect(report.pass_at_1.mean).toBe(1);
    expect(report.pass_hat_k.mean).toBe(1);
    expect(new Set(report.per_task.map((t: { suite: string }) => t.suite.split('.')[0]))).toEqual(new Set(['calculator', 'sql']));
    expect(Object.keys(report.by_suite)).toEqual(['calculator', 'sql']);
    expect(report.by_suite.sql).toMatchObject({ tasks: 3, pass_at_1: { mean: 1 } });
    expect(r.stdout).toMatch(/sql \(3 tasks\) +pass@1 100\.0%/);
    expect(readTrajectories(join(out, 'trajectories.jsonl'), true)).toHaveLength(18);
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    for (const t of report.per_task) expect(html).toContain(`<td>${t.task}</td>`);
    expect(html).toContain('None: every episode was solved.');
    expect(r.stdout).toMatch(/pass\^3 +100\.0% \[4\d\.\d%, 100\.0%\]/); // 6 tasks, all solved: the tasks are the units (lib/evaluator.ts), not [100, 100]
  });

  it('resumes a cut evaluation: only the missing episodes run, and other settings are refused', async () => {
    const out = join(tmp, 'resume');
    const first = await runCli(['eval', '--suite', 'calculator', '-k', '4', '--limit', '3', '--policy', 'random:3', '--out', out, '--json']);
    expect(first.code).toBe(0);
    const file = join(out, 'trajectories.jsonl');
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    writeFileSync(file, lines.slice(0, 7).join('\n') + '\n');
    const again = await runCli(['eval', '--suite', 'calculator', '-k', '4', '--limit', '3', '--policy', 'random:3', '--out', out, '--resume', '--json']);
    expect(again.code).toBe(0);
    const report = JSON.parse(again.stdout.trim().split('\n').at(-1)!);
    expect(report.resumed).toBe(7);
    expect(report.episodes).toBe(12);
    expect(readTrajectories(file)).toHaveLength(12);
    const other = await runCli(['eval', '--suite', 'calculator', '-k', '5', '--limit', '3', '--policy', 'random:3', '--out', out, '--resume']);
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(/--resume: .* used --group 4, not 5/);
    const fresh = await runCli(['eval', '--suite', 'calculator', '-k', '4', '--limit', '3', '--out', out]);
    expect(fresh.code).toBe(2);
    expect(fresh.stderr).toMatch(/already holds trajectories: pass --resume/);
  });

  it('works on a third-party server: a task file whose server is server-everything (npm) over stdio', async () => {
    const tasks = join(tmp, 'everything.jsonl');
    const lines = [
      { a: 2, b: 3 },
      { a: 40, b: 2 },
    ].map(({ a, b }, i) =>
      JSON.stringify({
        id: `everything-sum-${i}`,
        split: 'eval',
        difficulty: 1,
        prompt: `Use the get-sum tool to add ${a} and ${b}; answer with the sum.`,
        servers: { everything: { transport: 'stdio', command: process.execPath, args: [EVERYTHING, 'stdio'] } },
        checks: [
          { kind: 'call', server: 'everything', tool: 'get-sum', arguments: { a, b } },
          { kind: 'answer', expect: { kind: 'number', value: a + b } },
        ],
        solution: { calls: [{ server: 'everything', tool: 'get-sum', arguments: { a, b } }], answer: String(a + b) },
      }),
    );
    writeFileSync(tasks, lines.join('\n') + '\n');
    const expert = await runCli(['eval', '--tasks', tasks, '-k', '2', '--policy', 'expert', '--out', join(tmp, 'ev-expert'), '--json']);
    expect(expert.stderr).not.toMatch(/warning|error/i);
    const e = JSON.parse(expert.stdout.trim().split('\n').at(-1)!);
    expect(e.pass_at_1.mean).toBe(1);
    expect(e.tool_errors.by_tool['get-sum']).toEqual({ calls: 4, errors: 0 });
    const random = await runCli(['eval', '--tasks', tasks, '-k', '4', '--policy', 'random:5', '--out', join(tmp, 'ev-random'), '--json']);
    expect(random.code).toBe(0);
    const r = JSON.parse(random.stdout.trim().split('\n').at(-1)!);
    expect(r.episodes).toBe(8);
    expect(r.pass_at_1.mean).toBeLessThan(1);
    const html = readFileSync(join(tmp, 'ev-random', 'report.html'), 'utf8');
    expect(html).toContain('Episodes not solved');
    expect(html).toMatch(/class="traj fail"/);
  });
});
