/**
 * No tool call can block the event loop of a run: the files server's search with a regular
 * expression that backtracks catastrophically is ended at its deadline, in-process (where the
 * server shares the rollout's event loop) and over HTTP (where it would keep the server busy).
 */
import { availableParallelism, loadavg } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resultText, ToolClient } from '../../src/tools/index.ts';
import { serveOverHttp, serverFactory, type HttpServing } from '../../servers/index.ts';
import { filesServer } from '../../servers/files.ts';
import { sleep } from '../helpers.ts';

const EVIL = '(a+)+$';
const LINE = `${'a'.repeat(50_000)}!\n`;

/** Runs `f` while a 5 ms timer ticks on this thread; returns its value and the timer's largest delay. */
async function withTimer<T>(f: () => Promise<T>): Promise<{ value: T; maxDelayMs: number; ticks: number }> {
  let last = performance.now();
  let maxDelayMs = 0;
  let ticks = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxDelayMs = Math.max(maxDelayMs, now - last - 5);
    last = now;
    ticks++;
  }, 5);
  try {
    const value = await f();
    maxDelayMs = Math.max(maxDelayMs, performance.now() - last - 5);
    return { value, maxDelayMs, ticks };
  } finally {
    clearInterval(timer);
  }
}

/** CPU seconds this process uses over `ms`. */
async function cpuOver(ms: number): Promise<number> {
  const c0 = process.cpuUsage();
  await sleep(ms);
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1e6;
}

async function check(client: ToolClient): Promise<void> {
  expect((await client.call({ name: 'write_file', arguments: { path: 'log.txt', content: LINE } }, { episode: 'e' })).isError).toBe(false);
  const t0 = performance.now();
  const {
    value: r,
    maxDelayMs,
    ticks,
  } = await withTimer(() => client.call({ name: 'search', arguments: { query: EVIL, regex: true } }, { episode: 'e', timeoutMs: 10_000 }));
  const ms = performance.now() - t0;
  expect(r.isError).toBe(true);
  expect(r.errorKind).toBe('tool');
  expect(resultText(r)).toMatch(/^search: the search took longer than 5,000 ms \(the pattern may backtrack catastrophically/);
  expect(ms).toBeLessThan(9_500); // its own deadline, before the call's timeout
  // Blocked, the timer would not fire for 5 s (before the fix: never, as the call never ended).
  // A machine loaded far beyond its cores may hold any thread off the CPU for a while, so the
  // 100 ms bound is relaxed only then.
  const overloaded = loadavg()[0]! > 4 * availableParallelism();
  expect(maxDelayMs).toBeLessThan(overloaded ? 1000 : 100);
  expect(ticks).toBeGreaterThan(overloaded ? 50 : 200);
  // The worker was ended: nothing keeps spinning.
  expect(await cpuOver(1000)).toBeLessThan(0.3);
  // And the server goes on: the next search (the worker started afresh) works.
  const next = await client.call({ name: 'search', arguments: { query: 'a+!$', regex: true } }, { episode: 'e', timeoutMs: 10_000 });
  expect(next.isError).toBe(false);
  expect((next.structured as { matches: { line: number }[] }).matches).toEqual([expect.objectContaining({ path: 'log.txt', line: 1 })]);
}

describe('a catastrophic regular expression in files search', () => {
  it('in-process: an isError result at the deadline, and the event loop never stalls', async () => {
    const { factory, backend } = serverFactory(filesServer);
    const client = await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() });
    await check(client);
    await client.close();
  });

  describe('over streamable HTTP', () => {
    let serving: HttpServing;
    beforeAll(async () => {
      serving = await serveOverHttp(filesServer, { port: 0 });
    });
    afterAll(async () => {
      await serving.close();
    });

    it('an isError result at the deadline, and the server is idle afterwards', async () => {
      const client = await ToolClient.connect({ transport: 'http', url: serving.url });
      await check(client);
      await client.close();
    });
  });
});
