/**
 * The other direction: an OpenEnv environment written with openenv-core (test/fixtures/openenv_counter_env.py:
 * an MCPEnvironment with two FastMCP tools, served by openenv-core's create_app and uvicorn) as the tool
 * server of mcp-gym tasks (`{"transport": "openenv", "url"}`) and as a `bench` target. Each episode gets
 * its own WebSocket session, reset at its start: episodes running at once keep their counters apart.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import { runBench } from '../../src/bench/index.ts';
import { defineTask, Environment, parseTasks, rollout, type Task } from '../../src/env/index.ts';
import { ensureOpenEnvPackages } from '../../src/trainers/venv-packages.ts';
import { ROOT, sleep } from '../helpers.ts';

const venv = existsSync(join(ROOT, '.venv', 'bin', 'python'));
const port = 20000 + (process.pid % 20000);
const url = `http://127.0.0.1:${port}`;
let child: ChildProcess | undefined;

function counterTask(i: number): Task {
  return defineTask({
    id: `count-${i}`,
    split: 'eval',
    difficulty: 1,
    prompt: `Add ${i + 2} to the counter c${i}, then answer with its value.`,
    servers: { counter: { transport: 'openenv', url } },
    max_turns: 4,
    checks: [
      { kind: 'state', call: { server: 'counter', tool: 'get', arguments: { key: `c${i}` } }, path: 'result', expect: { kind: 'equals', value: i + 2 } },
      { kind: 'answer', expect: { kind: 'number', value: String(i + 2) } },
    ],
    solution: { calls: [{ server: 'counter', tool: 'incr', arguments: { key: `c${i}`, by: i + 2 } }], answer: String(i + 2) },
  });
}

beforeAll(async () => {
  if (!venv) return;
  const python = ensureOpenEnvPackages();
  child = spawn(python, [join(ROOT, 'test', 'fixtures', 'openenv_counter_env.py'), String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += String(d)));
  for (let i = 0; i < 240; i++) {
    if (child.exitCode !== null) throw new Error(`the OpenEnv environment exited: ${err}`);
    try {
      if ((await fetch(`${url}/health`)).ok) return;
    } catch {
      // not up yet
    }
    await sleep(250);
  }
  throw new Error(`the OpenEnv environment did not answer /health in 60 s: ${err}`);
}, 600_000);
afterAll(() => {
  child?.kill('SIGTERM');
});

describe.skipIf(!venv)('an OpenEnv environment (openenv-core) as the tool server of mcp-gym tasks', () => {
  it('the expert solves every task, 8 episodes at once each in its own session; a random policy none', async () => {
    const env = new Environment();
    const tasks = [0, 1, 2, 3].map(counterTask);
    const expert = await rollout(env, new ExpertPolicy(), tasks, { group: 4, concurrency: 8 });
    const random = await rollout(env, new RandomPolicy(3), tasks, { group: 4, concurrency: 8 });
    await env.close();
    const rate = (ts: { success: boolean }[]) => ts.filter((t) => t.success).length / ts.length;
    console.log(
      `OpenEnv counter environment: expert success ${rate(expert.trajectories)} over ${expert.trajectories.length}, random ${rate(random.trajectories)} over ${random.trajectories.length}`,
    );
    expect(expert.trajectories.every((t) => t.finish === 'answer')).toBe(true);
    expect(rate(expert.trajectories)).toBe(1); // a counter shared between sessions would read 2x, 3x, 4x
    expect((expert.trajectories[0]!.tools ?? []).map((t) => t.name).sort()).toEqual(['get', 'incr']);
    expect(rate(random.trajectories)).toBe(0);
    expect(random.trajectories.filter((t) => t.finish === 'error')).toEqual([]);
  }, 120_000);

  it('bench measures its tools over the session', async () => {
    const report = await runBench({ server: { transport: 'openenv', url }, calls: 40, concurrency: [1, 4], durationMs: 3000, allowWrites: true });
    expect(report.server).toMatchObject({ transport: 'openenv', target: url });
    expect(report.tool_count).toBe(2);
    expect(Object.keys(report.tools).sort()).toEqual(['get', 'incr']);
    for (const l of Object.values(report.tools)) {
      expect(l.calls).toBeGreaterThan(0);
      expect(l.errors).toBe(0);
    }
    console.log(
      `bench over OpenEnv: ${Object.values(report.tools)
        .map((l) => `${l.tool} p50 ${l.p50_ms.toFixed(2)} ms, ${JSON.stringify(l.calls_per_s)} calls/s`)
        .join('; ')}`,
    );
  }, 120_000);

  it('a tool the environment lacks and arguments it refuses are error results, not a dead session', async () => {
    const env = new Environment();
    const t = await env.runEpisode(counterTask(0), {
      id: 'scripted',
      act: async (o) =>
        o.turn === 0
          ? { content: '', toolCalls: [{ name: 'incr', arguments: { key: 'c0', by: 'many' } }] }
          : o.turn === 1
            ? { content: '', toolCalls: [{ name: 'incr', arguments: { key: 'c0', by: 2 } }] }
            : { content: '2' },
    });
    await env.close();
    expect(t.turns[0]!.tool_results[0]!.isError).toBe(true);
    expect(t.turns[1]!.tool_results[0]!.isError).toBe(false);
    expect(t.success).toBe(true);
  }, 120_000);
});

describe('an OpenEnv tool server, badly given', () => {
  it('a task file with a bad URL names the file, line and field; an environment that does not answer fails the episode, naming it', async () => {
    const line = (server: unknown) => JSON.stringify({ ...counterTask(0), servers: { counter: server } });
    expect(() => parseTasks(line({ transport: 'openenv', url: 'not a url' }), 'tasks.jsonl')).toThrow(/tasks\.jsonl:1: servers\.counter\.url: Invalid URL/);
    const env = new Environment();
    const t = await env.runEpisode(parseTasks(line({ transport: 'openenv', url: 'http://127.0.0.1:1' }), 'tasks.jsonl')[0]!, new ExpertPolicy());
    await env.close();
    expect(t.finish).toBe('error');
    expect(t.error).toMatch(/Cannot connect to OpenEnv environment http:\/\/127\.0\.0\.1:1/);
  });
});
