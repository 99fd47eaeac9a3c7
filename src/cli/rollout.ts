/** `mcp-gym rollout`, `mcp-gym suites` and `mcp-gym repair`. */
import { stopOnSignals } from './signals.ts';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { makePolicy, TOOL_FORMAT_CHOICES, type ToolFormatChoice } from '../agents/index.ts';
import {
  assertSomeEpisodeRan,
  Environment,
  exportOpenAI,
  loadTasks,
  repairJsonlLines,
  rollout,
  summarize,
  type RolloutSummary,
  type Task,
} from '../env/index.ts';
import { Interrupted, RunFailure } from '../../lib/index.ts';
import { BFCL_SUITE_HELP, describeSuites, generateSuite, SUITE_NAMES } from '../env/suites/index.ts';
import { ProgressBar, table } from './ui.ts';
import { API_FLAGS, apiOptionsFrom, UsageError, intFlag } from './args.ts';
import { ensureHfOnnx, isModelName, resolveModel } from '../trainers/index.ts';
import { TAPE_FLAGS, tapeOptions } from './record-replay.ts';
import { faultOptions, faultsSetting } from './faults.ts';
import { BFCL_GROUPS, faultCounts, parseToolMode, toolModeSetting, type FaultOptions, type ToolModeOptions } from '../env/index.ts';

export async function suitesCommand(): Promise<void> {
  const rows: (string | number)[][] = [['suite', 'train', 'eval', 'servers', 'families']];
  for (const s of describeSuites()) {
    const tasks = generateSuite(s.name);
    rows.push([
      s.name,
      tasks.filter((t) => t.split === 'train').length,
      tasks.filter((t) => t.split === 'eval').length,
      s.servers.join('+'),
      s.families.join(', '),
    ]);
  }
  console.log(table(rows));
  console.log(`\n'all' runs every suite. Use: mcp-gym rollout --suite <name> --split eval --policy expert`);
  console.log(
    `\nBFCL v4 (bfcl-eval 2026.3.23, docs/bfcl.md): bfcl (every category), ${Object.keys(BFCL_GROUPS)
      .filter((g) => g !== 'all')
      .map((g) => `bfcl:${g} (${BFCL_GROUPS[g]!.join(', ')})`)
      .join('; ')}; or bfcl:<category>. Every entry is in the eval split (and, asked for, in train).`,
  );
}

export function selectTasks(
  values: { suite?: string; tasks?: string; split?: string; limit?: string; seed?: string; 'max-difficulty'?: string },
  counts: { train?: number; eval?: number } = {},
): Task[] {
  if (!values.suite && !values.tasks)
    throw new UsageError(`rollout needs --suite <name> (one of ${SUITE_NAMES.join(', ')}, all, or BFCL's: ${BFCL_SUITE_HELP}) or --tasks <file.json|.jsonl>`);
  const split = values.split ?? 'eval';
  if (!['train', 'eval', 'all'].includes(split)) throw new UsageError(`--split must be train, eval or all, got '${split}'`);
  let tasks: Task[];
  if (values.tasks) tasks = loadTasks(values.tasks);
  else {
    const seed = values.seed === undefined ? undefined : intFlag(values.seed, '--seed', 0);
    try {
      tasks = generateSuite(values.suite!, { seed, ...counts });
    } catch (err) {
      // An unknown suite or BFCL category is bad input (exit 2), naming the known ones.
      if (/^Unknown (suite|BFCL category)/.test((err as Error).message)) throw new UsageError((err as Error).message);
      throw err;
    }
  }
  if (split !== 'all') tasks = tasks.filter((t) => t.split === split);
  if (values['max-difficulty'] !== undefined) {
    const d = intFlag(values['max-difficulty'], '--max-difficulty', 5);
    if (d < 1 || d > 5) throw new UsageError(`--max-difficulty must be 1 to 5, got '${values['max-difficulty']}'`);
    tasks = tasks.filter((t) => t.difficulty <= d);
  }
  if (values.limit !== undefined) tasks = tasks.slice(0, intFlag(values.limit, '--limit', 0));
  if (tasks.length === 0) throw new UsageError('no tasks selected');
  return tasks;
}

export function printSummary(s: RolloutSummary): void {
  const rows: (string | number)[][] = [
    ['episodes', s.episodes],
    ['success rate', s.success_rate],
    ['mean reward', s.mean_reward],
    ...Object.entries(s.reward_parts).map(([k, v]) => [`  ${k}`, v] as (string | number)[]),
    ['mean turns', s.mean_turns],
    ['mean tool calls', s.mean_tool_calls],
    ['tool errors', `${s.tool_errors} (${(100 * s.tool_error_rate).toFixed(1)}% of calls)`],
    ['failed episodes', s.failed_episodes],
    ['task errors', s.task_errors],
    ['episodes per second', s.episodes_per_s],
  ];
  console.log(
    table([['', ''], ...rows])
      .split('\n')
      .slice(1)
      .join('\n'),
  );
  if (s.failures.length > 0) {
    const shown = s.failures.slice(0, 10);
    console.log(`\nFailed episodes by cause (mean reward and its parts leave them out):`);
    for (const f of shown)
      console.log(`  ${String(f.episodes).padStart(5)}  ${f.kind === 'task_error' ? 'task error: ' : ''}${f.cause}\n         e.g. episode ${f.example}`);
    if (s.failures.length > shown.length) console.log(`  ... and ${s.failures.length - shown.length} more causes (summary.json has them all)`);
    if (s.task_errors > 0)
      console.log(`  A task error is the task's own bug (a setup call or a check that cannot run), not the agent's failure: fix the task.`);
  }
  if (s.by_family && Object.keys(s.by_family).length > 1) {
    console.log('\n' + table([['family', 'episodes', 'success'], ...Object.entries(s.by_family).map(([k, v]) => [k, v.episodes, v.success_rate])]));
  }
}

/** What a run was made with (DIR/run.json): a resumed run must be made with the same. */
export interface RunSettings {
  policy: string;
  group: number;
  suite: string | null;
  /** The task file, absolute, and its content's sha256. */
  tasks: { file: string; sha256: string } | null;
  split: string;
  limit: number | null;
  max_difficulty: number | null;
  seed: number | null;
  eval_tasks: number | null;
  reward: string;
  temperature: number | null;
  /** `--faults`, in a fixed order (src/env/faults.ts); null without. */
  faults?: string | null;
  /** `--tools` (src/env/tool-modes.ts: toolbelt, search, search:K); null for all. */
  tools?: string | null;
  /** `--tool-format` as asked (auto, native, hermes; a Hugging Face model's tool format, src/agents/hf/tool-format.ts). */
  tool_format?: string;
}

const SETTING_FLAGS: [keyof RunSettings, string][] = [
  ['policy', '--policy'],
  ['group', '--group'],
  ['suite', '--suite'],
  ['tasks', '--tasks'],
  ['split', '--split'],
  ['limit', '--limit'],
  ['max_difficulty', '--max-difficulty'],
  ['seed', '--seed'],
  ['eval_tasks', '--eval-tasks'],
  ['reward', '--reward'],
  ['temperature', '--temperature'],
  ['faults', '--faults'],
  ['tools', '--tools'],
];

/** Why a run made with `was` cannot be continued with `now` (naming the first difference), or undefined. */
export function settingsMismatch(dir: string, was: Partial<RunSettings>, now: RunSettings): string | undefined {
  const shown = (k: keyof RunSettings, v: unknown) => (v === null || v === undefined ? 'none' : k === 'tasks' ? (v as RunSettings['tasks'])!.file : String(v));
  const ta = was.tasks;
  const tb = now.tasks;
  if (ta && tb && ta.file === tb.file && ta.sha256 !== tb.sha256) {
    return `--resume: the task file ${tb.file} changed since the run in ${dir} started (sha256 ${ta.sha256.slice(0, 12)}..., now ${tb.sha256.slice(0, 12)}...): start a new run (another --out)`;
  }
  for (const [k, flag] of SETTING_FLAGS) {
    const a = was[k] ?? null;
    const b = now[k];
    if (JSON.stringify(a) === JSON.stringify(b)) continue;
    let difference: string;
    if (a === null) difference = `used no ${flag}, not ${shown(k, b)}`;
    else if (b !== null) difference = `used ${flag} ${shown(k, a)}, not ${shown(k, b)}`;
    else if (k === 'suite' && now.tasks) difference = `used --suite ${shown(k, a)}, not --tasks ${now.tasks.file}`;
    else if (k === 'tasks' && now.suite) difference = `used --tasks ${shown(k, a)}, not --suite ${now.suite}`;
    else difference = `used ${flag} ${shown(k, a)}, and this one does not`;
    return `--resume: the run in ${dir} ${difference}: resume it with the same settings (see its run.json), or start a new run (another --out)`;
  }
  return undefined;
}

type SettingValues = {
  policy?: string;
  suite?: string;
  tasks?: string;
  split?: string;
  limit?: string;
  'max-difficulty'?: string;
  seed?: string;
  'eval-tasks'?: string;
  temperature?: string;
  faults?: string;
  tools?: string;
  'tool-format'?: string;
};

/** A run's settings from its flags (the task file by path and content hash). */
export function runSettings(values: SettingValues, group: number, reward: string): RunSettings {
  const num = (v: string | undefined) => (v === undefined ? null : Number(v));
  return {
    policy: values.policy!,
    group,
    suite: values.tasks ? null : values.suite!,
    tasks: values.tasks ? { file: resolve(values.tasks), sha256: createHash('sha256').update(readFileSync(values.tasks)).digest('hex') } : null,
    split: values.split ?? 'eval',
    limit: num(values.limit),
    max_difficulty: num(values['max-difficulty']),
    seed: num(values.seed),
    eval_tasks: num(values['eval-tasks']),
    reward,
    temperature: num(values.temperature),
    faults: faultsSetting(faultOptions(values)),
    tools: toolModeSettingOrNull(values.tools),
    tool_format: values['tool-format'] ?? 'auto',
  };
}

/** `--resume` of the run in `outDir`: a usage error when its run.json says it was made with other settings. */
export function checkResume(outDir: string, settings: RunSettings): void {
  const runFile = join(outDir, 'run.json');
  if (!existsSync(runFile)) return;
  let was: Partial<RunSettings>;
  try {
    was = JSON.parse(readFileSync(runFile, 'utf8')) as Partial<RunSettings>;
  } catch (err) {
    throw new UsageError(`--resume: cannot read ${runFile}: ${(err as Error).message}`);
  }
  const mismatch = settingsMismatch(outDir, was, settings);
  if (mismatch) throw new UsageError(mismatch);
}

/** The flags rollout and eval share: which tasks, which policy, where the run goes. */
export const RUN_FLAGS = {
  suite: { type: 'string' },
  tasks: { type: 'string' },
  split: { type: 'string' },
  policy: { type: 'string', default: 'expert' },
  model: { type: 'string' },
  'tool-format': { type: 'string', default: 'auto' },
  concurrency: { type: 'string', default: '8' },
  out: { type: 'string' },
  resume: { type: 'boolean', default: false },
  limit: { type: 'string' },
  'max-difficulty': { type: 'string' },
  'eval-tasks': { type: 'string' },
  seed: { type: 'string' },
  json: { type: 'boolean', default: false },
  reward: { type: 'string', default: 'art' },
  temperature: { type: 'string' },
  'timeout-ms': { type: 'string' },
  stdio: { type: 'boolean', default: false },
  faults: { type: 'string' },
  tools: { type: 'string' },
  ...TAPE_FLAGS,
} as const;

/** `--tools` as run.json records it: null for all (or no flag). */
function toolModeSettingOrNull(value: string | undefined): string | null {
  const o = toolModeFlag(value);
  return o ? toolModeSetting(o) : null;
}

/** `--tools MODE` (src/env/tool-modes.ts): the mode, undefined for all (or no flag); bad input is a usage error. */
export function toolModeFlag(value: string | undefined): ToolModeOptions | undefined {
  if (value === undefined) return undefined;
  let o: ToolModeOptions;
  try {
    o = parseToolMode(value);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  return o.mode === 'all' ? undefined : o;
}

/**
 * `--model` as train and sft take it: a registered name or a .gguf file becomes its checkpoint
 * directory (fetched or converted on first use, with progress lines); anything else is left as it
 * is, for the command's own check. A name that cannot be resolved is a usage error.
 */
export async function resolveModelName(spec: string): Promise<string> {
  if (!isModelName(spec)) return spec;
  try {
    return await resolveModel(spec, (l) => process.stderr.write(`${l}\n`));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/**
 * `--model <dir | file.gguf | name>`: the model directory sampled in-process (`--policy onnx:<dir>`):
 * the embedded model's, or a Hugging Face checkpoint's (a .gguf file converted, a registered name
 * fetched: src/trainers/models.ts), exported to ONNX first when it has no current export. Sets
 * `values.policy`, so that the run's settings record it.
 */
export async function applyModelFlag(
  values: { policy?: string; model?: string; 'tool-format'?: string },
  argv: string[],
  log: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): Promise<void> {
  toolFormatFlag(values['tool-format']);
  if (values.model === undefined) return;
  if (argv.some((a) => a === '--policy' || a.startsWith('--policy=')))
    throw new UsageError('give --model <dir> or --policy, not both (--model <dir> is --policy onnx:<dir>)');
  let spec = values.model;
  try {
    spec = await resolveModel(spec, log);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const dir = resolve(spec);
  if (!existsSync(join(dir, 'config.json'))) throw new UsageError(`--model: no model directory at ${dir} (no config.json)`);
  try {
    ensureHfOnnx(dir, log);
  } catch (err) {
    throw new UsageError(`--model: ${(err as Error).message}`);
  }
  values.policy = `onnx:${dir}`;
}

/** `--tool-format`: auto (default), native or hermes. */
export function toolFormatFlag(v: string | undefined): ToolFormatChoice {
  const f = v ?? 'auto';
  if (!(TOOL_FORMAT_CHOICES as readonly string[]).includes(f)) throw new UsageError(`--tool-format must be ${TOOL_FORMAT_CHOICES.join(', ')}, got '${f}'`);
  return f as ToolFormatChoice;
}

/**
 * The environment of rollout and eval: bundled servers in-process or (`--stdio`) as processes, a
 * tool call's limit (`--timeout-ms`), the reward, and warnings on stderr (the first on a line of
 * its own, after the progress bar).
 */
export function cliEnvironment(
  values: { stdio?: boolean; 'timeout-ms'?: string; tools?: string },
  reward: string,
  serverOptions: { delayMs?: number } = {},
  tape: ReturnType<typeof tapeOptions> = {},
  faults?: FaultOptions,
): Environment {
  let warned = false;
  const tools = toolModeFlag(values.tools);
  return new Environment({
    ...tape,
    ...(faults ? { faults } : {}),
    ...(tools ? { tools } : {}),
    bundled: values.stdio ? 'stdio' : 'inprocess',
    serverOptions,
    callTimeoutMs: values['timeout-ms'] === undefined ? undefined : intFlag(values['timeout-ms'], '--timeout-ms', 10_000),
    reward,
    onWarning: (message) => {
      process.stderr.write(`${warned ? '' : '\n'}mcp-gym: warning: ${message}\n`);
      warned = true;
    },
  });
}

export async function rolloutCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      ...RUN_FLAGS,
      group: { type: 'string', default: '1' },
      'delay-ms': { type: 'string' },
      'export-openai': { type: 'string' },
      ...API_FLAGS,
    },
  });
  const api = apiOptionsFrom(values);
  const group = intFlag(values.group, '--group', 1);
  if (group < 1) throw new UsageError(`--group must be at least 1, got '${values.group}'`);
  const concurrency = intFlag(values.concurrency, '--concurrency', 8);
  if (concurrency < 1) throw new UsageError(`--concurrency must be at least 1, got '${values.concurrency}'`);
  const reward = values.reward!;
  if (!['art', 'rlvr', 'composer', 'verifier'].includes(reward)) throw new UsageError(`--reward must be art, rlvr, composer or verifier, got '${reward}'`);
  const tasks = selectTasks(values, values['eval-tasks'] === undefined ? {} : { eval: intFlag(values['eval-tasks'], '--eval-tasks', 40) });
  const tape = tapeOptions(values, values.resume === true);
  const outDir = values.out ?? join('runs', `rollout-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  const file = join(outDir, 'trajectories.jsonl');
  const held = existsSync(file) && statSync(file).size > 0;
  if (!values.resume && held) {
    throw new UsageError(`${file} already holds trajectories: pass --resume to continue that run, or choose another --out`);
  }
  await applyModelFlag(values, argv);
  const settings = runSettings(values, group, reward);
  const runFile = join(outDir, 'run.json');
  if (values.resume) checkResume(outDir, settings);
  let policy: Awaited<ReturnType<typeof makePolicy>>;
  try {
    policy = await makePolicy(values.policy!, {
      temperature: values.temperature === undefined ? undefined : Number(values.temperature),
      seed: values.seed === undefined ? 1 : intFlag(values.seed, '--seed', 0),
      api,
      chatTemplate: { toolFormat: toolFormatFlag(values['tool-format']) },
    });
  } catch (err) {
    if (err instanceof RunFailure) throw err; // a model that cannot start (exit 3), not bad input
    throw new UsageError((err as Error).message);
  }
  mkdirSync(outDir, { recursive: true });
  // Recorded when the run starts, so that a resumed run can be checked against it.
  if (!existsSync(runFile) || !values.resume) writeFileSync(runFile, JSON.stringify({ ...settings, started_at: new Date().toISOString() }, null, 2) + '\n');
  const env = cliEnvironment(
    values,
    reward,
    { delayMs: values['delay-ms'] === undefined ? undefined : intFlag(values['delay-ms'], '--delay-ms', 0) },
    tape,
    faultOptions(values),
  );
  const bar = new ProgressBar('rollout', tasks.length * group);
  let successes = 0;
  const stop = stopOnSignals((name) => `${name}: stopping; the finished episodes are kept`);
  const ac = stop.ac;
  try {
    const result = await rollout(env, policy, tasks, {
      group,
      concurrency,
      out: file,
      resume: values.resume,
      signal: ac.signal,
      onEpisode: (t, done) => {
        if (t.success) successes++;
        bar.update(done, `success ${((100 * successes) / Math.max(1, done)).toFixed(0)}%`);
      },
    });
    bar.done();
    const summary = { ...summarize(result.trajectories, result.seconds), resumed: result.resumed, out: file };
    // Episodes per second counts only the episodes this invocation ran.
    summary.episodes_per_s = result.seconds > 0 ? (result.trajectories.length - result.resumed) / result.seconds : 0;
    writeFileSync(join(outDir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
    if (values['export-openai']) {
      const n = exportOpenAI(result.trajectories, values['export-openai'], { onlySuccessful: true });
      console.log(`exported ${n} successful trajectories in the OpenAI chat fine-tuning format to ${values['export-openai']}`);
    }
    console.log(
      `\n${tasks.length} tasks x ${group} = ${result.trajectories.length} episodes (${result.resumed} resumed) with policy '${policy.id}' -> ${file}`,
    );
    printSummary(summary);
    if (values.faults !== undefined)
      console.log(
        `injected faults (--faults ${settings.faults}): ${
          Object.entries(faultCounts(result.trajectories))
            .map(([k, v]) => `${k} ${v}`)
            .join(', ') || 'none'
        }`,
      );
    if (values.json) console.log(JSON.stringify(summary));
    if (ac.signal.aborted)
      throw new Interrupted(`interrupted: the ${result.trajectories.length} finished episodes are saved in ${file}; continue with --resume`);
    assertSomeEpisodeRan(result.trajectories, 'rollout');
  } finally {
    stop.dispose();
    await env.close();
    await policy.close?.();
  }
}

/** `mcp-gym repair FILE [--drop]`: takes the lines that are not whole JSON records out of a JSONL file. */
export async function repairCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: { drop: { type: 'boolean', default: false } } });
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('repair needs one file: mcp-gym repair <trajectories.jsonl> [--drop]');
  if (!existsSync(file)) throw new UsageError(`repair: ${file}: no such file`);
  const r = repairJsonlLines(file, { drop: values.drop });
  const what = r.validated ? 'trajectories' : 'JSON records';
  if (r.bad.length === 0) {
    console.log(`${file}: all ${r.lines} lines are whole ${what}; nothing to repair`);
    return;
  }
  const lines = r.bad.length > 20 ? `${r.bad.slice(0, 20).join(', ')}, ...` : r.bad.join(', ');
  console.log(
    `${file}: ${r.bad.length} of ${r.lines} lines were not whole ${what} (line${r.bad.length > 1 ? 's' : ''} ${lines}): ` +
      `${r.badFile ? `moved to ${r.badFile}` : 'dropped'}; ${r.kept} kept. A resumed run will run those episodes again.`,
  );
}
