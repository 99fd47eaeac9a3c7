/**
 * What every bundled MCP server is made of: a list of tools (one zod schema each for input and
 * output), a backend that owns the server's resources, and per-episode state.
 *
 * Episode isolation: a tool call names its episode in the request's `_meta` under
 * `EPISODE_META_KEY`. Each episode gets its own fresh state (a kv namespace, a sandbox
 * directory, ...), created on first use and released after `idleMs` without calls, when the
 * store holds more than `maxEpisodes`, or explicitly (`backend.release(id)`). A call without the
 * key uses the episode `"default"`, so clients that know nothing of mcp-gym still work.
 */
import { McpServer } from '@modelcontextprotocol/server';
import type { CallToolResult, ServerContext } from '@modelcontextprotocol/server';
import { z } from 'zod';

export const EPISODE_META_KEY = 'mcp-gym/episode';
export const DEFAULT_EPISODE = 'default';

/** An error whose message is meant for the agent: returned as an `isError` result. */
export class ToolError extends Error {
  override name = 'ToolError';
}

export interface ToolDef<S, I extends z.ZodObject = z.ZodObject, O extends z.ZodObject = z.ZodObject> {
  name: string;
  title?: string;
  description: string;
  input: I;
  output: O;
  readOnly?: boolean;
  run(args: z.infer<I>, state: S, signal: AbortSignal | undefined): z.infer<O> | Promise<z.infer<O>>;
  /** The text content of a result (default: the structured result as JSON). */
  text?(out: z.infer<O>): string;
}

/** Identity helper that keeps each tool's argument and result types inferred. */
export function defineTool<S, I extends z.ZodObject, O extends z.ZodObject>(def: ToolDef<S, I, O>): ToolDef<S, I, O> {
  return def;
}

export interface BackendOptions {
  /** Directory for files the server writes (kv database, file sandboxes). Default: a new temp dir. */
  dataDir?: string;
  /** Release an episode's state after this long without calls. Default 10 minutes. */
  idleMs?: number;
  /** Keep at most this many episodes; the least recently used goes first. Default 10,000. */
  maxEpisodes?: number;
  /** Artificial latency added to every tool call (for benchmarks of concurrency). Default 0. */
  delayMs?: number;
}

export interface Backend<S> {
  episode(id: string): S;
  release(id: string): void;
  close(): void | Promise<void>;
}

export interface ServerDefinition<S = unknown> {
  name: string;
  version: string;
  description: string;
  /** How a fresh state per episode is given, in one sentence (shown by `mcp-gym serve --help`). */
  isolation: string;
  tools: ToolDef<S, z.ZodObject, z.ZodObject>[];
  /** Calls that show what the server does (used by `mcp-gym demo`, tests and benchmarks). */
  examples: { tool: string; arguments: Record<string, unknown> }[];
  backend(options: BackendOptions): Backend<S>;
}

export function defineServer<S>(def: ServerDefinition<S>): ServerDefinition<S> {
  return def;
}

/** Lazily created per-episode states with idle and size limits. */
export class EpisodeStore<S> {
  private readonly states = new Map<string, { state: S; last: number }>();
  private readonly idleMs: number;
  private readonly maxEpisodes: number;
  private sweeps = 0;

  constructor(
    private readonly create: (id: string) => S,
    private readonly dispose: (id: string, state: S) => void = () => {},
    options: BackendOptions = {},
  ) {
    this.idleMs = options.idleMs ?? 10 * 60_000;
    this.maxEpisodes = options.maxEpisodes ?? 10_000;
  }

  get(id: string): S {
    const now = Date.now();
    let entry = this.states.get(id);
    if (entry) {
      // Re-insert to keep the map in least-recently-used order.
      this.states.delete(id);
      entry.last = now;
    } else {
      entry = { state: this.create(id), last: now };
    }
    this.states.set(id, entry);
    if (++this.sweeps % 64 === 0 || this.states.size > this.maxEpisodes) this.sweep(now);
    return entry.state;
  }

  has(id: string): boolean {
    return this.states.has(id);
  }

  get size(): number {
    return this.states.size;
  }

  release(id: string): void {
    const entry = this.states.get(id);
    if (!entry) return;
    this.states.delete(id);
    this.dispose(id, entry.state);
  }

  clear(): void {
    for (const id of [...this.states.keys()]) this.release(id);
  }

  private sweep(now: number): void {
    for (const [id, entry] of this.states) {
      const tooMany = this.states.size > this.maxEpisodes;
      if (!tooMany && now - entry.last < this.idleMs) break; // map is in LRU order
      this.release(id);
    }
  }
}

function episodeOf(ctx: ServerContext): string {
  const meta = ctx.mcpReq._meta as Record<string, unknown> | undefined;
  const id = meta?.[EPISODE_META_KEY];
  return typeof id === 'string' && id.length > 0 ? id.slice(0, 200) : DEFAULT_EPISODE;
}

function errorResult(message: string): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Builds one McpServer instance exposing `def`'s tools over `backend` (the SDK wants a factory). */
export function buildMcpServer<S>(def: ServerDefinition<S>, backend: Backend<S>, options: BackendOptions = {}): McpServer {
  // Declares per-episode state (the `mcp-gym/episode` _meta key), so that clients sharing one connection among episodes know it is safe.
  const server = new McpServer(
    { name: `mcp-gym-${def.name}`, version: def.version },
    { instructions: def.description, capabilities: { experimental: { [EPISODE_META_KEY]: {} } } },
  );
  const delayMs = options.delayMs ?? 0;
  for (const tool of def.tools) {
    server.registerTool(
      tool.name,
      {
        title: tool.title,
        description: tool.description,
        inputSchema: tool.input,
        outputSchema: tool.output,
        annotations: tool.readOnly === undefined ? undefined : { readOnlyHint: tool.readOnly },
      },
      async (args: unknown, ctx: ServerContext): Promise<CallToolResult> => {
        try {
          if (delayMs > 0) await sleep(delayMs);
          const state = backend.episode(episodeOf(ctx));
          const out = await tool.run(args as never, state, ctx.mcpReq.signal);
          return { content: [{ type: 'text', text: tool.text ? tool.text(out) : JSON.stringify(out) }], structuredContent: out as Record<string, unknown> };
        } catch (err) {
          if (err instanceof ToolError) return errorResult(err.message);
          const message = err instanceof Error ? err.message : String(err);
          return errorResult(`${tool.name} failed: ${message}`);
        }
      },
    );
  }
  return server;
}

/** A factory of McpServer instances that all share one backend (what the SDK's serving entries take). */
export function serverFactory<S>(def: ServerDefinition<S>, options: BackendOptions = {}): { factory: () => McpServer; backend: Backend<S> } {
  const backend = def.backend(options);
  return { factory: () => buildMcpServer(def, backend, options), backend };
}
