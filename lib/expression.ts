/**
 * Arithmetic expressions, read by a hand-written recursive-descent parser (no `eval`) and
 * evaluated exactly with `Rational`s: what the `calculator` server evaluates, and what the task
 * suites use to compute their answers. Problems are reported as `MathError`s naming the position.
 *
 * Grammar (loosest binding first):
 *   sum     := product (('+' | '-') product)*
 *   product := unary (('*' | '×' | '/' | '÷' | '%') unary)*
 *   unary   := ('+' | '-') unary | power
 *   power   := primary (('^' | '**') unary)?          right-associative: 2^3^2 = 2^9, -2^2 = -4
 *   primary := number | '(' sum ')' | name '(' sum (',' sum)* ')'
 *   number  := digits ['.' digits] | '.' digits, optionally followed by e[+-]digits
 */
import { bitLength, gcd, MathError, Rational } from './rational.ts';

/** Longest expression, in characters. */
export const MAX_EXPRESSION_LENGTH = 10_000;
/** Most levels of parentheses, function calls, signs and exponents inside one another. */
export const MAX_DEPTH = 200;
/** Largest exponent magnitude for `^` and for `e` in number literals. */
export const MAX_EXPONENT = 10_000;
/** Most decimal digits of a numerator or denominator, for every intermediate result. */
export const MAX_DIGITS = 10_000;
/** Evaluation gives up after this long (a guard against pathological fractions). */
const TIME_LIMIT_MS = 1_000; // in-process, evaluation shares the event loop of a whole run: bounded to 1 s

const DIGIT_LIMIT = 10n ** BigInt(MAX_DIGITS);
/** 2^LIMIT_BITS > 10^MAX_DIGITS, so a number of at least this many bits is certainly too large. */
const LIMIT_BITS = Math.ceil(MAX_DIGITS * Math.log2(10));

/** A long number shortened for an error message. */
function brief(x: Rational | bigint): string {
  const s = x.toString();
  return s.length <= 40 ? s : `${s.slice(0, 20)}… (${s.length} characters)`;
}

function tooLarge(x: Rational): boolean {
  return (x.num < 0n ? -x.num : x.num) >= DIGIT_LIMIT || x.den >= DIGIT_LIMIT;
}

const SIZE_DETAIL = `numerators and denominators are limited to ${MAX_DIGITS} digits`;

/** `x`, unless its numerator or denominator has more than MAX_DIGITS digits (then a MathError "Result too large"). */
export function checkedSize(x: Rational): Rational {
  if (tooLarge(x)) throw new MathError(`Result too large: ${SIZE_DETAIL}`);
  return x;
}

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

function errorAt(src: string, pos: number, headline: string, detail?: string): MathError {
  return new MathError(`${headline} at position ${pos} in ${quote(src, pos)}${detail ? `: ${detail}` : ''}`);
}

const SINGLE_OPS: Record<string, Op> = {
  '+': '+',
  '-': '-',
  '\u2212': '-',
  '*': '*',
  '\u00d7': '*',
  '/': '/',
  '\u00f7': '/',
  '%': '%',
  '^': '^',
  '(': '(',
  ')': ')',
  ',': ',',
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
      throw new MathError(`Unexpected character '${ch}' at position ${i} in ${quote(src, i)}`);
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
    return (
      x.sqrt() ?? fail('Square root is not exact', `sqrt(${brief(x)}) is irrational; only roots of perfect squares (like sqrt(16) or sqrt(9/4)) are supported`)
    );
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
    if (this.peek().kind === 'end') throw new MathError('Empty expression: write an arithmetic expression such as 2 + 3 * 4');
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

  private error(pos: number, headline: string, detail?: string): MathError {
    return errorAt(this.src, pos, headline, detail);
  }

  private unexpected(t: Token, expected: string): MathError {
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

/** Parses an expression into its syntax tree; throws a MathError naming the position of a problem. */
export function parseExpression(src: string): ExprNode {
  if (src.length > MAX_EXPRESSION_LENGTH) {
    throw new MathError(`Expression too long: ${src.length} characters, at most ${MAX_EXPRESSION_LENGTH} are allowed`);
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
        return this.checked(
          node.pos,
          FUNCTIONS[node.name].apply(args, (headline, detail) => this.fail(node.pos, headline, detail)),
        );
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
        if (r !== 0n && r < 0n !== b.num < 0n) r += b.num; // the sign of the divisor, as in floored division
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

/** Parses and evaluates an expression exactly; throws a MathError naming the position of a problem. */
export function evaluateExpression(src: string): Rational {
  return new Evaluator(src).value(parseExpression(src));
}

/** Reads one number given as text: an integer ("123"), a decimal ("-4.5", ".5", "1e-3") or a fraction ("3/7"). */
export function parseNumber(text: string, label = 'number'): Rational {
  const fail = (detail: string): never => {
    throw new MathError(`${label} is not a number: ${JSON.stringify(text.length > 60 ? text.slice(0, 60) + '…' : text)}; ${detail}`);
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
  if (d.isZero) throw new MathError(`Division by zero: ${label} is ${JSON.stringify(text)}`);
  return n.div(d);
}
