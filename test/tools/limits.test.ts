/**
 * No server output can crash the client: a result over the size limit (or a message that never
 * ends) is an isError result of kind `too_large` for that call, over stdio, streamable HTTP and
 * in-process, and the next call works. And the stderr of a crashed stdio server keeps its start.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createLinkedFetch, linkedListeners, resultText, ResultTooLargeError, ToolClient } from '../../src/tools/index.ts';
import { responseIdOf } from '../../src/tools/limits.ts';
import { LineReader } from '../../src/tools/stdio.ts';
import { ROOT, sleep } from '../helpers.ts';
import { serveUnruly, type Unruly } from './fixtures/unruly-http.ts';

const UNRULY = fileURLToPath(new URL('./fixtures/unruly-server.mjs', import.meta.url));
const MiB = 1024 * 1024;
const unrulyStdio = { transport: 'stdio' as const, command: process.execPath, args: [UNRULY], cwd: ROOT };

/** Waits (up to 5 s, for a loaded machine) until `done()` holds. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) await sleep(50);
}

/** "result too large: 11,000,073 bytes, the limit is 10,485,760 bytes" as a number pair. */
function sizes(text: string): { size: number; limit: number; exact: boolean } {
  const m = /result too large: (over )?([\d,]+) bytes(?: \(the rest was not read\))?, the limit is ([\d,]+) bytes/.exec(text);
  expect(m, text).not.toBeNull();
  return { size: Number(m![2]!.replace(/,/g, '')), limit: Number(m![3]!.replace(/,/g, '')), exact: !m![1] };
}

describe('results over the size limit, over stdio', () => {
  it('an 11 MB result is a too_large result; the server lives on and the next call works', async () => {
    const client = await ToolClient.connect(unrulyStdio);
    const pid = client.pid;
    const t0 = Date.now();
    const r = await client.call({ name: 'big', arguments: { bytes: 11_000_000 } }, { timeoutMs: 30_000 });
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    const s = sizes(resultText(r));
    expect(s).toMatchObject({ exact: true, limit: 10 * MiB });
    expect(s.size).toBeGreaterThan(11_000_000);
    expect(s.size).toBeLessThan(11_000_200);
    expect(resultText(r)).toMatch(/^The call to tool 'big' failed: result too large/);
    // The line was skipped, not the server: same process, and it still answers.
    const next = await client.call({ name: 'echo', arguments: { message: 'still here' } });
    expect(next).toMatchObject({ isError: false });
    expect(resultText(next)).toBe('still here');
    expect(client.pid).toBe(pid);
    expect(client.restarts).toBe(0);
    await client.close();
  });

  it('fails only the call whose answer was too large, not one in flight beside it', async () => {
    const client = await ToolClient.connect(unrulyStdio, { maxResultBytes: 100_000 });
    const [big, small] = await Promise.all([
      client.call({ name: 'big', arguments: { bytes: 300_000 } }),
      client.call({ name: 'echo', arguments: { message: 'beside it' } }),
    ]);
    expect(big).toMatchObject({ isError: true, errorKind: 'too_large' });
    expect(sizes(resultText(big))).toMatchObject({ exact: true, limit: 100_000 });
    expect(small).toMatchObject({ isError: false });
    expect(resultText(small)).toBe('beside it');
    // Just under the limit still passes.
    const fits = await client.call({ name: 'big', arguments: { bytes: 99_000 } });
    expect(fits.isError).toBe(false);
    expect(resultText(fits)).toHaveLength(99_000);
    await client.close();
  });

  it('a line that never ends: too_large, the server is restarted and the next call works', async () => {
    const client = await ToolClient.connect(unrulyStdio);
    const pid = client.pid!;
    const t0 = Date.now();
    const r = await client.call({ name: 'flood', arguments: {} }, { timeoutMs: 30_000 });
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    expect(resultText(r)).toMatch(
      /result too large: over [\d,]+ bytes \(the rest was not read\), the limit is 10,485,760 bytes\. The server wrote a line that did not end, so it was ended; it will be restarted for the next call\./,
    );
    expect(sizes(resultText(r)).size).toBeGreaterThan(8 * 10 * MiB);
    const next = await client.call({ name: 'echo', arguments: { message: 'restarted' } });
    expect(next).toMatchObject({ isError: false });
    expect(resultText(next)).toBe('restarted');
    expect(client.restarts).toBe(1);
    expect(client.pid).not.toBe(pid);
    await client.close();
  });

  it('rejects a maxResultBytes that is not a positive integer', async () => {
    await expect(ToolClient.connect(unrulyStdio, { maxResultBytes: 0 })).rejects.toThrow(/maxResultBytes/);
  });
});

describe('the stdio line reader', () => {
  /** Feeds `chunks` to a reader with limit 10 (skip limit 30); returns what it reported, in order. */
  function read(chunks: string[]): string[] {
    const out: string[] = [];
    const reader = new LineReader(
      10,
      30,
      (line) => out.push(`line ${line.toString()}`),
      (bytes, head, tail) => out.push(`oversized ${bytes} ${head.toString()}|${tail.toString()}`),
      (bytes) => out.push(`endless ${bytes}`),
    );
    for (const c of chunks) reader.push(Buffer.from(c));
    return out;
  }

  it('splits lines across and within chunks, up to and at the limit', () => {
    expect(read(['ab', 'c\nde', 'f\n\ng\n'])).toEqual(['line abc', 'line def', 'line ', 'line g']);
    expect(read(['0123456789\n'])).toEqual(['line 0123456789']);
    expect(read(['01234', '56789', '\n'])).toEqual(['line 0123456789']);
  });

  it('skips a line over the limit to its end, keeping its first and last bytes, and reads on', () => {
    expect(read(['0123456789A\nok\n'])).toEqual(['oversized 11 0123456789A|0123456789A', 'line ok']);
    expect(read(['012345', '6789A', 'BCD', '\nnext', '\n'])).toEqual(['oversized 14 0123456789ABCD|0123456789ABCD', 'line next']);
  });

  it('gives up on a line that goes on past the skip limit', () => {
    // (The transport then ends the server and reads no more.)
    expect(read(['0123456789', '0123456789', '0123456789', '0123456789', 'x\nafter\n'])[0]).toBe('endless 40');
    const under = '0123456789'.repeat(2) + '012345678'; // 29 bytes: under the skip limit, so skipped
    expect(read([under.slice(0, 10), under.slice(10, 20), `${under.slice(20)}\n`])).toEqual([`oversized 29 ${under}|${under}`]);
  });
});

describe('results over the size limit, over streamable HTTP', () => {
  let server: Unruly;
  let client: ToolClient;
  beforeAll(async () => {
    server = await serveUnruly();
    client = await ToolClient.connect({ transport: 'http', url: server.url });
  });
  afterAll(async () => {
    await client.close();
    await server.close();
  });

  it.each([
    ['big', 'an 11 MB result served by the SDK'],
    ['big_json', 'an 11 MB application/json body'],
  ])('%s: %s is a too_large result, and the next call works', async (name) => {
    const r = await client.call({ name, arguments: { bytes: 11_000_000 } }, { timeoutMs: 30_000 });
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    const s = sizes(resultText(r));
    expect(s.limit).toBe(10 * MiB);
    expect(s.size).toBeGreaterThanOrEqual(10 * MiB);
    const next = await client.call({ name: 'echo', arguments: { message: 'ok' } });
    expect(resultText(next)).toBe('ok');
  });

  it.each([
    ['flood', 'an SSE event'],
    ['flood_json', 'a JSON body'],
  ])('%s: %s that never ends is a too_large result at once; the rest is never read', async (name) => {
    const before = server.sent();
    const t0 = Date.now();
    const r = await client.call({ name, arguments: {} }, { timeoutMs: 30_000 });
    expect(Date.now() - t0).toBeLessThan(10_000); // not the timeout
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    expect(sizes(resultText(r))).toMatchObject({ exact: false, limit: 10 * MiB });
    // The client stopped reading at the limit and dropped the connection: the server could write
    // only what the socket buffers hold beyond it.
    await until(() => server.open() === 0);
    expect(server.open()).toBe(0);
    expect(server.sent() - before).toBeLessThan(40 * MiB);
    const next = await client.call({ name: 'echo', arguments: { message: 'ok' } });
    expect(resultText(next)).toBe('ok');
    await until(() => linkedListeners() === 0);
    expect(linkedListeners()).toBe(0);
  });

  it('honours a smaller limit', async () => {
    const small = await ToolClient.connect({ transport: 'http', url: server.url }, { maxResultBytes: 50_000 });
    const r = await small.call({ name: 'big', arguments: { bytes: 60_000 } });
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    expect(sizes(resultText(r)).limit).toBe(50_000);
    expect((await small.call({ name: 'big', arguments: { bytes: 40_000 } })).isError).toBe(false);
    await small.close();
  });
});

describe('the HTTP body limit, at the fetch', () => {
  const responses: Record<string, (res: ServerResponse) => void> = {};
  let base: string;
  let http: ReturnType<typeof createServer>;
  beforeAll(async () => {
    http = createServer((req, res) => responses[req.url!.slice(1)]!(res));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    base = `http://127.0.0.1:${(http.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    http.closeAllConnections();
    await new Promise((r) => http.close(r));
  });
  const post = (path: string, limit: number) =>
    createLinkedFetch({ maxMessageBytes: limit })(base + path, {
      method: 'POST',
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: {} }),
      signal: new AbortController().signal,
    });

  it('counts an SSE stream event by event, whatever its line ends and chunks', async () => {
    responses.many = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const ends = ['\n\n', '\r\n\r\n', '\r\r'];
      let i = 0;
      const next = () => {
        if (i === 300) return void res.end();
        const event = `event: message\ndata: ${JSON.stringify({ n: i, pad: 'p'.repeat(900) })}${ends[i % 3]}`;
        // Split each event across writes, line ends included.
        res.write(event.slice(0, 500));
        res.write(event.slice(500, -1));
        res.write(event.slice(-1));
        i++;
        setImmediate(next);
      };
      next();
    };
    const res = await post('many', 2000);
    const text = await res.text();
    expect(text).not.toMatch(/too large/);
    expect(text.match(/"n":/g)).toHaveLength(300); // 300 KB in all, no event over 2,000 bytes
  });

  it('ends an SSE stream at an event over the limit with an error response for the request', async () => {
    responses.long = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`event: message\ndata: {"small":1}\n\n`);
      res.write(`event: message\ndata: ${'x'.repeat(5000)}`);
    };
    const text = await (await post('long', 2000)).text();
    const events = text.split(/\n\n/).filter((e) => e.trim());
    expect(events[0]).toBe('event: message\ndata: {"small":1}');
    expect(events.at(-1)).toMatch(/^event: message\ndata: /);
    const answer = JSON.parse(events.at(-1)!.replace(/^event: message\ndata: /, ''));
    expect(answer).toMatchObject({
      jsonrpc: '2.0',
      id: 7,
      error: { message: 'result too large: over 2,000 bytes (the rest was not read), the limit is 2,000 bytes' },
    });
    expect(text.length).toBeLessThan(2500);
  });

  it('refuses a JSON body whose Content-Length is over the limit without reading it', async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { pad: 'y'.repeat(10_000) } });
    expect(body.length).toBe(10_044);
    responses.declared = (res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
      res.end(body);
    };
    const err = await post('declared', 2000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResultTooLargeError);
    expect((err as Error).message).toBe('result too large: 10,044 bytes, the limit is 2,000 bytes');
    expect(linkedListeners()).toBe(0);
  });

  it('finds the id of an oversized response from its first and last bytes only', () => {
    expect(responseIdOf('{"result":{"content":[{"type":"text","text":"xxx', 'xxx"}]},"jsonrpc":"2.0","id":12}')).toBe(12);
    expect(responseIdOf('{"jsonrpc":"2.0","id":"a-1","result":{"x":"', 'xx"}}')).toBe('a-1');
    expect(responseIdOf('{"jsonrpc":"2.0","id":4,"error":{"message":"', '"}}')).toBe(4);
    // A request or notification from the server: its id is not one of ours.
    expect(responseIdOf('{"method":"sampling/createMessage","params":{"x":"', 'x"},"jsonrpc":"2.0","id":0}')).toBeUndefined();
    expect(responseIdOf('{"result":{"x":"', 'x","inner":{"id":5}}}')).toBeUndefined();
  });
});

describe('results over the size limit, in-process', () => {
  it('measures the JSON of the result', async () => {
    const factory = () => {
      const server = new McpServer({ name: 'big', version: '1.0.0' });
      server.registerTool('big', { inputSchema: z.object({ bytes: z.number().int() }) }, async ({ bytes }) => ({
        content: [{ type: 'text', text: 'x'.repeat(bytes) }],
      }));
      return server;
    };
    const client = await ToolClient.connect({ transport: 'inprocess', factory }, { maxResultBytes: 10_000 });
    const r = await client.call({ name: 'big', arguments: { bytes: 20_000 } });
    expect(r).toMatchObject({ isError: true, errorKind: 'too_large' });
    const s = sizes(resultText(r));
    expect(s).toMatchObject({ limit: 10_000, exact: true });
    expect(s.size).toBeGreaterThan(20_000);
    expect(s.size).toBeLessThan(20_100);
    expect((await client.call({ name: 'big', arguments: { bytes: 5_000 } })).isError).toBe(false);
    await client.close();
  });
});

describe('the stderr of a crashed stdio server', () => {
  it('keeps its first and its last part, so the first line of the error is there', async () => {
    const client = await ToolClient.connect(unrulyStdio);
    const r = await client.call({ name: 'crash', arguments: { filler: 20_000 } });
    expect(r).toMatchObject({ isError: true, errorKind: 'crashed' });
    const text = resultText(r);
    expect(text).toMatch(
      /exited with code 1\. Its stderr \(its start and its end, of 20,\d{3} characters\): Error \[ERR_MODULE_NOT_FOUND\]: Cannot find package 'left-pad' imported from \/srv\/app\/server\.js\n/,
    );
    expect(text).toMatch(/\n\.\.\.\n/);
    expect(text).toMatch(/Node\.js v20 \(the last line\) It will be restarted for the next call\.$/);
    expect(text.length).toBeLessThan(4096 + 400);
    // A short stderr is kept whole.
    const again = await client.call({ name: 'crash', arguments: { filler: 100 } });
    expect(resultText(again)).toMatch(/Its stderr ends with: Error \[ERR_MODULE_NOT_FOUND\]: Cannot find package 'left-pad'[^]*\(the last line\) It will/);
    expect(resultText(again)).not.toMatch(/\n\.\.\.\n/);
    await client.close();
  });

  it('and so does the error of a server that cannot start', async () => {
    const script = `process.stderr.write("Error: Cannot find package 'zod'\\n" + "    at somewhere\\n".repeat(1000)); process.exit(3)`;
    const err = await ToolClient.connect({ transport: 'stdio', command: process.execPath, args: ['-e', script] }).catch((e: Error) => e);
    expect((err as Error).message).toMatch(
      /exited with code 3; its stderr \(its start and its end, of 17,033 characters\): Error: Cannot find package 'zod'\n/,
    );
    expect((err as Error).message).toMatch(/at somewhere$/);
  });
});
