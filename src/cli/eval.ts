/**
 * `mcp-gym eval`: any policy (the embedded model, an OpenAI-compatible server, Anthropic's API,
 * the expert) on bundled suites or a task file, K samples per task: pass@1, pass@k, pass^k, the
 * mean reward and its parts, turns, tool calls, tool errors by kind and by tool, tokens, with 95%
 * intervals over tasks (src/bench/eval.ts). Trajectories go to `<out>/trajectories.jsonl` as each
 * episode ends; `--resume` runs only the missing ones; `<out>/eval.json` and an HTML report are
 * written at the end.
 */
import { stopOnSignals } from './signals.ts';
import { existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import pLimit from 'p-limit';
import { makeChatModel, makePolicy, shownUrl } from '../agents/index.ts';
import { bfclReport, bfclRows, evalReport, evalRows, renderEvalHtml, writeBfclResultDir } from '../bench/index.ts';
import { checkThreshold, gateTasks, renderFeedbackText, suiteName, writeJunit } from '../bench/index.ts';
import {
  applyRuler,
  assertSomeEpisodeRan,
  JudgeError,
  rollout,
  TrajectoryWriter,
  type ChatModel,
  type RulerOptions,
  type Task,
  type Trajectory,
} from '../env/index.ts';
import { Interrupted, RunFailure } from '../../lib/index.ts';
import { BFCL_SUITE_HELP, SUITE_NAMES } from '../env/suites/index.ts';
import { compareSurfaceSets, driftWarning, readToolSurfaces, surfacesHash, type SurfacesDrift, type ToolSurfaces } from '../tools/index.ts';
import { API_FLAGS, API_HELP, apiOptionsFrom, intFlag, numFlag, thresholdFlag, UsageError } from './args.ts';
import { applyModelFlag, checkResume, cliEnvironment, RUN_FLAGS, runSettings, selectTasks, toolFormatFlag } from './rollout.ts';
import { TAPE_HELP, tapeOptions } from './record-replay.ts';
import { FAULTS_HELP, faultedEval, faultOptions, printFaultComparison } from './faults.ts';
import { ProgressBar, table } from './ui.ts';

export const EVAL_HELP = `mcp-gym eval: a policy on a task suite or a task file, k samples per task

  --suite S[,S2...] | --tasks F   bundled suites (${SUITE_NAMES.join(', ')}, all), BFCL's (${BFCL_SUITE_HELP}:
                                  every entry, or --eval-tasks N a category; docs/bfcl.md), or a .json/.jsonl task
                                  file (its servers may be any stdio command or URL: third-party servers work)
  --bfcl-results DIR      BFCL tasks: also write each entry's first sample in bfcl-eval's result-file format
                          (DIR/<model>/<group>/BFCL_v4_<category>_result.json), for BFCL's own evaluate command
  --policy P              expert (default), random[:seed], onnx:<model dir>, openai:<model>, anthropic:<model>
  --model M               a model sampled in-process: a directory (the embedded model's or a Hugging Face
                          checkpoint's: Qwen3, Qwen2, Llama; exported to ONNX in DIR/onnx when needed), a
                          .gguf file (converted once) or a registered model (smollm2-135m; mcp-gym models)
  --tool-format F         a Hugging Face model's tools: auto (default: its template's own, else hermes), native, hermes
  -k, --k K               samples per task (default 4)
  --split eval|train|all  (default eval)   --limit N (first N tasks of each suite)   --max-difficulty D
  --eval-tasks N          generated eval tasks per suite (default 40)   --seed S
  --concurrency C         episodes at once (default 8)
  --out DIR               trajectories.jsonl, eval.json, report.html (default runs/eval-<time>)
  --resume                continue DIR's evaluation: run only the episodes it lacks
  --html F                also write the HTML report to F (it is always written to DIR/report.html)
  --json                  print the report as one JSON line last
  --fail-under X          exit 6 when the success rate (pass@1) is below X (0-1), for CI
  --junit F               JUnit XML in F: a test case per task, failed when its success rate is below
                          --fail-under (default: when any of its episodes did not succeed)
  --reward R              art (default), rlvr, composer, verifier
  --temperature T         sampling temperature (onnx and API policies)
  --timeout-ms N          a tool call's limit      --stdio   bundled servers as stdio processes
  --tools MODE            how the agent sees its tools: all (default), toolbelt (list_tools, inspect_tool,
                          add_tool, remove_tool), search (search_tools, K results: search:K, default 3)
${TAPE_HELP}
${FAULTS_HELP}
                          (eval runs the tasks twice, without and with the faults, side by side; DIR/faults/)
RULER (an LLM judge scores each task's k episodes together):
  --ruler listwise|pairwise  --judge openai:<model>|anthropic:<model>  --judge-base-url URL  --judge-api-key-env NAME
  --ruler-votes N (pairwise, default 3)  --ruler-weight W (default 1)  --ruler-verifier-weight W (default 0)  --ruler-rubric TEXT
${API_HELP}
`;

export async function evalCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      ...RUN_FLAGS,
      k: { type: 'string', short: 'k', default: '4' },
      html: { type: 'string' },
      'fail-under': { type: 'string' },
      junit: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
      ruler: { type: 'string' },
      judge: { type: 'string' },
      'judge-base-url': { type: 'string' },
      'judge-api-key-env': { type: 'string' },
      'ruler-votes': { type: 'string' },
      'ruler-weight': { type: 'string' },
      'ruler-verifier-weight': { type: 'string' },
      'ruler-rubric': { type: 'string' },
      'bfcl-results': { type: 'string' },
      ...API_FLAGS,
    },
  });
  if (values.help) {
    process.stdout.write(EVAL_HELP);
    return;
  }
  const k = intFlag(values.k, '--k', 4);
  if (k < 1) throw new UsageError(`-k must be at least 1, got '${values.k}'`);
  const failUnder = thresholdFlag(values['fail-under']);
  const concurrency = intFlag(values.concurrency, '--concurrency', 8);
  if (concurrency < 1) throw new UsageError(`--concurrency must be at least 1, got '${values.concurrency}'`);
  const reward = values.reward!;
  if (!['art', 'rlvr', 'composer', 'verifier'].includes(reward)) throw new UsageError(`--reward must be art, rlvr, composer or verifier, got '${reward}'`);
  const temperature = numFlag(values.temperature, '--temperature', { min: 0 });
  const api = apiOptionsFrom(values);
  const ruler = values.ruler;
  if (ruler !== undefined && ruler !== 'listwise' && ruler !== 'pairwise') throw new UsageError(`--ruler must be listwise or pairwise, got '${ruler}'`);
  if (ruler && !values.judge) throw new UsageError('--ruler needs a judge: --judge openai:<model> (--judge-base-url URL) or anthropic:<model>');
  if (!ruler && values.judge) throw new UsageError('--judge without --ruler: say how it judges, --ruler listwise or --ruler pairwise');
  if (ruler && k < 2) throw new UsageError('--ruler compares the k episodes of a task: -k must be at least 2');
  if (!values.suite && !values.tasks)
    throw new UsageError(`eval needs --suite <name>[,<name>...] (${SUITE_NAMES.join(', ')}, all) or --tasks <file.json|.jsonl>`);
  const counts = values['eval-tasks'] === undefined ? {} : { eval: intFlag(values['eval-tasks'], '--eval-tasks', 40) };
  let tasks: Task[];
  if (values.tasks) tasks = selectTasks(values, counts);
  else {
    const suites = values.suite!.split(',').map((s) => s.trim());
    if (suites.includes('')) throw new UsageError(`--suite takes names separated by commas, got '${values.suite}'`);
    tasks = suites.flatMap((suite) => selectTasks({ ...values, suite }, counts));
  }

  const tape = tapeOptions(values, values.resume === true);
  const outDir = values.out ?? join('runs', `eval-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  const file = join(outDir, 'trajectories.jsonl');
  if (!values.resume && existsSync(file) && statSync(file).size > 0) {
    throw new UsageError(`${file} already holds trajectories: pass --resume to continue that evaluation, or choose another --out`);
  }
  await applyModelFlag(values, argv);
  const settings = runSettings(values, k, reward);
  const runFile = join(outDir, 'run.json');
  if (values.resume) checkResume(outDir, settings);
  let judge: (ChatModel & { close?(): Promise<void> }) | undefined;
  let policy;
  try {
    if (ruler)
      judge = await makeChatModel(values.judge!, { baseURL: values['judge-base-url'], apiKeyEnv: values['judge-api-key-env'] }).catch((err: Error) => {
        throw new Error(`--judge: ${err.message}`);
      });
    policy = await makePolicy(values.policy!, {
      seed: values.seed === undefined ? 1 : intFlag(values.seed, '--seed', 0),
      ...(temperature !== undefined ? { temperature } : {}),
      ...(api.topP !== undefined ? { topP: api.topP as number } : {}),
      api,
      chatTemplate: { toolFormat: toolFormatFlag(values['tool-format']) },
    });
  } catch (err) {
    if (err instanceof RunFailure) throw err; // a model that cannot start (exit 3), not bad input
    throw new UsageError((err as Error).message);
  }
  mkdirSync(outDir, { recursive: true });
  // What the evaluation was made with (no key: only the name of its variable), checked on --resume.
  if (!existsSync(runFile) || !values.resume) {
    const { baseURL, baseURLs, apiKeyEnv, maxTokens, thinking } = api as {
      baseURL?: string;
      baseURLs?: string[];
      apiKeyEnv?: string;
      maxTokens?: number;
      thinking?: unknown;
    };
    writeFileSync(
      runFile,
      JSON.stringify(
        {
          ...settings,
          kind: 'eval',
          api: {
            base_url: baseURLs?.map(shownUrl) ?? (baseURL ? shownUrl(baseURL) : null),
            api_key_env: apiKeyEnv ?? null,
            max_tokens: maxTokens ?? null,
            thinking: thinking ?? null,
          },
          started_at: new Date().toISOString(),
        },
        null,
        2,
      ) + '\n',
    );
  }
  const env = cliEnvironment(values, reward, {}, tape);
  // --faults: the same environment with the faults, for a second run beside the first.
  const faults = faultOptions(values);
  const faultEnv = faults ? env.withFaults(faults) : undefined;
  const bar = new ProgressBar('eval', tasks.length * k);
  let successes = 0;
  const stop = stopOnSignals((name) => `${name}: stopping; the finished episodes are kept`);
  const ac = stop.ac;
  try {
    const surface = await evalToolSurface(env, tasks, values.policy!);
    const result = await rollout(env, policy, tasks, {
      group: k,
      concurrency,
      out: file,
      resume: values.resume,
      signal: ac.signal,
      iteration: 'eval',
      maxFailures: k,
      onEpisode: (t, done) => {
        if (t.success) successes++;
        bar.update(done, `success ${((100 * successes) / Math.max(1, done)).toFixed(0)}%`);
      },
    });
    bar.done();
    let judged: { groups: number; failures: number; calls: number; cached: number; first_error?: string } | undefined;
    if (judge && ruler) {
      // Each task's k episodes are judged together; the judged rewards replace the file's.
      const rulerOptions: RulerOptions = {
        mode: ruler,
        cacheDir: join(outDir, 'judge-cache'),
        ...(values['ruler-votes'] !== undefined ? { votes: intFlag(values['ruler-votes'], '--ruler-votes', 3) } : {}),
        ...(values['ruler-rubric'] !== undefined ? { rubric: values['ruler-rubric'] } : {}),
        weights: {
          ruler: numFlag(values['ruler-weight'], '--ruler-weight') ?? 1,
          verifier: numFlag(values['ruler-verifier-weight'], '--ruler-verifier-weight') ?? 0,
        },
        signal: ac.signal,
      };
      judged = await judgeGroups(result.trajectories, judge, rulerOptions);
      const tmp = `${file}.judged-${process.pid}`;
      const w = new TrajectoryWriter(tmp);
      for (const t of result.trajectories) w.write(t);
      w.close();
      renameSync(tmp, file);
    }
    const report = evalReport(policy.id, k, tasks, result.trajectories, result.seconds);
    const faulted =
      faults && faultEnv && !ac.signal.aborted
        ? await faultedEval({
            env: faultEnv,
            policy,
            tasks,
            k,
            concurrency,
            outDir,
            resume: values.resume === true,
            signal: ac.signal,
            faults,
            without: report,
          })
        : undefined;
    const usage = policy.usage?.();
    // BFCL's figures (its accuracy per category, its summary), when the tasks are BFCL's.
    const bfcl = await bfclReport(tasks, result.trajectories, k);
    const bfclFiles = values['bfcl-results'] ? writeBfclResultDir(values['bfcl-results'], tasks, result.trajectories) : [];
    const out = {
      ...report,
      ...(bfcl ? { bfcl: { ...bfcl, ...(values['bfcl-results'] ? { results: values['bfcl-results'], files: bfclFiles } : {}) } } : {}),
      tool_surfaces: surface,
      usage: usage ?? null,
      ...(judged ? { judge: { id: judge!.id, mode: ruler, ...judged, usage: (judge as { usage?: () => unknown }).usage?.() ?? null } } : {}),
      resumed: result.resumed,
      out: file,
      interrupted: ac.signal.aborted,
    };
    if (faulted) Object.assign(out, { faults: { ...faulted.comparison, out: faulted.out, report: { ...faulted.report, per_task: undefined } } });
    writeFileSync(join(outDir, 'eval.json'), JSON.stringify(out, null, 2) + '\n');
    const html = renderEvalHtml(report, result.trajectories);
    const htmlFile = join(outDir, 'report.html');
    writeFileSync(htmlFile, html);
    if (values.html) {
      mkdirSync(dirname(values.html), { recursive: true });
      writeFileSync(values.html, html);
    }
    console.log(`\n${report.tasks} tasks x ${k} = ${result.trajectories.length} episodes (${result.resumed} resumed) with policy '${policy.id}' -> ${file}`);
    console.log(
      table([['', ''], ...evalRows(report)])
        .split('\n')
        .slice(1)
        .join('\n'),
    );
    if (faulted) printFaultComparison(faulted.comparison, k);
    if (bfcl) {
      console.log(`\nBFCL (bfcl-eval 2026.3.23; BFCL's accuracy: each entry's first sample by BFCL's checker; pass@1 over all ${k} samples):`);
      console.log(table(bfclRows(bfcl)));
      if (values['bfcl-results']) console.log(`BFCL result files: ${values['bfcl-results']} (${bfclFiles.length} categories)`);
    }
    if (usage)
      console.log(
        `API usage: ${usage.requests} requests (${usage.failed_requests} refused or failed after retries), ${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens this invocation`,
      );
    if (judged)
      console.log(
        `RULER (${ruler}, judge ${judge!.id}): ${judged.groups} groups judged, ${judged.failures} failed (their episodes keep the verifier's reward)${judged.first_error ? `: ${judged.first_error}` : ''}; ${judged.calls} judge requests, ${judged.cached} answers from the cache`,
      );
    if (report.failures.length) {
      console.log('\nFailed episodes by cause:');
      for (const f of report.failures.slice(0, 10))
        console.log(`  ${String(f.episodes).padStart(5)}  ${f.kind === 'task_error' ? 'task error: ' : ''}${f.cause}`);
    }
    console.log(`\n${renderFeedbackText(report.feedback)}`);
    console.log(`\nreport: ${htmlFile}${values.html ? ` and ${values.html}` : ''}; figures: ${join(outDir, 'eval.json')}`);
    if (values.json) console.log(JSON.stringify(out));
    if (values.junit) {
      const suiteOf = new Map(tasks.map((t) => [t.id, suiteName(t)]));
      writeJunit(
        values.junit,
        `mcp-gym eval ${policy.id}`,
        gateTasks(result.trajectories, (id) => suiteOf.get(id) ?? 'tasks'),
        failUnder ?? 1,
      );
      console.log(`JUnit: ${values.junit}`);
    }
    if (ac.signal.aborted)
      throw new Interrupted(`interrupted: the ${result.trajectories.length} finished episodes are saved in ${file}; continue with --resume`);
    assertSomeEpisodeRan(result.trajectories, 'eval');
    checkThreshold('eval', report.pass_at_1.mean, report.pass_at_1.ci95, failUnder);
  } finally {
    stop.dispose();
    await env.close();
    await policy.close?.();
    await judge?.close?.();
  }
}

/**
 * The tool surface of the tasks' servers (src/tools/surface.ts), for eval.json; with a model
 * directory (`onnx:<dir>`) that recorded the surface it was trained with, a warning on stderr
 * naming the tools that changed and the servers it was not trained with.
 */
async function evalToolSurface(
  env: ReturnType<typeof cliEnvironment>,
  tasks: Task[],
  policy: string,
): Promise<{ hash: string; servers: ToolSurfaces; drift?: SurfacesDrift }> {
  const servers = await env.toolSurfaces(tasks);
  const out: { hash: string; servers: ToolSurfaces; drift?: SurfacesDrift } = { hash: surfacesHash(servers), servers };
  const dir = policy.startsWith('onnx:') ? policy.slice('onnx:'.length) : undefined;
  if (!dir) return out;
  const warning = driftWarning(dir, servers, `the model ${dir} was trained with`);
  if (warning) {
    process.stderr.write(`mcp-gym: warning: ${warning}\n`);
    try {
      const recorded = readToolSurfaces(dir);
      if (recorded) out.drift = compareSurfaceSets(recorded.servers, servers);
    } catch {
      // the warning said why it cannot be read
    }
  }
  return out;
}

/** Judges each task's episodes as a group (RULER), four groups at a time; a group the judge fails on keeps its rewards and is counted. */
async function judgeGroups(
  trajectories: Trajectory[],
  judge: ChatModel,
  o: RulerOptions,
): Promise<{ groups: number; failures: number; calls: number; cached: number; first_error?: string }> {
  const byGroup = new Map<string, Trajectory[]>();
  for (const t of trajectories) byGroup.set(t.group_id, [...(byGroup.get(t.group_id) ?? []), t]);
  const r = { groups: 0, failures: 0, calls: 0, cached: 0 } as { groups: number; failures: number; calls: number; cached: number; first_error?: string };
  const limit = pLimit(4);
  await Promise.all(
    [...byGroup.values()].map((group) =>
      limit(async () => {
        if (group.filter((t) => t.finish !== 'error').length < 2 || o.signal?.aborted) return;
        r.groups++;
        try {
          const a = await applyRuler(group, judge, o);
          r.calls += a.calls;
          r.cached += a.cached;
        } catch (err) {
          if (!(err instanceof JudgeError)) throw err;
          r.failures++;
          r.calls += err.calls;
          r.cached += err.cached;
          r.first_error ??= err.message.split('\n', 1)[0];
        }
      }),
    ),
  );
  return r;
}
