/**
 * Trajectory storage: JSON Lines, one line per finished trajectory, written and flushed to disk
 * (fdatasync) before anything uses it. A run killed mid-write leaves at most a partial last
 * line, which opening the file again cuts off; every whole line is a whole trajectory. A line
 * damaged in the middle (a disk error, two writers) stops a reader with the file and line, and
 * `repairJsonlLines` (`mcp-gym repair FILE`) moves such lines out of the file.
 */
import {
  appendFileSync,
  closeSync,
  existsSync,
  fdatasyncSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
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

  constructor(
    readonly file: string,
    options: { sync?: boolean } = {},
  ) {
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

/** Reads a JSONL file of records; a malformed line is an error naming the file and line, and how to repair it. */
export function readJsonl<T>(file: string, parse: (v: unknown) => T = (v) => v as T): T[] {
  if (!existsSync(file)) return [];
  const lines = readFileSync(file, 'utf8').split('\n');
  const out: T[] = [];
  const repair = `(run: mcp-gym repair ${file})`;
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    const last = i === lines.length - 1; // a partial last line (no newline yet) is skipped
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      if (last) return;
      throw new Error(`${file}:${i + 1}: invalid JSON: ${(err as Error).message} ${repair}`);
    }
    try {
      out.push(parse(value));
    } catch (err) {
      throw new Error(`${file}:${i + 1}: ${describeInvalid(err)} ${repair}`);
    }
  });
  return out;
}

function describeInvalid(err: unknown): string {
  const issues = (err as { issues?: { path: PropertyKey[]; message: string }[] }).issues;
  if (Array.isArray(issues) && issues[0]) return `not a valid record: ${issues[0].path.map(String).join('.') || '(record)'}: ${issues[0].message}`;
  return `not a valid record: ${(err as Error).message}`;
}

export function readTrajectories(file: string, validate = false): Trajectory[] {
  return readJsonl(file, validate ? (v) => TrajectorySchema.parse(v) : (v) => v as Trajectory);
}

export interface JsonlRepair {
  file: string;
  /** Non-empty lines read. */
  lines: number;
  kept: number;
  /** 1-based numbers of the lines taken out. */
  bad: number[];
  /** Where the bad lines went (appended, as they were), unless they were dropped. */
  badFile?: string;
  /** Whether the lines were checked as trajectories (TrajectorySchema) as well as JSON. */
  validated: boolean;
}

/**
 * Takes the lines that are not whole JSON objects out of a JSONL file (a partial last line, a line
 * damaged in the middle): appended as they were to `<file>.bad`, or dropped with `drop`. When most
 * lines are trajectories, a line that is not one (TrajectorySchema) is taken out too. The file is
 * rewritten through a temporary file and a rename, so it is whole at every moment; run it while no
 * writer appends to the file.
 */
export function repairJsonlLines(file: string, options: { drop?: boolean; validate?: boolean } = {}): JsonlRepair {
  if (!existsSync(file)) throw new Error(`${file}: no such file`);
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n');
  const entries: { n: number; line: string; value?: unknown }[] = [];
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      value = undefined;
    }
    entries.push({ n: i + 1, line, value: value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined });
  });
  const objects = entries.filter((e) => e.value !== undefined);
  const isTrajectory = (v: unknown) => TrajectorySchema.safeParse(v).success;
  const validate = options.validate ?? (objects.length > 0 && objects.filter((e) => isTrajectory(e.value)).length * 2 > objects.length);
  const good = (e: (typeof entries)[number]) => e.value !== undefined && (!validate || isTrajectory(e.value));
  const kept = entries.filter(good);
  const bad = entries.filter((e) => !good(e));
  const report: JsonlRepair = { file, lines: entries.length, kept: kept.length, bad: bad.map((e) => e.n), validated: validate };
  const wholeLines = text.length === 0 || text.endsWith('\n');
  if (bad.length === 0 && wholeLines) return report;
  if (bad.length > 0 && !options.drop) {
    report.badFile = `${file}.bad`;
    appendFileSync(report.badFile, bad.map((e) => `${e.line}\n`).join(''));
  }
  const tmp = `${file}.repair-${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, kept.map((e) => `${e.line}\n`).join(''));
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  return report;
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
