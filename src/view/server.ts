/**
 * `mcp-gym view`'s HTTP server (Node's http module): the page (plain HTML, JavaScript and CSS from
 * ./assets, all served from here: no network) and a JSON API over the entries under the roots.
 *
 *   GET /api/list                               every entry (discover.ts): kind, status, steps, success
 *   GET /api/run/ID                             one entry
 *   GET /api/run/ID/metrics?since=N             a run's metrics rows from row N (the page polls with the
 *                                               count it holds), its evaluations (eval.jsonl), its entry
 *   GET /api/run/ID/config                      config.json (runs) or run.json (evals, rollouts)
 *   GET /api/run/ID/trajectories?task=&step=&outcome=success|failure&min=&max=&group=&offset=&limit=
 *                                               trajectory summaries, filtered
 *   GET /api/run/ID/trajectory/N                the Nth trajectory (line N of trajectories.jsonl), tokens left out
 *   GET /api/run/ID/failures                    the unsuccessful episodes grouped by cause (the error, or
 *                                               the checks that failed), with an example of each
 *   GET /api/run/ID/eval                        eval.json (evals), summary.json (rollouts), job.json (jobs:
 *                                               the three stages; their trajectories are the job's, step=base|sft|rl)
 *   GET /api/run/ID/bench                       bench.json
 *
 * ID is an entry's id (`<root index>/<path>`, URL-encoded as one path segment); resolveId refuses
 * one that leads outside its root. With a token, every request needs it (`Authorization: Bearer T`
 * or `?token=T`, compared in constant time); the page passes it on. The Host header must name the
 * bound host or localhost (a page elsewhere cannot reach the viewer through DNS rebinding).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hideSecrets } from '../trainers/index.ts';
import { discover, JOB_STAGES, jobStageFiles, readEntryFile, readJsonl, resolveId, stepOf, type Entry } from './discover.ts';

export interface ViewOptions {
  roots: string[];
  host?: string;
  /** 0 (the default): a free port. */
  port?: number;
  token?: string;
  /** Further names the Host header may carry (a bind to 0.0.0.0 or :: accepts loopback names, this machine's name and addresses, and these). */
  allowedHosts?: string[];
}

export interface Viewer {
  url: string;
  port: number;
  server: Server;
  close(): Promise<void>;
}

const ASSETS_DIR = fileURLToPath(new URL('./assets/', import.meta.url));
const ASSETS: Record<string, string> = {
  '/': 'index.html',
  '/index.html': 'index.html',
  '/app.js': 'app.js',
  '/bench.js': 'bench.js',
  '/charts.js': 'charts.js',
  '/dom.js': 'dom.js',
  '/evals.js': 'evals.js',
  '/list.js': 'list.js',
  '/routing.js': 'routing.js',
  '/runs.js': 'runs.js',
  '/state.js': 'state.js',
  '/trajectories.js': 'trajectories.js',
  '/app.css': 'app.css',
};
const TYPES: Record<string, string> = { html: 'text/html; charset=utf-8', js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8' };

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Whether `given` is the token (constant time: both hashed to the same length first). */
export function tokenMatches(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  return timingSafeEqual(digest(given), digest(token));
}

/** Turn keys the page never shows (large: token ids and their logprobs). */
const HEAVY_TURN_KEYS = new Set(['tokens', 'logprobs', 'env_tokens']);

function lighten(t: Record<string, unknown>): Record<string, unknown> {
  const turns = Array.isArray(t.turns)
    ? (t.turns as Record<string, unknown>[]).map((turn) => Object.fromEntries(Object.entries(turn).filter(([k]) => !HEAVY_TURN_KEYS.has(k))))
    : t.turns;
  return { ...t, turns };
}

interface TrajSummary {
  index: number;
  id: string;
  task_id: string;
  group_id: string;
  sample: number;
  split: string;
  step?: number;
  /** A job's trajectory: the evaluation it belongs to. */
  stage?: string;
  success: boolean;
  reward: number;
  turns: number;
  tool_calls: number;
  tool_errors: number;
  finish?: string;
}

/** Trajectory files read once per size and mtime (a running run's file is read again when it grows). */
const trajCache = new Map<string, { size: number; mtimeMs: number; rows: Record<string, unknown>[] }>();

/** An entry's trajectories: its trajectories.jsonl, or a job's three evaluations in turn (each row tagged with its stage). */
function entryTrajectories(dir: string, entry: Entry): Record<string, unknown>[] {
  if (entry.kind !== 'job') return trajectories(dir);
  const files = jobStageFiles(dir);
  return JOB_STAGES.flatMap((s) => (files[s] ? trajectories(join(dir, files[s]!)).map((t) => ({ ...t, stage: s })) : []));
}

function trajectories(path: string): Record<string, unknown>[] {
  const file = path.endsWith('.jsonl') ? path : join(path, 'trajectories.jsonl');
  let st: { size: number; mtimeMs: number };
  try {
    st = statSync(file);
  } catch {
    return [];
  }
  const hit = trajCache.get(file);
  if (hit && hit.size === st.size && hit.mtimeMs === st.mtimeMs) return hit.rows;
  const rows = readJsonl(file).map((t) => {
    const { tools: _tools, ...rest } = lighten(t);
    return rest;
  });
  trajCache.set(file, { size: st.size, mtimeMs: st.mtimeMs, rows });
  if (trajCache.size > 16) trajCache.delete(trajCache.keys().next().value!);
  return rows;
}

function summary(t: Record<string, unknown>, index: number): TrajSummary {
  const m = (t.metrics ?? {}) as Record<string, number>;
  return {
    index,
    id: String(t.id ?? ''),
    task_id: String(t.task_id ?? ''),
    group_id: String(t.group_id ?? ''),
    sample: Number(t.sample ?? 0),
    split: String(t.split ?? ''),
    step: stepOf(t),
    ...(typeof t.stage === 'string' ? { stage: t.stage } : {}),
    success: t.success === true,
    reward: Number(t.reward ?? 0),
    turns: Number(m.turns ?? 0),
    tool_calls: Number(m.tool_calls ?? 0),
    tool_errors: Number(m.tool_errors ?? 0),
    finish: typeof t.finish === 'string' ? t.finish : undefined,
  };
}

function num(q: URLSearchParams, name: string): number | undefined {
  const v = q.get(name);
  if (v === null || v.trim() === '') return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new HttpError(400, `${name} must be a number, got '${v}'`);
  return n;
}

function filterTrajectories(rows: Record<string, unknown>[], q: URLSearchParams) {
  const task = q.get('task')?.trim().toLowerCase();
  const group = q.get('group')?.trim();
  // A job's trajectories are filtered by stage: step=base|sft|rl.
  const stage = q.get('step')?.trim();
  const byStage = stage !== undefined && (JOB_STAGES as readonly string[]).includes(stage) ? stage : undefined;
  const step = byStage ? undefined : num(q, 'step');
  const outcome = q.get('outcome') ?? '';
  const min = num(q, 'min');
  const max = num(q, 'max');
  const offset = Math.max(0, num(q, 'offset') ?? 0);
  const limit = Math.min(1000, Math.max(1, num(q, 'limit') ?? 200));
  const all = rows.map(summary);
  const matched = all.filter(
    (s) =>
      (!task || s.task_id.toLowerCase().includes(task)) &&
      (!group || s.group_id === group) &&
      (step === undefined || s.step === step) &&
      (byStage === undefined || s.stage === byStage) &&
      (outcome === '' || outcome === 'any' || (outcome === 'success') === s.success) &&
      (min === undefined || s.reward >= min) &&
      (max === undefined || s.reward <= max),
  );
  return { total: all.length, matched: matched.length, offset, items: matched.slice(offset, offset + limit) };
}

export interface FailureGroup {
  cause: string;
  episodes: number;
  tasks: number;
  /** The first episode's index (for /trajectory/N), id and a detail of why. */
  example: { index: number; id: string; detail: string };
}

/**
 * The unsuccessful episodes by cause: a failed episode by the first line of its error; any other by
 * how it ended and which kinds of check failed (`answer: failed answer, call`).
 */
export function failureGroups(rows: Record<string, unknown>[]): FailureGroup[] {
  const by = new Map<string, FailureGroup & { taskSet: Set<string> }>();
  rows.forEach((t, index) => {
    if (t.success === true) return;
    const finish = typeof t.finish === 'string' ? t.finish : 'unknown';
    const checks = Array.isArray(t.checks) ? (t.checks as { kind?: string; score?: number; detail?: string; error?: string }[]) : [];
    const failed = checks.filter((c) => (c.score ?? 0) < 1 || c.error);
    let cause: string;
    let detail: string;
    if (finish === 'error') {
      const err = String(t.error ?? t.task_error ?? 'an error').split('\n')[0]!;
      cause = `${t.task_error ? 'task error' : 'error'}: ${err.slice(0, 160)}`;
      detail = err;
    } else {
      cause = `${finish}: ${failed.length ? `failed ${[...new Set(failed.map((c) => c.kind ?? '?'))].join(', ')}` : 'no check failed, yet no success'}`;
      detail = failed.map((c) => c.detail ?? '').join('; ');
    }
    const g = by.get(cause);
    if (g) {
      g.episodes++;
      g.taskSet.add(String(t.task_id));
    } else
      by.set(cause, {
        cause,
        episodes: 1,
        tasks: 0,
        taskSet: new Set([String(t.task_id)]),
        example: { index, id: String(t.id ?? ''), detail: detail.slice(0, 300) },
      });
  });
  return [...by.values()].map(({ taskSet, ...g }) => ({ ...g, tasks: taskSet.size })).sort((a, b) => b.episodes - a.episodes || a.cause.localeCompare(b.cause));
}

function readJsonFile(file: string): unknown {
  try {
    return JSON.parse(readEntryFile(file));
  } catch {
    throw new HttpError(404, `${file.split('/').at(-1)} is not there (yet)`);
  }
}

function apiRun(roots: readonly string[], id: string, what: string | undefined, arg: string | undefined, q: URLSearchParams): unknown {
  const found = resolveId(roots, id);
  if (!found) throw new HttpError(404, `no run, eval or bench directory with id '${id}'`);
  const { dir, entry } = found;
  switch (what) {
    case undefined:
      return entry;
    case 'metrics': {
      const since = Math.max(0, Math.floor(num(q, 'since') ?? 0));
      const rows = readJsonl(join(dir, 'metrics.jsonl'));
      return { entry, since, next: rows.length, rows: rows.slice(since), evals: readJsonl(join(dir, 'eval.jsonl')) };
    }
    case 'config':
      // Secrets (learner_token, ...) are not served, as report.html does not show them.
      return JSON.parse(
        JSON.stringify(
          readJsonFile(
            join(dir, entry.kind === 'run' ? 'config.json' : entry.kind === 'bench' ? 'bench.json' : entry.kind === 'job' ? 'job.json' : 'run.json'),
          ),
          hideSecrets,
        ),
      );
    case 'trajectories':
      return filterTrajectories(entryTrajectories(dir, entry), q);
    case 'trajectory': {
      const rows = entryTrajectories(dir, entry);
      const n = Number(arg);
      if (!Number.isInteger(n) || n < 0 || n >= rows.length) throw new HttpError(404, `no trajectory ${arg ?? ''} (the file holds ${rows.length})`);
      return { index: n, step: stepOf(rows[n]!), trajectory: rows[n] };
    }
    case 'failures':
      return failureGroups(entryTrajectories(dir, entry));
    case 'eval':
      if (entry.kind === 'job') {
        const job = readJsonFile(join(dir, 'job.json')) as Record<string, unknown>;
        return { ...job, stage_files: jobStageFiles(dir), stages: entry.stages ?? {} };
      }
      return readJsonFile(join(dir, entry.kind === 'rollout' ? 'summary.json' : 'eval.json'));
    case 'bench':
      return readJsonFile(join(dir, 'bench.json'));
    default:
      throw new HttpError(404, `unknown view '${what}'`);
  }
}

function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '::1' || host === '[::1]';
}

/** The host part of a Host header (without the port; IPv6 in brackets kept). */
function hostName(header: string): string {
  if (header.startsWith('[')) return header.slice(0, header.indexOf(']') + 1);
  return header.split(':')[0]!;
}

function send(res: ServerResponse, status: number, body: string | Buffer, type: string): void {
  res.writeHead(status, {
    'content-type': type,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
  });
  res.end(body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, status, JSON.stringify(value), 'application/json; charset=utf-8');
}

/** The request handler (exported for tests that need no socket). */
export function handler(o: { roots: string[]; token?: string; host: string; allowedHosts?: string[] }) {
  const wildcard = o.host === '0.0.0.0' || o.host === '::';
  const accepted = new Set([o.host, `[${o.host}]`, ...(o.allowedHosts ?? [])]);
  if (wildcard) {
    accepted.add(hostname());
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) accepted.add(a.family === 'IPv6' ? `[${a.address}]` : a.address);
  }
  if (o.token !== undefined && o.token === '') throw new Error('the viewer token is empty: give a token, or none');
  return (req: IncomingMessage, res: ServerResponse): void => {
    try {
      if (req.method !== 'GET' && req.method !== 'HEAD') throw new HttpError(405, 'only GET');
      const url = new URL(req.url ?? '/', 'http://viewer.invalid');
      const hostHeader = req.headers.host ?? '';
      const name = hostName(hostHeader);
      // Only names of this machine: a page elsewhere that rebinds its own name to this address is refused.
      if (!isLoopback(name) && !accepted.has(name)) {
        throw new HttpError(403, `Host '${hostHeader}' is not this viewer's`);
      }
      if (o.token !== undefined) {
        const auth = req.headers.authorization;
        const given = auth?.startsWith('Bearer ') ? auth.slice(7) : (url.searchParams.get('token') ?? undefined);
        if (!tokenMatches(given, o.token))
          throw new HttpError(401, 'a token is required: open the URL the viewer printed (?token=...) or send Authorization: Bearer <token>');
      }
      const asset = ASSETS[url.pathname];
      if (asset) {
        let body = readFileSync(join(ASSETS_DIR, asset), 'utf8');
        const ext = asset.split('.').at(-1)!;
        if (ext === 'html' || ext === 'js') {
          // The page's links and its modules' imports carry the token (a module's import specifiers are
          // single-quoted strings, so a quote in the token is escaped there too).
          const q = o.token !== undefined ? `?token=${encodeURIComponent(o.token)}` : '';
          body = body.replaceAll('{{QUERY}}', ext === 'js' ? q.replaceAll("'", '%27') : q);
        }
        send(res, 200, body, TYPES[ext]!);
        return;
      }
      const parts = url.pathname.split('/').slice(1);
      let segs: string[];
      try {
        segs = parts.map((p) => decodeURIComponent(p));
      } catch {
        throw new HttpError(400, 'a malformed path');
      }
      if (segs[0] !== 'api') throw new HttpError(404, `nothing at ${url.pathname}`);
      if (segs[1] === 'list' && segs.length === 2) {
        const entries: Entry[] = discover(o.roots);
        sendJson(res, 200, { roots: o.roots, entries, now: new Date().toISOString() });
        return;
      }
      if (segs[1] === 'run' && segs[2] !== undefined && segs.length <= 5) {
        sendJson(res, 200, apiRun(o.roots, segs[2], segs[3], segs[4], url.searchParams));
        return;
      }
      throw new HttpError(404, `no API route ${url.pathname}`);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      sendJson(res, status, { error: err instanceof Error ? err.message : String(err) });
    }
  };
}

/** Starts the viewer; resolves once it listens. */
export async function startViewer(o: ViewOptions): Promise<Viewer> {
  const host = o.host ?? '127.0.0.1';
  const server = createServer(handler({ roots: o.roots, token: o.token, host, allowedHosts: o.allowedHosts }));
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, host, () => {
      server.off('error', reject);
      resolveListen();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shown = host.includes(':') ? `[${host}]` : host;
  const url = `http://${shown}:${port}/${o.token !== undefined ? `?token=${encodeURIComponent(o.token)}` : ''}`;
  return {
    url,
    port,
    server,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
