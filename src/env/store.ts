/**
 * Trajectory storage: JSON Lines, one line per finished trajectory, written and flushed to disk
 * (fdatasync) before anything uses it. A run killed mid-write leaves at most a partial last
 * line, which opening the file again cuts off; every whole line is a whole trajectory.
 */
import { closeSync, existsSync, fdatasyncSync, fstatSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { TrajectorySchema, type Trajectory } from './types.ts';

/** Cuts a partial last line (no final newline) off a JSONL file; returns the bytes removed. */
export function repairJsonl(file: string): number {
  if (!existsSync(file)) return 0;
  const fd = openSync(file, 'r+');
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return 0;
    // Scan back from the end for the last newline.
    const chunk = Buffer.alloc(Math.min(size, 1 << 16));
    let end = size;
    while (end > 0) {
      const start = Math.max(0, end - chunk.length);
      const n = readSync(fd, chunk, 0, end - start, start);
      const i = chunk.subarray(0, n).lastIndexOf(10);
      if (i >= 0) {
        const keep = start + i + 1;
        if (keep < size) ftruncateSync(fd, keep);
        return size - keep;
      }
      end = start;
    }
    ftruncateSync(fd, 0);
    return size;
  } finally {
    closeSync(fd);
  }
}

export class JsonlWriter<T> {
  private fd: number;
  written = 0;

  constructor(readonly file: string, options: { sync?: boolean } = {}) {
    mkdirSync(dirname(file), { recursive: true });
    repairJsonl(file);
    this.fd = openSync(file, 'a');
    this.sync = options.sync ?? true;
  }

  private readonly sync: boolean;

  /** Appends one record as one line and flushes it to disk. */
  write(record: T): void {
    writeSync(this.fd, JSON.stringify(record) + '\n');
    if (this.sync) fdatasyncSync(this.fd);
    this.written++;
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}

export class TrajectoryWriter extends JsonlWriter<Trajectory> {}

/** Reads a JSONL file of records; a malformed line is an error naming the file and line. */
export function readJsonl<T>(file: string, parse: (v: unknown) => T = (v) => v as T): T[] {
  if (!existsSync(file)) return [];
  const lines = readFileSync(file, 'utf8').split('\n');
  const out: T[] = [];
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    const last = i === lines.length - 1; // a partial last line (no newline yet) is skipped
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      if (last) return;
      throw new Error(`${file}:${i + 1}: invalid JSON: ${(err as Error).message}`);
    }
    out.push(parse(value));
  });
  return out;
}

export function readTrajectories(file: string, validate = false): Trajectory[] {
  return readJsonl(file, validate ? (v) => TrajectorySchema.parse(v) : (v) => v as Trajectory);
}

/** The key that identifies an episode of a run: its group and its index in the group. */
export function episodeKey(t: Pick<Trajectory, 'group_id' | 'sample'>): string {
  return `${t.group_id}#${t.sample}`;
}

/**
 * One line per trajectory in the OpenAI chat fine-tuning format:
 * {"messages": [...], "tools": [{"type": "function", "function": {...}}]}.
 */
export function toOpenAIFineTune(t: Trajectory): { messages: unknown[]; tools?: unknown[] } {
  const messages = t.messages.map((m) => {
    if (m.role === 'tool') return { role: 'tool', tool_call_id: m.tool_call_id, content: m.content };
    if (m.role === 'assistant' && m.tool_calls?.length) return { role: 'assistant', content: m.content || null, tool_calls: m.tool_calls };
    return { role: m.role, content: m.content };
  });
  return t.tools?.length
    ? { messages, tools: t.tools.map((x) => ({ type: 'function', function: { name: x.name, description: x.description, parameters: x.parameters } })) }
    : { messages };
}

export function exportOpenAI(trajectories: Trajectory[], file: string, options: { onlySuccessful?: boolean } = {}): number {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, '');
  const w = new JsonlWriter<unknown>(file, { sync: false });
  let n = 0;
  try {
    for (const t of trajectories) {
      if (options.onlySuccessful && !t.success) continue;
      w.write(toOpenAIFineTune(t));
      n++;
    }
  } finally {
    w.close();
  }
  return n;
}
