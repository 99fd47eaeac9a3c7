/**
 * BFCL v4 as mcp-gym environments (src/env/bfcl/): the suites and their counts, the expert passing
 * a sample of every category by BFCL's own verdict, planted failures failing with BFCL's error
 * types, the entries no output can pass, and the functions multi_turn_miss_func holds back. All real:
 * the Environment, the MCP servers (in-process for single-turn entries, BFCL's backends under the
 * Python SDK for multi-turn ones) and BFCL's checker (`python -m mcp_gym_bfcl grade`).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { bfclEntry } from '../../src/env/bfcl/data.ts';
import {
  BFCL_CATEGORIES,
  BFCL_GROUPS,
  BFCL_LEFT_OUT,
  BFCL_UNPASSABLE,
  bfclCategoryOf,
  bfclEntries,
  bfclGrader,
  bfclTask,
  Environment,
  REVEAL_TOOL,
  rollout,
  UnknownBfclCategoryError,
  type BfclEntry,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { bfclCheck, bfclErrorType, madeInUserTurn, PlantedPolicy, runBfclPython } from './helpers.ts';

const env = new Environment({ reward: 'verifier' });
afterAll(async () => {
  await env.close();
  bfclGrader().close();
});

/** `n` entries spread over the list (BFCL's order), as the suites sample them. */
function stride<T>(list: readonly T[], n: number): T[] {
  if (n >= list.length) return [...list];
  return Array.from({ length: n }, (_, i) => list[Math.floor((i * list.length) / n)]!);
}

async function runOne(task: Task, policy: Policy): Promise<Trajectory> {
  const { trajectories } = await rollout(env, policy, [task]);
  expect(trajectories).toHaveLength(1);
  return trajectories[0]!;
}

const NON_LIVE_COUNTS = { simple_python: 400, simple_java: 100, simple_javascript: 50, multiple: 200, parallel: 200, parallel_multiple: 200, irrelevance: 240 };

describe('BFCL suites', () => {
  it('bfcl:simple_python is its 400 entries as eval tasks, each with one bfcl check and its entry as server', () => {
    const tasks = generateSuite('bfcl:simple_python', { train: 0 });
    expect(tasks).toHaveLength(400);
    expect(tasks.every((t) => t.split === 'eval')).toBe(true);
    expect(new Set(tasks.map((t) => t.id)).size).toBe(400);
    expect(tasks.map((t) => t.id)).toEqual(bfclEntries('simple_python').map((e) => e.id));
    const t = tasks[7]!;
    expect(t.servers).toEqual({ bfcl: `bfcl:simple_python/${t.id}` });
    expect(t.checks).toEqual([{ kind: 'bfcl', category: 'simple_python', entry: t.id, weight: 1 }]);
    expect(t.max_turns).toBe(1);
    expect(t.params).toMatchObject({ bfcl_category: 'simple_python', bfcl_id: t.id });
  });

  it('counts cap each category by a stride sample over BFCL order, and train copies are the same entries in split train', () => {
    const five = generateSuite('bfcl:simple_python', { eval: 5, train: 0 });
    expect(five.map((t) => t.id)).toEqual(['simple_python_0', 'simple_python_80', 'simple_python_160', 'simple_python_240', 'simple_python_320']);
    const withTrain = generateSuite('bfcl:simple_python', { eval: 2, train: 3 });
    expect(withTrain.map((t) => `${t.split}:${t.id}`)).toEqual([
      'eval:simple_python_0',
      'eval:simple_python_200',
      'train:simple_python_0',
      'train:simple_python_133',
      'train:simple_python_266',
    ]);
    // A train copy differs from its eval task only by its split.
    const evalOf0 = withTrain[0]!;
    const trainOf0 = withTrain[2]!;
    expect({ ...trainOf0, split: 'eval' }).toEqual(evalOf0);
    // Asked for none, there are none; asked for more than a category has, every entry once.
    expect(generateSuite('bfcl:simple_javascript', { eval: 0, train: 0 })).toEqual([]);
    expect(generateSuite('bfcl:simple_javascript', { eval: 1000, train: 0 })).toHaveLength(50);
    // The default is every entry of the category in the eval split.
    expect(generateSuite('bfcl:simple_javascript').filter((t) => t.split === 'eval')).toHaveLength(50);
  });

  it("bfcl:non-live is the sum of its 7 categories' entries", () => {
    expect([...BFCL_GROUPS['non-live']!]).toEqual(Object.keys(NON_LIVE_COUNTS));
    for (const [c, n] of Object.entries(NON_LIVE_COUNTS)) expect(bfclEntries(c), c).toHaveLength(n);
    const tasks = generateSuite('bfcl:non-live', { train: 0 });
    expect(tasks).toHaveLength(Object.values(NON_LIVE_COUNTS).reduce((a, b) => a + b, 0));
    expect(tasks).toHaveLength(1390);
    const perFamily = new Map<string, number>();
    for (const t of tasks) perFamily.set(t.family!, (perFamily.get(t.family!) ?? 0) + 1);
    expect(Object.fromEntries(perFamily)).toEqual(Object.fromEntries(Object.entries(NON_LIVE_COUNTS).map(([c, n]) => [`bfcl.${c}`, n])));
  });

  it('bfcl (and bfcl:all) is all 17 categories: non-live, live and multi-turn', () => {
    expect(BFCL_CATEGORIES).toHaveLength(17);
    for (const name of ['bfcl', 'bfcl:all']) {
      const tasks = generateSuite(name, { eval: 1, train: 0 });
      expect(tasks.map((t) => t.params?.bfcl_category)).toEqual([...BFCL_CATEGORIES]);
    }
    expect(BFCL_CATEGORIES.filter((c) => c.startsWith('multi_turn'))).toEqual([...BFCL_GROUPS['multi-turn']!]);
    expect(BFCL_CATEGORIES.filter((c) => c.startsWith('live_'))).toEqual([...BFCL_GROUPS.live!]);
  });

  it('bfcl:nope is refused, naming the known categories and groups', () => {
    expect(() => generateSuite('bfcl:nope')).toThrow(UnknownBfclCategoryError);
    let message = '';
    try {
      generateSuite('bfcl:nope');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/Unknown BFCL category 'nope'/);
    for (const c of BFCL_CATEGORIES) expect(message).toContain(c);
    for (const g of ['bfcl:non-live', 'bfcl:live', 'bfcl:multi-turn', 'bfcl:all']) expect(message).toContain(g);
    // One bad part of a '+' list is enough.
    expect(() => generateSuite('bfcl:simple_python+nope')).toThrow(/'nope'/);
  });

  it('bfcl:memory_kv says it is left out, and why', () => {
    expect(() => generateSuite('bfcl:memory_kv')).toThrow(UnknownBfclCategoryError);
    expect(() => generateSuite('bfcl:memory_kv')).toThrow(`left out: ${BFCL_LEFT_OUT.memory_kv}`);
    expect(BFCL_LEFT_OUT.memory_kv).toMatch(/memory/);
    expect(() => generateSuite('bfcl:web_search_base')).toThrow(/left out: .*web search/);
  });
});

describe('the expert', () => {
  it("passes a stride sample of 5 entries of every one of the 17 categories, by BFCL's own verdict", async () => {
    const tasks = BFCL_CATEGORIES.flatMap((c) =>
      stride(
        bfclEntries(c).filter((e) => !BFCL_UNPASSABLE.has(e.id)),
        5,
      ).map((e) => bfclTask(e)),
    );
    expect(tasks).toHaveLength(17 * 5);
    const { trajectories } = await rollout(env, new ExpertPolicy(), tasks, { concurrency: 6 });
    expect(trajectories).toHaveLength(tasks.length);
    const failing = trajectories
      .filter((t) => !t.success || t.finish === 'error' || bfclCheck(t).detail !== `BFCL: valid (${t.task_id})`)
      .map((t) => `${t.task_id}: ${t.finish} ${t.error ?? ''} ${bfclCheck(t).detail}`);
    expect(failing).toEqual([]);
    const perCategory = new Map<string, number>();
    for (const t of trajectories) perCategory.set(bfclCategoryOf(t.task_id), (perCategory.get(bfclCategoryOf(t.task_id)) ?? 0) + 1);
    expect(Object.fromEntries(perCategory)).toEqual(Object.fromEntries(BFCL_CATEGORIES.map((c) => [c, 5])));
    // Multi-turn episodes went through every user turn, answering each.
    for (const t of trajectories.filter((x) => bfclCategoryOf(x.task_id).startsWith('multi_turn'))) {
      const entry = bfclEntry(bfclCategoryOf(t.task_id), t.task_id);
      expect(t.finish, t.task_id).toBe('answer');
      expect(Math.max(...t.turns.map((u) => u.user_turn ?? -1)), t.task_id).toBe(entry.question.length - 1);
    }
  }, 180_000);
});

describe('planted failures fail by BFCL’s verdict', () => {
  /** The first numeric or string argument of each call, changed. */
  function wrongValue(action: PolicyAction): PolicyAction {
    if (!action.toolCalls) return action;
    return {
      ...action,
      toolCalls: action.toolCalls.map((c) => {
        const args = { ...(c.arguments as Record<string, unknown>) };
        const key = Object.keys(args).find((k) => typeof args[k] === 'number' || typeof args[k] === 'string');
        if (key === undefined) throw new Error(`no argument to change in ${c.name}`);
        const v = args[key];
        args[key] = typeof v === 'number' ? v + 7 : `${String(v)} (changed)`;
        return { ...c, arguments: args };
      }),
    };
  }

  it('a wrong argument value in a simple_python call fails with value_error', async () => {
    const entry = bfclEntries('simple_python')[0]!;
    expect(entry.expert[0]![0]!.arguments).toMatchObject({ base: 10 });
    const t = await runOne(bfclTask(entry), new PlantedPolicy('wrong-value', wrongValue));
    expect(t.finish).not.toBe('error');
    expect(t.turns[0]!.action.tool_calls[0]!.arguments).toMatchObject({ base: 17 });
    expect(t.success).toBe(false);
    expect(bfclCheck(t).score).toBe(0);
    expect(bfclErrorType(bfclCheck(t))).toMatch(/^value_error:/);
    expect(bfclCheck(t).detail).toContain("'base'");
  });

  it('a wrong argument value fails in a second single-turn category too (live_simple)', async () => {
    const entry = bfclEntries('live_simple')[0]!;
    const t = await runOne(bfclTask(entry), new PlantedPolicy('wrong-value', wrongValue));
    expect(t.finish).not.toBe('error');
    expect(bfclCheck(t).score).toBe(0);
    expect(bfclErrorType(bfclCheck(t))).toMatch(/^value_error:/);
  });

  it('two dependent calls of a multi_turn_base turn swapped (mv before cd) fail with a multi_turn error, not an episode error', async () => {
    const entry = bfclEntries('multi_turn_base').find((e) => e.id === 'multi_turn_base_5')!;
    expect(entry.expert[0]!.map((c) => c.name)).toEqual(['cd', 'mv']);
    const swap = (action: PolicyAction, obs: Observation): PolicyAction => {
      const made = madeInUserTurn(obs);
      if ((obs.userTurn ?? 0) !== 0 || made > 1) return action;
      const c = entry.expert[0]![1 - made]!;
      return { content: '', toolCalls: [{ name: c.name, arguments: c.arguments }] };
    };
    const t = await runOne(bfclTask(entry), new PlantedPolicy('swap', swap));
    // The planted order ran: mv first (refused by the backend: the file is in project/), then cd.
    const first = t.turns.filter((u) => u.user_turn === 0 && u.tool_results.length);
    expect(first.map((u) => u.tool_results[0]!.name)).toEqual(['mv', 'cd']);
    expect(first[0]!.tool_results[0]!.text).toMatch(/No such file/);
    expect(t.success).toBe(false);
    // BFCL's verdict on the output, not a failed episode: the agent's mistake scores 0.
    expect(t.finish, `${t.error}`).not.toBe('error');
    expect(bfclCheck(t).error).toBeUndefined();
    expect(bfclCheck(t).score).toBe(0);
    expect(bfclErrorType(bfclCheck(t))).toMatch(/^multi_turn:(instance_state_mismatch|execution_response_mismatch)$/);
  });

  it('a call to a function the entry does not have is an unknown tool, and BFCL fails it', async () => {
    const entry = bfclEntries('simple_python')[0]!;
    const t = await runOne(
      bfclTask(entry),
      new PlantedPolicy('unknown-function', (a) => (a.toolCalls ? { ...a, toolCalls: a.toolCalls.map((c) => ({ ...c, name: 'no_such_function' })) } : a)),
    );
    expect(t.finish).not.toBe('error');
    expect(t.turns[0]!.tool_results[0]).toMatchObject({ name: 'no_such_function', isError: true, errorKind: 'unknown_tool' });
    expect(t.success).toBe(false);
    expect(bfclCheck(t).score).toBe(0);
    expect(bfclErrorType(bfclCheck(t))).toMatch(/^simple_function_checker:(wrong_func_name|wrong_count)$/);
  });

  it("an unparsable call fails the entry by BFCL's decoder, not the episode", async () => {
    const entry = bfclEntries('simple_python')[0]!;
    const t = await runOne(
      bfclTask(entry),
      new PlantedPolicy('unparsable', (a) => (a.toolCalls ? { content: '', toolCalls: [{ name: a.toolCalls[0]!.name, arguments: '{"x": ' }] } : a)),
    );
    expect(t.finish).not.toBe('error');
    expect(t.error).toBeUndefined();
    // The agent is told, the call is not made, and its text goes to BFCL as written.
    expect(t.turns[0]!.tool_results[0]).toMatchObject({ name: 'calculate_triangle_area', isError: true, errorKind: 'invalid_arguments' });
    expect(t.turns[0]!.action.tool_calls[0]!.arguments).toBe('{"x": ');
    expect(t.success).toBe(false);
    expect(bfclCheck(t).score).toBe(0);
    expect(bfclCheck(t).error).toBeUndefined();
    expect(bfclErrorType(bfclCheck(t))).toBe('ast_decoder:decoder_failed');
  });

  it("irrelevance: the expert's text answer passes, a call instead fails", async () => {
    const entry = bfclEntries('irrelevance')[0]!;
    expect(entry.expert).toEqual([[]]);
    const task = bfclTask(entry);
    const [answered, called] = await Promise.all([
      runOne(task, new ExpertPolicy()),
      runOne(
        task,
        new PlantedPolicy('call-anyway', (_a, obs) => ({ content: '', toolCalls: [{ name: obs.tools[0]!.name, arguments: { weight: 70, height: 1.75 } }] })),
      ),
    ]);
    expect(answered.finish).toBe('answer');
    expect(answered.turns[0]!.action.tool_calls).toEqual([]);
    expect(answered.success).toBe(true);
    expect(bfclCheck(answered).detail).toBe(`BFCL: valid (${entry.id})`);
    expect(called.finish).not.toBe('error');
    expect(called.turns[0]!.action.tool_calls.map((c) => c.name)).toEqual(['determine_body_mass_index']);
    expect(called.success).toBe(false);
    expect(bfclErrorType(bfclCheck(called))).toMatch(/^irrelevance_error:/);
  });
});

describe('the entries no output can pass (BFCL_UNPASSABLE)', () => {
  it("are 8, the same as the Python side's, and the expert (BFCL's own possible answer) fails each by BFCL's checker", async () => {
    expect(BFCL_UNPASSABLE.size).toBe(8);
    const python = JSON.parse(await runBfclPython(['-c', 'import json; from mcp_gym_bfcl.data import UNPASSABLE; print(json.dumps(UNPASSABLE))'])) as Record<
      string,
      string
    >;
    expect(Object.keys(python).sort()).toEqual([...BFCL_UNPASSABLE].sort());
    const entries: BfclEntry[] = [...BFCL_UNPASSABLE].map((id) => bfclEntry(bfclCategoryOf(id), id));
    const tasks = entries.map((e) => bfclTask(e));
    for (const t of tasks) expect(t.params?.bfcl_unpassable, t.id).toBe(true);
    const { trajectories } = await rollout(env, new ExpertPolicy(), tasks, { concurrency: 8 });
    expect(trajectories).toHaveLength(8);
    for (const t of trajectories) {
      const c = bfclCheck(t);
      expect(t.finish, t.task_id).not.toBe('error');
      // The expert did make BFCL's possible answer's call...
      expect(t.turns[0]!.action.tool_calls.length, t.task_id).toBeGreaterThan(0);
      // ...and BFCL's checker refuses it.
      expect(t.success, t.task_id).toBe(false);
      expect(c.score, t.task_id).toBe(0);
      const type = bfclErrorType(c);
      expect(type, `${t.task_id}: ${c.detail}`).toBeDefined();
      // Where the Python side names the error type BFCL gives, it is that one.
      const named = /^([a-z_]+:[a-z_]+):/.exec(python[t.task_id]!)?.[1];
      if (named) expect(type, t.task_id).toBe(named);
    }
  }, 120_000);
});

describe('held-back functions (multi_turn_miss_func)', () => {
  /** Records the tool names of every observation (with its user turn), then acts as `inner`, or as `first` on the first turn. */
  class ToolRecorder implements Policy {
    readonly id = 'tool-recorder';
    readonly seen: { userTurn: number; names: string[] }[] = [];
    private readonly expert = new ExpertPolicy();
    constructor(private readonly first?: PolicyAction) {}
    async act(obs: Observation): Promise<PolicyAction> {
      this.seen.push({ userTurn: obs.userTurn ?? 0, names: obs.tools.map((t) => t.name) });
      if (this.first && obs.turn === 0) return this.first;
      return this.expert.act(obs);
    }
  }

  const entry = bfclEntries('multi_turn_miss_func')[1]!;
  const [turnKey, missedTools] = Object.entries(entry.missed ?? {})[0] ?? ['', []];
  const revealAt = Number(turnKey);
  const missed = missedTools.map((t) => t.name);

  it('shows a missed function only from the follow-up that reveals it, records tools_added there, and never shows the control tool', async () => {
    expect(Object.keys(entry.missed ?? {})).toHaveLength(1);
    expect(revealAt).toBeGreaterThan(0);
    expect(missed.length).toBeGreaterThan(0);
    for (const name of missed) expect(entry.tools.map((t) => t.name)).not.toContain(name);
    const policy = new ToolRecorder();
    const t = await runOne(bfclTask(entry), policy);
    expect(t.success, bfclCheck(t).detail).toBe(true);
    expect(policy.seen.length).toBe(t.turns.length);
    expect(new Set(policy.seen.map((s) => s.userTurn))).toEqual(new Set(entry.question.map((_, i) => i)));
    for (const [i, s] of policy.seen.entries()) {
      for (const name of missed) expect(s.names.includes(name), `turn ${i} (user turn ${s.userTurn}): ${name}`).toBe(s.userTurn >= revealAt);
      expect(s.names, `turn ${i}`).not.toContain(REVEAL_TOOL);
    }
    // Every turn carries its user turn; the first turn of the revealing user turn records the added tools, and only it.
    expect(t.turns.map((u) => u.user_turn)).toEqual(policy.seen.map((s) => s.userTurn));
    const added = t.turns.flatMap((u, i) => (u.tools_added?.length ? [{ i, userTurn: u.user_turn, added: u.tools_added }] : []));
    expect(added).toEqual([{ i: t.turns.findIndex((u) => u.user_turn === revealAt), userTurn: revealAt, added: expect.arrayContaining(missed) }]);
    // The reveal is the environment's call (the follow-up's setup), not the agent's.
    expect(t.turns.flatMap((u) => u.action.tool_calls.map((c) => c.name))).not.toContain(REVEAL_TOOL);
    // The trajectory's tools are those the agent was shown: the missed ones, never the control tool.
    expect((t.tools ?? []).map((x) => x.name)).toEqual(expect.arrayContaining(missed));
    expect((t.tools ?? []).map((x) => x.name)).not.toContain(REVEAL_TOOL);
  }, 60_000);

  it('refuses the control tool as an unknown tool when the agent calls it, and reveals nothing early', async () => {
    const policy = new ToolRecorder({ content: '', toolCalls: [{ name: REVEAL_TOOL, arguments: { turn: revealAt } }] });
    const t = await runOne(bfclTask(entry), policy);
    expect(t.turns[0]!.tool_results[0]).toMatchObject({ name: REVEAL_TOOL, isError: true, errorKind: 'unknown_tool' });
    expect(t.turns[0]!.tool_results[0]!.text).toMatch(/^Unknown tool 'mcp_gym_reveal_functions'/);
    for (const s of policy.seen) for (const name of missed) expect(s.names.includes(name), `user turn ${s.userTurn}: ${name}`).toBe(s.userTurn >= revealAt);
  });
});
