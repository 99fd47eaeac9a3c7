import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { InMemoryTransport, type McpServer } from '@modelcontextprotocol/server';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverFactory, type Backend } from '../../servers/common.ts';
import { buildShopDatabase, generateShop, SHOP_DB_FILE } from '../../servers/shop-data.ts';
import { createSqlServer, sqlServer, type SqlState } from '../../servers/sql.ts';

const TABLES = ['customers', 'products', 'orders', 'order_items'];
const REFUSED = 'Only read-only queries (SELECT) are allowed; got';
const INFINITE_CTE = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';

interface QueryOut {
  columns: string[];
  rows: (string | number | null)[][];
  row_count: number;
  truncated: boolean;
}

function text(r: CallToolResult): string {
  const first = r.content[0];
  return first?.type === 'text' ? first.text : '';
}

/** Every row of every table, in a fixed order. */
function dump(file: string): Record<string, unknown[]> {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return Object.fromEntries(TABLES.map((t) => [t, db.prepare(`SELECT * FROM ${t} ORDER BY 1, 2`).all()]));
  } finally {
    db.close();
  }
}

async function connect(factory: () => McpServer): Promise<Client> {
  const [a, b] = InMemoryTransport.createLinkedPair();
  await factory().connect(a);
  const client = new Client({ name: 't', version: '1' });
  await client.connect(b);
  return client;
}

describe('sql server', () => {
  let dataDir: string;
  let dbFile: string;
  let backend: Backend<unknown>;
  let client: Client;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'mcp-gym-sql-test-'));
    dbFile = join(dataDir, SHOP_DB_FILE);
    const served = serverFactory(sqlServer, { dataDir });
    backend = served.backend as Backend<unknown>;
    client = await connect(served.factory);
  });

  afterAll(async () => {
    await client?.close();
    await backend?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const call = (name: string, args: Record<string, unknown>) => client.callTool({ name, arguments: args });
  async function query(sql: string, limit?: number): Promise<QueryOut> {
    const r = await call('query', limit === undefined ? { sql } : { sql, limit });
    expect(r.isError, text(r)).toBeFalsy();
    return r.structuredContent as unknown as QueryOut;
  }

  it('lists its tools as read-only', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['describe_schema', 'query']);
    for (const t of tools) expect(t.annotations?.readOnlyHint).toBe(true);
  });

  it('describes the schema: tables, columns, keys, references and row counts', async () => {
    const r = await call('describe_schema', {});
    expect(r.isError).toBeFalsy();
    const { tables } = r.structuredContent as {
      tables: {
        name: string;
        columns: { name: string; type: string; primary_key: boolean; references?: { table: string; column: string } }[];
        row_count: number;
      }[];
    };
    expect(tables.map((t) => t.name)).toEqual(TABLES);
    const byName = Object.fromEntries(tables.map((t) => [t.name, t]));
    expect(byName.customers!.columns).toEqual([
      { name: 'id', type: 'INTEGER', primary_key: true },
      { name: 'name', type: 'TEXT', primary_key: false },
      { name: 'city', type: 'TEXT', primary_key: false },
      { name: 'joined', type: 'DATE', primary_key: false },
    ]);
    expect(byName.products!.columns.map((c) => `${c.name} ${c.type}`)).toEqual(['id INTEGER', 'name TEXT', 'category TEXT', 'price_cents INTEGER']);
    expect(byName.orders!.columns.find((c) => c.name === 'customer_id')?.references).toEqual({ table: 'customers', column: 'id' });
    expect(byName.order_items!.columns).toEqual([
      { name: 'order_id', type: 'INTEGER', primary_key: true, references: { table: 'orders', column: 'id' } },
      { name: 'product_id', type: 'INTEGER', primary_key: true, references: { table: 'products', column: 'id' } },
      { name: 'quantity', type: 'INTEGER', primary_key: false },
    ]);
    expect(byName.customers!.row_count).toBe(50);
    expect(byName.products!.row_count).toBe(40);
    expect(byName.orders!.row_count).toBe(300);
    expect(byName.order_items!.row_count).toBeGreaterThan(800);
    expect(byName.order_items!.row_count).toBeLessThan(1000);
    const counts = Object.fromEntries(Object.entries(dump(dbFile)).map(([t, rows]) => [t, rows.length]));
    expect(Object.fromEntries(tables.map((t) => [t.name, t.row_count]))).toEqual(counts);
    expect((await query('SELECT count(DISTINCT category) FROM products')).rows).toEqual([[5]]);

    const one = await call('describe_schema', { table: 'Orders' });
    expect((one.structuredContent as { tables: { name: string }[] }).tables.map((t) => t.name)).toEqual(['orders']);
    const unknown = await call('describe_schema', { table: 'invoices' });
    expect(unknown.isError).toBe(true);
    expect(text(unknown)).toBe("Unknown table 'invoices'. Tables: customers, products, orders, order_items");
  });

  it('answers a join with group by exactly as the database does', async () => {
    const sql = `
      SELECT p.category, count(DISTINCT o.id) AS orders, sum(oi.quantity * p.price_cents) AS revenue_cents
      FROM orders o JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id
      WHERE o.status = 'delivered'
      GROUP BY p.category ORDER BY revenue_cents DESC`;
    const out = await query(sql);
    expect(out.columns).toEqual(['category', 'orders', 'revenue_cents']);
    expect(out.row_count).toBe(5);
    expect(out.truncated).toBe(false);

    // The same figures, computed in JavaScript from the rows of the same database file.
    const db = new Database(dbFile, { readonly: true });
    const products = new Map(
      db
        .prepare('SELECT id, category, price_cents FROM products')
        .all()
        .map((p) => [(p as { id: number }).id, p as { category: string; price_cents: number }]),
    );
    const delivered = new Set(db.prepare("SELECT id FROM orders WHERE status = 'delivered'").pluck().all() as number[]);
    const items = db.prepare('SELECT order_id, product_id, quantity FROM order_items').all() as { order_id: number; product_id: number; quantity: number }[];
    db.close();
    const totals = new Map<string, { orders: Set<number>; revenue: number }>();
    for (const item of items) {
      if (!delivered.has(item.order_id)) continue;
      const p = products.get(item.product_id)!;
      const t = totals.get(p.category) ?? { orders: new Set(), revenue: 0 };
      t.orders.add(item.order_id);
      t.revenue += item.quantity * p.price_cents;
      totals.set(p.category, t);
    }
    const expected = [...totals].map(([category, t]) => [category, t.orders.size, t.revenue]).sort((a, b) => (b[2] as number) - (a[2] as number));
    expect(out.rows).toEqual(expected);
  });

  it('refuses every statement that could write or change the connection, and the data stays the same', async () => {
    const before = dump(dbFile);
    const statements: [string, string][] = [
      ["INSERT INTO customers (name, city, joined) VALUES ('Eve', 'Oslo', '2024-01-01')", 'a write statement'],
      ["UPDATE products SET price_cents = 1 WHERE category = 'Books'", 'a write statement'],
      ['DELETE FROM order_items', 'a write statement'],
      ['DROP TABLE orders', 'a write statement'],
      ['CREATE TABLE notes (x TEXT)', 'a write statement'],
      ['CREATE TEMP TABLE notes (x TEXT)', 'a write statement'],
      ['  /* hidden */ -- comment\n delete from orders', 'a write statement'],
      ["REPLACE INTO customers (id, name, city, joined) VALUES (1, 'X', 'Y', '2024-01-01')", 'a write statement'],
      ['WITH doomed AS (SELECT id FROM orders) DELETE FROM orders WHERE id IN (SELECT id FROM doomed)', 'a write statement'],
      ["VACUUM INTO '/tmp/copy.sqlite'", 'a write statement'],
      ["ATTACH DATABASE ':memory:' AS scratch", 'ATTACH'],
      ["; ATTACH ':memory:' AS scratch", 'ATTACH'],
      ['PRAGMA query_only=0', 'a PRAGMA that changes a setting'],
      ['PRAGMA main.query_only = OFF', 'a PRAGMA that changes a setting'],
      ['PRAGMA query_only(false)', 'a PRAGMA that changes a setting'],
      ['PRAGMA journal_mode = WAL', 'a PRAGMA that changes a setting'],
      ['BEGIN', 'a transaction statement'],
      ['SELECT 1; DELETE FROM orders', 'more than one statement'],
      ['SELECT count(*) FROM orders; SELECT count(*) FROM customers', 'more than one statement'],
    ];
    for (const [sql, what] of statements) {
      const r = await call('query', { sql });
      expect(r.isError, sql).toBe(true);
      expect(text(r).startsWith(`${REFUSED} ${what}`), `${sql} => ${text(r)}`).toBe(true);
    }
    const insert = await call('query', { sql: "INSERT INTO orders (customer_id, ordered_at, status) VALUES (1, '2025-01-01', 'pending')" });
    expect(text(insert)).toBe(`${REFUSED} a write statement`);

    expect(dump(dbFile)).toEqual(before);
    expect((await query('SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_items), (SELECT count(*) FROM customers)')).rows).toEqual([
      [300, before.order_items!.length, 50],
    ]);
    expect((await query('PRAGMA query_only')).rows).toEqual([[1]]);
    expect((await query('PRAGMA database_list')).rows.map((r) => r[1])).toEqual(['main']);
    // Reading PRAGMAs (bare, or introspection with an argument) is allowed, and a trailing semicolon is fine.
    expect((await query('PRAGMA table_info(orders);')).rows.map((r) => r[1])).toEqual(['id', 'customer_id', 'ordered_at', 'status']);
  });

  it("returns SQLite's message for SQL errors", async () => {
    const syntax = await call('query', { sql: 'SELEC * FROM orders' });
    expect(syntax.isError).toBe(true);
    expect(text(syntax)).toBe('near "SELEC": syntax error');
    const column = await call('query', { sql: 'SELECT nope FROM orders' });
    expect(text(column)).toBe('no such column: nope');
    const table = await call('query', { sql: 'SELECT * FROM invoices' });
    expect(text(table)).toBe('no such table: invoices');
    const empty = await call('query', { sql: '-- nothing here' });
    expect(empty.isError).toBe(true);
    expect(text(empty)).toMatch(/empty/);
  });

  it('stops a runaway query after 2000 ms, and the next queries succeed', async () => {
    const started = Date.now();
    const [runaway, meanwhile] = await Promise.all([call('query', { sql: INFINITE_CTE }), call('query', { sql: 'SELECT count(*) FROM customers' })]);
    const elapsed = Date.now() - started;
    expect(runaway.isError).toBe(true);
    expect(text(runaway)).toBe('Query timed out after 2000 ms');
    expect(elapsed).toBeGreaterThanOrEqual(1900);
    expect(elapsed).toBeLessThan(15_000);
    expect(meanwhile.isError, text(meanwhile)).toBeFalsy();
    expect((meanwhile.structuredContent as unknown as QueryOut).rows).toEqual([[50]]);
    expect((await query('SELECT count(*) FROM orders')).rows).toEqual([[300]]);
  });

  it('caps the rows returned and says when it did', async () => {
    const items = dump(dbFile).order_items!.length;
    const byDefault = await query('SELECT * FROM order_items ORDER BY order_id, product_id');
    expect(byDefault.row_count).toBe(200);
    expect(byDefault.rows).toHaveLength(200);
    expect(byDefault.truncated).toBe(true);
    expect(byDefault.columns).toEqual(['order_id', 'product_id', 'quantity']);

    const few = await query('SELECT id FROM orders ORDER BY id', 3);
    expect(few).toEqual({ columns: ['id'], rows: [[1], [2], [3]], row_count: 3, truncated: true });

    const exact = await query('SELECT id FROM customers', 50);
    expect(exact.row_count).toBe(50);
    expect(exact.truncated).toBe(false);

    const all = await query('SELECT * FROM order_items', 1000);
    expect(all.row_count).toBe(items);
    expect(all.truncated).toBe(false);

    const tooMany = await call('query', { sql: 'SELECT 1', limit: 1001 }).catch((err: Error) => ({
      isError: true,
      content: [{ type: 'text' as const, text: err.message }],
    }));
    expect(tooMany.isError).toBe(true);
  });

  it('returns every SQLite value as JSON', async () => {
    const out = await query(
      "SELECT NULL, 42, 1.5, 'text', 9223372036854775807, x'00FF', 1e999, length(printf('%.5000c', 'x')) AS n, printf('%.5000c', 'y') AS long",
    );
    expect(out.rows[0]!.slice(0, 8)).toEqual([null, 42, 1.5, 'text', '9223372036854775807', "X'00FF'", 'Inf', 5000]);
    expect(out.rows[0]![8]).toMatch(/^y{2000}… \(3000 more characters\)$/);
  });

  it('builds the same data every time', () => {
    const dirs = [mkdtempSync(join(tmpdir(), 'mcp-gym-shop-')), mkdtempSync(join(tmpdir(), 'mcp-gym-shop-'))];
    try {
      const [a, b] = dirs.map((dir) => {
        const file = join(dir, SHOP_DB_FILE);
        buildShopDatabase(file);
        return dump(file);
      });
      expect(a).toEqual(b);
      expect(a).toEqual(dump(dbFile));
      const data = generateShop();
      expect(a!.customers).toEqual(data.customers);
      expect(a!.products).toEqual(data.products);
      expect(a!.orders).toEqual(data.orders);
      expect(a!.order_items).toEqual(data.order_items);
      expect(new Set(data.products.map((p) => p.category)).size).toBe(5);
      expect(generateShop(7)).not.toEqual(data);
      // Orders come after the customer joined; every foreign key points at a row.
      const joined = new Map(data.customers.map((c) => [c.id, c.joined]));
      for (const o of data.orders) expect(o.ordered_at >= joined.get(o.customer_id)!).toBe(true);
      const db = new Database(join(dirs[0]!, SHOP_DB_FILE), { readonly: true });
      expect(db.pragma('foreign_key_check')).toEqual([]);
      db.close();
    } finally {
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('sql server without a data directory', () => {
  it('builds the database in a temp directory of its own and removes it on close', async () => {
    const ours = () => new Set(readdirSync(tmpdir()).filter((name) => name.startsWith('mcp-gym-sql-') && !name.startsWith('mcp-gym-sql-test-')));
    const before = ours();
    const served = serverFactory(sqlServer);
    const created = [...ours()].filter((name) => !before.has(name));
    expect(created).toHaveLength(1);
    const client = await connect(served.factory);
    const r = await client.callTool({ name: 'query', arguments: { sql: 'SELECT count(*) AS n FROM products' } });
    expect(r.structuredContent).toEqual({ columns: ['n'], rows: [[40]], row_count: 1, truncated: false });
    await client.close();
    await served.backend.close();
    expect(ours().has(created[0]!)).toBe(false);
  });
});

describe('sql server under load', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  async function until(what: string, ok: () => boolean, ms = 50_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!ok()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
      await sleep(20);
    }
  }
  async function start(settings: Parameters<typeof createSqlServer>[0]) {
    const served = serverFactory(createSqlServer(settings));
    const client = await connect(served.factory);
    const stats = () => (served.backend.episode('default') as SqlState).runner.stats();
    const call = (sql: string) => client.callTool({ name: 'query', arguments: { sql } });
    let closed: Promise<void> | undefined;
    /** Closes the backend (which answers the queries still running), then the client. */
    const close = () =>
      (closed ??= (async () => {
        await served.backend.close();
        await sleep(50);
        await client.close();
      })());
    return { call, stats, close };
  }
  /** The latency of a trivial query, in ms, checking its answer. */
  async function trivial(call: (sql: string) => Promise<CallToolResult>): Promise<number> {
    const t = performance.now();
    const r = await call('SELECT count(*) FROM customers');
    const ms = performance.now() - t;
    expect(r.isError, text(r)).toBeFalsy();
    expect((r.structuredContent as unknown as QueryOut).rows).toEqual([[50]]);
    return ms;
  }

  it('answers a trivial query within 100 ms while 8 runaway queries run (default pool, lowest priority for long queries)', async () => {
    // Long limits, so that a slow start of the processes on a loaded machine fails nothing.
    const { call, stats, close } = await start({ timeoutMs: 30_000, queueTimeoutMs: 60_000 });
    try {
      await trivial(call); // a first query starts the pool
      const runaways = Array.from({ length: 8 }, () => call(INFINITE_CTE));
      // All 8 running, past the long mark (their processes at the lowest CPU priority), and a spare ready.
      await until('8 runaway queries run as long queries with a spare process ready', () => {
        const s = stats();
        return s.busy === 8 && s.long === 8 && s.ready > s.busy;
      });
      const latencies: number[] = [];
      for (let i = 0; i < 5; i++) latencies.push(await trivial(call));
      const sorted = [...latencies].sort((a, b) => a - b);
      console.log(`trivial query under 8 runaway queries: ${latencies.map((ms) => ms.toFixed(1)).join(', ')} ms`);
      // The median of five, so that one stall of this shared 2-core machine does not fail the test.
      expect(sorted[2]).toBeLessThan(100);
      expect(stats()).toMatchObject({ busy: 8, long: 8, queued: 0 });
      const answers = Promise.all(runaways);
      await close();
      for (const r of await answers) expect(text(r)).toBe('The sql server is closed');
    } finally {
      await close();
    }
  });

  it('keeps the last process for short queries: a long query that would take it is stopped and answered busy', async () => {
    const { call, stats, close } = await start({ timeoutMs: 30_000, workers: 3 });
    try {
      const runaways = Array.from({ length: 4 }, () => call(INFINITE_CTE));
      // Which two become long first depends on which gets the CPU first (a query is long once it has
      // used longAfterMs of CPU), not on the order they were sent: any two of the four are stopped.
      const answered: CallToolResult[] = [];
      const pending = new Set(runaways);
      for (const r of runaways)
        void r.then((res) => {
          pending.delete(r);
          answered.push(res);
        });
      await until('two of the four runaway queries are answered', () => answered.length >= 2);
      for (const r of answered) {
        expect(r.isError).toBe(true);
        expect(text(r)).toMatch(/^the sql server is busy: 2 long queries are running already \(at most 2 at once/);
      }
      await until('a process is ready for short queries', () => stats().ready > stats().busy);
      expect(answered).toHaveLength(2);
      expect(stats()).toMatchObject({ busy: 2, long: 2, queued: 0 });
      expect(await trivial(call)).toBeLessThan(1000);
      const answers = Promise.all(pending);
      await close();
      const closedAnswers = await answers;
      expect(closedAnswers).toHaveLength(2);
      for (const r of closedAnswers) expect(text(r)).toBe('The sql server is closed');
    } finally {
      await close();
    }
  });

  it.skipIf(process.platform !== 'linux')(
    'a short query kept from the CPU past the long mark is not long (the CPU time it used counts, not the time it took)',
    async () => {
      const { call, stats, close } = await start({ timeoutMs: 30_000, longAfterMs: 50, workers: 2 });
      // This process's query processes (servers/sql-worker.js), read from /proc.
      const workers = () =>
        readdirSync('/proc')
          .filter((d) => /^\d+$/.test(d))
          .filter((pid) => {
            try {
              const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
              const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
              return ppid === process.pid && readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes('sql-worker.js');
            } catch {
              return false;
            }
          })
          .map(Number);
      let stopped: number[] = [];
      try {
        await trivial(call); // starts the pool
        await until('the query processes are ready', () => stats().ready === stats().processes && stats().busy === 0);
        const before = workers();
        expect(before.length).toBeGreaterThan(0);
        // Stopped processes get no CPU: like a machine whose cores other work holds, the query waits.
        stopped = before;
        for (const pid of stopped) process.kill(pid, 'SIGSTOP');
        const answer = trivial(call);
        await sleep(400);
        expect(stats()).toMatchObject({ busy: 1, long: 0 });
        for (const pid of stopped) process.kill(pid, 'SIGCONT');
        stopped = [];
        expect(await answer).toBeGreaterThan(400);
        // Not ended after its query, as a long query's process is: the same processes serve on.
        await trivial(call);
        expect(workers().sort()).toEqual([...before].sort());
      } finally {
        for (const pid of stopped) process.kill(pid, 'SIGCONT');
        await close();
      }
    },
  );

  it('answers busy a query that waited in the queue past its deadline, and serves the next one', async () => {
    const { call, stats, close } = await start({ timeoutMs: 2500, workers: 1, queueTimeoutMs: 400 });
    try {
      await call('SELECT 1'); // starts the one process (answered busy if it starts slower than 400 ms)
      await until('the process is ready', () => stats().ready === 1);
      const runaway = call(INFINITE_CTE);
      await until('the runaway query runs', () => stats().busy === 1);
      const t = performance.now();
      const waiting = await call('SELECT 1');
      const elapsed = performance.now() - t;
      expect(waiting.isError).toBe(true);
      const m = /^the sql server is busy: the query waited (\d+) ms for a free query process; try again later$/.exec(text(waiting));
      expect(m, text(waiting)).not.toBeNull();
      expect(Number(m![1])).toBeGreaterThanOrEqual(395);
      expect(elapsed).toBeLessThan(2000);
      expect(text(await runaway)).toBe('Query timed out after 2500 ms');
      // The runaway's process was killed; a new one starts, and the next query runs.
      await until('a new process is ready', () => stats().ready === 1);
      expect((await query(call, 'SELECT count(*) FROM products')).rows).toEqual([[40]]);
    } finally {
      await close();
    }
  });

  async function query(call: (sql: string) => Promise<CallToolResult>, sql: string): Promise<QueryOut> {
    const r = await call(sql);
    expect(r.isError, text(r)).toBeFalsy();
    return r.structuredContent as unknown as QueryOut;
  }
});
