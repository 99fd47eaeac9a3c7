/**
 * Load: each tool called by a fixed pool of workers at each concurrency level, bounded by a call
 * count and a time limit per level; every latency kept (exact quantiles), errors and timeouts
 * counted by kind. The hot loop allocates nothing of its own: requests are built once, latencies
 * go to a preallocated store, time is `performance.now()`.
 */
import type { CallOptions, CallRequest, ToolResult } from '../tools/index.ts';
import { LatencyStore, type Histogram, type LatencySummary } from './latency.ts';
import type { Args } from './args.ts';

/** What the load engine calls: a `ToolClient`, or anything with its `call`. */
export interface Caller {
  call(request: CallRequest, options?: CallOptions): Promise<ToolResult>;
}

export interface LevelOptions {
  concurrency: number;
  /** Calls at this level, at most. */
  calls: number;
  /** No call starts after this many ms from the level's start. */
  durationMs: number;
  /** Timeout of each call, ms. */
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface LevelResult {
  concurrency: number;
  calls: number;
  seconds: number;
  calls_per_s: number;
  errors: number;
  timeouts: number;
  error_kinds: Record<string, number>;
  /** Every call's latency. */
  latency: LatencySummary;
  /** The calls that succeeded and those that failed apart: an error path (ENOENT, a refusal) is not the operation it is named after. */
  latency_ok?: LatencySummary;
  latency_error?: LatencySummary;
}

/** One level: `concurrency` workers calling `name` in turn with each of `args` until done. */
export async function runLevel(
  caller: Caller,
  name: string,
  args: readonly Args[],
  options: LevelOptions,
): Promise<{ result: LevelResult; store: LatencyStore }> {
  const total = Math.max(0, Math.floor(options.calls));
  const store = new LatencyStore(total);
  const okStore = new LatencyStore(total);
  const errStore = new LatencyStore(total);
  const requests: CallRequest[] = (args.length ? args : [{}]).map((a) => ({ name, arguments: a }));
  const nReq = requests.length;
  // No signal per call (it would add a listener to it per call): a cancelled run stops starting calls.
  const callOptions: CallOptions = { timeoutMs: options.timeoutMs };
  const kinds: Record<string, number> = {};
  const signal = options.signal;
  let started = 0;
  let errors = 0;
  let timeouts = 0;
  const t0 = performance.now();
  const deadline = t0 + options.durationMs;
  const worker = async (): Promise<void> => {
    while (started < total && performance.now() < deadline && !signal?.aborted) {
      const req = requests[started++ % nReq]!;
      const c0 = performance.now();
      const r = await caller.call(req, callOptions);
      const ms = performance.now() - c0;
      store.record(ms);
      (r.isError ? errStore : okStore).record(ms);
      if (r.isError) {
        errors++;
        const k = r.errorKind ?? 'tool';
        kinds[k] = (kinds[k] ?? 0) + 1;
        if (k === 'timeout') timeouts++;
      }
    }
  };
  const workers: Promise<void>[] = [];
  for (let i = 0; i < Math.max(1, Math.min(options.concurrency, total)); i++) workers.push(worker());
  await Promise.all(workers);
  const seconds = (performance.now() - t0) / 1000;
  const calls = store.count;
  return {
    result: {
      concurrency: options.concurrency,
      calls,
      seconds,
      calls_per_s: seconds > 0 ? calls / seconds : 0,
      errors,
      timeouts,
      error_kinds: kinds,
      latency: store.summary(),
      ...(okStore.count ? { latency_ok: okStore.summary() } : {}),
      ...(errStore.count ? { latency_error: errStore.summary() } : {}),
    },
    store,
  };
}

export interface LoadOptions {
  /** Concurrency levels. Default 1, 4, 16, 64. */
  concurrency?: number[];
  /** Calls per level. Default 500. */
  calls?: number;
  /** Time limit per level, ms. Default 5,000. */
  durationMs?: number;
  /** Timeout of each call, ms. Default 10,000. */
  timeoutMs?: number;
  /** Unrecorded calls before the first level. Default min(10, calls). */
  warmup?: number;
  signal?: AbortSignal;
  onLevel?: (tool: string, level: LevelResult) => void;
}

export interface ToolLoad {
  tool: string;
  /** Where the arguments came from. */
  args_source: 'examples' | 'schema';
  /** Whether the generated arguments validate against the tool's schema. */
  args_valid: boolean;
  args_count: number;
  /** Latency at the lowest concurrency level (the unloaded latency). */
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms: number;
  mean_ms: number;
  /** The lowest level's median latency of the calls that succeeded, and of those that failed (absent without any). */
  ok_p50_ms?: number;
  error_p50_ms?: number;
  /** Calls per second by concurrency level. */
  calls_per_s: Record<string, number>;
  /** Over every level. */
  calls: number;
  errors: number;
  error_rate: number;
  timeouts: number;
  timeout_rate: number;
  error_kinds: Record<string, number>;
  levels: LevelResult[];
  /** Log-bucket histogram of the lowest level's latencies. */
  histogram: Histogram;
  /** The first error's message, when any call failed. */
  first_error?: string;
}

export const DEFAULT_CONCURRENCY = [1, 4, 16, 64];

/** Every level for one tool. */
export async function loadTool(
  caller: Caller,
  name: string,
  args: readonly Args[],
  source: { source: 'examples' | 'schema'; valid: boolean },
  options: LoadOptions = {},
): Promise<ToolLoad> {
  const levels = [...(options.concurrency ?? DEFAULT_CONCURRENCY)].sort((a, b) => a - b);
  const calls = options.calls ?? 500;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const durationMs = options.durationMs ?? 5000;
  const warmup = options.warmup ?? Math.min(10, calls);
  let firstError: string | undefined;
  const list = args.length ? args : [{}];
  for (let i = 0; i < warmup && !options.signal?.aborted; i++) {
    const r = await caller.call({ name, arguments: list[i % list.length] }, { timeoutMs });
    if (r.isError && firstError === undefined) firstError = textOf(r);
  }
  const results: LevelResult[] = [];
  let lowest: LatencyStore | undefined;
  for (const concurrency of levels) {
    if (options.signal?.aborted) break;
    const { result, store } = await runLevel(caller, name, list, { concurrency, calls, durationMs, timeoutMs, signal: options.signal });
    lowest ??= store;
    results.push(result);
    options.onLevel?.(name, result);
  }
  if (firstError === undefined && results.some((r) => r.errors > 0)) {
    const r = await caller.call({ name, arguments: list[0] }, { timeoutMs });
    if (r.isError) firstError = textOf(r);
  }
  const head = results[0]?.latency;
  const total = results.reduce((s, r) => s + r.calls, 0);
  const errors = results.reduce((s, r) => s + r.errors, 0);
  const timeouts = results.reduce((s, r) => s + r.timeouts, 0);
  const kinds: Record<string, number> = {};
  for (const r of results) for (const [k, v] of Object.entries(r.error_kinds)) kinds[k] = (kinds[k] ?? 0) + v;
  return {
    tool: name,
    args_source: source.source,
    args_valid: source.valid,
    args_count: list.length,
    p50_ms: head?.p50_ms ?? 0,
    p95_ms: head?.p95_ms ?? 0,
    p99_ms: head?.p99_ms ?? 0,
    max_ms: head?.max_ms ?? 0,
    mean_ms: head?.mean_ms ?? 0,
    ...(results[0]?.latency_ok ? { ok_p50_ms: results[0].latency_ok.p50_ms } : {}),
    ...(results[0]?.latency_error ? { error_p50_ms: results[0].latency_error.p50_ms } : {}),
    calls_per_s: Object.fromEntries(results.map((r) => [String(r.concurrency), r.calls_per_s])),
    calls: total,
    errors,
    error_rate: total ? errors / total : 0,
    timeouts,
    timeout_rate: total ? timeouts / total : 0,
    error_kinds: kinds,
    levels: results,
    histogram: lowest ? lowest.histogram() : { edges: [], counts: [] },
    ...(firstError !== undefined ? { first_error: firstError } : {}),
  };
}

function textOf(r: ToolResult): string {
  const first = r.content[0] as { text?: unknown } | undefined;
  return (typeof first?.text === 'string' ? first.text : JSON.stringify(r.content)).slice(0, 300);
}
