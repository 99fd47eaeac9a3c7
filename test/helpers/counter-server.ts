/**
 * Shared by the follow-up tests: a counter MCP server written with the SDK alone, whose tool list
 * changes. `get` and `add` are the agent's; `set`, `reveal` and `retire` are control tools
 * (`_meta: {"mcp-gym/control": true}`): `reveal` adds the tool `double`, `retire` removes it, and the
 * SDK sends `notifications/tools/list_changed` for each. The counter is kept per episode (the
 * `mcp-gym/episode` key of each call's _meta); the tool list is the connection's.
 *
 * And a task of three user turns on it: the opening one adds 2, follow-up 1 (whose setup reveals
 * `double`) doubles, follow-up 2 (whose setup retires `double`) adds 1; per-turn and end checks.
 */
import { McpServer, type RegisteredTool } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { defineTask, type Task, type TaskInput } from '../../src/env/index.ts';

const CONTROL = { 'mcp-gym/control': true };

export function counterServer(): McpServer {
  const server = new McpServer({ name: 'counter', version: '1.0.0' });
  const values = new Map<string, number>();
  const episodeOf = (ctx: { mcpReq: { _meta?: Record<string, unknown> } }) => String(ctx.mcpReq._meta?.['mcp-gym/episode'] ?? '');
  const value = (v: number) => ({ content: [{ type: 'text' as const, text: String(v) }], structuredContent: { value: v } });
  const outputSchema = z.object({ value: z.number() });
  server.registerTool('get', { description: 'The counter value', inputSchema: z.object({}), outputSchema }, async (_args, ctx) =>
    value(values.get(episodeOf(ctx)) ?? 0),
  );
  server.registerTool('add', { description: 'Adds n to the counter', inputSchema: z.object({ n: z.number() }), outputSchema }, async ({ n }, ctx) => {
    const v = (values.get(episodeOf(ctx)) ?? 0) + n;
    values.set(episodeOf(ctx), v);
    return value(v);
  });
  server.registerTool(
    'set',
    { description: 'Sets the counter (the task’s own)', inputSchema: z.object({ value: z.number() }), outputSchema, _meta: CONTROL },
    async (args, ctx) => {
      values.set(episodeOf(ctx), args.value);
      return value(args.value);
    },
  );
  let double: RegisteredTool | undefined;
  server.registerTool('reveal', { description: 'Adds the tool double', inputSchema: z.object({}), _meta: CONTROL }, async () => {
    double ??= server.registerTool('double', { description: 'Doubles the counter', inputSchema: z.object({}), outputSchema }, async (_args, ctx) => {
      const v = (values.get(episodeOf(ctx)) ?? 0) * 2;
      values.set(episodeOf(ctx), v);
      return value(v);
    });
    return { content: [{ type: 'text', text: 'revealed' }] };
  });
  server.registerTool('retire', { description: 'Removes the tool double', inputSchema: z.object({}), _meta: CONTROL }, async () => {
    double?.remove();
    double = undefined;
    return { content: [{ type: 'text', text: 'retired' }] };
  });
  return server;
}

const call = (tool: string, args: Record<string, number> = {}) => ({ server: 'counter', tool, arguments: args });
const state = (value: number, turn?: number) => ({
  kind: 'state' as const,
  call: call('get'),
  path: 'value',
  expect: { kind: 'equals' as const, value },
  ...(turn !== undefined ? { turn } : {}),
});

/** The three-user-turn task (a fresh counter server for each task made: its tool list is the connection's). */
export function counterTask(overrides: Partial<TaskInput> = {}): Task {
  return defineTask({
    id: 'counter-followups',
    split: 'eval',
    difficulty: 2,
    prompt: 'Add 2 to the counter, then tell me its value.',
    servers: { counter: { transport: 'inprocess', factory: counterServer } },
    setup: [call('set', { value: 10 })],
    followups: [
      { content: 'Now double it, and tell me the value.', setup: [call('reveal')] },
      { content: 'Add 1 more, and tell me the value.', setup: [call('retire')] },
    ],
    max_turns: 8,
    max_turns_per_user_turn: 3,
    checks: [
      state(12, 0), // the state as user turn 0 ended (at the episode's end it is 25)
      { kind: 'answer', expect: { kind: 'number', value: 12 }, turn: 0 },
      { kind: 'call', server: 'counter', tool: 'double', turn: 1 }, // a tool revealed by follow-up 1's setup
      state(24, 1),
      { kind: 'answer', expect: { kind: 'number', value: 25 } },
      state(25),
    ],
    solution: {
      turns: [
        { calls: [call('add', { n: 2 })], answer: 'The counter is 12.' },
        { calls: [call('double')], answer: 'The counter is 24.' },
        { calls: [call('add', { n: 1 })], answer: 'The counter is 25.' },
      ],
    },
    ...overrides,
  });
}
