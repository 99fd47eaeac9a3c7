/**
 * BFCL's verdicts: a client of `python -m mcp_gym_bfcl grade`, one long-lived Python process
 * (BFCL's checker modules take seconds to import) that answers each entry's output with BFCL's own
 * per-entry evaluation (bfcl/mcp_gym_bfcl/grade.py). One per process, started on first use; it does
 * not keep Node alive when idle, and a crash fails the requests in flight (the next one restarts it).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { bfclEnv, bfclPython } from './python.ts';

export interface BfclVerdict {
  valid: boolean;
  /** BFCL's error type (`ast_decoder:decoder_failed`, `multi_turn:instance_state_mismatch`, ...), when not valid. */
  error_type: string | null;
  error: unknown;
}

/** BFCL's leaderboard tables (data_overall, data_non_live, data_live, data_multi_turn, ...), rows as BFCL's CSV gives them. */
export type BfclTables = Record<string, Record<string, string>[]>;

interface Pending {
  resolve(value: Record<string, unknown>): void;
  reject(err: Error): void;
}

export class BfclGrader {
  private child?: ChildProcessWithoutNullStreams;
  private ready?: Promise<void>;
  private readonly pending = new Map<number, Pending>();
  private next = 1;
  private stderrTail = '';

  private start(): Promise<void> {
    if (this.ready) return this.ready;
    const child = spawn(bfclPython(), ['-m', 'mcp_gym_bfcl', 'grade'], { env: bfclEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    this.stderrTail = '';
    // A write to a process that just died (EPIPE) is answered by its exit, which fails what is in flight.
    child.stdin.on('error', () => {});
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => (this.stderrTail = (this.stderrTail + d).slice(-4000)));
    this.ready = new Promise<void>((resolve, reject) => {
      const lines = createInterface({ input: child.stdout });
      let started = false;
      lines.on('line', (line) => {
        let msg: Record<string, unknown>;
        try {
          msg = JSON.parse(line) as Record<string, unknown>;
        } catch {
          return; // not ours (a stray print)
        }
        if (!started && msg.ready) {
          started = true;
          this.idle();
          resolve();
          return;
        }
        const p = this.pending.get(msg.id as number);
        if (!p) return;
        this.pending.delete(msg.id as number);
        this.idle();
        if (typeof msg.service_error === 'string') p.reject(new Error(`BFCL's grader: ${msg.service_error}`));
        else p.resolve(msg);
      });
      child.on('error', (err) => {
        this.reset();
        reject(new Error(`BFCL's grader could not start: ${err.message}`));
      });
      child.on('exit', (code, signal) => {
        const why = new Error(`BFCL's grader exited (${signal ?? `code ${code}`}): ${this.stderrTail.trim().split('\n').slice(-3).join(' ')}`);
        this.reset();
        if (!started) reject(why);
        for (const p of this.pending.values()) p.reject(why);
        this.pending.clear();
      });
    });
    this.ready.catch(() => undefined);
    return this.ready;
  }

  private reset(): void {
    this.child = undefined;
    this.ready = undefined;
  }

  /** Node may exit while nothing is asked of the grader. */
  private idle(): void {
    const c = this.child;
    if (!c) return;
    const busy = this.pending.size > 0;
    for (const h of [c, c.stdin, c.stdout, c.stderr] as unknown as { ref?(): void; unref?(): void }[]) {
      if (busy) h.ref?.();
      else h.unref?.();
    }
  }

  private async request(body: Record<string, unknown>): Promise<Record<string, unknown>> {
    await this.start();
    const id = this.next++;
    const child = this.child!;
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => this.pending.set(id, { resolve, reject }));
    this.idle();
    child.stdin.write(JSON.stringify({ ...body, id }) + '\n');
    return answer;
  }

  /** BFCL's verdict on an entry's output (`result` in BFCL's result-file format for a function-calling model). */
  async grade(category: string, entry: string, result: unknown): Promise<BfclVerdict> {
    const r = await this.request({ op: 'grade', category, entry, result });
    return { valid: r.valid === true, error_type: (r.error_type as string | null) ?? null, error: r.error };
  }

  /** BFCL's leaderboard figures from per-category accuracies, computed by BFCL's generate_leaderboard_csv. */
  async summary(scores: Record<string, { accuracy: number; total_count: number }>): Promise<BfclTables> {
    const r = await this.request({ op: 'summary', scores });
    return r.tables as BfclTables;
  }

  close(): void {
    this.child?.stdin.end();
    this.child?.kill();
    this.reset();
  }
}

let shared: BfclGrader | undefined;

/** The process's grader. */
export function bfclGrader(): BfclGrader {
  return (shared ??= new BfclGrader());
}
