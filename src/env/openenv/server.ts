/**
 * `mcp-gym serve-env`: a task set served as an OpenEnv environment (docs/openenv.md has the wire
 * format). WebSocket `/ws`: one connection is one session (messages reset, step, state, close and
 * mcp; answers observation, state, error and mcp). HTTP: POST /reset starts an episode in a new
 * session (or in `session_id`'s) and says its id, POST /step and GET /state take it, POST /close
 * ends it; GET /health, /metadata and /schema. Sessions up to `maxSessions` (beyond: a
 * CAPACITY_REACHED error, HTTP 503); a session idle for `sessionTimeoutS` is closed. Localhost by
 * default, Host and Origin checked, an optional bearer token on every route and on the upgrade.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  acceptedHostNames,
  hostAllowed,
  HttpError,
  invalidOption,
  isJsonObject,
  readJsonObject,
  seededRandom,
  sendJson,
  tokenMatches,
  tokenProblem,
} from '../../../lib/index.ts';
import type { Environment } from '../environment.ts';
import type { Task } from '../task.ts';
import type { Trajectory } from '../types.ts';
import { envSchemas } from './schema.ts';
import { EnvSession, SessionError, type StepResult } from './session.ts';

export interface EnvServerOptions {
  env: Environment;
  tasks: readonly Task[];
  /** The environment's name (GET /metadata), e.g. `mcp-gym:calculator`. */
  name: string;
  description?: string;
  version?: string;
  host?: string;
  port?: number;
  allowedHosts?: string[];
  /** Every request must carry `Authorization: Bearer <token>`. */
  token?: string;
  /** Sessions at once (WebSocket and HTTP together). Default 64. */
  maxSessions?: number;
  /** A session idle this long is closed. Default 600 s; 0: never. */
  sessionTimeoutS?: number;
  /** Draws the tasks of resets that name neither a task nor a seed. Default 1. */
  seed?: number;
  /** Told each finished episode. */
  onTrajectory?: (t: Trajectory) => void;
}

export interface EnvServer {
  url: string;
  port: number;
  /** Sessions open now, and episodes finished since the start. */
  stats(): { sessions: number; episodes: number };
  close(): Promise<void>;
}

const ROUTES: Record<string, string[]> = {
  '/reset': ['POST'],
  '/step': ['POST'],
  '/state': ['GET'],
  '/close': ['POST'],
  '/health': ['GET'],
  '/metadata': ['GET'],
  '/schema': ['GET'],
};

/** Starts the server; resolves once it listens. */
export async function startEnvServer(o: EnvServerOptions): Promise<EnvServer> {
  const host = o.host ?? '127.0.0.1';
  const problem = o.token === undefined ? undefined : tokenProblem(o.token);
  if (problem) throw invalidOption(`the bearer token ${problem}`);
  if (o.tasks.length === 0) throw invalidOption('no tasks to serve');
  const maxSessions = o.maxSessions ?? 64;
  if (!Number.isInteger(maxSessions) || maxSessions < 1) throw invalidOption(`maxSessions must be a positive integer, got ${maxSessions}`);
  const timeoutS = o.sessionTimeoutS ?? 600;
  if (!(timeoutS >= 0)) throw invalidOption(`sessionTimeoutS must be 0 or more, got ${timeoutS}`);
  const allowed = new Set(acceptedHostNames(host, o.allowedHosts));
  const rng = seededRandom(o.seed ?? 1);
  const sessions = new Map<string, EnvSession>();
  const sockets = new Map<string, WebSocket>();
  let episodes = 0;
  let samples = 0;
  const pick = (seed: number | undefined): Task => {
    const r = seed === undefined ? rng() : seededRandom(seed)();
    return o.tasks[Math.floor(r * o.tasks.length)]!;
  };
  /** The sessions opened by HTTP resets (the HTTP routes take only these ids). */
  const httpSessions = new Set<string>();
  const open = (): EnvSession => {
    if (sessions.size >= maxSessions)
      throw new CapacityError(
        `the server is at capacity: ${sessions.size} of ${maxSessions} sessions open (close one, or start serve-env with a larger --max-sessions)`,
        sessions.size,
        maxSessions,
      );
    const s = new EnvSession({
      env: o.env,
      tasks: o.tasks,
      pick,
      runId: 'serve-env',
      nextSample: () => samples++,
      onTrajectory: (t) => {
        episodes++;
        o.onTrajectory?.(t);
      },
    });
    sessions.set(s.id, s);
    return s;
  };
  const drop = async (s: EnvSession) => {
    sessions.delete(s.id);
    httpSessions.delete(s.id);
    const ws = sockets.get(s.id);
    sockets.delete(s.id);
    if (ws && ws.readyState === ws.OPEN) ws.close(1000, 'session closed');
    await s.close();
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => answerError(res, err));
  });
  server.keepAliveTimeout = 30_000;

  const authorized = (req: IncomingMessage): HttpError | undefined => {
    if (!hostAllowed(allowed, req.headers))
      return new HttpError(403, `Forbidden: the Host or Origin header names a host this server does not answer (allowed: ${[...allowed].join(', ')})`);
    if (o.token !== undefined && !tokenMatches(req.headers.authorization, o.token))
      return new HttpError(401, 'Unauthorized: send Authorization: Bearer <token>');
    return undefined;
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refused = authorized(req);
    if (refused) throw refused;
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const methods = ROUTES[path];
    if (!methods)
      throw new HttpError(
        404,
        `Not found: ${method} ${path}. Routes: ${Object.entries(ROUTES)
          .map(([p, m]) => `${m[0]} ${p}`)
          .join(', ')}, WebSocket /ws`,
      );
    if (!methods.includes(method)) throw new HttpError(405, `${path} answers ${methods.join(', ')}, not ${method}`);
    if (path === '/health') return sendJson(res, 200, { status: 'healthy' });
    if (path === '/metadata')
      return sendJson(res, 200, {
        name: o.name,
        description: o.description ?? `${o.tasks.length} mcp-gym tasks: reset draws one, step takes call_tool or answer actions`,
        version: o.version ?? null,
        readme_content: null,
        author: null,
        documentation_url: null,
      });
    if (path === '/schema') return sendJson(res, 200, envSchemas());
    if (path === '/state') {
      const s = sessionOf(url.searchParams.get('session_id') ?? undefined, 'GET /state?session_id=...');
      return sendJson(res, 200, s.state());
    }
    const body = await readJsonObject(req, {});
    const id = body.session_id;
    if (id !== undefined && typeof id !== 'string') throw new HttpError(422, `session_id must be a string, got ${JSON.stringify(id)}`);
    if (path === '/close') {
      const s = sessionOf(id, 'POST /close {"session_id": ...}');
      await drop(s);
      return sendJson(res, 200, { session_id: s.id, closed: true });
    }
    if (path === '/reset') {
      const s = id === undefined ? open() : sessionOf(id, 'POST /reset');
      httpSessions.add(s.id);
      const { session_id: _, ...params } = body;
      let r: StepResult;
      try {
        r = await s.reset(params);
      } catch (err) {
        if (id === undefined) await drop(s); // a session made for a reset that failed is not kept
        throw err;
      }
      return sendJson(res, 200, r, { 'x-session-id': s.id });
    }
    // POST /step
    const s = sessionOf(id, 'POST /step {"action": ..., "session_id": ...} (the id comes with /reset\'s observation)');
    if (body.action === undefined)
      throw new HttpError(422, 'step: the body needs `action` (an object: {"type": "call_tool", "tool_name", "arguments"} or {"type": "answer", "content"})');
    return sendJson(res, 200, await s.step(body.action), { 'x-session-id': s.id });
  }

  function sessionOf(id: string | undefined, how: string): EnvSession {
    if (id === undefined) throw new HttpError(422, `session_id is missing: ${how}`);
    const s = httpSessions.has(id) ? sessions.get(id) : undefined;
    if (!s) throw new HttpError(404, `Unknown session_id '${id}' (closed, expired after ${timeoutS} s idle, never opened, or a WebSocket's)`);
    return s;
  }

  // WebSocket: the upgrade passes the same checks as every route.
  const wss = new WebSocketServer({ noServer: true, maxPayload: 32 * 2 ** 20 });
  server.on('upgrade', (req, socket, head) => {
    socket.on('error', () => socket.destroy()); // a client that resets the connection must not take the server down
    const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '');
    const refused = path === '/ws' ? authorized(req) : new HttpError(404, `Not found: WebSocket ${path} (the WebSocket route is /ws)`);
    if (refused) {
      const extra = refused.status === 401 ? 'WWW-Authenticate: Bearer\r\n' : '';
      socket.end(
        `HTTP/1.1 ${refused.status} ${refused.status === 401 ? 'Unauthorized' : refused.status === 403 ? 'Forbidden' : 'Not Found'}\r\n${extra}Content-Type: text/plain\r\nConnection: close\r\n\r\n${refused.message}`,
        () => socket.destroy(),
      );
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serveSocket(ws));
  });

  function serveSocket(ws: WebSocket): void {
    ws.on('error', () => ws.terminate()); // a malformed frame or an oversized message ends this socket, not the server
    const send = (type: string, data: unknown) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type, data }));
    };
    let s: EnvSession;
    try {
      s = open();
    } catch (err) {
      const e = err as CapacityError;
      send('error', { message: e.message, code: 'CAPACITY_REACHED', active_sessions: e.active, max_sessions: e.max });
      ws.close(1013, 'capacity reached');
      return;
    }
    sockets.set(s.id, ws);
    let chain: Promise<void> = Promise.resolve();
    ws.on('message', (raw) => {
      // one message at a time, in order
      chain = chain.then(() => onMessage(String(raw))).catch(() => {});
    });
    ws.on('close', () => {
      sockets.delete(s.id);
      if (sessions.has(s.id)) void drop(s);
    });
    const onMessage = async (text: string): Promise<void> => {
      let msg: unknown;
      try {
        msg = JSON.parse(text);
      } catch (err) {
        return send('error', { message: `Invalid JSON: ${(err as Error).message}`, code: 'INVALID_JSON' });
      }
      const m = (typeof msg === 'object' && msg !== null && !Array.isArray(msg) ? msg : {}) as Record<string, unknown>;
      const data = m.data;
      try {
        switch (m.type) {
          case 'reset':
            return send('observation', await s.reset(isJsonObject(data) ? data : {}));
          case 'step':
            return send('observation', await s.step(data));
          case 'state':
            return send('state', s.state());
          case 'close':
            void drop(s); // the session ends now, not when the peer answers the close handshake
            return;
          case 'mcp':
            return send('mcp', await mcp(s, data));
          default:
            return send('error', { message: `Unknown message type: ${JSON.stringify(m.type)} (reset, step, state, close, mcp)`, code: 'UNKNOWN_TYPE' });
        }
      } catch (err) {
        const e = err as SessionError;
        send('error', { message: e.message, code: e instanceof SessionError ? e.code : 'EXECUTION_ERROR', ...(e.errors ? { errors: e.errors } : {}) });
      }
    };
  }

  // Idle sessions expire.
  const sweep =
    timeoutS > 0
      ? setInterval(
          () => {
            const limit = Date.now() - timeoutS * 1000;
            for (const s of [...sessions.values()]) {
              if (s.lastActivityAt >= limit) continue;
              const ws = sockets.get(s.id);
              if (ws) {
                if (ws.readyState === ws.OPEN)
                  ws.send(JSON.stringify({ type: 'error', data: { message: `the session expired after ${timeoutS} s idle`, code: 'SESSION_ERROR' } }));
                ws.close(1000, 'session expired');
              }
              void drop(s);
            }
          },
          Math.min(timeoutS * 1000, 5000) / 2,
        )
      : undefined;
  sweep?.unref();

  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(o.port ?? 0, host, () => ok());
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closed = false;
  return {
    url: `http://${shownHost}:${port}`,
    port,
    stats: () => ({ sessions: sessions.size, episodes }),
    async close() {
      if (closed) return;
      closed = true;
      if (sweep) clearInterval(sweep);
      for (const ws of sockets.values()) ws.terminate();
      wss.close();
      const stopped = new Promise<void>((r) => server.close(() => r()));
      server.closeAllConnections();
      await Promise.all([...sessions.values()].map((s) => s.close()));
      sessions.clear();
      await stopped;
    },
  };
}

class CapacityError extends HttpError {
  constructor(
    message: string,
    readonly active: number,
    readonly max: number,
  ) {
    super(503, message);
  }
}

/** MCP over the session (OpenEnv's WS `mcp` message): JSON-RPC tools/list and tools/call; a call is a step. */
async function mcp(s: EnvSession, data: unknown): Promise<Record<string, unknown>> {
  const req = isJsonObject(data) ? data : {};
  const id = typeof req.id === 'string' || typeof req.id === 'number' ? req.id : null;
  const fail = (code: number, message: string) => ({ jsonrpc: '2.0', id, error: { code, message } });
  if (req.jsonrpc !== '2.0' || typeof req.method !== 'string') return fail(-32600, 'Invalid Request: a JSON-RPC 2.0 request with a method');
  const params = isJsonObject(req.params) ? req.params : {};
  if (req.method === 'tools/list') {
    return { jsonrpc: '2.0', id, result: { tools: s.listTools().map((t) => ({ name: t.name, description: t.description, inputSchema: t.input_schema })) } };
  }
  if (req.method === 'tools/call') {
    if (typeof params.name !== 'string') return fail(-32602, 'Invalid params: tools/call needs `name`');
    try {
      const r = await s.step({ type: 'call_tool', tool_name: params.name, arguments: isJsonObject(params.arguments) ? params.arguments : {} });
      const tr = r.observation.tool_result;
      return {
        jsonrpc: '2.0',
        id,
        result: { content: [{ type: 'text', text: tr?.text ?? '' }], isError: tr?.is_error ?? false, _meta: { done: r.done, reward: r.reward } },
      };
    } catch (err) {
      return fail(-32000, (err as Error).message);
    }
  }
  return fail(-32601, `Method not found: ${req.method} (tools/list, tools/call)`);
}

/** A route's failure: FastAPI's shape {"detail": message} (OpenEnv's servers are FastAPI apps). */
function answerError(res: ServerResponse, err: unknown): void {
  const status = err instanceof HttpError ? err.status : err instanceof SessionError ? (err.code === 'VALIDATION_ERROR' ? 422 : 409) : 500;
  const detail = err instanceof Error ? err.message : String(err);
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  const extra = err instanceof SessionError && err.errors ? { errors: err.errors } : {};
  sendJson(res, status, { detail, ...extra }, status === 401 ? { 'www-authenticate': 'Bearer' } : {});
}
