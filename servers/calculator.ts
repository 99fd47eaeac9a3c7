/**
 * `calculator`: exact arithmetic on integers and fractions of any size (BigInt rationals, never
 * floating point). Expressions are read by a hand-written recursive-descent parser (no `eval`).
 * Stateless: every call is independent.
 *
 * Grammar (loosest binding first):
 *   sum     := product (('+' | '-') product)*
 *   product := unary (('*' | '×' | '/' | '÷' | '%') unary)*
 *   unary   := ('+' | '-') unary | power
 *   power   := primary (('^' | '**') unary)?          right-associative: 2^3^2 = 2^9, -2^2 = -4
 *   primary := number | '(' sum ')' | name '(' sum (',' sum)* ')'
 *   number  := digits ['.' digits] | '.' digits, optionally followed by e[+-]digits
 */
import { z } from 'zod';
import { defineServer, defineTool, ToolError, type Backend } from './common.ts';

export const MAX_EXPRESSION_LENGTH = 10_000;
/** Most levels of parentheses, function calls, signs and exponents inside one another. */
export const MAX_DEPTH = 200;
/** Largest exponent magnitude for `^` and for `e` in number literals. */
export const MAX_EXPONENT = 10_000;
/** Most decimal digits of a numerator or denominator, for every intermediate result. */
export const MAX_DIGITS = 10_000;
/** Significant digits of the `decimal` field. */
export const DECIMAL_DIGITS = 20;
/** Evaluation gives up after this long (a guard against pathological fractions). */
const TIME_LIMIT_MS = 5_000;

const DIGIT_LIMIT = 10n ** BigInt(MAX_DIGITS);
/** 2^LIMIT_BITS > 10^MAX_DIGITS, so a number of at least this many bits is certainly too large. */
const LIMIT_BITS = Math.ceil(MAX_DIGITS * Math.log2(10));

// ---------------------------------------------------------------------------------------------
// Rationals

/** Exact number of bits of a non-negative bigint (0 for 0). */
function bitLength(x: bigint): number {
  if (x === 0n) return 0;
  const hex = x.toString(16);
  return (hex.length - 1) * 4 + (32 - Math.clz32(parseInt(hex.charAt(0), 16)));
}

const LEHMER_MIN = 1n << 64n;

/**
 * Greatest common divisor (non-negative). Large operands go through Lehmer's algorithm (Knuth,
 * TAOCP 4.5.2, Algorithm L): runs of Euclid steps are simulated on the leading 50 bits in exact
 * double arithmetic, then applied to the full numbers at once, about ten times faster than plain
 * Euclid on numbers of thousands of digits.
 */
function gcd(a: bigint, b: bigint): bigint {
  if (a < 0n) a = -a;
  if (b < 0n) b = -b;
  if (a < b) [a, b] = [b, a];
  while (b >= LEHMER_MIN) {
    const shift = BigInt(bitLength(a) - 50);
    let x = Number(a >> shift);
    let y = Number(b >> shift);
    let [A, B, C, D] = [1, 0, 0, 1];
    while (y + C !== 0 && y + D !== 0) {
      const q = Math.floor((x + A) / (y + C));
      if (q !== Math.floor((x + B) / (y + D))) break;
      [A, C] = [C, A - q * C];
      [B, D] = [D, B - q * D];
      [x, y] = [y, x - q * y];
    }
    if (B === 0) [a, b] = [b, a % b];
    else [a, b] = [BigInt(A) * a + BigInt(B) * b, BigInt(C) * a + BigInt(D) * b];
  }
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/** Largest r with r*r <= n (n >= 0). */
function isqrt(n: bigint): bigint {
  if (n < 2n) return n;
  let x = 1n << BigInt(Math.ceil(bitLength(n) / 2));
  for (;;) {
    const y = (x + n / x) >> 1n;
    if (y >= x) return x;
    x = y;
  }
}

/** An exact rational number: always reduced, denominator > 0. */
export class Rational {
  /** Trusts its caller to pass a reduced fraction with den > 0; use `Rational.of` otherwise. */
  private constructor(
    readonly num: bigint,
    readonly den: bigint,
  ) {}

  static readonly ZERO = new Rational(0n, 1n);
  static readonly ONE = new Rational(1n, 1n);

  static of(num: bigint, den: bigint = 1n): Rational {
    if (den === 0n) throw new ToolError('Division by zero');
    if (den < 0n) {
      num = -num;
      den = -den;
    }
    const g = gcd(num, den);
    return g === 1n ? new Rational(num, den) : new Rational(num / g, den / g);
  }

  static int(n: bigint): Rational {
    return new Rational(n, 1n);
  }

  get isInteger(): boolean {
    return this.den === 1n;
  }

  get isZero(): boolean {
    return this.num === 0n;
  }

  neg(): Rational {
    return new Rational(-this.num, this.den);
  }

  abs(): Rational {
    return this.num < 0n ? this.neg() : this;
  }

  // Sums and products follow Knuth (TAOCP 4.5.1): the gcds involve the smaller operands.
  add(o: Rational): Rational {
    if (this.den === 1n && o.den === 1n) return Rational.int(this.num + o.num);
    const g = gcd(this.den, o.den);
    if (g === 1n) return new Rational(this.num * o.den + o.num * this.den, this.den * o.den);
    const t = this.num * (o.den / g) + o.num * (this.den / g);
    if (t === 0n) return Rational.ZERO;
    const g2 = gcd(t, g);
    return new Rational(t / g2, (this.den / g) * (o.den / g2));
  }

  sub(o: Rational): Rational {
    return this.add(o.neg());
  }

  mul(o: Rational): Rational {
    if (this.num === 0n || o.num === 0n) return Rational.ZERO;
    const g1 = gcd(this.num, o.den);
    const g2 = gcd(o.num, this.den);
    return new Rational((this.num / g1) * (o.num / g2), (this.den / g2) * (o.den / g1));
  }

  inverse(): Rational {
    if (this.num === 0n) throw new ToolError('Division by zero');
    return this.num < 0n ? new Rational(-this.den, -this.num) : new Rational(this.den, this.num);
  }

  div(o: Rational): Rational {
    return this.mul(o.inverse());
  }

  /** Integer powers; a negative exponent of zero throws. */
  pow(e: bigint): Rational {
    if (e < 0n) return this.inverse().pow(-e);
    return new Rational(this.num ** e, this.den ** e); // powers of coprime numbers stay coprime
  }

  compare(o: Rational): number {
    const d = this.num * o.den - o.num * this.den;
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  }

  floor(): Rational {
    const q = this.num / this.den; // truncates toward zero
    return Rational.int(this.num < 0n && q * this.den !== this.num ? q - 1n : q);
  }

  ceil(): Rational {
    return this.neg().floor().neg();
  }

  /** Nearest integer, halves away from zero. */
  round(): Rational {
    const a = this.num < 0n ? -this.num : this.num;
    const r = (2n * a + this.den) / (2n * this.den);
    return Rational.int(this.num < 0n ? -r : r);
  }

  /** The exact square root, or null when it is not rational (or the number is negative). */
  sqrt(): Rational | null {
    if (this.num < 0n) return null;
    const n = isqrt(this.num);
    const d = isqrt(this.den);
    return n * n === this.num && d * d === this.den ? new Rational(n, d) : null;
  }

  /** "n" or "p/q". */
  toString(): string {
    return this.den === 1n ? this.num.toString() : `${this.num}/${this.den}`;
  }
}

/**
 * At most `digits` significant digits: exact when the decimal expansion terminates within them,
 * otherwise rounded (halves away from zero). Plain notation for magnitudes from 1e-7 up to 1e21,
 * scientific notation (like `1.6069380442589902755e+60`) outside, as JavaScript prints numbers.
 */
export function toDecimal(x: Rational, digits: number = DECIMAL_DIGITS): string {
  if (x.num === 0n) return '0';
  const negative = x.num < 0n;
  const p = negative ? -x.num : x.num;
  const q = x.den;
  // p/q * 10^shift lies in (10^(digits-1), 10^(digits+1)), so the quotient has digits or digits+1 digits.
  const shift = digits - (p.toString().length - q.toString().length);
  const num = shift >= 0 ? p * 10n ** BigInt(shift) : p;
  const den = shift >= 0 ? q : q * 10n ** BigInt(-shift);
  const limit = 10n ** BigInt(digits);
  let m = num / den;
  const rem = num % den;
  let exp = -shift; // the value is about m * 10^exp
  let roundUp = 2n * rem >= den;
  if (m >= limit) {
    const last = m % 10n;
    m /= 10n;
    exp += 1;
    roundUp = last >= 5n;
  }
  if (roundUp) {
    m += 1n;
    if (m === limit) {
      m /= 10n;
      exp += 1;
    }
  }
  let s = m.toString();
  const stripped = s.replace(/0+$/, '');
  exp += s.length - stripped.length;
  s = stripped;
  const lead = s.length - 1 + exp; // decimal exponent of the first digit
  let body: string;
  if (lead >= 21 || lead < -7) body = `${s.charAt(0)}${s.length > 1 ? '.' + s.slice(1) : ''}e${lead >= 0 ? '+' : '-'}${Math.abs(lead)}`;
  else if (exp >= 0) body = s + '0'.repeat(exp);
  else if (s.length + exp > 0) body = `${s.slice(0, s.length + exp)}.${s.slice(s.length + exp)}`;
  else body = `0.${'0'.repeat(-(s.length + exp))}${s}`;
  return negative ? `-${body}` : body;
}

/** A long number shortened for an error message. */
function brief(x: Rational | bigint): string {
  const s = x.toString();
  return s.length <= 40 ? s : `${s.slice(0, 20)}… (${s.length} characters)`;
}

function tooLarge(x: Rational): boolean {
  return (x.num < 0n ? -x.num : x.num) >= DIGIT_LIMIT || x.den >= DIGIT_LIMIT;
}

const SIZE_DETAIL = `numerators and denominators are limited to ${MAX_DIGITS} digits`;

// ---------------------------------------------------------------------------------------------
// Number literals

const NUMBER_RE = /^(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?$/;

/** The exact value of a number literal such as `12`, `1.25`, `.5` or `2e-3`; `fail` reports a problem. */
function literalValue(text: string, fail: (headline: string, detail: string) => never): Rational {
  const m = NUMBER_RE.exec(text);
  if (!m) return fail('Invalid number', `'${text}' is not a number`);
  const whole = m[1] ?? '';
  const fraction = m[2] ?? m[3] ?? '';
  let exponent = m[4] === undefined ? 0n : BigInt(m[4]);
  if (exponent > BigInt(MAX_EXPONENT) || exponent < -BigInt(MAX_EXPONENT)) {
    return fail('Exponent too large', `the exponent of '${brief(BigInt(m[4] ?? '0'))}' exceeds the limit of ${MAX_EXPONENT} in magnitude`);
  }
  exponent -= BigInt(fraction.length);
  const digits = BigInt(whole + fraction);
  const value = exponent >= 0n ? Rational.int(digits * 10n ** exponent) : Rational.of(digits, 10n ** -exponent);
  if (tooLarge(value)) return fail('Number too large', SIZE_DETAIL);
  return value;
}

// ---------------------------------------------------------------------------------------------
// Tokens and syntax tree

type Op = '+' | '-' | '*' | '/' | '%' | '^' | '(' | ')' | ',';

type Token =
  | { kind: 'number'; pos: number; text: string; value: Rational }
  | { kind: 'name'; pos: number; text: string }
  | { kind: 'op'; pos: number; text: string; op: Op }
  | { kind: 'end'; pos: number; text: string };

export type BinaryOp = '+' | '-' | '*' | '/' | '%' | '^';

/** The syntax tree of an expression; `pos` is the 0-based offset of the token that made the node. */
export type ExprNode =
  | { type: 'number'; pos: number; value: Rational }
  | { type: 'unary'; pos: number; op: '+' | '-'; operand: ExprNode }
  | { type: 'binary'; pos: number; op: BinaryOp; left: ExprNode; right: ExprNode }
  | { type: 'call'; pos: number; name: FunctionName; args: ExprNode[] };

/** ` in "<expression>"`, shortened to a window around `pos` when the expression is long. */
function quote(src: string, pos: number): string {
  if (src.length <= 120) return JSON.stringify(src);
  const start = Math.max(0, pos - 50);
  const end = Math.min(src.length, pos + 50);
  return JSON.stringify(`${start > 0 ? '…' : ''}${src.slice(start, end)}${end < src.length ? '…' : ''}`);
}

function errorAt(src: string, pos: number, headline: string, detail?: string): ToolError {
  return new ToolError(`${headline} at position ${pos} in ${quote(src, pos)}${detail ? `: ${detail}` : ''}`);
}

const SINGLE_OPS: Record<string, Op> = {
  '+': '+', '-': '-', '\u2212': '-', '*': '*', '\u00d7': '*', '/': '/', '\u00f7': '/', '%': '%', '^': '^', '(': '(', ')': ')', ',': ',',
};

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src.charAt(i);
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (/[\d.]/.test(c)) {
      const m = /^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/.exec(src.slice(i, i + MAX_EXPRESSION_LENGTH + 1));
      if (!m) throw errorAt(src, i, `Unexpected character '.'`, 'a decimal point needs digits after it, as in .5');
      const pos = i;
      const value = literalValue(m[0], (headline, detail) => {
        throw errorAt(src, pos, headline, detail);
      });
      tokens.push({ kind: 'number', pos, text: m[0], value });
      i += m[0].length;
      continue;
    }
    if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i, i + 100)) ?? [c];
      tokens.push({ kind: 'name', pos: i, text: m[0] });
      i += m[0].length;
      continue;
    }
    if (c === '*' && src.charAt(i + 1) === '*') {
      tokens.push({ kind: 'op', pos: i, text: '**', op: '^' });
      i += 2;
      continue;
    }
    const op = SINGLE_OPS[c];
    if (op === undefined) {
      const ch = String.fromCodePoint(src.codePointAt(i) ?? 0);
      throw new ToolError(`Unexpected character '${ch}' at position ${i} in ${quote(src, i)}`);
    }
    tokens.push({ kind: 'op', pos: i, text: c, op });
    i++;
  }
  tokens.push({ kind: 'end', pos: src.length, text: '' });
  return tokens;
}

function describeToken(t: Token): string {
  switch (t.kind) {
    case 'number':
      return `number '${t.text.length > 30 ? t.text.slice(0, 30) + '…' : t.text}'`;
    case 'name':
      return `name '${t.text}'`;
    case 'op':
      return `'${t.text}'`;
    case 'end':
      return 'end of expression';
  }
}

// ---------------------------------------------------------------------------------------------
// Functions

type Fail = (headline: string, detail?: string) => never;

interface FunctionSpec {
  minArgs: number;
  maxArgs: number;
  apply(args: Rational[], fail: Fail): Rational;
}

function integersOf(name: string, args: Rational[], fail: Fail): bigint[] {
  return args.map((x) => (x.isInteger ? x.num : fail(`${name} needs integers`, `got ${brief(x)}`)));
}

const one = (f: (x: Rational, fail: Fail) => Rational): FunctionSpec => ({ minArgs: 1, maxArgs: 1, apply: ([x], fail) => f(x ?? Rational.ZERO, fail) });
const many = (f: (args: Rational[], fail: Fail) => Rational): FunctionSpec => ({ minArgs: 1, maxArgs: Infinity, apply: f });

const FUNCTIONS = {
  abs: one((x) => x.abs()),
  ceil: one((x) => x.ceil()),
  floor: one((x) => x.floor()),
  round: one((x) => x.round()),
  sqrt: one((x, fail) => {
    if (x.num < 0n) return fail('Square root of a negative number', `sqrt(${brief(x)}) is not a real number`);
    return x.sqrt() ?? fail('Square root is not exact', `sqrt(${brief(x)}) is irrational; only roots of perfect squares (like sqrt(16) or sqrt(9/4)) are supported`);
  }),
  gcd: many((args, fail) => Rational.int(integersOf('gcd', args, fail).reduce((a, b) => gcd(a, b), 0n))),
  lcm: many((args, fail) =>
    Rational.int(
      integersOf('lcm', args, fail).reduce((a, b) => {
        if (a === 0n || b === 0n) return 0n;
        const l = (a / gcd(a, b)) * b;
        return l < 0n ? -l : l;
      }, 1n),
    ),
  ),
  max: many((args) => args.reduce((a, b) => (b.compare(a) > 0 ? b : a))),
  min: many((args) => args.reduce((a, b) => (b.compare(a) < 0 ? b : a))),
} satisfies Record<string, FunctionSpec>;

export type FunctionName = keyof typeof FUNCTIONS;
const FUNCTION_NAMES = Object.keys(FUNCTIONS).sort().join(', ');

function isFunctionName(name: string): name is FunctionName {
  return Object.hasOwn(FUNCTIONS, name);
}

// ---------------------------------------------------------------------------------------------
// Parser

class Parser {
  private readonly tokens: Token[];
  private i = 0;
  private depth = 0;
  /** Parentheses opened and not yet closed (groups and argument lists). */
  private open = 0;

  constructor(private readonly src: string) {
    this.tokens = tokenize(src);
  }

  parse(): ExprNode {
    if (this.peek().kind === 'end') throw new ToolError('Empty expression: write an arithmetic expression such as 2 + 3 * 4');
    const node = this.sum();
    const t = this.peek();
    if (t.kind === 'op' && t.op === ')') throw this.error(t.pos, 'Mismatched parenthesis', `')' has no matching '('`);
    if (t.kind === 'op' && t.op === ',') throw this.error(t.pos, "Unexpected ','", 'commas only separate the arguments of a function, as in max(1, 2)');
    if (t.kind !== 'end') throw this.unexpected(t, 'an operator');
    return node;
  }

  private peek(): Token {
    return this.tokens[this.i] ?? { kind: 'end', pos: this.src.length, text: '' };
  }

  private next(): Token {
    const t = this.peek();
    if (t.kind !== 'end') this.i++;
    return t;
  }

  private isOp(t: Token, ...ops: Op[]): boolean {
    return t.kind === 'op' && ops.includes(t.op);
  }

  private error(pos: number, headline: string, detail?: string): ToolError {
    return errorAt(this.src, pos, headline, detail);
  }

  private unexpected(t: Token, expected: string): ToolError {
    if (t.kind === 'end') return this.error(t.pos, 'Unexpected end of expression', `expected ${expected}`);
    const multiply = expected.startsWith('an operator') && (t.kind !== 'op' || t.op === '(') ? " (write '*' to multiply)" : '';
    return this.error(t.pos, `Unexpected ${describeToken(t)}`, `expected ${expected}${multiply}`);
  }

  /** Runs `inner` one level deeper, refusing expressions nested beyond MAX_DEPTH. */
  private nested<T>(pos: number, inner: () => T): T {
    if (++this.depth > MAX_DEPTH) {
      throw this.error(pos, 'Expression nested too deeply', `at most ${MAX_DEPTH} levels of parentheses, function calls, signs and exponents`);
    }
    try {
      return inner();
    } finally {
      this.depth--;
    }
  }

  private sum(): ExprNode {
    let left = this.product();
    for (let t = this.peek(); t.kind === 'op' && (t.op === '+' || t.op === '-'); t = this.peek()) {
      this.i++;
      left = { type: 'binary', pos: t.pos, op: t.op, left, right: this.product() };
    }
    return left;
  }

  private product(): ExprNode {
    let left = this.unary();
    for (let t = this.peek(); t.kind === 'op' && (t.op === '*' || t.op === '/' || t.op === '%'); t = this.peek()) {
      this.i++;
      left = { type: 'binary', pos: t.pos, op: t.op, left, right: this.unary() };
    }
    return left;
  }

  private unary(): ExprNode {
    const t = this.peek();
    if (t.kind === 'op' && (t.op === '+' || t.op === '-')) {
      this.i++;
      const op = t.op;
      return { type: 'unary', pos: t.pos, op, operand: this.nested(t.pos, () => this.unary()) };
    }
    return this.power();
  }

  private power(): ExprNode {
    const base = this.primary();
    const t = this.peek();
    if (!this.isOp(t, '^')) return base;
    this.i++;
    return { type: 'binary', pos: t.pos, op: '^', left: base, right: this.nested(t.pos, () => this.unary()) };
  }

  private primary(): ExprNode {
    const t = this.next();
    if (t.kind === 'number') return { type: 'number', pos: t.pos, value: t.value };
    if (this.isOp(t, '(')) {
      this.open++;
      const inner = this.nested(t.pos, () => this.sum());
      this.close(t);
      return inner;
    }
    if (t.kind === 'name') return this.call(t);
    if (this.isOp(t, ')') && this.open === 0) throw this.error(t.pos, 'Mismatched parenthesis', `')' has no matching '('`);
    throw this.unexpected(t, `a number, '(', a sign or a function (${FUNCTION_NAMES})`);
  }

  private close(open: Token): void {
    const t = this.peek();
    if (this.isOp(t, ')')) {
      this.i++;
      this.open--;
      return;
    }
    if (t.kind === 'end') throw this.error(open.pos, 'Mismatched parenthesis', `'(' is never closed`);
    throw this.unexpected(t, open.kind === 'name' ? "',' or ')'" : "an operator or ')'");
  }

  private call(t: Token): ExprNode {
    const name = t.text.toLowerCase();
    const open = this.peek();
    if (!isFunctionName(name)) {
      if (this.isOp(open, '(')) throw this.error(t.pos, `Unknown function '${t.text}'`, `available functions are ${FUNCTION_NAMES}`);
      throw this.error(t.pos, `Unknown name '${t.text}'`, `only numbers and the functions ${FUNCTION_NAMES} are allowed (no variables or constants)`);
    }
    if (!this.isOp(open, '(')) throw this.error(t.pos, `Function '${name}' needs its arguments in parentheses`, `write ${name}(...)`);
    this.i++;
    this.open++;
    const args: ExprNode[] = [];
    if (!this.isOp(this.peek(), ')')) {
      for (;;) {
        args.push(this.nested(open.pos, () => this.sum()));
        if (!this.isOp(this.peek(), ',')) break;
        this.i++;
      }
    }
    this.close({ ...t, pos: open.pos });
    const spec: FunctionSpec = FUNCTIONS[name];
    if (args.length < spec.minArgs || args.length > spec.maxArgs) {
      const wanted = spec.maxArgs === spec.minArgs ? `exactly ${spec.minArgs}` : `at least ${spec.minArgs}`;
      throw this.error(t.pos, `Wrong number of arguments for ${name}`, `it takes ${wanted} argument${spec.minArgs === 1 ? '' : 's'}, got ${args.length}`);
    }
    return { type: 'call', pos: t.pos, name, args };
  }
}

/** Parses an expression into its syntax tree; throws a ToolError naming the position of a problem. */
export function parseExpression(src: string): ExprNode {
  if (src.length > MAX_EXPRESSION_LENGTH) {
    throw new ToolError(`Expression too long: ${src.length} characters, at most ${MAX_EXPRESSION_LENGTH} are allowed`);
  }
  return new Parser(src).parse();
}

// ---------------------------------------------------------------------------------------------
// Evaluation

class Evaluator {
  private readonly deadline = Date.now() + TIME_LIMIT_MS;

  constructor(private readonly src: string) {}

  private fail(pos: number, headline: string, detail?: string): never {
    throw errorAt(this.src, pos, headline, detail);
  }

  /** Left-nested chains (1+2+3+...) are folded in a loop, so that long sums need no deep recursion. */
  value(node: ExprNode): Rational {
    switch (node.type) {
      case 'number':
        return node.value;
      case 'unary': {
        const x = this.value(node.operand);
        return node.op === '-' ? x.neg() : x;
      }
      case 'call': {
        const args = node.args.map((a) => this.value(a));
        return this.checked(node.pos, FUNCTIONS[node.name].apply(args, (headline, detail) => this.fail(node.pos, headline, detail)));
      }
      case 'binary': {
        const chain: Extract<ExprNode, { type: 'binary' }>[] = [];
        let first: ExprNode = node;
        while (first.type === 'binary' && first.op !== '^') {
          chain.push(first);
          first = first.left;
        }
        if (first.type === 'binary') {
          chain.push(first); // a power: its base is a primary, so the chain ends here
          first = first.left;
        }
        let acc = this.value(first);
        for (let k = chain.length - 1; k >= 0; k--) {
          const step = chain[k];
          if (step) acc = this.checked(step.pos, this.apply(step.op, acc, this.value(step.right), step.pos));
        }
        return acc;
      }
    }
  }

  private checked(pos: number, x: Rational): Rational {
    if (tooLarge(x)) this.fail(pos, 'Result too large', SIZE_DETAIL);
    if (Date.now() > this.deadline) this.fail(pos, 'Computation took too long', `gave up after ${TIME_LIMIT_MS / 1000} s; simplify the expression`);
    return x;
  }

  private apply(op: BinaryOp, a: Rational, b: Rational, pos: number): Rational {
    switch (op) {
      case '+':
        return a.add(b);
      case '-':
        return a.sub(b);
      case '*':
        return a.mul(b);
      case '/':
        if (b.isZero) this.fail(pos, 'Division by zero');
        return a.div(b);
      case '%': {
        if (!a.isInteger || !b.isInteger) this.fail(pos, "Modulo '%' needs integers", `got ${brief(a)} % ${brief(b)}`);
        if (b.isZero) this.fail(pos, 'Division by zero', 'modulo by 0');
        let r = a.num % b.num;
        if (r !== 0n && (r < 0n) !== (b.num < 0n)) r += b.num; // the sign of the divisor, as in floored division
        return Rational.int(r);
      }
      case '^':
        return this.power(a, b, pos);
    }
  }

  private power(base: Rational, exponent: Rational, pos: number): Rational {
    if (!exponent.isInteger) this.fail(pos, 'Exponent must be an integer', `got ${brief(exponent)}; for square roots use sqrt()`);
    const e = exponent.num;
    if (base.isZero) {
      if (e < 0n) this.fail(pos, 'Division by zero', '0 raised to a negative power');
      return e === 0n ? Rational.ONE : Rational.ZERO;
    }
    if (base.isInteger && (base.num === 1n || base.num === -1n)) return base.num === 1n || e % 2n === 0n ? Rational.ONE : base;
    const magnitude = e < 0n ? -e : e;
    if (magnitude > BigInt(MAX_EXPONENT)) this.fail(pos, 'Exponent too large', `${brief(e)} exceeds the limit of ${MAX_EXPONENT} in magnitude`);
    const n = base.num < 0n ? -base.num : base.num;
    const bits = Math.max(bitLength(n), bitLength(base.den)) - 1; // the result has at least bits * |e| bits
    if (bits * Number(magnitude) >= LIMIT_BITS) this.fail(pos, 'Result too large', SIZE_DETAIL);
    return base.pow(e);
  }
}

/** Parses and evaluates an expression exactly; throws a ToolError naming the position of a problem. */
export function evaluateExpression(src: string): Rational {
  return new Evaluator(src).value(parseExpression(src));
}

/** Reads one number given as text: an integer ("123"), a decimal ("-4.5", ".5", "1e-3") or a fraction ("3/7"). */
export function parseNumber(text: string, label = 'number'): Rational {
  const fail = (detail: string): never => {
    throw new ToolError(`${label} is not a number: ${JSON.stringify(text.length > 60 ? text.slice(0, 60) + '…' : text)}; ${detail}`);
  };
  const parts = text.split('/');
  if (parts.length > 2) fail('use at most one "/"');
  const values = parts.map((part) => {
    const m = /^\s*([+-]?)\s*(\S+)\s*$/.exec(part.replace(/\u2212/g, '-'));
    if (!m || !NUMBER_RE.test(m[2] ?? '')) {
      return fail('write an integer ("123"), a decimal ("-4.5") or a fraction ("3/7")');
    }
    const value = literalValue(m[2] ?? '', (headline, detail) => fail(`${headline.toLowerCase()}: ${detail}`));
    return m[1] === '-' ? value.neg() : value;
  });
  const [n = Rational.ZERO, d = Rational.ONE] = values;
  if (d.isZero) throw new ToolError(`Division by zero: ${label} is ${JSON.stringify(text)}`);
  return n.div(d);
}

// ---------------------------------------------------------------------------------------------
// Tools

const Result = z.object({
  expression: z.string().describe('The expression that was evaluated'),
  value: z.string().describe('The exact result: "n" for an integer, otherwise the reduced fraction "p/q"'),
  numerator: z.string().describe('Numerator of the reduced fraction (carries the sign)'),
  denominator: z.string().describe('Denominator of the reduced fraction (positive; "1" for integers)'),
  is_integer: z.boolean(),
  decimal: z.string().describe(`The value in decimal, exact when it terminates within ${DECIMAL_DIGITS} significant digits, otherwise rounded to ${DECIMAL_DIGITS}`),
});

type CalcResult = z.infer<typeof Result>;

function result(expression: string, x: Rational): CalcResult {
  return {
    expression,
    value: x.toString(),
    numerator: x.num.toString(),
    denominator: x.den.toString(),
    is_integer: x.isInteger,
    decimal: toDecimal(x),
  };
}

/** What an agent reads: the exact value, and its decimal when it is a fraction. */
function resultText(r: CalcResult): string {
  return r.is_integer ? r.value : `${r.value} (= ${r.decimal})`;
}

const Operand = (name: string) =>
  z
    .union([z.string().max(MAX_EXPRESSION_LENGTH, `${name} must be at most ${MAX_EXPRESSION_LENGTH} characters`), z.number()])
    .describe(`A number as a string: an integer ("123", any size), a decimal ("-4.5") or a fraction ("3/7"). A JSON number is accepted too, but strings stay exact`);

/** Text of an operand for the `expression` field, parenthesized where it would not read as one number. */
function operandText(text: string): string {
  const t = text.trim();
  return /^[+\-\u2212]|\//.test(t) ? `(${t})` : t;
}

function binaryTool(name: string, symbol: string, verb: string, op: (a: Rational, b: Rational) => Rational) {
  return defineTool({
    name,
    description: `${verb} exactly (integers and fractions of any size, no rounding). Returns the result as "n" or "p/q", and as a decimal.`,
    input: z.object({ a: Operand('a'), b: Operand('b') }),
    output: Result,
    readOnly: true,
    text: resultText,
    run: ({ a, b }) => {
      const x = parseNumber(String(a), 'a');
      const y = parseNumber(String(b), 'b');
      const expression = `${operandText(String(a))} ${symbol} ${operandText(String(b))}`;
      if (symbol === '/' && y.isZero) throw new ToolError(`Division by zero: b is ${JSON.stringify(String(b))}`);
      const value = op(x, y);
      if (tooLarge(value)) throw new ToolError(`Result too large: ${SIZE_DETAIL}`);
      return result(expression, value);
    },
  });
}

const tools = [
  defineTool({
    name: 'evaluate',
    description:
      'Evaluate an arithmetic expression exactly: integers and fractions of any size, never rounded. ' +
      'Syntax: numbers (123, 1.25, .5, 2e-3); + - * / (also × ÷); ^ or ** for integer powers (right-associative: 2^3^2 = 2^9; -2^2 = -4); ' +
      '% for the remainder of integers (with the sign of the divisor); unary minus; parentheses; and the functions ' +
      'abs, gcd, lcm, min, max, floor, ceil, round (halves away from zero) and sqrt (exact roots only, e.g. sqrt(9/4)). ' +
      `Limits: ${MAX_EXPRESSION_LENGTH} characters, exponents up to ${MAX_EXPONENT}, numbers up to ${MAX_DIGITS} digits. ` +
      `Returns the exact value ("n" or "p/q") and a decimal with up to ${DECIMAL_DIGITS} significant digits.`,
    input: z.object({
      expression: z
        .string()
        .max(MAX_EXPRESSION_LENGTH, `expression must be at most ${MAX_EXPRESSION_LENGTH} characters`)
        .describe('The expression, e.g. "1/3 + 1/6" or "2^200 - 1" or "gcd(84, 36) * sqrt(16)"'),
    }),
    output: Result,
    readOnly: true,
    run: ({ expression }) => result(expression, evaluateExpression(expression)),
    text: resultText,
  }),
  binaryTool('add', '+', 'Add two numbers (a + b)', (a, b) => a.add(b)),
  binaryTool('subtract', '-', 'Subtract b from a (a - b)', (a, b) => a.sub(b)),
  binaryTool('multiply', '*', 'Multiply two numbers (a * b)', (a, b) => a.mul(b)),
  binaryTool('divide', '/', 'Divide a by b (a / b)', (a, b) => a.div(b)),
];

type CalculatorState = Record<string, never>;
const STATELESS: CalculatorState = Object.freeze({});

export const calculatorServer = defineServer<CalculatorState>({
  name: 'calculator',
  version: '0.1.0',
  description: 'An exact calculator (integers and fractions of any size). Tools: evaluate (an arithmetic expression), add, subtract, multiply, divide.',
  isolation: 'stateless: every call is independent',
  tools: tools as never,
  examples: [
    { tool: 'evaluate', arguments: { expression: '2^100 / 4 + 1/2' } },
    { tool: 'divide', arguments: { a: '22', b: '7' } },
    { tool: 'evaluate', arguments: { expression: 'gcd(1071, 462) * (3 - 1.25)' } },
  ],
  backend(): Backend<CalculatorState> {
    return {
      episode: () => STATELESS,
      release: () => {},
      close: () => {},
    };
  },
});
