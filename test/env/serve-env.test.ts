/**
 * `serve-env` (src/env/openenv/): mcp-gym tasks as an OpenEnv environment, driven here over its
 * real transports (a WebSocket client, fetch): the expert's solutions reach the reward the same
 * episode gets in-process, 16 sessions at once keep their servers' states apart, a malformed action
 * costs no turn, a crashed tool server is an error observation (the session lives on), and the
 * limits hold: sessions beyond the maximum, idle sessions, the bearer token, the Host check.
 * The Python side (openenv-core's own client) is test/env/openenv-client.test.ts.
 */
import { execSync, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { defineTask, Environment, readTrajectories, type Task } from '../../src/env/index.ts';
import { startEnvServer, type EnvServer } from '../../src/env/openenv/server.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { CLI, cliStdioSpec, kvCounterTask, ROOT, runCli, sleep } from '../helpers.ts';

type Msg = { type: string; data: Record<string, unknown> };

/** A WebSocket session: send a message, get the answer. */
class Client {
  private readonly inbox: Msg[] = [];
  private waiter?: (m: Msg) => void;
  closed?: { code: number; reason: string };
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as Msg;
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = undefined;
        w(m);
      } else this.inbox.push(m);
    });
    ws.on('close', (code, reason) => (this.closed = { code, reason: String(reason) }));
  }
  static open(url: string, headers: Record<string, string> = {}): Promise<Client> {
    const ws = new WebSocket(url.replace(/^http/, 'ws') + '/ws', { headers });
    return new Promise((ok, fail) => {
      const c = new Client(ws);
      ws.once('open', () => ok(c));
      ws.once('unexpected-response', (_req, res) => fail(new Error(`HTTP ${res.statusCode}`)));
      ws.once('error', fail);
    });
  }
  next(): Promise<Msg> {
    const m = this.inbox.shift();
    return m ? Promise.resolve(m) : new Promise((ok) => (this.waiter = ok));
  }
  async ask(type: string, data?: unknown): Promise<Msg> {
    this.ws.send(JSON.stringify(data === undefined ? { type } : { type, data }));
    return this.next();
  }
  close() {
    this.ws.close();
  }
}

/** Plays a task's reference solution over a session; the last answer. */
async function playExpert(c: Client, task: Task): Promise<Msg> {
  const first = await c.ask('reset', { task_id: task.id });
  expect(first.type).toBe('observation');
  const tools = (first.data.observation as { tools: { name: string }[] }).tools.map((t) => t.name);
  for (const call of task.solution!.calls) {
    const name = tools.find((n) => n === `${call.server}_${call.tool}`) ?? call.tool;
    const r = await c.ask('step', { type: 'call_tool', tool_name: name, arguments: call.arguments });
    expect(r.type).toBe('observation');
    expect(r.data.done).toBe(false);
  }
  return c.ask('step', { type: 'answer', content: task.solution!.answer });
}

const env = new Environment();
const kv = generateSuite('kv').filter((t) => t.split === 'train');
const calc = generateSuite('calculator').filter((t) => t.split === 'train');
const counter = kvCounterTask('counter-shared');
const tasks = [...kv.slice(0, 20), ...calc.slice(0, 20), counter];
let server: EnvServer;

beforeAll(async () => {
  server = await startEnvServer({ env, tasks, name: 'mcp-gym:test', version: '0.0.0', maxSessions: 20 });
});
afterAll(async () => {
  await server.close();
  await env.close();
});

describe('serve-env over WebSocket', () => {
  it('the expert gets the reward its episode gets in-process, with the reward parts, checks and state', async () => {
    const c = await Client.open(server.url);
    for (const task of [kv[0]!, kv[1]!, calc[0]!, calc[1]!]) {
      const last = await playExpert(c, task);
      const ref = await env.runEpisode(task, new ExpertPolicy());
      expect(ref.success).toBe(true);
      expect(last.type).toBe('observation');
      expect(last.data.done).toBe(true);
      expect(last.data.reward).toBeCloseTo(ref.reward, 12);
      const obs = last.data.observation as Record<string, unknown>;
      expect(obs.success).toBe(true);
      expect(obs.finish).toBe('answer');
      expect(obs.reward_parts).toEqual(ref.reward_parts);
      expect((obs.checks as unknown[]).length).toBe(task.checks.length);
      const state = await c.ask('state');
      expect(state).toMatchObject({ type: 'state', data: { task_id: task.id, step_count: task.solution!.calls.length + 1, done: true } });
      // the episode is over: a step says so and costs nothing
      const after = await c.ask('step', { type: 'answer', content: 'again' });
      expect(after).toMatchObject({ type: 'error', data: { code: 'SESSION_ERROR' } });
      expect(String(after.data.message)).toMatch(/the episode is over: send reset/);
    }
    c.close();
  });

  it('reset gives the opening messages and the tools; a step the tool result; a malformed action costs no turn', async () => {
    const c = await Client.open(server.url);
    const task = calc[2]!;
    const r = await c.ask('reset', { task_id: task.id });
    const obs = r.data.observation as Record<string, unknown>;
    expect(r.data).toMatchObject({ reward: null, done: false });
    expect(obs).toMatchObject({ task_id: task.id, turn: 0, max_turns: task.max_turns, tool_result: null });
    expect((obs.messages as { role: string }[]).map((m) => m.role)).toEqual(['system', 'user'].slice(2 - (obs.messages as unknown[]).length));
    expect((obs.tools as { name: string; input_schema: unknown }[]).some((t) => t.name === 'evaluate' && typeof t.input_schema === 'object')).toBe(true);
    for (const bad of [{ type: 'call_tool' }, { type: 'dance' }, { type: 'call_tool', tool_name: 'evaluate', arguments: 'x' }, 7]) {
      const e = await c.ask('step', bad);
      expect(e).toMatchObject({ type: 'error', data: { code: 'VALIDATION_ERROR' } });
      expect(String(e.data.message)).toMatch(/^step: action/);
    }
    const unknown = await c.ask('step', { type: 'call_tool', tool_name: 'no_such_tool', arguments: {} });
    expect(unknown.data.done).toBe(false);
    expect((unknown.data.observation as { tool_result: unknown }).tool_result).toMatchObject({ tool_name: 'no_such_tool', is_error: true });
    const call = await c.ask('step', { type: 'call_tool', tool_name: 'evaluate', arguments: { expression: '2+3' } });
    const o = call.data.observation as { turn: number; tool_result: { text: string; is_error: boolean }; messages: { role: string }[] };
    expect(o.turn).toBe(2); // the unknown tool was a turn; the malformed actions were not
    expect(o.tool_result.is_error).toBe(false);
    expect(o.tool_result.text).toMatch(/5/);
    expect(o.messages.map((m) => m.role)).toEqual(['assistant', 'tool']);
    const listed = await c.ask('step', { type: 'list_tools' });
    expect((listed.data.observation as { turn: number }).turn).toBe(2);
    expect(await c.ask('dance')).toMatchObject({ type: 'error', data: { code: 'UNKNOWN_TYPE' } });
    c.ws.send('{not json');
    expect(await c.next()).toMatchObject({ type: 'error', data: { code: 'INVALID_JSON' } });
    expect(await c.ask('reset', { task_id: 'nope' })).toMatchObject({ type: 'error', data: { code: 'VALIDATION_ERROR' } });
    // the same seed draws the same task
    const a = await c.ask('reset', { seed: 5 });
    const b = await c.ask('reset', { seed: 5 });
    expect((a.data.observation as { task_id: string }).task_id).toBe((b.data.observation as { task_id: string }).task_id);
    c.close();
  });

  it('MCP over the session: tools/list and tools/call (a call is a step)', async () => {
    const c = await Client.open(server.url);
    await c.ask('reset', { task_id: calc[3]!.id });
    const list = await c.ask('mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
    expect(list.type).toBe('mcp');
    expect((list.data.result as { tools: { name: string }[] }).tools.map((t) => t.name)).toContain('evaluate');
    const call = await c.ask('mcp', { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'evaluate', arguments: { expression: '6*7' } } });
    expect(call.data).toMatchObject({ id: 2, result: { isError: false } });
    expect(JSON.stringify(call.data.result)).toMatch(/42/);
    expect((await c.ask('state')).data.step_count).toBe(1);
    expect((await c.ask('mcp', { jsonrpc: '2.0', id: 3, method: 'resources/list' })).data).toMatchObject({ error: { code: -32601 } });
    c.close();
  });

  it("16 sessions at once on the same stateful task keep their servers' states apart", async () => {
    // each session adds 5 to a counter its setup set to 10: shared state would end at 10 + 16 x 5, not 15
    const clients = await Promise.all(Array.from({ length: 16 }, () => Client.open(server.url)));
    const firsts = await Promise.all(clients.map((c) => c.ask('reset', { task_id: counter.id })));
    expect(new Set(firsts.map((f) => (f.data.observation as { episode_id: string }).episode_id)).size).toBe(16);
    const call = counter.solution!.calls[0]!;
    const steps = await Promise.all(clients.map((c) => c.ask('step', { type: 'call_tool', tool_name: call.tool, arguments: call.arguments })));
    for (const r of steps) expect((r.data.observation as { tool_result: { text: string } }).tool_result.text).toMatch(/15/);
    const ends = await Promise.all(clients.map((c) => c.ask('step', { type: 'answer', content: counter.solution!.answer })));
    for (const e of ends) expect((e.data.observation as { success: boolean }).success).toBe(true);
    for (const c of clients) c.close();
  });

  it('sessions beyond the maximum get CAPACITY_REACHED; a closed one frees its place', async () => {
    const small = await startEnvServer({ env, tasks, name: 'small', maxSessions: 2 });
    const a = await Client.open(small.url);
    const b = await Client.open(small.url);
    const c = await Client.open(small.url);
    expect(await c.next()).toMatchObject({ type: 'error', data: { code: 'CAPACITY_REACHED', active_sessions: 2, max_sessions: 2 } });
    const http = await fetch(`${small.url}/reset`, { method: 'POST', body: '{}' });
    expect(http.status).toBe(503);
    expect(((await http.json()) as { detail: string }).detail).toMatch(/at capacity: 2 of 2 sessions/);
    a.close();
    await sleep(100);
    const d = await Client.open(small.url);
    expect((await d.ask('reset', {})).type).toBe('observation');
    b.close();
    d.close();
    await small.close();
  });

  it('an idle session expires: its socket is told and closed, its HTTP id forgotten', async () => {
    const quick = await startEnvServer({ env, tasks, name: 'quick', sessionTimeoutS: 0.3 });
    const c = await Client.open(quick.url);
    await c.ask('reset', {});
    const r = await fetch(`${quick.url}/reset`, { method: 'POST', body: '{}' });
    const id = r.headers.get('x-session-id')!;
    await sleep(900);
    expect(await c.next()).toMatchObject({ type: 'error', data: { code: 'SESSION_ERROR', message: 'the session expired after 0.3 s idle' } });
    expect(c.closed?.code).toBe(1000);
    const gone = await fetch(`${quick.url}/state?session_id=${id}`);
    expect(gone.status).toBe(404);
    expect(quick.stats().sessions).toBe(0);
    await quick.close();
  });

  it('a crashed tool server is an error observation; the session lives on and the next reset works', async () => {
    const spec = cliStdioSpec('kv', ['--delay-ms', '407']);
    const task = defineTask({ ...kvCounterTask('crash-task'), servers: { kv: spec }, setup: [] } as never);
    const own = new Environment();
    const s = await startEnvServer({ env: own, tasks: [task], name: 'crash' });
    const c = await Client.open(s.url);
    await c.ask('reset', { task_id: 'crash-task' });
    // this episode's own stdio server (a process per episode), killed while the agent's call is in flight
    const call = task.solution!.calls[0]!;
    const pending = c.ask('step', { type: 'call_tool', tool_name: call.tool, arguments: call.arguments });
    await sleep(150);
    for (const pid of execSync('pgrep -f "serve kv --delay-ms 407" || true').toString().split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // gone
      }
    }
    const r = await pending;
    expect(r.type).toBe('observation');
    expect((r.data.observation as { tool_result: { is_error: boolean; text: string } }).tool_result).toMatchObject({ is_error: true });
    expect((r.data.observation as { tool_result: { text: string } }).tool_result.text).toMatch(/crashed/);
    const end = await c.ask('step', { type: 'answer', content: '1' });
    expect(end.data.done).toBe(true);
    expect(end.data.observation).toMatchObject({ finish: 'error', success: false });
    expect(String((end.data.observation as { error: string }).error)).toMatch(/a tool server failed during the episode/);
    const again = await c.ask('reset', { task_id: 'crash-task' });
    expect(again).toMatchObject({ type: 'observation', data: { done: false } });
    c.close();
    await s.close();
    await own.close();
  });
});

describe('serve-env under hostile or careless clients', () => {
  it('a malformed frame, an oversized message and refused upgrades reset mid-answer end their socket, not the server', async () => {
    const c = await Client.open(server.url);
    // a masked frame with the reserved opcode 0x3
    (c.ws as unknown as { _socket: import('node:net').Socket })._socket.write(Buffer.from([0x83, 0x80, 0, 0, 0, 0]));
    await sleep(200);
    const big = await Client.open(server.url);
    big.ws.send('x'.repeat(33 * 2 ** 20));
    await sleep(300);
    expect(big.closed?.code).toBe(1009);
    const guarded = await startEnvServer({ env, tasks, name: 'guarded', token: 't0k' });
    const { port } = new URL(guarded.url);
    for (let i = 0; i < 40; i++) {
      const sock = connect(Number(port), '127.0.0.1');
      await new Promise<void>((ok) => sock.once('connect', () => ok()));
      sock.write(
        `GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
      sock.resetAndDestroy();
    }
    await sleep(300);
    expect((await fetch(`${guarded.url}/health`, { headers: { authorization: 'Bearer t0k' } })).status).toBe(200);
    await guarded.close();
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('Origin: null is refused; an HTTP route does not take a WebSocket session id; close ends the session at once', async () => {
    await expect(Client.open(server.url, { origin: 'null' })).rejects.toThrow(/HTTP 403/);
    const c = await Client.open(server.url);
    const r = await c.ask('reset', { task_id: calc[5]!.id });
    const id = (r.data.observation as { session_id: string }).session_id;
    const stolen = await fetch(`${server.url}/close`, { method: 'POST', body: JSON.stringify({ session_id: id }) });
    expect(stolen.status).toBe(404);
    const before = server.stats().sessions;
    c.ws.send(JSON.stringify({ type: 'close' }));
    await sleep(100);
    expect(server.stats().sessions).toBe(before - 1);
  });

  it('list_tools does not make the next step send the whole transcript again', async () => {
    const c = await Client.open(server.url);
    await c.ask('reset', { task_id: calc[6]!.id });
    await c.ask('step', { type: 'call_tool', tool_name: 'evaluate', arguments: { expression: '1+1' } });
    expect(((await c.ask('step', { type: 'list_tools' })).data.observation as { messages: unknown[] }).messages).toEqual([]);
    const next = await c.ask('step', { type: 'call_tool', tool_name: 'evaluate', arguments: { expression: '2+2' } });
    expect((next.data.observation as { messages: { role: string }[] }).messages.map((m) => m.role)).toEqual(['assistant', 'tool']);
    c.close();
  });
});

describe('serve-env over HTTP', () => {
  it('health, metadata and the schemas', async () => {
    expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: 'healthy' });
    expect(await (await fetch(`${server.url}/metadata`)).json()).toMatchObject({ name: 'mcp-gym:test', version: '0.0.0' });
    const schema = (await (await fetch(`${server.url}/schema`)).json()) as Record<string, { oneOf?: unknown[]; anyOf?: unknown[]; properties?: object }>;
    expect(Object.keys(schema).sort()).toEqual(['action', 'observation', 'state']);
    expect(JSON.stringify(schema.action)).toMatch(/call_tool/);
    expect(schema.observation!.properties).toHaveProperty('tools');
    expect(schema.state!.properties).toHaveProperty('step_count');
  });

  it('an episode by session id: reset, step, state, close; errors name what is wrong', async () => {
    const task = calc[4]!;
    const post = (path: string, body: unknown) =>
      fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const r = await post('/reset', { task_id: task.id });
    const id = r.headers.get('x-session-id')!;
    const first = (await r.json()) as { observation: { session_id: string } };
    expect(first.observation.session_id).toBe(id);
    for (const call of task.solution!.calls)
      await post('/step', { session_id: id, action: { type: 'call_tool', tool_name: call.tool, arguments: call.arguments } });
    const end = (await (await post('/step', { session_id: id, action: { type: 'answer', content: task.solution!.answer } })).json()) as {
      done: boolean;
      reward: number;
    };
    expect(end.done).toBe(true);
    expect(end.reward).toBeCloseTo((await env.runEpisode(task, new ExpertPolicy())).reward, 12);
    const state = (await (await fetch(`${server.url}/state?session_id=${id}`)).json()) as { task_id: string };
    expect(state.task_id).toBe(task.id);
    const noId = await post('/step', { action: { type: 'answer', content: 'x' } });
    expect(noId.status).toBe(422);
    expect(((await noId.json()) as { detail: string }).detail).toMatch(/session_id is missing/);
    const bad = await post('/step', { session_id: id, action: { type: 'call_tool' } });
    expect(bad.status).toBe(422);
    expect(((await bad.json()) as { detail: string }).detail).toMatch(/action\.tool_name/);
    expect((await post('/close', { session_id: id })).status).toBe(200);
    expect((await post('/step', { session_id: id, action: { type: 'answer', content: 'x' } })).status).toBe(404);
    expect((await fetch(`${server.url}/nope`)).status).toBe(404);
    expect((await fetch(`${server.url}/reset`)).status).toBe(405);
  });

  it('a bearer token guards every route and the WebSocket upgrade; a foreign Host is refused', async () => {
    const guarded = await startEnvServer({ env, tasks, name: 'guarded', token: 's3cret' });
    expect((await fetch(`${guarded.url}/health`)).status).toBe(401);
    expect((await fetch(`${guarded.url}/health`, { headers: { authorization: 'Bearer s3cret' } })).status).toBe(200);
    await expect(Client.open(guarded.url)).rejects.toThrow(/HTTP 401/);
    const c = await Client.open(guarded.url, { authorization: 'Bearer s3cret' });
    expect((await c.ask('reset', {})).type).toBe('observation');
    c.close();
    await expect(Client.open(guarded.url, { authorization: 'Bearer s3cret', host: 'evil.example' })).rejects.toThrow(/HTTP 403/);
    await guarded.close();
    await expect(startEnvServer({ env, tasks, name: 'x', token: '' })).rejects.toThrow(/bearer token is empty/);
  });
});

describe('mcp-gym serve-env (the CLI)', () => {
  it('serves a suite until SIGTERM; bad flags are usage errors that name the flag', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'mcp-gym-serve-env-')), 'episodes.jsonl');
    const p = spawn(process.execPath, [CLI, 'serve-env', '--suite', 'kv', '--port', '0', '--token', 'tok', '--out', out], { cwd: ROOT });
    let err = '';
    const url = await new Promise<string>((ok, fail) => {
      p.stderr.on('data', (d: Buffer) => {
        err += String(d);
        const m = / at (http:\/\/127\.0\.0\.1:\d+)/.exec(err);
        if (m) ok(m[1]!);
      });
      p.once('exit', (code) => fail(new Error(`serve-env exited (${code}): ${err}`)));
    });
    expect(err).toMatch(/200 tasks \(mcp-gym:kv, train split, reward art\)/);
    expect(err).toMatch(/bearer token required/);
    expect((await fetch(`${url}/health`)).status).toBe(401);
    const r = await fetch(`${url}/reset`, { method: 'POST', headers: { authorization: 'Bearer tok' }, body: '{"seed": 3}' });
    const first = (await r.json()) as { observation: { task_id: string; session_id: string } };
    expect(first.observation.task_id).toMatch(/^kv/);
    const end = await fetch(`${url}/step`, {
      method: 'POST',
      headers: { authorization: 'Bearer tok' },
      body: JSON.stringify({ session_id: first.observation.session_id, action: { type: 'answer', content: 'no idea' } }),
    });
    expect(((await end.json()) as { done: boolean }).done).toBe(true);
    const recorded = readTrajectories(out);
    expect(recorded.map((t) => [t.task_id, t.answer, t.finish])).toEqual([[first.observation.task_id, 'no idea', 'answer']]);
    const exited = new Promise<number | null>((ok) => p.once('exit', ok));
    p.kill('SIGTERM');
    expect(await exited).toBe(0);
    for (const [args, message] of [
      [['serve-env'], /serve-env needs --suite <name> or --tasks/],
      [['serve-env', '--suite', 'kv', '--max-sessions', '0'], /--max-sessions must be at least 1, got '0'/],
      [['serve-env', '--suite', 'kv', '--tasks', 'x.jsonl'], /--suite or --tasks, not both/],
      [['serve-env', '--suite', 'kv', '--reward', 'nope'], /--reward must be art, rlvr, composer or verifier/],
      [['serve-env', '--suite', 'kv', '--token', ''], /--token/],
    ] as const) {
      const out = await runCli([...args]);
      expect(out.code, args.join(' ')).toBe(2);
      expect(out.stderr).toMatch(message);
    }
  }, 60_000);
});
