/**
 * The fleet's routing against real servers: serve-policy (the bundled model, in this process, over
 * HTTP) behind one gate per fleet member, a plain HTTP proxy that counts the requests in flight and
 * can hold them, drop the connection (a server that stopped) or answer 503. Least-loaded choice with
 * concurrent episodes and the episode's last server on a tie; a 503 sends the turn to another server
 * and the episode goes on; a 4xx stays the episode's; a server that comes back is brought to the
 * weights (a real /v1/reload) before it gets a request; with every server down a request fails
 * naming each one and its error.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolicyFleet } from '../../src/agents/index.ts';
import { startPolicyServer, type PolicyServer } from '../../src/agents/serve-policy/index.ts';
import { Environment, rollout, type Observation, type Task } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';
import { sleep } from '../helpers.ts';

const tasks = generateSuite('calculator', { eval: 60 }).filter((t) => t.split === 'eval' && t.difficulty === 1);

/** A proxy in front of the server: what arrived (and in which mode), completions in flight and their peak. */
interface Gate {
  url: string;
  mode: 'up' | 'down' | '503';
  /** While true, completions wait here until release(). */
  holding: boolean;
  arrivals: { path: string; mode: string }[];
  inFlight: number;
  peak: number;
  release(): void;
  close(): Promise<void>;
}

async function gate(target: string): Promise<Gate> {
  const held: (() => void)[] = [];
  const g = { mode: 'up', holding: false, arrivals: [], inFlight: 0, peak: 0 } as unknown as Gate;
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url!, 'http://gate').pathname;
    g.arrivals.push({ path, mode: g.mode });
    if (g.mode === 'down') {
      req.socket.destroy(); // a server that stopped answering
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const completion = path.endsWith('/chat/completions');
      if (completion && g.mode === '503') {
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'injected 503: overloaded', type: 'server_error', param: null, code: null } }));
        return;
      }
      const forward = () => {
        const url = new URL(req.url!, target);
        const up = httpRequest(url, { method: req.method, headers: { ...req.headers, host: url.host } }, (r) => {
          const body: Buffer[] = [];
          r.on('data', (c: Buffer) => body.push(c));
          r.on('end', () => {
            if (completion) g.inFlight--;
            res.writeHead(r.statusCode ?? 500, { 'content-type': r.headers['content-type'] ?? 'application/json' });
            res.end(Buffer.concat(body));
          });
        });
        up.end(Buffer.concat(chunks));
      };
      if (completion) {
        g.inFlight++;
        g.peak = Math.max(g.peak, g.inFlight);
      }
      if (completion && g.holding) held.push(forward);
      else forward();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  g.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  g.release = () => {
    g.holding = false;
    for (const f of held.splice(0)) f();
  };
  g.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return g;
}

const completions = (g: Gate, mode = 'up') => g.arrivals.filter((a) => a.path.endsWith('/chat/completions') && a.mode === mode).length;

/** Waits (without a limit of its own: the test's timeout is the limit) until `ok()`. */
async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await sleep(20);
}

/** A first turn's observation of episode `id` (a user message, no tools). */
function first(id: string, task: Task = tasks[0]!): Observation {
  return {
    task,
    messages: [{ role: 'user', content: task.prompt ?? 'What is 2 + 3?' }],
    tools: [],
    turn: 0,
    newMessages: [],
    episodeId: id,
    episodeKey: `${id}#0`,
  };
}

describe('PolicyFleet over real serve-policy servers', () => {
  let server: PolicyServer;
  let gates: Gate[] = [];
  const fleets: PolicyFleet[] = [];
  const make = (urls: string[], o: ConstructorParameters<typeof PolicyFleet>[2] = {}) => {
    const f = new PolicyFleet('calc-tiny', urls, { temperature: 1, maxTokens: 48, seed: 1, tokenIds: true, ...o });
    fleets.push(f);
    return f;
  };
  beforeAll(async () => {
    server = await startPolicyServer({ modelDir: BUNDLED_MODEL_DIR, port: 0, threads: 1 });
  });
  afterAll(async () => {
    for (const f of fleets) await f.close();
    for (const g of gates) await g.close();
    await server?.close();
  });

  it('sends each turn to the least-loaded server: concurrent episodes spread, never more than their share in flight at one', async () => {
    gates = await Promise.all([gate(server.url), gate(server.url), gate(server.url)]);
    const fleet = make(gates.map((g) => g.url));
    const env = new Environment();
    const r = await rollout(env, fleet, tasks.slice(0, 6), { group: 2, concurrency: 6 });
    await env.close();
    expect(r.trajectories).toHaveLength(12);
    expect(r.trajectories.filter((t) => t.finish === 'error')).toEqual([]);
    const turns = r.trajectories.flatMap((t) => t.turns);
    // 6 episodes at once over 3 servers: at most 2 requests in flight at any one (the gates saw no more).
    for (const g of gates) expect(g.peak).toBeLessThanOrEqual(2);
    for (const s of fleet.servers) expect(s.peakInFlight).toBeLessThanOrEqual(2);
    const stats = fleet.stats();
    gates.forEach((g, i) => {
      const here = turns.filter((u) => u.policy_server === g.url).length;
      expect(here).toBeGreaterThan(0);
      expect(stats[i]!.turns).toBe(here);
      expect(completions(g)).toBe(here); // one request a turn, none retried
    });
    expect(turns.every((u) => u.tokens && u.token_drift === undefined)).toBe(true); // sequences continue across servers
  });

  it('on a tie, the turn goes to the server its episode used last (its prefix cache), else to the first', async () => {
    const fleet = make(gates.map((g) => g.url));
    const [g0, g1] = gates as [Gate, Gate, Gate];
    g0.holding = g1.holding = true;
    const a = fleet.act(first('A'));
    const b = fleet.act(first('B'));
    const c = await fleet.act(first('C')); // the first two busy: the third server
    expect(c.policyServer).toBe(gates[2]!.url);
    g0.release();
    g1.release();
    expect([(await a).policyServer, (await b).policyServer]).toEqual([g0.url, g1.url]);
    // All idle now: C's next turn stays on its server; a new episode starts on the first.
    const next = {
      ...first('C'),
      turn: 1,
      messages: [...first('C').messages, { role: 'assistant' as const, content: c.content }, { role: 'user' as const, content: 'again' }],
    };
    expect((await fleet.act(next)).policyServer).toBe(gates[2]!.url);
    expect((await fleet.act(first('D'))).policyServer).toBe(g0.url);
  });

  it('a server answering 503 is taken out and the turn goes to another: the episodes finish, once each; a 4xx stays the episode’s', async () => {
    const [bad, good] = gates as [Gate, Gate, Gate];
    bad.mode = '503';
    const logs: string[] = [];
    const fleet = make([bad.url, good.url], { probeMinMs: 600_000, log: (l) => logs.push(l) });
    const env = new Environment();
    const r = await rollout(env, fleet, tasks.slice(0, 2), { group: 2, concurrency: 4 });
    expect(r.trajectories).toHaveLength(4);
    expect(new Set(r.trajectories.map((t) => t.id)).size).toBe(4);
    expect(r.trajectories.filter((t) => t.finish === 'error')).toEqual([]);
    expect(r.trajectories.flatMap((t) => t.turns).every((u) => u.policy_server === good.url)).toBe(true);
    expect(completions(bad, '503')).toBeGreaterThan(0);
    const [s0, s1] = fleet.stats();
    expect(s0).toMatchObject({ state: 'out', healthy: false, failures: 1, turns: 0 });
    expect(s0!.last_error).toMatch(/HTTP 503: injected 503: overloaded/);
    expect(s1).toMatchObject({ state: 'healthy', failures: 0 });
    expect(logs).toEqual([`policy: the server ${bad.url} is taken out: openai calc-tiny: HTTP 503: injected 503: overloaded; probed again in 600 s`]);
    bad.mode = 'up';
    // A 404 (a model the server does not serve) is the request's fault, not the server's: the episode fails, the server stays in.
    const wrong = new PolicyFleet('no-such-model', [good.url], { maxTokens: 16 });
    fleets.push(wrong);
    const t = await env.runEpisode(tasks[0]!, wrong, { groupId: 'g', sample: 0 });
    await env.close();
    expect(t.finish).toBe('error');
    expect(t.error).toMatch(/HTTP 404: The model `no-such-model` does not exist/);
    expect(wrong.stats()[0]).toMatchObject({ state: 'healthy', failures: 0 });
  });

  it('a server that comes back is brought to the weights (POST /v1/reload) before it gets a request again', async () => {
    const [ga, gb] = gates as [Gate, Gate, Gate];
    let syncing = false;
    let open!: () => void;
    const opened = new Promise<void>((r) => (open = r));
    const answered: (string | number | undefined)[] = [];
    const logs: string[] = [];
    const fleet = make([ga.url, gb.url], {
      probeMinMs: 50,
      probeMaxMs: 200,
      log: (l) => logs.push(l),
      sync: async (s) => {
        syncing = true;
        await opened;
        answered.push(await s.policy.reload()); // serve-policy's real reload of its directory: its version
        s.pushes++;
      },
    });
    ga.mode = 'down';
    const env = new Environment();
    const one = await env.runEpisode(tasks[1]!, fleet, { groupId: 'g', sample: 0 });
    expect(one.finish).not.toBe('error');
    expect(one.turns.every((u) => u.policy_server === gb.url)).toBe(true);
    expect(fleet.stats()[0]!.state).not.toBe('healthy');
    const cameBack = ga.arrivals.length;
    ga.mode = 'up';
    await until(() => syncing); // it answered its probe; its sync waits
    // While it is brought to the weights, the turns go elsewhere.
    const meanwhile = await env.runEpisode(tasks[2]!, fleet, { groupId: 'g', sample: 1 });
    expect(meanwhile.turns.every((u) => u.policy_server === gb.url)).toBe(true);
    open();
    await until(() => fleet.stats()[0]!.state === 'healthy');
    const after = ga.arrivals.slice(cameBack).map((a) => a.path);
    expect(after).toEqual(['/v1/models', '/v1/reload']); // the probe, the sync; no completion yet
    const back = await env.runEpisode(tasks[3]!, fleet, { groupId: 'g', sample: 2 }); // both idle: the first server
    await env.close();
    expect(back.turns.every((u) => u.policy_server === ga.url && u.policy_version === answered[0])).toBe(true);
    expect(answered).toEqual([server.stats().version]);
    expect(logs.at(-1)).toBe(`policy: the server ${ga.url} is back (weights version ${answered[0]})`);
    expect(fleet.stats()[0]).toMatchObject({ failures: 1, pushes: 1, healthy: true });
  });

  it('a request that fails wherever it goes (a 500 each time, the servers answering probes) fails its episode after 2 tries a server', async () => {
    const bad = await Promise.all([gate(server.url), gate(server.url)]);
    gates.push(...bad);
    for (const g of bad) g.mode = '503';
    let syncs = 0;
    const fleet = make(
      bad.map((g) => g.url),
      { probeMinMs: 20, probeMaxMs: 40, waitMs: 30_000, sync: async () => void syncs++ },
    );
    const env = new Environment();
    const t = await env.runEpisode(tasks[0]!, fleet, { groupId: 'g', sample: 0 });
    await env.close();
    expect(t.finish).toBe('error');
    expect(t.error).toMatch(/injected 503: overloaded \(the turn failed 4 times: /);
    const tries = bad.map((g) => completions(g, '503'));
    expect(tries[0]! + tries[1]!).toBe(4); // 2 tries a server in all, then no more
    expect(Math.min(...tries)).toBeGreaterThan(0);
    expect(syncs).toBeGreaterThanOrEqual(2); // they came back between the tries: taken out, probed, synced
  });

  it('every server down: a request waits for one, then fails naming each server and its error', async () => {
    const down = await Promise.all([gate(server.url), gate(server.url)]);
    gates.push(...down);
    for (const g of down) g.mode = 'down';
    const fleet = make(
      down.map((g) => g.url),
      { waitMs: 1_000, probeMinMs: 100 },
    );
    const env = new Environment();
    const t = await env.runEpisode(tasks[0]!, fleet, { groupId: 'g', sample: 0 });
    await env.close();
    expect(t.finish).toBe('error');
    expect(t.error_kind).toBe('policy');
    const [a, b] = down.map((g) => g.url.replace(/[.]/g, '\\.')) as [string, string];
    expect(t.error).toMatch(
      new RegExp(
        `the policy failed: openai calc-tiny: no server of the 2 answered within 1 s: ${a} \\((out|syncing)\\): .*Connection error.*; ${b} \\((out|syncing)\\): .*Connection error`,
      ),
    );
    // They were probed meanwhile (GET /v1/models), each time refused.
    for (const g of down) expect(g.arrivals.filter((x) => x.path === '/v1/models').length).toBeGreaterThan(0);
  });
});
