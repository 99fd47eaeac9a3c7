import { execSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ExpertPolicy } from '../../src/agents/index.ts';
import {
  agentTools,
  defineTask,
  Environment,
  gatherGroup,
  readTrajectories,
  rollout,
  summarize,
  TrajectorySchema,
  type Observation,
  type Policy,
  type PolicyAction,
} from '../../src/env/index.ts';
import { serveOverHttp } from '../../servers/index.ts';
import { kvServer } from '../../servers/kv.ts';
import { cliStdioSpec, kvCounterTask } from '../helpers.ts';

const kvTask = kvCounterTask('kv-demo');

/** A policy that plays a fixed list of actions, one per turn. */
class Scripted implements Policy {
  readonly id = 'scripted';
  seen: Observation[] = [];
  constructor(private readonly actions: (PolicyAction | ((o: Observation) => PolicyAction))[]) {}
  async act(o: Observation): Promise<PolicyAction> {
    this.seen.push(o);
    const a = this.actions[o.turn] ?? { content: 'give up' };
    return typeof a === 'function' ? a(o) : a;
  }
}

const env = new Environment();
afterAll(() => env.close());

describe('the environment', () => {
  it('runs an episode: setup, tool calls over MCP, checks, rewards, a valid trajectory', async () => {
    const t = await env.runEpisode(kvTask, new ExpertPolicy(), { groupId: 'g1', sample: 3 });
    expect(TrajectorySchema.parse(t)).toBeTruthy();
    expect(t).toMatchObject({ task_id: 'kv-demo', group_id: 'g1', sample: 3, success: true, finish: 'answer', answer: '15' });
    expect(t.checks.map((c) => c.score)).toEqual([1, 1]);
    expect(t.metrics).toMatchObject({ turns: 2, tool_calls: 1, tool_errors: 0 });
    expect(t.reward).toBeCloseTo(1 + 0.3 + 0.2 * 0.3, 9);
    expect(t.turns[0]!.step_reward).toBeCloseTo(0.3, 9);
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(t.messages[1]!.tool_calls![0]!.function).toEqual({ name: 'incr', arguments: '{"key":"c","by":5}' });
    expect(JSON.parse(t.messages[2]!.content)).toEqual({ key: 'c', value: '15' });
  });

  it('gives every episode its own fresh server state, also when they run at once', async () => {
    // Each episode adds 5 to its own counter that starts at 10: all must end at 15.
    const trajs = await Promise.all(Array.from({ length: 12 }, (_, i) => env.runEpisode(kvTask, new ExpertPolicy(), { sample: i })));
    expect(trajs.every((t) => t.success)).toBe(true);
  });

  it('an unknown tool, bad arguments, unparsable arguments and a malformed call come back to the agent as tool messages', async () => {
    const policy = new Scripted([
      { content: '', toolCalls: [{ name: 'teleport', arguments: {} }] },
      { content: '', toolCalls: [{ name: 'incr', arguments: { key: 7 } }] },
      { content: '', toolCalls: [{ name: 'incr', arguments: '{"key": "c", by: }' }] },
      { content: '<tool_call>{"name": incr</tool_call>', parseError: 'the tool call is not valid JSON' },
    ]);
    const t = await env.runEpisode({ ...kvTask, max_turns: 4 }, policy);
    expect(t.finish).toBe('max_turns');
    expect(t.success).toBe(false);
    const toolMessages = t.messages.filter((m) => m.role === 'tool').map((m) => m.content);
    expect(toolMessages[0]).toBe("Unknown tool 'teleport'. Available tools: get, set, delete, list, incr");
    expect(toolMessages[1]).toMatch(/Input validation error: .*key: Invalid input: expected string, received number/);
    expect(toolMessages[2]).toMatch(/^Invalid arguments for tool 'incr': not a JSON object/);
    expect(toolMessages[3]).toBe('Error: the tool call is not valid JSON');
    // What the agent saw on its next turn:
    expect(policy.seen[1]!.newMessages[0]!.content).toBe(toolMessages[0]);
    expect(t.metrics.tool_errors).toBe(3);
    expect(t.turns[0]!.tool_results[0]).toMatchObject({ isError: true, errorKind: 'unknown_tool' });
  });

  it('a policy that throws ends its episode as an error, not the batch', async () => {
    const boom: Policy = { id: 'boom', act: async () => Promise.reject(new Error('model exploded')) };
    const r = await rollout(env, boom, [kvTask], { group: 3, concurrency: 3 });
    expect(r.trajectories).toHaveLength(3);
    expect(r.trajectories.every((t) => t.finish === 'error' && t.error === 'the policy failed: model exploded')).toBe(true);
    expect(r.groups[0]!.failed).toHaveLength(3);
    expect(r.groups[0]!.ok).toBe(false);
  });

  it("a failed setup is reported as the episode error, and as the task's error", async () => {
    const bad = defineTask({ ...kvTask, id: 'bad-setup', setup: [{ server: 'kv', tool: 'incr', arguments: { key: 'c', by: 'x' } }] } as never);
    const t = await env.runEpisode(bad, new ExpertPolicy());
    expect(t.finish).toBe('error');
    expect(t.task_error).toBe(true);
    expect(t.error).toMatch(/^setup call 0 \(kv\.incr\) failed: Input validation error/);
    expect(TrajectorySchema.parse(t)).toBeTruthy();
  });

  it('a failed episode scores 0 with no reward parts, and is left out of the mean reward', async () => {
    const flaky = flakyExpert((n) => n % 2 === 0, 'model exploded');
    const r = await rollout(env, flaky, [kvTask], { group: 4, concurrency: 1 });
    const failed = r.trajectories.filter((t) => t.finish === 'error');
    expect(failed).toHaveLength(2);
    for (const t of failed) {
      expect(t).toMatchObject({ reward: 0, reward_parts: {}, success: false, error: 'the policy failed: model exploded' });
      expect(t.task_error).toBeUndefined();
      expect(t.turns.every((x) => x.step_reward === 0)).toBe(true);
    }
    const s = summarize(r.trajectories, r.seconds);
    expect(s).toMatchObject({ episodes: 4, scored_episodes: 2, failed_episodes: 2, task_errors: 0, success_rate: 0.5 });
    expect(s.mean_reward).toBeCloseTo(1 + 0.3 + 0.2 * 0.3, 6); // the two solved episodes only
    expect(s.reward_parts.base).toBe(1);
    expect(s.failures).toEqual([{ cause: 'the policy failed: model exploded', kind: 'error', error_kind: 'policy', episodes: 2, example: failed[0]!.id }]);
    expect(failed.every((t) => t.error_kind === 'policy')).toBe(true);
  });

  it('a tool server that cannot start fails its episodes with the real error, grouped by cause', async () => {
    const task = defineTask({ ...kvTask, id: 'no-server', servers: { kv: { transport: 'stdio', command: '/nonexistent/mcp-server' } }, setup: [] } as never);
    const r = await rollout(env, new ExpertPolicy(), [task], { group: 4 });
    const s = summarize(r.trajectories, r.seconds);
    expect(s).toMatchObject({ failed_episodes: 4, task_errors: 0, mean_reward: 0, reward_parts: {} });
    expect(s.failures).toHaveLength(1);
    expect(s.failures[0]).toMatchObject({ kind: 'error', episodes: 4 });
    expect(s.failures[0]!.cause).toMatch(/^a tool server failed: Cannot connect to stdio server '\/nonexistent\/mcp-server'/);
    expect(r.trajectories.map((t) => t.id)).toContain(s.failures[0]!.example);
  });

  it('a check that cannot run is a task error, not the agent failing', async () => {
    const answer = { kind: 'answer', expect: { kind: 'number', value: '15' } };
    const state = (call: object, path?: string) => ({
      kind: 'state',
      call: { server: 'kv', arguments: { key: 'c' }, ...call },
      ...(path ? { path } : {}),
      expect: { kind: 'equals', value: '15' },
    });
    const cases: [string, unknown[], RegExp][] = [
      [
        'unknown-tool',
        [state({ tool: 'gett' }, 'value'), answer],
        /^checks\[0\] \(state kv\.gett\): unknown tool 'gett' on server 'kv' \(its tools: get, set, delete, list, incr\)/,
      ],
      [
        'bad-path',
        [answer, state({ tool: 'get' }, 'valeu')],
        /^checks\[1\] \(state kv\.get\): path 'valeu' cannot be in the result of kv\.get \(its fields: key, value, found\)/,
      ],
      ['path-into-a-string', [state({ tool: 'get' }, 'value.x')], /path 'value\.x' cannot be in the result/],
      [
        'bad-arguments',
        [state({ tool: 'get', arguments: { key: 7 } }, 'value')],
        /^checks\[0\] \(state\) cannot run: state call kv\.get failed: Input validation error/,
      ],
      ['unknown-call', [{ kind: 'call', server: 'kv', tool: 'increment' }], /^checks\[0\] \(call kv\.increment\): unknown tool 'increment'/],
      ['bad-solution', [answer], /^solution\.calls\[0\] \(kv\.inc\): unknown tool 'inc'/],
    ];
    const tasks = cases.map(([id, checks]) =>
      defineTask({
        ...kvTask,
        id,
        checks,
        ...(id === 'bad-solution' ? { solution: { calls: [{ server: 'kv', tool: 'inc', arguments: {} }], answer: '15' } } : {}),
      } as never),
    );
    // A task built without defineTask can name a server it does not have.
    tasks.push({
      ...kvTask,
      id: 'other-server',
      checks: [{ kind: 'state', call: { server: 'files', tool: 'read_file', arguments: {} }, expect: { kind: 'equals', value: 1 }, weight: 1 }],
    } as never);
    cases.push(['other-server', [], /^checks\[0\] \(state files\.read_file\): no server 'files' in this task \(its servers: kv\)/]);
    const r = await rollout(env, new ExpertPolicy(), tasks, { concurrency: 4 });
    for (const [i, [id, , error]] of cases.entries()) {
      const t = r.trajectories.find((x) => x.task_id === id)!;
      expect(t, id).toMatchObject({ finish: 'error', task_error: true, success: false, reward: 0, reward_parts: {} });
      expect(t.error, id).toMatch(error);
      expect(TrajectorySchema.parse(t), id).toBeTruthy();
      expect(r.groups[i]!.failed[0]).toMatchObject({ sample: 0, task_error: true });
    }
    const s = summarize(r.trajectories, r.seconds);
    expect(s).toMatchObject({ episodes: cases.length, task_errors: cases.length, failed_episodes: 0, scored_episodes: 0 });
    expect(s.failures.every((f) => f.kind === 'task_error' && f.episodes === 1)).toBe(true);
  });

  it('a state call that fails because of what the agent did is still the agent failing', async () => {
    // files.read_file of a file the agent never wrote: the tool reports an error ('tool'), the check scores 0.
    const task = defineTask({
      id: 'files-unwritten',
      split: 'eval',
      difficulty: 1,
      prompt: 'Write notes.txt.',
      servers: { files: 'files' },
      checks: [
        {
          kind: 'state',
          call: { server: 'files', tool: 'read_file', arguments: { path: 'notes.txt' } },
          path: 'content',
          expect: { kind: 'equals', value: 'x' },
        },
      ],
    } as never);
    const t = await env.runEpisode(task, new Scripted([{ content: 'done' }]));
    expect(t).toMatchObject({ finish: 'answer', success: false });
    expect(t.task_error).toBeUndefined();
    expect(t.checks[0]!.error).toBeUndefined();
    expect(t.checks[0]!.detail).toMatch(/^state call files\.read_file failed: /);
    expect(t.reward).toBeGreaterThan(0); // scored as usual
  });

  it('qualifies tool names only where two servers share one', () => {
    const tools = agentTools([
      {
        server: 'files',
        tools: [
          { name: 'search', inputSchema: {} },
          { name: 'read_file', inputSchema: {} },
        ],
      },
      {
        server: 'search',
        tools: [
          { name: 'search', inputSchema: {} },
          { name: 'open', inputSchema: {} },
        ],
      },
    ]);
    expect(tools.map((t) => t.name)).toEqual(['files_search', 'read_file', 'search_search', 'open']);
  });

  it('gathers groups with explicit ids, tolerating failed episodes and reporting them', async () => {
    const flaky = flakyExpert((n) => n % 4 === 1, 'flake');
    const g = await gatherGroup(env, flaky, kvTask, 4, { maxFailures: 1, iteration: 7, concurrency: 1 });
    expect(g.group_id).toBe('kv-demo@7');
    expect(g.trajectories).toHaveLength(3);
    expect(g.trajectories.every((t) => t.group_id === 'kv-demo@7')).toBe(true);
    expect(g.failed).toEqual([{ sample: 1, error: 'the policy failed: flake' }]);
    expect(g.ok).toBe(true);
  });

  it('a tool server killed mid-run costs only the episodes in flight, counted as errors', async () => {
    const spec = cliStdioSpec('kv', ['--delay-ms', '300']);
    const task = defineTask({ ...kvTask, id: 'stdio-task', servers: { kv: spec }, setup: [] } as never);
    const local = new Environment();
    let killed = false;
    const killer: Policy = {
      id: 'killer',
      act: async (o) => {
        if (!killed && o.turn === 0) {
          killed = true;
          // Per-episode stdio servers: kill this episode's own server while its call is in flight.
          setTimeout(() => {
            for (const line of execSync(`pgrep -f "serve kv --delay-ms 300" || true`).toString().split('\n').filter(Boolean)) {
              try {
                process.kill(Number(line), 'SIGKILL');
              } catch {
                // gone
              }
            }
          }, 100);
        }
        return new ExpertPolicy().act(o);
      },
    };
    const out = join(mkdtempSync(join(tmpdir(), 'mcp-gym-env-')), 'traj.jsonl');
    const r = await rollout(local, killer, [task], { group: 1, concurrency: 1, out });
    await local.close();
    expect(r.trajectories[0]!.finish).toBe('error');
    expect(r.trajectories[0]!.error).toMatch(/a tool server failed during the episode: The tool server crashed/);
    expect(readTrajectories(out)).toHaveLength(1);
    // The next episode gets a new server and succeeds.
    const again = new Environment();
    const t2 = await again.runEpisode(task, new ExpertPolicy());
    await again.close();
    expect(t2.success).toBe(false); // setup-free task: counter starts empty, so 5 != 15 ...
    expect(t2.finish).toBe('answer'); // ... but the episode ran to its answer on a fresh server
  });
});

/** A third-party HTTP server with one todo list for everyone: it knows nothing of episodes. */
async function sharedTodoServer(): Promise<{ url: string; close(): Promise<void> }> {
  const todos: string[] = [];
  const factory = () => {
    const s = new McpServer({ name: 'todo', version: '1.0.0' });
    s.registerTool(
      'add',
      { description: 'Add a todo', inputSchema: z.object({ text: z.string() }), outputSchema: z.object({ count: z.number() }) },
      async ({ text }) => {
        await new Promise((r) => setTimeout(r, 20));
        todos.push(text);
        return { content: [{ type: 'text', text: String(todos.length) }], structuredContent: { count: todos.length } };
      },
    );
    s.registerTool('count', { description: 'Count the todos', inputSchema: z.object({}), outputSchema: z.object({ count: z.number() }) }, async () => ({
      content: [{ type: 'text', text: String(todos.length) }],
      structuredContent: { count: todos.length },
    }));
    return s;
  };
  const handler = toNodeHandler(createMcpHandler(factory, { onerror: () => {} }));
  const http = createServer((req, res) => void handler(req, res));
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    close: async () => {
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    },
  };
}

describe('a shared HTTP server', () => {
  it('without per-episode state: a warning, once, when episodes overlap on it', async () => {
    const todo = await sharedTodoServer();
    const warnings: string[] = [];
    const local = new Environment({ onWarning: (m) => warnings.push(m) });
    try {
      const task = defineTask({
        id: 'todo',
        split: 'eval',
        difficulty: 1,
        prompt: 'Add the todo "milk".',
        servers: { todo: { transport: 'http', url: todo.url } },
        checks: [{ kind: 'state', call: { server: 'todo', tool: 'count', arguments: {} }, path: 'count', expect: { kind: 'equals', value: 1 } }],
        solution: { calls: [{ server: 'todo', tool: 'add', arguments: { text: 'milk' } }], answer: 'done' },
      } as never);
      // One at a time: no overlap, no warning.
      await rollout(local, new ExpertPolicy(), [task], { group: 1 });
      expect(warnings).toEqual([]);
      const r = await rollout(local, new ExpertPolicy(), [task], { group: 8, concurrency: 8 });
      expect(r.trajectories.filter((t) => t.success)).toHaveLength(0); // the state leaks: the reason for the warning
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(`the HTTP server ${todo.url} is shared by episodes running at once`);
      expect(warnings[0]).toContain("capabilities.experimental['mcp-gym/episode']");
      await rollout(local, new ExpertPolicy(), [task], { group: 4, concurrency: 4 });
      expect(warnings).toHaveLength(1); // once per server
    } finally {
      await local.close();
      await todo.close();
    }
  });

  it('that declares per-episode state (every bundled server does): no warning, and every episode starts fresh', async () => {
    const kv = await serveOverHttp(kvServer, { port: 0 });
    const warnings: string[] = [];
    const local = new Environment({ onWarning: (m) => warnings.push(m) });
    try {
      const task = defineTask({ ...kvTask, id: 'kv-http', servers: { kv: { transport: 'http', url: kv.url } } } as never);
      const r = await rollout(local, new ExpertPolicy(), [task], { group: 8, concurrency: 8 });
      expect(r.trajectories.filter((t) => t.success)).toHaveLength(8);
      expect(warnings).toEqual([]);
    } finally {
      await local.close();
      await kv.close();
    }
  });
});

/** The expert, except that the first turn of the episodes whose number (0, 1, ...) `fails` picks throws `message`. */
function flakyExpert(fails: (n: number) => boolean, message: string): Policy {
  let n = 0;
  return {
    id: 'flaky',
    act: async (o) => {
      if (o.turn === 0 && fails(n++)) throw new Error(message);
      return new ExpertPolicy().act(o);
    },
  };
}
