/** Shared by tests: how to start the CLI and make small servers. */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { McpServer, Server } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { defineTask, type Task } from '../src/env/index.ts';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CLI = fileURLToPath(new URL('../bin/mcp-gym.js', import.meta.url));

/** The stdio spec of a bundled server run through the CLI. */
export function cliStdioSpec(name: string, extra: string[] = []) {
  return { transport: 'stdio' as const, command: process.execPath, args: [CLI, 'serve', name, ...extra], cwd: ROOT };
}

/** Runs the `mcp-gym` CLI (the built dist/) with `args`; never throws: the exit code and both outputs. */
export async function runCli(args: string[], env?: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [CLI, ...args], {
      cwd: ROOT,
      maxBuffer: 64 * 1024 * 1024,
      ...(env ? { env: { ...process.env, ...env } } : {}),
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A server with tools that sleep, report progress and echo: for timeouts, cancellation and progress. */
export function testServer(): McpServer {
  const server = new McpServer({ name: 'test', version: '1.0.0' });
  server.registerTool('sleep', { description: 'Sleep for ms milliseconds', inputSchema: z.object({ ms: z.number().int().min(0) }) }, async ({ ms }, ctx) => {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      ctx.mcpReq.signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      });
    });
    return { content: [{ type: 'text', text: `slept ${ms}` }] };
  });
  server.registerTool(
    'progress',
    { description: 'Report progress steps', inputSchema: z.object({ steps: z.number().int().min(1).max(100) }) },
    async ({ steps }, ctx) => {
      const token = ctx.mcpReq._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        if (token !== undefined) {
          await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps, message: `step ${i}` } });
        }
        await sleep(5);
      }
      return { content: [{ type: 'text', text: 'done' }] };
    },
  );
  server.registerTool(
    'echo',
    { description: 'Echo a message', inputSchema: z.object({ message: z.string() }), outputSchema: z.object({ message: z.string() }) },
    async ({ message }) => ({ content: [{ type: 'text', text: message }], structuredContent: { message } }),
  );
  server.registerTool('fail', { description: 'Always fails', inputSchema: z.object({}) }, async () => ({
    content: [{ type: 'text', text: 'it failed on purpose' }],
    isError: true,
  }));
  return server;
}

/** A low-level server whose tools/list is split into pages of `pageSize`. */
export function pagedServer(count: number, pageSize: number): Server {
  const server = new Server({ name: 'paged', version: '1.0.0' }, { capabilities: { tools: {} } });
  const tools = Array.from({ length: count }, (_, i) => ({
    name: `tool_${String(i).padStart(3, '0')}`,
    description: `Tool number ${i}`,
    inputSchema: { type: 'object' as const, properties: { n: { type: 'number' } }, required: ['n'] },
  }));
  server.setRequestHandler('tools/list', async (request) => {
    const start = request.params?.cursor ? Number(request.params.cursor) : 0;
    const page = tools.slice(start, start + pageSize);
    const next = start + pageSize < tools.length ? String(start + pageSize) : undefined;
    return next === undefined ? { tools: page } : { tools: page, nextCursor: next };
  });
  server.setRequestHandler('tools/call', async (request) => ({
    content: [{ type: 'text', text: `${request.params.name}:${JSON.stringify(request.params.arguments)}` }],
  }));
  return server;
}

/** A kv task with a starting state and a state check: the counter c holds 10; add 5; c must hold 15 and the answer be 15. */
export function kvCounterTask(id: string, maxTurns = 4): Task {
  return defineTask({
    id,
    split: 'eval',
    difficulty: 1,
    prompt: 'Add 5 to the counter c, then answer with its value.',
    servers: { kv: 'kv' },
    setup: [{ server: 'kv', tool: 'set', arguments: { key: 'c', value: '10' } }],
    max_turns: maxTurns,
    checks: [
      { kind: 'state', call: { server: 'kv', tool: 'get', arguments: { key: 'c' } }, path: 'value', expect: { kind: 'equals', value: '15' } },
      { kind: 'answer', expect: { kind: 'number', value: '15' } },
    ],
    solution: { calls: [{ server: 'kv', tool: 'incr', arguments: { key: 'c', by: 5 } }], answer: '15' },
  });
}
