/**
 * Verifiers: how an episode is checked against its task. Each check scores in [0, 1]:
 * `state` (a tool call on the episode's server state after the episode, compared),
 * `answer` (the final answer, extracted from \boxed{}, <answer></answer> or "答案是"),
 * `call` (a tool call that must have happened; only the named arguments are compared),
 * `code` (the answer's code run against test cases; the fraction passed).
 */
import type { ToolResult } from '../tools/index.ts';
import { resultText } from '../tools/index.ts';
import type { Check, Matcher, Task, TaskCall } from './task.ts';
import type { CheckResult } from './types.ts';
import { extractCode, runCode } from './code-runner.ts';

export interface EpisodeRecord {
  /** The final answer text (the last assistant message without tool calls), or null. */
  answer: string | null;
  calls: { server?: string; tool?: string; arguments: unknown; isError: boolean }[];
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
  if (zh >= 0) return text.slice(zh + 3).replace(/^[\s:：]+/, '').split(/[\n。]/)[0]!.replace(/[.，,;；]+$/, '').trim();
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
  const s = typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v) ?? String(v);
  return s.length > 120 ? s.slice(0, 117) + '...' : s;
};

/** Compares a value with a matcher; `fromAnswer` means the value is an agent's free-text answer. */
export function match(matcher: Matcher, value: unknown, fromAnswer = false): { ok: boolean; detail: string } {
  const asText = typeof value === 'string' ? value : JSON.stringify(value) ?? '';
  switch (matcher.kind) {
    case 'equals': {
      const ok = deepEqual(value, matcher.value) || (typeof value === 'string' && typeof matcher.value !== 'string' && deepEqual(tryJson(value), matcher.value));
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
      const norm = (s: string) => (matcher.ignore_case ? s.toLowerCase() : s).replace(/\s+/g, ' ').trim().replace(/[.。]$/, '');
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

async function runCheck(check: Check, record: EpisodeRecord, callState: StateCaller): Promise<CheckResult> {
  const base = { kind: check.kind, weight: check.weight };
  switch (check.kind) {
    case 'state': {
      const r = await callState(check.call);
      if (r.isError) return { ...base, score: 0, detail: `state call ${check.call.server}.${check.call.tool} failed: ${resultText(r).slice(0, 200)}` };
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
          Object.entries(check.arguments).every(([k, v]) => c.arguments !== null && typeof c.arguments === 'object' && deepEqual((c.arguments as Record<string, unknown>)[k], v)),
      );
      const named = Object.keys(check.arguments);
      return { ...base, score: found ? 1 : 0, detail: `${found ? 'made' : 'missing'}: ${check.server}.${check.tool}${named.length ? ` with ${show(check.arguments)}` : ''}` };
    }
    case 'code': {
      if (record.answer === null) return { ...base, score: 0, detail: 'no final answer' };
      const r = await runCode(extractCode(record.answer), { functionName: check.function, tests: check.tests, timeoutMs: check.timeout_ms });
      return { ...base, score: r.fraction, detail: `code: ${r.passed}/${r.total} tests passed${r.error ? ` (${r.error})` : ''}` };
    }
  }
}

/** Runs every check of a task; a check that throws scores 0 with the reason. */
export async function runChecks(task: Task, record: EpisodeRecord, callState: StateCaller): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const check of task.checks) {
    try {
      out.push(await runCheck(check, record, callState));
    } catch (err) {
      out.push({ kind: check.kind, weight: check.weight, score: 0, detail: `check failed to run: ${(err as Error).message}` });
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
