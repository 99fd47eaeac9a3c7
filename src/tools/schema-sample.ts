/**
 * Values drawn from a tool's JSON Schema: for the random policy, and for benchmarks that need
 * arguments which validate. Handles the subset of JSON Schema that tool schemas use (types,
 * properties, required, enum, const, min/max, lengths, items, anyOf/oneOf, nullable types).
 */
import type { RandomFn } from '../../lib/index.ts';

const WORDS = ['alpha', 'beta', 'notes', 'report', 'x', 'data', 'hello', 'test', 'value', 'key1', '42', 'a.txt'];

type Schema = Record<string, unknown>;

export function sampleFromSchema(schema: unknown, rng: RandomFn, depth = 0): unknown {
  const s = (schema ?? {}) as Schema;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  if ('const' in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length) return pick(s.enum);
  const alts = (s.anyOf ?? s.oneOf) as unknown[] | undefined;
  if (Array.isArray(alts) && alts.length) {
    const nonNull = alts.filter((a) => (a as Schema)?.type !== 'null');
    return sampleFromSchema(pick(nonNull.length ? nonNull : alts), rng, depth + 1);
  }
  let type = s.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? type[0];
  if (type === undefined) type = s.properties ? 'object' : 'string';
  switch (type) {
    case 'object': {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      const required = new Set((s.required as string[] | undefined) ?? []);
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(props)) {
        if (required.has(k) || (depth < 3 && rng() < 0.3)) out[k] = sampleFromSchema(v, rng, depth + 1);
      }
      return out;
    }
    case 'array': {
      const min = Number(s.minItems ?? 0);
      const n = depth > 3 ? min : min + Math.floor(rng() * 2);
      return Array.from({ length: n }, () => sampleFromSchema(s.items, rng, depth + 1));
    }
    case 'integer':
    case 'number': {
      const min = typeof s.minimum === 'number' ? s.minimum : typeof s.exclusiveMinimum === 'number' ? s.exclusiveMinimum + 1 : 0;
      const max = typeof s.maximum === 'number' ? s.maximum : typeof s.exclusiveMaximum === 'number' ? s.exclusiveMaximum - 1 : min + 100;
      const v = min + Math.floor(rng() * (Math.max(min, max) - min + 1));
      return v;
    }
    case 'boolean':
      return rng() < 0.5;
    case 'null':
      return null;
    default: {
      const min = Number(s.minLength ?? 1);
      const max = Number(s.maxLength ?? 64);
      let w = pick(WORDS);
      while (w.length < min) w += w;
      if (typeof s.pattern === 'string') {
        // Patterns we cannot satisfy by chance: use digits, which most patterns for numbers accept.
        const digits = String(Math.floor(rng() * 1000));
        if (new RegExp(s.pattern).test(digits)) return digits;
      }
      return w.slice(0, Math.max(min, Math.min(max, w.length)));
    }
  }
}
