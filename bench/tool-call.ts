/**
 * Per-call latency of `src/tools` (ToolClient) against the raw SDK client on the same server, for
 * the in-process, stdio and streamable HTTP transports, in one run. Calls are sequential; the
 * two clients alternate in blocks so that drift hits both alike.
 *
 *   npx tsx bench/tool-call.ts [--calls 3000] [--block 250]
 *
 * Last line: {"inprocess": {"p50_ms", "raw_p50_ms", "ratio_p50", ...}, "stdio": {...}, "http": {...}}
 */
import { parseArgs } from 'node:util';
import { Client, InMemoryTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import type { Transport } from '@modelcontextprotocol/client';
import { ToolClient, type ServerSpec } from '../src/tools/index.ts';
import { bundledServer, serveOverHttp, serverFactory } from '../servers/index.ts';
import { CLI_PATH as CLI, PACKAGE_ROOT as ROOT } from '../src/paths.ts';

const kvServer = bundledServer('kv');

const { values } = parseArgs({ options: { calls: { type: 'string', default: '3000' }, block: { type: 'string', default: '250' } } });
const CALLS = Number(values.calls);
const BLOCK = Number(values.block);
const ARGS = { name: 'get', arguments: { key: 'bench' } };

function quantile(sorted: number[], q: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

interface Side {
  call(): Promise<unknown>;
  close(): Promise<void>;
}

async function measure(name: string, subject: Side, baseline: Side) {
  for (let i = 0; i < 300; i++) {
    await subject.call();
    await baseline.call();
  }
  const ours: number[] = [];
  const raw: number[] = [];
  for (let done = 0; done < CALLS; done += BLOCK) {
    for (const [side, out] of [
      [subject, ours],
      [baseline, raw],
    ] as const) {
      for (let i = 0; i < BLOCK; i++) {
        const t0 = performance.now();
        await side.call();
        out.push(performance.now() - t0);
      }
    }
  }
  ours.sort((a, b) => a - b);
  raw.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 10000) / 10000;
  const row = {
    p50_ms: r(quantile(ours, 0.5)),
    raw_p50_ms: r(quantile(raw, 0.5)),
    ratio_p50: r(quantile(ours, 0.5) / quantile(raw, 0.5)),
    p99_ms: r(quantile(ours, 0.99)),
    raw_p99_ms: r(quantile(raw, 0.99)),
    calls: ours.length,
  };
  console.log(
    `${name.padEnd(10)} mcp-gym p50 ${row.p50_ms.toFixed(4)} ms  raw SDK p50 ${row.raw_p50_ms.toFixed(4)} ms  ratio ${row.ratio_p50.toFixed(3)}   ` +
      `(p99 ${row.p99_ms.toFixed(3)} vs ${row.raw_p99_ms.toFixed(3)} ms, ${row.calls} calls each)`,
  );
  await subject.close();
  await baseline.close();
  return row;
}

async function ours(spec: ServerSpec): Promise<Side> {
  const client = await ToolClient.connect(spec);
  await client.listTools();
  const r = await client.call(ARGS);
  if (r.isError) throw new Error(`bench call failed: ${JSON.stringify(r.content)}`);
  return { call: () => client.call(ARGS), close: () => client.close() };
}

async function raw(transport: Transport): Promise<Side> {
  const client = new Client({ name: 'raw', version: '1.0.0' });
  await client.connect(transport);
  await client.listTools();
  return { call: () => client.callTool(ARGS), close: () => client.close() };
}

const results: Record<string, unknown> = {};
console.log(`tool-call latency: ${CALLS} sequential calls of kv.get per client and transport, alternating blocks of ${BLOCK}`);

{
  const { factory, backend } = serverFactory(kvServer);
  const [a, b] = InMemoryTransport.createLinkedPair();
  await factory().connect(a);
  results.inprocess = await measure('inprocess', await ours({ transport: 'inprocess', factory }), await raw(b));
  await backend.close();
}
{
  const args = [CLI, 'serve', 'kv'];
  results.stdio = await measure(
    'stdio',
    await ours({ transport: 'stdio', command: process.execPath, args, cwd: ROOT }),
    await raw(new StdioClientTransport({ command: process.execPath, args, cwd: ROOT })),
  );
}
{
  const serving = await serveOverHttp(kvServer, { port: 0 });
  results.http = await measure('http', await ours({ transport: 'http', url: serving.url }), await raw(new StreamableHTTPClientTransport(new URL(serving.url))));
  await serving.close();
}
console.log(JSON.stringify(results));
