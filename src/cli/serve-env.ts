/** `mcp-gym serve-env`: a suite or a task file served as an OpenEnv environment (src/env/openenv/, docs/openenv.md). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Environment, TrajectoryWriter } from '../env/index.ts';
import { startEnvServer } from '../env/openenv/server.ts';
import { PACKAGE_ROOT } from '../paths.ts';
import { checkToken, intFlag, numFlag, UsageError } from './args.ts';
import { FAULTS_HELP, faultOptions } from './faults.ts';
import { selectTasks, toolModeFlag } from './rollout.ts';

export const SERVE_ENV_HELP = `mcp-gym serve-env: a task suite or task file as an OpenEnv environment (reset, step, state over
WebSocket and HTTP sessions; docs/openenv.md)

  --suite S | --tasks F   a bundled suite (or 'all'), BFCL's (bfcl, bfcl:<group>, bfcl:<category>; docs/bfcl.md), or a .json/.jsonl task file
  --split eval|train|all  (default train)   --limit N   --max-difficulty D   --seed S (the suite's and the draws')
  --reward R              art (default), rlvr, composer or verifier
  --host H                interface to bind (default 127.0.0.1)     --port N (default 8001; 0 picks a free one)
  --token T               require "Authorization: Bearer T" (or env MCP_GYM_TOKEN); not empty
  --allowed-host N        also accept N in the Host and Origin headers (repeatable, or N1,N2)
  --max-sessions N        sessions at once (default 64); beyond: a CAPACITY_REACHED error (HTTP 503)
  --session-timeout S     close a session idle for S seconds (default 600; 0: never)
  --call-timeout-ms N     each tool call's timeout (default 10000)
  --out FILE              append every finished episode's trajectory to FILE (JSONL; mcp-gym view reads it)
  --tools MODE            how the agent sees its tools: all (default), toolbelt, search, search:K (docs/tasks.md)
${FAULTS_HELP}
A session (a WebSocket connection to /ws, or the session_id that POST /reset answers) plays one episode
at a time: reset draws a task (or takes task_id, or seed), step takes {"type": "call_tool", "tool_name",
"arguments"} or {"type": "answer", "content"}, and the episode's end gives the reward, its named parts,
success and the checks. GET /health, /metadata, /schema (the JSON Schemas of action, observation, state).
`;

export async function serveEnvCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      suite: { type: 'string' },
      tasks: { type: 'string' },
      split: { type: 'string', default: 'train' },
      limit: { type: 'string' },
      'max-difficulty': { type: 'string' },
      seed: { type: 'string' },
      reward: { type: 'string', default: 'art' },
      host: { type: 'string' },
      port: { type: 'string' },
      token: { type: 'string' },
      'allowed-host': { type: 'string', multiple: true },
      'max-sessions': { type: 'string' },
      'session-timeout': { type: 'string' },
      'call-timeout-ms': { type: 'string' },
      faults: { type: 'string' },
      tools: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(SERVE_ENV_HELP);
    return;
  }
  if (!values.suite && !values.tasks) throw new UsageError('serve-env needs --suite <name> or --tasks <file.json|.jsonl> (serve-env --help)');
  if (values.suite && values.tasks) throw new UsageError('serve-env takes --suite or --tasks, not both');
  const tasks = selectTasks(values);
  const token = values.token ?? process.env.MCP_GYM_TOKEN;
  if (token !== undefined) checkToken(token, values.token !== undefined ? '--token' : 'MCP_GYM_TOKEN');
  const allowedHosts = (values['allowed-host'] ?? []).flatMap((v) => v.split(',')).map((h) => h.trim());
  if (allowedHosts.includes('')) throw new UsageError('--allowed-host needs a host name: --allowed-host NAME (repeatable) or --allowed-host NAME1,NAME2');
  const reward = values.reward!;
  if (!['art', 'rlvr', 'composer', 'verifier'].includes(reward)) throw new UsageError(`--reward must be art, rlvr, composer or verifier, got '${reward}'`);
  const maxSessions = intFlag(values['max-sessions'], '--max-sessions', 64);
  if (maxSessions < 1) throw new UsageError(`--max-sessions must be at least 1, got '${values['max-sessions']}'`);
  const sessionTimeoutS = numFlag(values['session-timeout'], '--session-timeout', { min: 0 }) ?? 600;
  const callTimeoutMs = intFlag(values['call-timeout-ms'], '--call-timeout-ms', 10_000);
  if (callTimeoutMs < 1) throw new UsageError(`--call-timeout-ms must be at least 1, got '${values['call-timeout-ms']}'`);
  const tools = toolModeFlag(values.tools);
  const env = new Environment({ reward, callTimeoutMs, faults: faultOptions(values), ...(tools ? { tools } : {}) });
  const writer = values.out === undefined ? undefined : new TrajectoryWriter(values.out);
  const version = (JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  const name = values.suite ? `mcp-gym:${values.suite}` : `mcp-gym:${values.tasks}`;
  const server = await startEnvServer({
    env,
    tasks,
    name,
    version,
    host: values.host,
    port: intFlag(values.port, '--port', 8001),
    token,
    allowedHosts,
    maxSessions,
    sessionTimeoutS,
    seed: values.seed === undefined ? 1 : intFlag(values.seed, '--seed', 1),
    // an episode a reset or a closed session cut short has no turn: nothing to record
    onTrajectory: writer ? (t) => t.turns.length > 0 && writer.write(t) : undefined,
  }).catch(async (err: unknown) => {
    await env.close();
    throw new UsageError(`serve-env: ${(err as Error).message}`);
  });
  process.stderr.write(
    `mcp-gym serve-env: ${tasks.length} tasks (${name}, ${values.split} split, reward ${reward}) at ${server.url} (WebSocket ${server.url.replace(/^http/, 'ws')}/ws)${token !== undefined ? ', bearer token required' : ''}${writer ? `; trajectories to ${values.out}` : ''}\n`,
  );
  const stop = () =>
    void server
      .close()
      .then(() => env.close())
      .then(() => writer?.close())
      .then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
