/**
 * Where a benchmark's tool arguments come from: a file of example calls, or values drawn from
 * each tool's JSON Schema and checked against it (ajv, as the SDK uses).
 */
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/client/validators/ajv';
import { seededRandom, type RandomFn } from '../../lib/index.ts';

type Schema = Record<string, unknown>;
export type Args = Record<string, unknown>;

/**
 * Example calls by tool, from `{"tool": [args, ...]}` (JSON) or one `{"tool", "arguments"}` per
 * line (JSONL; blank lines and `//` comments skipped). Throws naming the file and line.
 */
export function parseExamples(text: string, file = '<examples>'): Map<string, Args[]> {
  const out = new Map<string, Args[]>();
  const add = (tool: unknown, args: unknown, where: string) => {
    if (typeof tool !== 'string' || !tool) throw new Error(`${where}: expected a tool name`);
    if (args === undefined) args = {};
    if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new Error(`${where}: the arguments of '${tool}' must be a JSON object`);
    const list = out.get(tool) ?? [];
    list.push(args as Args);
    out.set(tool, list);
  };
  const trimmed = text.trim();
  let whole: unknown;
  let isWhole = false;
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    try {
      whole = JSON.parse(trimmed);
      isWhole = true;
    } catch {
      isWhole = false; // JSONL: several objects
    }
  }
  if (isWhole && Array.isArray(whole)) {
    whole.forEach((e, i) => add((e as { tool?: unknown })?.tool, (e as { arguments?: unknown })?.arguments, `${file}: [${i}]`));
    return out;
  }
  if (isWhole && whole && typeof whole === 'object' && !('tool' in whole && 'arguments' in whole)) {
    for (const [tool, list] of Object.entries(whole as Record<string, unknown>)) {
      if (!Array.isArray(list)) throw new Error(`${file}: '${tool}' must map to an array of argument objects`);
      list.forEach((args, i) => add(tool, args, `${file}: ${tool}[${i}]`));
    }
    return out;
  }
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('//')) return;
    let e: unknown;
    try {
      e = JSON.parse(line);
    } catch (err) {
      throw new Error(`${file}:${i + 1}: not JSON (${(err as Error).message})`);
    }
    add((e as { tool?: unknown })?.tool, (e as { arguments?: unknown })?.arguments, `${file}:${i + 1}`);
  });
  return out;
}

const validator = new AjvJsonSchemaValidator();

/** A checker of values against `schema`; undefined when the schema cannot be compiled. */
export function schemaValidator(schema: Schema): ((value: unknown) => { valid: boolean; error?: string }) | undefined {
  try {
    const check = validator.getValidator(schema as never);
    return (value) => {
      const r = check(value);
      return r.valid ? { valid: true } : { valid: false, error: r.errorMessage };
    };
  } catch {
    return undefined;
  }
}

const WORDS = ['alpha', 'beta', 'notes', 'report', 'data', 'hello', 'test', 'value', 'key1', 'a.txt', 'bench', 'x'];
const FORMATS: Record<string, string[]> = {
  uri: ['https://example.com/a', 'https://example.org/x?y=1'],
  'uri-reference': ['/a/b', 'https://example.com/'],
  url: ['https://example.com/a'],
  email: ['a@example.com', 'bench@example.org'],
  'date-time': ['2024-01-02T03:04:05Z'],
  date: ['2024-01-02'],
  time: ['03:04:05Z'],
  uuid: ['123e4567-e89b-12d3-a456-426614174000'],
  hostname: ['example.com'],
  ipv4: ['127.0.0.1'],
  ipv6: ['::1'],
  duration: ['P1D'],
};

function resolveRef(schema: Schema, root: Schema): Schema {
  let s = schema;
  for (let hops = 0; typeof s.$ref === 'string' && hops < 20; hops++) {
    const ref = s.$ref as string;
    if (!ref.startsWith('#')) return {};
    let target: unknown = root;
    for (const part of ref.slice(1).split('/').filter(Boolean)) {
      target = (target as Record<string, unknown> | undefined)?.[decodeURIComponent(part.replace(/~1/g, '/').replace(/~0/g, '~'))];
    }
    s = (target as Schema | undefined) ?? {};
  }
  return s;
}

/** One value meant to validate against `schema` (formats, bounds, lengths, enums, $ref, allOf). */
export function sampleValid(schema: unknown, rng: RandomFn, root: Schema = (schema ?? {}) as Schema, depth = 0): unknown {
  if (depth > 24) return null; // a schema that recurses without end
  let s = resolveRef((schema ?? {}) as Schema, root);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  if (Array.isArray(s.allOf)) s = Object.assign({}, ...(s.allOf as Schema[]).map((x) => resolveRef(x, root)), { ...s, allOf: undefined });
  if ('const' in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length) return pick(s.enum);
  if ('default' in s && rng() < 0.2) return s.default;
  if (Array.isArray(s.examples) && s.examples.length && rng() < 0.5) return pick(s.examples);
  const alts = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
  if (Array.isArray(alts) && alts.length) {
    const nonNull = alts.filter((a) => resolveRef(a, root).type !== 'null');
    return sampleValid(pick(nonNull.length ? nonNull : alts), rng, root, depth + 1);
  }
  let type = s.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? type[0];
  if (type === undefined) type = s.properties ? 'object' : s.items ? 'array' : 'string';
  switch (type) {
    case 'object': {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      const required = new Set((s.required as string[] | undefined) ?? []);
      const out: Args = {};
      for (const [k, v] of Object.entries(props)) {
        if (required.has(k) || (depth < 3 && rng() < 0.4)) out[k] = sampleValid(v, rng, root, depth + 1);
      }
      for (const k of required) if (!(k in out)) out[k] = sampleValid({}, rng, root, depth + 1);
      return out;
    }
    case 'array': {
      const min = Number(s.minItems ?? 0);
      const max = Math.max(min, Number(s.maxItems ?? min + 2));
      const n = depth > 3 ? min : min + Math.floor(rng() * (Math.min(max, min + 2) - min + 1));
      const out: unknown[] = [];
      for (let i = 0; i < n * 4 && out.length < n; i++) {
        const v = sampleValid(Array.isArray(s.items) ? s.items[out.length] : s.items, rng, root, depth + 1);
        if (s.uniqueItems && out.some((o) => JSON.stringify(o) === JSON.stringify(v))) continue;
        out.push(v);
      }
      return out;
    }
    case 'integer':
    case 'number': {
      const int = type === 'integer';
      let min = typeof s.minimum === 'number' ? s.minimum : typeof s.exclusiveMinimum === 'number' ? s.exclusiveMinimum + (int ? 1 : 1e-6) : 0;
      let max = typeof s.maximum === 'number' ? s.maximum : typeof s.exclusiveMaximum === 'number' ? s.exclusiveMaximum - (int ? 1 : 1e-6) : min + 100;
      if (int) {
        min = Math.ceil(min);
        max = Math.floor(max);
      }
      max = Math.max(min, Math.min(max, min + 1000));
      const step = typeof s.multipleOf === 'number' && s.multipleOf > 0 ? s.multipleOf : 1;
      const first = Math.ceil(min / step) * step;
      const steps = Math.max(0, Math.floor((max - first) / step));
      return first + Math.floor(rng() * (steps + 1)) * step;
    }
    case 'boolean':
      return rng() < 0.5;
    case 'null':
      return null;
    default: {
      const min = Number(s.minLength ?? 1);
      const max = Number(s.maxLength ?? 64);
      if (typeof s.format === 'string' && FORMATS[s.format]) return pick(FORMATS[s.format]!);
      if (typeof s.pattern === 'string') {
        const re = schemaPattern(s.pattern);
        if (re) {
          const tries = [String(Math.floor(rng() * 1000)), pick(WORDS), 'a', 'A1', 'abc123', 'a-b', '1.0', 'x_y'];
          for (const t of tries) if (re.test(t) && t.length >= min && t.length <= max) return t;
        }
      }
      let w = pick(WORDS);
      while (w.length < min) w += pick(WORDS);
      return w.slice(0, Math.max(min, Math.min(max, w.length)));
    }
  }
}

export interface GeneratedArgs {
  args: Args[];
  /** Whether every set validated against the schema (false: none did, so unchecked ones are used). */
  valid: boolean;
  /** Why none validated, when so. */
  error?: string;
}

/** Up to `count` distinct argument sets for a tool, drawn from its schema and checked against it. */
export function generateArguments(schema: Schema, count: number, seed: number): GeneratedArgs {
  const rng = seededRandom(seed);
  const check = schemaValidator(schema);
  const seen = new Set<string>();
  const good: Args[] = [];
  const unchecked: Args[] = [];
  let error: string | undefined;
  for (let attempt = 0; attempt < count * 16 && good.length < count; attempt++) {
    const v = sampleValid(schema, rng) as Args;
    const args = v && typeof v === 'object' && !Array.isArray(v) ? v : {};
    const key = JSON.stringify(args);
    if (seen.has(key)) continue;
    seen.add(key);
    const r = check ? check(args) : { valid: true };
    if (r.valid) good.push(args);
    else {
      error ??= r.error;
      if (unchecked.length < count) unchecked.push(args);
    }
  }
  if (good.length) return { args: good, valid: true };
  return { args: unchecked.length ? unchecked : [{}], valid: false, error };
}

/** A JSON Schema `pattern` as a RegExp (Unicode mode), or undefined when it does not compile. */
export function schemaPattern(pattern: string): RegExp | undefined {
  try {
    return new RegExp(pattern, 'u');
  } catch {
    return undefined;
  }
}
