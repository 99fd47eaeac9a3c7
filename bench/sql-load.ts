/**
 * The sql server under load: a trivial query's latency while 8 runaway queries run (each a
 * recursive CTE that runs until the 2 s timeout), against the same query on an idle server: the
 * subject and its baseline side by side, and their ratio. The goal (issue "Hardening"): under
 * 100 ms under load. Medians of 5 queries each, after the pool's processes have started.
 *
 *   npx tsx bench/sql-load.ts
 */
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport } from '@modelcontextprotocol/server';
import { serverFactory } from '../servers/common.ts';
import { createSqlServer, type SqlState } from '../servers/sql.ts';

const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
const TRIVIAL = 'SELECT count(*) FROM customers';

const served = serverFactory(createSqlServer({ timeoutMs: 2000 }));
const [a, b] = InMemoryTransport.createLinkedPair();
await served.factory().connect(a);
const client = new Client({ name: 'bench', version: '1' });
await client.connect(b);
const call = (sql: string) => client.callTool({ name: 'query', arguments: { sql } });
const stats = () => (served.backend.episode('default') as SqlState).runner.stats();
const median = (xs: number[]) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)]!;

async function trivialMs(n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await call(TRIVIAL);
    if (r.isError) throw new Error(`the trivial query failed: ${JSON.stringify(r.content)}`);
    out.push(performance.now() - t);
  }
  return out;
}

await call('SELECT 1'); // the pool starts
const idle = await trivialMs(5);
const runaways = Array.from({ length: 8 }, () => call(RUNAWAY));
while (!(stats().long >= 8 && stats().ready > stats().busy)) await new Promise((r) => setTimeout(r, 20));
const loaded = await trivialMs(5);
const answers = await Promise.all(runaways);
await client.close();
await served.backend.close();

const row = (name: string, xs: number[]) => `${name.padEnd(34)} median ${median(xs).toFixed(1).padStart(7)} ms   (${xs.map((x) => x.toFixed(1)).join(', ')})`;
console.log(row('trivial query, idle server', idle));
console.log(row('trivial query, 8 runaway queries', loaded));
console.log(`runaway queries: ${answers.filter((r) => r.isError).length} of 8 stopped (${(answers[0]!.content[0] as { text: string }).text})`);
const result = { loaded_ms: median(loaded), idle_ms: median(idle), ratio: median(loaded) / median(idle), goal_ms: 100, met: median(loaded) < 100 };
console.log(JSON.stringify(result));
