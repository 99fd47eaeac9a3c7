/**
 * Follow-up user turns, per-turn checks, control tools and tool-list changes (docs/tasks.md,
 * "Follow-up user turns, per-turn checks and control tools"), on a real MCP server written with the
 * SDK (test/helpers/counter-server.ts) whose control tool `reveal` adds a tool and sends
 * notifications/tools/list_changed:
 *
 * - the expert replays solution.turns and passes; turns carry user_turn; the follow-ups reach the
 *   policy in newMessages; the revealed tool appears in Observation.tools only after follow-up 1's
 *   setup (tools_added), and goes with follow-up 2's (tools_removed); control tools never show;
 * - a per-turn state check sees the state as its turn ended, not the episode's end;
 * - an agent's call to a control tool is an unknown tool;
 * - turns that run out leave later turns' checks "not reached"; max_turns_per_user_turn ends the episode;
 * - a follow-up's setup call that fails is the task's fault;
 * - recorded and replayed, the tool change comes back at the same turn;
 * - bad task files name the file and the field; ToolClient keeps _meta and counts list changes.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { ChatTemplate, decode } from '../../src/agents/template.ts';
import {
  defineTask,
  Environment,
  parseTasks,
  TaskFileError,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type Trajectory,
} from '../../src/env/index.ts';
import { CONTROL_META_KEY, ToolClient } from '../../src/tools/index.ts';
import { counterServer, counterTask } from '../helpers/counter-server.ts';

/** A policy that hands each turn to `inner` and keeps what it was shown. */
class Watching implements Policy {
  readonly id: string;
  readonly seen: Observation[] = [];
  constructor(readonly inner: Pick<Policy, 'act'> & { id?: string }) {
    this.id = `watching:${inner.id ?? 'scripted'}`;
  }
  act(obs: Observation): Promise<PolicyAction> {
    this.seen.push({ ...obs, tools: [...obs.tools], newMessages: [...obs.newMessages] });
    return this.inner.act(obs);
  }
}

/** One episode on a fresh environment (the counter server's tool list is its connection's). */
async function runOne(task: Task, policy: Policy, options: ConstructorParameters<typeof Environment>[0] = {}): Promise<Trajectory> {
  const env = new Environment(options);
  try {
    return await env.runEpisode(task, policy, { groupId: task.id, sample: 0 });
  } finally {
    await env.close();
  }
}

const names = (obs: Observation) => obs.tools.map((t) => t.name).sort();
const expert = new ExpertPolicy();

describe('follow-up user turns', () => {
  it('the expert passes every user turn; turns carry user_turn; the revealed tool shows only after follow-up 1, control tools never', async () => {
    const watch = new Watching(expert);
    const t = await runOne(counterTask(), watch);
    expect(t.error).toBeUndefined();
    expect(t.checks.map((c) => c.score)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(t).toMatchObject({ success: true, finish: 'answer', answer: 'The counter is 25.' });
    expect(t.turns.map((u) => u.user_turn)).toEqual([0, 0, 1, 1, 2, 2]);
    // The follow-ups are user messages, in order, each after the answer of the turn before.
    const users = t.messages.filter((m) => m.role === 'user').map((m) => m.content);
    expect(users).toEqual(['Add 2 to the counter, then tell me its value.', 'Now double it, and tell me the value.', 'Add 1 more, and tell me the value.']);
    const at = t.messages.findIndex((m) => m.content === 'Now double it, and tell me the value.');
    expect(t.messages[at - 1]).toEqual({ role: 'assistant', content: 'The counter is 12.' });
    // What the policy saw: userTurn, the follow-up in newMessages, the tools before and after.
    expect(watch.seen.map((o) => o.userTurn)).toEqual([0, 0, 1, 1, 2, 2]);
    expect(watch.seen.map((o) => o.turn)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(watch.seen[2]!.newMessages).toEqual([{ role: 'user', content: 'Now double it, and tell me the value.' }]);
    expect(watch.seen[4]!.newMessages).toEqual([{ role: 'user', content: 'Add 1 more, and tell me the value.' }]);
    expect(names(watch.seen[0]!)).toEqual(['add', 'get']);
    expect(names(watch.seen[1]!)).toEqual(['add', 'get']);
    expect(names(watch.seen[2]!)).toEqual(['add', 'double', 'get']);
    expect(names(watch.seen[3]!)).toEqual(['add', 'double', 'get']);
    expect(names(watch.seen[4]!)).toEqual(['add', 'get']);
    // The trajectory: each change on the first turn that saw it; its tools, every tool the agent was shown.
    expect(t.turns.map((u) => [u.tools_added, u.tools_removed])).toEqual([
      [undefined, undefined],
      [undefined, undefined],
      [['double'], undefined],
      [undefined, undefined],
      [undefined, ['double']],
      [undefined, undefined],
    ]);
    expect(t.tools!.map((x) => x.name)).toEqual(['get', 'add', 'double']);
    expect(t.turns[2]!.action.tool_calls).toEqual([{ id: 'call_2_0', name: 'double', arguments: {} }]);
  });

  it('a per-turn state check sees the state as its user turn ended, an end check the state at the end', async () => {
    const t = await runOne(counterTask(), expert);
    // checks[0] (turn 0) expects 12, checks[5] (the end) 25: the same call, two moments.
    expect(t.checks[0]).toMatchObject({ score: 1, detail: 'counter.get .value: equal' });
    expect(t.checks[5]).toMatchObject({ score: 1, detail: 'counter.get .value: equal' });
    // The same checks the other way round fail: each saw its own moment.
    const swapped = counterTask({
      checks: [
        { kind: 'state', call: { server: 'counter', tool: 'get' }, path: 'value', expect: { kind: 'equals', value: 25 }, turn: 0 },
        { kind: 'state', call: { server: 'counter', tool: 'get' }, path: 'value', expect: { kind: 'equals', value: 12 } },
        // A call check of turn 2 sees only the calls of user turn 2: `double` was made in turn 1.
        { kind: 'call', server: 'counter', tool: 'double', turn: 2 },
        { kind: 'answer', expect: { kind: 'number', value: 24 }, turn: 1 },
      ],
    });
    const u = await runOne(swapped, expert);
    expect(u.finish).toBe('answer');
    expect(u.checks.map((c) => c.score)).toEqual([0, 0, 0, 1]);
    expect(u.checks[0]!.detail).toBe('counter.get .value: expected 25, got 12');
    expect(u.checks[1]!.detail).toBe('counter.get .value: expected 12, got 25');
    expect(u.checks[2]!.detail).toBe('missing: counter.double');
  });

  it("an agent's call to a control tool is refused as an unknown tool; nothing it controls happens", async () => {
    let turn = 0;
    const policy = new Watching({
      act: async () =>
        turn++ === 0
          ? {
              content: '',
              toolCalls: [
                { name: 'reveal', arguments: {} },
                { name: 'set', arguments: { value: 12 } },
              ],
            }
          : { content: 'The counter is 10.' },
    });
    const t = await runOne(counterTask({ followups: [], solution: undefined, checks: [{ kind: 'answer', expect: { kind: 'number', value: 10 } }] }), policy);
    expect(t.finish).toBe('answer');
    const results = t.turns[0]!.tool_results;
    expect(results.map((r) => [r.name, r.errorKind])).toEqual([
      ['reveal', 'unknown_tool'],
      ['set', 'unknown_tool'],
    ]);
    expect(results[0]!.text).toBe("Unknown tool 'reveal'. Available tools: get, add");
    expect(names(policy.seen[1]!)).toEqual(['add', 'get']);
    expect(t.tools!.map((x) => x.name)).toEqual(['get', 'add']);
    expect(t.turns[1]!.tools_added).toBeUndefined();
  });

  it("a tool the task's own setup reveals is there from the first turn, not a change the agent saw", async () => {
    const watch = new Watching(expert);
    const task = counterTask({
      setup: [
        { server: 'counter', tool: 'set', arguments: { value: 10 } },
        { server: 'counter', tool: 'reveal', arguments: {} },
      ],
      followups: [],
      checks: [{ kind: 'state', call: { server: 'counter', tool: 'get' }, path: 'value', expect: { kind: 'equals', value: 20 } }],
      solution: { calls: [{ server: 'counter', tool: 'double', arguments: {} }], answer: '20' },
    });
    const t = await runOne(task, watch);
    expect(t).toMatchObject({ success: true, finish: 'answer' });
    expect(names(watch.seen[0]!)).toEqual(['add', 'double', 'get']);
    expect(t.turns.map((u) => [u.user_turn, u.tools_added])).toEqual([
      [undefined, undefined],
      [undefined, undefined],
    ]);
    expect(t.tools!.map((x) => x.name)).toEqual(['get', 'add', 'double']);
  });

  it('turns that run out leave the later user turns\u2019 checks "not reached"; max_turns_per_user_turn ends the episode', async () => {
    // The expert for the opening turn, then only `get`.
    const stubborn = () =>
      new Watching({
        act: (obs) => ((obs.userTurn ?? 0) === 0 ? expert.act(obs) : Promise.resolve({ content: '', toolCalls: [{ name: 'get', arguments: {} }] })),
      });
    const ranOut = await runOne(counterTask({ max_turns: 5, max_turns_per_user_turn: undefined }), stubborn());
    expect(ranOut).toMatchObject({ finish: 'max_turns', answer: null, success: false });
    expect(ranOut.turns.map((u) => u.user_turn)).toEqual([0, 0, 1, 1, 1]);
    expect(ranOut.checks.map((c) => [c.score, c.detail])).toEqual([
      [1, 'counter.get .value: equal'],
      [1, 'answer: number matches'],
      [0, 'not reached'],
      [0, 'not reached'],
      [0, 'no final answer'],
      [0, 'counter.get .value: expected 25, got 12'],
    ]);

    const capped = stubborn();
    const t = await runOne(counterTask({ max_turns_per_user_turn: 2 }), capped);
    expect(t.finish).toBe('max_turns');
    expect(t.turns.map((u) => u.user_turn)).toEqual([0, 0, 1, 1]);
    // Follow-up 2 was never delivered (nor its setup run: `double` is still there).
    expect(t.messages.filter((m) => m.role === 'user')).toHaveLength(2);
    expect(names(capped.seen[3]!)).toEqual(['add', 'double', 'get']);
  });

  it("a follow-up's setup call that the server refuses fails the episode as the task's fault; an unknown tool is found before the episode", async () => {
    const hi: Policy = { id: 'hi', act: async () => ({ content: 'hi' }) };
    const refused = counterTask({
      followups: [{ content: 'Again.', setup: [{ server: 'counter', tool: 'set', arguments: { value: 'ten' } }] }],
      checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'hi' } }],
      solution: undefined,
    });
    const t = await runOne(refused, hi);
    expect(t).toMatchObject({ finish: 'error', task_error: true, error_kind: 'task' });
    expect(t.error).toMatch(/^followups\[0\]\.setup call 0 \(counter\.set\) failed: /);
    expect(t.turns).toHaveLength(1);

    const unknown = defineTask({
      id: 'kv-followup-bad',
      split: 'eval',
      difficulty: 1,
      prompt: 'Say hi.',
      servers: { kv: 'kv' },
      followups: [{ content: 'Again.', setup: [{ server: 'kv', tool: 'no_such_tool', arguments: {} }] }],
      checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'hi' } }],
    });
    const u = await runOne(unknown, hi);
    expect(u).toMatchObject({ finish: 'error', task_error: true, error_kind: 'task' });
    expect(u.error).toMatch(/^followups\[0\]\.setup\[0\] \(kv\.no_such_tool\): unknown tool 'no_such_tool' on server 'kv'/);
    expect(u.turns).toHaveLength(0);
    // Before the task's setup calls a control tool, a tool the server lacks is refused up front; after, it is left to the call.
    const early = counterTask({
      setup: [{ server: 'counter', tool: 'double', arguments: {} }],
      followups: [],
      solution: undefined,
      checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'hi' } }],
    });
    expect((await runOne(early, hi)).error).toMatch(/^setup\[0\] \(counter\.double\): unknown tool 'double'/);
  });

  it('recorded and replayed without the server: the same trajectory, the tool change at the same turn', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mcp-gym-followups-')), 'tape.jsonl');
    const live = await runOne(counterTask(), expert, { record: file });
    const replayed = await runOne(counterTask({ servers: { counter: { transport: 'stdio', command: '/nonexistent/counter' } } }), expert, {
      replay: file,
    });
    expect(replayed.error).toBeUndefined();
    for (const t of [live, replayed]) expect(t.success).toBe(true);
    const shape = (t: Trajectory) => t.turns.map((u) => [u.user_turn, u.tools_added, u.tools_removed, u.action, u.tool_results.map((r) => r.text)]);
    expect(shape(replayed)).toEqual(shape(live));
    expect(replayed.checks).toEqual(live.checks);
    expect(replayed.tools).toEqual(live.tools);
  });
});

describe('task files with follow-ups', () => {
  const base = {
    id: 'kv-f',
    split: 'eval',
    difficulty: 1,
    prompt: 'Store 1 under a.',
    servers: { kv: 'kv' },
    checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'done' } }],
  };
  const line = (extra: Record<string, unknown>) => JSON.stringify({ ...base, ...extra });

  it("a follow-up's setup naming an unknown server, a check's turn past the follow-ups, solution.turns of the wrong length: file, line and field", () => {
    const bad = (text: string) => {
      try {
        parseTasks(text, 'tasks.jsonl');
      } catch (err) {
        expect(err).toBeInstanceOf(TaskFileError);
        return (err as Error).message;
      }
      throw new Error('accepted');
    };
    const followups = [
      { content: 'And b?' },
      {
        content: 'And c?',
        setup: [
          { server: 'kv', tool: 'set', arguments: {} },
          { server: 'nope', tool: 'set' },
        ],
      },
    ];
    expect(bad(`// two follow-ups\n${line({ followups })}\n`)).toBe(
      "tasks.jsonl:2: followups[1].setup[1].server: unknown server 'nope'; the task's servers are kv",
    );
    expect(bad(line({ followups: followups.slice(0, 1), checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'x' }, turn: 2 }] }))).toBe(
      "tasks.jsonl:1: checks[0].turn: turn 2 is past the task's last user turn (1: user turns are 0, the opening message, to the number of followups, 1)",
    );
    expect(bad(line({ checks: [{ kind: 'answer', expect: { kind: 'contains', value: 'x' }, turn: -1 }] }))).toMatch(
      /^tasks\.jsonl:1: checks\[0\]\.turn: Too small/,
    );
    expect(bad(line({ followups: followups.slice(0, 1), solution: { turns: [{ calls: [], answer: 'done' }] } }))).toBe(
      'tasks.jsonl:1: solution.turns: one entry per user turn is needed: 2 (the opening message and 1 follow-up(s)), got 1',
    );
    expect(
      bad(
        line({
          followups: followups.slice(0, 1),
          solution: { turns: [{ answer: 'done' }, { calls: [{ server: 'kb', tool: 'get', arguments: {} }], answer: 'done' }] },
        }),
      ),
    ).toBe("tasks.jsonl:1: solution.turns[1].calls[0].server: unknown server 'kb'; the task's servers are kv");
    expect(bad(line({ solution: { calls: [] } }))).toBe('tasks.jsonl:1: solution.answer: give the final answer (or solution.turns, per user turn)');
    expect(bad(line({ max_turns_per_user_turn: 0 }))).toMatch(/^tasks\.jsonl:1: max_turns_per_user_turn: Too small/);
    expect(bad(line({ followups: [{ content: '' }] }))).toMatch(/^tasks\.jsonl:1: followups\[0\]\.content: Too small/);
  });

  it('a good one: defaults, and max_turns up to 1000', () => {
    const [t] = parseTasks(line({ followups: [{ content: 'And b?' }], max_turns: 1000, checks: [{ ...base.checks[0], turn: 1 }] }), 'tasks.jsonl');
    expect(t!.followups).toEqual([{ content: 'And b?', setup: [] }]);
    expect(t!.max_turns).toBe(1000);
    expect(t!.checks[0]!.turn).toBe(1);
    expect(parseTasks(line({}), 'tasks.jsonl')[0]!.followups).toEqual([]);
  });
});

describe('the pieces', () => {
  it('ToolClient keeps each tool\u2019s _meta, and a list_changed drops its cache, bumps toolsVersion and tells its listeners', async () => {
    const client = await ToolClient.connect({ transport: 'inprocess', factory: counterServer });
    const first = await client.listTools();
    expect(first.find((t) => t.name === 'reveal')?._meta).toEqual({ [CONTROL_META_KEY]: true });
    expect(first.find((t) => t.name === 'get')?._meta).toBeUndefined();
    expect(client.toolsVersion).toBe(0);
    let told = 0;
    const off = client.onToolsChanged(() => told++);
    expect((await client.call({ name: 'double', arguments: {} })).errorKind).toBe('unknown_tool');
    expect((await client.call({ name: 'reveal', arguments: {} })).isError).toBe(false);
    expect([client.toolsVersion, told]).toEqual([1, 1]);
    // The cache was dropped: the next list and call see the new tool.
    expect((await client.listTools()).map((t) => t.name)).toContain('double');
    expect((await client.call({ name: 'double', arguments: {} })).isError).toBe(false);
    off();
    await client.call({ name: 'retire', arguments: {} });
    expect([client.toolsVersion, told]).toEqual([2, 1]);
    expect((await client.listTools()).map((t) => t.name)).not.toContain('double');
    await client.close();
  });

  it('the embedded model’s template: a follow-up is a user block, added tools a system block before it', () => {
    const tpl = new ChatTemplate({ maxToolResultBytes: 100, systemTools: true });
    const ids = tpl.continuationOf([{ role: 'user', content: 'Now double it.' }], ['double']);
    expect(decode(ids)).toBe('<|system|>tools: double<|end|><|user|>Now double it.<|end|><|assistant|>');
    expect(tpl.continuationOf([{ role: 'tool', content: '12' }])).toEqual(tpl.continuation(['12']));
    // A demonstration with a follow-up keeps the follow-up (between the two assistant turns).
    const demo = tpl.conversation(
      [
        { role: 'user', content: 'Hi.' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'user', content: 'Again.' },
        { role: 'assistant', content: 'Hello again.' },
      ],
      [],
    );
    expect(decode(demo.ids)).toBe('<|user|>Hi.<|end|><|assistant|>Hello.<|end|><|user|>Again.<|end|><|assistant|>Hello again.<|end|>');
  });
});
