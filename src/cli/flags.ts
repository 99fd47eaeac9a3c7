/**
 * Command-line flags derived from a zod object schema: each field `snake_case` is a flag
 * `--snake-case` (booleans also `--no-snake-case`), typed by the field's schema, with the field's
 * `.describe()` as its help; a field that takes one value or a list of them (a union with an array)
 * is a flag that may be repeated. The training config (TrainConfigSchema) gets every one of its fields
 * as a flag this way, so a field cannot exist without a flag, nor a flag without a field.
 */
import { z } from 'zod';
import { UsageError } from './args.ts';

/** `list`: a flag that may be repeated (a field of one value or a list). */
export type FlagKind = 'int' | 'number' | 'boolean' | 'enum' | 'string' | 'list';

export interface Flag {
  field: string;
  flag: string;
  kind: FlagKind;
  values?: string[];
  default?: unknown;
  help: string;
  /** Numbers: the bounds the field's schema sets. */
  min?: number;
  max?: number;
  /** The field's own schema (numbers and lists: checked as the flag is read). */
  schema?: z.ZodType;
}

/** Strips default/optional/nullable wrappers: the field's own schema, its default and its description. */
function unwrap(s: z.ZodType): { inner: z.ZodType; def?: unknown; help: string } {
  let help = s.description ?? '';
  let def: unknown;
  let cur = s as z.ZodType & { def: { type: string; innerType?: z.ZodType; defaultValue?: unknown } };
  for (;;) {
    const t = cur.def.type;
    if (t === 'default') def = cur.def.defaultValue;
    if (t !== 'default' && t !== 'optional' && t !== 'nullable' && t !== 'prefault') break;
    cur = cur.def.innerType as typeof cur;
    help ||= cur.description ?? '';
  }
  return { inner: cur, def, help };
}

export function flagsOf(schema: z.ZodObject): Flag[] {
  return Object.entries(schema.shape).map(([field, s]) => {
    const { inner, def, help } = unwrap(s as z.ZodType);
    const d = (inner as unknown as { def: { type: string } }).def;
    let kind: FlagKind;
    let values: string[] | undefined;
    if (d.type === 'number') kind = (inner as z.ZodNumber).isInt ? 'int' : 'number';
    else if (d.type === 'boolean') kind = 'boolean';
    else if (d.type === 'enum') {
      kind = 'enum';
      values = (inner as z.ZodEnum).options.map(String);
    } else if (d.type === 'union' && (inner as z.ZodUnion).options.some((x) => (x as unknown as { def: { type: string } }).def.type === 'array')) kind = 'list';
    else kind = 'string';
    const num = d.type === 'number' ? (inner as z.ZodNumber) : undefined;
    const bound = (b: number | null | undefined) =>
      b === null || b === undefined || !Number.isFinite(b) || Math.abs(b) >= Number.MAX_SAFE_INTEGER ? undefined : b;
    return {
      field,
      flag: field.replace(/_/g, '-'),
      kind,
      values,
      default: def,
      help,
      ...(num ? { min: bound(num.minValue), max: bound(num.maxValue), schema: num } : {}),
      ...(kind === 'list' ? { schema: inner } : {}),
    };
  });
}

/** parseArgs options for these flags (strings, parsed by `flagValues`). */
export function parseArgsOptions(flags: Flag[]): Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> {
  return Object.fromEntries(
    flags.map((f) => [f.flag, { type: f.kind === 'boolean' ? ('boolean' as const) : ('string' as const), ...(f.kind === 'list' ? { multiple: true } : {}) }]),
  );
}

/** The fields given on the command line, typed; a bad value is a UsageError naming the flag. */
export function flagValues(flags: Flag[], values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of flags) {
    const v = values[f.flag];
    if (v === undefined) continue;
    if (f.kind === 'boolean' || f.kind === 'string') out[f.field] = v;
    else if (f.kind === 'list') {
      // Given once: the one value; repeated: the list. Each value checked by the field's schema.
      const values = Array.isArray(v) ? v.map(String) : [String(v)];
      const value = values.length === 1 ? values[0] : values;
      const checked = f.schema?.safeParse(value);
      if (checked && !checked.success) throw new UsageError(`--${f.flag}: ${checked.error.issues[0]?.message ?? 'not accepted'}`);
      out[f.field] = value;
    } else if (f.kind === 'enum') {
      if (!f.values!.includes(String(v))) throw new UsageError(`--${f.flag} must be one of ${f.values!.join(', ')}, got '${v}'`);
      out[f.field] = v;
    } else {
      const n = Number(v);
      const bad =
        String(v).trim() === '' ||
        !Number.isFinite(n) ||
        (f.kind === 'int' && !Number.isInteger(n)) ||
        (f.min !== undefined && n < f.min) ||
        (f.max !== undefined && n > f.max);
      if (bad) throw new UsageError(`--${f.flag} must be ${numberKind(f)}, got '${v}'`);
      const checked = f.schema?.safeParse(n);
      if (checked && !checked.success) throw new UsageError(`--${f.flag}: ${checked.error.issues[0]?.message ?? 'out of range'}, got '${v}'`);
      out[f.field] = n;
    }
  }
  return out;
}

/** "a positive integer", "a number from 0 to 1", ...: what a number flag takes. */
function numberKind(f: Flag): string {
  const what = f.kind === 'int' ? 'integer' : 'number';
  if (f.min !== undefined && f.max !== undefined) return `${f.kind === 'int' ? 'an integer' : 'a number'} from ${f.min} to ${f.max}`;
  if (f.kind === 'int' && f.min === 1) return 'a positive integer';
  if (f.kind === 'int' && f.min === 0) return 'a non-negative integer';
  if (f.min !== undefined) return `a${what === 'integer' ? 'n' : ''} ${what} of at least ${f.min}`;
  if (f.max !== undefined) return `a${what === 'integer' ? 'n' : ''} ${what} of at most ${f.max}`;
  return `a${what === 'integer' ? 'n' : ''} ${what}`;
}

const shown = (v: unknown) => (typeof v === 'string' && v.includes('/') ? v.replace(/^.*\/(models\/[^/]+)$/, '$1') : JSON.stringify(v));

/** Help lines: `--flag <kind>  help (default X)`. */
export function flagsHelp(flags: Flag[], indent = '  '): string {
  const left = (f: Flag) =>
    `--${f.flag}${f.kind === 'boolean' ? '' : f.kind === 'enum' ? ` ${f.values!.join('|')}` : f.kind === 'list' ? ' <text> ...' : ` <${f.kind === 'string' ? 'text' : f.kind}>`}`;
  const width = Math.min(40, Math.max(...flags.map((f) => left(f).length)) + 2);
  return flags
    .map((f) => {
      const l = left(f);
      const def = f.default === undefined ? '' : ` (default ${shown(f.default)})`;
      return `${indent}${l.padEnd(width)}${l.length >= width ? `\n${indent}${''.padEnd(width)}` : ''}${f.help}${def}`;
    })
    .join('\n');
}
