/**
 * The fuzzer's calls: one call sent with its timeout (restarted by progress), and its answer
 * classified (rejected, accepted, protocol error, crash, hang), a crash or hang confirmed.
 */
import { isAlive, killTree, type ToolResult } from '../tools/index.ts';
import type { Args } from './args.ts';
import type { Caller } from './load.ts';

/**
 * How the server answered:
 * - `rejected`: a proper `isError` result (the server refused the input and said why);
 * - `accepted`: a normal result;
 * - `protocol_error`: a JSON-RPC error instead of a result (or an answer the client could not use);
 * - `crash`: the server process died (confirmed by its pid; over HTTP: it no longer answers);
 * - `hang`: no answer within the timeout.
 */
export const OUTCOMES = ['rejected', 'accepted', 'protocol_error', 'crash', 'hang'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** What the fuzzer needs of a client: `ToolClient` has it all. */
export interface FuzzClient extends Caller {
  readonly pid: number | undefined;
  readonly restarts: number;
  readonly spec: { transport: string };
  listTools(options?: { refresh?: boolean; timeoutMs?: number }): Promise<unknown>;
}

export interface Classified {
  outcome: Outcome;
  detail: string;
  /** Progress notifications the call sent (each one restarted its timeout, unless that was turned off). */
  progress?: number;
  /** The server went down with this call (it crashed, or hung and did not answer a probe): restarted, now or on the next call. */
  restarted?: boolean;
}

function textOf(r: ToolResult): string {
  const first = r.content[0] as { text?: unknown } | undefined;
  return typeof first?.text === 'string' ? first.text : JSON.stringify(r.content).slice(0, 300);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether the server answers at all (a fresh `tools/list`). */
async function answers(client: FuzzClient, timeoutMs: number): Promise<boolean> {
  try {
    await client.listTools({ refresh: true, timeoutMs });
    return true;
  } catch {
    return false;
  }
}

/** After killing a stdio server: waits for the client to see the exit, then for a fresh server to answer. */
async function restartAfterKill(client: FuzzClient, timeoutMs: number): Promise<boolean> {
  for (let i = 0; i < 3; i++) {
    if (await answers(client, timeoutMs)) return true;
    await sleep(50);
  }
  return false;
}

/**
 * Sends one call and classifies the answer. A crash counts only when the process is really gone
 * (its pid no longer alive; over HTTP, when the server no longer answers); a hang is followed by
 * a probe, and a stdio server that does not answer it is killed so the next call gets a fresh one.
 */
export async function sendAndClassify(client: FuzzClient, name: string, args: Args, timeoutMs: number, timing: CallTiming = {}): Promise<Classified> {
  // A tool that reports progress is working, not hung (the MCP specification's resetTimeoutOnProgress):
  // each notification restarts the timeout, up to maxTotalMs for the whole call.
  let progress = 0;
  const resets = timing.progressResets !== false;
  const r = await client.call(
    { name, arguments: args },
    {
      timeoutMs,
      onProgress: () => progress++,
      ...(resets ? { resetTimeoutOnProgress: true, maxTotalTimeoutMs: timing.maxTotalMs ?? Math.max(60_000, 10 * timeoutMs) } : {}),
    },
  );
  const c = await classify(client, r, timeoutMs);
  return progress > 0
    ? { ...c, progress, detail: `${c.detail} (${progress} progress notification${progress === 1 ? '' : 's'}${resets ? '' : ', timeout not restarted'})` }
    : c;
}

/** How long a fuzz call may take: its timeout, restarted by progress notifications up to a total. */
export interface CallTiming {
  /** Progress notifications restart the call's timeout. Default true. */
  progressResets?: boolean;
  /** The whole call's limit with progress, ms. Default max(60 s, 10 × the timeout). */
  maxTotalMs?: number;
}

async function classify(client: FuzzClient, r: ToolResult, timeoutMs: number): Promise<Classified> {
  const text = textOf(r).slice(0, 300);
  if (!r.isError) return { outcome: 'accepted', detail: text.slice(0, 120) };
  switch (r.errorKind) {
    case undefined:
    case 'tool':
      return { outcome: 'rejected', detail: text };
    case 'invalid_arguments':
      // An isError result whose text is the SDK's validation message is a proper rejection;
      // a JSON-RPC "invalid params" error thrown at the client is a protocol error.
      return text.startsWith('Input validation error') ? { outcome: 'rejected', detail: text } : { outcome: 'protocol_error', detail: text };
    case 'timeout': {
      const probeMs = Math.min(Math.max(500, timeoutMs), 5000);
      if (await answers(client, probeMs)) return { outcome: 'hang', detail: text };
      const pid = client.pid;
      if (client.spec.transport === 'stdio' && pid !== undefined) {
        await killTree(pid, { group: true, graceMs: 500 });
        // Start the fresh server now: a call sent before the client has seen the exit (killTree
        // returns once the process is a zombie) would fail as if the next input had crashed it.
        const back = await restartAfterKill(client, probeMs);
        return { outcome: 'hang', detail: `${text}; the server did not answer afterwards and was ${back ? 'restarted' : 'killed'}`, restarted: true };
      }
      return { outcome: 'hang', detail: `${text}; the server did not answer afterwards` };
    }
    case 'crashed':
    case 'closed': {
      // A client that gave up restarting a server that keeps crashing: not this input's doing.
      if (/keeps crashing/.test(text)) return { outcome: 'protocol_error', detail: text };
      if (client.spec.transport === 'stdio') {
        const pid = client.pid;
        // The exit has been seen when the call failed as crashed; give a closing pipe a moment.
        for (let i = 0; i < 20 && pid !== undefined && isAlive(pid); i++) await sleep(25);
        if (pid !== undefined && !isAlive(pid)) return { outcome: 'crash', detail: text, restarted: true };
        return { outcome: 'protocol_error', detail: `${text} (the process is still alive)` };
      }
      if (client.spec.transport === 'http' && !(await answers(client, Math.min(timeoutMs, 5000))))
        return { outcome: 'crash', detail: `${text} (the server no longer answers)` };
      return { outcome: 'protocol_error', detail: text };
    }
    default:
      return { outcome: 'protocol_error', detail: text };
  }
}
