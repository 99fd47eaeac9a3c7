/**
 * Serving a bundled server: over stdio (one process, one connection) or over streamable HTTP
 * (stateless per request, the SDK's `createMcpHandler`), bound to localhost unless told
 * otherwise, with Host/Origin validation (localhost names, the bound host and `allowedHosts`)
 * and an optional bearer token.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { hostHeaderValidation, originValidation, toNodeHandler } from '@modelcontextprotocol/node';
import { serverFactory, type BackendOptions, type ServerDefinition } from './common.ts';

export interface StdioServing {
  close(): Promise<void>;
}

/** Serves `def` over this process's stdin/stdout. Nothing else may write to stdout. */
export async function serveOverStdio<S>(def: ServerDefinition<S>, options: BackendOptions = {}): Promise<StdioServing> {
  const { factory, backend } = serverFactory(def, options);
  const handle = await serveStdio(factory, { onerror: (e) => process.stderr.write(`[${def.name}] ${e.message}\n`) });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close().catch(() => {});
    await backend.close();
  };
  // When the client closes our stdin, finish and exit.
  process.stdin.once('end', () => void close().then(() => process.exit(0)));
  return { close };
}

export interface HttpOptions extends BackendOptions {
  port?: number;
  /** Interface to bind. Default 127.0.0.1 (localhost only). */
  host?: string;
  /** When set, every request must carry `Authorization: Bearer <token>` (the scheme in any case). Must not be empty. */
  token?: string;
  /** Path of the MCP endpoint. Default `/mcp`. */
  path?: string;
  /**
   * Host names accepted in the Host and Origin headers, beyond the bound host and localhost names
   * (without a port: the check ignores ports; IPv6 addresses with or without brackets).
   */
  allowedHosts?: string[];
}

export interface HttpServing {
  url: string;
  port: number;
  server: HttpServer;
  close(): Promise<void>;
}

const LOCAL_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/**
 * Why `token` cannot be a bearer token, or undefined when it can. An empty token (an empty
 * `--token ""` or MCP_GYM_TOKEN) would make a server that refuses every request.
 */
function tokenProblem(token: string): string | undefined {
  if (token === '') return 'is empty: no request could carry it, so every request would be refused';
  if (token.trim() !== token) return 'begins or ends with whitespace, which HTTP drops from header values: no request could carry it';
  if ([...token].some((c) => c < ' ' || c === '\x7f')) return 'holds a control character, which no HTTP header may carry';
  return undefined;
}

/** An invalid option of serveOverHttp (the command line reports it as a usage error). */
function invalidOption(message: string): TypeError {
  return Object.assign(new TypeError(message), { code: 'ERR_INVALID_ARG_VALUE' });
}

/**
 * `name` as the Host and Origin checks compare it (what `new URL()` gives as the hostname: lower
 * case, IPv6 in brackets, IDN as punycode), or undefined when it is not a host name.
 */
function hostName(name: string): string | undefined {
  const given = name.trim();
  const bareIpv6 = !given.startsWith('[') && given.indexOf(':') !== given.lastIndexOf(':');
  const text = bareIpv6 ? `[${given}]` : given;
  if (text === '' || text.replace(/^\[[^\]]*\]/, '').includes(':') || /[/?#@\\]/.test(text)) return undefined;
  try {
    return new URL(`http://${text}`).hostname || undefined;
  } catch {
    return undefined;
  }
}

/** `allowedHosts` as the checks compare them; throws for a name that is not one. */
function allowedNames(names: string[]): string[] {
  return names.map((name) => {
    const canonical = hostName(name);
    if (canonical === undefined) {
      const hint = /^[^[]*:\d*$|\]:\d*$/.test(name.trim()) ? ': give the name without a port (the check ignores ports)' : '';
      throw invalidOption(`allowed host '${name}' is not a host name${hint}`);
    }
    return canonical;
  });
}

/** Whether `header` is `Bearer <token>`; the scheme is case-insensitive (RFC 7235 §2.1). */
function tokenMatches(header: string | undefined, token: string): boolean {
  const m = header === undefined ? null : /^bearer[ \t]+(.*)$/i.exec(header.trim());
  if (!m) return false;
  const given = Buffer.from(m[1]!.trim());
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

function reject(res: ServerResponse, status: number, message: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...extra });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

/** Serves `def` over streamable HTTP. Resolves once listening; `port: 0` picks a free port. */
export async function serveOverHttp<S>(def: ServerDefinition<S>, options: HttpOptions = {}): Promise<HttpServing> {
  const host = options.host ?? '127.0.0.1';
  const path = options.path ?? '/mcp';
  const problem = options.token === undefined ? undefined : tokenProblem(options.token);
  if (problem) throw invalidOption(`the bearer token ${problem}`);
  // The bound host, when it is not a name (listen() then says what is wrong with it), is left out.
  const bound = hostName(host);
  const allowed = [...new Set([...allowedNames(LOCAL_NAMES), ...(bound === undefined ? [] : [bound]), ...allowedNames(options.allowedHosts ?? [])])];
  const { factory, backend } = serverFactory(def, options);
  const handler = createMcpHandler(factory, { onerror: () => {} });
  const nodeHandler = toNodeHandler(handler);
  const validateHost = hostHeaderValidation(allowed);
  const validateOrigin = originValidation(allowed);

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== path) return reject(res, 404, `Not found: the MCP endpoint is ${path}`);
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    if (options.token !== undefined && !tokenMatches(req.headers.authorization, options.token)) {
      return reject(res, 401, 'Unauthorized: a valid bearer token is required', { 'www-authenticate': 'Bearer' });
    }
    nodeHandler(req, res).catch((err: unknown) => {
      if (!res.headersSent) reject(res, 500, err instanceof Error ? err.message : String(err));
    });
  });
  server.keepAliveTimeout = 30_000;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
  } catch (err) {
    await handler.close().catch(() => {});
    await backend.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closed = false;
  return {
    url: `http://${shownHost}:${port}${path}`,
    port,
    server,
    async close() {
      if (closed) return;
      closed = true;
      await handler.close().catch(() => {});
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await backend.close();
    },
  };
}
