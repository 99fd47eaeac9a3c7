/** `mcp-gym tasks generate`: verified task synthesis for any MCP server (src/env/synthesis.ts). */
import { stopOnSignals } from './signals.ts';
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { ExpertPolicy, makeChatModel } from '../agents/index.ts';
import { Environment, REJECTION_REASONS, synthesizeTasks, type ServerRef } from '../env/index.ts';
import { generateSuite } from '../env/suites/index.ts';
import { bundledServers } from '../../servers/index.ts';

const SERVER_NAMES = Object.keys(bundledServers);
import { API_FLAGS, API_HELP, apiOptionsFrom, intFlag, numFlag, serverFromFlags, UsageError } from './args.ts';

export const TASKS_EXPORT_HELP = `Usage: mcp-gym tasks export --suite S --out tasks.jsonl [--split eval|train|all] [--eval-tasks N] [--train-tasks N] [--seed S] [--force]

Writes a suite's tasks as a task file (JSON lines), the format --tasks reads everywhere: a bundled
suite, or BFCL's (bfcl, bfcl:<group>, bfcl:<category>; docs/bfcl.md), whose tasks name their server
as bfcl:<category>/<entry> and so run wherever mcp-gym and BFCL's Python environment are installed.
Default split: eval (--split train or all for the others); counts as the suites' (BFCL: every entry).
`;

/** `mcp-gym tasks export`: a suite's tasks as a JSONL task file. */
function exportTasks(argv: string[]): void {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        suite: { type: 'string' },
        out: { type: 'string' },
        split: { type: 'string', default: 'eval' },
        'eval-tasks': { type: 'string' },
        'train-tasks': { type: 'string' },
        seed: { type: 'string' },
        force: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (err) {
    throw new UsageError(`${(err as Error).message.split('\n')[0]} Run mcp-gym tasks export --help`);
  }
  if (values.help) {
    process.stdout.write(TASKS_EXPORT_HELP);
    return;
  }
  if (!values.suite) throw new UsageError('tasks export needs --suite <name> (mcp-gym tasks export --help)');
  if (!values.out) throw new UsageError('tasks export needs --out <tasks.jsonl>');
  if (existsSync(values.out) && !values.force) throw new UsageError(`--out: ${values.out} exists; give --force to overwrite it`);
  if (!['train', 'eval', 'all'].includes(values.split!)) throw new UsageError(`--split must be train, eval or all, got '${values.split}'`);
  const counts = {
    ...(values['eval-tasks'] !== undefined ? { eval: intFlag(values['eval-tasks'], '--eval-tasks', 40) } : {}),
    ...(values['train-tasks'] !== undefined ? { train: intFlag(values['train-tasks'], '--train-tasks', 200) } : {}),
    ...(values.seed !== undefined ? { seed: intFlag(values.seed, '--seed', 0) } : {}),
  };
  let tasks;
  try {
    tasks = generateSuite(values.suite, counts);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.split !== 'all') tasks = tasks.filter((t) => t.split === values.split);
  // One id per task in a file: a BFCL suite's train copies share their entries' ids, so --split all keeps the eval ones.
  const seen = new Set<string>();
  tasks = tasks.filter((t) => !seen.has(t.id) && seen.add(t.id));
  mkdirSync(dirname(values.out), { recursive: true });
  writeFileSync(values.out, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
  process.stderr.write(`${tasks.length} tasks of ${values.suite} -> ${values.out}\n`);
}

export const TASKS_HELP = `Usage: mcp-gym tasks export --suite S --out F   (a suite as a task file; tasks export --help)
       mcp-gym tasks generate (--stdio "<command line>" | --url URL | --server NAME) --generator MODEL -n N --out tasks.jsonl [options]

A generator model sees the server's tools and proposes tasks with a reference solution and checks.
A candidate is kept only if it is a valid task, not a near-duplicate of one kept, its reference
solution passes every check on a fresh episode, and an agent that does nothing fails every check.

Server:     --stdio "CMD ARGS"   a stdio server (split like a shell)   --url URL  a streamable HTTP server
            --token T  --header K:V (repeatable, with --url)           --server NAME  a bundled server (${SERVER_NAMES.join(', ')})
            --alias A            the server's name in the tasks (default: server, or the bundled name)
Generator:  --generator MODEL    openai:<model> or anthropic:<model> (with the API flags below)
Output:     -n N                 tasks to keep (default 10)             --out F   the task file (JSONL; refused if it exists, unless --force)
            --rejections F       every rejected candidate with its reason (default <out>.rejections.jsonl)
            --per-request K      candidates asked for per request (default 5)
            --max-requests R     requests at most (default: three candidates per task wanted)
            --eval-fraction F    share of kept tasks in the eval split (default 0.2)
            --id-prefix P        task ids P-0001, ... (default gen)     --similarity S  prompts this alike are duplicates (default 0.9)
            --json               also print a JSON summary, the last line
${API_HELP}
`;

export async function tasksCommand(argv: string[]): Promise<void> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h' || sub === 'help') {
    process.stdout.write(TASKS_HELP);
    return;
  }
  if (sub === 'export') return exportTasks(rest);
  if (sub !== 'generate') throw new UsageError(`Unknown 'tasks' command '${sub}'; the commands are: generate, export. Run mcp-gym tasks --help`);
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: {
        stdio: { type: 'string' },
        url: { type: 'string' },
        token: { type: 'string' },
        header: { type: 'string', multiple: true },
        server: { type: 'string' },
        alias: { type: 'string' },
        generator: { type: 'string' },
        n: { type: 'string', short: 'n' },
        out: { type: 'string' },
        force: { type: 'boolean', default: false },
        rejections: { type: 'string' },
        'per-request': { type: 'string' },
        'max-requests': { type: 'string' },
        'eval-fraction': { type: 'string' },
        'id-prefix': { type: 'string' },
        similarity: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
        ...API_FLAGS,
      },
    });
  } catch (err) {
    throw new UsageError(`${(err as Error).message.split('\n')[0]} Run mcp-gym tasks --help`);
  }
  const { values } = parsed;
  if (values.help) {
    process.stdout.write(TASKS_HELP);
    return;
  }
  const given = [values.stdio, values.url, values.server].filter((v) => v !== undefined).length;
  if (given !== 1) throw new UsageError('tasks generate needs exactly one server: --stdio "<command line>", --url URL or --server NAME');
  if ((values.token !== undefined || values.header) && values.url === undefined) throw new UsageError('--token and --header go with --url');
  if (values.server !== undefined && !SERVER_NAMES.includes(values.server))
    throw new UsageError(`--server must be a bundled server (${SERVER_NAMES.join(', ')}), got '${values.server}'`);
  if (!values.generator) throw new UsageError('tasks generate needs --generator openai:<model> or anthropic:<model>');
  if (!/^(openai|anthropic):./.test(values.generator))
    throw new UsageError(`--generator must be openai:<model> or anthropic:<model> (a model that writes text), got '${values.generator}'`);
  if (!values.out) throw new UsageError('tasks generate needs --out <tasks.jsonl>');
  if (existsSync(values.out) && !values.force) throw new UsageError(`--out: ${values.out} exists; give --force to overwrite it`);
  const alias = values.alias ?? values.server ?? 'server';
  if (!/^[a-z][a-z0-9_-]{0,31}$/.test(alias))
    throw new UsageError(`--alias must be 1-32 lower-case letters, digits, _ or -, starting with a letter, got '${alias}'`);
  const ref: ServerRef = values.server ?? serverFromFlags(values)!;
  const n = intFlag(values.n, '-n', 10);
  if (n < 1) throw new UsageError('-n must be at least 1');
  const perRequest = intFlag(values['per-request'], '--per-request', 5);
  if (perRequest < 1) throw new UsageError('--per-request must be at least 1');
  const maxRequests = values['max-requests'] === undefined ? undefined : intFlag(values['max-requests'], '--max-requests', 1);
  const evalFraction = numFlag(values['eval-fraction'], '--eval-fraction', { min: 0, max: 1 });
  const similarity = numFlag(values.similarity, '--similarity', { min: 0, max: 1 });
  const rejectionsFile = values.rejections ?? `${values.out.replace(/\.jsonl?$/, '')}.rejections.jsonl`;

  const generator = await makeChatModel(values.generator, apiOptionsFrom(values)).catch((err: Error) => {
    throw new UsageError(err.message);
  });
  mkdirSync(dirname(values.out) || '.', { recursive: true });
  // The file is (over)written from the first kept task on: a server that fails to start leaves an old one as it was.
  let written = false;
  const env = new Environment();
  const stop = stopOnSignals((name) => `${name}: stopping; the tasks kept so far stay in the file`);
  const ac = stop.ac;
  try {
    const r = await synthesizeTasks({
      generator,
      servers: { [alias]: ref },
      env,
      reference: new ExpertPolicy(),
      n,
      perRequest,
      ...(maxRequests !== undefined ? { maxRequests } : {}),
      ...(evalFraction !== undefined ? { evalFraction } : {}),
      ...(similarity !== undefined ? { duplicateSimilarity: similarity } : {}),
      ...(values['id-prefix'] ? { idPrefix: values['id-prefix'] } : {}),
      // Each kept task is written as it is kept: an interrupted run keeps what it verified.
      onTask: (t) => {
        (written ? appendFileSync : writeFileSync)(values.out!, `${JSON.stringify(t)}\n`);
        written = true;
      },
      onLog: (l) => process.stderr.write(`${l}\n`),
      signal: ac.signal,
    });
    if (!written) writeFileSync(values.out, '');
    writeFileSync(rejectionsFile, r.rejections.map((x) => JSON.stringify(x)).join('\n') + (r.rejections.length ? '\n' : ''));
    const counts = REJECTION_REASONS.map((k) => `${k} ${r.rejected[k]}`).join(', ');
    console.log(
      `tasks generate: kept ${r.tasks.length} of ${r.candidates} candidates from ${r.requests} requests (${r.tasks.length < n ? `${n} wanted` : 'all wanted'})`,
    );
    console.log(`rejected: ${counts}`);
    console.log(
      `tasks: ${values.out} (${r.tasks.filter((t) => t.split === 'train').length} train, ${r.tasks.filter((t) => t.split === 'eval').length} eval); rejections: ${rejectionsFile}`,
    );
    if (ac.signal.aborted) console.log('Interrupted: the file holds the tasks verified so far.');
    if (values.json)
      console.log(
        JSON.stringify({
          kept: r.tasks.length,
          candidates: r.candidates,
          requests: r.requests,
          rejected: r.rejected,
          out: values.out,
          rejections: rejectionsFile,
          usage: generator.usage?.(),
        }),
      );
  } finally {
    stop.dispose();
    await env.close();
    await generator.close?.();
  }
}
