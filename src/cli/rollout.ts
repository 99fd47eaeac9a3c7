/** `mcp-gym rollout` and `mcp-gym suites`. */
import { setMaxListeners } from 'node:events';
import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { makePolicy } from '../agents/index.ts';
import { Environment, exportOpenAI, loadTasks, rollout, summarize, type RolloutSummary, type Task } from '../env/index.ts';
import { describeSuites, generateSuite, SUITE_NAMES } from '../env/suites/index.ts';
import { ProgressBar, table } from './ui.ts';
import { UsageError, intFlag } from './args.ts';

export async function suitesCommand(): Promise<void> {
  const rows: (string | number)[][] = [['suite', 'train', 'eval', 'servers', 'families']];
  for (const s of describeSuites()) {
    const tasks = generateSuite(s.name);
    rows.push([s.name, tasks.filter((t) => t.split === 'train').length, tasks.filter((t) => t.split === 'eval').length, s.servers.join('+'), s.families.join(', ')]);
  }
  console.log(table(rows));
  console.log(`\n'all' runs every suite. Use: mcp-gym rollout --suite <name> --split eval --policy expert`);
}

export function selectTasks(values: { suite?: string; tasks?: string; split?: string; limit?: string; seed?: string; 'max-difficulty'?: string }, counts: { train?: number; eval?: number } = {}): Task[] {
  if (!values.suite && !values.tasks) throw new UsageError(`rollout needs --suite <name> (one of ${SUITE_NAMES.join(', ')}, all) or --tasks <file.json|.jsonl>`);
  const split = values.split ?? 'eval';
  if (!['train', 'eval', 'all'].includes(split)) throw new UsageError(`--split must be train, eval or all, got '${split}'`);
  let tasks = values.tasks ? loadTasks(values.tasks) : generateSuite(values.suite!, { seed: values.seed === undefined ? undefined : intFlag(values.seed, '--seed', 0), ...counts });
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
    ['episodes per second', s.episodes_per_s],
  ];
  console.log(table([['', ''], ...rows]).split('\n').slice(1).join('\n'));
  if (s.by_family && Object.keys(s.by_family).length > 1) {
    console.log('\n' + table([['family', 'episodes', 'success'], ...Object.entries(s.by_family).map(([k, v]) => [k, v.episodes, v.success_rate])]));
  }
}

export async function rolloutCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      suite: { type: 'string' },
      tasks: { type: 'string' },
      split: { type: 'string' },
      policy: { type: 'string', default: 'expert' },
      group: { type: 'string', default: '1' },
      concurrency: { type: 'string', default: '8' },
      out: { type: 'string' },
      resume: { type: 'boolean', default: false },
      limit: { type: 'string' },
      'max-difficulty': { type: 'string' },
      'eval-tasks': { type: 'string' },
      seed: { type: 'string' },
      json: { type: 'boolean', default: false },
      'delay-ms': { type: 'string' },
      'timeout-ms': { type: 'string' },
      stdio: { type: 'boolean', default: false },
      reward: { type: 'string', default: 'art' },
      'export-openai': { type: 'string' },
      temperature: { type: 'string' },
    },
  });
  const tasks = selectTasks(values, values['eval-tasks'] === undefined ? {} : { eval: intFlag(values['eval-tasks'], '--eval-tasks', 40) });
  const policy = await makePolicy(values.policy!, { temperature: values.temperature === undefined ? undefined : Number(values.temperature) });
  const group = intFlag(values.group, '--group', 1);
  if (group < 1) throw new UsageError('--group must be at least 1');
  const reward = values.reward!;
  if (!['art', 'rlvr', 'composer', 'verifier'].includes(reward)) throw new UsageError(`--reward must be art, rlvr, composer or verifier, got '${reward}'`);
  const outDir = values.out ?? join('runs', `rollout-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  const file = join(outDir, 'trajectories.jsonl');
  if (!values.resume && existsSync(file) && statSync(file).size > 0) {
    throw new UsageError(`${file} already holds trajectories: pass --resume to continue that run, or choose another --out`);
  }
  mkdirSync(outDir, { recursive: true });
  const env = new Environment({
    bundled: values.stdio ? 'stdio' : 'inprocess',
    serverOptions: { delayMs: values['delay-ms'] === undefined ? undefined : intFlag(values['delay-ms'], '--delay-ms', 0) },
    callTimeoutMs: values['timeout-ms'] === undefined ? undefined : intFlag(values['timeout-ms'], '--timeout-ms', 10_000),
    rewards: { total: reward as 'art' },
  });
  const bar = new ProgressBar('rollout', tasks.length * group);
  let successes = 0;
  const ac = new AbortController();
  setMaxListeners(10_000, ac.signal); // every tool call in flight listens to it (and lets go when done)
  const onSigint = () => ac.abort();
  process.once('SIGINT', onSigint);
  try {
    const result = await rollout(env, policy, tasks, {
      group,
      concurrency: intFlag(values.concurrency, '--concurrency', 8),
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
    console.log(`\n${tasks.length} tasks x ${group} = ${result.trajectories.length} episodes (${result.resumed} resumed) with policy '${policy.id}' -> ${file}`);
    printSummary(summary);
    if (ac.signal.aborted) console.log('\nInterrupted: the finished episodes are saved; continue with --resume.');
    if (values.json) console.log(JSON.stringify(summary));
  } finally {
    process.off('SIGINT', onSigint);
    await env.close();
    await policy.close?.();
  }
}
