/**
 * A multi-turn BFCL entry's MCP server (bfcl/mcp_gym_bfcl/server.py, the official Python SDK over
 * stdio), driven directly with mcp-gym's ToolClient: BFCL's backends answer as BFCL's own executor
 * does, a process per connection keeps its own state, held-back functions appear on the control
 * call, and a call whose argument name is code is refused before BFCL's executor eval()s it (the
 * same payload given to BFCL's executor unchecked does run, so the refusal is what stops it).
 * BFCL's grader refuses such an output too, rather than running it.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bfclEntry, bfclExportFile } from '../../src/env/bfcl/data.ts';
import { multiTurnServerSpec } from '../../src/env/bfcl/server.ts';
import { bfclEntries, bfclGrader, REVEAL_TOOL } from '../../src/env/index.ts';
import { ToolClient, type ToolResult } from '../../src/tools/index.ts';
import { runBfclPython } from './helpers.ts';

const text = (r: ToolResult) => r.content.map((c) => (c as { text?: string }).text ?? '').join('');

/** Results of `calls` run by BFCL's own executor (execute_multi_turn_func_call, as BFCL's inference loop runs them) on a fresh instance of the entry. */
const REFERENCE = `
import json, sys
from mcp_gym_bfcl.runtime import prepare
prepare()
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call
from bfcl_eval.model_handler.utils import convert_to_function_call
req = json.load(sys.stdin)
entry = next(e for e in (json.loads(l) for l in open(req["file"]) if l.strip()) if e["id"] == req["id"])
out = {}
for key, calls in req["runs"].items():
    texts = convert_to_function_call([{c["name"]: c["arguments"]} for c in calls])
    out[key] = execute_multi_turn_func_call(texts, entry["initial_config"], entry["involved_classes"], "ref_" + key, entry["id"])[0]
print(json.dumps(out))
`;

describe('the multi-turn server over MCP (GorillaFileSystem, multi_turn_base_1)', () => {
  const entry = bfclEntry('multi_turn_base', 'multi_turn_base_1');
  const dir = mkdtempSync(join(tmpdir(), 'bfcl-server-'));
  let a: ToolClient;
  let b: ToolClient;

  beforeAll(async () => {
    expect(entry.involved_classes).toEqual(['GorillaFileSystem']);
    [a, b] = await Promise.all([ToolClient.connect(multiTurnServerSpec(entry)), ToolClient.connect(multiTurnServerSpec(entry))]);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  it('lists the entry’s functions as its tools, and no control tool (nothing is held back)', async () => {
    const tools = await a.listTools();
    expect(tools.map((t) => t.name)).toEqual(entry.tools.map((t) => t.name));
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['ls', 'cd', 'mkdir', 'pwd']));
    expect(tools.map((t) => t.name)).not.toContain(REVEAL_TOOL);
    expect(tools.find((t) => t.name === 'mkdir')!.inputSchema).toEqual(entry.tools.find((t) => t.name === 'mkdir')!.inputSchema);
  });

  it("changes state with ls/mkdir/cd and answers exactly as BFCL's executor does", async () => {
    const calls = [
      { name: 'ls', arguments: {} },
      { name: 'mkdir', arguments: { dir_name: 'reports_2024' } },
      { name: 'ls', arguments: {} },
      { name: 'cd', arguments: { folder: 'reports_2024' } },
      { name: 'pwd', arguments: {} },
      { name: 'cd', arguments: { folder: 'no_such_folder' } },
      { name: 'cd', arguments: { folder: '..' } },
      { name: 'ls', arguments: { a: true } },
    ];
    const reference = runBfclPython(['-c', REFERENCE], JSON.stringify({ file: bfclExportFile('multi_turn_base'), id: entry.id, runs: { seq: calls } }));
    const got: string[] = [];
    for (const c of calls) {
      const r = await a.call(c);
      expect(r.isError, `${c.name}: ${text(r)}`).toBe(false);
      got.push(text(r));
    }
    expect(JSON.parse(got[0]!)).toEqual({ current_directory_content: ['workspace'] });
    expect(JSON.parse(got[2]!)).toEqual({ current_directory_content: ['workspace', 'reports_2024'] });
    expect(JSON.parse(got[4]!)).toEqual({ current_working_directory: '/alex/reports_2024' });
    expect(got[5]).toMatch(/No such file or directory/);
    expect(JSON.parse((await reference).trim()).seq).toEqual(got);
  });

  it('gives each connection (a process) its own state', async () => {
    // a made reports_2024 and moved around (the test before); b starts from the entry's initial state.
    expect(JSON.parse(text(await b.call({ name: 'pwd', arguments: {} })))).toEqual({ current_working_directory: '/alex' });
    expect(JSON.parse(text(await b.call({ name: 'ls', arguments: {} })))).toEqual({ current_directory_content: ['workspace'] });
    await b.call({ name: 'mkdir', arguments: { dir_name: 'only_in_b' } });
    expect(JSON.parse(text(await b.call({ name: 'ls', arguments: {} }))).current_directory_content).toEqual(['workspace', 'only_in_b']);
    expect(JSON.parse(text(await a.call({ name: 'ls', arguments: {} }))).current_directory_content).not.toContain('only_in_b');
  });

  it('refuses an argument name that is not a Python identifier, and runs nothing', async () => {
    const planted = join(dir, 'pwned-by-server');
    const planted2 = join(dir, 'pwned-by-server-2');
    const control = join(dir, 'pwned-by-bfcl-executor');
    // Written into BFCL's call text as `ls(a=__import__('os').system('touch F'),b=1)`: code, if eval()ed.
    const live = (file: string) => `a=__import__('os').system('touch ${file}'),b`;
    for (const key of [live(planted), `x) or __import__('os').system('touch ${planted2}') or (y`]) {
      const r = await a.call({ name: 'ls', arguments: { [key]: 1 } });
      expect(r.isError).toBe(true);
      expect(text(r)).toContain('is not a parameter name');
    }
    // The server lives on, its state untouched.
    expect(JSON.parse(text(await a.call({ name: 'pwd', arguments: {} })))).toEqual({ current_working_directory: '/alex' });
    expect(existsSync(planted)).toBe(false);
    expect(existsSync(planted2)).toBe(false);
    // The same call, unchecked, through BFCL's executor: the payload is live.
    await runBfclPython(
      ['-c', REFERENCE],
      JSON.stringify({ file: bfclExportFile('multi_turn_base'), id: entry.id, runs: { x: [{ name: 'ls', arguments: { [live(control)]: 1 } }] } }),
    );
    expect(existsSync(control)).toBe(true);
  });

  it("has BFCL's grader refuse such an output instead of running it", async () => {
    const planted = join(dir, 'pwned-by-grader');
    const key = `a=__import__('os').system('touch ${planted}'),b`;
    const result = [[[{ ls: JSON.stringify({ [key]: 1 }) }]], ...entry.question.slice(1).map(() => [])];
    try {
      const verdict = await bfclGrader().grade('multi_turn_base', entry.id, result);
      expect(verdict.valid).toBe(false);
      expect(verdict.error_type).toBe('mcp_gym:unsafe_call');
      expect(existsSync(planted)).toBe(false);
    } finally {
      bfclGrader().close();
    }
  });
});

describe('the multi-turn server of an entry with held-back functions (multi_turn_miss_func)', () => {
  it('lists the control tool (marked control) and the missed functions only after the control call, announcing the change', async () => {
    const entry = bfclEntries('multi_turn_miss_func')[1]!;
    const [turn, tools] = Object.entries(entry.missed!)[0]!;
    const missed = tools.map((t) => t.name);
    const c = await ToolClient.connect(multiTurnServerSpec(entry));
    try {
      const before = await c.listTools();
      const control = before.find((t) => t.name === REVEAL_TOOL);
      expect(control?._meta?.['mcp-gym/control']).toBe(true);
      for (const m of missed) expect(before.map((t) => t.name)).not.toContain(m);
      // A held-back function is not callable before it is revealed.
      expect((await c.call({ name: missed[0]!, arguments: {} })).errorKind).toBe('unknown_tool');
      const version = c.toolsVersion;
      const r = await c.call({ name: REVEAL_TOOL, arguments: { turn: Number(turn) } });
      expect(JSON.parse(text(r))).toEqual({ added: missed });
      // notifications/tools/list_changed reaches the client (a little after the result, maybe).
      for (let i = 0; i < 50 && c.toolsVersion === version; i++) await new Promise((res) => setTimeout(res, 20));
      expect(c.toolsVersion).toBeGreaterThan(version);
      const after = await c.listTools();
      expect(after.map((t) => t.name)).toEqual(expect.arrayContaining(missed));
      expect(after.map((t) => t.name)).toContain(REVEAL_TOOL);
    } finally {
      await c.close();
    }
  });
});
