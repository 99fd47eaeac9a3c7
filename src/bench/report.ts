/**
 * A benchmark's report (BenchReport) and its JSON form, one object for the last line of `--json`.
 * Its renderings: a terminal table (report-text.ts) and a self-contained HTML page (report-html.ts).
 */
import type { ServerSurface } from '../tools/index.ts';
import type { AgentReport } from './agent.ts';
import type { FuzzReport, ReplayResult } from './fuzz.ts';
import type { Outcome } from './fuzz-classify.ts';
import type { ToolLoad } from './load.ts';
import type { ProcessReport } from './proc.ts';
import type { SkippedTool } from './safety.ts';

export interface BenchReport {
  /** How the server was reached. */
  server?: { transport: string; target: string; name?: string; version?: string };
  /** Time to connect (spawn and initialize, or the HTTP handshake), ms. */
  connect_ms?: number;
  /** Time of the first complete `tools/list`, ms. */
  list_tools_ms?: number;
  /** Tools the server lists. */
  tool_count?: number;
  /** The server's tool surface (src/tools/surface.ts): its hash, and each tool's (and its parts'). */
  tool_surface?: ServerSurface;
  concurrency: number[];
  calls_per_level: number;
  /** Load figures by tool. */
  tools: Record<string, ToolLoad>;
  excluded: string[];
  /** Tools not called because their annotations say they may write (no `allowWrites`). */
  skipped?: SkippedTool[];
  /** Whether tools that may write were allowed (`--allow-writes`). */
  allow_writes?: boolean;
  /** With `allowWrites`: the tools called although their annotations say they may write. */
  may_write?: SkippedTool[];
  warnings: string[];
  /** CPU time and peak memory of a stdio server's process tree. */
  process?: ProcessReport;
  fuzz?: FuzzReport & { failures_file?: string; timeout_ms: number; tool_timeout_ms?: Record<string, number>; progress_resets?: boolean };
  replay?: { file?: string; results: ReplayResult[]; counts: Record<Outcome, number>; reproduced: number };
  agent?: AgentReport;
  seconds: number;
}

/** The report as one JSON-ready object: saved failing inputs are listed without their (possibly huge) arguments. */
export function reportJson(r: BenchReport): Record<string, unknown> {
  const tools = Object.fromEntries(
    Object.entries(r.tools).map(([name, t]) => {
      const { histogram, ...rest } = t;
      return [name, { ...rest, histogram: { edges_ms: histogram.edges.map((e) => Number(e.toPrecision(4))), counts: histogram.counts } }];
    }),
  );
  const fuzz = r.fuzz && { ...r.fuzz, failures: r.fuzz.failures.map(({ arguments: _a, ...f }) => f) };
  // The headline figures first.
  return roundDeep({
    server: r.server,
    connect_ms: r.connect_ms,
    list_tools_ms: r.list_tools_ms,
    tool_count: r.tool_count,
    ...(r.tool_surface ? { tool_surface: r.tool_surface } : {}),
    concurrency: r.concurrency,
    calls_per_level: r.calls_per_level,
    tools,
    excluded: r.excluded,
    skipped: r.skipped ?? [],
    allow_writes: r.allow_writes ?? false,
    ...(r.may_write ? { may_write: r.may_write } : {}),
    process: r.process,
    ...(fuzz ? { fuzz } : {}),
    ...(r.replay ? { replay: r.replay } : {}),
    ...(r.agent ? { agent: r.agent } : {}),
    warnings: r.warnings,
    seconds: r.seconds,
  }) as Record<string, unknown>;
}

/** Every fractional number rounded to 4 decimals (0.1 µs for milliseconds). */
function roundDeep(v: unknown): unknown {
  if (typeof v === 'number') return Number.isInteger(v) || !Number.isFinite(v) ? v : Math.round(v * 1e4) / 1e4;
  if (Array.isArray(v)) return v.map(roundDeep);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, roundDeep(x)]));
  return v;
}
