/** The `mcp-gym` command line. */
import { parseArgs } from 'node:util';
import { bundledServer, bundledServers, serveOverHttp, serveOverStdio } from '../../servers/index.ts';
import { demo } from './demo.ts';
import { checkToken, intFlag, UsageError } from './args.ts';
import { repairCommand, rolloutCommand, suitesCommand } from './rollout.ts';
import { sftCommand } from './sft.ts';
import { pipelineCommand } from './pipeline.ts';
import { startCommand, trainCommand } from './train.ts';
import { benchCommand } from './bench.ts';
import { tasksCommand } from './tasks.ts';
import { evalCommand } from './eval.ts';
import { serveEnvCommand } from './serve-env.ts';
import { servePolicyCommand } from './serve-policy.ts';
import { viewCommand } from './view.ts';
import { modelsCommand } from './models.ts';
import { EXIT, RunFailure } from '../../lib/index.ts';
import { FaultSpecError, RecordingFileError, TaskFileError } from '../env/index.ts';
import { R1ConfigError } from '../trainers/index.ts';

const HELP = `mcp-gym: tasks, training and benchmarks for tool-using agents over MCP

Usage: mcp-gym <command> [options]

Commands:
  serve <name>        Serve a bundled MCP server over stdio (default) or streamable HTTP
                        --http            serve over streamable HTTP instead of stdio
                        --port N          HTTP port (default 3000; 0 picks a free one)
                        --host H          interface to bind (default 127.0.0.1)
                        --token T         require "Authorization: Bearer T" (or env MCP_GYM_TOKEN); not empty
                        --allowed-host N  also accept N in the Host and Origin headers (beyond localhost
                                          and the bound host), e.g. with --host 0.0.0.0; repeatable, or N1,N2
                        --data-dir D      where the server keeps its files (default: a temp dir)
                        --delay-ms N      add N ms to every tool call (for benchmarks)
  serve-env           A suite or task file as an OpenEnv environment (reset/step/state over WebSocket
                      and HTTP sessions, /schema, /health; for TRL and other Python trainers)
                        --suite S | --tasks F --port N (default 8001) --token T   (serve-env --help)
  serve-policy        A model behind an OpenAI-compatible API (vLLM's formats: logprobs, token ids)
                        --model M --port N (default 8000) --host H --token T   (serve-policy --help)
  start               The main job: train the embedded policy (SFT cold start in models/calc-tiny)
                      with the art preset on the calculator suite; print held-out success before/after
                        --model M   a real model (smollm2-135m, a checkpoint, a .gguf) from base to SFT
                                    to GRPO on the sql tasks, evaluated at each stage (start --model x --help)
  models              Real pretrained models without a model hub: list, get NAME, convert FILE.gguf
  train               Train a policy with a preset: grpo, dapo, dr_grpo, gspo, rlvr, art, ruler
                        --preset P --suite S | --tasks F [--eval-tasks F2] --steps N --group G --model DIR
                        --run DIR (default runs/<preset>-<time>)  --resume  --config FILE (JSON)
                        --learner URL [--learner-token T]  a learner running elsewhere (GPU)
                        --lr X --beta X --clip-low X --clip-high X --epochs N --temperature T ...
                        (mcp-gym train --help: every config field, each a flag)
  servers             List the bundled servers and how each isolates episodes
  suites              List the bundled task suites (train and eval tasks per suite)
  rollout             Run a policy on a task suite; write trajectories (JSONL) and a summary
                        --suite S | --tasks F   a bundled suite (or 'all'), BFCL's (bfcl, bfcl:<group>, bfcl:<category>), or a .json/.jsonl task file
                        --split eval|train|all  (default eval)     --limit N   first N tasks
                        --max-difficulty D      only tasks of difficulty 1 to D
                        --eval-tasks N          generate N eval tasks per suite (default 40)
                        --policy P              expert (default), random[:seed], onnx:<model dir>,
                                                openai:<model> (--base-url URL, repeatable), anthropic:<model>
                        --model DIR             a model directory sampled in-process: the embedded
                                                model's or a Hugging Face checkpoint's (Qwen3, Qwen2,
                                                Llama; exported to ONNX in DIR/onnx when needed)
                        --group G               rollouts per task (default 1)
                        --concurrency C         episodes at once (default 8)
                        --out DIR               where trajectories.jsonl and summary.json go
                        --resume                continue DIR's run: skip the episodes it holds
                        --reward R              art (default), rlvr, composer, verifier
                        --json                  print the summary as one JSON line last
                        --export-openai F       also write successful trajectories as OpenAI fine-tuning JSONL
                        --delay-ms N            slow every bundled server call by N ms
                        --stdio                 run bundled servers as stdio processes (default: in-process)
                        --record F              record every tool list and call (results, latency) in F (JSONL)
                        --replay F              serve the tool traffic from a recording F, starting no server
                        --faults SPEC           inject faults into the agent's calls (seeded by --seed), e.g.
                                                timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5
                        --tools MODE            how the agent sees its tools: all (default), toolbelt (meta-tools
                                                to list, inspect, add, remove), search (search_tools; search:K)
                        --temperature T         sampling temperature of an onnx policy (default 1)
  eval                Evaluate a policy: k samples per task; pass@1, pass@k, pass^k, reward, tool errors,
                      tokens, with 95% intervals; trajectories, eval.json and an HTML report
                        --suite S[,S2] | --tasks F  --policy P  -k K  --out DIR  --resume  --json  --html F
                        --policy openai:<model> --base-url URL | anthropic:<model> [--thinking-budget N]
                        (mcp-gym eval --help for all options)
  repair <file>       Take damaged lines out of a trajectories JSONL file (a reader stops at them)
                        --drop                  drop them (default: move them to <file>.bad)
  sft                 Train the embedded model from scratch on expert demonstrations, export it;
                      or fine-tune a Hugging Face checkpoint on them (--model DIR, copied to --out;
                      --lora-rank R [--lora-alpha A] for LoRA; its chat template renders the demos)
                        --suite S | --tasks F   where the demonstrations come from (default calculator)
                        --max-difficulty D      only tasks up to difficulty D (default: 1 for a suite, all of a --tasks file)
                        --system-tools          list the tool names in a system turn
                        --demos N               expert demonstrations (default 1500)
                        --out DIR               the model directory to write (required)
                        --steps N --batch B --lr X --seed S      (defaults 400, 32, 0.003, 0)
                        --d-model D --layers L --heads H --ctx N (defaults 128, 4, 4, 384)
                        --no-eval               skip the held-out evaluation at the end
  pipeline r1         The DeepSeek-R1 pipeline as one command, resumable: SFT cold start -> GRPO ->
                      rejection sampling (verified, deduplicated, <= M per task) + SFT -> GRPO; one report
                        --out DIR               the pipeline's directory (required; rerun to resume)
                        --model DIR [--sft]     start from a model as is (or SFT it); default: SFT a new one
                        --grpo-steps N --grpo2-steps N --rs-tasks N --rs-k K --rs-max-per-task M
                                                (mcp-gym pipeline --help for every option)
  bench               Benchmark any MCP server: latency, throughput, fuzzing; agents on tasks
                        --stdio "CMD ARGS" | --url URL [--token T] [--header K:V]   the server
                        --concurrency 1,4,16,64 --calls N --duration-ms N --timeout-ms N
                        --examples F --exclude a,b    example calls; tools never called
                        --fuzz [--fuzz-cases N] [--seed S] [--save-failures F] | --replay F
                        --tasks S|F --policy P -k K   agent success: pass@k and pass^k
                        --json --html F               (mcp-gym bench --help for all options)
  tasks generate      Verified task synthesis: a generator model proposes tasks for a server; kept only if
                      valid, not a near-duplicate, its reference solution passes every check on a fresh
                      episode and doing nothing fails them; rejections counted by reason
                        --stdio "CMD ARGS" | --url URL | --server NAME   --generator openai:<m>|anthropic:<m>
                        -n N --out tasks.jsonl                           (mcp-gym tasks --help for all options)
  view [dir ...]      A local web page over the runs, evals and benches under the dirs (default runs/):
                      curves (runs overlaid, live), configs, trajectories, pass@k, bench latency
                        --port N (default 0: a free one, printed) --host H --token T   (view --help)
  demo                Start every bundled server over stdio, list its tools, run example calls
  help                Show this help

Bundled servers: ${Object.keys(bundledServers).join(', ')}
`;

export { UsageError };
const int = intFlag;

async function serve(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      http: { type: 'boolean', default: false },
      port: { type: 'string' },
      host: { type: 'string' },
      token: { type: 'string' },
      'allowed-host': { type: 'string', multiple: true },
      'data-dir': { type: 'string' },
      'delay-ms': { type: 'string' },
    },
  });
  const name = positionals[0];
  if (!name) throw new UsageError(`serve needs a server name: one of ${Object.keys(bundledServers).join(', ')}`);
  const def = bundledServer(name);
  const backendOptions = { dataDir: values['data-dir'], delayMs: int(values['delay-ms'], '--delay-ms', 0) };
  if (values.token !== undefined) checkToken(values.token, '--token');
  const allowedHosts = (values['allowed-host'] ?? []).flatMap((v) => v.split(',')).map((h) => h.trim());
  if (allowedHosts.includes('')) throw new UsageError('--allowed-host needs a host name: --allowed-host NAME (repeatable) or --allowed-host NAME1,NAME2');
  if (!values.http) {
    await serveOverStdio(def, backendOptions);
    return;
  }
  const envToken = process.env.MCP_GYM_TOKEN;
  if (values.token === undefined && envToken !== undefined) checkToken(envToken, 'MCP_GYM_TOKEN');
  const token = values.token ?? envToken;
  const serving = await serveOverHttp(def, { ...backendOptions, port: int(values.port, '--port', 3000), host: values.host, token, allowedHosts }).catch(
    (err: unknown) => {
      // Options serveOverHttp refuses (a name that is not a host name) are usage errors.
      if ((err as { code?: unknown }).code === 'ERR_INVALID_ARG_VALUE') throw new UsageError(err instanceof Error ? err.message : String(err));
      throw err;
    },
  );
  const notes = [
    ...(token !== undefined ? ['bearer token required'] : []),
    ...(allowedHosts.length > 0 ? [`also accepting Host ${allowedHosts.join(', ')}`] : []),
  ];
  process.stderr.write(`mcp-gym ${name} serving on ${serving.url}${notes.length > 0 ? ` (${notes.join('; ')})` : ''}\n`);
  const stop = () => void serving.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

function listServers(): void {
  for (const def of Object.values(bundledServers)) {
    console.log(`${def.name.padEnd(12)} ${def.description}`);
    console.log(`${''.padEnd(12)} tools: ${def.tools.map((t) => t.name).join(', ')}`);
    console.log(`${''.padEnd(12)} episodes: ${def.isolation}`);
  }
}

/** A command's lines of the help: from its line to the next command's. */
export function commandHelp(command: string): string | undefined {
  const lines = HELP.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`  ${command} `));
  if (start < 0) return undefined;
  let end = start + 1;
  while (end < lines.length && lines[end]!.startsWith('    ')) end++;
  return `Usage: mcp-gym ${command} [options]\n\n${lines.slice(start, end).join('\n')}\n`;
}

/** Commands whose own parser prints a fuller help for --help. */
const OWN_HELP = new Set(['train', 'start', 'eval', 'bench', 'tasks', 'view', 'pipeline', 'serve-policy', 'serve-env']);

/**
 * `--flag -1` as `--flag=-1`: node's parseArgs takes a value that starts with a dash for an option
 * ("ambiguous"), so a negative number would never reach the flag's own check and its message.
 */
export function joinNegativeValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    if (/^--[a-z][a-z0-9-]*$/.test(a) && next !== undefined && /^-(\d|\.\d|Infinity)/.test(next)) {
      out.push(`${a}=${next}`);
      i++;
    } else out.push(a);
  }
  return out;
}

export async function main(argvIn: string[]): Promise<void> {
  const argv = joinNegativeValues(argvIn);
  const [command, ...rest] = argv;
  try {
    if (command && !OWN_HELP.has(command) && (rest.includes('--help') || rest.includes('-h'))) {
      const help = commandHelp(command);
      if (help) {
        process.stdout.write(help);
        return;
      }
    }
    switch (command) {
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(HELP);
        return;
      case 'serve':
        return await serve(rest);
      case 'servers':
        return listServers();
      case 'demo':
        return await demo();
      case 'suites':
        return await suitesCommand();
      case 'rollout':
        return await rolloutCommand(rest);
      case 'eval':
        return await evalCommand(rest);
      case 'repair':
        return await repairCommand(rest);
      case 'sft':
        return await sftCommand(rest);
      case 'train':
        return await trainCommand(rest);
      case 'pipeline':
        return await pipelineCommand(rest);
      case 'serve-policy':
        return await servePolicyCommand(rest);
      case 'serve-env':
        return await serveEnvCommand(rest);
      case 'start':
        return await startCommand(rest);
      case 'bench':
        return await benchCommand(rest);
      case 'tasks':
        return await tasksCommand(rest);
      case 'view':
        return await viewCommand(rest);
      case 'models':
        return await modelsCommand(rest);
      default:
        throw new UsageError(`Unknown command '${command}'. Run 'mcp-gym --help' for the list of commands.`);
    }
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`mcp-gym: ${message}\n`);
    process.exitCode = exitCodeOf(err);
  }
}

/** The exit status of a command that threw `err` (docs/exit-codes.md, "Exit codes"; lib/failures.ts). */
export function exitCodeOf(err: unknown): number {
  if (err instanceof RunFailure) return err.exitCode;
  // Bad input: a flag, a task file, a fault spec, a recording, a pipeline config.
  if (
    err instanceof UsageError ||
    err instanceof TaskFileError ||
    err instanceof FaultSpecError ||
    err instanceof RecordingFileError ||
    err instanceof R1ConfigError
  )
    return EXIT.usage;
  return EXIT.failed;
}
