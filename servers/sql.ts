/**
 * `sql`: read-only SQL (SQLite) over a bundled data set of a small shop (servers/shop-data.ts).
 *
 * The backend builds the database file once, then every query runs in a child process
 * (servers/sql-worker.js) that opens it read-only (`readonly: true` and `PRAGMA query_only = ON`).
 * Writes are refused twice: here, by the statement's first words (writes, ATTACH/DETACH,
 * transactions, PRAGMAs that set something), and in the child, by SQLite itself (a statement must
 * be read-only and return rows; one statement per query). A query that runs past its timeout gets
 * its process killed and replaced: better-sqlite3 is synchronous, and a worker thread stuck in
 * SQLite's C code cannot be terminated, so the runner is a pool of processes. Long queries cannot
 * starve short ones: they drop to the lowest CPU priority and never hold the pool's last process
 * (see QueryRunner).
 *
 * This file holds the tools and wires the server together: the screening is sql-screen.ts, the
 * pool of query processes sql-runner.ts, the schema description sql-schema.ts.
 */
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineServer, defineTool, EpisodeStore, ToolError, type Backend, type ServerDefinition } from './common.ts';
import { buildShopDatabase, SHOP_DB_FILE } from './shop-data.ts';
import { QueryRunner, type RunnerSettings } from './sql-runner.ts';
import { describeTables, type TableInfo } from './sql-schema.ts';
import { screenSql } from './sql-screen.ts';

export { refusal, screenSql } from './sql-screen.ts';
export type { QueryResult, RunnerStats } from './sql-runner.ts';
export type { TableInfo } from './sql-schema.ts';

export const DEFAULT_LIMIT = 200;
export const MAX_LIMIT = 1000;
export const DEFAULT_TIMEOUT_MS = 2000;

export interface SqlState {
  runner: QueryRunner;
  tables: TableInfo[];
}

// ---------------------------------------------------------------------------------------------
// Tools

const Cell = z.union([z.string(), z.number(), z.null()]);
const Table = z.object({
  name: z.string(),
  columns: z.array(
    z.object({
      name: z.string(),
      type: z.string(),
      primary_key: z.boolean(),
      references: z.object({ table: z.string(), column: z.string() }).optional().describe('The column this foreign key points to'),
    }),
  ),
  row_count: z.number().int(),
});

const tools = [
  defineTool({
    name: 'describe_schema',
    description:
      'Describe the tables of the shop database: columns (name, type, primary key, foreign key reference) and row counts. Give `table` to describe only that one.',
    input: z.object({ table: z.string().min(1).max(200).optional().describe('Describe only this table') }),
    output: z.object({ tables: z.array(Table) }),
    readOnly: true,
    run: ({ table }, { tables }: SqlState) => {
      if (table === undefined) return { tables };
      const found = tables.find((t) => t.name.toLowerCase() === table.toLowerCase());
      if (!found) throw new ToolError(`Unknown table '${table}'. Tables: ${tables.map((t) => t.name).join(', ')}`);
      return { tables: [found] };
    },
  }),
  defineTool({
    name: 'query',
    description:
      `Run one read-only SQL query (SQLite dialect: SELECT, WITH, VALUES, EXPLAIN, or a PRAGMA that reads) on the shop database and return its rows. ` +
      `Writes, ATTACH, transactions and several statements in one string are refused. At most \`limit\` rows come back (default ${DEFAULT_LIMIT}, max ${MAX_LIMIT}); ` +
      `truncated=true means there were more. A query is stopped after ${DEFAULT_TIMEOUT_MS} ms by default. Strings longer than 2000 characters are cut.`,
    input: z.object({
      sql: z.string().min(1, 'sql must not be empty').max(100_000, 'sql must be at most 100,000 characters').describe('One SQLite statement, e.g. SELECT ...'),
      limit: z.number().int().min(1).max(MAX_LIMIT).default(DEFAULT_LIMIT).describe('At most this many rows'),
    }),
    output: z.object({
      columns: z.array(z.string()),
      rows: z.array(z.array(Cell)).describe('One array of values per row, in the order of `columns`'),
      row_count: z.number().int().describe('The number of rows returned'),
      truncated: z.boolean().describe('True when the query had more rows than were returned'),
    }),
    readOnly: true,
    run: async ({ sql, limit }, { runner }: SqlState, signal) => {
      screenSql(sql);
      return runner.run(sql, limit, signal);
    },
  }),
];

export interface SqlSettings {
  /** Stop a query after this long. Default 2000 ms. */
  timeoutMs?: number;
  /** At most this many queries run at once, each in its own process. Default: twice the CPUs, from 16 to 32. */
  workers?: number;
  /** A query that finds every process busy waits at most this long, then is answered busy. Default: `timeoutMs`. */
  queueTimeoutMs?: number;
  /**
   * A query running this long is long: its process drops to the lowest CPU priority, and long queries
   * may hold at most `workers - 1` processes (the one left is for short queries). Default 50 ms.
   */
  longAfterMs?: number;
}

export const DEFAULT_LONG_AFTER_MS = 50;

/** The `sql` server with its own timeout and pool size (`sqlServer` uses the defaults). */
export function createSqlServer(settings: SqlSettings = {}): ServerDefinition<SqlState> {
  const timeoutMs = settings.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const runner: RunnerSettings = {
    timeoutMs,
    workers: Math.max(1, Math.floor(settings.workers ?? Math.min(32, Math.max(16, 2 * availableParallelism())))),
    queueTimeoutMs: settings.queueTimeoutMs ?? timeoutMs,
    longAfterMs: settings.longAfterMs ?? DEFAULT_LONG_AFTER_MS,
  };
  return defineServer<SqlState>({
    name: 'sql',
    version: '0.1.0',
    description: 'Read-only SQL (SQLite) over a small shop database: customers, products, orders, order_items. Tools: describe_schema, query.',
    isolation:
      'none needed: the shop database is read-only and every statement that could change it or the connection is refused, so every episode sees the same data',
    tools: tools as never,
    examples: [
      { tool: 'describe_schema', arguments: { table: 'orders' } },
      {
        tool: 'query',
        arguments: {
          sql: 'SELECT p.category, SUM(oi.quantity) AS units FROM order_items oi JOIN products p ON p.id = oi.product_id GROUP BY p.category ORDER BY units DESC',
        },
      },
    ],
    backend(options): Backend<SqlState> {
      const ownDir = options.dataDir === undefined;
      const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'mcp-gym-sql-'));
      let state: SqlState;
      try {
        mkdirSync(dir, { recursive: true });
        const file = join(dir, SHOP_DB_FILE);
        buildShopDatabase(file);
        state = { runner: new QueryRunner(file, runner), tables: describeTables(file) };
      } catch (err) {
        if (ownDir) rmSync(dir, { recursive: true, force: true });
        throw err;
      }
      const store = new EpisodeStore<SqlState>(() => state, undefined, options);
      return {
        episode: (id) => store.get(id),
        release: (id) => store.release(id),
        async close() {
          store.clear();
          await state.runner.close();
          if (ownDir) rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  });
}

export const sqlServer = createSqlServer();
