/**
 * The many-tools suite (src/env/suites/many-tools.ts): nine real servers on every task (the five
 * bundled ones, the memory, filesystem and everything reference servers from npm, BFCL's
 * GorillaFileSystem and MathAPI over MCP) list the 91 tools the suite names; each task needs 1-3
 * tools; the expert solves every held-out task in every tool mode, with its meta-calls in the
 * toolbelt and search modes; the prompts name the tools as the agent sees them.
 */
import { describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { agentTools, Environment, parseToolMode, type Trajectory } from '../../src/env/index.ts';
import { describeSuites, generateSuite, MANY_TOOLS_TOOLS, manyToolsName, manyToolsServers } from '../../src/env/suites/index.ts';

describe('the many-tools suite', () => {
  it('its nine servers list the 91 tools it names; names shared by two servers are qualified', async () => {
    const env = new Environment();
    try {
      const listed = [];
      for (const [alias, ref] of Object.entries(manyToolsServers())) {
        const tools = await env.toolsOf(ref);
        expect(tools.map((t) => t.name).sort(), alias).toEqual([...MANY_TOOLS_TOOLS[alias]!].sort());
        listed.push({ server: alias, tools });
      }
      const names = agentTools(listed).map((t) => t.name);
      expect(names.length).toBe(91);
      expect(new Set(names).size).toBe(91);
      expect(Object.keys(MANY_TOOLS_TOOLS).length).toBe(9);
      // The suite's names are the environment's.
      for (const t of agentTools(listed)) expect(manyToolsName(t.server, t.tool)).toBe(t.name);
      expect(names).toContain('files_write_file');
      expect(names).toContain('filesystem_write_file');
      expect(names).toContain('bfcl_echo');
    } finally {
      await env.close();
    }
  }, 60_000);

  it('tasks of 1-3 tools at difficulties 1-3, every family drawn, train and eval disjoint', () => {
    const tasks = generateSuite('many-tools', { train: 200, eval: 40 });
    expect(tasks.length).toBe(240);
    for (const t of tasks) {
      const tools = new Set(t.solution!.calls.map((c) => `${c.server}.${c.tool}`));
      expect(tools.size, t.id).toBeGreaterThanOrEqual(1);
      expect(tools.size, t.id).toBeLessThanOrEqual(3);
      expect(t.difficulty).toBeLessThanOrEqual(3);
      expect(Object.keys(t.servers).sort()).toEqual(Object.keys(MANY_TOOLS_TOOLS).sort());
    }
    const families = new Set(tasks.map((t) => t.family));
    // Every family the suite declares for its own servers is drawn.
    const declared = describeSuites()
      .find((d) => d.name === 'many-tools')!
      .families.filter((f) => f.startsWith('many.'));
    expect(declared.length).toBe(8);
    for (const f of declared) expect(families.has(f), f).toBe(true);
    expect([...families].some((f) => f!.startsWith('sql.'))).toBe(true);
    const key = (t: (typeof tasks)[number]) => JSON.stringify([t.family, t.params]);
    const train = new Set(tasks.filter((t) => t.split === 'train').map(key));
    expect(tasks.filter((t) => t.split === 'eval').some((t) => train.has(key(t)))).toBe(false);
    // A bundled task's prompt names the tool as the agent sees it here.
    const filesTask = tasks.find((t) => t.family?.startsWith('files.') && /write_file/.test(t.prompt ?? ''));
    if (filesTask) expect(filesTask.prompt ?? '').toMatch(/files_write_file/);
  });

  it('the expert solves every held-out task in every mode', async () => {
    const tasks = generateSuite('many-tools', { train: 0, eval: 12 });
    const expert = new ExpertPolicy();
    for (const mode of ['all', 'toolbelt', 'search']) {
      const o = parseToolMode(mode);
      const env = new Environment(o.mode === 'all' ? {} : { tools: o });
      const ts: Trajectory[] = [];
      try {
        for (const t of tasks) ts.push(await env.runEpisode(t, expert));
      } finally {
        await env.close();
      }
      const failed = ts.filter((t) => !t.success).map((t) => `${t.task_id} (${t.family}): ${t.error ?? t.checks.map((c) => c.detail).join('; ')}`);
      expect(failed, mode).toEqual([]);
      const meta = ts.reduce((s, t) => s + (t.metrics.meta_calls ?? 0), 0);
      if (mode === 'all') expect(meta).toBe(0);
      else expect(meta).toBeGreaterThanOrEqual(tasks.length);
    }
  }, 240_000);
});
