/**
 * The child process that runs the `sql` server's queries (started by servers/sql-runner.ts; not a
 * module to import). It opens the database read-only and answers one query at a time.
 *
 * Why a process and not a worker thread: better-sqlite3 is synchronous, and a thread stuck in
 * SQLite's C code (an endless recursive CTE) ignores `worker.terminate()`, so the thread and its
 * CPU would be lost for good; a process can always be killed. It is plain JavaScript so that it
 * starts under bare `node`, whatever loader (tsx, vitest) the parent runs under.
 *
 * A watchdog thread kills this process when a query runs past its deadline plus a grace period,
 * so that even if the parent dies mid-query no orphan spins forever. When a query runs long, the
 * parent drops this process's main thread to the lowest CPU priority (the watchdog thread keeps
 * its own) and ends the process once the query is done.
 *
 * Protocol (IPC messages): once the database is open the child sends `{ ready: true }`; for each
 * `{ id, sql, limit, timeoutMs }` it replies `{ id, ok: true, columns, rows, truncated }` or
 * `{ id, ok: false, kind: 'refused' | 'sql', message, exiting? }` (`exiting`: the child is about to
 * exit because the statement changed the connection; the parent must not reuse it).
 */
import { isMainThread, Worker, workerData } from 'node:worker_threads';

/** The watchdog kills the process this long after a query's own timeout. */
const GRACE_MS = 1000;
/** Longer strings (and blobs, in hex) are cut to this many characters. */
const MAX_CELL = 2000;
/** Stop adding rows (and set `truncated`) once a result holds about this many characters. */
const MAX_RESULT_CHARS = 500_000;

const REFUSED = 'Only read-only queries (SELECT) are allowed; got';

if (isMainThread) await main();
else watchdog(workerData);

function watchdog(buffer) {
  const deadline = new BigInt64Array(buffer);
  setInterval(() => {
    const at = Atomics.load(deadline, 0);
    if (at !== 0n && BigInt(Date.now()) > at) process.kill(process.pid, 'SIGKILL');
  }, 100);
}

async function main() {
  const send = process.send?.bind(process);
  if (!send) throw new Error('servers/sql-worker.js is started by servers/sql.ts over IPC');
  const file = process.argv[2];
  if (!file) throw new Error('usage: sql-worker.js DATABASE_FILE');
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(file, { readonly: true, fileMustExist: true });
  db.pragma('query_only = ON');
  const connectionState = () => JSON.stringify([db.pragma('query_only', { simple: true }), db.pragma('database_list')]);
  const baseline = connectionState();

  const deadline = new BigInt64Array(new SharedArrayBuffer(8));
  new Worker(new URL(import.meta.url), { workerData: deadline.buffer, execArgv: [] }).unref();

  process.on('disconnect', () => process.exit(0));
  process.on('message', (msg) => {
    Atomics.store(deadline, 0, BigInt(Date.now() + msg.timeoutMs + GRACE_MS));
    let reply;
    try {
      reply = { id: msg.id, ...runQuery(db, msg.sql, msg.limit) };
    } catch (err) {
      reply = { id: msg.id, ok: false, kind: 'sql', message: err instanceof Error ? err.message : String(err) };
    } finally {
      Atomics.store(deadline, 0, 0n);
    }
    if (connectionState() !== baseline) {
      // Unreachable unless servers/sql-screen.ts's screening misses a statement: never reuse this connection.
      send({ id: msg.id, ok: false, kind: 'refused', message: `${REFUSED} a statement that changes the connection's settings`, exiting: true }, () =>
        process.exit(1),
      );
      return;
    }
    send(reply);
  });
  send({ ready: true });
}

function runQuery(db, sql, limit) {
  let stmt;
  try {
    stmt = db.prepare(sql);
  } catch (err) {
    if (err instanceof RangeError && /more than one statement/.test(err.message)) {
      return { ok: false, kind: 'refused', message: `${REFUSED} more than one statement (send one statement per query)` };
    }
    if (err instanceof RangeError && /no statements/.test(err.message)) return { ok: false, kind: 'sql', message: 'The query is empty (no SQL statement)' };
    throw err;
  }
  if (!stmt.readonly) return { ok: false, kind: 'refused', message: `${REFUSED} a write statement` };
  // Statements that return no rows yet count as read-only are ATTACH/DETACH, BEGIN/COMMIT and setting PRAGMAs.
  if (!stmt.reader) return { ok: false, kind: 'refused', message: `${REFUSED} a statement that returns no rows` };
  stmt.raw(true);
  stmt.safeIntegers(true);
  const columns = stmt.columns().map((c) => c.name);
  const rows = [];
  let chars = 0;
  let truncated = false;
  for (const raw of stmt.iterate()) {
    if (rows.length >= limit || chars > MAX_RESULT_CHARS) {
      truncated = true;
      break;
    }
    const row = raw.map(cell);
    for (const v of row) chars += typeof v === 'string' ? v.length + 2 : 8;
    rows.push(row);
  }
  return { ok: true, columns, rows, truncated };
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A SQLite value as JSON: integers beyond 2^53 and non-finite reals become strings, blobs hex. */
function cell(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : v.toString();
  if (typeof v === 'number') return Number.isFinite(v) ? v : v > 0 ? 'Inf' : '-Inf';
  if (typeof v === 'string') return clip(v, v.length);
  if (Buffer.isBuffer(v)) return clip(`X'${v.subarray(0, MAX_CELL).toString('hex').toUpperCase()}'`, 2 * v.length + 3);
  return String(v);
}

function clip(text, fullLength) {
  return fullLength > MAX_CELL ? `${text.slice(0, MAX_CELL)}… (${fullLength - MAX_CELL} more characters)` : text;
}
