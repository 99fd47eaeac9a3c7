/**
 * The toolbelt and search modes (src/env/tool-modes.ts) on the bundled servers, in-process: the
 * meta-tools are all the agent sees at first, a tool it adds or finds becomes callable and is shown
 * as a change of its tools at its next turn, the expert solves every task in every mode with the
 * meta-calls it needs, and a Hugging Face model's sequence stays append-only (the added tools'
 * schemas open the next tool message; SFT's demonstration is the same sequence). Also: BM25's
 * ranking, the flag's values, and the meta-tools' errors.
 */
import { describe, expect, it } from 'vitest';
import { ExpertPolicy, HfTurns, hfDemoExample, toChatMessages, toToolSpecs } from '../../src/agents/index.ts';
import {
  Environment,
  parseToolMode,
  searchTerms,
  toolModeSetting,
  ToolBelt,
  ToolIndex,
  TOOLBELT_TOOLS,
  type AgentTool,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import { ExpertTurns, smolTokenizerDir } from '../helpers/hf-fixtures.ts';
import { runCli } from '../helpers.ts';
import { resolveConfig } from '../../src/trainers/index.ts';

const ALL_SERVERS = { calculator: 'calculator', kv: 'kv', files: 'files', search: 'search', sql: 'sql' };

/** A few eval tasks of each bundled suite, each with all five bundled servers attached (their aliases as the suites name them). */
function manyServerTasks(perSuite: number): Task[] {
  return ['calculator', 'kv', 'files', 'search', 'sql'].flatMap((suite) =>
    generateSuite(suite, { train: 0, eval: 12 })
      .filter((t) => t.difficulty <= 3)
      .slice(0, perSuite)
      .map((t) => ({ ...t, servers: { ...ALL_SERVERS, ...t.servers } })),
  );
}

async function run(tasks: Task[], policy: Policy, mode: string): Promise<Trajectory[]> {
  const o = parseToolMode(mode);
  const env = new Environment(o.mode === 'all' ? {} : { tools: o });
  try {
    const out: Trajectory[] = [];
    for (const t of tasks) out.push(await env.runEpisode(t, policy));
    return out;
  } finally {
    await env.close();
  }
}

describe('tool modes: the flag', () => {
  it('all, toolbelt, search and search:K; anything else names the value and the choices', () => {
    expect(parseToolMode('all')).toEqual({ mode: 'all' });
    expect(parseToolMode('toolbelt')).toEqual({ mode: 'toolbelt' });
    expect(parseToolMode('search:5')).toEqual({ mode: 'search', k: 5 });
    expect(toolModeSetting(parseToolMode('search:3'))).toBe('search');
    expect(toolModeSetting(parseToolMode('search:7'))).toBe('search:7');
    expect(() => parseToolMode('belt')).toThrow(/--tools: 'belt' is not a tool mode; use one of: all, toolbelt, search, search:K/);
    expect(() => parseToolMode('toolbelt:3')).toThrow(/not a tool mode/);
    expect(() => parseToolMode('search:0')).toThrow(/K must be 1 to 50/);
  });
});

describe('tool modes: bad input on the command line and in a config', () => {
  it('an unknown mode is a usage error (exit 2) naming the flag, the value and the choices, before anything runs', async () => {
    for (const args of [
      ['eval', '--suite', 'kv', '--limit', '1', '--tools', 'belt'],
      ['rollout', '--suite', 'kv', '--limit', '1', '--tools', 'search:0'],
      ['bench', '--tasks', 'kv', '--limit', '1', '--tools', 'belt'],
    ]) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/--tools: (?:'belt' is not a tool mode; use one of: all, toolbelt, search, search:K|search:0: K must be 1 to 50)/);
    }
    const r = await runCli(['bench', '--stdio', 'node x.js', '--tools', 'toolbelt']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--tools goes with --tasks/);
    expect(() => resolveConfig({ tools: 'belt' })).toThrow(/tools: 'belt' is not a tool mode/);
  }, 60_000);
});

describe('tool modes: BM25 over the tools', () => {
  const tool = (name: string, description: string, props: Record<string, string> = {}): AgentTool => ({
    name,
    description,
    inputSchema: { type: 'object', properties: Object.fromEntries(Object.entries(props).map(([k, d]) => [k, { type: 'string', description: d }])) },
    server: 's',
    tool: name,
  });
  const tools = [
    tool('run_query', 'Run a read-only SQL query against the shop database.', { sql: 'the SELECT statement' }),
    tool('list_tables', 'List the tables of the database and their columns.'),
    tool('readFile', 'Read a text file from the sandbox.', { path: 'the file path' }),
    tool('write_file', 'Write text to a file, creating it.', { path: 'the file path', content: 'the text' }),
    tool('evaluate', 'Evaluate an arithmetic expression exactly.', { expression: 'e.g. 3/4 + 1' }),
  ];

  it('splits camelCase and snake_case, drops stop words and a plural s', () => {
    expect(searchTerms('readFile the list_tables of Queries')).toEqual(['read', 'file', 'list', 'table', 'querie']);
  });

  it('ranks by name, description and parameters; ties keep the catalog order; no shared word, no result', () => {
    const index = new ToolIndex(tools);
    expect(index.search('sql query', 3)[0]!.tool.name).toBe('run_query');
    expect(index.search('read a file', 2).map((r) => r.tool.name)).toEqual(['readFile', 'write_file']);
    expect(index.search('arithmetic expression', 1)[0]!.tool.name).toBe('evaluate');
    expect(index.search('tables columns', 5).map((r) => r.tool.name)).toEqual(['list_tables']);
    expect(index.search('weather forecast', 3)).toEqual([]);
    // A word in every tool scores less than a rare one.
    const scores = index.search('file sandbox', 5);
    expect(scores[0]!.tool.name).toBe('readFile');
    expect(scores[0]!.score).toBeGreaterThan(scores[1]!.score);
  });

  it("the belt: add, remove, inspect and list answer by the agent's names; bad calls are errors that say what to do", () => {
    const belt = new ToolBelt({ mode: 'toolbelt', maxBelt: 2 });
    belt.setCatalog(tools);
    expect(belt.visible().map((t) => t.name)).toEqual(['list_tools', 'inspect_tool', 'add_tool', 'remove_tool']);
    const text = (r: { content: { type: string; text?: string }[] }) => r.content.map((c) => c.text).join('');
    expect(text(belt.call('list_tools', {}))).toContain('s (5 tools):\n- run_query: Run a read-only SQL query against the shop database.\n');
    expect(belt.call('list_tools', { server: 'nope' })).toMatchObject({ isError: true });
    expect(JSON.parse(text(belt.call('inspect_tool', { name: 'evaluate' })))).toMatchObject({ name: 'evaluate', parameters: { type: 'object' } });
    expect(text(belt.call('add_tool', { name: 'run_query' }))).toBe('Added run_query to your toolbelt.');
    expect(text(belt.call('add_tool', { name: 's_evaluate' }))).toBe('Added evaluate to your toolbelt.');
    const full = belt.call('add_tool', { name: 'readFile' });
    expect(full.isError).toBe(true);
    expect(text(full)).toMatch(/holds 2 tools at most: take one off first \(remove_tool\)\. On it: run_query, evaluate/);
    const unknown = belt.call('add_tool', { name: 'run_sql_query' });
    expect(unknown).toMatchObject({ isError: true, errorKind: 'unknown_tool' });
    expect(text(unknown)).toMatch(/No tool 'run_sql_query'\. Close matches: run_query/);
    expect(belt.call('add_tool', {})).toMatchObject({ isError: true, errorKind: 'invalid_arguments' });
    expect(text(belt.call('remove_tool', { name: 'evaluate' }))).toBe('Removed evaluate from your toolbelt.');
    expect(belt.call('remove_tool', { name: 'evaluate' })).toMatchObject({ isError: true });
    expect(
      belt
        .visible()
        .map((t) => t.name)
        .slice(4),
    ).toEqual(['run_query']);
    // A catalog change keeps only the tools that still exist.
    belt.setCatalog(tools.slice(1));
    expect(belt.visible().length).toBe(4);
  });

  it('search puts the best k on the belt, the oldest dropped beyond its size', () => {
    const belt = new ToolBelt({ mode: 'search', k: 2, maxBelt: 3 });
    belt.setCatalog(tools);
    expect(belt.visible().map((t) => t.name)).toEqual(['search_tools']);
    belt.call('search_tools', { query: 'sql database query' });
    // The best first: a later search's tools after the earlier ones.
    expect(belt.visible().map((t) => t.name)).toEqual(['search_tools', 'run_query', 'list_tables']);
    belt.call('search_tools', { query: 'arithmetic' });
    expect(belt.visible().map((t) => t.name)).toEqual(['search_tools', 'run_query', 'list_tables', 'evaluate']);
    belt.call('search_tools', { query: 'write file' });
    expect(belt.visible().map((t) => t.name)).toEqual(['search_tools', 'evaluate', 'write_file', 'readFile']);
  });
});

describe('tool modes: episodes on the bundled servers', () => {
  const tasks = manyServerTasks(3);

  it('the expert solves every task in every mode; the meta-calls are in its trajectories, not among the checked calls', async () => {
    expect(tasks.length).toBe(15);
    const expert = new ExpertPolicy();
    for (const mode of ['all', 'toolbelt', 'search']) {
      const ts = await run(tasks, expert, mode);
      const failed = ts.filter((t) => !t.success).map((t) => `${t.task_id}: ${t.error ?? t.checks.map((c) => c.detail).join('; ')}`);
      expect(failed, mode).toEqual([]);
      const meta = ts.flatMap((t) => t.turns.flatMap((u) => u.tool_results.filter((r) => r.meta)));
      if (mode === 'all') {
        expect(meta).toEqual([]);
        expect(ts[0]!.turns[0]!.tools_in_context).toBeUndefined();
        continue;
      }
      expect(meta.length).toBeGreaterThan(0);
      expect(meta.every((r) => r.server === 'mcp-gym' && !r.isError)).toBe(true);
      for (const t of ts) {
        expect(t.metrics.meta_calls).toBe(t.turns.flatMap((u) => u.tool_results).filter((r) => r.meta).length);
        // The first turn shows the meta-tools only.
        expect(t.turns[0]!.tools_in_context).toEqual(mode === 'toolbelt' ? TOOLBELT_TOOLS.map((x) => x.name) : ['search_tools']);
        // Every tool the agent called (not a meta-tool) was in its context at that turn, and was shown as added before.
        for (const [i, u] of t.turns.entries())
          for (const r of u.tool_results.filter((x) => !x.meta)) {
            expect(u.tools_in_context).toContain(r.name);
            expect(t.turns.slice(0, i + 1).some((v) => v.tools_added?.includes(r.name))).toBe(true);
          }
      }
    }
  }, 60_000);

  it('a tool not on the belt is an unknown tool whose error says how to get it', async () => {
    const task = tasks.find((t) => t.servers.sql && t.solution?.calls[0]?.server === 'sql')!;
    const call = task.solution!.calls[0]!;
    const policy: Policy = {
      id: 'direct',
      act: async (obs: Observation): Promise<PolicyAction> =>
        obs.turn === 0 ? { content: '', toolCalls: [{ name: call.tool, arguments: call.arguments }] } : { content: 'done' },
    };
    const [t] = await run([task], policy, 'toolbelt');
    const r = t!.turns[0]!.tool_results[0]!;
    expect(r).toMatchObject({ isError: true, errorKind: 'unknown_tool' });
    expect(r.text).toMatch(/^Unknown tool '\w+'\. Available tools: list_tools, inspect_tool, add_tool, remove_tool \(add_tool adds others\)$/);
    const [s] = await run([task], policy, 'search');
    expect(s!.turns[0]!.tool_results[0]!.text).toMatch(/\(search_tools finds others\)$/);
  });

  it('episodes get two turns beyond max_turns for the meta-calls', async () => {
    const task = { ...tasks[0]!, max_turns: 2 };
    const looping: Policy = { id: 'loop', act: async () => ({ content: '', toolCalls: [{ name: 'list_tools', arguments: {} }] }) };
    const [t] = await run([task], looping, 'toolbelt');
    expect(t!.turns.length).toBe(4);
    expect(t!.finish).toBe('max_turns');
  });
});

describe('tool modes: a Hugging Face model stays append-only', () => {
  for (const mode of ['toolbelt', 'search']) {
    it(`${mode}: the prompt lists the meta-tools only, an added tool's schema opens the next tool message, SFT's demonstration is the same sequence`, async () => {
      // SmolLM2's ChatML template with the Hermes tool format (its template has no tools).
      const turns = HfTurns.load(smolTokenizerDir());
      expect(turns.toolFormat).toBe('hermes');
      const policy = new ExpertTurns(turns, 'qwen', -0.5);
      const task = manyServerTasks(1).find((t) => t.servers.sql && (t.solution?.calls.length ?? 0) >= 1 && t.id.startsWith('sql'))!;
      const [t] = await run([task], policy, mode);
      expect(t!.success).toBe(true);
      for (const u of t!.turns) expect(u.token_drift).toBeUndefined();
      const s = sequenceOf(t!)!;
      expect(s.ids).toEqual(policy.finals.get(t!.id));
      const tok = turns.tokenizer;
      const env0 = tok.decode(t!.turns[0]!.env_tokens!);
      expect(env0).toContain(mode === 'toolbelt' ? '"add_tool"' : '"search_tools"');
      expect(env0).not.toContain('run_query');
      const added = t!.turns.findIndex((u) => u.tools_added?.length);
      expect(added).toBeGreaterThan(0);
      const envAdded = tok.decode(t!.turns[added]!.env_tokens!);
      expect(envAdded).toContain('You can now also call these functions');
      for (const name of t!.turns[added]!.tools_added!) expect(envAdded).toContain(`"name": "${name}"`);
      // The tool tokens grow by the notice's tokens, and never shrink (append-only).
      const counts = t!.turns.map((u) => u.tool_tokens!);
      expect(counts[0]).toBeGreaterThan(50);
      expect(counts[added]).toBeGreaterThan(counts[0]!);
      for (let i = 1; i < counts.length; i++) expect(counts[i]).toBeGreaterThanOrEqual(counts[i - 1]!);
      expect(t!.metrics.tool_tokens).toBe(counts.at(-1));
      // SFT renders the demonstration the way the rollout wrote it.
      const byName = new Map(t!.tools!.map((x) => [x.name, x]));
      const toolsAt = t!.turns.map((u) => toToolSpecs(u.tools_in_context!.map((n) => byName.get(n)!)));
      const demo = hfDemoExample(turns, toChatMessages(t!.messages), toToolSpecs(t!.tools!), toolsAt)!;
      expect(demo.ids).toEqual(s.ids);
    });
  }
});
