/**
 * A stdio client transport that owns its child process: it runs the server in a process group of
 * its own, keeps the first and last part of its stderr for error messages, reports how it exited,
 * and on close ends the whole process tree (the SDK's transport signals only the direct child).
 *
 * Its reading of stdout is bounded: a line longer than `maxMessageBytes` is never held whole. It
 * is skipped to its end (and, when it is the response to a request, that request gets an error
 * response saying so: see limits.ts); a line that goes on past `maxSkipBytes` is taken for one
 * that will never end, and the server is killed (the client restarts it for the next call).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { deserializeMessage, serializeMessage } from '@modelcontextprotocol/client';
import type { JSONRPCMessage, Transport } from '@modelcontextprotocol/client';
import { descendants, isAlive, killTree } from './process-tree.ts';
import { DEFAULT_MAX_RESULT_BYTES, responseIdOf, tooLargeMessage, tooLargeResponse, type TooLarge } from './limits.ts';

export interface StdioTransportOptions {
  command: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** Characters kept of the start of the server's stderr, for error messages. Default 2048. */
  stderrHead?: number;
  /** Characters kept of the end of the server's stderr, for error messages. Default 2048. */
  stderrTail?: number;
  /** Also copy the server's stderr to ours. Default false. */
  forwardStderr?: boolean;
  /** The longest line (one JSON-RPC message) read from stdout, bytes. Default 10 MiB. */
  maxMessageBytes?: number;
  /** Kill the server when one line goes on past this many bytes. Default 8 × maxMessageBytes. */
  maxSkipBytes?: number;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Bytes of an oversized line kept to find its id. */
const PEEK = 512;

/**
 * Splits stdout into lines without ever holding one longer than `max` bytes: the chunks of the
 * line being read are kept in a list (joined once, when it ends), and a line that grows past the
 * limit is dropped and skipped to its end, only its first and last bytes kept.
 */
export class LineReader {
  private chunks: Buffer[] = [];
  private size = 0;
  private skip?: { bytes: number; head: Buffer; tail: Buffer };

  constructor(
    private readonly max: number,
    private readonly maxSkip: number,
    private readonly onLine: (line: Buffer) => void,
    private readonly onOversized: (bytes: number, head: Buffer, tail: Buffer) => void,
    private readonly onEndless: (bytes: number) => void,
  ) {}

  push(chunk: Buffer): void {
    let pos = 0;
    while (pos < chunk.length) {
      const nl = chunk.indexOf(0x0a, pos);
      const end = nl === -1 ? chunk.length : nl;
      const piece = chunk.subarray(pos, end);
      if (this.skip) {
        this.skip.bytes += piece.length;
        if (this.skip.head.length < PEEK) this.skip.head = firstBytes([this.skip.head, piece]);
        this.skip.tail = lastBytes(this.skip.tail, piece);
      } else if (this.size + piece.length > this.max) {
        const parts = [...this.chunks, piece];
        this.skip = { bytes: this.size + piece.length, head: firstBytes(parts), tail: parts.reduce(lastBytes, Buffer.alloc(0)) };
        this.chunks = [];
        this.size = 0;
      } else if (piece.length > 0) {
        this.chunks.push(piece);
        this.size += piece.length;
      }
      if (nl === -1) {
        if (this.skip && this.skip.bytes > this.maxSkip) {
          const bytes = this.skip.bytes;
          this.skip = undefined;
          this.onEndless(bytes);
        }
        return;
      }
      pos = nl + 1;
      if (this.skip) {
        const { bytes, head, tail } = this.skip;
        this.skip = undefined;
        this.onOversized(bytes, head, tail);
      } else {
        const line = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
        this.chunks = [];
        this.size = 0;
        this.onLine(line);
      }
    }
  }

  clear(): void {
    this.chunks = [];
    this.size = 0;
    this.skip = undefined;
  }
}

/** The first PEEK bytes of `parts` joined. */
function firstBytes(parts: Buffer[]): Buffer {
  const kept: Buffer[] = [];
  let n = 0;
  for (const p of parts) {
    if (n >= PEEK) break;
    kept.push(p.subarray(0, PEEK - n));
    n += Math.min(p.length, PEEK - n);
  }
  return Buffer.concat(kept);
}

/** The last PEEK bytes of `a` followed by `b`. */
function lastBytes(a: Buffer, b: Buffer): Buffer {
  if (b.length >= PEEK) return Buffer.from(b.subarray(b.length - PEEK));
  return Buffer.concat([a.subarray(Math.max(0, a.length - (PEEK - b.length))), b]);
}

export class ProcessStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private child?: ChildProcessWithoutNullStreams;
  private readonly reader: LineReader;
  private readonly maxMessageBytes: number;
  private stderrStart = '';
  private stderrEnd = '';
  private stderrChars = 0;
  private closing = false;
  private closedFired = false;
  exit?: ExitInfo;
  /** Set when the transport killed the server because a line of its output never ended. */
  endless?: TooLarge;

  constructor(private readonly options: StdioTransportOptions) {
    const max = options.maxMessageBytes ?? DEFAULT_MAX_RESULT_BYTES;
    this.maxMessageBytes = max;
    this.reader = new LineReader(
      max,
      options.maxSkipBytes ?? 8 * max,
      (line) => this.receive(line),
      (bytes, head, tail) => this.oversized(bytes, head, tail),
      (bytes) => this.kill({ size: bytes, exact: false, limit: max }),
    );
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The last characters the server wrote to stderr. */
  get stderrTail(): string {
    return (this.stderrCut ? this.stderrEnd : this.stderrStart + this.stderrEnd).slice(-(this.options.stderrTail ?? 2048));
  }

  /** Characters the server wrote to stderr in all. */
  get stderrLength(): number {
    return this.stderrChars;
  }

  /** Whether the middle of the server's stderr was dropped (it was longer than the parts kept). */
  get stderrCut(): boolean {
    return this.stderrChars > this.stderrStart.length + this.stderrEnd.length;
  }

  /**
   * What the server wrote to stderr, for an error message: all of it when short, otherwise its
   * first and its last part with `...` between (the first line of an error is often the one that
   * says what went wrong).
   */
  get stderrText(): string {
    return this.stderrCut ? `${this.stderrStart.trimEnd()}\n...\n${this.stderrEnd.trimStart()}` : this.stderrStart + this.stderrEnd;
  }

  start(): Promise<void> {
    if (this.child) throw new Error('ProcessStdioTransport already started');
    return new Promise((resolve, reject) => {
      const child = spawn(this.options.command, this.options.args ?? [], {
        cwd: this.options.cwd,
        env: { ...process.env, ...this.options.env },
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: true, // its own process group, so the whole group can be signalled
        windowsHide: true,
      });
      this.child = child;
      const headMax = this.options.stderrHead ?? 2048;
      const tailMax = this.options.stderrTail ?? 2048;
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk: string) => {
        if (this.options.forwardStderr) process.stderr.write(chunk);
        this.stderrChars += chunk.length;
        if (this.stderrStart.length < headMax) {
          const take = headMax - this.stderrStart.length;
          this.stderrStart += chunk.slice(0, take);
          chunk = chunk.slice(take);
        }
        if (chunk.length > 0) this.stderrEnd = (this.stderrEnd + chunk).slice(-tailMax);
      });
      child.stdout.on('data', (chunk: Buffer) => {
        if (this.endless) return; // being killed: the rest is noise
        try {
          this.reader.push(chunk);
        } catch (err) {
          // Whatever happens in a handler, no output of the server may throw out of here.
          this.onerror?.(err instanceof Error ? err : new Error(String(err)));
        }
      });
      child.stdin.on('error', (err) => this.onerror?.(err));
      child.once('error', (err) => {
        this.exit ??= { code: null, signal: null };
        reject(err);
        this.onerror?.(err);
        this.fireClose();
      });
      child.once('spawn', () => resolve());
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        this.fireClose();
      });
    });
  }

  private receive(line: Buffer): void {
    const text = line.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(text);
    } catch (err) {
      if (err instanceof SyntaxError) return; // not JSON (a stray log line): skipped, as the SDK does
      this.onerror?.(err as Error);
      return;
    }
    this.deliver(message);
  }

  /** Hands a message to the SDK; a handler that throws must not stop the reading of the rest. */
  private deliver(message: JSONRPCMessage): void {
    try {
      this.onmessage?.(message);
    } catch (err) {
      this.onerror?.(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** A line over the limit, now skipped to its end: fail the request it answers, if it is a response. */
  private oversized(bytes: number, head: Buffer, tail: Buffer): void {
    const t: TooLarge = { size: bytes, exact: true, limit: this.maxMessageBytes };
    const id = responseIdOf(head.toString('utf8'), tail.toString('utf8'));
    if (id !== undefined) this.deliver(tooLargeResponse(id, t));
    else this.onerror?.(new Error(`Skipped a message from the server: ${tooLargeMessage(t)}`));
  }

  /** A line that does not end: the stream is unusable, so the server is ended (and restarted by the client). */
  private kill(t: TooLarge): void {
    if (this.endless || this.closing) return;
    this.endless = t;
    this.reader.clear();
    this.onerror?.(new Error(`The server wrote a line that does not end: ${tooLargeMessage(t)}; ending the server`));
    const pid = this.child?.pid;
    if (pid !== undefined && !this.exit) void killTree(pid, { group: true, graceMs: 200, known: descendants(pid) }).catch(() => {});
  }

  send(message: JSONRPCMessage): Promise<void> {
    const child = this.child;
    if (!child || this.exit || this.endless) return Promise.reject(new Error('Not connected: the server process is not running'));
    return new Promise((resolve) => {
      if (child.stdin.write(serializeMessage(message))) resolve();
      else child.stdin.once('drain', resolve);
    });
  }

  /** Ends the server: closes its stdin, then ends its whole process tree. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const child = this.child;
    if (child?.pid !== undefined) {
      const pid = child.pid;
      const known = descendants(pid); // before it can exit and orphan them
      child.stdin.end();
      // Give it a moment to exit by itself on end of input; then end the tree.
      const deadline = Date.now() + 200;
      while (!this.exit && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      await killTree(pid, { group: true, graceMs: 1000, known });
      if (!this.exit && isAlive(pid)) await new Promise((r) => child.once('exit', r));
    }
    this.reader.clear();
    this.fireClose();
  }

  private fireClose(): void {
    if (this.closedFired) return;
    this.closedFired = true;
    this.onclose?.();
  }
}

export function describeExit(exit: ExitInfo | undefined): string {
  if (!exit) return 'the server process ended';
  if (exit.signal) return `the server process was killed by ${exit.signal}`;
  if (exit.code !== null) return `the server process exited with code ${exit.code}`;
  return 'the server process could not be started';
}
