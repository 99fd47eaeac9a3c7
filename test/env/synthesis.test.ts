/**
 * Verified task synthesis (src/env/synthesis.ts, `mcp-gym tasks generate`): a generator's
 * candidates for the bundled kv server, good and bad, verified on real episodes; exactly the good
 * ones are kept and every rejection is counted by its reason. Then the same through Anthropic's
 * SDK against the local replay server of the Messages API, from the CLI.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { Environment, loadTasks, parseCandidates, rollout, synthesizeTasks, type ChatModel, type ChatRequest } from '../../src/env/index.ts';
import { messageResponse, ok, startAnthropicReplay, textBlock, type AnthropicReplay } from '../helpers/anthropic-replay.ts';
import { ROOT, runCli } from '../helpers.ts';

const set = (key: string, value: string) => ({ server: 'kv', tool: 'set', arguments: { key, value } });
const get = (key: string) => ({ server: 'kv', tool: 'get', arguments: { key } });

const good1 = {
  prompt: "Store the value 'blue' under the key 'color'.",
  solution: { calls: [set('color', 'blue')], answer: 'done' },
  checks: [{ kind: 'state', call: get('color'), path: 'value', expect: { kind: 'equals', value: 'blue' } }],
};
const good2 = {
  prompt: "Delete the key 'tmp' from the store.",
  setup: [set('tmp', 'x')],
  solution: { calls: [{ server: 'kv', tool: 'delete', arguments: { key: 'tmp' } }], answer: 'deleted' },
  checks: [{ kind: 'state', call: get('tmp'), path: 'found', expect: { kind: 'equals', value: false } }],
};
const good3 = {
  prompt: "What value is stored under the key 'secret'? Answer with the value only.",
  difficulty: 2,
  setup: [set('secret', '4217')],
  solution: { calls: [get('secret')], answer: '4217' },
  checks: [{ kind: 'answer', expect: { kind: 'exact', value: '4217' } }],
};
/** Its reference solution stores 'red'; its check wants 'green'. */
const failing = {
  prompt: "Store the value 'red' under the key 'shade'.",
  solution: { calls: [set('shade', 'red')], answer: 'done' },
  checks: [{ kind: 'state', call: get('shade'), path: 'value', expect: { kind: 'equals', value: 'green' } }],
};
const noSolution = {
  prompt: "Store the value 'tea' under the key 'drink'.",
  checks: [{ kind: 'state', call: get('drink'), path: 'value', expect: { kind: 'equals', value: 'tea' } }],
};
/** Its state check calls a tool the server does not have. */
const unknownTool = {
  prompt: "Rename the key 'a' to 'b'.",
  setup: [set('a', '1')],
  solution: { calls: [set('b', '1')], answer: 'done' },
  checks: [{ kind: 'state', call: { server: 'kv', tool: 'lookup', arguments: { key: 'b' } }, path: 'value', expect: { kind: 'equals', value: '1' } }],
};
/** The setup already makes its check pass: doing nothing passes. */
const trivial = {
  prompt: "Make sure the key 'mode' holds 'dark'.",
  setup: [set('mode', 'dark')],
  solution: { calls: [set('mode', 'dark')], answer: 'done' },
  checks: [{ kind: 'state', call: get('mode'), path: 'value', expect: { kind: 'equals', value: 'dark' } }],
};
/** The same solution as good1, in other words. */
const duplicate = { ...good1, prompt: "Please save 'blue' as the value of the key 'color'." };
const invalid = { prompt: "Store 'x' under 'y'.", solution: { calls: [set('y', 'x')], answer: 'done' } };

const fenced = (v: unknown) => `Here are the tasks.\n\`\`\`json\n${JSON.stringify(v, null, 2)}\n\`\`\``;

describe('parseCandidates', () => {
  it('reads a fenced JSON array, a bare array in prose, JSON lines and one object; nothing from prose', () => {
    expect(parseCandidates(fenced([good1, good2]))).toHaveLength(2);
    expect(parseCandidates(`Sure: ${JSON.stringify([good1])} hope this helps`)).toHaveLength(1);
    expect(parseCandidates(`${JSON.stringify(good1)}\n${JSON.stringify(good2)}`)).toHaveLength(2);
    expect(parseCandidates(JSON.stringify(good3))).toHaveLength(1);
    expect(parseCandidates('I cannot write tasks for this server.')).toBeUndefined();
  });
});

describe('synthesizeTasks with scripted generator answers', () => {
  let env: Environment;
  beforeAll(() => {
    env = new Environment({ bundled: 'inprocess' });
  });
  afterAll(async () => {
    await env.close();
  });

  it('keeps exactly the good candidates and counts every rejection by reason', async () => {
    const answers = [fenced([good1, failing, noSolution, trivial]), 'I cannot think of more tasks.', fenced([duplicate, invalid, good2, unknownTool, good3])];
    const requests: ChatRequest[] = [];
    const generator: ChatModel = {
      id: 'scripted',
      complete: async (request) => {
        requests.push(request);
        return { text: answers.shift() ?? '[]' };
      },
    };
    const r = await synthesizeTasks({ generator, servers: { kv: 'kv' }, env, reference: new ExpertPolicy(), n: 3, perRequest: 5, maxRequests: 5 });
    expect(r.tasks.map((t) => t.prompt)).toEqual([good1.prompt, good2.prompt, good3.prompt]);
    expect(r.tasks.map((t) => t.id)).toEqual(['gen-0001', 'gen-0002', 'gen-0003']);
    expect(r.rejected).toEqual({ unparseable: 1, invalid: 1, duplicate: 1, unverifiable: 2, reference_fails: 1, trivial: 1 });
    expect(r.candidates).toBe(10);
    expect(r.requests).toBe(3);
    const why = (reason: string) => r.rejections.filter((x) => x.reason === reason).map((x) => x.detail);
    expect(why('reference_fails')[0]).toMatch(/checks\[0\] \(state\)/);
    expect(why('trivial')[0]).toMatch(/does nothing passes checks\[0\]/);
    expect(why('invalid')[0]).toMatch(/^checks/);
    expect(why('duplicate')[0]).toMatch(/gen-0001/);
    expect(why('unverifiable').join('\n')).toMatch(/no reference solution/);
    expect(why('unverifiable').join('\n')).toMatch(/lookup/);
    // The generator saw the server's tools; later requests name what was kept and what was rejected.
    expect(requests[0]!.messages[0]!.content).toMatch(/"name": "set"/);
    expect(requests[2]!.messages[0]!.content).toContain(good1.prompt);
    expect(requests[2]!.messages[0]!.content).toMatch(/reference_fails/);
    // The kept tasks are ordinary tasks: the expert solves them, doing nothing fails them.
    const solved = await rollout(env, new ExpertPolicy(), r.tasks, { group: 2 });
    expect(solved.trajectories.every((t) => t.success)).toBe(true);
    expect(r.tasks.map((t) => t.split)).toEqual(['train', 'train', 'train']);
    expect(r.tasks[2]!.difficulty).toBe(2);
  });

  it('stopped after the first task is kept: that task stays, the rest is neither kept nor counted as rejected', async () => {
    const ac = new AbortController();
    const generator: ChatModel = { id: 'scripted', complete: async () => ({ text: fenced([good1, failing, good2, trivial]) }) };
    const kept: string[] = [];
    const r = await synthesizeTasks({
      generator,
      servers: { kv: 'kv' },
      env,
      reference: new ExpertPolicy(),
      n: 3,
      signal: ac.signal,
      onTask: (t) => (kept.push(t.id), ac.abort()),
    });
    expect(kept).toEqual(['gen-0001']);
    expect(r.tasks.map((t) => t.prompt)).toEqual([good1.prompt]);
    expect(Object.values(r.rejected).reduce((a, b) => a + b, 0)).toBe(0);
    expect(r.requests).toBe(1);
  });

  it('stops at maxRequests when the generator never writes a good task', async () => {
    let calls = 0;
    const generator: ChatModel = { id: 'bad', complete: async () => (calls++, { text: fenced([failing]) }) };
    const r = await synthesizeTasks({ generator, servers: { kv: 'kv' }, env, reference: new ExpertPolicy(), n: 2, maxRequests: 2 });
    expect(r.tasks).toEqual([]);
    expect(calls).toBe(2);
    // The second time the same candidate is rejected again for the same reason (it is not kept).
    expect(r.rejected.reference_fails).toBe(2);
  });
});

describe('synthesizeTasks on a third-party stdio server (the reference server-everything from npm)', () => {
  it('shows the generator its tools and resources; a get-sum task with an answer check is verified and kept', async () => {
    const everything = {
      transport: 'stdio' as const,
      command: process.execPath,
      args: [join(ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js')],
    };
    const sum = {
      prompt: 'What is 1234 + 4321? Use the get-sum tool, then answer with the number only.',
      solution: { calls: [{ server: 'everything', tool: 'get-sum', arguments: { a: 1234, b: 4321 } }], answer: '5555' },
      checks: [
        { kind: 'call', server: 'everything', tool: 'get-sum', arguments: { a: 1234, b: 4321 } },
        { kind: 'answer', expect: { kind: 'number', value: 5555 } },
      ],
    };
    const wrongTool = {
      ...sum,
      prompt: 'Add 1 and 2 with the sum tool.',
      solution: { calls: [{ server: 'everything', tool: 'sum', arguments: { a: 1, b: 2 } }], answer: '3' },
      checks: [{ kind: 'answer', expect: { kind: 'number', value: 3 } }],
    };
    const seen: string[] = [];
    const generator: ChatModel = { id: 'scripted', complete: async (r) => (seen.push(r.messages[0]!.content), { text: fenced([wrongTool, sum]) }) };
    const env = new Environment();
    try {
      const r = await synthesizeTasks({ generator, servers: { everything }, env, reference: new ExpertPolicy(), n: 1, maxRequests: 1 });
      expect(r.tasks.map((t) => t.prompt)).toEqual([sum.prompt]);
      expect(r.resources.everything!.length).toBeGreaterThan(0);
      expect(seen[0]).toMatch(/"name": "get-sum"/);
      expect(seen[0]).toContain(r.resources.everything![0]!.uri);
      // The wrong tool name: the reference cannot replay it.
      expect(r.rejected.reference_fails + r.rejected.unverifiable).toBe(1);
    } finally {
      await env.close();
    }
  }, 60_000);
});

describe('mcp-gym tasks generate: usage errors name what is wrong (exit 2)', () => {
  it('refuses a missing or double server, an unknown bundled server, a missing or non-text generator, a missing --out and an unknown command', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'mcp-gym-synthesis-usage-')), 'tasks.jsonl');
    const cases: [string[], RegExp][] = [
      [['generate', '--generator', 'anthropic:m', '--out', out], /exactly one server/],
      [['generate', '--server', 'kv', '--stdio', 'node x.js', '--generator', 'anthropic:m', '--out', out], /exactly one server/],
      [['generate', '--server', 'nope', '--generator', 'anthropic:m', '--out', out], /--server must be a bundled server \(calculator, .*\), got 'nope'/],
      [['generate', '--server', 'kv', '--out', out], /needs --generator/],
      [['generate', '--server', 'kv', '--generator', 'onnx:models/calc-tiny', '--out', out], /--generator must be openai:<model> or anthropic:<model>/],
      [['generate', '--server', 'kv', '--generator', 'anthropic:m'], /needs --out/],
      [['generate', '--server', 'kv', '--generator', 'anthropic:m', '--out', out, '--alias', 'Bad Alias'], /--alias must be/],
      [['generate', '--server', 'kv', '--generator', 'anthropic:m', '--out', out, '--eval-fraction', '2'], /--eval-fraction must be a number from 0 to 1/],
      [['frobnicate'], /Unknown 'tasks' command 'frobnicate'/],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(['tasks', ...args])));
    results.forEach((r, i) => {
      expect(r.code, cases[i]![0].join(' ')).toBe(2);
      expect(r.stderr).toMatch(cases[i]![1]);
    });
  }, 60_000);
});

describe('mcp-gym tasks generate through the Anthropic SDK (local replay of the Messages API)', () => {
  const KEY = 'sk-ant-api03-synthesis-test-key-0123456789';
  let saved: string | undefined;
  let replay: AnthropicReplay | undefined;
  let dir: string;
  beforeEach(() => {
    saved = process.env.ANTHROPIC_API_KEY;
    process.env.ANTHROPIC_API_KEY = KEY;
    dir = mkdtempSync(join(tmpdir(), 'mcp-gym-synthesis-'));
  });
  afterEach(async () => {
    if (saved === undefined) delete process.env.ANTHROPIC_API_KEY;
    else process.env.ANTHROPIC_API_KEY = saved;
    await replay?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('writes the verified tasks, the rejections and a summary; the file trains and evaluates like any task file', async () => {
    const answer = (v: unknown) => ok(messageResponse([textBlock(fenced(v))], { stop_reason: 'end_turn', usage: { input_tokens: 900, output_tokens: 400 } }));
    replay = await startAnthropicReplay([answer([good1, trivial, good2]), answer([duplicate, good3])]);
    const out = join(dir, 'tasks.jsonl');
    const r = await runCli([
      'tasks',
      'generate',
      '--server',
      'kv',
      '--generator',
      'anthropic:claude-haiku-4-5',
      '--base-url',
      replay.url,
      '-n',
      '3',
      '--per-request',
      '3',
      '--eval-fraction',
      '0.34',
      '--out',
      out,
      '--json',
    ]);
    expect(r.stderr + r.stdout).not.toContain(KEY);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/kept 3 of 5 candidates from 2 requests/);
    const summary = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { kept: number; rejected: Record<string, number> };
    expect(summary.kept).toBe(3);
    expect(summary.rejected).toMatchObject({ trivial: 1, duplicate: 1, reference_fails: 0 });
    // The requests were the Messages API's: the system prompt and the tools in the user turn.
    expect(replay.requests).toHaveLength(2);
    const body = replay.requests[0]!.body as { system: string; messages: { content: string }[]; model: string };
    expect(body.model).toBe('claude-haiku-4-5');
    expect(body.system).toMatch(/You write tasks/);
    expect(body.messages[0]!.content).toMatch(/Write 3 new tasks/);
    const tasks = loadTasks(out);
    expect(tasks.map((t) => t.id)).toEqual(['gen-0001', 'gen-0002', 'gen-0003']);
    expect(tasks.map((t) => t.split)).toEqual(['train', 'train', 'eval']);
    const rejected = readFileSync(join(dir, 'tasks.rejections.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { reason: string });
    expect(rejected.map((x) => x.reason)).toEqual(['trivial', 'duplicate']);
    const env = new Environment();
    try {
      const res = await rollout(env, new ExpertPolicy(), tasks);
      expect(res.trajectories.map((t) => t.success)).toEqual([true, true, true]);
    } finally {
      await env.close();
    }
    // An existing --out is refused.
    const again = await runCli(['tasks', 'generate', '--server', 'kv', '--generator', 'anthropic:claude-haiku-4-5', '--base-url', replay.url, '--out', out]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/exists; give --force/);
  }, 60_000);
});
