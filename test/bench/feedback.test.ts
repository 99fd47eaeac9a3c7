/**
 * Feedback for server authors (src/bench/feedback.ts): the schema validator and the server-error
 * reader on their own; the per-tool figures on hand-made trajectories (exact counts, field errors,
 * empty results, time shares, tools never called); and end to end, `mcp-gym eval` and the bench's
 * agent part with the expert replaying calls (some with bad arguments) against the bundled kv
 * server, their feedback checked against the trajectories they wrote.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServerArgumentError, renderFeedbackText, toolFeedback, validateArguments, type ToolFeedback } from '../../src/bench/index.ts';
import { RandomPolicy } from '../../src/agents/index.ts';
import { Environment, parseFaults, readTrajectories, rollout, type ToolStep, type Trajectory } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { runCli } from '../helpers.ts';

describe('validateArguments', () => {
  const schema = {
    type: 'object',
    properties: {
      expression: { type: 'string', minLength: 1, maxLength: 5 },
      limit: { type: 'integer', minimum: 1, maximum: 10 },
      mode: { enum: ['fast', 'exact'] },
      tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]+$' }, maxItems: 3 },
      by: { anyOf: [{ type: 'integer' }, { type: 'string', pattern: '^-?\\d+$' }] },
      note: { anyOf: [{ type: 'string' }, { type: 'null' }] },
      point: { $ref: '#/$defs/point' },
    },
    required: ['expression'],
    additionalProperties: false,
    $defs: { point: { type: 'object', properties: { x: { type: 'number' } }, required: ['x'] } },
  };
  const problems = (v: unknown) => validateArguments(schema, v).map((i) => `${i.path || '(arguments)'}: ${i.problem}`);

  it('passes what the schema allows', () => {
    expect(problems({ expression: '1+1', limit: 3, mode: 'fast', tags: ['a', 'b'], by: '-12', note: null, point: { x: 1.5 } })).toEqual([]);
  });

  it('names the field and what was wrong', () => {
    expect(problems({})).toEqual(['expression: required']);
    expect(problems({ expression: '1', limit: 'ten' })).toEqual(['limit: expected integer, got string']);
    expect(problems({ expression: '1', limit: 2.5 })).toEqual(['limit: expected integer, got number']);
    expect(problems({ expression: '', limit: 0 })).toEqual(['expression: expected at least 1 characters', 'limit: expected >= 1']);
    expect(problems({ expression: '123456', limit: 11 })).toEqual(['expression: expected at most 5 characters', 'limit: expected <= 10']);
    expect(problems({ expression: '1', mode: 'slow' })).toEqual(['mode: expected one of fast, exact']);
    expect(problems({ expression: '1', tags: ['ok', 'NO', 3, 'a'] })).toEqual([
      'tags: expected at most 3 items',
      'tags[1]: does not match ^[a-z]+$',
      'tags[2]: expected string, got integer',
    ]);
    expect(problems({ expression: '1', by: 'x' })).toEqual(['by: does not match ^-?\\d+$']);
    expect(problems({ expression: '1', by: true, note: 3 })).toEqual([
      'by: expected integer or string, got boolean',
      'note: expected string or null, got integer',
    ]);
    expect(problems({ expression: '1', point: {} })).toEqual(['point.x: required']);
    expect(problems({ expression: '1', colour: 'red' })).toEqual(['colour: unknown field']);
    expect(problems([1])).toEqual(['(arguments): expected object, got array']);
    // Keywords it does not know are ignored, never reported.
    expect(validateArguments({ type: 'string', format: 'email' }, 'x')).toEqual([]);
  });

  it("reads the fields out of the MCP SDK's argument errors", () => {
    expect(
      parseServerArgumentError(
        'Input validation error: Invalid arguments for tool get: key: Invalid input: expected string, received undefined, limit: Invalid input: expected number, received string',
      ),
    ).toEqual([
      { path: 'key', problem: 'required' },
      { path: 'limit', problem: 'expected number, got string' },
    ]);
    expect(parseServerArgumentError('Input validation error: Invalid arguments for tool incr: by: by must be an integer')).toEqual([
      { path: 'by', problem: 'by must be an integer' },
    ]);
    expect(
      parseServerArgumentError('MCP error -32602: Input validation error: Invalid arguments for tool t: Required at items.0.name\nToo big at limit'),
    ).toEqual([
      { path: 'items.0.name', problem: 'Required' },
      { path: 'limit', problem: 'Too big' },
    ]);
    // As the client wraps a protocol error: the server's own message is read.
    expect(
      parseServerArgumentError(
        "Invalid arguments for tool 'get': MCP error -32602: Input validation error: Invalid arguments for tool get: key: Invalid input: expected string, received number",
      ),
    ).toEqual([{ path: 'key', problem: 'expected string, got number' }]);
    expect(parseServerArgumentError('something else went wrong')).toEqual([]);
  });
});

type OfferedTool = { name: string; description: string; parameters: Record<string, unknown> };
const KV_TOOLS: OfferedTool[] = [
  {
    name: 'get',
    description: '',
    parameters: { type: 'object', properties: { key: { type: 'string', minLength: 1 } }, required: ['key'], additionalProperties: false },
  },
  {
    name: 'set',
    description: '',
    parameters: { type: 'object', properties: { key: { type: 'string' }, value: { type: 'string' } }, required: ['key', 'value'] },
  },
  { name: 'list', description: '', parameters: { type: 'object', properties: { limit: { type: 'integer', minimum: 1 } } } },
  { name: 'delete', description: '', parameters: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] } },
];
const CALC_TOOLS: OfferedTool[] = [
  { name: 'evaluate', description: '', parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] } },
];

let stepNo = 0;
function step(server: string | undefined, tool: string, args: unknown, o: { isError?: boolean; errorKind?: string; ms: number; text?: string }): ToolStep {
  return {
    id: `c${stepNo++}`,
    name: tool,
    ...(server ? { server, tool } : {}),
    arguments: args,
    isError: o.isError ?? false,
    ...(o.errorKind ? { errorKind: o.errorKind } : {}),
    ms: o.ms,
    text: o.text ?? '{"ok":true}',
  };
}

function traj(id: string, tools: Trajectory['tools'], steps: ToolStep[], totalMs: number): Trajectory {
  return {
    id,
    task_id: id,
    group_id: id,
    sample: 0,
    split: 'eval',
    difficulty: 1,
    policy: { id: 'p' },
    tools,
    messages: [],
    turns: steps.map((s) => ({ action: { content: '', tool_calls: [] }, tool_results: [s], step_reward: 0, policy_ms: 0 })),
    answer: null,
    success: false,
    reward: 0,
    reward_parts: {},
    checks: [],
    metrics: { turns: steps.length, tool_calls: steps.length, tool_errors: steps.filter((s) => s.isError).length, policy_tokens: 0 },
    timings: { started_at: '', total_ms: totalMs, policy_ms: 0, tool_ms: steps.reduce((a, s) => a + s.ms, 0) },
    finish: 'answer',
  };
}

describe('toolFeedback on hand-made trajectories', () => {
  const withServers = (tools: OfferedTool[], server: string) => tools.map((t) => ({ ...t, server, tool: t.name }));
  const ts = [
    // Its tools say their server (as the environment records them).
    traj(
      't1',
      [...withServers(KV_TOOLS, 'kv'), ...withServers(CALC_TOOLS, 'calc')],
      [
        step('kv', 'get', { key: 'a' }, { ms: 10 }),
        step(
          'kv',
          'get',
          {},
          {
            isError: true,
            errorKind: 'invalid_arguments',
            ms: 2,
            text: 'Input validation error: Invalid arguments for tool get: key: Invalid input: expected string, received undefined',
          },
        ),
        step(
          'kv',
          'list',
          { limit: 'x' },
          {
            isError: true,
            errorKind: 'invalid_arguments',
            ms: 4,
            text: 'Input validation error: Invalid arguments for tool list: limit: Invalid input: expected number, received string',
          },
        ),
        step('calc', 'evaluate', { expression: '1+1' }, { ms: 4, text: '  \n ' }),
      ],
      100,
    ),
    // An older trajectory: its tools do not say their server; its calls do.
    traj(
      't2',
      [...KV_TOOLS, ...CALC_TOOLS],
      [
        step('kv', 'get', { key: 'b', extra: 1 }, { ms: 6, text: '' }),
        step('kv', 'set', { key: 5, value: 'x' }, { isError: true, errorKind: 'tool', ms: 3, text: 'key must be a string' }),
        step('calc', 'evaluate', { expression: 'x' }, { isError: true, errorKind: 'tool', ms: 5, text: 'bad expression' }),
        step(undefined, 'frobnicate', {}, { isError: true, errorKind: 'unknown_tool', ms: 0, text: 'Unknown tool' }),
        step('kv', 'get', '{bad', { isError: true, errorKind: 'invalid_arguments', ms: 0, text: "Invalid arguments for tool 'get': not a JSON object" }),
      ],
      300,
    ),
    // Given only the calculator, and made no call.
    traj('t3', withServers(CALC_TOOLS, 'calc'), [], 100),
  ];
  const f = toolFeedback(ts);
  const tool = (server: string, name: string) => f.servers.find((s) => s.server === server)!.tools.find((t) => t.tool === name)!;

  it('counts calls, episodes and the share of the episodes given the tool that called it', () => {
    expect(f).toMatchObject({ episodes: 3, episode_ms: 500, tool_calls: 9 });
    expect(f.servers.map((s) => s.server)).toEqual(['calc', 'kv']);
    expect(f.servers.find((s) => s.server === 'kv')!.tools.map((t) => [t.tool, t.calls])).toEqual([
      ['get', 4],
      ['list', 1],
      ['set', 1],
    ]);
    expect(tool('kv', 'get')).toMatchObject({ offered: 2, episodes: 2, episode_share: 1 });
    expect(tool('kv', 'set')).toMatchObject({ offered: 2, episodes: 1, episode_share: 0.5 });
    expect(tool('calc', 'evaluate')).toMatchObject({ calls: 2, offered: 3, episodes: 2 });
    expect(tool('calc', 'evaluate').episode_share).toBeCloseTo(2 / 3, 12);
    expect(f.unknown_tools).toEqual([{ name: 'frobnicate', calls: 1, episodes: 1 }]);
  });

  it('argument errors by field, from the schema first and from the server when the arguments are not JSON', () => {
    expect(tool('kv', 'get')).toMatchObject<Partial<ToolFeedback>>({
      argument_errors: 2,
      field_errors: [
        { field: '(arguments)', problem: 'not a JSON object', calls: 1 },
        { field: 'key', problem: 'required', calls: 1 },
      ],
      // {key, extra}: the schema refuses `extra`, the server took it.
      accepted_invalid: 1,
    });
    expect(tool('kv', 'list').field_errors).toEqual([{ field: 'limit', problem: 'expected integer, got string', calls: 1 }]);
    // A tool error whose arguments break the schema is an argument error.
    expect(tool('kv', 'set')).toMatchObject({
      argument_errors: 1,
      errors: 1,
      errors_by_kind: { tool: 1 },
      field_errors: [{ field: 'key', problem: 'expected string, got integer', calls: 1 }],
    });
    expect(tool('calc', 'evaluate')).toMatchObject({ argument_errors: 0, field_errors: [], errors: 1, errors_by_kind: { tool: 1 } });
  });

  it('errors by kind, empty results, time shares, latency and the tools never called', () => {
    expect(tool('kv', 'get')).toMatchObject({ errors: 2, errors_by_kind: { invalid_arguments: 2 }, empty: 1, total_ms: 18, mean_ms: 4.5, p95_ms: 10 });
    expect(tool('kv', 'get').time_share).toBeCloseTo(18 / 500, 12);
    expect(tool('calc', 'evaluate')).toMatchObject({ empty: 1, total_ms: 9, p95_ms: 5 });
    expect(tool('calc', 'evaluate').time_share).toBeCloseTo(9 / 500, 12);
    const kv = f.servers.find((s) => s.server === 'kv')!;
    expect(kv.calls).toBe(6);
    expect(kv.time_share).toBeCloseTo(25 / 500, 12);
    expect(kv.never_called).toEqual(['delete']);
    expect(f.servers.find((s) => s.server === 'calc')!.never_called).toEqual([]);
  });

  it('renders a table per server with the field errors and the tools never called', () => {
    const text = renderFeedbackText(f);
    expect(text).toMatch(/server kv: 6 calls to 3 of 4 tools, 5\.0% of episode time/);
    expect(text).toMatch(/^ {2}tool +calls +episodes +arg errors +errors +empty +time +mean ms +p95 ms$/m);
    expect(text).toMatch(/^ {2}get +4 +2\/2 \(100\.0%\) +2 +2 \(invalid_arguments 2\) +1 +3\.6% +4\.50 +10$/m);
    expect(text).toContain('get: argument errors: (arguments): not a JSON object (1); key: required (1)');
    expect(text).toContain('list: argument errors: limit: expected integer, got string (1)');
    expect(text).toContain('never called: delete');
    expect(text).toContain('tools called that no server offers: frobnicate (1)');
  });

  it("reads the fields out of the server's error when the schema finds nothing wrong", () => {
    const tools = [
      {
        name: 'tag',
        description: '',
        parameters: { type: 'object', properties: { tags: { type: 'array', items: { type: 'string' } } } },
        server: 's',
        tool: 'tag',
      },
    ];
    const refused = (i: number) =>
      step(
        's',
        'tag',
        { tags: ['x', 'y'] },
        {
          isError: true,
          errorKind: 'invalid_arguments',
          ms: 1,
          text: `Input validation error: Invalid arguments for tool tag: tags.${i}: Too long, tags: Too many`,
        },
      );
    const g = toolFeedback([traj('s1', tools, [refused(0), refused(1)], 10)]);
    expect(g.servers[0]!.tools[0]).toMatchObject({
      argument_errors: 2,
      field_errors: [
        { field: 'tags', problem: 'Too many', calls: 2 },
        { field: 'tags[]', problem: 'Too long', calls: 2 },
      ],
    });
  });

  it('finds the server of a tool never called from the task when the trajectory does not say it', () => {
    const old = [traj('solo', [...KV_TOOLS], [step('kv', 'get', { key: 'a' }, { ms: 1 })], 10)];
    expect(toolFeedback(old).servers.map((s) => [s.server, s.never_called])).toEqual([
      ['(unknown server)', ['delete', 'list', 'set']],
      ['kv', []],
    ]);
    expect(toolFeedback(old, { serversOf: () => ['kv'] }).servers.map((s) => [s.server, s.never_called])).toEqual([['kv', ['delete', 'list', 'set']]]);
  });
});

/** What the feedback should say, counted straight from trajectories. */
function countSteps(ts: Trajectory[]) {
  const by = new Map<string, { calls: number; errors: number; ms: number; episodes: Set<string> }>();
  for (const t of ts)
    for (const turn of t.turns)
      for (const s of turn.tool_results) {
        const e = by.get(`${s.server}/${s.tool}`) ?? { calls: 0, errors: 0, ms: 0, episodes: new Set<string>() };
        e.calls++;
        if (s.isError) e.errors++;
        e.ms += s.ms;
        e.episodes.add(t.id);
        by.set(`${s.server}/${s.tool}`, e);
      }
  return by;
}

describe('feedback under injected faults', () => {
  it('leaves out sabotaged calls and distractor tools: the server is not blamed for what was injected', async () => {
    const tasks = generateSuite('kv')
      .filter((t) => t.split === 'eval')
      .slice(0, 8);
    const env = new Environment({ faults: { spec: parseFaults('error=0.5,distractors=3'), seed: 1 } });
    try {
      const r = await rollout(env, new RandomPolicy(3, 0.1), tasks, { group: 2, concurrency: 1 });
      const steps = r.trajectories.flatMap((t) => t.turns.flatMap((x) => x.tool_results));
      expect(steps.filter((x) => x.fault === 'error').length).toBeGreaterThan(0);
      expect(steps.filter((x) => x.fault === 'distractor').length).toBeGreaterThan(0);
      const f = toolFeedback(r.trajectories);
      const kv = f.servers.find((x) => x.server === 'kv')!;
      const distractors = new Set(r.trajectories.flatMap((t) => (t.tools ?? []).filter((x) => x.distractor).map((x) => x.name)));
      expect(distractors.size).toBe(3);
      for (const name of [...kv.never_called, ...kv.tools.map((x) => x.tool)]) expect(distractors.has(name), name).toBe(false);
      // Every call counted is one the server answered.
      expect(kv.calls).toBe(steps.filter((x) => x.fault === undefined && x.server === 'kv').length);
      expect(kv.tools.reduce((a, x) => a + x.errors, 0)).toBe(steps.filter((x) => x.fault === undefined && x.isError && x.server === 'kv').length);
    } finally {
      await env.close();
    }
  });
});

describe('feedback end to end: the expert replays calls with bad arguments against the bundled kv server', () => {
  let tmp: string;
  let tasks: string;
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-feedback-'));
    tasks = join(tmp, 'tasks.jsonl');
    const calls = [
      { server: 'kv', tool: 'set', arguments: { key: 'c', value: '10' } },
      { server: 'kv', tool: 'get', arguments: {} },
      { server: 'kv', tool: 'list', arguments: { limit: 'many' } },
      { server: 'kv', tool: 'get', arguments: { key: 'c' } },
    ];
    const task = (id: string, n: number) => ({
      id,
      split: 'eval',
      difficulty: 1,
      prompt: 'Store 10 under c and read it back.',
      servers: { kv: 'kv' },
      checks: [{ kind: 'answer', expect: { kind: 'number', value: 10 } }],
      solution: { calls: calls.slice(0, n), answer: '10' },
    });
    writeFileSync(tasks, [task('fb-a', 4), task('fb-b', 1)].map((t) => JSON.stringify(t)).join('\n') + '\n');
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('mcp-gym eval prints the feedback and writes it to eval.json and report.html, in agreement with trajectories.jsonl', async () => {
    const out = join(tmp, 'eval');
    const r = await runCli(['eval', '--tasks', tasks, '-k', '2', '--policy', 'expert', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('feedback for server authors: 10 tool calls in 4 episodes');
    expect(r.stdout).toMatch(/server kv: 10 calls to 3 of 5 tools/);
    expect(r.stdout).toContain('get: argument errors: key: required (2)');
    expect(r.stdout).toContain('list: argument errors: limit: expected integer, got string (2)');
    expect(r.stdout).toContain('never called: delete, incr');

    const ts = readTrajectories(join(out, 'trajectories.jsonl'));
    expect(ts).toHaveLength(4);
    // The environment records each offered tool's server.
    expect(ts[0]!.tools!.every((t) => t.server === 'kv' && t.tool === t.name)).toBe(true);
    const counted = countSteps(ts);
    const json = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    const saved = JSON.parse(readFileSync(join(out, 'eval.json'), 'utf8'));
    for (const fb of [json.feedback, saved.feedback]) {
      expect(fb.episodes).toBe(4);
      expect(fb.tool_calls).toBe(ts.reduce((s, t) => s + t.metrics.tool_calls, 0));
      const kv = fb.servers.find((s: { server: string }) => s.server === 'kv');
      expect(kv.never_called).toEqual(['delete', 'incr']);
      expect(kv.tools.map((t: ToolFeedback) => [t.tool, t.calls])).toEqual([
        ['get', 4],
        ['set', 4],
        ['list', 2],
      ]);
      for (const t of kv.tools as ToolFeedback[]) {
        const c = counted.get(`kv/${t.tool}`)!;
        expect(t.calls).toBe(c.calls);
        expect(t.errors).toBe(c.errors);
        expect(t.episodes).toBe(c.episodes.size);
        expect(t.offered).toBe(4);
        expect(t.total_ms).toBeCloseTo(c.ms, 6);
        expect(t.time_share).toBeCloseTo(c.ms / ts.reduce((s, x) => s + x.timings.total_ms, 0), 9);
      }
      const get = kv.tools.find((t: ToolFeedback) => t.tool === 'get');
      expect(get).toMatchObject({
        episodes: 2,
        argument_errors: 2,
        errors: 2,
        errors_by_kind: { invalid_arguments: 2 },
        empty: 0,
        field_errors: [{ field: 'key', problem: 'required', calls: 2 }],
      });
      expect(kv.tools.find((t: ToolFeedback) => t.tool === 'set')).toMatchObject({ episodes: 4, argument_errors: 0, errors: 0 });
    }
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).toContain('<h2>Feedback for server authors</h2>');
    expect(html).toContain('limit: expected integer, got string (2)');
  });

  it("the bench's agent part reports the same in its text, --json and --html", async () => {
    const htmlFile = join(tmp, 'bench.html');
    const r = await runCli(['bench', '--tasks', tasks, '--policy', 'expert', '-k', '2', '--json', '--html', htmlFile]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/server kv: 10 calls to 3 of 5 tools/);
    expect(r.stdout).toContain('get: argument errors: key: required (2)');
    const fb = JSON.parse(r.stdout.trim().split('\n').at(-1)!).agent.feedback;
    expect(fb.episodes).toBe(4);
    expect(fb.servers[0].tools.map((t: ToolFeedback) => [t.tool, t.calls, t.argument_errors])).toEqual([
      ['get', 4, 2],
      ['set', 4, 0],
      ['list', 2, 2],
    ]);
    expect(readFileSync(htmlFile, 'utf8')).toContain('never called: delete, incr');
  });
});
