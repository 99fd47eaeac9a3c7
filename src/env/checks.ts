/**
 * Verifiers: how an episode is checked against its task. Each check scores in [0, 1]:
 * `state` (a tool call on the episode's server state after the episode, compared),
 * `answer` (the final answer, extracted from \boxed{}, <answer></answer> or "答案是"),
 * `call` (a tool call that must have happened; only the named arguments are compared),
 * `code` (the answer's code run against test cases; the fraction passed),
 * `bfcl` (BFCL's own verdict on the episode's calls for a BFCL entry, src/env/bfcl/).
 *
 * A check that cannot run is not the agent's failure: it is marked `error: 'task'` when the task
 * is at fault (`taskProblem` finds most of these before the episode starts) and `error: 'server'`
 * when its tool server failed; the environment then ends the episode as failed, scoring nothing.
 */
import type { ToolInfo, ToolResult } from '../tools/index.ts';
import { isControlTool, resultText } from '../tools/index.ts';
import type { Check, Matcher, Task, TaskCall } from './task.ts';
import type { CheckResult, Turn } from './types.ts';
import { bfclGrader } from './bfcl/grader.ts';
import { bfclResult } from './bfcl/results.ts';
import { extractCode, runCode } from './code-runner.ts';

export interface EpisodeRecord {
  /** The final answer text (the last assistant message without tool calls), or null. */
  answer: string | null;
  calls: { server?: string; tool?: string; arguments: unknown; isError: boolean }[];
  /** The episode's turns so far (what the `bfcl` check grades). */
  turns?: readonly Pick<Turn, 'action' | 'user_turn'>[];
}

export type StateCaller = (call: TaskCall) => Promise<ToolResult>;

/** The last balanced `\boxed{...}` in a text. */
function lastBoxed(text: string): string | undefined {
  const at = text.lastIndexOf('\\boxed{');
  if (at < 0) return undefined;
  let depth = 0;
  for (let i = at + 6; i < text.length; i++) {
    const c = text[i];
    if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return text.slice(at + 7, i);
  }
  return undefined;
}

/** Takes the final answer out of a reply: \boxed{}, <answer></answer>, "答案是 ...", else the whole text. */
export function extractAnswer(text: string): string {
  const boxed = lastBoxed(text);
  if (boxed !== undefined) return boxed.trim();
  const tagged = [...text.matchAll(/<answer>([\s\S]*?)<\/answer>/g)].pop();
  if (tagged) return tagged[1]!.trim();
  const zh = text.lastIndexOf('答案是');
  if (zh >= 0)
    return text
      .slice(zh + 3)
      .replace(/^[\s:：]+/, '')
      .split(/[\n。]/)[0]!
      .replace(/[.，,;；]+$/, '')
      .trim();
  return text.trim();
}

/** Whether a reply states its answer in a recognised format. */
export function hasAnswerFormat(text: string): boolean {
  return lastBoxed(text) !== undefined || /<answer>[\s\S]*?<\/answer>/.test(text) || text.includes('答案是');
}

interface Exact {
  num: bigint;
  den: bigint;
}

/** Parses "12", "-4.5", "3/7", "1e3", "1,234" into an exact fraction. */
export function parseExact(s: string): Exact | undefined {
  const t = s.trim().replace(/(\d),(?=\d{3}\b)/g, '$1');
  const frac = /^([+-]?\d+)\s*\/\s*(\d+)$/.exec(t);
  if (frac) {
    const den = BigInt(frac[2]!);
    return den === 0n ? undefined : { num: BigInt(frac[1]!), den };
  }
  const dec = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d{1,4}))?$/.exec(t);
  if (!dec || (!dec[2] && !dec[3])) return undefined;
  const digits = (dec[2] ?? '') + (dec[3] ?? '');
  let exp = -(dec[3]?.length ?? 0) + Number(dec[4] ?? 0);
  let num = BigInt(digits || '0') * (dec[1] === '-' ? -1n : 1n);
  let den = 1n;
  if (exp > 0) num *= 10n ** BigInt(exp);
  else if (exp < 0) den = 10n ** BigInt(-exp);
  exp = 0;
  return { num, den };
}

/** The number an answer states: the whole text if it is one, else the last number in it. */
export function answerNumber(text: string): string | undefined {
  if (parseExact(text) !== undefined) return text.trim();
  const all = text.match(/[+-]?\d[\d,]*(?:\.\d+)?(?:\/\d+)?(?:[eE][+-]?\d+)?/g);
  return all?.pop();
}

function numbersClose(actual: string, expected: string, tolerance: number): boolean {
  const a = parseExact(actual);
  const b = parseExact(expected);
  if (a && b) {
    // |a - b| <= tolerance, exactly: |an*bd - bn*ad| * 1e12 <= round(tol * 1e12) * ad * bd
    const diff = a.num * b.den - b.num * a.den;
    const abs = diff < 0n ? -diff : diff;
    return abs * 10n ** 12n <= BigInt(Math.round(tolerance * 1e12)) * a.den * b.den;
  }
  const x = Number(actual);
  const y = Number(expected);
  return Number.isFinite(x) && Number.isFinite(y) && Math.abs(x - y) <= tolerance;
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as unknown[]).length && a.every((x, i) => deepEqual(x, (b as unknown[])[i]));
  const ka = Object.keys(a as object);
  const kb = Object.keys(b as object);
  return ka.length === kb.length && ka.every((k) => deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** `expected` is contained in `actual`: objects key by key, arrays element-wise in any order. */
export function isSubset(expected: unknown, actual: unknown): boolean {
  if (expected === null || typeof expected !== 'object') return deepEqual(expected, actual);
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return false;
    const used = new Set<number>();
    return expected.every((e) => {
      const i = actual.findIndex((a, j) => !used.has(j) && isSubset(e, a));
      if (i < 0) return false;
      used.add(i);
      return true;
    });
  }
  if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
  return Object.entries(expected).every(([k, v]) => isSubset(v, (actual as Record<string, unknown>)[k]));
}

const show = (v: unknown) => {
  const s = typeof v === 'string' ? JSON.stringify(v) : (JSON.stringify(v) ?? String(v));
  return s.length > 120 ? s.slice(0, 117) + '...' : s;
};

/** Compares a value with a matcher; `fromAnswer` means the value is an agent's free-text answer. */
export function match(matcher: Matcher, value: unknown, fromAnswer = false): { ok: boolean; detail: string } {
  const asText = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  switch (matcher.kind) {
    case 'equals': {
      const ok =
        deepEqual(value, matcher.value) || (typeof value === 'string' && typeof matcher.value !== 'string' && deepEqual(tryJson(value), matcher.value));
      return { ok, detail: ok ? 'equal' : `expected ${show(matcher.value)}, got ${show(value)}` };
    }
    case 'contains': {
      const ok = matcher.ignore_case ? asText.toLowerCase().includes(matcher.value.toLowerCase()) : asText.includes(matcher.value);
      return { ok, detail: ok ? 'contains' : `expected to contain ${show(matcher.value)}, got ${show(value)}` };
    }
    case 'number': {
      const want = String(matcher.value);
      const got = fromAnswer ? answerNumber(asText) : typeof value === 'number' ? String(value) : asText;
      const ok = got !== undefined && numbersClose(got, want, matcher.tolerance);
      return { ok, detail: ok ? 'number matches' : `expected the number ${want} (±${matcher.tolerance}), got ${show(got ?? value)}` };
    }
    case 'subset': {
      const ok = isSubset(matcher.value, typeof value === 'string' ? tryJson(value) : value);
      return { ok, detail: ok ? 'subset matches' : `expected to contain ${show(matcher.value)}, got ${show(value)}` };
    }
    case 'exact': {
      const norm = (s: string) =>
        (matcher.ignore_case ? s.toLowerCase() : s)
          .replace(/\s+/g, ' ')
          .trim()
          .replace(/[.。]$/, '');
      const ok = norm(asText) === norm(matcher.value);
      return { ok, detail: ok ? 'exact match' : `expected ${show(matcher.value)}, got ${show(value)}` };
    }
    case 'regex': {
      const ok = new RegExp(matcher.value, matcher.flags).test(asText);
      return { ok, detail: ok ? 'regex matches' : `expected to match /${matcher.value}/${matcher.flags}, got ${show(value)}` };
    }
  }
}

function tryJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/** The value at a dotted path ("rows.0.1") of a result. */
export function valueAt(root: unknown, path: string | undefined): unknown {
  if (!path) return root;
  let v: unknown = root;
  for (const part of path.split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  return v;
}

/**
 * Who is at fault when a state call fails, by the tool layer's error kind: the task (`unknown_tool`,
 * `invalid_arguments`: the call is the task's own; `protocol`: the server refused the call itself),
 * the server (`crashed`, `closed`, `timeout`, `aborted`), or nobody but the agent (`tool`: the tool
 * ran and reported an error about the state the agent left, e.g. a file it deleted).
 */
export function stateCallFault(kind: ToolResult['errorKind']): 'task' | 'server' | undefined {
  if (kind === 'unknown_tool' || kind === 'invalid_arguments' || kind === 'protocol') return 'task';
  if (kind === 'crashed' || kind === 'closed' || kind === 'timeout' || kind === 'aborted') return 'server';
  return undefined;
}

/**
 * The code of an answer, for a `code` check: what `<answer>…</answer>` or `\boxed{}` holds (as
 * `extractAnswer` takes it for `answer` checks), then the last fenced block in that (extractCode).
 * When the extracted part does not name the function but the whole answer does (code in a fenced
 * block and a short `\boxed{}` after it), the whole answer's fenced block is used.
 */
export function codeOf(answer: string, functionName?: string): string {
  const marked = lastBoxed(answer) !== undefined || /<answer>[\s\S]*?<\/answer>/.test(answer);
  const code = extractCode(marked ? extractAnswer(answer) : answer);
  if (marked && functionName !== undefined) {
    const named = new RegExp(`(^|[^\\w$])${functionName.replace(/\$/g, '\\$')}([^\\w$]|$)`);
    if (!named.test(code) && named.test(answer)) return extractCode(answer);
  }
  return code;
}

type JsonSchema = Record<string, unknown>;

/**
 * Whether a result of this JSON Schema can have a value at `path` (dotted, as state checks name
 * it): false only when the schema rules it out for sure (an object with `additionalProperties:
 * false` that lacks the key, a non-index into an array, any key into a string or number); true or
 * undefined (cannot tell: no schema, `$ref`, open objects) otherwise.
 */
export function schemaAllowsPath(schema: unknown, path: string): boolean | undefined {
  const parts = path.split('.');
  const walk = (node: unknown, i: number, depth: number): boolean | undefined => {
    if (i === parts.length) return true;
    if (depth > 64 || node === null || typeof node !== 'object' || Array.isArray(node)) return undefined;
    const s = node as JsonSchema;
    if (s.$ref !== undefined) return undefined;
    for (const key of ['anyOf', 'oneOf'] as const) {
      const branches = s[key];
      if (Array.isArray(branches) && branches.length > 0) {
        const verdicts = branches.map((b) => walk(b, i, depth + 1));
        if (verdicts.some((v) => v === true)) return true;
        if (verdicts.every((v) => v === false)) return false;
        return undefined;
      }
    }
    if (Array.isArray(s.allOf)) {
      const verdicts = s.allOf.map((b) => walk(b, i, depth + 1));
      if (verdicts.some((v) => v === false)) return false;
    }
    const seg = parts[i]!;
    const types = Array.isArray(s.type) ? (s.type as unknown[]) : s.type === undefined ? undefined : [s.type];
    const props = s.properties as Record<string, unknown> | undefined;
    const canObject = types === undefined ? props !== undefined || s.additionalProperties !== undefined : types.includes('object');
    const canArray = types === undefined ? s.items !== undefined || s.prefixItems !== undefined : types.includes('array');
    if (types !== undefined && !canObject && !canArray) return false; // a string, number, boolean or null has no keys
    const verdicts: (boolean | undefined)[] = [];
    if (canObject) {
      if (props && Object.hasOwn(props, seg)) verdicts.push(walk(props[seg], i + 1, depth + 1));
      else if (s.additionalProperties === false && s.patternProperties === undefined) verdicts.push(false);
      else verdicts.push(undefined);
    }
    if (canArray) {
      if (!/^(0|[1-9]\d*)$/.test(seg)) verdicts.push(seg === 'length' && i + 1 === parts.length ? true : false);
      else if (Array.isArray(s.prefixItems) && Number(seg) < s.prefixItems.length) verdicts.push(walk(s.prefixItems[Number(seg)], i + 1, depth + 1));
      else if (s.items !== undefined && typeof s.items === 'object') verdicts.push(walk(s.items, i + 1, depth + 1));
      else verdicts.push(s.items === false ? false : undefined);
    }
    if (verdicts.some((v) => v === true)) return true;
    if (verdicts.length > 0 && verdicts.every((v) => v === false)) return false;
    return undefined;
  };
  return walk(schema, 0, 0);
}

/**
 * What is wrong with a task given the tools its servers offer (by alias, control tools included),
 * before any episode runs: a setup call (the task's or a follow-up's), state check, call check or
 * solution call that names a server the task does not have or a tool its server does not offer, a
 * solution or call check naming a control tool (the agent cannot call one), or a state check whose
 * path the tool's output schema rules out. Undefined when nothing is.
 *
 * `mayChange`: the aliases of servers whose tool list may change during the episode (they declare
 * `tools.listChanged`). Once the task's own setup (or a follow-up's) has called a control tool of
 * such a server, what runs after that call may name a tool the server adds by then: a tool its
 * first list lacks is left to the call itself (refused then, as the task's fault).
 */
export function taskProblem(task: Task, tools: Map<string, ToolInfo[]>, options: { mayChange?: ReadonlySet<string> } = {}): string | undefined {
  // When each thing runs, in order: setup[i] at i, user turn k's end (its checks) just before
  // followups[k].setup, followups[k].setup[i] at STEP*(k+1)+i, the end after everything.
  const STEP = 1e6;
  const endOf = (k: number) => STEP * (k + 1) - 0.5;
  const firstControl = new Map<string, number>();
  const setups = [...task.setup.map((c, i) => ({ c, at: i })), ...task.followups.flatMap((f, k) => f.setup.map((c, i) => ({ c, at: STEP * (k + 1) + i })))];
  for (const { c, at } of setups) {
    const t = tools.get(c.server)?.find((x) => x.name === c.tool);
    if (t && isControlTool(t) && !firstControl.has(c.server)) firstControl.set(c.server, at);
  }
  const find = (where: string, server: string, tool: string, at: number): ToolInfo | string | undefined => {
    const list = tools.get(server);
    if (!list) return `${where}: no server '${server}' in this task (its servers: ${[...tools.keys()].join(', ')})`;
    const t = list.find((x) => x.name === tool);
    if (!t && options.mayChange?.has(server) && (firstControl.get(server) ?? Infinity) < at) return undefined;
    return t ?? `${where}: unknown tool '${tool}' on server '${server}' (its tools: ${list.map((x) => x.name).join(', ') || 'none'})`;
  };
  const agentCalls = (where: string, server: string, tool: string, at: number): string | undefined => {
    const t = find(where, server, tool, at);
    if (typeof t === 'string') return t;
    if (t && isControlTool(t)) return `${where}: '${tool}' is a control tool of server '${server}' (for the task's own calls only): the agent cannot call it`;
    return undefined;
  };
  for (const { c, at } of setups) {
    const where = at < STEP ? `setup[${at}]` : `followups[${Math.floor(at / STEP) - 1}].setup[${at % STEP}]`;
    const t = find(`${where} (${c.server}.${c.tool})`, c.server, c.tool, at);
    if (typeof t === 'string') return t;
  }
  for (const [i, c] of task.checks.entries()) {
    const at = c.turn === undefined ? Infinity : endOf(c.turn);
    if (c.kind === 'state') {
      const where = `checks[${i}] (state ${c.call.server}.${c.call.tool})`;
      const t = find(where, c.call.server, c.call.tool, at);
      if (typeof t === 'string') return t;
      if (t && c.path && t.outputSchema && schemaAllowsPath(t.outputSchema, c.path) === false) {
        const top = Object.keys((t.outputSchema.properties as Record<string, unknown> | undefined) ?? {});
        return `${where}: path '${c.path}' cannot be in the result of ${c.call.server}.${c.call.tool}${top.length ? ` (its fields: ${top.join(', ')})` : ''}`;
      }
    } else if (c.kind === 'call') {
      const problem = agentCalls(`checks[${i}] (call ${c.server}.${c.tool})`, c.server, c.tool, at);
      if (problem) return problem;
    }
  }
  for (const [i, c] of (task.solution?.calls ?? []).entries()) {
    const problem = agentCalls(`solution.calls[${i}] (${c.server}.${c.tool})`, c.server, c.tool, Infinity);
    if (problem) return problem;
  }
  for (const [k, turn] of (task.solution?.turns ?? []).entries()) {
    for (const [i, c] of turn.calls.entries()) {
      const problem = agentCalls(`solution.turns[${k}].calls[${i}] (${c.server}.${c.tool})`, c.server, c.tool, endOf(k) - STEP / 2);
      if (problem) return problem;
    }
  }
  return undefined;
}

async function runCheck(check: Check, record: EpisodeRecord, callState: StateCaller): Promise<CheckResult> {
  const base = { kind: check.kind, weight: check.weight };
  switch (check.kind) {
    case 'state': {
      const r = await callState(check.call);
      if (r.isError) {
        const error = stateCallFault(r.errorKind);
        return {
          ...base,
          score: 0,
          detail: `state call ${check.call.server}.${check.call.tool} failed: ${resultText(r).slice(0, 200)}`,
          ...(error ? { error } : {}),
        };
      }
      const root = r.structured !== undefined ? r.structured : tryJson(resultText(r));
      const m = match(check.expect, valueAt(root, check.path));
      return { ...base, score: m.ok ? 1 : 0, detail: `${check.call.server}.${check.call.tool}${check.path ? ` .${check.path}` : ''}: ${m.detail}` };
    }
    case 'answer': {
      if (record.answer === null) return { ...base, score: 0, detail: 'no final answer' };
      const m = match(check.expect, extractAnswer(record.answer), true);
      return { ...base, score: m.ok ? 1 : 0, detail: `answer: ${m.detail}` };
    }
    case 'call': {
      const found = record.calls.some(
        (c) =>
          c.server === check.server &&
          c.tool === check.tool &&
          (!check.succeeded || !c.isError) &&
          Object.entries(check.arguments).every(
            ([k, v]) => c.arguments !== null && typeof c.arguments === 'object' && deepEqual((c.arguments as Record<string, unknown>)[k], v),
          ),
      );
      const named = Object.keys(check.arguments);
      return {
        ...base,
        score: found ? 1 : 0,
        detail: `${found ? 'made' : 'missing'}: ${check.server}.${check.tool}${named.length ? ` with ${show(check.arguments)}` : ''}`,
      };
    }
    case 'bfcl': {
      const result = bfclResult(record.turns ?? [], check.category.startsWith('multi_turn'));
      let verdict;
      try {
        verdict = await bfclGrader().grade(check.category, check.entry, result);
      } catch (err) {
        // BFCL's checker could not answer: not the agent's failure.
        return { ...base, score: 0, detail: (err as Error).message, error: 'server' };
      }
      if (verdict.valid) return { ...base, score: 1, detail: `BFCL: valid (${check.entry})` };
      const first = Array.isArray(verdict.error) ? verdict.error[0] : verdict.error;
      return {
        ...base,
        score: 0,
        detail: `BFCL: ${verdict.error_type ?? 'invalid'}: ${String(typeof first === 'string' ? first : JSON.stringify(first)).slice(0, 300)}`,
      };
    }
    case 'code': {
      if (record.answer === null) return { ...base, score: 0, detail: 'no final answer' };
      const r = await runCode(codeOf(record.answer, check.function), { functionName: check.function, tests: check.tests, timeoutMs: check.timeout_ms });
      return { ...base, score: r.fraction, detail: `code: ${r.passed}/${r.total} tests passed${r.error ? ` (${r.error})` : ''}` };
    }
  }
}

/**
 * Runs the checks of a task (those `select` picks, default all, in the task's order); a check that
 * throws scores 0 with the reason. The episode runs each user turn's checks (`turn: k`) with that
 * turn's answer and calls when the turn ends, the others with the episode's at its end.
 */
export async function runChecks(
  task: Task,
  record: EpisodeRecord,
  callState: StateCaller,
  select: (check: Check, index: number) => boolean = () => true,
): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const [i, check] of task.checks.entries()) {
    if (!select(check, i)) continue;
    try {
      out.push(await runCheck(check, record, callState));
    } catch (err) {
      // A check that throws is the task's own (a matcher or options the check cannot use).
      out.push({ kind: check.kind, weight: check.weight, score: 0, detail: `check failed to run: ${(err as Error).message}`, error: 'task' });
    }
  }
  return out;
}

/** Weighted mean score of the checks (1 when there are none). */
export function checkScore(results: CheckResult[]): number {
  const total = results.reduce((s, r) => s + r.weight, 0);
  return total === 0 ? 1 : results.reduce((s, r) => s + r.score * r.weight, 0) / total;
}

/** Solved: every check scored 1. */
export function solved(results: CheckResult[]): boolean {
  return results.every((r) => r.score >= 1);
}
