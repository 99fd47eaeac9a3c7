import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  codeOf,
  defineTask,
  extractAnswer,
  isSubset,
  match,
  parseExact,
  runChecks,
  schemaAllowsPath,
  stateCallFault,
  taskProblem,
  type Task,
  type TaskCall,
} from '../../src/env/index.ts';
import { ToolClient, type ToolInfo } from '../../src/tools/index.ts';
import { serverFactory } from '../../servers/index.ts';
import { kvServer } from '../../servers/kv.ts';

let kv: ToolClient;
beforeAll(async () => {
  const { factory, backend } = serverFactory(kvServer);
  kv = await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() });
});
afterAll(() => kv.close());

const state = (episode: string) => (c: TaskCall) => kv.call({ name: c.tool, arguments: c.arguments as Record<string, unknown> }, { episode });

function task(checks: unknown[]): Task {
  return defineTask({ id: 'c', split: 'eval', difficulty: 1, prompt: 'p', servers: { kv: 'kv' }, checks } as never);
}

const score = async (
  t: Task,
  record: { answer: string | null; calls?: { server?: string; tool?: string; arguments: unknown; isError: boolean }[] },
  episode = 'none',
) => (await runChecks(t, { answer: record.answer, calls: record.calls ?? [] }, state(episode))).map((r) => r.score);

describe('answer extraction and matching', () => {
  it('takes the answer out of \\boxed{}, <answer> and 答案是', () => {
    expect(extractAnswer('so the result is \\boxed{\\frac{1}{2}} done')).toBe('\\frac{1}{2}');
    expect(extractAnswer('first \\boxed{1} then \\boxed{42}')).toBe('42');
    expect(extractAnswer('<think>hmm</think><answer> Paris </answer>')).toBe('Paris');
    expect(extractAnswer('计算过程……答案是 42。')).toBe('42');
    expect(extractAnswer('答案是：3/4\n')).toBe('3/4');
    expect(extractAnswer('  plain 7 ')).toBe('plain 7');
  });

  it('compares numbers exactly when both are exact, within tolerance otherwise', () => {
    expect(parseExact('-4.50')).toEqual({ num: -450n, den: 100n });
    expect(match({ kind: 'number', value: '123456789012345678901234567890', tolerance: 1e-6 }, '123456789012345678901234567890', true).ok).toBe(true);
    expect(match({ kind: 'number', value: '123456789012345678901234567890', tolerance: 1e-6 }, '123456789012345678901234567891', true).ok).toBe(false);
    expect(match({ kind: 'number', value: '0.5', tolerance: 1e-6 }, '1/2', true).ok).toBe(true);
    expect(match({ kind: 'number', value: 0.3333333, tolerance: 1e-6 }, '1/3', true).ok).toBe(true);
    expect(match({ kind: 'number', value: 0.333, tolerance: 1e-6 }, '1/3', true).ok).toBe(false);
    expect(match({ kind: 'number', value: '1234', tolerance: 1e-6 }, 'The total is 1,234.', true).ok).toBe(true);
    expect(match({ kind: 'number', value: '7', tolerance: 1e-6 }, 'no number here', true).ok).toBe(false);
  });

  it('matches exact, regex, contains, equals and subset', () => {
    expect(match({ kind: 'exact', value: 'Paris', ignore_case: true }, ' paris. ').ok).toBe(true);
    expect(match({ kind: 'exact', value: 'Paris', ignore_case: false }, 'paris').ok).toBe(false);
    expect(match({ kind: 'regex', value: '^a+b$', flags: '' }, 'aaab').ok).toBe(true);
    expect(match({ kind: 'contains', value: 'ELLO', ignore_case: true }, 'hello').ok).toBe(true);
    expect(match({ kind: 'equals', value: { a: [1, 2] } }, { a: [1, 2] }).ok).toBe(true);
    expect(match({ kind: 'equals', value: { a: [1, 2] } }, { a: [2, 1] }).ok).toBe(false);
    expect(isSubset({ a: 1, b: [{ x: 2 }] }, { a: 1, c: 3, b: [{ y: 0 }, { x: 2, z: 1 }] })).toBe(true);
    expect(isSubset({ a: 1, b: [{ x: 3 }] }, { a: 1, b: [{ x: 2 }] })).toBe(false);
  });
});

describe('every check kind scores 1 when right and 0 when wrong', () => {
  it('state: the end state of the episode', async () => {
    const t = task([
      { kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'total' } }, path: 'value', expect: { kind: 'number', value: '42' } },
    ]);
    await kv.call({ name: 'set', arguments: { key: 'total', value: '42' } }, { episode: 'right' });
    await kv.call({ name: 'set', arguments: { key: 'total', value: '41' } }, { episode: 'wrong' });
    expect(await score(t, { answer: 'done' }, 'right')).toEqual([1]);
    expect(await score(t, { answer: 'done' }, 'wrong')).toEqual([0]);
    expect(await score(t, { answer: 'done' }, 'empty')).toEqual([0]);
    const subset = task([
      {
        kind: 'state',
        call: { server: 'kv', tool: 'list', arguments: { prefix: '' } },
        expect: { kind: 'subset', value: { entries: [{ key: 'total', value: '42' }] } },
      },
    ]);
    expect(await score(subset, { answer: null }, 'right')).toEqual([1]);
    expect(await score(subset, { answer: null }, 'wrong')).toEqual([0]);
    const contains = task([
      { kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'total' } }, path: 'value', expect: { kind: 'contains', value: '2' } },
    ]);
    expect(await score(contains, { answer: null }, 'right')).toEqual([1]);
    expect(await score(contains, { answer: null }, 'wrong')).toEqual([0]);
    const failing = task([{ kind: 'state', call: { server: 'kv', tool: 'nope', arguments: {} }, expect: { kind: 'equals', value: 1 } }]);
    const r = await runChecks(failing, { answer: null, calls: [] }, state('right'));
    expect(r[0]).toMatchObject({ score: 0, error: 'task' }); // the task's bug, not the agent's failure
    expect(r[0]!.detail).toMatch(/state call kv\.nope failed: Unknown tool 'nope'/);
    const badArgs = task([{ kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 7 } }, expect: { kind: 'equals', value: 1 } }]);
    expect((await runChecks(badArgs, { answer: null, calls: [] }, state('right')))[0]).toMatchObject({ score: 0, error: 'task' });
  });

  it('who is at fault when a state call fails', () => {
    expect(stateCallFault('unknown_tool')).toBe('task');
    expect(stateCallFault('invalid_arguments')).toBe('task');
    expect(stateCallFault('protocol')).toBe('task');
    for (const k of ['crashed', 'closed', 'timeout', 'aborted'] as const) expect(stateCallFault(k)).toBe('server');
    expect(stateCallFault('tool')).toBeUndefined(); // the tool ran: the state is what the agent left
  });

  it('answer: exact, regex and number, with extraction', async () => {
    const num = task([{ kind: 'answer', expect: { kind: 'number', value: '8' } }]);
    expect(await score(num, { answer: '\\boxed{8}' })).toEqual([1]);
    expect(await score(num, { answer: '答案是 8' })).toEqual([1]);
    expect(await score(num, { answer: '\\boxed{9}' })).toEqual([0]);
    expect(await score(num, { answer: null })).toEqual([0]);
    const exact = task([{ kind: 'answer', expect: { kind: 'exact', value: 'Lyon', ignore_case: true } }]);
    expect(await score(exact, { answer: '<answer>lyon</answer>' })).toEqual([1]);
    expect(await score(exact, { answer: 'Paris' })).toEqual([0]);
    const regex = task([{ kind: 'answer', expect: { kind: 'regex', value: '^\\d{4}$' } }]);
    expect(await score(regex, { answer: '1987' })).toEqual([1]);
    expect(await score(regex, { answer: '87' })).toEqual([0]);
  });

  it('call: the named arguments of a call that happened', async () => {
    const t = task([{ kind: 'call', server: 'kv', tool: 'set', arguments: { key: 'a' } }]);
    expect(await score(t, { answer: null, calls: [{ server: 'kv', tool: 'set', arguments: { key: 'a', value: 'anything' }, isError: false }] })).toEqual([1]);
    expect(await score(t, { answer: null, calls: [{ server: 'kv', tool: 'set', arguments: { key: 'b', value: 'x' }, isError: false }] })).toEqual([0]);
    expect(await score(t, { answer: null, calls: [{ server: 'kv', tool: 'set', arguments: { key: 'a' }, isError: true }] })).toEqual([0]);
    expect(await score(t, { answer: null, calls: [{ server: 'kv', tool: 'get', arguments: { key: 'a' }, isError: false }] })).toEqual([0]);
  });

  it('code: the fraction of test cases passed', async () => {
    const t = task([
      {
        kind: 'code',
        function: 'add',
        tests: [
          { input: [1, 2], output: 3 },
          { input: [2, 2], output: 4 },
          { input: [-1, 1], output: 0 },
          { input: [0, 0], output: 0 },
        ],
      },
    ]);
    expect(await score(t, { answer: 'Here:\n```js\nfunction add(a, b) { return a + b; }\n```' })).toEqual([1]);
    expect(await score(t, { answer: 'function add(a, b) { return a - b; }' })).toEqual([0.25]);
    expect(await score(t, { answer: 'function add(a, b) { return 0; }' })).toEqual([0.5]);
    expect(await score(t, { answer: 'function add(a, b) { while (true) {} }' })).toEqual([0]);
  });

  it('code: taken out of <answer>…</answer> and \\boxed{} as answers are, then out of a fenced block', async () => {
    const t = task([
      {
        kind: 'code',
        function: 'add',
        tests: [
          { input: [1, 2], output: 3 },
          { input: [2, 5], output: 7 },
        ],
      },
    ]);
    const fn = 'function add(a, b) { return a + b; }';
    expect(await score(t, { answer: `<think>easy</think><answer>${fn}</answer>` })).toEqual([1]);
    expect(await score(t, { answer: `Here it is: <answer>\n\`\`\`js\n${fn}\n\`\`\`\n</answer>` })).toEqual([1]);
    expect(await score(t, { answer: `The code is \\boxed{${fn}}` })).toEqual([1]);
    // Code in a fenced block, and a \boxed{} that does not hold it: the block is used.
    expect(await score(t, { answer: `\`\`\`js\n${fn}\n\`\`\`\nSo add(1, 2) is \\boxed{3}.` })).toEqual([1]);
  });

  it('codeOf: what a code check runs', () => {
    expect(codeOf('<answer>function f() {}</answer>')).toBe('function f() {}');
    expect(codeOf('\\boxed{function f() { return {a: 1}; }}')).toBe('function f() { return {a: 1}; }');
    expect(codeOf('text\n```js\nconst f = 1;\n```\nmore')).toBe('const f = 1;');
    expect(codeOf('<answer>\n```\nfunction f() {}\n```\n</answer>')).toBe('function f() {}');
    expect(codeOf('```js\nfunction $f() {}\n```\n\\boxed{2}', '$f')).toBe('function $f() {}');
  });
});

describe('broken tasks are found before an episode runs', () => {
  const kvGet: ToolInfo = {
    name: 'get',
    inputSchema: { type: 'object' },
    outputSchema: {
      type: 'object',
      properties: { key: { type: 'string' }, value: { type: ['string', 'null'] }, found: { type: 'boolean' } },
      additionalProperties: false,
    },
  };
  const rows: ToolInfo = {
    name: 'query',
    inputSchema: { type: 'object' },
    outputSchema: {
      type: 'object',
      properties: { rows: { type: 'array', items: { type: 'array', items: { type: ['string', 'number'] } } } },
      additionalProperties: false,
    },
  };

  it('schemaAllowsPath: false only where the schema rules the path out', () => {
    expect(schemaAllowsPath(kvGet.outputSchema, 'value')).toBe(true);
    expect(schemaAllowsPath(kvGet.outputSchema, 'valeu')).toBe(false);
    expect(schemaAllowsPath(kvGet.outputSchema, 'value.x')).toBe(false); // a string or null has no keys
    expect(schemaAllowsPath(rows.outputSchema, 'rows.0.1')).toBe(true);
    expect(schemaAllowsPath(rows.outputSchema, 'rows.first')).toBe(false);
    expect(schemaAllowsPath(rows.outputSchema, 'rows.length')).toBe(true);
    // Open objects, references and missing schemas cannot tell.
    expect(schemaAllowsPath({ type: 'object', properties: { a: {} } }, 'b')).toBeUndefined();
    expect(schemaAllowsPath({ $ref: '#/defs/x' }, 'a')).toBeUndefined();
    expect(schemaAllowsPath(undefined, 'a')).toBeUndefined();
    expect(schemaAllowsPath({ anyOf: [{ type: 'object', properties: { a: {} }, additionalProperties: false }, { type: 'null' }] }, 'a')).toBe(true);
    expect(schemaAllowsPath({ anyOf: [{ type: 'object', properties: { a: {} }, additionalProperties: false }, { type: 'null' }] }, 'b')).toBe(false);
  });

  it('taskProblem: unknown tools and servers, impossible paths', () => {
    const tools = new Map([['kv', [kvGet, { name: 'set', inputSchema: {} } as ToolInfo]]]);
    const ok = task([{ kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'a' } }, path: 'value', expect: { kind: 'equals', value: '1' } }]);
    expect(taskProblem(ok, tools)).toBeUndefined();
    const badTool = task([{ kind: 'state', call: { server: 'kv', tool: 'gett', arguments: {} }, expect: { kind: 'equals', value: 1 } }]);
    expect(taskProblem(badTool, tools)).toBe("checks[0] (state kv.gett): unknown tool 'gett' on server 'kv' (its tools: get, set)");
    const badPath = task([{ kind: 'state', call: { server: 'kv', tool: 'get', arguments: {} }, path: 'vale', expect: { kind: 'equals', value: 1 } }]);
    expect(taskProblem(badPath, tools)).toBe("checks[0] (state kv.get): path 'vale' cannot be in the result of kv.get (its fields: key, value, found)");
    const badSetup = defineTask({
      id: 'c',
      split: 'eval',
      difficulty: 1,
      prompt: 'p',
      servers: { kv: 'kv' },
      setup: [{ server: 'kv', tool: 'put', arguments: {} }],
      checks: [{ kind: 'answer', expect: { kind: 'equals', value: 1 } }],
    } as never);
    expect(taskProblem(badSetup, tools)).toMatch(/^setup\[0\] \(kv\.put\): unknown tool 'put'/);
  });
});
