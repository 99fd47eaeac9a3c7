/**
 * The contracts of the tool layer (docs/architecture.md, "Contracts"): a tool call, its result, a tool's description,
 * and the ways to reach a server. Each is one zod schema; the types are derived from it.
 */
import { z } from 'zod';

export const ToolCallSchema = z.object({
  id: z.string(),
  name: z.string(),
  arguments: z.record(z.string(), z.unknown()),
});
export type ToolCall = z.infer<typeof ToolCallSchema>;

/**
 * Why a call failed, when it did. `tool` means the tool itself reported an error; `too_large` that
 * its result went over the client's size limit (`maxResultBytes`).
 */
export const ToolErrorKindSchema = z.enum(['tool', 'unknown_tool', 'invalid_arguments', 'timeout', 'aborted', 'crashed', 'closed', 'protocol', 'too_large']);
export type ToolErrorKind = z.infer<typeof ToolErrorKindSchema>;

export const ContentBlockSchema = z.looseObject({ type: z.string() });
export type ContentBlock = z.infer<typeof ContentBlockSchema>;

export const ToolResultSchema = z.object({
  content: z.array(ContentBlockSchema),
  structured: z.unknown().optional(),
  isError: z.boolean(),
  /** Wall time of the call, milliseconds. */
  ms: z.number(),
  errorKind: ToolErrorKindSchema.optional(),
});
export type ToolResult = z.infer<typeof ToolResultSchema>;

/** A tool as discovered through `tools/list`, its schemas as JSON Schema. */
export const ToolInfoSchema = z.object({
  name: z.string(),
  title: z.string().optional(),
  description: z.string().optional(),
  inputSchema: z.record(z.string(), z.unknown()),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  annotations: z.record(z.string(), z.unknown()).optional(),
  /** The tool's `_meta` as the server listed it (e.g. `{"mcp-gym/control": true}`: a control tool). */
  _meta: z.record(z.string(), z.unknown()).optional(),
});
export type ToolInfo = z.infer<typeof ToolInfoSchema>;

/**
 * The `_meta` key that marks a tool as a control tool: one for the task's own calls (setup,
 * follow-up setup, state checks), never shown to the agent nor callable by it (docs/tasks.md,
 * "Follow-up user turns, per-turn checks and control tools").
 */
export const CONTROL_META_KEY = 'mcp-gym/control';

/** Whether a listed tool is a control tool (`_meta: {"mcp-gym/control": true}`). */
export function isControlTool(tool: Pick<ToolInfo, '_meta'>): boolean {
  return tool._meta?.[CONTROL_META_KEY] === true;
}

/** A resource a server lists (resources/list). */
export interface ResourceInfo {
  uri: string;
  name: string;
  description?: string;
  mimeType?: string;
}

/**
 * Fixtures of a stdio server (src/tools/fixtures.ts): each connection gets a fresh directory of its
 * own under the system's temporary directory, removed when the connection closes. `{fixture}` in
 * `args`, `env` values and `cwd` (and in `fixtures.args`, `fixtures.env`) is that directory's path.
 */
export const FixturesSchema = z.strictObject({
  /** A directory (its contents are copied into the fixture directory) or a file (copied into it under its own name). Relative: to the task file, or the working directory. */
  copy: z.string().min(1).optional(),
  /** Added to the server's environment (over `env`). */
  env: z.record(z.string(), z.string()).optional(),
  /** Appended to the server's arguments. */
  args: z.array(z.string()).optional(),
});
export type Fixtures = z.output<typeof FixturesSchema>;

export const StdioSpecSchema = z.object({
  transport: z.literal('stdio'),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  /** Added to the inherited environment. */
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().optional(),
  /** Restart a crashed server for the next call. Default true. */
  restart: z.boolean().default(true),
  /** Give up after this many restarts within a minute. Default 5. */
  maxRestartsPerMinute: z.number().int().min(0).default(5),
  /** A fresh copy of the server's state for each connection (each episode): see `FixturesSchema`. */
  fixtures: FixturesSchema.optional(),
});

export const HttpSpecSchema = z.object({
  transport: z.literal('http'),
  url: z.url(),
  headers: z.record(z.string(), z.string()).optional(),
  /** Sent as `Authorization: Bearer <token>`. */
  token: z.string().optional(),
  /** Refused: one HTTP server serves every episode, so there is no per-episode process to point at a copy. */
  // A refinement, not z.never(): its issue does not abort, so a task's server union reports it rather than "Invalid input".
  fixtures: z
    .unknown()
    .refine(() => false, {
      error:
        'fixtures apply only to stdio servers (a process per episode); an HTTP server is shared by all episodes and must keep one state per mcp-gym/episode key instead',
    })
    .optional(),
});

/**
 * An OpenEnv environment that exposes MCP tools (openenv-core's MCPEnvironment, or `mcp-gym serve-env`),
 * reached over its WebSocket session (src/tools/openenv-transport.ts): a session, reset, per episode.
 */
export const OpenEnvSpecSchema = z.object({
  transport: z.literal('openenv'),
  url: z.url(),
  headers: z.record(z.string(), z.string()).optional(),
  /** Sent as `Authorization: Bearer <token>`. */
  token: z.string().optional(),
  /** The reset's parameters (e.g. a seed, or serve-env's task_id). */
  reset: z.record(z.string(), z.unknown()).optional(),
});

/** A server in this process: a factory of SDK server instances, reached over the in-memory transport. */
export const InProcessSpecSchema = z.object({
  transport: z.literal('inprocess'),
  factory: z.custom<() => unknown>((v) => typeof v === 'function', 'factory must be a function returning an McpServer'),
  /** Called once when the connection closes (e.g. to close the server's backend). */
  onClose: z.custom<() => unknown>((v) => typeof v === 'function').optional(),
});

export const ServerSpecSchema = z.discriminatedUnion('transport', [StdioSpecSchema, HttpSpecSchema, OpenEnvSpecSchema, InProcessSpecSchema]);
export type ServerSpec = z.input<typeof ServerSpecSchema>;
export type StdioSpec = z.output<typeof StdioSpecSchema>;
export type HttpSpec = z.output<typeof HttpSpecSchema>;
export type InProcessSpec = z.output<typeof InProcessSpecSchema>;
export type OpenEnvSpec = z.output<typeof OpenEnvSpecSchema>;

export function errorResult(kind: ToolErrorKind, message: string, ms: number): ToolResult {
  return { content: [{ type: 'text', text: message }], isError: true, ms, errorKind: kind };
}

/** The text of a result's text blocks, joined (what an agent reads). */
export function resultText(result: Pick<ToolResult, 'content'>): string {
  return result.content.map((c) => (c.type === 'text' && typeof c.text === 'string' ? c.text : `[${c.type}]`)).join('\n');
}
