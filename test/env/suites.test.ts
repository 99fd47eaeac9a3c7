import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundledServer, serverFactory } from '../../servers/index.ts';
import { ToolClient } from '../../src/tools/index.ts';
import type { ToolResult } from '../../src/tools/index.ts';
import { runChecks } from '../../src/env/checks.ts';
import type { Task, TaskCall } from '../../src/env/task.ts';
import { ALL_SUITE_NAMES, describeSuites, generateSuite, paramsKey, SUITE_NAMES } from '../../src/env/suites/index.ts';
import { rephraseSqlTask, SQL_HELDOUT_PHRASING, SQL_PHRASINGS, SQL_TRAIN_PHRASINGS, sqlPool } from '../../src/env/suites/sql.ts';

const SERVERS = ['calculator', 'kv', 'files', 'search', 'sql'];
const clients = new Map<string, ToolClient>();
const backends = new Map<string, { release(id: string): void }>();
let all: Task[];

beforeAll(async () => {
  all = generateSuite('all');
  for (const name of SERVERS) {
    const { factory, backend } = serverFactory(bundledServer(name));
    clients.set(name, await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() }));
    backends.set(name, backend);
  }
});

afterAll(async () => {
  for (const c of clients.values()) await c.close();
});

const ofSuite = (suite: string, tasks: Task[] = all) => tasks.filter((t) => t.id.startsWith(`${suite}-`));

/** Makes a task's call on the bundled server behind its alias, in an episode. */
function caller(task: Task, episode: string) {
  return (c: TaskCall): Promise<ToolResult> => {
    const server = task.servers[c.server];
    if (typeof server !== 'string') throw new Error(`${task.id}: server ${c.server} is not a bundled one`);
    return clients.get(server)!.call({ name: c.tool, arguments: c.arguments }, { episode });
  };
}

function release(task: Task, episode: string): void {
  for (const server of Object.values(task.servers)) if (typeof server === 'string') backends.get(server)?.release(episode);
}

let episodes = 0;

/** Setup, then the solution's calls (each must succeed), then the checks: every one must score 1. */
async function replay(task: Task): Promise<void> {
  const episode = `${task.id}#${++episodes}`;
  const callOn = caller(task, episode);
  try {
    for (const c of task.setup) {
      const r = await callOn(c);
      expect(r.isError, `${task.id} setup ${c.tool}: ${JSON.stringify(r.content)}`).toBe(false);
    }
    const calls = [];
    for (const c of task.solution!.calls) {
      const r = await callOn(c);
      expect(r.isError, `${task.id} solution ${c.server}.${c.tool}: ${JSON.stringify(r.content)}`).toBe(false);
      calls.push({ server: c.server, tool: c.tool, arguments: c.arguments, isError: r.isError });
    }
    const results = await runChecks(task, { answer: task.solution!.answer, calls }, callOn);
    for (const r of results) expect(r.score, `${task.id}: ${r.detail}`).toBe(1);
  } finally {
    release(task, episode);
  }
}

/** Setup only, then the answer "done": a policy that does nothing must not solve the task. */
async function idle(task: Task): Promise<boolean> {
  const episode = `${task.id}#idle${++episodes}`;
  const callOn = caller(task, episode);
  try {
    for (const c of task.setup) await callOn(c);
    const results = await runChecks(task, { answer: 'done', calls: [] }, callOn);
    return results.every((r) => r.score >= 1);
  } finally {
    release(task, episode);
  }
}

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

describe('task suites', () => {
  it('lists the seven suites and describes them; all stands for six (many-tools has its own test)', () => {
    expect([...ALL_SUITE_NAMES]).toEqual(['calculator', 'kv', 'files', 'sql', 'search', 'mixed']);
    expect([...SUITE_NAMES]).toEqual([...ALL_SUITE_NAMES, 'many-tools']);
    const described = describeSuites();
    expect(described.map((d) => d.name)).toEqual([...SUITE_NAMES]);
    for (const d of described.filter((x) => x.name !== 'many-tools')) {
      expect(d.description.length).toBeGreaterThan(10);
      expect(d.servers.length).toBeGreaterThan(0);
      const families = new Set(ofSuite(d.name).map((t) => t.family));
      for (const f of families) expect(d.families, `${d.name}: ${f}`).toContain(f);
    }
  });

  it('rejects unknown suites, naming the suites', () => {
    expect(() => generateSuite('nope')).toThrow(/calculator, kv, files, sql, search, mixed, many-tools/);
  });

  it('has the default counts: 40 eval and 200 train per suite', () => {
    expect(all.filter((t) => t.split === 'eval').length).toBeGreaterThanOrEqual(200);
    for (const name of ALL_SUITE_NAMES) {
      const tasks = ofSuite(name);
      expect(tasks.filter((t) => t.split === 'eval').length, name).toBe(40);
      expect(tasks.filter((t) => t.split === 'train').length, name).toBe(200);
    }
    const small = generateSuite('kv', { train: 7, eval: 3 });
    expect(small.map((t) => t.split)).toEqual([...Array(3).fill('eval'), ...Array(7).fill('train')]);
  });

  it('is deterministic from the seed', () => {
    expect(generateSuite('all')).toEqual(all);
    const other = generateSuite('calculator', { seed: 99 });
    expect(other.map((t) => t.prompt)).not.toEqual(ofSuite('calculator').map((t) => t.prompt));
    expect(generateSuite('calculator', { seed: 99 })).toEqual(other);
  });

  it('has unique ids across all suites', () => {
    expect(new Set(all.map((t) => t.id)).size).toBe(all.length);
  });

  it('keeps train and eval apart: no params key in both, also across seeds', () => {
    const other = generateSuite('all', { seed: 7 });
    for (const name of ALL_SUITE_NAMES) {
      const tasks = [...ofSuite(name), ...ofSuite(name, other)];
      const evalKeys = new Set(tasks.filter((t) => t.split === 'eval').map(paramsKey));
      const trainKeys = new Set(tasks.filter((t) => t.split === 'train').map(paramsKey));
      for (const t of tasks) expect(t.params, t.id).toBeDefined();
      const shared = [...evalKeys].filter((k) => trainKeys.has(k));
      expect(shared, name).toEqual([]);
      // No repeats inside a draw's eval split either.
      for (const draw of [all, other]) {
        const evalTasks = ofSuite(name, draw).filter((t) => t.split === 'eval');
        expect(new Set(evalTasks.map(paramsKey)).size, name).toBe(evalTasks.length);
      }
    }
  });

  it('spreads difficulties 1-5 evenly in each suite and split', () => {
    for (const name of ALL_SUITE_NAMES) {
      for (const split of ['eval', 'train'] as const) {
        const counts = [1, 2, 3, 4, 5].map((d) => ofSuite(name).filter((t) => t.split === split && t.difficulty === d).length);
        expect(counts, `${name} ${split}`).toEqual(Array(5).fill(split === 'eval' ? 8 : 40));
      }
    }
  });

  it('makes harder tasks longer: more solution calls or bigger prompts at difficulty 5 than at 1', () => {
    for (const name of ALL_SUITE_NAMES) {
      const size = (d: number) => {
        const ts = ofSuite(name).filter((t) => t.difficulty === d);
        return ts.reduce((s, t) => s + t.solution!.calls.length * 1000 + (t.prompt ?? '').length, 0) / ts.length;
      };
      expect(size(5), name).toBeGreaterThan(size(1));
    }
  });

  it('gives every task a solution, a sensible turn limit and checks', () => {
    for (const t of all) {
      expect(t.solution, t.id).toBeDefined();
      expect(t.solution!.calls.length, t.id).toBeGreaterThan(0);
      expect(t.max_turns, t.id).toBeGreaterThanOrEqual(t.solution!.calls.length + 1);
      expect(
        t.checks.some((c) => c.kind === 'answer' || c.kind === 'state'),
        t.id,
      ).toBe(true);
      for (const s of Object.values(t.servers)) expect(SERVERS, t.id).toContain(s);
    }
  });

  it('names clashing tools as the agent sees them (search_search beside files)', () => {
    const clashing = all.filter((t) => t.servers.search && t.servers.files);
    expect(clashing.length).toBeGreaterThan(0);
    for (const t of clashing) expect(t.prompt, t.id).toContain('search_search');
  });

  it('solves every eval task and a sample of train tasks with the reference solution on the real servers', async () => {
    const sample: Task[] = [];
    for (const name of ALL_SUITE_NAMES) {
      const tasks = ofSuite(name);
      sample.push(...tasks.filter((t) => t.split === 'eval'));
      sample.push(...tasks.filter((t) => t.split === 'train').filter((_, i) => i % 4 === 0)); // 50 per suite
    }
    expect(sample.length).toBe(6 * 90);
    await inBatches(sample, 8, replay);
  });

  it('is not solved by doing nothing', async () => {
    const evalTasks = all.filter((t) => t.split === 'eval');
    const solved: string[] = [];
    await inBatches(evalTasks, 8, async (t) => {
      if (await idle(t)) solved.push(t.id);
    });
    expect(solved).toEqual([]);
  });
});

describe('sql wordings', () => {
  const question = (t: Task) => paramsKey({ family: t.family, params: { ...t.params, phrasing: null } });

  it('asks each question in four wordings: tasks in the first three, the fourth in none', () => {
    for (const d of [1, 2, 3, 4, 5])
      for (const split of ['train', 'eval'] as const)
        for (const q of sqlPool(d, split)) {
          expect(q.phrasings.length, q.question).toBe(SQL_PHRASINGS);
          expect(q.phrasings[0]).toBe(q.question);
          expect(new Set(q.phrasings).size, q.question).toBe(SQL_PHRASINGS);
        }
    const tasks = generateSuite('sql', { seed: 3, train: 300, eval: 100 });
    expect(new Set(tasks.map((t) => Number(t.params!.phrasing)))).toEqual(new Set([0, 1, 2]));
    expect(SQL_HELDOUT_PHRASING).toBe(SQL_TRAIN_PHRASINGS);
    const pool = new Map(
      [1, 2, 3, 4, 5].flatMap((d) =>
        (['train', 'eval'] as const).flatMap((s) =>
          sqlPool(d, s).map((q) => [paramsKey({ family: q.family, params: { ...q.params, phrasing: null } }), q] as const),
        ),
      ),
    );
    for (const t of tasks) {
      const q = pool.get(question(t))!;
      expect(t.prompt, t.id).toContain(q.phrasings[Number(t.params!.phrasing)]!);
      expect(t.prompt, t.id).not.toContain(q.phrasings[SQL_HELDOUT_PHRASING]!);
    }
  });

  it('draws every held-out question once before it asks one again in another wording', () => {
    const evalTasks = generateSuite('sql', { seed: 0, eval: 200, train: 0 }).filter((t) => t.difficulty === 2);
    const n = sqlPool(2, 'eval').length;
    expect(evalTasks.length).toBeGreaterThan(n);
    expect(new Set(evalTasks.slice(0, n).map(question)).size).toBe(n);
    expect(new Set(evalTasks.map((t) => t.prompt)).size).toBe(Math.min(evalTasks.length, 3 * n));
  });

  it('rephrases a held-out task into the held-out wording: the same question, checks and solution', () => {
    const t = generateSuite('sql', { seed: 0, eval: 10, train: 0 }).find((x) => x.difficulty === 3)!;
    const r = rephraseSqlTask(t);
    expect(r.id).toBe(`${t.id}-w${SQL_HELDOUT_PHRASING}`);
    expect(r.params!.phrasing).toBe(SQL_HELDOUT_PHRASING);
    expect(question(r)).toBe(question(t));
    expect(r.prompt).not.toBe(t.prompt);
    expect(r.checks).toEqual(t.checks);
    expect(r.solution).toEqual(t.solution);
    const q = sqlPool(3, 'eval').find((c) => paramsKey({ family: c.family, params: { ...c.params, phrasing: null } }) === question(t))!;
    expect(r.prompt).toContain(q.phrasings[SQL_HELDOUT_PHRASING]!);
    expect(() => rephraseSqlTask({ ...t, params: { q: 'nope' } })).toThrow(/not a question of the sql suite/);
    expect(() => rephraseSqlTask(t, 4)).toThrow(/wordings 0-3/);
  });
});
