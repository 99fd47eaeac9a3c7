/** bench/scaling.ts: serve-policy processes, their reload, and a sampling run against them. */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import type { ChatCompletionTool } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { bundledServers } from '../../servers/index.ts';
import { openingMessages } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { PACKAGE_ROOT } from '../../src/paths.ts';
import { BenchError, SERVER_THREADS } from './options.ts';

// ---------------------------------------------------------------------------------------------
// serve-policy processes.

export interface Server {
  url: string;
  child: ChildProcess;
  client: OpenAI;
  name: string;
}
export const children = new Set<ChildProcess>();

export function startServer(cli: string[], dir: string, seed: number): Promise<Server> {
  const child = spawn(process.execPath, [...cli, 'serve-policy', '--model', dir, '--port', '0', '--threads', String(SERVER_THREADS), '--seed', String(seed)], {
    cwd: PACKAGE_ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise<Server>((res, rej) => {
    let err = '';
    const timer = setTimeout(
      () => rej(new BenchError(`serve-policy --model ${dir} did not print its URL within 300 s; its stderr: ${err.slice(-800)}`)),
      300_000,
    );
    child.stderr!.on('data', (c: Buffer) => {
      err += c.toString();
      const m = /model '([^']+)' \(version [^)]*\) at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(err);
      if (m) {
        clearTimeout(timer);
        res({ url: m[2]!, child, name: m[1]!, client: new OpenAI({ baseURL: m[2]!, apiKey: 'bench', maxRetries: 0, timeout: 600_000 }) });
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new BenchError(`serve-policy --model ${dir} exited (${signal ?? code}) before serving; its stderr: ${err.trim().slice(-800)}`));
    });
  });
}

export async function stopServer(s: Server): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  const t = setTimeout(() => s.child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
}

/** POST /v1/reload {model_dir}: seconds from the request to the answer, and the answer. */
export async function reload(s: Server, dir: string): Promise<{ seconds: number; version: number; reloaded: boolean }> {
  const t0 = performance.now();
  const r = await fetch(`${s.url}/reload`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model_dir: dir }) });
  const body = (await r.json()) as { version?: number; reloaded?: boolean; error?: { message?: string } };
  const seconds = (performance.now() - t0) / 1000;
  if (!r.ok) throw new BenchError(`POST ${s.url}/reload {model_dir: ${dir}}: HTTP ${r.status}: ${body.error?.message ?? JSON.stringify(body)}`);
  return { seconds, version: Number(body.version), reloaded: Boolean(body.reloaded) };
}

// ---------------------------------------------------------------------------------------------
// 1. Sampling: the same requests over 1 server and over 2.

export interface Workload {
  suite: string;
  clients: number;
  requests: number;
  maxTokens: number;
}

export interface SampleRun {
  servers: number;
  tokens: number;
  prompt_tokens: number;
  requests: number;
  seconds: number;
  tok_s: number;
  /** Cores the servers kept busy (their CPU seconds / the wall seconds), when /proc tells. */
  server_cores?: number;
  /** Cores this client process kept busy. */
  client_cores: number;
}

/** CPU seconds (user + system) a process has used, from /proc (Linux); undefined elsewhere. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return undefined;
  }
}

export async function samplingRun(servers: Server[], w: Workload, seedBase: number): Promise<SampleRun> {
  // The suite's tasks in order, again from the first when there are more requests than tasks (each request has its own seed).
  const suite = generateSuite(w.suite);
  if (!suite.length) throw new BenchError(`the ${w.suite} suite has no tasks`);
  const tasks = Array.from({ length: w.requests }, (_, i) => suite[i % suite.length]!);
  const def = bundledServers[w.suite];
  if (!def) throw new BenchError(`no bundled server '${w.suite}' for the prompts' tools`);
  const tools: ChatCompletionTool[] = def.tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: z.toJSONSchema(t.input) as Record<string, unknown> },
  }));
  let tokens = 0;
  let promptTokens = 0;
  const cpu0 = servers.map((s) => cpuSeconds(s.child.pid));
  const self0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: w.clients }, async (_, c) => {
      const s = servers[c % servers.length]!;
      for (let i = c; i < w.requests; i += w.clients) {
        const r = await s.client.chat.completions.create({
          model: s.name,
          messages: openingMessages(tasks[i]!),
          tools,
          temperature: 1,
          max_tokens: w.maxTokens,
          seed: seedBase + i,
          logprobs: true,
          return_token_ids: true,
        } as never);
        const usage = (r as { usage: { completion_tokens: number; prompt_tokens: number } }).usage;
        tokens += usage.completion_tokens;
        promptTokens += usage.prompt_tokens;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu1 = servers.map((s) => cpuSeconds(s.child.pid));
  const used = cpu0.every((c) => c !== undefined) && cpu1.every((c) => c !== undefined) ? cpu1.reduce((a, c, i) => a + c! - cpu0[i]!, 0) : undefined;
  const self = process.cpuUsage(self0);
  return {
    servers: servers.length,
    tokens,
    prompt_tokens: promptTokens,
    requests: w.requests,
    seconds,
    tok_s: tokens / seconds,
    server_cores: used === undefined ? undefined : used / seconds,
    client_cores: (self.user + self.system) / 1e6 / seconds,
  };
}
