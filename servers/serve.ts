/**
 * Serving a bundled server: over stdio (one process, one connection) or over streamable HTTP
 * (stateless per request, the SDK's `createMcpHandler`), bound to localhost unless told
 * otherwise, with Host/Origin validation (localhost names, the bound host and `allowedHosts`)
 * and an optional bearer token.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { hostHeaderValidation, originValidation, toNodeHandler } from '@modelcontextprotocol/node';
import { acceptedHostNames, invalidOption, tokenMatches, tokenProblem } from '../lib/index.ts';
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
  const allowed = acceptedHostNames(host, options.allowedHosts);
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
