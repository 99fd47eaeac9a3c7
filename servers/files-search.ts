/**
 * The `files` server's search workers: the pool of worker threads (servers/files-search-worker.js)
 * that read and match files under a deadline, so that no search can block the event loop.
 */
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ToolError } from './common.ts';

/** A search's worker is ended, and the call fails, after this long. */
export const SEARCH_TIMEOUT_MS = 5000;
/** A search stops between lines after this long and returns what it found (truncated=true). */
export const SEARCH_BUDGET_MS = 4500;
const WORKER_FILE = fileURLToPath(new URL('./files-search-worker.js', import.meta.url));

const fmt = (n: number) => n.toLocaleString('en-US');

export interface SearchJob {
  files: { abs: string; rel: string; size: number }[];
  query: string;
  regex: boolean;
  maxMatches: number;
  maxMatchText: number;
  maxReadBytes: number;
  budgetMs: number;
}

type Match = { path: string; line: number; text: string };
type SearchReply = { ok: true; matches: Match[]; truncated: boolean } | { ok: false; message: string };

/**
 * The worker threads that run searches: one per search in flight (at most `maxRunning`, the rest
 * wait), kept for the next search when it finished in time, terminated when it did not. Idle
 * workers do not keep the process alive.
 */
export class SearchWorkers {
  private readonly idle: Worker[] = [];
  private readonly all = new Set<Worker>();
  private readonly waiting: (() => void)[] = [];
  private running = 0;
  private closed = false;

  constructor(
    private readonly maxRunning = Math.max(2, Math.min(8, availableParallelism())),
    private readonly keepIdle = 2,
  ) {}

  async run(job: SearchJob, timeoutMs: number, signal: AbortSignal | undefined): Promise<SearchReply> {
    if (this.running >= this.maxRunning) {
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal?.removeEventListener('abort', cancel);
          resolve();
        };
        const cancel = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new ToolError('search: the call was cancelled'));
        };
        this.waiting.push(go);
        signal?.addEventListener('abort', cancel, { once: true });
      });
    }
    this.running++;
    try {
      return await this.exec(job, timeoutMs, signal);
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private spawn(): Worker {
    const worker = new Worker(WORKER_FILE, { resourceLimits: { maxOldGenerationSizeMb: 512 } });
    this.all.add(worker);
    worker.once('exit', () => {
      this.all.delete(worker);
      const i = this.idle.indexOf(worker);
      if (i >= 0) this.idle.splice(i, 1);
    });
    worker.on('error', () => {}); // reported to the job in flight, if any; an idle one just goes
    return worker;
  }

  private exec(job: SearchJob, timeoutMs: number, signal: AbortSignal | undefined): Promise<SearchReply> {
    if (this.closed) return Promise.reject(new ToolError('search: the server is shutting down'));
    if (signal?.aborted) return Promise.reject(new ToolError('search: the call was cancelled'));
    const worker = this.idle.pop() ?? this.spawn();
    worker.ref();
    return new Promise<SearchReply>((resolve, reject) => {
      let settled = false;
      const finish = (then: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
        then();
      };
      const end = () => void worker.terminate().catch(() => {});
      const onMessage = (reply: SearchReply) => finish(() => (this.putBack(worker), resolve(reply)));
      const onError = (err: Error) => finish(() => (end(), reject(new Error(`the search worker failed: ${err.message}`))));
      const onExit = (code: number) => finish(() => reject(new Error(`the search worker exited with code ${code}`)));
      const onAbort = () => finish(() => (end(), reject(new ToolError('search: the call was cancelled'))));
      const timer = setTimeout(
        () =>
          finish(() => {
            end();
            const why = job.regex ? ' (the pattern may backtrack catastrophically; try a simpler one, e.g. without nested quantifiers like (a+)+)' : '';
            reject(new ToolError(`search: the search took longer than ${fmt(SEARCH_TIMEOUT_MS)} ms${why}`));
          }),
        timeoutMs,
      );
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      worker.postMessage(job);
    });
  }

  private putBack(worker: Worker): void {
    if (this.closed || this.idle.length >= this.keepIdle) {
      void worker.terminate().catch(() => {});
      return;
    }
    worker.unref();
    this.idle.push(worker);
  }

  close(): void {
    this.closed = true;
    for (const w of this.all) void w.terminate().catch(() => {});
    this.all.clear();
    this.idle.length = 0;
  }
}
