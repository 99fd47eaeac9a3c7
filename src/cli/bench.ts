/** `mcp-gym bench`: benchmark any MCP server (load, fuzz, replay) and agents on tasks. */
import { stopOnSignals } from './signals.ts';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { makePolicy } from '../agents/index.ts';
import { allFailed, loadTasks, type Task } from '../env/index.ts';
import { Interrupted, RunFailure } from '../../lib/index.ts';
import { BFCL_SUITE_HELP, generateSuite, isSuiteName, SUITE_NAMES } from '../env/suites/index.ts';
import { toolModeFlag } from './rollout.ts';
import {
  checkThreshold,
  gateFromStats,
  parseExamples,
  writeJunit,
  readFailures,
  renderHtml,
  renderText,
  reportJson,
  runBench,
  type BenchOptions,
} from '../bench/index.ts';
import { API_FLAGS, apiOptionsFrom, intFlag, serverFromFlags, thresholdFlag, UsageError } from './args.ts';

export const BENCH_HELP = `Usage: mcp-gym bench (--stdio "<command line>" | --url URL | --openenv URL) [options]
       mcp-gym bench --tasks <suite|file> --policy P [-k K]

Server:   --stdio "CMD ARGS"  a stdio server (split like a shell: quotes work)
          --url URL           a streamable HTTP server   --token T   --header K:V (repeatable)
          --openenv URL       an OpenEnv environment's MCP tools (a WebSocket session, reset first)
Load:     --examples F        example calls: {"tool": [args, ...]} (JSON) or {"tool", "arguments"} lines (JSONL)
          --exclude a,b       tools never called
          --allow-writes      also call tools whose annotations say they may write (destructiveHint: true
                              or readOnlyHint: false); without it they are skipped and listed
          --concurrency L     levels (default 1,4,16,64)   --calls N   per tool and level (default 500; 0: no load)
          --duration-ms N     time limit per tool and level (default 5000)   --timeout-ms N  per call (default 10000)
Fuzz:     --fuzz              invalid and edge-case arguments from each tool's schema
          --fuzz-cases N      per tool (default 100)   --seed S (default 1)   (a call is a hang after
                              --timeout-ms, default 5000 here, without a progress notification: each one
                              restarts the timeout, up to --max-call-ms, default max(60000, 10 x timeout))
          --tool-timeout T=MS a tool's own timeout, for tools slow by design (repeatable, or T1=MS,T2=MS)
          --no-progress-reset progress notifications do not restart the timeout
          --save-failures F   where crashing/hanging inputs go (default runs/bench/failures-<time>.jsonl)
          --replay F          send saved inputs again and tell which failures reproduce
Agents:   --tasks S|F         a bundled suite (or all), BFCL's (bfcl:<category|group>) or a task file   --split eval|train|all   --limit N
          --policy P          expert (default), random[:seed], onnx:<dir>, openai:<model>, anthropic:<model>
                              (with --base-url URL, --api-key-env NAME, ...: mcp-gym eval --help)   -k K  runs per task (default 4)
          --tools MODE        how the agent sees its tools: all (default), toolbelt, search, search:K (docs/tasks.md)
          --fail-under X      exit 6 when the agents' success rate is below X (0-1), for CI
          --junit F           JUnit XML in F: a test case per task (failed below --fail-under, default: any miss)
Output:   --json              also print the report as one JSON object, the last line
          --html F            write a self-contained HTML report (charts as inline SVG)
          --out DIR           write the report as DIR/bench.json (fuzz failures with their inputs), for mcp-gym view
`;

/** --tool-timeout NAME=MS (repeatable, or comma-separated), --max-call-ms, --no-progress-reset. */
function fuzzTiming(values: { 'tool-timeout'?: string[]; 'max-call-ms'?: string; 'no-progress-reset'?: boolean }): {
  toolTimeoutMs?: Record<string, number>;
  maxTotalMs?: number;
  progressResets?: boolean;
} {
  const out: { toolTimeoutMs?: Record<string, number>; maxTotalMs?: number; progressResets?: boolean } = {};
  for (const item of (values['tool-timeout'] ?? []).flatMap((v) => v.split(','))) {
    const m = /^\s*([^=\s]+)\s*=\s*(\d+)\s*$/.exec(item);
    if (!m || Number(m[2]) < 1) throw new UsageError(`--tool-timeout takes TOOL=MS (a positive number of ms), got '${item}'`);
    (out.toolTimeoutMs ??= {})[m[1]!] = Number(m[2]);
  }
  if (values['max-call-ms'] !== undefined) {
    out.maxTotalMs = intFlag(values['max-call-ms'], '--max-call-ms', 60_000);
    if (out.maxTotalMs < 1) throw new UsageError('--max-call-ms must be at least 1');
  }
  if (values['no-progress-reset']) out.progressResets = false;
  return out;
}

/** A comma-separated list of positive integers (concurrency levels): 0 or less is refused. */
function intList(value: string, flag: string): number[] {
  const items = value.split(',').map((s) => s.trim());
  const hint = `give a comma-separated list of positive integers, e.g. ${flag} 1,4,16`;
  if (!items.some(Boolean)) throw new UsageError(`${flag} is empty: ${hint}`);
  return items.filter(Boolean).map((s) => {
    const n = Number(s);
    const where = items.length > 1 ? ` (in '${value}')` : '';
    if (!/^[+-]?\d+$/.test(s) || !Number.isSafeInteger(n)) throw new UsageError(`${flag} levels must be integers, got '${s}'${where}: ${hint}`);
    if (n < 1) throw new UsageError(`${flag} levels must be at least 1 (the number of calls in flight), got ${s}${where}: ${hint}`);
    return n;
  });
}

/** node:util parseArgs's errors (an unknown option, a missing value) as usage errors. */
function usageOf(err: unknown): unknown {
  const e = err as { code?: string; message?: string };
  if (typeof e?.code === 'string' && e.code.startsWith('ERR_PARSE_ARGS'))
    return new UsageError(`${(e.message ?? String(err)).split('\n')[0]!.replace(/\.?$/, '.')} Run mcp-gym bench --help`);
  return err;
}

function selectTasks(spec: string, split: string, limit: string | undefined): Task[] {
  if (!['train', 'eval', 'all'].includes(split)) throw new UsageError(`--split must be train, eval or all, got '${split}'`);
  let tasks: Task[];
  if (existsSync(spec)) tasks = loadTasks(spec);
  else if (isSuiteName(spec)) {
    try {
      tasks = generateSuite(spec);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
  } else
    throw new UsageError(`--tasks must be a bundled suite (${SUITE_NAMES.join(', ')}, all), BFCL's (${BFCL_SUITE_HELP}) or a task file; '${spec}' is neither`);
  if (split !== 'all') tasks = tasks.filter((t) => t.split === split);
  if (limit !== undefined) tasks = tasks.slice(0, intFlag(limit, '--limit', 0));
  if (!tasks.length) throw new UsageError('--tasks selected no tasks');
  return tasks;
}

export async function benchCommand(argv: string[]): Promise<void> {
  // A negative number after an option reads as an option of its own: `--concurrency -1` is a usage error.
  const negative = argv.findIndex((a, i) => i > 0 && /^-\d/.test(a) && argv[i - 1] === '--concurrency');
  if (negative > 0) intList(argv[negative]!, '--concurrency');
  const parse = () =>
    parseArgs({
      args: argv,
      options: {
        stdio: { type: 'string' },
        url: { type: 'string' },
        openenv: { type: 'string' },
        token: { type: 'string' },
        header: { type: 'string', multiple: true },
        examples: { type: 'string' },
        exclude: { type: 'string' },
        'allow-writes': { type: 'boolean', default: false },
        concurrency: { type: 'string' },
        calls: { type: 'string' },
        'duration-ms': { type: 'string' },
        'timeout-ms': { type: 'string' },
        fuzz: { type: 'boolean', default: false },
        'fuzz-cases': { type: 'string' },
        'tool-timeout': { type: 'string', multiple: true },
        'max-call-ms': { type: 'string' },
        'no-progress-reset': { type: 'boolean' },
        seed: { type: 'string' },
        'save-failures': { type: 'string' },
        replay: { type: 'string' },
        tasks: { type: 'string' },
        tools: { type: 'string' },
        split: { type: 'string', default: 'eval' },
        limit: { type: 'string' },
        policy: { type: 'string', default: 'expert' },
        k: { type: 'string', short: 'k' },
        'fail-under': { type: 'string' },
        junit: { type: 'string' },
        json: { type: 'boolean', default: false },
        html: { type: 'string' },
        out: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
        ...API_FLAGS,
      },
    });
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse();
  } catch (err) {
    throw usageOf(err);
  }
  const { values } = parsed;
  if (values.help) {
    process.stdout.write(BENCH_HELP);
    return;
  }
  const servers = [values.stdio, values.url, values.openenv].filter((v) => v !== undefined).length;
  if (servers > 1) throw new UsageError('bench takes one of --stdio, --url and --openenv');
  if (servers === 0 && values.tasks === undefined) {
    throw new UsageError('bench needs a server (--stdio "<command line>", --url <URL> or --openenv <URL>) or --tasks <suite|file>. Run mcp-gym bench --help');
  }
  if (values.replay !== undefined && servers === 0) throw new UsageError('--replay needs the server: --stdio, --url or --openenv');
  if ((values.token !== undefined || values.header) && values.url === undefined && values.openenv === undefined)
    throw new UsageError('--token and --header go with --url or --openenv');

  const server = serverFromFlags(values);

  const seed = intFlag(values.seed, '--seed', 1);
  const timeoutMs = intFlag(values['timeout-ms'], '--timeout-ms', 10_000);
  if (timeoutMs < 1) throw new UsageError('--timeout-ms must be at least 1');
  const options: BenchOptions = {
    server,
    exclude: values.exclude
      ?.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    allowWrites: values['allow-writes'],
    concurrency: values.concurrency === undefined ? undefined : intList(values.concurrency, '--concurrency'),
    calls: intFlag(values.calls, '--calls', 500),
    durationMs: intFlag(values['duration-ms'], '--duration-ms', 5000),
    timeoutMs,
    seed,
    log: (line) => process.stderr.write(`${line}\n`),
  };
  if (values.examples !== undefined) {
    if (!existsSync(values.examples)) throw new UsageError(`--examples: no file ${values.examples}`);
    options.examples = parseExamples(readFileSync(values.examples, 'utf8'), values.examples);
  }
  if (values.fuzz) {
    options.fuzz = {
      count: intFlag(values['fuzz-cases'], '--fuzz-cases', 100),
      seed,
      timeoutMs: values['timeout-ms'] === undefined ? undefined : timeoutMs,
      ...fuzzTiming(values),
    };
    // With --out the failing inputs go with the report; else into runs/bench/.
    options.saveFailuresTo =
      values['save-failures'] ??
      (values.out !== undefined
        ? join(values.out, 'failures.jsonl')
        : join('runs', 'bench', `failures-${new Date().toISOString().replace(/[:.]/g, '-')}.jsonl`));
  } else if (values['fuzz-cases'] !== undefined || values['save-failures'] !== undefined) {
    throw new UsageError('--fuzz-cases and --save-failures go with --fuzz');
  }
  if (values.replay !== undefined) {
    if (!existsSync(values.replay)) throw new UsageError(`--replay: no file ${values.replay}`);
    options.replay = { file: values.replay, failures: readFailures(values.replay) };
    options.fuzz = {
      ...(typeof options.fuzz === 'object' ? options.fuzz : {}),
      ...(values['timeout-ms'] !== undefined ? { timeoutMs } : {}),
      ...fuzzTiming(values),
    };
  }
  let policy: Awaited<ReturnType<typeof makePolicy>> | undefined;
  const failUnder = thresholdFlag(values['fail-under']);
  if (values.tasks !== undefined) {
    const tasks = selectTasks(values.tasks, values.split!, values.limit);
    const k = intFlag(values.k, '-k', 4);
    if (k < 1) throw new UsageError('-k must be at least 1');
    const toolMode = toolModeFlag(values.tools);
    policy = await makePolicy(values.policy!, { api: apiOptionsFrom(values) }).catch((err: Error) => {
      if (err instanceof RunFailure) throw err; // a model that cannot start (exit 3), not bad input
      throw new UsageError(err.message);
    });
    options.agent = { policy, tasks, k, timeoutMs: values['timeout-ms'] === undefined ? undefined : timeoutMs, ...(toolMode ? { tools: toolMode } : {}) };
  } else if (values.tools !== undefined) {
    throw new UsageError('--tools goes with --tasks (agent success)');
  } else if (values.k !== undefined || values['fail-under'] !== undefined || values.junit !== undefined) {
    if (values.k === undefined) throw new UsageError(`${values.junit !== undefined ? '--junit' : '--fail-under'} goes with --tasks (agent success)`);
    throw new UsageError('-k goes with --tasks');
  }

  const stop = stopOnSignals((name) => `${name}: stopping; the report covers what ran`);
  const ac = stop.ac;
  options.signal = ac.signal;
  const startedAt = new Date().toISOString();
  try {
    const report = await runBench(options);
    console.log(renderText(report));
    if (values.out !== undefined) {
      mkdirSync(values.out, { recursive: true });
      const json = reportJson(report);
      // The failing inputs too (reportJson leaves them out of the printed line): the viewer shows them.
      const fuzz = report.fuzz && { ...(json.fuzz as Record<string, unknown>), failures: report.fuzz.failures };
      const file = join(values.out, 'bench.json');
      writeFileSync(
        file,
        JSON.stringify(
          { kind: 'bench', started_at: startedAt, finished_at: new Date().toISOString(), interrupted: ac.signal.aborted, ...json, ...(fuzz ? { fuzz } : {}) },
          null,
          2,
        ) + '\n',
      );
      console.log(`\nbench.json: ${file}`);
    }
    if (values.html !== undefined) {
      mkdirSync(dirname(values.html) || '.', { recursive: true });
      writeFileSync(values.html, renderHtml(report));
      console.log(`\nHTML report: ${values.html}`);
    }
    if (values.json) console.log(JSON.stringify(reportJson(report)));
    if (ac.signal.aborted) throw new Interrupted('interrupted: the figures cover what ran');
    const a = report.agent;
    if (a && values.junit !== undefined) {
      writeJunit(values.junit, `mcp-gym bench ${a.policy}`, gateFromStats(a.per_task), failUnder ?? 1);
      console.log(`JUnit: ${values.junit}`);
    }
    if (a && a.episodes > 0 && a.failed_episodes + a.task_errors >= a.episodes) throw allFailed('bench --tasks', a.episodes, a.failures);
    if (a) checkThreshold('bench --tasks', a.success_rate, a.success_ci95, failUnder);
  } finally {
    stop.dispose();
    await policy?.close?.();
  }
}
