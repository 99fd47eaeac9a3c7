/**
 * An OpenEnv environment that exposes MCP tools (openenv-core's MCPEnvironment, or `mcp-gym
 * serve-env`), reached as an MCP server: an MCP SDK Transport whose JSON-RPC requests become
 * OpenEnv WebSocket messages (docs/openenv.md, "The other direction"). The connection opens a
 * session on `/ws` and resets it (with `reset`'s parameters); `tools/list` is a step with
 * `{"type": "list_tools"}`, `tools/call` a step with `{"type": "call_tool", "tool_name",
 * "arguments"}` whose CallToolObservation (`result`, or `error`) becomes the MCP result;
 * `initialize` and `ping` are answered here. The session is the episode's state: mcp-gym opens one
 * per episode (like a stdio server's process), and a socket that closes is a closed transport (the
 * call in flight fails as a crash).
 */
import type { Transport } from '@modelcontextprotocol/client';
import WebSocket from 'ws';
import { isJsonObject as isObject } from '../../lib/index.ts';

type JsonRpc = { jsonrpc: '2.0'; id?: string | number; method?: string; params?: Record<string, unknown>; result?: unknown; error?: unknown };

export interface OpenEnvTransportOptions {
  /** The environment's base URL (http:// or ws://); the socket is `<url>/ws`. */
  url: string;
  token?: string;
  headers?: Record<string, string>;
  /** The reset message's data (e.g. a seed or a task id). */
  reset?: Record<string, unknown>;
  /** The largest message accepted, bytes. */
  maxMessageBytes?: number;
  /** The longest the WebSocket handshake and the reset may take, ms (default 30,000). */
  connectTimeoutMs?: number;
  /** The longest a step may take before the session is given up (default 600,000 ms; the caller's own call timeout is usually shorter). */
  requestTimeoutMs?: number;
}

export class OpenEnvTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: Transport['onmessage'];
  private ws?: WebSocket;
  private waiting: { ok: (m: Record<string, unknown>) => void; fail: (e: Error) => void }[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** The reset's observation. */
  resetObservation?: Record<string, unknown>;

  constructor(private readonly o: OpenEnvTransportOptions) {}

  async start(): Promise<void> {
    const base = this.o.url.replace(/^http/, 'ws').replace(/\/+$/, '');
    const headers: Record<string, string> = { ...this.o.headers };
    if (this.o.token !== undefined) headers.authorization = `Bearer ${this.o.token}`;
    const connectMs = this.o.connectTimeoutMs ?? 30_000;
    const ws = new WebSocket(`${base}/ws`, { headers, maxPayload: this.o.maxMessageBytes ?? 32 * 2 ** 20, handshakeTimeout: connectMs });
    this.ws = ws;
    await new Promise<void>((ok, fail) => {
      ws.once('open', () => ok());
      ws.once('unexpected-response', (_req, res) => fail(new Error(`the OpenEnv server answered the WebSocket upgrade with HTTP ${res.statusCode}`)));
      ws.once('error', (err) => fail(err));
    });
    ws.on('message', (raw) => {
      let m: unknown;
      try {
        m = JSON.parse(String(raw));
      } catch {
        m = { type: 'error', data: { message: `not JSON: ${String(raw).slice(0, 200)}` } };
      }
      const w = this.waiting.shift();
      // A message nobody asked for (a server that says the session expired): replies carry no id to pair them
      // again, so the session is given up.
      if (!w) return void this.close();
      w.ok(isObject(m) ? m : { type: 'error', data: { message: 'not a JSON object' } });
    });
    ws.on('close', () => this.gone());
    ws.on('error', (err) => this.onerror?.(err));
    const r = await this.ask({ type: 'reset', data: this.o.reset ?? {} }, connectMs);
    if (r.type === 'error') throw new Error(`the OpenEnv reset failed: ${errorText(r.data)}`);
    this.resetObservation = isObject(r.data) && isObject(r.data.observation) ? r.data.observation : {};
  }

  /** One OpenEnv message and its answer, after the ones before it; past `timeoutMs` the session is given up. */
  private ask(message: Record<string, unknown>, timeoutMs = this.o.requestTimeoutMs ?? 600_000): Promise<Record<string, unknown>> {
    const next = this.queue.then(
      () =>
        new Promise<Record<string, unknown>>((ok, fail) => {
          const ws = this.ws;
          if (this.closed || !ws || ws.readyState !== ws.OPEN) return fail(new Error('the OpenEnv session is closed'));
          const timer = setTimeout(() => {
            fail(new Error(`the OpenEnv environment did not answer a ${String(message.type)} in ${timeoutMs} ms`));
            void this.close();
          }, timeoutMs);
          timer.unref();
          this.waiting.push({
            ok: (m) => {
              clearTimeout(timer);
              ok(m);
            },
            fail: (e) => {
              clearTimeout(timer);
              fail(e);
            },
          });
          ws.send(JSON.stringify(message));
        }),
    );
    this.queue = next.catch(() => undefined);
    return next;
  }

  async send(message: Parameters<Transport['send']>[0]): Promise<void> {
    const m = message as JsonRpc;
    if (m.id === undefined || m.method === undefined) return; // a notification, or a response to the server: nothing to do
    const reply = (body: { result?: unknown; error?: { code: number; message: string } }) =>
      queueMicrotask(() => this.onmessage?.({ jsonrpc: '2.0', id: m.id!, ...body } as never));
    try {
      if (m.method === 'initialize') {
        const version = isObject(m.params) && typeof m.params.protocolVersion === 'string' ? m.params.protocolVersion : '2025-06-18';
        return reply({ result: { protocolVersion: version, capabilities: { tools: {} }, serverInfo: { name: 'openenv', version: '0' } } });
      }
      if (m.method === 'ping') return reply({ result: {} });
      if (m.method === 'tools/list') {
        const r = await this.ask({ type: 'step', data: { type: 'list_tools' } });
        if (r.type === 'error') return reply({ error: { code: -32000, message: errorText(r.data) } });
        const tools = isObject(r.data) && isObject(r.data.observation) && Array.isArray(r.data.observation.tools) ? r.data.observation.tools : [];
        return reply({
          result: {
            tools: tools.filter(isObject).map((t) => ({
              name: String(t.name),
              ...(typeof t.description === 'string' ? { description: t.description } : {}),
              inputSchema: isObject(t.input_schema) ? { type: 'object', ...t.input_schema } : isObject(t.inputSchema) ? t.inputSchema : { type: 'object' },
            })),
          },
        });
      }
      if (m.method === 'tools/call') {
        const p = isObject(m.params) ? m.params : {};
        const r = await this.ask({ type: 'step', data: { type: 'call_tool', tool_name: String(p.name), arguments: isObject(p.arguments) ? p.arguments : {} } });
        if (r.type === 'error') return reply({ result: { content: [{ type: 'text', text: errorText(r.data) }], isError: true } });
        return reply({ result: callResult(isObject(r.data) && isObject(r.data.observation) ? r.data.observation : {}) });
      }
      return reply({ error: { code: -32601, message: `Method not found: ${m.method} (an OpenEnv environment offers tools only)` } });
    } catch (err) {
      return reply({ error: { code: -32000, message: (err as Error).message } });
    }
  }

  private gone(): void {
    for (const w of this.waiting.splice(0)) w.fail(new Error('the OpenEnv session closed'));
    if (this.closed) return;
    this.closed = true;
    this.onclose?.();
  }

  async close(): Promise<void> {
    const ws = this.ws;
    if (ws && ws.readyState === ws.CONNECTING) ws.terminate(); // closed while connecting: no session is left behind
    if (ws && ws.readyState === ws.OPEN) {
      try {
        ws.send(JSON.stringify({ type: 'close' }));
      } catch {
        // going anyway
      }
      ws.close();
    }
    this.gone();
  }
}

function errorText(data: unknown): string {
  if (isObject(data)) return `${String(data.message ?? 'error')}${data.code ? ` (${String(data.code)})` : ''}`;
  return String(data);
}

/** A CallToolObservation (`result`: an MCP CallToolResult in either case convention, or any value; `error`) as an MCP result. */
function callResult(obs: Record<string, unknown>): Record<string, unknown> {
  if (isObject(obs.error)) return { content: [{ type: 'text', text: String(obs.error.message ?? 'the tool failed') }], isError: true };
  const r = obs.result;
  if (isObject(r) && Array.isArray(r.content)) {
    const content = r.content
      .filter(isObject)
      .map((c) => (c.type === 'text' ? { type: 'text', text: String(c.text ?? '') } : { type: 'text', text: JSON.stringify(c) }));
    const structured = r.structured_content ?? r.structuredContent;
    return { content, isError: r.is_error === true || r.isError === true, ...(isObject(structured) ? { structuredContent: structured } : {}) };
  }
  // serve-env's own observation: the tool's text in tool_result
  if (isObject(obs.tool_result)) return { content: [{ type: 'text', text: String(obs.tool_result.text ?? '') }], isError: obs.tool_result.is_error === true };
  return { content: [{ type: 'text', text: typeof r === 'string' ? r : JSON.stringify(r ?? null) }], isError: false };
}
