/**
 * The policy server itself: startPolicyServer, its routes, the Host/Origin and bearer token checks
 * every route makes, errors answered in OpenAI's shape, and closing it.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { acceptedHostNames, hostAllowed, invalidOption, seededRandom, tokenMatches, tokenProblem } from '../../../lib/index.ts';
import { GenerationBatcher } from '../onnx/index.ts';
import { chat } from './chat.ts';
import { ApiError, sendError, sendJson } from './http.ts';
import { reload } from './reload.ts';
import { modelLoader, type ServeState } from './state.ts';
import type { PolicyServer, PolicyServerOptions } from './types.ts';

/** Starts the server; resolves once it listens. */
export async function startPolicyServer(o: PolicyServerOptions): Promise<PolicyServer> {
  const host = o.host ?? '127.0.0.1';
  const problem = o.token === undefined ? undefined : tokenProblem(o.token);
  if (problem) throw invalidOption(`the bearer token ${problem}`);
  const allowed = new Set(acceptedHostNames(host, o.allowedHosts));

  const models = modelLoader(o);
  const modelDir = resolve(o.modelDir);
  const first = await models.load(modelDir);
  const modelName = o.modelName ?? first.name;
  const created = Math.floor(Date.now() / 1000);
  const serverRng = seededRandom(o.seed ?? 1);
  const batcher = new GenerationBatcher(first, {
    maxBatch: o.maxBatch ?? 32,
    sampling: { temperature: 1, topK: 0, topP: 1 },
    rng: serverRng,
    mode: o.batching ?? 'static',
  });
  const s: ServeState = {
    o,
    allowed,
    models,
    batcher,
    modelName,
    created,
    serverRng,
    modelDir,
    requests: 0,
    inexact: 0,
    reloading: Promise.resolve(),
    retiring: [],
  };

  const server = createServer((req, res) => {
    handle(s, req, res).catch((err: unknown) => answerError(req, res, err));
  });
  server.keepAliveTimeout = 30_000;
  try {
    await new Promise<void>((ok, fail) => {
      server.once('error', fail);
      server.listen(o.port ?? 0, host, () => ok());
    });
  } catch (err) {
    await first.close();
    throw err;
  }
  return policyServer(s, server, host);
}

/** The handle of a server that listens. */
function policyServer(s: ServeState, server: Server, host: string): PolicyServer {
  const { batcher } = s;
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closed = false;
  return {
    url: `http://${shownHost}:${port}/v1`,
    port,
    modelName: s.modelName,
    get model() {
      return batcher.model;
    },
    stats: () => ({ ...batcher.stats(), requests: s.requests, inexact: s.inexact, version: batcher.model.version, modelDir: s.modelDir }),
    async close() {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((r) => server.close(() => r()));
      await batcher.close();
      server.closeAllConnections();
      await stopped;
      await s.reloading;
      await Promise.all(s.retiring);
      await batcher.model.close();
    },
  };
}

const ROUTES: Record<string, string[]> = { '/v1/models': ['GET'], '/v1/chat/completions': ['POST'], '/v1/reload': ['POST'], '/health': ['GET'] };

async function handle(s: ServeState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { o, allowed, modelName } = s;
  if (!hostAllowed(allowed, req.headers))
    throw new ApiError(
      403,
      `Forbidden: the Host or Origin header names a host this server does not answer (allowed: ${[...allowed].join(', ')})`,
      'permission_error',
      'host_not_allowed',
    );
  if (o.token !== undefined && !tokenMatches(req.headers.authorization, o.token)) {
    throw new ApiError(401, 'Incorrect or missing API key: send Authorization: Bearer <token>', 'authentication_error', 'invalid_api_key');
  }
  const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
  const method = req.method ?? 'GET';
  const modelPath = /^\/v1\/models\/(.+)$/.exec(path);
  const methods = modelPath ? ['GET'] : ROUTES[path];
  if (!methods)
    throw new ApiError(
      404,
      `Not found: ${method} ${path}. Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/reload, GET /health`,
      'not_found_error',
      'not_found',
    );
  if (!methods.includes(method)) throw new ApiError(405, `${path} answers ${methods.join(', ')}, not ${method}`, 'invalid_request_error', 'method_not_allowed');
  if (modelPath) {
    const name = decodeURIComponent(modelPath[1]!);
    if (name !== modelName)
      throw new ApiError(404, `The model \`${name}\` does not exist: this server serves \`${modelName}\``, 'invalid_request_error', 'model_not_found');
    return sendJson(res, 200, modelCard(s));
  }
  if (path === '/v1/models') return sendJson(res, 200, { object: 'list', data: [modelCard(s)] });
  if (path === '/health') return sendJson(res, 200, { status: 'ok' });
  if (path === '/v1/reload') return reload(s, req, res);
  return chat(s, req, res);
}

/** A route's failure, answered in OpenAI's shape (an error that is not an ApiError is a 500). */
function answerError(req: IncomingMessage, res: ServerResponse, err: unknown): void {
  const e = err instanceof ApiError ? err : new ApiError(500, err instanceof Error ? err.message : String(err), 'internal_server_error');
  sendError(
    res,
    e,
    e.status === 401
      ? { 'www-authenticate': 'Bearer' }
      : e.status === 405
        ? { allow: ROUTES[new URL(req.url ?? '/', 'http://localhost').pathname]?.join(', ') ?? 'GET' }
        : {},
  );
}

function modelCard(s: ServeState) {
  const m = s.batcher.model;
  return {
    id: s.modelName,
    object: 'model',
    created: s.created,
    owned_by: 'mcp-gym',
    root: s.modelDir,
    parent: null,
    max_model_len: m.maxLen,
    version: m.version,
  };
}
