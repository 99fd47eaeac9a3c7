/**
 * Robustness: invalid and edge-case arguments generated from a tool's JSON Schema (missing
 * required fields, wrong types, unknown fields, null, empty and huge strings, odd unicode,
 * numbers at the edges, deep nesting, huge arrays) and pathological ones (regular expressions
 * that backtrack catastrophically with subjects that make them, requests for huge outputs),
 * seeded and reproducible; each answer classified; the inputs that crashed the server or hung
 * are saved as JSONL for replay.
 *
 * This file runs the fuzz over a server's tools and keeps its report and failures (saved, read,
 * replayed); the inputs are made in fuzz-cases.ts, the calls sent and classified in fuzz-classify.ts.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Args } from './args.ts';
import { fuzzCases, type FuzzCase, type FuzzGenOptions } from './fuzz-cases.ts';
import { sendAndClassify, type CallTiming, type Classified, type FuzzClient, type Outcome } from './fuzz-classify.ts';

export { fuzzCases, ODD_STRINGS, REDOS_PATTERNS, BACKTRACKING_SUBJECT, type FuzzCase, type FuzzGenOptions } from './fuzz-cases.ts';
export { OUTCOMES, sendAndClassify, type CallTiming, type Classified, type FuzzClient, type Outcome } from './fuzz-classify.ts';

type Schema = Record<string, unknown>;

export type OutcomeCounts = Record<Outcome, number>;
const zero = (): OutcomeCounts => ({ rejected: 0, accepted: 0, protocol_error: 0, crash: 0, hang: 0 });

export interface FuzzFailure {
  tool: string;
  arguments: Args;
  outcome: Outcome;
  kind?: string;
  path?: string;
  detail?: string;
  seed?: number;
  case?: number;
}

export interface ToolFuzz extends OutcomeCounts {
  tool: string;
  cases: number;
  by_kind: Record<string, OutcomeCounts>;
}

export interface FuzzReport {
  seed: number;
  cases_per_tool: number;
  tools: Record<string, ToolFuzz>;
  totals: OutcomeCounts & { cases: number };
  /** The inputs that crashed the server or hung, with what happened. */
  failures: FuzzFailure[];
  /** Server restarts during the fuzz run. */
  restarts: number;
}

export interface FuzzOptions extends FuzzGenOptions, CallTiming {
  /** Timeout of each call, ms: longer (without progress) is a hang. Default 5,000. */
  timeoutMs?: number;
  /** Per-tool timeouts, ms (tools slow by design), over timeoutMs. */
  toolTimeoutMs?: Record<string, number>;
  signal?: AbortSignal;
  onCase?: (tool: string, index: number, total: number, c: FuzzCase, r: Classified) => void;
}

/** Fuzzes each tool in turn, one call at a time (so a crash or hang is pinned to its input). */
export async function runFuzz(client: FuzzClient, tools: { name: string; inputSchema: Schema }[], options: FuzzOptions = {}): Promise<FuzzReport> {
  const seed = options.seed ?? 1;
  const timeoutMs = options.timeoutMs ?? 5000;
  const restarts0 = client.restarts;
  const report: FuzzReport = { seed, cases_per_tool: options.count ?? 100, tools: {}, totals: { ...zero(), cases: 0 }, failures: [], restarts: 0 };
  let pending = false;
  for (const tool of tools) {
    const cases = fuzzCases(tool, { ...options, seed });
    const row: ToolFuzz = { tool: tool.name, cases: 0, ...zero(), by_kind: {} };
    report.tools[tool.name] = row;
    for (const [i, c] of cases.entries()) {
      if (options.signal?.aborted) break;
      const before = client.restarts;
      const r = await sendAndClassify(client, tool.name, c.arguments, options.toolTimeoutMs?.[tool.name] ?? timeoutMs, options);
      // A restart is due when the server went down and no fresh one has been started yet.
      pending = r.restarted === true && client.restarts === before;
      row.cases++;
      row[r.outcome]++;
      (row.by_kind[c.kind] ??= zero())[r.outcome]++;
      report.totals.cases++;
      report.totals[r.outcome]++;
      if (r.outcome === 'crash' || r.outcome === 'hang') {
        report.failures.push({ tool: tool.name, arguments: c.arguments, outcome: r.outcome, kind: c.kind, path: c.path, detail: r.detail, seed, case: i });
      }
      options.onCase?.(tool.name, i, cases.length, c, r);
    }
  }
  // A server that died on the last case restarts only on the next call: count it as due.
  report.restarts = client.restarts - restarts0 + (pending ? 1 : 0);
  return report;
}

/** Writes failures as JSONL (one `{tool, arguments, outcome, ...}` per line). */
export function saveFailures(file: string, failures: FuzzFailure[]): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, failures.map((f) => JSON.stringify(f)).join('\n') + (failures.length ? '\n' : ''));
}

/** Reads a failures file (or any JSONL of `{tool, arguments}`). */
export function readFailures(file: string): FuzzFailure[] {
  const out: FuzzFailure[] = [];
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (!line || line.startsWith('//')) return;
      let e: Partial<FuzzFailure>;
      try {
        e = JSON.parse(line) as Partial<FuzzFailure>;
      } catch (err) {
        throw new Error(`${file}:${i + 1}: not JSON (${(err as Error).message})`);
      }
      if (typeof e.tool !== 'string') throw new Error(`${file}:${i + 1}: expected {"tool": ..., "arguments": {...}}`);
      const args = e.arguments ?? {};
      if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new Error(`${file}:${i + 1}: arguments must be a JSON object`);
      out.push({ ...e, tool: e.tool, arguments: args, outcome: e.outcome ?? 'crash' } as FuzzFailure);
    });
  return out;
}

export interface ReplayResult {
  tool: string;
  kind?: string;
  path?: string;
  /** What the saved run recorded. */
  recorded: Outcome;
  /** What happened now. */
  outcome: Outcome;
  reproduced: boolean;
  detail: string;
}

/** Sends saved inputs again, one at a time, and tells which failures reproduce. */
export async function replayFailures(
  client: FuzzClient,
  failures: FuzzFailure[],
  options: { timeoutMs?: number; toolTimeoutMs?: Record<string, number>; signal?: AbortSignal } & CallTiming = {},
): Promise<{ results: ReplayResult[]; counts: OutcomeCounts; reproduced: number }> {
  const results: ReplayResult[] = [];
  const counts = zero();
  for (const f of failures) {
    if (options.signal?.aborted) break;
    const r = await sendAndClassify(client, f.tool, f.arguments, options.toolTimeoutMs?.[f.tool] ?? options.timeoutMs ?? 5000, options);
    counts[r.outcome]++;
    results.push({ tool: f.tool, kind: f.kind, path: f.path, recorded: f.outcome, outcome: r.outcome, reproduced: r.outcome === f.outcome, detail: r.detail });
  }
  return { results, counts, reproduced: results.filter((r) => r.reproduced).length };
}
