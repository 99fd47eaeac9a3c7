/**
 * The harness is not the bottleneck: the call rate that `mcp-gym bench`'s load engine
 * (`runLevel` over a `ToolClient`, recording every latency) sustains against an in-process echo
 * server, against the raw SDK `Client.callTool` rate on the same server at the same concurrency,
 * in one run. The two alternate in short rounds (ABBA order) so that drift hits both alike, and
 * the figures are medians over the rounds, so that a burst of load from elsewhere on the machine
 * does not decide the result.
 *
 *   npx tsx bench/bench-overhead.ts [--calls 1000] [--rounds 30] [--concurrency 4]
 *
 * Last line: {"bench_calls_per_s", "raw_calls_per_s", "ratio", ...}; the ratio should be >= 0.85.
 */
import { parseArgs } from 'node:util';
import { Client, InMemoryTransport } from '@modelcontextprotocol/client';
import { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { runLevel } from '../src/bench/index.ts';
import { ToolClient } from '../src/tools/index.ts';

const { values } = parseArgs({
  options: {
    calls: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '30' },
    concurrency: { type: 'string', default: '4' },
  },
});
const CALLS = Number(values.calls);
const ROUNDS = Number(values.rounds);
const C = Number(values.concurrency);
const ARGS = { message: 'hello' };

function echoServer(): McpServer {
  const server = new McpServer({ name: 'echo', version: '1.0.0' });
  server.registerTool('echo', { description: 'Echo a message', inputSchema: z.object({ message: z.string() }) }, async ({ message }) => ({
    content: [{ type: 'text', text: message }],
  }));
  return server;
}

// The subject: what `mcp-gym bench` runs, a ToolClient driven by the load engine.
const ours = await ToolClient.connect({ transport: 'inprocess', factory: echoServer });
await ours.listTools();
const bench = async (calls: number) => {
  const { result } = await runLevel(ours, 'echo', [ARGS], { concurrency: C, calls, durationMs: 600_000, timeoutMs: 30_000 });
  if (result.errors) throw new Error(`${result.errors} bench calls failed`);
  return { calls: result.calls, seconds: result.seconds };
};

// The baseline: the raw SDK client on its own instance of the same server, C workers in a loop.
const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
await echoServer().connect(serverSide);
const raw = new Client({ name: 'raw', version: '1.0.0' });
await raw.connect(clientSide);
await raw.listTools();
const params = { name: 'echo', arguments: ARGS };
const rawRun = async (calls: number) => {
  let started = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (started < calls) {
      started++;
      const r = await raw.callTool(params);
      if (r.isError) throw new Error('raw call failed');
    }
  };
  await Promise.all(Array.from({ length: Math.min(C, calls) }, worker));
  return { calls, seconds: (performance.now() - t0) / 1000 };
};

console.log(`bench overhead: echo over the in-memory transport, concurrency ${C}, ${ROUNDS} rounds of ${CALLS} calls per side (alternating)`);
await bench(Math.min(2000, CALLS * 2));
await rawRun(Math.min(2000, CALLS * 2));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
// Per round: each side's wall-clock rate and its rate per CPU second (this process runs the
// client and the server, so CPU time is the cost of a call, whatever else the machine is doing).
const rates = { bench: [] as number[], raw: [] as number[] };
const cpuRates = { bench: [] as number[], raw: [] as number[] };
const ratios: number[] = [];
const cpuRatios: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? (['bench', 'raw'] as const) : (['raw', 'bench'] as const);
  const got: Record<string, { wall: number; cpu: number }> = {};
  for (const side of order) {
    const c0 = cpuMs();
    const r = side === 'bench' ? await bench(CALLS) : await rawRun(CALLS);
    const cpu = (cpuMs() - c0) / 1000;
    got[side] = { wall: r.calls / r.seconds, cpu: r.calls / cpu };
    rates[side].push(got[side]!.wall);
    cpuRates[side].push(got[side]!.cpu);
  }
  ratios.push(got.bench!.wall / got.raw!.wall);
  cpuRatios.push(got.bench!.cpu / got.raw!.cpu);
}
const benchRate = median(rates.bench);
const rawRate = median(rates.raw);
const ratio = median(ratios);
const cpuRatio = median(cpuRatios);
const spread = `${Math.min(...ratios).toFixed(2)}..${Math.max(...ratios).toFixed(2)}`;
console.log(
  `mcp-gym bench load engine: ${benchRate.toFixed(0)} calls/s   raw SDK Client.callTool: ${rawRate.toFixed(0)} calls/s   ratio ${ratio.toFixed(3)} (needs >= 0.85)`,
);
console.log(
  `  medians over ${ROUNDS} rounds; per-round ratios ${spread}; per CPU second: ${median(cpuRates.bench).toFixed(0)} vs ${median(cpuRates.raw).toFixed(0)} calls, ratio ${cpuRatio.toFixed(3)}`,
);
await ours.close();
await raw.close();
console.log(
  JSON.stringify({
    bench_calls_per_s: Math.round(benchRate),
    raw_calls_per_s: Math.round(rawRate),
    ratio: Number(ratio.toFixed(3)),
    cpu_ratio: Number(cpuRatio.toFixed(3)),
    concurrency: C,
    rounds: ROUNDS,
    calls_per_round: CALLS,
  }),
);
if (ratio < 0.85) process.exitCode = 1;
