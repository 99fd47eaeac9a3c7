import { readdirSync, readFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpServer as V1McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport as V1HttpTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { descendants, isAlive, linkedListeners, resultText, ToolClient } from '../../src/tools/index.ts';
import { serveOverHttp, serverFactory, type HttpServing } from '../../servers/index.ts';
import { kvServer } from '../../servers/kv.ts';
import { cliStdioSpec, pagedServer, ROOT, CLI, sleep, testServer } from '../helpers.ts';

/** Every live process whose process group is `pgid`. */
function groupMembers(pgid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

describe('in-process transport', () => {
  it('pages through tools/list to the end and hands on each JSON Schema', async () => {
    const client = await ToolClient.connect({ transport: 'inprocess', factory: () => pagedServer(23, 5) });
    const tools = await client.listTools();
    expect(tools).toHaveLength(23);
    expect(tools[22]!.name).toBe('tool_022');
    expect(tools[7]!.inputSchema).toMatchObject({ type: 'object', required: ['n'] });
    const r = await client.call({ name: 'tool_022', arguments: { n: 1 } });
    expect(r.isError).toBe(false);
    expect(resultText(r)).toBe('tool_022:{"n":1}');
    await client.close();
  });

  it('returns every failure as an isError result the agent can read', async () => {
    const client = await ToolClient.connect({ transport: 'inprocess', factory: testServer });
    const unknown = await client.call({ name: 'nope', arguments: {} });
    expect(unknown).toMatchObject({ isError: true, errorKind: 'unknown_tool' });
    expect(resultText(unknown)).toContain("Unknown tool 'nope'. Available tools: sleep, progress, echo, fail");

    const bad = await client.call({ name: 'echo', arguments: { message: 42 } });
    expect(bad).toMatchObject({ isError: true, errorKind: 'invalid_arguments' });
    expect(resultText(bad)).toMatch(/message: Invalid input: expected string, received number/);

    const notObject = await client.call({ name: 'echo', arguments: 'hi' as never });
    expect(notObject).toMatchObject({ isError: true, errorKind: 'invalid_arguments' });

    const failed = await client.call({ name: 'fail', arguments: {} });
    expect(failed).toMatchObject({ isError: true, errorKind: 'tool' });
    expect(resultText(failed)).toBe('it failed on purpose');

    const ok = await client.call({ name: 'echo', arguments: { message: 'hello' } });
    expect(ok).toMatchObject({ isError: false, structured: { message: 'hello' } });
    expect(ok.ms).toBeGreaterThanOrEqual(0);
    await client.close();
  });

  it('times out, cancels, and reports progress', async () => {
    const client = await ToolClient.connect({ transport: 'inprocess', factory: testServer });
    const t0 = Date.now();
    const slow = await client.call({ name: 'sleep', arguments: { ms: 5000 } }, { timeoutMs: 100 });
    expect(slow).toMatchObject({ isError: true, errorKind: 'timeout' });
    expect(resultText(slow)).toBe("The call to tool 'sleep' timed out after 100 ms");
    expect(Date.now() - t0).toBeLessThan(2000);

    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    const cancelled = await client.call({ name: 'sleep', arguments: { ms: 5000 } }, { signal: ac.signal });
    expect(cancelled).toMatchObject({ isError: true, errorKind: 'aborted' });

    const seen: number[] = [];
    const done = await client.call({ name: 'progress', arguments: { steps: 4 } }, { onProgress: (p) => seen.push(p.progress) });
    expect(done.isError).toBe(false);
    expect(seen).toEqual([1, 2, 3, 4]);
    await client.close();
  });

  it('gives each episode its own state through _meta', async () => {
    const { factory, backend } = serverFactory(kvServer);
    const client = await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() });
    await client.call({ name: 'set', arguments: { key: 'k', value: 'one' } }, { episode: 'a' });
    await client.call({ name: 'set', arguments: { key: 'k', value: 'two' } }, { episode: 'b' });
    expect((await client.call({ name: 'get', arguments: { key: 'k' } }, { episode: 'a' })).structured).toMatchObject({ value: 'one' });
    expect((await client.call({ name: 'get', arguments: { key: 'k' } }, { episode: 'b' })).structured).toMatchObject({ value: 'two' });
    backend.release('a');
    expect((await client.call({ name: 'get', arguments: { key: 'k' } }, { episode: 'a' })).structured).toMatchObject({ found: false });
    await client.close();
  });

  it('refuses a bad spec with the field named', async () => {
    await expect(ToolClient.connect({ transport: 'http', url: 'not a url' })).rejects.toThrow(/Invalid server spec: url/);
    await expect(ToolClient.connect({ transport: 'stdio', command: '' })).rejects.toThrow(/Invalid server spec: command/);
  });
});

describe('stdio transport', () => {
  it('a server killed in the middle of a call gives an isError result before the timeout, and the next call succeeds on a restarted server', async () => {
    const client = await ToolClient.connect(cliStdioSpec('kv'));
    expect((await client.call({ name: 'set', arguments: { key: 'a', value: '1' } })).isError).toBe(false);
    const pid = client.pid!;
    const pending = client.call({ name: 'list', arguments: {} }, { timeoutMs: 20_000 });
    process.kill(pid, 'SIGKILL');
    const t0 = Date.now();
    const crashed = await pending;
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(crashed).toMatchObject({ isError: true, errorKind: 'crashed' });
    expect(resultText(crashed)).toMatch(/crashed during the call to 'list': the server process was killed by SIGKILL\. It will be restarted/);
    const next = await client.call({ name: 'get', arguments: { key: 'a' } });
    expect(next.isError).toBe(false);
    expect(client.restarts).toBe(1);
    expect(client.pid).not.toBe(pid);
    await client.close();
  });

  it('closing kills the whole process tree, grandchildren included', async () => {
    // The shell leaves a child (sleep) and an orphaned grandchild (the double-forked sleep) behind.
    const script = `sleep 300 & (sleep 301 &) ; exec "${process.execPath}" "${CLI}" serve kv`;
    const client = await ToolClient.connect({ transport: 'stdio', command: 'sh', args: ['-c', script], cwd: ROOT });
    expect((await client.call({ name: 'list', arguments: {} })).isError).toBe(false);
    const pid = client.pid!;
    const tree = [pid, ...descendants(pid), ...groupMembers(pid)];
    expect(new Set(tree).size).toBeGreaterThanOrEqual(3);
    expect(tree.every(isAlive)).toBe(true);
    await client.close();
    await sleep(100);
    expect(tree.filter(isAlive)).toEqual([]);
    expect(groupMembers(pid)).toEqual([]);
  });

  it('a server that cannot start is a clear error', async () => {
    await expect(ToolClient.connect({ transport: 'stdio', command: 'definitely-not-a-command-xyz' })).rejects.toThrow(
      /Cannot connect to stdio server 'definitely-not-a-command-xyz'/,
    );
    await expect(
      ToolClient.connect({ transport: 'stdio', command: process.execPath, args: ['-e', 'console.error("boom: bad config"); process.exit(3)'] }),
    ).rejects.toThrow(/exited with code 3; its stderr ends with: boom: bad config/);
  });

  it('gives up restarting a server that keeps crashing', async () => {
    const client = await ToolClient.connect({ ...cliStdioSpec('kv'), maxRestartsPerMinute: 1 });
    process.kill(client.pid!, 'SIGKILL');
    await sleep(200);
    expect((await client.call({ name: 'list', arguments: {} })).isError).toBe(false);
    process.kill(client.pid!, 'SIGKILL');
    await sleep(200);
    const r = await client.call({ name: 'list', arguments: {} });
    expect(r).toMatchObject({ isError: true, errorKind: 'crashed' });
    expect(resultText(r)).toMatch(/keeps crashing: gave up after 1 restarts within a minute/);
    await client.close();
  });
});

describe('streamable HTTP transport', () => {
  let serving: HttpServing;
  beforeAll(async () => {
    serving = await serveOverHttp(kvServer, { port: 0, token: 's3cret' });
  });
  afterAll(async () => {
    await serving.close();
  });

  it('requires the bearer token when one is set', async () => {
    await expect(ToolClient.connect({ transport: 'http', url: serving.url })).rejects.toThrow(/Cannot connect to HTTP server.*Unauthorized/);
    await expect(ToolClient.connect({ transport: 'http', url: serving.url, token: 'wrong' })).rejects.toThrow(/Unauthorized/);
    const client = await ToolClient.connect({ transport: 'http', url: serving.url, token: 's3cret' });
    expect((await client.call({ name: 'set', arguments: { key: 'x', value: 'y' } })).isError).toBe(false);
    await client.close();
  });

  it('binds to localhost and refuses foreign Host and Origin headers', async () => {
    expect(serving.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const status = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          serving.url,
          {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: 'Bearer s3cret', ...headers },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }));
      });
    expect(await status({ host: 'evil.example.com' })).toBe(403);
    expect(await status({ origin: 'http://evil.example.com' })).toBe(403);
  });

  it('2,000 calls at concurrency 32 leave no listener warning and no growth in open handles', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    const client = await ToolClient.connect({ transport: 'http', url: serving.url, token: 's3cret' });
    const handles = () => process.getActiveResourcesInfo().filter((r) => r !== 'Immediate').length;
    let next = 0;
    let errors = 0;
    const run = (until: number) =>
      Promise.all(
        Array.from({ length: 32 }, async () => {
          while (next < until) {
            const i = next++;
            const r = await client.call({ name: 'incr', arguments: { key: `k${i % 50}` } }, { episode: 'load' });
            if (r.isError) errors++;
          }
        }),
      );
    await run(300); // warm-up: the connection pools fill
    const before = handles();
    await run(1300);
    const middle = handles();
    await run(2300);
    await sleep(50);
    const after = handles();
    process.off('warning', onWarning);
    expect(errors).toBe(0);
    const total = await client.call({ name: 'list', arguments: { prefix: 'k' } }, { episode: 'load' });
    const sum = (total.structured as { entries: { value: string }[] }).entries.reduce((s, e) => s + Number(e.value), 0);
    expect(sum).toBe(2300);
    expect(warnings.filter((w) => /MaxListeners|listener/i.test(w))).toEqual([]);
    // Sockets come and go with the pools (both ends live in this process); a leak of one
    // handle per call would add about 1,000 between each count.
    expect(middle).toBeLessThanOrEqual(before + 32);
    expect(after).toBeLessThanOrEqual(before + 32);
    // No abort listener is left on the transport's signal once the calls (and their response
    // streams, read to the end a moment after the result) are done.
    await sleep(50);
    expect(linkedListeners()).toBe(0);
    await client.close();
  });

  it('ends the HTTP session of a sessionful server on close', async () => {
    // A 2025-era sessionful server built with the SDK's v1 line.
    const sessions = new Map<string, V1HttpTransport>();
    const ended: string[] = [];
    const http = createServer(async (req, res) => {
      const sid = req.headers['mcp-session-id'] as string | undefined;
      let transport = sid ? sessions.get(sid) : undefined;
      if (!transport) {
        transport = new V1HttpTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => void sessions.set(id, transport!) });
        transport.onclose = () => {
          if (transport!.sessionId) {
            ended.push(transport!.sessionId);
            sessions.delete(transport!.sessionId);
          }
        };
        const server = new V1McpServer({ name: 'sessionful', version: '1.0.0' });
        server.registerTool('hello', { inputSchema: { who: z.string() } }, async ({ who }) => ({ content: [{ type: 'text', text: `hello ${who}` }] }));
        await server.connect(transport);
      }
      await transport.handleRequest(req, res);
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
    const client = await ToolClient.connect({ transport: 'http', url });
    expect(resultText(await client.call({ name: 'hello', arguments: { who: 'you' } }))).toBe('hello you');
    expect(sessions.size).toBe(1);
    await client.close();
    await sleep(50);
    expect(ended).toHaveLength(1);
    expect(sessions.size).toBe(0);
    http.closeAllConnections();
    await new Promise((r) => http.close(r));
  });

  it('an unreachable server is an isError result after connect', async () => {
    const s = await serveOverHttp(kvServer, { port: 0 });
    const client = await ToolClient.connect({ transport: 'http', url: s.url });
    await client.listTools();
    await s.close();
    const r = await client.call({ name: 'list', arguments: {} }, { timeoutMs: 5000 });
    expect(r.isError).toBe(true);
    expect(['closed', 'protocol']).toContain(r.errorKind);
    await client.close();
  });
});
