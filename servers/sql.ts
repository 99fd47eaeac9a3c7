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
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { availableParallelism, setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { defineServer, defineTool, EpisodeStore, ToolError, type Backend, type ServerDefinition } from './common.ts';
import { buildShopDatabase, SHOP_DB_FILE } from './shop-data.ts';

export const DEFAULT_LIMIT = 200;
export const MAX_LIMIT = 1000;
export const DEFAULT_TIMEOUT_MS = 2000;

const WORKER_FILE = fileURLToPath(new URL('./sql-worker.js', import.meta.url));

type Cell = string | number | null;

export interface QueryResult {
  columns: string[];
  rows: Cell[][];
  row_count: number;
  truncated: boolean;
}

export interface TableInfo {
  name: string;
  columns: { name: string; type: string; primary_key: boolean; references?: { table: string; column: string } }[];
  row_count: number;
}

export interface SqlState {
  runner: QueryRunner;
  tables: TableInfo[];
}

// ---------------------------------------------------------------------------------------------
// Screening by the statement's first words (the child process checks again with SQLite's own flags)

export function refusal(what: string): string {
  return `Only read-only queries (SELECT) are allowed; got ${what}`;
}

const WRITE_WORDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'REPLACE', 'CREATE', 'DROP', 'ALTER', 'VACUUM', 'REINDEX', 'ANALYZE']);
const TRANSACTION_WORDS = new Set(['BEGIN', 'COMMIT', 'END', 'ROLLBACK', 'SAVEPOINT', 'RELEASE']);
/** PRAGMAs that may take an argument in parentheses because it only names what to describe. */
const INTROSPECTION_PRAGMAS = new Set(['table_info', 'table_xinfo', 'table_list', 'index_list', 'index_info', 'index_xinfo', 'foreign_key_list', 'foreign_key_check', 'integrity_check', 'quick_check']);

interface Token {
  text: string;
  quoted: boolean;
}

/** The first `max` tokens of `sql`, skipping whitespace, comments and leading semicolons. */
function leadingTokens(sql: string, max: number): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < sql.length && out.length < max) {
    const c = sql[i]!;
    if (/\s/.test(c) || (c === ';' && out.length === 0)) {
      i++;
    } else if (sql.startsWith('--', i)) {
      const end = sql.indexOf('\n', i);
      i = end < 0 ? sql.length : end + 1;
    } else if (sql.startsWith('/*', i)) {
      const end = sql.indexOf('*/', i + 2);
      i = end < 0 ? sql.length : end + 2;
    } else if (c === '"' || c === "'" || c === '`' || c === '[') {
      const close = c === '[' ? ']' : c;
      let text = '';
      let j = i + 1;
      for (; j < sql.length; j++) {
        if (sql[j] !== close) text += sql[j];
        else if (close !== ']' && sql[j + 1] === close) text += sql[++j];
        else break;
      }
      out.push({ text, quoted: true });
      i = j + 1;
    } else {
      const word = /^[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*/.exec(sql.slice(i, i + 200))?.[0] ?? c;
      out.push({ text: word, quoted: false });
      i += word.length;
    }
  }
  return out;
}

/** Throws a ToolError for statements that are not read-only queries, judged by their first words. */
export function screenSql(sql: string): void {
  const [first, ...rest] = leadingTokens(sql, 6);
  if (!first || first.quoted) return; // SQLite says what is wrong with it
  const word = first.text.toUpperCase();
  if (WRITE_WORDS.has(word)) throw new ToolError(refusal('a write statement'));
  if (word === 'ATTACH' || word === 'DETACH') throw new ToolError(refusal(`${word}, which changes the connection`));
  if (TRANSACTION_WORDS.has(word)) throw new ToolError(refusal(`a transaction statement (${word})`));
  if (word === 'PRAGMA') {
    const at = rest[1]?.text === '.' && !rest[1].quoted ? 2 : 0; // PRAGMA schema.name
    const name = rest[at];
    const next = rest[at + 1];
    if (!name || !next || next.quoted) return;
    if (next.text === '=' || (next.text === '(' && !INTROSPECTION_PRAGMAS.has(name.text.toLowerCase()))) {
      throw new ToolError(refusal('a PRAGMA that changes a setting (reading one, as in `PRAGMA name`, is allowed)'));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The pool of query processes

type WorkerReply =
  | { ready: true }
  | { id: number; ok: true; columns: string[]; rows: Cell[][]; truncated: boolean }
  | { id: number; ok: false; kind: 'refused' | 'sql'; message: string; exiting?: boolean };

interface Job {
  id: number;
  sql: string;
  limit: number;
  resolve(result: QueryResult): void;
  reject(err: Error): void;
  signal?: AbortSignal;
  onAbort?: () => void;
  /** When it entered the queue (performance.now()), and the timer that ends its wait. */
  queuedAt?: number;
  queueTimer?: ReturnType<typeof setTimeout>;
}

interface Slot {
  child: ChildProcess | null;
  ready: boolean;
  job: Job | null;
  /** The running query's timeout, and the timer that marks it long. */
  timer?: ReturnType<typeof setTimeout>;
  longTimer?: ReturnType<typeof setTimeout>;
  /** The running query has run past `longAfterMs`: its process runs at the lowest CPU priority. */
  long: boolean;
  /** Ends this process after a while idle (every idle process but one spare). */
  idleTimer?: ReturnType<typeof setTimeout>;
}

interface RunnerSettings {
  timeoutMs: number;
  workers: number;
  queueTimeoutMs: number;
  longAfterMs: number;
}

export interface RunnerStats {
  /** Processes started (ready or starting), ready ones, those running a query, those running a long one. */
  processes: number;
  ready: number;
  busy: number;
  long: number;
  /** Queries waiting for a process. */
  queued: number;
}

/** Idle processes beyond the one spare are ended after this long without a query. */
const IDLE_MS = 30_000;
/** The lowest CPU priority (nice 19; on Windows, the idle class). */
const LOWEST_PRIORITY = 19;

/**
 * Runs queries in up to `workers` child processes, one query each at a time, with a timeout each.
 *
 * What keeps a short query fast while long ones run (on any number of cores):
 * - a spare process is kept started (or a process running a query not long yet), so a query never
 *   waits for a process to start;
 * - a query that has run `longAfterMs` is long: its process drops to the lowest CPU priority, so
 *   the processes of short queries (and the server's own) get the cores first; as an unprivileged
 *   process cannot raise its priority back, that process is ended when its query is done;
 * - long queries hold at most `workers - 1` processes (with 2 or more): one that would take the
 *   last one is stopped and answered busy, so a process is always left for short queries;
 * - queries that find every process busy wait in a queue, first come first served, at most
 *   `queueTimeoutMs`; then they are answered busy.
 */
class QueryRunner {
  private readonly slots: Slot[];
  private readonly queue: Job[] = [];
  private readonly exits = new Set<Promise<void>>();
  private nextId = 1;
  private closed = false;
  /** False after a process failed to start, until one starts: no spare is started meanwhile. */
  private healthy = true;

  constructor(
    private readonly file: string,
    private readonly settings: RunnerSettings,
  ) {
    this.slots = Array.from({ length: settings.workers }, () => ({ child: null, ready: false, job: null, long: false }));
  }

  run(sql: string, limit: number, signal?: AbortSignal): Promise<QueryResult> {
    if (this.closed) return Promise.reject(new ToolError('The sql server is closed'));
    if (signal?.aborted) return Promise.reject(new ToolError('Query cancelled'));
    return new Promise<QueryResult>((resolve, reject) => {
      const job: Job = { id: this.nextId++, sql, limit, resolve, reject };
      if (signal) {
        job.signal = signal;
        job.onAbort = () => this.cancel(job);
        signal.addEventListener('abort', job.onAbort, { once: true });
      }
      const idle = this.slots.find((s) => s.child && s.ready && !s.job);
      if (idle && this.queue.length === 0) {
        this.start(idle, job);
      } else {
        job.queuedAt = performance.now();
        job.queueTimer = setTimeout(() => this.expire(job), this.settings.queueTimeoutMs);
        this.queue.push(job);
      }
      this.pump();
    });
  }

  /** What the pool holds now (for tests and diagnostics). */
  stats(): RunnerStats {
    const live = this.slots.filter((s) => s.child);
    return {
      processes: live.length,
      ready: live.filter((s) => s.ready).length,
      busy: live.filter((s) => s.job).length,
      long: live.filter((s) => s.long).length,
      queued: this.queue.length,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) this.settle(job, new ToolError('The sql server is closed'));
    for (const slot of this.slots) {
      const job = slot.job;
      this.discard(slot);
      if (job) this.settle(job, new ToolError('The sql server is closed'));
    }
    await Promise.all(this.exits);
  }

  private settle(job: Job, outcome: QueryResult | Error): void {
    clearTimeout(job.queueTimer);
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    if (outcome instanceof Error) job.reject(outcome);
    else job.resolve(outcome);
  }

  private cancel(job: Job): void {
    const queued = this.queue.indexOf(job);
    if (queued >= 0) this.queue.splice(queued, 1);
    const slot = this.slots.find((s) => s.job === job);
    if (slot) this.discard(slot);
    if (queued >= 0 || slot) this.settle(job, new ToolError('Query cancelled'));
    this.pump();
  }

  /** A queued job waited its whole deadline: answer it busy. */
  private expire(job: Job): void {
    const at = this.queue.indexOf(job);
    if (at < 0) return;
    this.queue.splice(at, 1);
    const waited = Math.round(performance.now() - (job.queuedAt ?? performance.now()));
    this.settle(job, new ToolError(`the sql server is busy: the query waited ${waited} ms for a free query process; try again later`));
  }

  /** Hands queued jobs to ready processes, starts processes for the jobs left and a spare. */
  private pump(): void {
    if (this.closed) return;
    for (const slot of this.slots) {
      if (this.queue.length === 0) break;
      if (slot.child && slot.ready && !slot.job) this.start(slot, this.queue.shift()!);
    }
    const starting = this.slots.filter((s) => s.child && !s.ready).length;
    const idle = this.slots.filter((s) => s.child && s.ready && !s.job);
    const short = this.slots.filter((s) => s.job && !s.long).length;
    // A process for each queued job, and a spare unless one is idle, starting or about to be free
    // (running a query that is not long yet). The spare is not started the moment a short query
    // takes the last idle process, so that it does not take the cores from that query.
    const forQueue = Math.max(0, this.queue.length - starting - idle.length);
    const free = idle.length + starting + forQueue + short - this.queue.length;
    let wanted = forQueue + (this.healthy && free < 1 ? 1 : 0);
    for (const slot of this.slots) {
      if (wanted <= 0) break;
      if (!slot.child) {
        this.spawn(slot);
        wanted--;
      }
    }
    // One idle process is the spare; the others end after a while without a query.
    idle.forEach((slot, i) => {
      if (i === 0) {
        clearTimeout(slot.idleTimer);
        slot.idleTimer = undefined;
      } else if (!slot.idleTimer) {
        slot.idleTimer = setTimeout(() => {
          slot.idleTimer = undefined;
          if (slot.child && slot.ready && !slot.job) this.discard(slot);
        }, IDLE_MS);
        slot.idleTimer.unref();
      }
    });
    // Busy processes, and those starting for queued jobs, keep the event loop alive (a caller awaits
    // them); idle ones and the spare do not.
    for (const slot of this.slots) {
      if (!slot.child) continue;
      if (slot.job || (!slot.ready && this.queue.length > 0)) {
        slot.child.ref();
        slot.child.channel?.ref();
      } else {
        slot.child.unref();
        slot.child.channel?.unref();
      }
    }
  }

  private spawn(slot: Slot): void {
    const child = fork(WORKER_FILE, [this.file], { execArgv: [], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
    slot.child = child;
    slot.ready = false;
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    this.exits.add(exited);
    void exited.then(() => this.exits.delete(exited));
    child.on('message', (msg: WorkerReply) => {
      if (slot.child === child) this.receive(slot, msg);
    });
    child.once('exit', (code, signal) => this.lost(slot, child, `exit code ${code ?? signal}`));
    child.once('error', (err) => this.lost(slot, child, err.message));
  }

  private start(slot: Slot, job: Job): void {
    clearTimeout(job.queueTimer);
    clearTimeout(slot.idleTimer);
    slot.idleTimer = undefined;
    slot.job = job;
    slot.long = false;
    slot.child!.send({ id: job.id, sql: job.sql, limit: job.limit, timeoutMs: this.settings.timeoutMs });
    slot.timer = setTimeout(() => {
      this.discard(slot);
      this.settle(job, new ToolError(`Query timed out after ${this.settings.timeoutMs} ms`));
      this.pump();
    }, this.settings.timeoutMs);
    if (this.settings.longAfterMs < this.settings.timeoutMs) slot.longTimer = setTimeout(() => this.markLong(slot, job), this.settings.longAfterMs);
  }

  /** The slot's query has run `longAfterMs`: lower its priority, or stop it if it would take the last process. */
  private markLong(slot: Slot, job: Job): void {
    if (slot.job !== job || !slot.child) return;
    const long = this.slots.filter((s) => s.long).length;
    const limit = Math.max(1, this.slots.length - 1);
    if (long >= limit) {
      this.discard(slot);
      this.settle(job, new ToolError(`the sql server is busy: ${long} long queries are running already (at most ${limit} at once, so that short queries keep a process); try again later`));
      this.pump();
      return;
    }
    slot.long = true;
    try {
      if (slot.child.pid !== undefined) setPriority(slot.child.pid, LOWEST_PRIORITY);
    } catch {
      // Not allowed here: the query still runs, at its usual priority.
    }
    this.pump(); // a spare, if none is left for short queries
  }

  private receive(slot: Slot, msg: WorkerReply): void {
    if ('ready' in msg) {
      slot.ready = true;
      this.healthy = true;
      this.pump();
      return;
    }
    const job = slot.job;
    if (!job || msg.id !== job.id) return;
    clearTimeout(slot.timer);
    clearTimeout(slot.longTimer);
    slot.job = null;
    if (msg.ok) this.settle(job, { columns: msg.columns, rows: msg.rows, row_count: msg.rows.length, truncated: msg.truncated });
    else this.settle(job, new ToolError(msg.message));
    // A process at the lowest priority cannot get its priority back: end it (the spare takes over).
    if ((!msg.ok && msg.exiting) || slot.long) this.discard(slot);
    this.pump();
  }

  /** A process ended or failed on its own: fail its job (and, if it never started, the queue). */
  private lost(slot: Slot, child: ChildProcess, reason: string): void {
    if (slot.child !== child) return;
    const { job, ready } = slot;
    this.discard(slot);
    if (job) this.settle(job, new Error(`the query process stopped unexpectedly (${reason})`));
    if (!ready) {
      this.healthy = false;
      for (const queued of this.queue.splice(0)) this.settle(queued, new Error(`the query process failed to start (${reason})`));
    }
    this.pump();
  }

  /** Kills the slot's process (if any) and empties the slot; its job is the caller's to settle. */
  private discard(slot: Slot): void {
    clearTimeout(slot.timer);
    clearTimeout(slot.longTimer);
    clearTimeout(slot.idleTimer);
    slot.idleTimer = undefined;
    const child = slot.child;
    slot.child = null;
    slot.ready = false;
    slot.job = null;
    slot.long = false;
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      child.ref(); // so that close() sees it exit
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Schema description (computed once: the data never changes)

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

function describeTables(file: string): TableInfo[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    db.pragma('query_only = ON');
    const names = db.prepare<[], { name: string }>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY rowid").all();
    return names.map(({ name }) => {
      const q = quoteIdent(name);
      const columns = db.pragma(`table_info(${q})`) as { name: string; type: string; pk: number }[];
      const keys = db.pragma(`foreign_key_list(${q})`) as { table: string; from: string; to: string | null }[];
      const row_count = db.prepare<[], { n: number }>(`SELECT count(*) AS n FROM ${q}`).get()?.n ?? 0;
      return {
        name,
        columns: columns.map((c) => {
          const key = keys.find((k) => k.from === c.name);
          return { name: c.name, type: c.type, primary_key: c.pk > 0, ...(key ? { references: { table: key.table, column: key.to ?? 'rowid' } } : {}) };
        }),
        row_count,
      };
    });
  } finally {
    db.close();
  }
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
    description: 'Describe the tables of the shop database: columns (name, type, primary key, foreign key reference) and row counts. Give `table` to describe only that one.',
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
    isolation: 'none needed: the shop database is read-only and every statement that could change it or the connection is refused, so every episode sees the same data',
    tools: tools as never,
    examples: [
      { tool: 'describe_schema', arguments: { table: 'orders' } },
      { tool: 'query', arguments: { sql: 'SELECT p.category, SUM(oi.quantity) AS units FROM order_items oi JOIN products p ON p.id = oi.product_id GROUP BY p.category ORDER BY units DESC' } },
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
