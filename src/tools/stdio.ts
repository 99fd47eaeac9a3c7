/**
 * A stdio client transport that owns its child process: it runs the server in a process group of
 * its own, keeps the tail of its stderr for error messages, reports how it exited, and on close
 * ends the whole process tree (the SDK's transport signals only the direct child).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/client';
import type { JSONRPCMessage, Transport } from '@modelcontextprotocol/client';
import { descendants, isAlive, killTree } from './process-tree.ts';

export interface StdioTransportOptions {
  command: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** Bytes of stderr kept for error messages. Default 4096. */
  stderrTail?: number;
  /** Also copy the server's stderr to ours. Default false. */
  forwardStderr?: boolean;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class ProcessStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private child?: ChildProcessWithoutNullStreams;
  private readonly buffer = new ReadBuffer();
  private stderr = '';
  private closing = false;
  private closedFired = false;
  exit?: ExitInfo;

  constructor(private readonly options: StdioTransportOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The last bytes the server wrote to stderr. */
  get stderrTail(): string {
    return this.stderr;
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
      const keep = this.options.stderrTail ?? 4096;
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk: string) => {
        if (this.options.forwardStderr) process.stderr.write(chunk);
        this.stderr = (this.stderr + chunk).slice(-keep);
      });
      child.stdout.on('data', (chunk: Buffer) => {
        this.buffer.append(chunk);
        for (;;) {
          let message: JSONRPCMessage | null;
          try {
            message = this.buffer.readMessage();
          } catch (err) {
            this.onerror?.(err as Error);
            continue;
          }
          if (message === null) break;
          this.onmessage?.(message);
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

  send(message: JSONRPCMessage): Promise<void> {
    const child = this.child;
    if (!child || this.exit) return Promise.reject(new Error('Not connected: the server process is not running'));
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
    this.buffer.clear();
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
