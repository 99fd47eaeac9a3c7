/** The `mcp-gym` command line. */
import { parseArgs } from 'node:util';
import { bundledServer, bundledServers, serveOverHttp, serveOverStdio } from '../../servers/index.ts';
import { demo } from './demo.ts';
import { intFlag, UsageError } from './args.ts';
import { rolloutCommand, suitesCommand } from './rollout.ts';
import { sftCommand } from './sft.ts';
import { startCommand, trainCommand } from './train.ts';
import { benchCommand } from './bench.ts';

const HELP = `mcp-gym: tasks, training and benchmarks for tool-using agents over MCP

Usage: mcp-gym <command> [options]

Commands:
  serve <name>        Serve a bundled MCP server over stdio (default) or streamable HTTP
                        --http            serve over streamable HTTP instead of stdio
                        --port N          HTTP port (default 3000; 0 picks a free one)
                        --host H          interface to bind (default 127.0.0.1)
                        --token T         require "Authorization: Bearer T" (or env MCP_GYM_TOKEN)
                        --data-dir D      where the server keeps its files (default: a temp dir)
                        --delay-ms N      add N ms to every tool call (for benchmarks)
  start               The main job: train the embedded policy (SFT cold start in models/calc-tiny)
                      with the art preset on the calculator suite; print held-out success before/after
  train               Train a policy with a preset: grpo, dapo, dr_grpo, gspo, rlvr, art
                        --preset P --suite S --steps N --group G --tasks-per-step T --model DIR
                        --run DIR (default runs/<preset>-<time>)  --resume  --config FILE (JSON)
                        --learner URL [--learner-token T]  a learner running elsewhere (GPU)
                        --lr X --beta X --clip-low X --clip-high X --epochs N --temperature T ...
                        (mcp-gym train --help: every config field, each a flag)
  servers             List the bundled servers and how each isolates episodes
  suites              List the bundled task suites (train and eval tasks per suite)
  rollout             Run a policy on a task suite; write trajectories (JSONL) and a summary
                        --suite S | --tasks F   a bundled suite (or 'all'), or a .json/.jsonl task file
                        --split eval|train|all  (default eval)     --limit N   first N tasks
                        --max-difficulty D      only tasks of difficulty 1 to D
                        --eval-tasks N          generate N eval tasks per suite (default 40)
                        --policy P              expert (default), random[:seed], onnx:<model dir>
                        --group G               rollouts per task (default 1)
                        --concurrency C         episodes at once (default 8)
                        --out DIR               where trajectories.jsonl and summary.json go
                        --resume                continue DIR's run: skip the episodes it holds
                        --reward R              art (default), rlvr, composer, verifier
                        --json                  print the summary as one JSON line last
                        --export-openai F       also write successful trajectories as OpenAI fine-tuning JSONL
                        --delay-ms N            slow every bundled server call by N ms
                        --stdio                 run bundled servers as stdio processes (default: in-process)
                        --temperature T         sampling temperature of an onnx policy (default 1)
  sft                 Train the embedded model from scratch on expert demonstrations, export it
                        --suite S | --tasks F   where the demonstrations come from (default calculator)
                        --max-difficulty D      only tasks up to difficulty D (default 1)
                        --system-tools          list the tool names in a system turn
                        --demos N               expert demonstrations (default 1500)
                        --out DIR               the model directory to write (required)
                        --steps N --batch B --lr X --seed S      (defaults 400, 32, 0.003, 0)
                        --d-model D --layers L --heads H --ctx N (defaults 128, 4, 4, 384)
                        --no-eval               skip the held-out evaluation at the end
  bench               Benchmark any MCP server: latency, throughput, fuzzing; agents on tasks
                        --stdio "CMD ARGS" | --url URL [--token T] [--header K:V]   the server
                        --concurrency 1,4,16,64 --calls N --duration-ms N --timeout-ms N
                        --examples F --exclude a,b    example calls; tools never called
                        --fuzz [--fuzz-cases N] [--seed S] [--save-failures F] | --replay F
                        --tasks S|F --policy P -k K   agent success: pass@k and pass^k
                        --json --html F               (mcp-gym bench --help for all options)
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
      'data-dir': { type: 'string' },
      'delay-ms': { type: 'string' },
    },
  });
  const name = positionals[0];
  if (!name) throw new UsageError(`serve needs a server name: one of ${Object.keys(bundledServers).join(', ')}`);
  const def = bundledServer(name);
  const backendOptions = { dataDir: values['data-dir'], delayMs: int(values['delay-ms'], '--delay-ms', 0) };
  if (!values.http) {
    await serveOverStdio(def, backendOptions);
    return;
  }
  const serving = await serveOverHttp(def, {
    ...backendOptions,
    port: int(values.port, '--port', 3000),
    host: values.host,
    token: values.token ?? process.env.MCP_GYM_TOKEN,
  });
  process.stderr.write(`mcp-gym ${name} serving on ${serving.url}${values.token ?? process.env.MCP_GYM_TOKEN ? ' (bearer token required)' : ''}\n`);
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

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  try {
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
      case 'sft':
        return await sftCommand(rest);
      case 'train':
        return await trainCommand(rest);
      case 'start':
        return await startCommand(rest);
      case 'bench':
        return await benchCommand(rest);
      default:
        throw new UsageError(`Unknown command '${command}'. Run 'mcp-gym --help' for the list of commands.`);
    }
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`mcp-gym: ${message}\n`);
    process.exitCode = err instanceof UsageError ? 2 : 1;
  }
}
