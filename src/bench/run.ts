/**
 * A whole benchmark of one MCP server: connect and list its tools (timed), load every tool at
 * each concurrency level, optionally fuzz it and replay saved failures, sample a stdio server's
 * CPU time and memory throughout; and optionally agent success on a set of tasks.
 */
import { ToolClient, type ConnectOptions, type ServerSpec, type ToolInfo } from '../tools/index.ts';
import { toolSurface } from '../tools/index.ts';
import type { Policy, Task, ToolModeOptions } from '../env/index.ts';
import { fnv1a } from '../../lib/index.ts';
import { generateArguments, type Args } from './args.ts';
import { runAgentBench } from './agent.ts';
import { replayFailures, runFuzz, saveFailures, type FuzzFailure, type FuzzOptions } from './fuzz.ts';
import { DEFAULT_CONCURRENCY, loadTool, type LevelResult } from './load.ts';
import { ProcessSampler } from './proc.ts';
import type { BenchReport } from './report.ts';
import { writingTools } from './safety.ts';

export interface BenchOptions {
  /** The server to benchmark (stdio, HTTP or in-process). Without one, only `agent` runs. */
  server?: ServerSpec;
  connect?: ConnectOptions;
  /** Example arguments by tool (used instead of generated ones). */
  examples?: Map<string, Args[]>;
  /** Tools not to call at all (e.g. those with side effects). */
  exclude?: string[];
  /**
   * Call (load, fuzz, replay) tools whose annotations say they may write (`destructiveHint: true`,
   * or `readOnlyHint: false`). Default false: they are skipped and listed in `report.skipped`.
   */
  allowWrites?: boolean;
  /** Concurrency levels. Default 1, 4, 16, 64. */
  concurrency?: number[];
  /** Calls per tool and level; 0 skips the load phase. Default 500. */
  calls?: number;
  /** Time limit per tool and level, ms. Default 5,000. */
  durationMs?: number;
  /** Timeout of each call, ms. Default 10,000. */
  timeoutMs?: number;
  /** Seed of generated arguments and fuzz cases. Default 1. */
  seed?: number;
  /** Generated argument sets per tool. Default 8. */
  argsPerTool?: number;
  /** Fuzz each tool (with these options). */
  fuzz?: FuzzOptions | boolean;
  /** Where crashing and hanging inputs are saved (JSONL), when there are any. */
  saveFailuresTo?: string;
  /** Saved inputs to send again. */
  replay?: { file?: string; failures: FuzzFailure[] };
  agent?: { policy: Policy; tasks: Task[]; k: number; concurrency?: number; timeoutMs?: number; tools?: ToolModeOptions };
  signal?: AbortSignal;
  /** Progress lines (for stderr). */
  log?: (line: string) => void;
}

function describeSpec(spec: ServerSpec): { transport: string; target: string } {
  if (spec.transport === 'stdio')
    return { transport: 'stdio', target: [spec.command, ...(spec.args ?? [])].map((w) => (/[\s'"]/.test(w) ? JSON.stringify(w) : w)).join(' ') };
  if (spec.transport === 'http') return { transport: 'http', target: spec.url };
  if (spec.transport === 'openenv') return { transport: 'openenv', target: spec.url };
  return { transport: 'inprocess', target: '(in-process server)' };
}

export async function runBench(options: BenchOptions): Promise<BenchReport> {
  const t0 = performance.now();
  const log = options.log ?? (() => {});
  const concurrency = [...new Set(options.concurrency ?? DEFAULT_CONCURRENCY)].sort((a, b) => a - b);
  for (const c of concurrency) if (!Number.isInteger(c) || c < 1) throw new RangeError(`concurrency levels must be positive integers, got ${c}`);
  const calls = options.calls ?? 500;
  const seed = options.seed ?? 1;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const allowWrites = options.allowWrites === true;
  const report: BenchReport = {
    concurrency,
    calls_per_level: calls,
    tools: {},
    excluded: [],
    skipped: [],
    allow_writes: allowWrites,
    warnings: [],
    seconds: 0,
  };

  if (options.server) {
    let spec = options.server;
    // A fuzzed stdio server may crash again and again: keep restarting it.
    if (spec.transport === 'stdio') spec = { maxRestartsPerMinute: 1000, ...spec };
    const c0 = performance.now();
    const client = await ToolClient.connect(spec, { callTimeoutMs: timeoutMs, ...options.connect });
    report.connect_ms = performance.now() - c0;
    report.server = { ...describeSpec(spec), ...client.serverInfo };
    const sampler = spec.transport === 'stdio' ? new ProcessSampler(() => client.pid) : undefined;
    sampler?.start();
    try {
      const l0 = performance.now();
      const listed = await client.listTools({ timeoutMs });
      report.list_tools_ms = performance.now() - l0;
      report.tool_count = listed.length;
      report.tool_surface = toolSurface(listed);
      log(`connected in ${report.connect_ms.toFixed(1)} ms; ${listed.length} tools listed in ${report.list_tools_ms.toFixed(1)} ms`);
      const exclude = new Set(options.exclude ?? []);
      for (const name of exclude) if (!listed.some((t) => t.name === name)) report.warnings.push(`--exclude names '${name}', which the server does not list`);
      for (const name of options.examples?.keys() ?? [])
        if (!listed.some((t) => t.name === name)) report.warnings.push(`the examples name '${name}', which the server does not list`);
      report.excluded = listed.filter((t) => exclude.has(t.name)).map((t) => t.name);
      // Tools whose annotations say they may write: never called with generated arguments unless allowed.
      const writers = writingTools(listed.filter((t) => !exclude.has(t.name)));
      const writer = new Set(writers.map((w) => w.tool));
      const tools: ToolInfo[] = listed.filter((t) => !exclude.has(t.name) && (allowWrites || !writer.has(t.name)));
      if (allowWrites) {
        report.may_write = writers;
        log(
          `--allow-writes: calling ${tools.length} tool${tools.length === 1 ? '' : 's'} with generated arguments: ${tools.map((t) => t.name).join(', ') || '(none)'}`,
        );
        if (writers.length) log(`  of which may change or delete data: ${writers.map((w) => `${w.tool} (${w.reason})`).join(', ')}`);
      } else {
        report.skipped = writers;
        if (writers.length)
          log(
            `skipped ${writers.length} tool${writers.length === 1 ? '' : 's'} that may write (--allow-writes calls them): ${writers.map((w) => `${w.tool} (${w.reason})`).join(', ')}`,
          );
      }

      if (calls > 0 && !options.replay) {
        for (const tool of tools) {
          if (options.signal?.aborted) break;
          const examples = options.examples?.get(tool.name);
          const gen = examples ? undefined : generateArguments(tool.inputSchema, options.argsPerTool ?? 8, (seed ^ fnv1a(tool.name)) >>> 0);
          if (gen && !gen.valid)
            report.warnings.push(`${tool.name}: no generated arguments validate against its schema (${gen.error ?? 'unknown'}); used unchecked ones`);
          log(`load ${tool.name}: ${concurrency.map((c) => `c=${c}`).join(' ')}`);
          report.tools[tool.name] = await loadTool(
            client,
            tool.name,
            examples ?? gen!.args,
            { source: examples ? 'examples' : 'schema', valid: examples ? true : gen!.valid },
            {
              concurrency,
              calls,
              durationMs: options.durationMs,
              timeoutMs,
              signal: options.signal,
              onLevel: (name: string, l: LevelResult) =>
                log(`  ${name} c=${l.concurrency}: ${l.calls} calls, ${l.calls_per_s.toFixed(1)}/s, p50 ${l.latency.p50_ms.toFixed(3)} ms, ${l.errors} errors`),
            },
          );
          const t = report.tools[tool.name]!;
          if (t.calls > 0 && t.error_rate >= 0.5)
            report.warnings.push(
              `${tool.name}: ${(100 * t.error_rate).toFixed(0)}% of its calls failed (${Object.entries(t.error_kinds)
                .map(([k, v]) => `${v} ${k}`)
                .join(
                  ', ',
                )}; e.g. ${(t.first_error ?? '').split('\n')[0]!.slice(0, 120)}): its figures measure the error path, not the operation; give --examples with inputs that succeed`,
            );
        }
      }

      if (options.fuzz && !options.replay) {
        const fo: FuzzOptions = typeof options.fuzz === 'object' ? options.fuzz : {};
        const fuzzTimeout = fo.timeoutMs ?? Math.min(timeoutMs, 5000);
        log(`fuzz: ${tools.length} tools, up to ${fo.count ?? 100} cases each, seed ${fo.seed ?? seed}`);
        const f = await runFuzz(client, tools, {
          ...fo,
          seed: fo.seed ?? seed,
          timeoutMs: fuzzTimeout,
          signal: options.signal,
          onCase: (tool, i, total, c, r) => {
            fo.onCase?.(tool, i, total, c, r);
            if (r.outcome === 'crash' || r.outcome === 'hang') log(`  ${tool} #${i} ${c.kind} at ${c.path}: ${r.outcome}`);
          },
        });
        report.fuzz = {
          ...f,
          timeout_ms: fuzzTimeout,
          ...(fo.toolTimeoutMs ? { tool_timeout_ms: fo.toolTimeoutMs } : {}),
          progress_resets: fo.progressResets !== false,
        };
        if (f.failures.length && options.saveFailuresTo) {
          saveFailures(options.saveFailuresTo, f.failures);
          report.fuzz.failures_file = options.saveFailuresTo;
        }
      }

      if (options.replay) {
        const fuzzTimeout = (typeof options.fuzz === 'object' ? options.fuzz.timeoutMs : undefined) ?? Math.min(timeoutMs, 5000);
        log(`replay: ${options.replay.failures.length} inputs`);
        const known = new Set(listed.map((t) => t.name));
        for (const f of options.replay.failures) if (!known.has(f.tool)) report.warnings.push(`replay: the server does not list '${f.tool}'`);
        const skipped = new Set(report.skipped?.map((s) => s.tool));
        const held = options.replay.failures.filter((f) => skipped.has(f.tool));
        if (held.length)
          report.warnings.push(
            `replay: ${held.length} input${held.length === 1 ? '' : 's'} of tools that may write not sent (${[...new Set(held.map((f) => f.tool))].join(', ')}); --allow-writes sends them`,
          );
        const fo = typeof options.fuzz === 'object' ? options.fuzz : {};
        const r = await replayFailures(
          client,
          options.replay.failures.filter((f) => !skipped.has(f.tool)),
          {
            timeoutMs: fuzzTimeout,
            signal: options.signal,
            ...(fo.toolTimeoutMs ? { toolTimeoutMs: fo.toolTimeoutMs } : {}),
            ...(fo.progressResets !== undefined ? { progressResets: fo.progressResets } : {}),
            ...(fo.maxTotalMs !== undefined ? { maxTotalMs: fo.maxTotalMs } : {}),
          },
        );
        report.replay = { file: options.replay.file, ...r };
      }
    } finally {
      if (sampler) report.process = sampler.stop();
      await client.close();
    }
  }

  if (options.agent) {
    const a = options.agent;
    log(`agent: ${a.tasks.length} tasks x ${a.k} runs with policy ${a.policy.id}`);
    report.agent = await runAgentBench(a.policy, a.tasks, {
      k: a.k,
      concurrency: a.concurrency,
      signal: options.signal,
      env: { callTimeoutMs: a.timeoutMs, ...(a.tools ? { tools: a.tools } : {}) },
    });
  }
  report.seconds = (performance.now() - t0) / 1000;
  return report;
}
