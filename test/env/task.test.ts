import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defineTask, loadTasks, parseTasks, TaskFileError, openingMessages } from '../../src/env/index.ts';

const good = {
  id: 't1',
  split: 'eval',
  difficulty: 2,
  prompt: 'Store 5 under key a.',
  servers: { kv: 'kv' },
  checks: [{ kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'a' } }, path: 'value', expect: { kind: 'equals', value: '5' } }],
};

const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-tasks-'));
function file(name: string, text: string): string {
  const f = join(dir, name);
  writeFileSync(f, text);
  return f;
}

describe('task format', () => {
  it('defineTask validates and fills defaults', () => {
    const t = defineTask(good as never);
    expect(t.max_turns).toBe(8);
    expect(t.setup).toEqual([]);
    expect(t.checks[0]).toMatchObject({ weight: 1 });
    expect(openingMessages(defineTask({ ...good, system: 'Be brief.' } as never))).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Store 5 under key a.' },
    ]);
  });

  it('defineTask names the field that is wrong', () => {
    expect(() => defineTask({ ...good, difficulty: 9 } as never)).toThrow("Invalid task 't1': difficulty: Too big: expected number to be <=5");
    expect(() => defineTask({ ...good, split: 'test' } as never)).toThrow(/Invalid task 't1': split: Invalid option/);
    expect(() => defineTask({ ...good, checks: [{ kind: 'answer', expect: { kind: 'regex', value: '(' } }] } as never)).toThrow(
      /checks\[0\]\.expect\.value: invalid regular expression/,
    );
    expect(() => defineTask({ ...good, setup: [{ server: 'files', tool: 'write_file' }] } as never)).toThrow(
      /setup\[0\]\.server: unknown server 'files'; the task's servers are kv/,
    );
    expect(() => defineTask({ ...good, messages: [{ role: 'user', content: 'x' }] } as never)).toThrow(/prompt: give exactly one of prompt or messages/);
    expect(() => defineTask({ ...good, checks: [] } as never)).toThrow(/checks: a task needs at least one check/);
    expect(() => defineTask({ ...good, colour: 'red' } as never)).toThrow(/Unrecognized key: "colour"/);
  });

  it('loads JSONL and JSON files', () => {
    const jsonl = file('ok.jsonl', [JSON.stringify(good), '', '// a comment', JSON.stringify({ ...good, id: 't2' })].join('\n'));
    expect(loadTasks(jsonl).map((t) => t.id)).toEqual(['t1', 't2']);
    const json = file('ok.json', JSON.stringify([good, { ...good, id: 't3' }], null, 2));
    expect(loadTasks(json).map((t) => t.id)).toEqual(['t1', 't3']);
    const one = file('one.json', JSON.stringify(good));
    expect(loadTasks(one)).toHaveLength(1);
  });

  it('refuses a bad task file with the file, the line and the field', () => {
    const bad = file(
      'bad.jsonl',
      [JSON.stringify(good), JSON.stringify({ ...good, id: 't2' }), JSON.stringify({ ...good, id: 't3', max_turns: 0 })].join('\n'),
    );
    expect(() => loadTasks(bad)).toThrow(`${bad}:3: max_turns: Too small: expected number to be >=1`);
    try {
      loadTasks(bad);
    } catch (err) {
      expect(err).toBeInstanceOf(TaskFileError);
      expect(err).toMatchObject({ file: bad, line: 3, field: 'max_turns' });
    }
    const nested = file(
      'nested.jsonl',
      JSON.stringify({ ...good, checks: [{ kind: 'state', call: { server: 'kv', tool: 'get' }, expect: { kind: 'number', value: 'x', tolerance: -1 } }] }),
    );
    expect(() => loadTasks(nested)).toThrow(`${nested}:1: checks[0].expect.tolerance: Too small: expected number to be >=0`);
    const syntax = file('syntax.jsonl', `${JSON.stringify(good)}\n{"id": "t2", oops}\n`);
    expect(() => loadTasks(syntax)).toThrow(new RegExp(`${syntax}:2: invalid JSON`));
    const arr = file('arr.json', JSON.stringify([good, { ...good, id: 'second', difficulty: 0 }], null, 2));
    expect(() => loadTasks(arr)).toThrow(new RegExp(`${arr}:\\d+: \\[1\\]\\.difficulty: Too small`));
    const dup = file('dup.jsonl', [JSON.stringify(good), JSON.stringify(good)].join('\n'));
    expect(() => loadTasks(dup)).toThrow(/duplicate task id 't1'/);
    expect(() => loadTasks(join(dir, 'missing.jsonl'))).toThrow(/missing\.jsonl: cannot read the file: ENOENT/);
    expect(() => parseTasks('{"id": 1}', 'inline.json')).toThrow(/inline\.json: id: Invalid input: expected string/);
  });

  it('a task nested 20,000 levels deep is refused with the file, line and field, not a stack overflow', () => {
    let deep = '0';
    for (let i = 0; i < 20_000; i++) deep = `[${deep}]`;
    const line = JSON.stringify({ ...good, id: 'deep', params: { x: '@' } }).replace('"@"', deep);
    const f = file('deep.jsonl', `${JSON.stringify(good)}\n${line}\n`);
    let err: unknown;
    try {
      loadTasks(f);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskFileError);
    expect(err).toMatchObject({ file: f, line: 2, field: 'params.x[0][0]…' });
    expect((err as Error).message).toBe(`${f}:2: params.x[0][0]…: nested more than 256 levels deep (arrays and objects)`);
    // Deep in a setup call's arguments, in a .json array, and given in TypeScript.
    const setup = JSON.stringify([good, { ...good, id: 't9', setup: [{ server: 'kv', tool: 'set', arguments: { key: '@' } }] }], null, 2).replace('"@"', deep);
    expect(() => loadTasks(file('deep.json', setup))).toThrow(/deep\.json:\d+: \[1\]\.setup\[0\]\.arguments\.key…: nested more than 256 levels deep/);
    expect(() => defineTask({ ...good, params: { x: JSON.parse(deep) } } as never)).toThrow(
      "Invalid task 't1': params.x[0][0]…: nested more than 256 levels deep",
    );
    // Nesting that a task may need is fine.
    let ok = '0';
    for (let i = 0; i < 100; i++) ok = `{"a":${ok}}`;
    expect(loadTasks(file('ok-deep.jsonl', JSON.stringify({ ...good, params: { x: '@' } }).replace('"@"', ok)))).toHaveLength(1);
  });
});
