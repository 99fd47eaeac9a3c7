/**
 * The fuzzer's inputs: invalid, edge-case and pathological arguments generated from a tool's JSON
 * Schema, seeded and reproducible (fuzzCases).
 */
import { fnv1a, seededRandom, type RandomFn } from '../../lib/index.ts';
import { generateArguments, type Args } from './args.ts';

type Schema = Record<string, unknown>;

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
const COUNT_FIELD =
  /count|limit|length|^len$|size|max|num|repeat|times|^n$|^k$|top|depth|width|height|lines|head|tail|page|amount|total|steps|rows|items|results|chars|bytes|iterations/i;

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
      const samples: Record<string, unknown> = {
        string: 'not-the-right-type',
        number: 12345.678,
        integer: 42,
        boolean: true,
        array: ['x', 1],
        object: { x: 1 },
      };
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
          for (const p of pattern ? REDOS_PATTERNS : [REDOS_PATTERNS[0]!, REDOS_PATTERNS[2]!])
            add('redos', path, paired(setAt(bare, path, p.pattern), k, p.subject), pattern);
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
        for (const [key, step] of [
          ['minimum', -1],
          ['exclusiveMinimum', -1],
          ['maximum', 1],
          ['exclusiveMaximum', 1],
        ] as const) {
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
