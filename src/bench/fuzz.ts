/**
 * Robustness: invalid and edge-case arguments generated from a tool's JSON Schema (missing
 * required fields, wrong types, unknown fields, null, empty and huge strings, odd unicode,
 * numbers at the edges, deep nesting, huge arrays) and pathological ones (regular expressions
 * that backtrack catastrophically with subjects that make them, requests for huge outputs),
 * seeded and reproducible; each answer classified; the inputs that crashed the server or hung
 * are saved as JSONL for replay.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fnv1a, seededRandom, type RandomFn } from '../../lib/index.ts';
import { isAlive, killTree, type ToolResult } from '../tools/index.ts';
import { generateArguments, type Args } from './args.ts';
import type { Caller } from './load.ts';

type Schema = Record<string, unknown>;

/**
 * How the server answered:
 * - `rejected`: a proper `isError` result (the server refused the input and said why);
 * - `accepted`: a normal result;
 * - `protocol_error`: a JSON-RPC error instead of a result (or an answer the client could not use);
 * - `crash`: the server process died (confirmed by its pid; over HTTP: it no longer answers);
 * - `hang`: no answer within the timeout.
 */
export const OUTCOMES = ['rejected', 'accepted', 'protocol_error', 'crash', 'hang'] as const;
export type Outcome = (typeof OUTCOMES)[number];

export interface FuzzCase {
  /** The kind of mutation (`wrong_type`, `huge_string`, ...). */
  kind: string;
  /** Which argument it touches (`a.b`), or `(root)`. */
  path: string;
  arguments: Args;
}

export interface FuzzGenOptions {
  seed?: number;
  /** Cases per tool, at most. Default 100. */
  count?: number;
  /** Length of a huge string. Default 100,000. */
  hugeLength?: number;
  /** Depth of a deeply nested value. Default 1,000. */
  depth?: number;
  /** Items of a huge array. Default 10,000. */
  arrayLength?: number;
}

export const ODD_STRINGS: readonly string[] = [
  '\u0000',
  '\ud800',
  '\udfff',
  'e\u0301\u0301\u0301\u0301',
  '👩‍👩‍👧‍👦',
  '\u202eevil.txt',
  '\ufeffbom',
  '\u200b\u200c\u200d',
  '𝕳𝖊𝖑𝖑𝖔',
  'Ω≈ç√∫ 中文 عربى',
  '\n\r\t\v\f',
  "' OR '1'='1' --",
  '../../../../etc/passwd',
  '%s%s%s%n',
  '<script>alert(1)</script>',
  '${jndi:ldap://x}',
  '\\',
  '__proto__',
  'constructor',
  'NaN',
  '-0',
  '1e309',
];

/**
 * Regular expressions that backtrack catastrophically (exponential time in the subject's length in
 * a backtracking engine such as JavaScript's), each with a subject that makes them: 40 characters
 * are enough to never end.
 */
export const REDOS_PATTERNS: readonly { pattern: string; subject: string }[] = [
  { pattern: '(a+)+$', subject: 'a'.repeat(40) + '!' },
  { pattern: '(a|a)*b', subject: 'a'.repeat(40) },
  { pattern: '([a-zA-Z]+)*$', subject: 'a'.repeat(40) + '!' },
  { pattern: '^(\\w+\\s?)*$', subject: 'a'.repeat(40) + '!' },
  { pattern: '(x+x+)+y', subject: 'x'.repeat(40) },
];

/** A subject on which most of `REDOS_PATTERNS` never end: for any text a server may later match. */
export const BACKTRACKING_SUBJECT = 'a'.repeat(40) + '!';

/** Fields that may hold a regular expression (or a query a server may turn into one). */
const PATTERN_FIELD = /pattern|regex|regexp|query|search|expr|filter|match|glob|grep|find/i;
/** Boolean fields that switch regular expressions on. */
const REGEX_FLAG = /regex|regexp|pattern|^use_?re$|^is_?re$/i;
/** Fields that may hold the text a pattern is matched against. */
const SUBJECT_FIELD = /text|input|subject|content|body|string|^str$|value|data|source|message|haystack|line|document/i;
/** Numbers that may size an output: counts, limits, lengths, repeats. */
const COUNT_FIELD = /count|limit|length|^len$|size|max|num|repeat|times|^n$|^k$|top|depth|width|height|lines|head|tail|page|amount|total|steps|rows|items|results|chars|bytes|iterations/i;

const NUMBER_EDGES: readonly number[] = [
  0,
  -1,
  1,
  0.5,
  -0.5,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 32,
  Number.MAX_SAFE_INTEGER,
  Number.MAX_SAFE_INTEGER + 2,
  -Number.MAX_SAFE_INTEGER - 2,
  1e21,
  1e308,
  -1e308,
  Number.MAX_VALUE,
  Number.MIN_VALUE,
  -Number.MIN_VALUE,
];

function typesOf(s: Schema): string[] {
  if (Array.isArray(s.type)) return s.type as string[];
  if (typeof s.type === 'string') return [s.type];
  const alts = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
  if (Array.isArray(alts)) return [...new Set(alts.flatMap((a) => typesOf(a ?? {})))];
  if (s.properties) return ['object'];
  if (s.items) return ['array'];
  if (Array.isArray(s.enum)) return [...new Set(s.enum.map((v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v)))];
  return [];
}

/**
 * Large numbers a schema allows, for a field that may size an output: its maximum when it has one
 * (then 1,000,000 too when that is allowed and much smaller), otherwise 1,000,000 and 1,000,000,000;
 * none below its minimum, each a multiple of `multipleOf`.
 */
function hugeWithin(s: Schema, integer: boolean): number[] {
  const lo = typeof s.minimum === 'number' ? s.minimum : typeof s.exclusiveMinimum === 'number' ? s.exclusiveMinimum : -Infinity;
  let hi: number | undefined;
  if (typeof s.maximum === 'number') hi = s.maximum;
  if (typeof s.exclusiveMaximum === 'number') hi = Math.min(hi ?? Infinity, s.exclusiveMaximum - (integer ? 1 : 1e-6));
  const step = typeof s.multipleOf === 'number' && s.multipleOf > 0 ? s.multipleOf : integer ? 1 : 0;
  const fit = (v: number) => (step ? Math.floor(v / step) * step : v);
  const out = hi === undefined ? [1e6, 1e9] : hi > 1e7 ? [1e6, hi] : [hi];
  return [...new Set(out.map(fit))].filter((v) => Number.isFinite(v) && (v > lo || (v === lo && typeof s.minimum === 'number')));
}

function deepObject(depth: number): unknown {
  let v: unknown = 'bottom';
  for (let i = 0; i < depth; i++) v = { a: v };
  return v;
}

function deepArray(depth: number): unknown {
  let v: unknown = [];
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

/** `base` without the optional fields of the object at `prefix` (those not in `required`). */
function withoutOptional(base: Args, prefix: string[], props: Record<string, unknown>, required: string[]): Args {
  let out = base;
  for (const k of Object.keys(props)) if (!required.includes(k)) out = setAt(out, [...prefix, k], undefined, true);
  return out;
}

function setAt(base: Args, path: string[], value: unknown, remove = false): Args {
  const out = structuredClone(base);
  let node: Record<string, unknown> = out;
  for (let i = 0; i < path.length - 1; i++) {
    const k = path[i]!;
    const next = node[k];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) node[k] = {};
    node = node[k] as Record<string, unknown>;
  }
  const last = path[path.length - 1]!;
  if (remove) delete node[last];
  else node[last] = value;
  return out;
}

function shuffle<T>(xs: T[], rng: RandomFn): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

/**
 * The fuzz cases of one tool: every mutation kind that applies to each argument (one level of
 * nested objects included), shuffled within each kind and taken round-robin across kinds, so
 * that a small `count` still covers every kind. The same schema, name and seed always give the
 * same cases.
 */
export function fuzzCases(tool: { name: string; inputSchema: Schema }, options: FuzzGenOptions = {}): FuzzCase[] {
  const seed = options.seed ?? 1;
  const count = options.count ?? 100;
  const hugeLength = options.hugeLength ?? 100_000;
  const depth = options.depth ?? 1000;
  const arrayLength = options.arrayLength ?? 10_000;
  const rng = seededRandom((seed ^ fnv1a(tool.name)) >>> 0);
  const schema = tool.inputSchema ?? {};
  const base = generateArguments(schema, 1, seed).args[0] ?? {};
  const byKind = new Map<string, FuzzCase[]>();
  /** Cases that go first in their kind (a pattern in a field named like one, ...). */
  const first = new Set<FuzzCase>();
  const add = (kind: string, path: string[], args: Args, atFront = false) => {
    const list = byKind.get(kind) ?? [];
    const c: FuzzCase = { kind, path: path.length ? path.join('.') : '(root)', arguments: args };
    list.push(c);
    byKind.set(kind, list);
    if (atFront) first.add(c);
  };

  // The whole object.
  add('empty_object', [], {});
  add('unknown_field', ['__fuzz_unknown'], { ...structuredClone(base), __fuzz_unknown: 'surprise' });
  add('unknown_field', ['__proto__x'], { ...structuredClone(base), __proto__x: { polluted: true } });
  add('deep_nesting', ['__fuzz_deep'], { ...structuredClone(base), __fuzz_deep: deepObject(depth) });
  add('null', [], Object.fromEntries(Object.keys((schema.properties ?? {}) as Schema).map((k) => [k, null])));

  const visit = (props: Record<string, Schema>, required: string[], prefix: string[], level: number) => {
    for (const k of required) add('missing_required', [...prefix, k], setAt(base, [...prefix, k], undefined, true));
    /**
     * `args` with a pattern's companions set: the fields beside `k` that switch regular
     * expressions on (true) and those that may hold the text it is matched against (`subject`).
     */
    const paired = (args: Args, k: string, subject: string): Args => {
      let out = args;
      for (const [k2, raw2] of Object.entries(props)) {
        const s2 = (raw2 ?? {}) as Schema;
        if (k2 === k || Array.isArray(s2.enum) || 'const' in s2) continue;
        const t2 = typesOf(s2);
        if (t2.includes('boolean') && REGEX_FLAG.test(k2)) out = setAt(out, [...prefix, k2], true);
        else if (t2.includes('string') && SUBJECT_FIELD.test(k2) && !PATTERN_FIELD.test(k2)) out = setAt(out, [...prefix, k2], subject);
      }
      return out;
    };
    for (const [k, raw] of Object.entries(props)) {
      const s = (raw ?? {}) as Schema;
      const path = [...prefix, k];
      const types = typesOf(s);
      const at = (v: unknown) => setAt(base, path, v);
      add('null', path, at(null));
      // Wrong types: a value of each JSON type the schema does not allow.
      const samples: Record<string, unknown> = { string: 'not-the-right-type', number: 12345.678, integer: 42, boolean: true, array: ['x', 1], object: { x: 1 } };
      if (types.length > 0) {
        // (With no type, any value is allowed: nothing is a wrong type.)
        for (const [t, v] of Object.entries(samples)) {
          if (types.includes(t) || (t === 'integer' && types.includes('number'))) continue;
          add('wrong_type', path, at(v));
        }
      }
      if (types.includes('integer') && !types.includes('number')) add('wrong_type', path, at(1.5));
      add('deep_nesting', path, at(types.includes('array') ? deepArray(depth) : deepObject(depth)));
      if (types.includes('string') || types.length === 0) {
        add('empty_string', path, at(''));
        add('huge_string', path, at('A'.repeat(hugeLength)));
        for (const odd of ODD_STRINGS) add('odd_unicode', path, at(odd));
        if (typeof s.maxLength === 'number') add('out_of_range', path, at('x'.repeat(s.maxLength + 1)));
        if (typeof s.minLength === 'number' && s.minLength > 1) add('out_of_range', path, at('x'.repeat(s.minLength - 1)));
        if (typeof s.pattern === 'string') add('out_of_range', path, at('!!not matching!!'));
        if (typeof s.format === 'string') add('out_of_range', path, at('not a ' + s.format));
        if (!Array.isArray(s.enum) && !('const' in s)) {
          // Catastrophic backtracking: every pattern in a field named like one (regular
          // expressions switched on, the subject beside it where there is a field for it), two
          // elsewhere; and the subject itself, for a server that matches it against a pattern.
          // In a field named like a pattern, the optional fields beside it are left out (to their
          // defaults: a search scoped to a path may otherwise match nothing).
          const pattern = PATTERN_FIELD.test(k);
          const bare = pattern ? withoutOptional(base, prefix, props, required) : base;
          for (const p of pattern ? REDOS_PATTERNS : [REDOS_PATTERNS[0]!, REDOS_PATTERNS[2]!]) add('redos', path, paired(setAt(bare, path, p.pattern), k, p.subject), pattern);
          const subject = SUBJECT_FIELD.test(k);
          add('redos_subject', path, at(BACKTRACKING_SUBJECT), subject);
          if (subject) add('redos_subject', path, at(REDOS_PATTERNS[4]!.subject), true);
          // The longest string the schema allows (a very long one is huge_string).
          if (typeof s.maxLength === 'number' && s.maxLength > 64) add('huge_output', path, at('a'.repeat(Math.min(s.maxLength, hugeLength))));
        }
      }
      if (Array.isArray(s.enum)) add('out_of_range', path, at('__not_in_enum__'));
      if (types.includes('number') || types.includes('integer')) {
        for (const n of NUMBER_EDGES) add('number_edge', path, at(n));
        // Huge outputs within the bounds: the largest count, limit or length allowed.
        for (const n of hugeWithin(s, types.includes('integer') && !types.includes('number'))) add('huge_output', path, at(n), COUNT_FIELD.test(k));
        for (const [key, step] of [['minimum', -1], ['exclusiveMinimum', -1], ['maximum', 1], ['exclusiveMaximum', 1]] as const) {
          const bound = s[key];
          if (typeof bound !== 'number') continue;
          add('number_edge', path, at(bound));
          add('number_edge', path, at(bound + step));
        }
      }
      if (types.includes('array')) {
        add('empty_array', path, at([]));
        add('huge_array', path, at(Array.from({ length: arrayLength }, (_, i) => i)));
        add('wrong_type', path, at([null, {}, [], 'x', 1]));
      }
      if (types.includes('object')) {
        add('empty_object', path, at({}));
        if (level < 2 && s.properties) visit(s.properties as Record<string, Schema>, (s.required as string[] | undefined) ?? [], path, level + 1);
      }
    }
  };
  visit((schema.properties ?? {}) as Record<string, Schema>, (schema.required as string[] | undefined) ?? [], [], 1);

  const kinds = shuffle([...byKind.keys()].sort(), rng);
  // Shuffled within each kind, the cases marked first ahead (stably: the order stays seeded).
  const queues = kinds.map((k) => {
    const q = shuffle(byKind.get(k)!, rng);
    return [...q.filter((c) => first.has(c)), ...q.filter((c) => !first.has(c))];
  });
  const out: FuzzCase[] = [];
  for (let round = 0; out.length < count; round++) {
    let any = false;
    for (const q of queues) {
      if (round < q.length && out.length < count) {
        out.push(q[round]!);
        any = true;
      }
    }
    if (!any) break;
  }
  return out;
}

/** What the fuzzer needs of a client: `ToolClient` has it all. */
export interface FuzzClient extends Caller {
  readonly pid: number | undefined;
  readonly restarts: number;
  readonly spec: { transport: string };
  listTools(options?: { refresh?: boolean; timeoutMs?: number }): Promise<unknown>;
}

export interface Classified {
  outcome: Outcome;
  detail: string;
  /** Progress notifications the call sent (each one restarted its timeout, unless that was turned off). */
  progress?: number;
  /** The server went down with this call (it crashed, or hung and did not answer a probe): restarted, now or on the next call. */
  restarted?: boolean;
}

function textOf(r: ToolResult): string {
  const first = r.content[0] as { text?: unknown } | undefined;
  return typeof first?.text === 'string' ? first.text : JSON.stringify(r.content).slice(0, 300);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether the server answers at all (a fresh `tools/list`). */
async function answers(client: FuzzClient, timeoutMs: number): Promise<boolean> {
  try {
    await client.listTools({ refresh: true, timeoutMs });
    return true;
  } catch {
    return false;
  }
}

/** After killing a stdio server: waits for the client to see the exit, then for a fresh server to answer. */
async function restartAfterKill(client: FuzzClient, timeoutMs: number): Promise<boolean> {
  for (let i = 0; i < 3; i++) {
    if (await answers(client, timeoutMs)) return true;
    await sleep(50);
  }
  return false;
}

/**
 * Sends one call and classifies the answer. A crash counts only when the process is really gone
 * (its pid no longer alive; over HTTP, when the server no longer answers); a hang is followed by
 * a probe, and a stdio server that does not answer it is killed so the next call gets a fresh one.
 */
export async function sendAndClassify(client: FuzzClient, name: string, args: Args, timeoutMs: number, timing: CallTiming = {}): Promise<Classified> {
  // A tool that reports progress is working, not hung (the MCP specification's resetTimeoutOnProgress):
  // each notification restarts the timeout, up to maxTotalMs for the whole call.
  let progress = 0;
  const resets = timing.progressResets !== false;
  const r = await client.call(
    { name, arguments: args },
    { timeoutMs, onProgress: () => progress++, ...(resets ? { resetTimeoutOnProgress: true, maxTotalTimeoutMs: timing.maxTotalMs ?? Math.max(60_000, 10 * timeoutMs) } : {}) },
  );
  const c = await classify(client, r, timeoutMs);
  return progress > 0 ? { ...c, progress, detail: `${c.detail} (${progress} progress notification${progress === 1 ? '' : 's'}${resets ? '' : ', timeout not restarted'})` } : c;
}

/** How long a fuzz call may take: its timeout, restarted by progress notifications up to a total. */
export interface CallTiming {
  /** Progress notifications restart the call's timeout. Default true. */
  progressResets?: boolean;
  /** The whole call's limit with progress, ms. Default max(60 s, 10 × the timeout). */
  maxTotalMs?: number;
}

async function classify(client: FuzzClient, r: ToolResult, timeoutMs: number): Promise<Classified> {
  const text = textOf(r).slice(0, 300);
  if (!r.isError) return { outcome: 'accepted', detail: text.slice(0, 120) };
  switch (r.errorKind) {
    case undefined:
    case 'tool':
      return { outcome: 'rejected', detail: text };
    case 'invalid_arguments':
      // An isError result whose text is the SDK's validation message is a proper rejection;
      // a JSON-RPC "invalid params" error thrown at the client is a protocol error.
      return text.startsWith('Input validation error') ? { outcome: 'rejected', detail: text } : { outcome: 'protocol_error', detail: text };
    case 'timeout': {
      const probeMs = Math.min(Math.max(500, timeoutMs), 5000);
      if (await answers(client, probeMs)) return { outcome: 'hang', detail: text };
      const pid = client.pid;
      if (client.spec.transport === 'stdio' && pid !== undefined) {
        await killTree(pid, { group: true, graceMs: 500 });
        // Start the fresh server now: a call sent before the client has seen the exit (killTree
        // returns once the process is a zombie) would fail as if the next input had crashed it.
        const back = await restartAfterKill(client, probeMs);
        return { outcome: 'hang', detail: `${text}; the server did not answer afterwards and was ${back ? 'restarted' : 'killed'}`, restarted: true };
      }
      return { outcome: 'hang', detail: `${text}; the server did not answer afterwards` };
    }
    case 'crashed':
    case 'closed': {
      // A client that gave up restarting a server that keeps crashing: not this input's doing.
      if (/keeps crashing/.test(text)) return { outcome: 'protocol_error', detail: text };
      if (client.spec.transport === 'stdio') {
        const pid = client.pid;
        // The exit has been seen when the call failed as crashed; give a closing pipe a moment.
        for (let i = 0; i < 20 && pid !== undefined && isAlive(pid); i++) await sleep(25);
        if (pid !== undefined && !isAlive(pid)) return { outcome: 'crash', detail: text, restarted: true };
        return { outcome: 'protocol_error', detail: `${text} (the process is still alive)` };
      }
      if (client.spec.transport === 'http' && !(await answers(client, Math.min(timeoutMs, 5000)))) return { outcome: 'crash', detail: `${text} (the server no longer answers)` };
      return { outcome: 'protocol_error', detail: text };
    }
    default:
      return { outcome: 'protocol_error', detail: text };
  }
}

export type OutcomeCounts = Record<Outcome, number>;
const zero = (): OutcomeCounts => ({ rejected: 0, accepted: 0, protocol_error: 0, crash: 0, hang: 0 });

export interface FuzzFailure {
  tool: string;
  arguments: Args;
  outcome: Outcome;
  kind?: string;
  path?: string;
  detail?: string;
  seed?: number;
  case?: number;
}

export interface ToolFuzz extends OutcomeCounts {
  tool: string;
  cases: number;
  by_kind: Record<string, OutcomeCounts>;
}

export interface FuzzReport {
  seed: number;
  cases_per_tool: number;
  tools: Record<string, ToolFuzz>;
  totals: OutcomeCounts & { cases: number };
  /** The inputs that crashed the server or hung, with what happened. */
  failures: FuzzFailure[];
  /** Server restarts during the fuzz run. */
  restarts: number;
}

export interface FuzzOptions extends FuzzGenOptions, CallTiming {
  /** Timeout of each call, ms: longer (without progress) is a hang. Default 5,000. */
  timeoutMs?: number;
  /** Per-tool timeouts, ms (tools slow by design), over timeoutMs. */
  toolTimeoutMs?: Record<string, number>;
  signal?: AbortSignal;
  onCase?: (tool: string, index: number, total: number, c: FuzzCase, r: Classified) => void;
}

/** Fuzzes each tool in turn, one call at a time (so a crash or hang is pinned to its input). */
export async function runFuzz(client: FuzzClient, tools: { name: string; inputSchema: Schema }[], options: FuzzOptions = {}): Promise<FuzzReport> {
  const seed = options.seed ?? 1;
  const timeoutMs = options.timeoutMs ?? 5000;
  const restarts0 = client.restarts;
  const report: FuzzReport = { seed, cases_per_tool: options.count ?? 100, tools: {}, totals: { ...zero(), cases: 0 }, failures: [], restarts: 0 };
  let pending = false;
  for (const tool of tools) {
    const cases = fuzzCases(tool, { ...options, seed });
    const row: ToolFuzz = { tool: tool.name, cases: 0, ...zero(), by_kind: {} };
    report.tools[tool.name] = row;
    for (const [i, c] of cases.entries()) {
      if (options.signal?.aborted) break;
      const before = client.restarts;
      const r = await sendAndClassify(client, tool.name, c.arguments, options.toolTimeoutMs?.[tool.name] ?? timeoutMs, options);
      // A restart is due when the server went down and no fresh one has been started yet.
      pending = r.restarted === true && client.restarts === before;
      row.cases++;
      row[r.outcome]++;
      (row.by_kind[c.kind] ??= zero())[r.outcome]++;
      report.totals.cases++;
      report.totals[r.outcome]++;
      if (r.outcome === 'crash' || r.outcome === 'hang') {
        report.failures.push({ tool: tool.name, arguments: c.arguments, outcome: r.outcome, kind: c.kind, path: c.path, detail: r.detail, seed, case: i });
      }
      options.onCase?.(tool.name, i, cases.length, c, r);
    }
  }
  // A server that died on the last case restarts only on the next call: count it as due.
  report.restarts = client.restarts - restarts0 + (pending ? 1 : 0);
  return report;
}

/** Writes failures as JSONL (one `{tool, arguments, outcome, ...}` per line). */
export function saveFailures(file: string, failures: FuzzFailure[]): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, failures.map((f) => JSON.stringify(f)).join('\n') + (failures.length ? '\n' : ''));
}

/** Reads a failures file (or any JSONL of `{tool, arguments}`). */
export function readFailures(file: string): FuzzFailure[] {
  const out: FuzzFailure[] = [];
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (!line || line.startsWith('//')) return;
      let e: Partial<FuzzFailure>;
      try {
        e = JSON.parse(line) as Partial<FuzzFailure>;
      } catch (err) {
        throw new Error(`${file}:${i + 1}: not JSON (${(err as Error).message})`);
      }
      if (typeof e.tool !== 'string') throw new Error(`${file}:${i + 1}: expected {"tool": ..., "arguments": {...}}`);
      const args = e.arguments ?? {};
      if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new Error(`${file}:${i + 1}: arguments must be a JSON object`);
      out.push({ ...e, tool: e.tool, arguments: args, outcome: e.outcome ?? 'crash' } as FuzzFailure);
    });
  return out;
}

export interface ReplayResult {
  tool: string;
  kind?: string;
  path?: string;
  /** What the saved run recorded. */
  recorded: Outcome;
  /** What happened now. */
  outcome: Outcome;
  reproduced: boolean;
  detail: string;
}

/** Sends saved inputs again, one at a time, and tells which failures reproduce. */
export async function replayFailures(client: FuzzClient, failures: FuzzFailure[], options: { timeoutMs?: number; toolTimeoutMs?: Record<string, number>; signal?: AbortSignal } & CallTiming = {}): Promise<{ results: ReplayResult[]; counts: OutcomeCounts; reproduced: number }> {
  const results: ReplayResult[] = [];
  const counts = zero();
  for (const f of failures) {
    if (options.signal?.aborted) break;
    const r = await sendAndClassify(client, f.tool, f.arguments, options.toolTimeoutMs?.[f.tool] ?? options.timeoutMs ?? 5000, options);
    counts[r.outcome]++;
    results.push({ tool: f.tool, kind: f.kind, path: f.path, recorded: f.outcome, outcome: r.outcome, reproduced: r.outcome === f.outcome, detail: r.detail });
  }
  return { results, counts, reproduced: results.filter((r) => r.reproduced).length };
}
