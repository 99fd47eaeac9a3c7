/**
 * One way to reach an MCP server whatever its transport (stdio command, streamable HTTP URL,
 * in-process factory): discover its tools and call them. A call never throws: every failure
 * (unknown tool, bad arguments, timeout, crash, closed transport, a result over the size limit)
 * is a result with `isError: true` and a message an agent can act on. A crashed stdio server is
 * restarted for the next call; closing ends the server's whole process tree, or its HTTP session.
 * A server's `notifications/tools/list_changed` drops the cached tool list (the next listTools or
 * call lists again), bumps `toolsVersion` and tells the `onToolsChanged` listeners.
 */
import { Client, InMemoryTransport, ProtocolError, SdkError, SdkErrorCode, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { CallToolResult, Transport } from '@modelcontextprotocol/client';
import {
  errorResult,
  ServerSpecSchema,
  type ContentBlock,
  type HttpSpec,
  type OpenEnvSpec,
  type InProcessSpec,
  type ServerSpec,
  type StdioSpec,
  type ToolInfo,
  type ResourceInfo,
  type ToolResult,
} from './contracts.ts';
import { describeExit, ProcessStdioTransport } from './stdio.ts';
import { OpenEnvTransport } from './openenv-transport.ts';
import { createLinkedFetch } from './http-fetch.ts';
import { DEFAULT_MAX_RESULT_BYTES, tooLargeMessage, tooLargeOf, type TooLarge } from './limits.ts';
import { prepareFixture, type Fixture } from './fixtures.ts';

export const EPISODE_META_KEY = 'mcp-gym/episode';
const INVALID_PARAMS = -32602;

export interface ConnectOptions {
  /** Client name sent to the server. */
  name?: string;
  /** Default timeout of a tool call, ms. Default 30,000. */
  callTimeoutMs?: number;
  /** Timeout of connecting (spawn + initialize, or the HTTP handshake), ms. Default 20,000. */
  connectTimeoutMs?: number;
  /** Copy a stdio server's stderr to ours. Default false. */
  forwardStderr?: boolean;
  /**
   * The largest message accepted from the server, bytes: one line over stdio, one JSON body or
   * SSE event over HTTP, a result's JSON in-process. A call whose result is larger is an isError
   * result of kind `too_large`; the rest of the message is never read. Default 10 MiB.
   */
  maxResultBytes?: number;
}

export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  onProgress?: (progress: { progress: number; total?: number; message?: string }) => void;
  /** With `onProgress`: each progress notification restarts the timeout. */
  resetTimeoutOnProgress?: boolean;
  /** With resetTimeoutOnProgress: the call's limit however much progress it reports, ms. */
  maxTotalTimeoutMs?: number;
  /** The episode whose server state this call acts on (sent in the request's `_meta`). */
  episode?: string;
  /** Extra `_meta` for the request. */
  meta?: Record<string, unknown>;
}

export interface CallRequest {
  name: string;
  arguments?: Record<string, unknown>;
}

interface Live {
  client: Client;
  transport: Transport;
  dead: boolean;
  closeServer?: () => Promise<void>;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class ToolClient {
  readonly spec: StdioSpec | HttpSpec | OpenEnvSpec | InProcessSpec;
  /** How many times a crashed server was restarted. */
  restarts = 0;
  private live?: Live;
  private connecting?: Promise<Live>;
  private toolMap?: Map<string, ToolInfo>;
  private toolList?: ToolInfo[];
  private restartTimes: number[] = [];
  private closed = false;
  private listChanges = 0;
  private readonly toolsListeners = new Set<() => void>();
  /** A stdio spec's fixtures: this connection's own directory, removed when it closes. */
  private fixture?: Fixture;
  private readonly options: Required<Omit<ConnectOptions, 'name'>> & { name: string };

  private constructor(spec: ServerSpec, options: ConnectOptions) {
    const parsed = ServerSpecSchema.safeParse(spec);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new Error(`Invalid server spec: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    }
    this.spec = parsed.data;
    this.options = {
      name: options.name ?? 'mcp-gym',
      callTimeoutMs: options.callTimeoutMs ?? 30_000,
      connectTimeoutMs: options.connectTimeoutMs ?? 20_000,
      forwardStderr: options.forwardStderr ?? false,
      maxResultBytes: options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
    };
    if (!(Number.isSafeInteger(this.options.maxResultBytes) && this.options.maxResultBytes > 0)) {
      throw new Error(`Invalid option maxResultBytes: ${this.options.maxResultBytes} (a positive integer of bytes)`);
    }
  }

  /** Connects to a server and returns a client; throws with a clear message if it cannot. */
  static async connect(spec: ServerSpec, options: ConnectOptions = {}): Promise<ToolClient> {
    const client = new ToolClient(spec, options);
    if (client.spec.transport === 'stdio') client.fixture = await prepareFixture(client.spec);
    try {
      client.live = await client.open();
    } catch (err) {
      await client.fixture?.remove();
      throw err;
    }
    return client;
  }

  /** The stdio server's process id (undefined for other transports or while it is down). */
  get pid(): number | undefined {
    const t = this.live?.transport;
    return t instanceof ProcessStdioTransport ? t.pid : undefined;
  }

  /** The server's name and version as it reported them. */
  get serverInfo(): { name: string; version: string } | undefined {
    return this.live?.client.getServerVersion();
  }

  /** The capabilities the server declared in its `initialize` answer (e.g. `experimental["mcp-gym/episode"]`). */
  get serverCapabilities(): { experimental?: Record<string, unknown>; [k: string]: unknown } | undefined {
    return this.live?.client.getServerCapabilities() as { experimental?: Record<string, unknown> } | undefined;
  }

  /**
   * How many `notifications/tools/list_changed` the server has sent on this connection (0 until
   * one comes). A holder of a listed copy compares it with the count it listed at: a different one
   * means the list is stale (listTools lists again: the cache was dropped with the notification).
   */
  get toolsVersion(): number {
    return this.listChanges;
  }

  /** Calls `listener` on every `notifications/tools/list_changed` (after the cache was dropped); returns what removes it. */
  onToolsChanged(listener: () => void): () => void {
    this.toolsListeners.add(listener);
    return () => this.toolsListeners.delete(listener);
  }

  /** The server said its tools changed: the cached list is dropped, the listeners told. */
  private toolsChanged(): void {
    this.listChanges++;
    this.toolList = undefined;
    this.toolMap = undefined;
    for (const listener of [...this.toolsListeners]) {
      try {
        listener();
      } catch {
        // A listener's failure is its own; the notification is handled.
      }
    }
  }

  private describe(): string {
    const s = this.spec;
    if (s.transport === 'stdio') return `stdio server '${[s.command, ...s.args].join(' ')}'`;
    if (s.transport === 'http') return `HTTP server ${s.url}`;
    if (s.transport === 'openenv') return `OpenEnv environment ${s.url}`;
    return 'in-process server';
  }

  private async open(): Promise<Live> {
    const spec = this.spec;
    const client = new Client({ name: this.options.name, version: '0.1.0' });
    client.setNotificationHandler('notifications/tools/list_changed', () => this.toolsChanged());
    let transport: Transport;
    let closeServer: (() => Promise<void>) | undefined;
    if (spec.transport === 'stdio') {
      const run = this.fixture?.launch ?? spec; // with fixtures: `{fixture}` filled in with this connection's directory
      transport = new ProcessStdioTransport({
        command: run.command,
        args: run.args,
        env: run.env,
        cwd: run.cwd,
        forwardStderr: this.options.forwardStderr,
        maxMessageBytes: this.options.maxResultBytes,
      });
    } else if (spec.transport === 'http') {
      const headers: Record<string, string> = { ...spec.headers };
      if (spec.token !== undefined) headers.authorization = `Bearer ${spec.token}`;
      transport = new StreamableHTTPClientTransport(new URL(spec.url), {
        requestInit: { headers },
        fetch: createLinkedFetch({ maxMessageBytes: this.options.maxResultBytes }),
      });
    } else if (spec.transport === 'openenv') {
      transport = new OpenEnvTransport({
        url: spec.url,
        token: spec.token,
        headers: spec.headers,
        reset: spec.reset,
        maxMessageBytes: this.options.maxResultBytes,
      });
    } else {
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      const server = (await spec.factory()) as { connect(t: Transport): Promise<void>; close(): Promise<void> };
      if (typeof server?.connect !== 'function') throw new Error('Invalid server spec: factory must return an McpServer or Server');
      await server.connect(serverSide);
      transport = clientSide;
      closeServer = () => server.close();
    }
    const live: Live = { client, transport, dead: false, closeServer };
    try {
      await client.connect(transport, { timeout: this.options.connectTimeoutMs });
    } catch (err) {
      await transport.close().catch(() => {});
      let detail = messageOf(err);
      if (transport instanceof ProcessStdioTransport) {
        if (transport.exit) detail = `${describeExit(transport.exit)}${stderrPart(transport, '; its stderr')}`;
      }
      throw new Error(`Cannot connect to ${this.describe()}: ${detail}`);
    }
    // Chain after the SDK's own handler: mark the connection dead when the transport closes.
    const sdkOnClose = transport.onclose;
    transport.onclose = () => {
      live.dead = true;
      sdkOnClose?.();
    };
    return live;
  }

  /** The live connection, restarting a crashed stdio server when allowed. */
  private async ensure(): Promise<Live> {
    if (this.live && !this.live.dead) return this.live;
    if (this.closed) throw new ClosedError('The tool client was closed');
    if (this.connecting) return this.connecting;
    const spec = this.spec;
    if (spec.transport !== 'stdio' || !spec.restart) {
      throw new ClosedError(`The connection to the ${this.describe()} is closed`);
    }
    const now = Date.now();
    this.restartTimes = this.restartTimes.filter((t) => now - t < 60_000);
    if (this.restartTimes.length >= spec.maxRestartsPerMinute) {
      throw new ClosedError(`The ${this.describe()} keeps crashing: gave up after ${this.restartTimes.length} restarts within a minute`);
    }
    this.restartTimes.push(now);
    this.connecting = (async () => {
      try {
        await this.live?.transport.close().catch(() => {});
        const live = await this.open();
        this.restarts++;
        this.live = live;
        return live;
      } finally {
        this.connecting = undefined;
      }
    })();
    return this.connecting;
  }

  /** Every tool of the server, paging through `tools/list` to the end. Cached; `refresh` re-reads. */
  async listTools(options: { refresh?: boolean; timeoutMs?: number } = {}): Promise<ToolInfo[]> {
    if (this.toolList && !options.refresh) return this.toolList;
    const live = await this.ensure();
    const version = this.listChanges;
    const tools: ToolInfo[] = [];
    const seen = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; ; page++) {
      if (page >= 1000) throw new Error(`tools/list of the ${this.describe()} did not end after 1000 pages`);
      const res = await live.client.listTools(cursor === undefined ? {} : { cursor }, {
        timeout: options.timeoutMs ?? this.options.callTimeoutMs,
        cacheMode: 'bypass',
      } as never);
      for (const t of res.tools) {
        tools.push({
          name: t.name,
          title: t.title,
          description: t.description,
          inputSchema: t.inputSchema as Record<string, unknown>,
          outputSchema: t.outputSchema as Record<string, unknown> | undefined,
          annotations: t.annotations as Record<string, unknown> | undefined,
          ...(t._meta ? { _meta: t._meta as Record<string, unknown> } : {}),
        });
      }
      cursor = res.nextCursor;
      if (!cursor) break;
      if (seen.has(cursor)) throw new Error(`tools/list of the ${this.describe()} repeated the cursor ${JSON.stringify(cursor)}`);
      seen.add(cursor);
    }
    // A list_changed that came while the pages were read: this list may be stale, and is not kept.
    if (version === this.listChanges) {
      this.toolList = tools;
      this.toolMap = new Map(tools.map((t) => [t.name, t]));
    }
    return tools;
  }

  /**
   * The server's resources (every page): uri, name, description and MIME type; none when it does
   * not declare the resources capability.
   */
  async listResources(options: { timeoutMs?: number } = {}): Promise<ResourceInfo[]> {
    const live = await this.ensure();
    if (!live.client.getServerCapabilities()?.resources) return [];
    const out: ResourceInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await live.client.listResources(cursor === undefined ? {} : { cursor }, { timeout: options.timeoutMs ?? this.options.callTimeoutMs });
      for (const r of res.resources)
        out.push({ uri: r.uri, name: r.name, ...(r.description ? { description: r.description } : {}), ...(r.mimeType ? { mimeType: r.mimeType } : {}) });
      cursor = res.nextCursor;
      if (!cursor) break;
    }
    return out;
  }

  /** Calls a tool. Never throws: failures are results with `isError: true`. */
  async call(request: CallRequest, options: CallOptions = {}): Promise<ToolResult> {
    const t0 = performance.now();
    const name = request.name;
    const args = request.arguments ?? {};
    if (typeof args !== 'object' || args === null || Array.isArray(args)) {
      return errorResult(
        'invalid_arguments',
        `Invalid arguments for tool '${name}': expected a JSON object, got ${Array.isArray(args) ? 'an array' : args === null ? 'null' : typeof args}`,
        performance.now() - t0,
      );
    }
    let live: Live;
    try {
      const known = this.toolMap ?? new Map((await this.listTools()).map((t) => [t.name, t]));
      if (!known.has(name)) {
        const names = [...known.keys()];
        return errorResult('unknown_tool', `Unknown tool '${name}'. Available tools: ${names.join(', ') || '(none)'}`, performance.now() - t0);
      }
      live = this.live && !this.live.dead ? this.live : await this.ensure();
    } catch (err) {
      return this.failure(err, name, options, t0);
    }
    let meta = options.meta;
    if (options.episode !== undefined) meta = { ...meta, [EPISODE_META_KEY]: options.episode };
    try {
      const res = (await live.client.callTool(meta ? { name, arguments: args, _meta: meta } : { name, arguments: args }, {
        timeout: options.timeoutMs ?? this.options.callTimeoutMs,
        signal: options.signal,
        onprogress: options.onProgress,
        resetTimeoutOnProgress: options.resetTimeoutOnProgress,
        ...(options.maxTotalTimeoutMs !== undefined ? { maxTotalTimeout: options.maxTotalTimeoutMs } : {}),
      })) as CallToolResult;
      const ms = performance.now() - t0;
      if (this.spec.transport === 'inprocess') {
        // The other transports bound the bytes they read; in-process, the result's JSON is measured.
        const size = jsonBytes(res);
        if (size > this.options.maxResultBytes) return this.tooLarge(name, { size, exact: true, limit: this.options.maxResultBytes }, ms);
      }
      const content = (res.content ?? []) as ContentBlock[];
      if (res.isError) {
        const first = content[0];
        const text = first && typeof first.text === 'string' ? first.text : '';
        const kind = text.startsWith('Input validation error') ? 'invalid_arguments' : 'tool';
        return { content, structured: res.structuredContent, isError: true, ms, errorKind: kind };
      }
      return { content, structured: res.structuredContent, isError: false, ms };
    } catch (err) {
      return this.failure(err, name, options, t0, live);
    }
  }

  private failure(err: unknown, name: string, options: CallOptions, t0: number, live?: Live): ToolResult {
    const ms = performance.now() - t0;
    const timeout = options.timeoutMs ?? this.options.callTimeoutMs;
    if (options.signal?.aborted) return errorResult('aborted', `The call to tool '${name}' was cancelled`, ms);
    const large = tooLargeOf(err);
    if (large) return this.tooLarge(name, large, ms);
    const transport = live?.transport;
    if (transport instanceof ProcessStdioTransport && (live?.dead || transport.exit || transport.endless)) {
      const restart = this.spec.transport === 'stdio' && this.spec.restart && !this.closed;
      if (transport.endless) {
        return this.tooLarge(
          name,
          transport.endless,
          ms,
          ` The server wrote a line that did not end, so it was ended${restart ? '; it will be restarted for the next call' : ''}.`,
        );
      }
      return errorResult(
        'crashed',
        `The tool server crashed during the call to '${name}': ${describeExit(transport.exit)}.` +
          stderrPart(transport, ' Its stderr') +
          (restart ? ' It will be restarted for the next call.' : ''),
        ms,
      );
    }
    if (err instanceof ClosedError) return errorResult(this.closed ? 'closed' : 'crashed', err.message, ms);
    if (err instanceof SdkError) {
      if (err.code === SdkErrorCode.RequestTimeout) return errorResult('timeout', `The call to tool '${name}' timed out after ${timeout} ms`, ms);
      if (err.code === SdkErrorCode.ConnectionClosed || err.code === SdkErrorCode.NotConnected || err.code === SdkErrorCode.SendFailed) {
        return errorResult('closed', `The connection to the ${this.describe()} closed during the call to '${name}': ${err.message}`, ms);
      }
      return errorResult('protocol', `The call to tool '${name}' failed: ${err.message}`, ms);
    }
    if (err instanceof ProtocolError) {
      if (err.code === INVALID_PARAMS && /not found|unknown tool/i.test(err.message)) {
        return errorResult('unknown_tool', `Unknown tool '${name}': ${err.message}`, ms);
      }
      if (err.code === INVALID_PARAMS) return errorResult('invalid_arguments', `Invalid arguments for tool '${name}': ${err.message}`, ms);
      return errorResult('protocol', `The server answered the call to '${name}' with an error: ${err.message}`, ms);
    }
    const msg = messageOf(err);
    if (/ECONNREFUSED|fetch failed|ECONNRESET|socket hang up/i.test(msg + String((err as { cause?: unknown })?.cause ?? ''))) {
      return errorResult('closed', `Cannot reach the ${this.describe()}: ${msg}`, ms);
    }
    return errorResult('protocol', `The call to tool '${name}' failed: ${msg}`, ms);
  }

  private tooLarge(name: string, t: TooLarge, ms: number, extra = ' Ask for less at a time (a smaller range, a narrower query).'): ToolResult {
    return errorResult('too_large', `The call to tool '${name}' failed: ${tooLargeMessage(t)}.${extra}`, ms);
  }

  /** Closes the connection: ends an HTTP session, or the stdio server's whole process tree. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.connecting?.catch(() => {});
    const live = this.live;
    this.live = undefined;
    if (!live) {
      await this.fixture?.remove();
      return;
    }
    const t = live.transport;
    if (t instanceof StreamableHTTPClientTransport && t.sessionId) {
      await t.terminateSession().catch(() => {});
    }
    await live.client.close().catch(() => {});
    await t.close().catch(() => {});
    await live.closeServer?.().catch(() => {});
    if (this.spec.transport === 'inprocess') await this.spec.onClose?.();
    await this.fixture?.remove(); // after the server's process tree has ended
  }
}

class ClosedError extends Error {}

/** The bytes of a value's JSON (0 when it has none). */
function jsonBytes(value: unknown): number {
  try {
    const json = JSON.stringify(value);
    return json === undefined ? 0 : Buffer.byteLength(json, 'utf8');
  } catch {
    return 0;
  }
}

/**
 * A stdio server's stderr for a message: ` Its stderr ends with: ...` when it is short, otherwise
 * its first and its last part (` Its stderr (its start and its end, of 9,000 characters): ...`).
 */
function stderrPart(transport: ProcessStdioTransport, lead: string): string {
  const text = transport.stderrText.trim();
  if (!text) return '';
  return transport.stderrCut
    ? `${lead} (its start and its end, of ${transport.stderrLength.toLocaleString('en-US')} characters): ${text}`
    : `${lead} ends with: ${text}`;
}
