/**
 * The `sql` server's pool of query processes (servers/sql-worker.js): each query in a child process,
 * with a timeout, a queue, and long queries at the lowest CPU priority (see QueryRunner).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ToolError } from './common.ts';

const WORKER_FILE = fileURLToPath(new URL('./sql-worker.js', import.meta.url));

type Cell = string | number | null;

export interface QueryResult {
  columns: string[];
  rows: Cell[][];
  row_count: number;
  truncated: boolean;
}

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
  /** The process's CPU milliseconds when the running query started (cpuMs; undefined where unknown). */
  cpuAtStart?: number;
}

export interface RunnerSettings {
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
 * The CPU milliseconds (user + system) a process has used, from /proc/<pid>/stat (Linux, whose
 * /proc counts in USER_HZ = 100 ticks a second); undefined where that cannot be read.
 */
export function cpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined || process.platform !== 'linux') return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // The fields after the command name (which may hold spaces and parentheses): state is field 3, utime 14, stime 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(rest[11]) + Number(rest[12]);
    return Number.isFinite(ticks) ? ticks * 10 : undefined;
  } catch {
    return undefined;
  }
}

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
export class QueryRunner {
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
    if (this.settings.longAfterMs < this.settings.timeoutMs) {
      slot.cpuAtStart = cpuMs(slot.child!.pid);
      slot.longTimer = setTimeout(() => this.markLong(slot, job), this.settings.longAfterMs);
    }
  }

  /**
   * The slot's query has run `longAfterMs`: lower its priority, or stop it if it would take the last
   * process. Where the process's CPU time can be read (Linux), a query is long once it has *used*
   * `longAfterMs` of CPU: on a machine whose cores are busy with other work (a model sampling
   * rollouts), a short query can wait longer than that for a core, and treating it as long would
   * lower its priority (so it waits longer still) and end its process after it (a new one to start
   * for every query). Until then the check comes back after the CPU time still missing.
   */
  private markLong(slot: Slot, job: Job): void {
    if (slot.job !== job || !slot.child) return;
    const now = slot.cpuAtStart === undefined ? undefined : cpuMs(slot.child.pid);
    if (now !== undefined) {
      const missing = this.settings.longAfterMs - (now - slot.cpuAtStart!);
      if (missing > 0) {
        slot.longTimer = setTimeout(() => this.markLong(slot, job), Math.max(10, missing));
        return;
      }
    }
    const long = this.slots.filter((s) => s.long).length;
    const limit = Math.max(1, this.slots.length - 1);
    if (long >= limit) {
      this.discard(slot);
      this.settle(
        job,
        new ToolError(
          `the sql server is busy: ${long} long queries are running already (at most ${limit} at once, so that short queries keep a process); try again later`,
        ),
      );
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
