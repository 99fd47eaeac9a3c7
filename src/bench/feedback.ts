/**
 * Feedback for server authors: how agents used each tool of each server, from the trajectories of
 * an evaluation or of the bench's agent part. Per tool: the calls and the share of the episodes
 * (that were given the tool) which called it; the calls whose arguments the tool rejected, by
 * field and what was wrong (`expression: required`, `limit: expected integer, got string`), found
 * by validating the arguments against the tool's input JSON Schema (`validateArguments`, a small
 * validator) or, when the schema finds nothing, read out of the server's error; the results that
 * were errors (by `errorKind`) or empty (no content, or only whitespace); the share of episode time
 * spent in the tool (the calls' ms over the episodes' total_ms), mean and p95 latency; and per
 * server, the tools the agents were given but never called.
 */
import type { Trajectory } from '../env/index.ts';
import { schemaPattern } from './args.ts';
import { quantileOf } from './latency.ts';

/** One way a call's arguments broke the tool's schema, with how many calls did so. */
export interface FieldError {
  /** The field's path (`limit`, `items[].name`; `(arguments)` for the arguments object itself). */
  field: string;
  /** What was wrong: `required`, `expected integer, got string`, `unknown field`, ... */
  problem: string;
  calls: number;
}

export interface ToolFeedback {
  server: string;
  /** The tool's name on its server. */
  tool: string;
  /** The name agents saw when it differs (`server_tool` where two servers share a name). */
  agent_name?: string;
  /** Episodes that were given the tool. */
  offered: number;
  calls: number;
  /** Episodes that called it at least once. */
  episodes: number;
  /** episodes / offered. */
  episode_share: number;
  /** Calls whose arguments the tool rejected (a subset of `errors`). */
  argument_errors: number;
  /** Those calls' problems by field, most frequent first (one call may break several fields). */
  field_errors: FieldError[];
  /** Calls whose arguments break the schema but which the tool accepted (its schema and its code disagree). */
  accepted_invalid: number;
  /** Results that were errors (`isError`). */
  errors: number;
  /** Errors by `errorKind` (`unspecified` where the trajectory does not say). */
  errors_by_kind: Record<string, number>;
  /** Results that were not errors but empty: no content, or only whitespace text. */
  empty: number;
  /** Sum of the calls' ms. */
  total_ms: number;
  /** total_ms over the sum of the episodes' total_ms. */
  time_share: number;
  mean_ms: number;
  p95_ms: number;
}

export interface ServerFeedback {
  server: string;
  calls: number;
  /** Share of episode time spent in this server's tools. */
  time_share: number;
  /** The tools called, most calls first. */
  tools: ToolFeedback[];
  /** Tools the agents were given but never called, by name. */
  never_called: string[];
}

export interface Feedback {
  episodes: number;
  /** Sum of the episodes' total_ms (the denominator of every time share). */
  episode_ms: number;
  tool_calls: number;
  servers: ServerFeedback[];
  /** Calls to names no server offers (the agent made them up). */
  unknown_tools: { name: string; calls: number; episodes: number }[];
}

export interface FeedbackOptions {
  /** A task's server aliases: tells which server a tool belongs to in trajectories that do not record it. */
  serversOf?: (taskId: string) => string[] | undefined;
}

// ------------------------------------------------------------------ the argument validator

/** A schema violation: where (`''` for the value itself; `a.b[0]`) and what. */
export interface ArgumentIssue {
  path: string;
  problem: string;
}

type Schema = Record<string, unknown> | boolean;

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function hasType(v: unknown, type: string): boolean {
  const t = typeOf(v);
  return t === type || (type === 'number' && t === 'integer');
}

const short = (v: unknown) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 40 ? s.slice(0, 40) + '…' : s;
};

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

function resolveRef(root: Schema, ref: string): Schema | undefined {
  if (!ref.startsWith('#')) return undefined;
  let node: unknown = root;
  for (const raw of ref.slice(1).split('/').filter(Boolean)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object') return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return typeof node === 'boolean' || (node !== null && typeof node === 'object') ? (node as Schema) : undefined;
}

const join = (path: string, key: string) => (/^[A-Za-z_$][\w$-]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`);

/**
 * Checks `value` against a JSON Schema: type, required, properties, additionalProperties, enum,
 * const, items (and prefixItems), minimum/maximum (and the exclusive ones), minLength/maxLength,
 * pattern, minItems/maxItems, anyOf/oneOf/allOf and local `$ref`s. Other keywords are ignored:
 * a value it passes may still break the schema, never the other way round. At most 20 issues.
 */
export function validateArguments(schema: unknown, value: unknown): ArgumentIssue[] {
  const root: Schema = typeof schema === 'boolean' || (schema !== null && typeof schema === 'object' && !Array.isArray(schema)) ? (schema as Schema) : true;
  const out: ArgumentIssue[] = [];
  check(root, root, value, '', out, 0);
  return out.slice(0, 20);
}

function check(root: Schema, schema: Schema, v: unknown, path: string, out: ArgumentIssue[], depth: number): void {
  if (out.length >= 20 || depth > 64) return;
  if (schema === true) return;
  if (schema === false) {
    out.push({ path, problem: 'not allowed' });
    return;
  }
  const s = schema;
  if (typeof s.$ref === 'string') {
    const target = resolveRef(root, s.$ref);
    if (target !== undefined) check(root, target, v, path, out, depth + 1);
  }
  const types = typeof s.type === 'string' ? [s.type] : Array.isArray(s.type) ? (s.type.filter((t) => typeof t === 'string') as string[]) : undefined;
  if (types?.length && !types.some((t) => hasType(v, t))) {
    out.push({ path, problem: v === undefined ? 'required' : `expected ${types.join(' or ')}, got ${typeOf(v)}` });
    return;
  }
  if (Array.isArray(s.enum) && !s.enum.some((e) => deepEqual(e, v))) {
    out.push({ path, problem: `expected one of ${s.enum.map(short).join(', ')}` });
    return;
  }
  if ('const' in s && !deepEqual(s.const, v)) {
    out.push({ path, problem: `expected ${short(s.const)}` });
    return;
  }
  if (Array.isArray(s.allOf)) for (const sub of s.allOf) if (isSchema(sub)) check(root, sub, v, path, out, depth + 1);
  for (const key of ['anyOf', 'oneOf'] as const) {
    const branches = Array.isArray(s[key]) ? (s[key] as unknown[]).filter(isSchema) : [];
    if (!branches.length) continue;
    const results = branches.map((b) => {
      const issues: ArgumentIssue[] = [];
      check(root, b, v, path, issues, depth + 1);
      return issues;
    });
    if (results.some((r) => r.length === 0)) continue;
    // The branch whose type the value has says best what is wrong; else name the types expected.
    const typed = results.find((r) => !r.some((i) => i.path === path && /^expected .+, got /.test(i.problem)));
    if (typed) out.push(...typed);
    else {
      const expected = [...new Set(results.map((r) => r.find((i) => i.path === path)?.problem.match(/^expected (.+), got /)?.[1]).filter(Boolean))];
      out.push({ path, problem: v === undefined ? 'required' : `expected ${expected.join(' or ') || 'another value'}, got ${typeOf(v)}` });
    }
  }
  if (typeof v === 'number') {
    if (typeof s.minimum === 'number' && v < s.minimum) out.push({ path, problem: `expected >= ${s.minimum}` });
    if (typeof s.maximum === 'number' && v > s.maximum) out.push({ path, problem: `expected <= ${s.maximum}` });
    if (typeof s.exclusiveMinimum === 'number' && v <= s.exclusiveMinimum) out.push({ path, problem: `expected > ${s.exclusiveMinimum}` });
    if (typeof s.exclusiveMaximum === 'number' && v >= s.exclusiveMaximum) out.push({ path, problem: `expected < ${s.exclusiveMaximum}` });
  }
  if (typeof v === 'string') {
    const length = [...v].length;
    if (typeof s.minLength === 'number' && length < s.minLength) out.push({ path, problem: `expected at least ${s.minLength} characters` });
    if (typeof s.maxLength === 'number' && length > s.maxLength) out.push({ path, problem: `expected at most ${s.maxLength} characters` });
    if (typeof s.pattern === 'string') {
      const re = schemaPattern(s.pattern);
      if (re && !re.test(v)) out.push({ path, problem: `does not match ${s.pattern}` });
    }
  }
  if (Array.isArray(v)) {
    if (typeof s.minItems === 'number' && v.length < s.minItems) out.push({ path, problem: `expected at least ${s.minItems} items` });
    if (typeof s.maxItems === 'number' && v.length > s.maxItems) out.push({ path, problem: `expected at most ${s.maxItems} items` });
    const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : [];
    const rest = isSchema(s.items) ? s.items : undefined;
    v.forEach((x, i) => {
      const sub = i < prefix.length ? prefix[i] : rest;
      if (isSchema(sub)) check(root, sub, x, `${path}[${i}]`, out, depth + 1);
    });
  }
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    const obj = v as Record<string, unknown>;
    const props = s.properties !== null && typeof s.properties === 'object' ? (s.properties as Record<string, unknown>) : {};
    if (Array.isArray(s.required)) for (const r of s.required) if (typeof r === 'string' && !(r in obj)) out.push({ path: join(path, r), problem: 'required' });
    for (const [k, x] of Object.entries(obj)) {
      const sub = Object.hasOwn(props, k) ? props[k] : undefined;
      if (isSchema(sub)) check(root, sub, x, join(path, k), out, depth + 1);
      else if (s.additionalProperties === false) out.push({ path: join(path, k), problem: 'unknown field' });
      else if (isSchema(s.additionalProperties)) check(root, s.additionalProperties, x, join(path, k), out, depth + 1);
    }
  }
}

function isSchema(x: unknown): x is Schema {
  return typeof x === 'boolean' || (x !== null && typeof x === 'object' && !Array.isArray(x));
}

/**
 * The fields a server names in its argument error: the MCP SDK's `Input validation error: Invalid
 * arguments for tool T: path: message, path: message` (v2) or `message at path` lines (v1). Zod's
 * `expected X, received undefined` becomes `required`, `expected X, received Y` `expected X, got Y`.
 */
export function parseServerArgumentError(text: string): ArgumentIssue[] {
  // The last such phrase: the client may wrap the server's message in its own.
  const m = /^[\s\S]*Invalid arguments for tool [^:]*:\s*([\s\S]*)$/.exec(text);
  if (!m) return [];
  const body = m[1]!.trim();
  const issues: ArgumentIssue[] = [];
  const parts = body.includes('\n') ? body.split('\n') : body.split(/, (?=[\w$.[\]-]+: )/);
  for (const part of parts.map((p) => p.trim()).filter(Boolean)) {
    let path = '';
    let message = part;
    const v1 = /^(.*) at ([\w$.[\]-]+)$/.exec(part);
    const v2 = /^([\w$.[\]-]+): (.*)$/.exec(part);
    if (v2) [path, message] = [v2[1]!, v2[2]!];
    else if (v1) [message, path] = [v1[1]!, v1[2]!];
    const typed = /expected (\w+), received (\w+)/.exec(message);
    const problem = typed
      ? typed[2] === 'undefined'
        ? 'required'
        : `expected ${typed[1]}, got ${typed[2]}`
      : message.replace(/^Invalid input:\s*/, '').slice(0, 120);
    issues.push({ path, problem });
  }
  return issues.slice(0, 20);
}

// ------------------------------------------------------------------ the report

interface Acc {
  server: string;
  tool: string;
  names: Set<string>;
  calls: number;
  episodes: Set<number>;
  offered: Set<number>;
  argument_errors: number;
  fields: Map<string, FieldError>;
  accepted_invalid: number;
  errors: number;
  errors_by_kind: Record<string, number>;
  empty: number;
  ms: number[];
}

/** A path with its array indices as `[]` (`tags[2]`, or a server's `tags.2`, is `tags[]`), so that calls add up by field. */
const fieldKey = (path: string) => path.replace(/\[\d+\]|\.\d+(?=\.|$)/g, '[]') || '(arguments)';

/** The feedback of a set of trajectories (any tasks, any servers). */
export function toolFeedback(trajectories: Trajectory[], options: FeedbackOptions = {}): Feedback {
  const tools = new Map<string, Acc>();
  // The agent's name of a tool -> its server and tool, as the trajectories recorded them (their
  // calls, their offered tools): per task, and over all tasks where that is unambiguous (null if not).
  const seenInTask = new Map<string, { server: string; tool: string }>();
  const seen = new Map<string, { server: string; tool: string } | null>();
  const learn = (task: string, name: string, server: unknown, tool: unknown) => {
    if (typeof server !== 'string' || typeof tool !== 'string') return;
    seenInTask.set(JSON.stringify([task, name]), { server, tool });
    const before = seen.get(name);
    seen.set(name, before === undefined || (before !== null && before.server === server && before.tool === tool) ? { server, tool } : null);
  };
  // Injected faults are not the server's doing: distractor tools and sabotaged calls are left out.
  const own = (t: Trajectory) => (t.tools ?? []).filter((x) => !x.distractor);
  const ownSteps = (turn: Trajectory['turns'][number]) => turn.tool_results.filter((s) => s.fault === undefined);
  for (const t of trajectories) {
    for (const x of own(t)) learn(t.task_id, x.name, x.server, x.tool);
    for (const turn of t.turns) for (const s of ownSteps(turn)) learn(t.task_id, s.name, s.server, s.tool);
  }
  const acc = (server: string, tool: string): Acc => {
    const key = JSON.stringify([server, tool]);
    let a = tools.get(key);
    if (!a)
      tools.set(
        key,
        (a = {
          server,
          tool,
          names: new Set(),
          calls: 0,
          episodes: new Set(),
          offered: new Set(),
          argument_errors: 0,
          fields: new Map(),
          accepted_invalid: 0,
          errors: 0,
          errors_by_kind: {},
          empty: 0,
          ms: [],
        }),
      );
    return a;
  };
  /** Which server and tool an offered name is: as recorded, as called elsewhere, a qualified name, or the task's only server. */
  const locate = (t: Trajectory, x: { name: string; server?: unknown; tool?: unknown }): { server: string; tool: string } => {
    if (typeof x.server === 'string' && typeof x.tool === 'string') return { server: x.server, tool: x.tool };
    const known = seenInTask.get(JSON.stringify([t.task_id, x.name])) ?? seen.get(x.name);
    if (known) return known;
    const aliases = options.serversOf?.(t.task_id) ?? [];
    for (const a of aliases) if (x.name.startsWith(`${a}_`) && aliases.length > 1) return { server: a, tool: x.name.slice(a.length + 1) };
    return { server: aliases.length === 1 ? aliases[0]! : '(unknown server)', tool: x.name };
  };
  const unknown = new Map<string, { calls: number; episodes: Set<number> }>();
  let episodeMs = 0;
  let calls = 0;
  trajectories.forEach((t, ti) => {
    episodeMs += t.timings.total_ms;
    const schemas = new Map<string, unknown>();
    for (const x of own(t)) {
      const where = locate(t, x);
      const a = acc(where.server, where.tool);
      a.offered.add(ti);
      if (x.name !== where.tool) a.names.add(x.name);
      schemas.set(x.name, x.parameters);
    }
    for (const turn of t.turns) {
      for (const s of ownSteps(turn)) {
        calls++;
        if (s.server === undefined || s.tool === undefined) {
          const u = unknown.get(s.name) ?? { calls: 0, episodes: new Set<number>() };
          u.calls++;
          u.episodes.add(ti);
          unknown.set(s.name, u);
          continue;
        }
        const a = acc(s.server, s.tool);
        if (s.name !== s.tool) a.names.add(s.name);
        a.calls++;
        a.episodes.add(ti);
        a.offered.add(ti);
        a.ms.push(s.ms);
        const schema = schemas.get(s.name);
        const issues =
          typeof s.arguments === 'string'
            ? [{ path: '', problem: 'not a JSON object' }]
            : schema === undefined
              ? []
              : validateArguments(schema, s.arguments ?? {});
        if (s.isError) {
          a.errors++;
          const kind = s.errorKind ?? 'unspecified';
          a.errors_by_kind[kind] = (a.errors_by_kind[kind] ?? 0) + 1;
          if (s.errorKind === 'invalid_arguments' || issues.length) {
            a.argument_errors++;
            let found = issues.length ? issues : parseServerArgumentError(s.text);
            if (!found.length)
              found = [{ path: '', problem: (s.text.split('\n')[0] ?? '').replace(/^.*Invalid arguments for tool [^:]*:\s*/, '').slice(0, 120) || 'rejected' }];
            const once = new Set<string>();
            for (const i of found) {
              const field = fieldKey(i.path);
              const key = `${field}\u0000${i.problem}`;
              if (once.has(key)) continue;
              once.add(key);
              const f = a.fields.get(key) ?? { field, problem: i.problem, calls: 0 };
              f.calls++;
              a.fields.set(key, f);
            }
          }
        } else {
          if (issues.length) a.accepted_invalid++;
          if (s.text.trim() === '') a.empty++;
        }
      }
    }
  });
  const share = (ms: number) => (episodeMs > 0 ? ms / episodeMs : 0);
  const byServer = new Map<string, Acc[]>();
  for (const a of tools.values()) byServer.set(a.server, [...(byServer.get(a.server) ?? []), a]);
  const servers: ServerFeedback[] = [...byServer.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([server, list]) => {
      const called = list.filter((a) => a.calls > 0).sort((a, b) => b.calls - a.calls || (a.tool < b.tool ? -1 : 1));
      const rows: ToolFeedback[] = called.map((a) => {
        const sorted = [...a.ms].sort((x, y) => x - y);
        const total = sorted.reduce((x, y) => x + y, 0);
        return {
          server,
          tool: a.tool,
          ...(a.names.size ? { agent_name: [...a.names].join(', ') } : {}),
          offered: a.offered.size,
          calls: a.calls,
          episodes: a.episodes.size,
          episode_share: a.offered.size ? a.episodes.size / a.offered.size : 0,
          argument_errors: a.argument_errors,
          field_errors: [...a.fields.values()].sort((x, y) => y.calls - x.calls || (x.field < y.field ? -1 : x.field > y.field ? 1 : 0)),
          accepted_invalid: a.accepted_invalid,
          errors: a.errors,
          errors_by_kind: a.errors_by_kind,
          empty: a.empty,
          total_ms: total,
          time_share: share(total),
          mean_ms: sorted.length ? total / sorted.length : 0,
          p95_ms: quantileOf(sorted, 0.95),
        };
      });
      const ms = rows.reduce((x, r) => x + r.total_ms, 0);
      return {
        server,
        calls: rows.reduce((x, r) => x + r.calls, 0),
        time_share: share(ms),
        tools: rows,
        never_called: list
          .filter((a) => a.calls === 0)
          .map((a) => a.tool)
          .sort(),
      };
    });
  return {
    episodes: trajectories.length,
    episode_ms: episodeMs,
    tool_calls: calls,
    servers,
    unknown_tools: [...unknown.entries()].map(([name, u]) => ({ name, calls: u.calls, episodes: u.episodes.size })).sort((a, b) => b.calls - a.calls),
  };
}

// ------------------------------------------------------------------ rows for the renderings

const pct = (x: number) => `${(100 * x).toFixed(x > 0 && x < 0.001 ? 3 : 1)}%`;

/** Per server: a heading, a table (its first row the header; numbers stay numbers) and notes. */
export function feedbackSections(f: Feedback): { server: string; heading: string; rows: (string | number)[][]; notes: string[] }[] {
  return f.servers.map((s) => {
    const rows: (string | number)[][] = [['tool', 'calls', 'episodes', 'arg errors', 'errors', 'empty', 'time', 'mean ms', 'p95 ms']];
    const notes: string[] = [];
    for (const t of s.tools) {
      const kinds = Object.entries(t.errors_by_kind)
        .sort((a, b) => b[1] - a[1])
        .map(([k, n]) => `${k} ${n}`)
        .join(', ');
      rows.push([
        t.tool + (t.agent_name ? ` (as ${t.agent_name})` : ''),
        t.calls,
        `${t.episodes}/${t.offered} (${pct(t.episode_share)})`,
        t.argument_errors,
        t.errors ? `${t.errors} (${kinds})` : '0',
        t.empty,
        pct(t.time_share),
        t.mean_ms,
        t.p95_ms,
      ]);
      if (t.field_errors.length) notes.push(`${t.tool}: argument errors: ${t.field_errors.map((e) => `${e.field}: ${e.problem} (${e.calls})`).join('; ')}`);
      if (t.accepted_invalid)
        notes.push(`${t.tool}: ${t.accepted_invalid} call${t.accepted_invalid === 1 ? '' : 's'} accepted although the arguments break its input schema`);
    }
    if (s.never_called.length) notes.push(`never called: ${s.never_called.join(', ')}`);
    const heading = `server ${s.server}: ${s.calls} call${s.calls === 1 ? '' : 's'} to ${s.tools.length} of ${s.tools.length + s.never_called.length} tools, ${pct(s.time_share)} of episode time`;
    return { server: s.server, heading, rows, notes };
  });
}
