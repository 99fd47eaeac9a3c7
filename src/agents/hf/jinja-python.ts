/**
 * Python semantics for @huggingface/jinja, so that a chat template renders here exactly as
 * transformers renders it (Jinja2 in Python; `apply_chat_template`). Found by the parity test
 * against transformers (test/agents/template-parity.test.ts, docs/models.md "Parity with
 * transformers"); each difference is fixed here, over the library, not in the templates:
 *
 * - `str.strip(chars)`, `lstrip(chars)`, `rstrip(chars)` and the `trim` filter: the library ignores
 *   `chars` and strips all whitespace (Qwen3's `.strip('\n')` around think blocks); without `chars`
 *   it strips JavaScript's whitespace, which is not Python's (U+FEFF is not whitespace in Python;
 *   U+001C-U+001F and U+0085 are). `str.split()` without a separator splits on Python's whitespace.
 * - Numbers are written as Python writes them: a float by `repr` (`1e-05`, `1e+16`, `2.5`, `1.0`
 *   for a float that is integral), an int as its digits. JSON numbers reach JavaScript as numbers,
 *   which cannot tell `1.0` from `1`: an integral number is an int here (what a JavaScript server
 *   writes on the wire); see docs/models.md.
 * - `tojson` is transformers' own filter: `json.dumps(x, ensure_ascii=False, indent, separators,
 *   sort_keys)`: Python's spacing (`, ` and `: `; `,` between items when indenting), Python's
 *   numbers, keys sorted by code point.
 * - Printing a value (`{{ x }}`, `~`, `|string`, `|join`) is Python's `str()`: `True`/`False`,
 *   `None`, dicts and lists as Python writes them (`{'a': 1}`), floats by `repr`; `~` with an
 *   undefined side adds nothing (Jinja2's Undefined is '').
 * - `==` / `!=` compare values as Python does (no `1 == '1'`; lists and dicts by content).
 * - A subscript the container cannot take (`d[a_list]`) is undefined, as in Jinja2, not an error;
 *   `undefined | trim` is ''; `is iterable` holds for dicts and Undefined too; a for loop over an
 *   undefined value is empty.
 */
import { Environment, Interpreter } from '@huggingface/jinja';

type RV = { type: string; value: unknown; toString(): string; builtins?: Map<string, RV> };
type Ctor = new (value?: unknown) => RV;

/** The library's runtime value classes, taken from values it makes (they are not exported). */
function classes(): { StringValue: Ctor; FunctionValue: Ctor; BooleanValue: Ctor; UndefinedValue: Ctor } {
  const env = new Environment();
  env.set('s', 'x');
  env.set('f', () => null);
  env.set('b', true);
  const get = (k: string) => (env.lookupVariable(k) as unknown as RV).constructor as Ctor;
  return { StringValue: get('s'), FunctionValue: get('f'), BooleanValue: get('b'), UndefinedValue: get('not_set') };
}
const { StringValue, FunctionValue, BooleanValue, UndefinedValue } = classes();

// ---------------------------------------------------------------------------------------------
// Python's strings

/** The characters Python's str.isspace() holds for (str.strip() / str.split() without arguments). */
const PY_SPACE = new Set([
  0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
  0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
]);

/** Python's `s.strip(chars)` / `lstrip` / `rstrip`: chars null strips Python's whitespace. */
export function pyStrip(s: string, chars: string | null = null, side: 'both' | 'left' | 'right' = 'both'): string {
  const cps = Array.from(s);
  const set = chars === null ? null : new Set(Array.from(chars));
  const strip = (c: string) => (set ? set.has(c) : PY_SPACE.has(c.codePointAt(0)!));
  let a = 0;
  let b = cps.length;
  if (side !== 'right') while (a < b && strip(cps[a]!)) a++;
  if (side !== 'left') while (b > a && strip(cps[b - 1]!)) b--;
  return cps.slice(a, b).join('');
}

/** Python's `s.split()` (no separator): runs of Python whitespace, none empty; maxsplit -1 = all. */
export function pySplitWhitespace(s: string, maxsplit = -1): string[] {
  const cps = Array.from(s);
  const out: string[] = [];
  let i = 0;
  const space = (c: string) => PY_SPACE.has(c.codePointAt(0)!);
  while (i < cps.length) {
    while (i < cps.length && space(cps[i]!)) i++;
    if (i >= cps.length) break;
    if (maxsplit >= 0 && out.length === maxsplit) {
      out.push(cps.slice(i).join('')); // the remainder as it is (trailing whitespace kept)
      break;
    }
    let j = i;
    while (j < cps.length && !space(cps[j]!)) j++;
    out.push(cps.slice(i, j).join(''));
    i = j;
  }
  return out;
}

/** The characters Python's str.isprintable() refuses (repr escapes them): other, separator (but ' '). */
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

/** Python's `repr(s)` of a string (quotes chosen as Python chooses them, non-printables escaped). */
export function pyStrRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === quote || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch !== ' ' && NOT_PRINTABLE.test(ch)) {
      out +=
        c < 0x100 ? `\\x${c.toString(16).padStart(2, '0')}` : c < 0x10000 ? `\\u${c.toString(16).padStart(4, '0')}` : `\\U${c.toString(16).padStart(8, '0')}`;
    } else out += ch;
  }
  return out + quote;
}

// ---------------------------------------------------------------------------------------------
// Python's numbers

/** Python's `repr(float(x))`: the shortest digits that round-trip (as JavaScript's), in Python's notation. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mant, expText] = x.toExponential().split('e') as [string, string];
  const exp = Number(expText);
  const neg = mant.startsWith('-');
  const digits = mant.replace('-', '').replace('.', '');
  let body: string;
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    body = `${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  } else if (exp < 0) {
    body = `0.${'0'.repeat(-exp - 1)}${digits}`;
  } else {
    const int = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
    const frac = digits.slice(exp + 1);
    body = `${int}.${frac || '0'}`;
  }
  return neg ? `-${body}` : body;
}

/**
 * A JSON number as Python writes it after `json.loads` of what JavaScript's JSON.stringify wrote:
 * an integral value below 1e21 was written as digits (a Python int), anything else as a float.
 */
export function pyNumber(x: number, isFloat = !Number.isInteger(x) || Math.abs(x) >= 1e21): string {
  // JSON.stringify writes such a number as its shortest digits, which Python reads as that int.
  if (!isFloat) return Object.is(x, -0) ? '0' : String(x);
  return pyFloatRepr(x);
}

// ---------------------------------------------------------------------------------------------
// Python's str(), repr() and json.dumps() of runtime values

function numberText(v: RV): string {
  return pyNumber(v.value as number, v.type === 'FloatValue');
}

/** Python's `repr()` of a runtime value (how str() writes the items of a list or dict). */
export function pyRepr(v: RV): string {
  switch (v.type) {
    case 'StringValue':
      return pyStrRepr(v.value as string);
    case 'ArrayValue':
      return `[${(v.value as RV[]).map(pyRepr).join(', ')}]`;
    case 'TupleValue': {
      const items = (v.value as RV[]).map(pyRepr);
      return items.length === 1 ? `(${items[0]},)` : `(${items.join(', ')})`;
    }
    case 'ObjectValue':
    case 'KeywordArgumentsValue':
      return `{${Array.from((v.value as Map<string, RV>).entries())
        .map(([k, x]) => `${pyStrRepr(k)}: ${pyRepr(x)}`)
        .join(', ')}}`;
    default:
      return pyStr(v);
  }
}

/** Python's `str()` of a runtime value: what `{{ x }}`, `~` and `|string` write. */
export function pyStr(v: RV): string {
  switch (v.type) {
    case 'StringValue':
      return v.value as string;
    case 'IntegerValue':
    case 'FloatValue':
      return numberText(v);
    case 'BooleanValue':
      return v.value ? 'True' : 'False';
    case 'NullValue':
      return 'None';
    case 'UndefinedValue':
      return '';
    case 'ArrayValue':
    case 'TupleValue':
    case 'ObjectValue':
    case 'KeywordArgumentsValue':
      return pyRepr(v);
    default:
      return v.toString();
  }
}

function jsonString(s: string, ensureAscii: boolean): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i]!;
    const c = s.charCodeAt(i);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20 || (ensureAscii && c > 0x7e)) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return out + '"';
}

function codePointCompare(a: string, b: string): number {
  const x = Array.from(a);
  const y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d) return d;
  }
  return x.length - y.length;
}

export interface PyJsonOptions {
  indent?: number | string | null;
  ensureAscii?: boolean;
  separators?: [string, string] | null;
  sortKeys?: boolean;
}

/** transformers' `tojson`: Python's json.dumps(x, ensure_ascii=False, indent, separators, sort_keys). */
export function pyJson(v: RV, o: PyJsonOptions = {}, depth = 0): string {
  const indent = o.indent === undefined || o.indent === null ? null : typeof o.indent === 'number' ? ' '.repeat(o.indent) : o.indent;
  const [itemSep, keySep] = o.separators ?? (indent !== null ? [',', ': '] : [', ', ': ']);
  switch (v.type) {
    case 'NullValue':
    case 'UndefinedValue':
      return 'null';
    case 'BooleanValue':
      return v.value ? 'true' : 'false';
    case 'IntegerValue':
    case 'FloatValue': {
      const x = v.value as number;
      if (Number.isNaN(x)) return 'NaN';
      if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
      return numberText(v);
    }
    case 'StringValue':
      return jsonString(v.value as string, o.ensureAscii ?? false);
    case 'ArrayValue':
    case 'TupleValue':
    case 'ObjectValue':
    case 'KeywordArgumentsValue':
    case 'NamespaceValue': {
      const isArray = v.type === 'ArrayValue' || v.type === 'TupleValue';
      let items: string[];
      if (isArray) {
        items = (v.value as RV[]).map((x) => pyJson(x, o, depth + 1));
      } else {
        let entries = Array.from((v.value as Map<string, RV>).entries());
        if (o.sortKeys) entries = entries.sort(([a], [b]) => codePointCompare(a, b));
        items = entries.map(([k, x]) => `${jsonString(k, o.ensureAscii ?? false)}${keySep}${pyJson(x, o, depth + 1)}`);
      }
      const [open, close] = isArray ? ['[', ']'] : ['{', '}'];
      if (items.length === 0) return open + close;
      if (indent === null) return open + items.join(itemSep) + close;
      const pad = `\n${indent.repeat(depth + 1)}`;
      return `${open}${pad}${items.join(itemSep + pad)}\n${indent.repeat(depth)}${close}`;
    }
    default:
      throw new Error(`tojson: cannot serialise a ${v.type}`);
  }
}

/** Python's `==` on runtime values. */
export function pyEquals(a: RV, b: RV): boolean {
  const num = (v: RV) => v.type === 'IntegerValue' || v.type === 'FloatValue' || v.type === 'BooleanValue';
  if (num(a) && num(b)) return Number(a.value) === Number(b.value);
  if (a.type === 'UndefinedValue' || b.type === 'UndefinedValue') return a.type === b.type;
  const seq = (v: RV) => v.type === 'ArrayValue' || v.type === 'TupleValue';
  if (seq(a) && seq(b)) {
    if (a.type !== b.type) return false;
    const x = a.value as RV[];
    const y = b.value as RV[];
    return x.length === y.length && x.every((e, i) => pyEquals(e, y[i]!));
  }
  const map = (v: RV) => v.type === 'ObjectValue' || v.type === 'KeywordArgumentsValue';
  if (map(a) && map(b)) {
    const x = a.value as Map<string, RV>;
    const y = b.value as Map<string, RV>;
    return x.size === y.size && Array.from(x.entries()).every(([k, e]) => y.has(k) && pyEquals(e, y.get(k)!));
  }
  if (a.type !== b.type) return false;
  if (a.type === 'NullValue') return true;
  return a.value === b.value;
}

// ---------------------------------------------------------------------------------------------
// Registered over the library

/** The string methods with Python's arguments, put over the library's (once per string value). */
function pythonStringMethods(s: RV, builtins: Map<string, RV>): Map<string, RV> {
  const chars = (args: RV[], name: string): string | null => {
    const a = args[0];
    if (a === undefined || a.type === 'NullValue' || a.type === 'UndefinedValue') return null;
    if (a.type !== 'StringValue') throw new Error(`${name}() argument must be a string or None`);
    return a.value as string;
  };
  const text = s.value as string;
  builtins.set('strip', new FunctionValue((args: RV[]) => new StringValue(pyStrip(text, chars(args, 'strip'), 'both'))));
  builtins.set('lstrip', new FunctionValue((args: RV[]) => new StringValue(pyStrip(text, chars(args, 'lstrip'), 'left'))));
  builtins.set('rstrip', new FunctionValue((args: RV[]) => new StringValue(pyStrip(text, chars(args, 'rstrip'), 'right'))));
  const split = builtins.get('split')!;
  builtins.set(
    'split',
    new FunctionValue((args: RV[], scope: unknown) => {
      const sep = args[0];
      if (sep === undefined || sep.type === 'NullValue') {
        const max = args[1] && args[1].type === 'IntegerValue' ? (args[1].value as number) : -1;
        return arrayOf(pySplitWhitespace(text, max).map((p) => new StringValue(p)));
      }
      return (split.value as (a: RV[], s: unknown) => RV)(args, scope);
    }),
  );
  return builtins;
}

let ArrayValueCtor: Ctor | undefined;
function arrayOf(items: RV[]): RV {
  if (!ArrayValueCtor) {
    const env = new Environment();
    env.set('a', []);
    ArrayValueCtor = (env.lookupVariable('a') as unknown as RV).constructor as Ctor;
  }
  return new ArrayValueCtor(items);
}

let installed = false;
/** Puts Python's string methods over the library's StringValue (idempotent; process-wide). */
function installStringMethods(): void {
  if (installed) return;
  installed = true;
  const proto = StringValue.prototype as object;
  let owner: object | null = proto;
  let desc: PropertyDescriptor | undefined;
  while (owner && !(desc = Object.getOwnPropertyDescriptor(owner, 'builtins'))) owner = Object.getPrototypeOf(owner);
  const get = desc?.get;
  if (!get) throw new Error('jinja-python: @huggingface/jinja has changed (StringValue.builtins is not a getter); update src/agents/hf/jinja-python.ts');
  // Jinja2's `is iterable`: also dicts, tuples and Undefined (an empty iteration), not only lists and strings.
  const tests = (Environment as unknown as { TESTS: Map<string, (v: RV) => boolean> }).TESTS;
  if (!tests?.has('iterable'))
    throw new Error('jinja-python: @huggingface/jinja has changed (Environment.TESTS has no iterable); update src/agents/hf/jinja-python.ts');
  tests.set('iterable', (v) => ['ArrayValue', 'TupleValue', 'StringValue', 'ObjectValue', 'KeywordArgumentsValue', 'UndefinedValue'].includes(v.type));
  const done = new WeakSet<object>();
  Object.defineProperty(proto, 'builtins', {
    configurable: true,
    get(this: RV) {
      const map = get.call(this) as Map<string, RV>;
      if (!done.has(map)) {
        done.add(map);
        pythonStringMethods(this, map);
      }
      return map;
    },
  });
}

type Node = { type: string; value?: unknown; operator?: { value: string }; left?: Node; right?: Node; callee?: Node; args?: Node[]; defaultBlock?: Node[] };

/** The library's Interpreter as this file uses it (its evaluation methods are private in its typings). */
interface Internals {
  evaluate(node: Node, env: Environment): RV;
  evaluateBlock(statements: Node[], env: Environment): RV;
  evaluateBinaryExpression(node: Node, env: Environment): RV;
  evaluateMemberExpression(node: Node, env: Environment): RV;
  evaluateFor(node: Node, env: Environment): RV;
  evaluateArguments(args: Node[] | undefined, env: Environment): [RV[], Map<string, RV>];
  applyFilter(operand: RV, filter: Node, env: Environment): RV;
  run(program: unknown): RV;
}
const Base = Interpreter as unknown as new (env?: Environment) => Internals;

/**
 * An Interpreter with Python's semantics where chat templates meet them (see the file header).
 * Use it as the library's: `new PythonInterpreter(env).run(template.parsed)`.
 */
export class PythonInterpreter extends Base {
  constructor(env?: Environment) {
    installStringMethods();
    super(env);
  }

  override evaluateBlock(statements: Node[], environment: Environment): RV {
    let result = '';
    for (const statement of statements) {
      const v = this.evaluate(statement, environment);
      // The library leaves out None; Jinja2 writes it ('None'), and '' for an undefined.
      if (v.type === 'UndefinedValue') continue;
      if (v.type === 'NullValue') {
        if (!isStatement(statement)) result += 'None';
        continue;
      }
      result += pyStr(v);
    }
    return new StringValue(result);
  }

  override evaluateBinaryExpression(node: Node, environment: Environment): RV {
    const op = node.operator!.value;
    if (op === '~') {
      const l = this.evaluate(node.left!, environment);
      const r = this.evaluate(node.right!, environment);
      return new StringValue(pyStr(l) + pyStr(r));
    }
    if (op === '==' || op === '!=') {
      const eq = pyEquals(this.evaluate(node.left!, environment), this.evaluate(node.right!, environment));
      return new BooleanValue(op === '==' ? eq : !eq);
    }
    return super.evaluateBinaryExpression(node, environment);
  }

  /** Jinja2's subscript: a key the container cannot take (a list as a dict key...) is undefined, not an error. */
  override evaluateMemberExpression(expr: Node, environment: Environment): RV {
    try {
      return super.evaluateMemberExpression(expr, environment);
    } catch (err) {
      if (/^Cannot access property with non-string/.test((err as Error).message)) return new UndefinedValue();
      throw err;
    }
  }

  /** Jinja2 iterates an undefined value as an empty sequence (the loop's else block runs). */
  override evaluateFor(node: Node, environment: Environment): RV {
    try {
      return super.evaluateFor(node, environment);
    } catch (err) {
      // The library refuses the iterable before iterating (an inner loop's refusal is caught by that loop).
      if (!/^Expected iterable or object type in for loop: got UndefinedValue$/.test((err as Error).message)) throw err;
      return node.defaultBlock?.length ? this.evaluateBlock(node.defaultBlock, new Environment(environment)) : new StringValue('');
    }
  }

  override applyFilter(operand: RV, filterNode: Node, environment: Environment): RV {
    const f = filterNode;
    const name =
      f.type === 'Identifier' ? (f.value as string) : f.type === 'CallExpression' && f.callee?.type === 'Identifier' ? (f.callee.value as string) : undefined;
    const v = operand;
    const args = (): [RV[], Map<string, RV>] => (f.type === 'CallExpression' ? this.evaluateArguments(f.args, environment) : [[], new Map<string, RV>()]);
    if (name === 'tojson') {
      const kwargs = args()[1];
      const indent = kwargs.get('indent');
      const sep = kwargs.get('separators');
      return new StringValue(
        pyJson(v, {
          indent: indent && indent.type !== 'NullValue' ? (indent.value as number | string) : null,
          ensureAscii: kwargs.get('ensure_ascii')?.value === true,
          sortKeys: kwargs.get('sort_keys')?.value === true,
          separators:
            sep && (sep.type === 'ArrayValue' || sep.type === 'TupleValue')
              ? [(sep.value as RV[])[0]!.value as string, (sep.value as RV[])[1]!.value as string]
              : null,
        }),
      );
    }
    if (name === 'string') return new StringValue(pyStr(v));
    // Jinja2's Undefined is '' to string filters.
    if (name === 'trim' && v.type === 'UndefinedValue') return new StringValue('');
    if (name === 'trim' && v.type === 'StringValue') {
      const [pos, kw] = args();
      const c = pos[0] ?? kw.get('chars');
      return new StringValue(pyStrip(v.value as string, c && c.type === 'StringValue' ? (c.value as string) : null));
    }
    if (name === 'join' && (v.type === 'ArrayValue' || v.type === 'TupleValue')) {
      const [pos, kw] = args();
      const sep = pos[0] ?? kw.get('d') ?? kw.get('separator');
      const attribute = kw.get('attribute') ?? pos[1];
      const items = (v.value as RV[]).map((x) =>
        attribute && x.type === 'ObjectValue' ? ((x.value as Map<string, RV>).get(String(attribute.value)) ?? x) : x,
      );
      return new StringValue(items.map(pyStr).join(sep ? pyStr(sep) : ''));
    }
    return super.applyFilter(operand, filterNode, environment);
  }
}

/** Statements (set, if, for, macro...) evaluate to nothing; a None they yield is not written. */
function isStatement(n: Node): boolean {
  return ['Set', 'If', 'For', 'Macro', 'CallStatement', 'FilterStatement', 'Break', 'Continue', 'Comment'].includes(n.type);
}
