import { execSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { agentTools, defineTask, Environment, gatherGroup, readTrajectories, rollout, TrajectorySchema, type Observation, type Policy, type PolicyAction } from '../../src/env/index.ts';
import { cliStdioSpec } from '../helpers.ts';

const kvTask = defineTask({
  id: 'kv-demo',
  split: 'eval',
  difficulty: 1,
  prompt: 'Add 5 to the counter c, then answer with its value.',
  servers: { kv: 'kv' },
  setup: [{ server: 'kv', tool: 'set', arguments: { key: 'c', value: '10' } }],
  max_turns: 4,
  checks: [
    { kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'c' } }, path: 'value', expect: { kind: 'equals', value: '15' } },
    { kind: 'answer', expect: { kind: 'number', value: '15' } },
  ],
  solution: { calls: [{ server: 'kv', tool: 'incr', arguments: { key: 'c', by: 5 } }], answer: '15' },
} as never);

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

  it('a failed setup is reported as the episode error', async () => {
    const bad = defineTask({ ...kvTask, id: 'bad-setup', setup: [{ server: 'kv', tool: 'incr', arguments: { key: 'c', by: 'x' } }] } as never);
    const t = await env.runEpisode(bad, new ExpertPolicy());
    expect(t.finish).toBe('error');
    expect(t.error).toMatch(/^setup call 0 \(kv\.incr\) failed: Input validation error/);
  });

  it('qualifies tool names only where two servers share one', () => {
    const tools = agentTools([
      { server: 'files', tools: [{ name: 'search', inputSchema: {} }, { name: 'read_file', inputSchema: {} }] },
      { server: 'search', tools: [{ name: 'search', inputSchema: {} }, { name: 'open', inputSchema: {} }] },
    ]);
    expect(tools.map((t) => t.name)).toEqual(['files_search', 'read_file', 'search_search', 'open']);
  });

  it('gathers groups with explicit ids, tolerating failed episodes and reporting them', async () => {
    let n = 0;
    const flaky: Policy = {
      id: 'flaky',
      act: async (o) => {
        if (o.turn === 0 && n++ % 4 === 1) throw new Error('flake');
        return new ExpertPolicy().act(o);
      },
    };
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
