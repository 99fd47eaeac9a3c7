/**
 * `calculator`: exact arithmetic on integers and fractions of any size (BigInt rationals, never
 * floating point). The arithmetic and the expression parser live in `lib/` (lib/rational.ts,
 * lib/expression.ts, which also give the task suites their answers); this file is the MCP face:
 * the tools, their schemas and texts, and the translation of lib's `MathError` into a `ToolError`.
 * Stateless: every call is independent.
 */
import { z } from 'zod';
import {
  checkedSize,
  DECIMAL_DIGITS,
  evaluateExpression,
  MathError,
  MAX_DIGITS,
  MAX_EXPONENT,
  MAX_EXPRESSION_LENGTH,
  parseNumber,
  Rational,
  toDecimal,
} from '../lib/index.ts';
import { defineServer, defineTool, ToolError, type Backend } from './common.ts';

/** Runs lib arithmetic, turning its `MathError` (a problem with the input) into the `ToolError` an agent reads. */
function exact<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    if (err instanceof MathError) throw new ToolError(err.message);
    throw err;
  }
}

const Result = z.object({
  expression: z.string().describe('The expression that was evaluated'),
  value: z.string().describe('The exact result: "n" for an integer, otherwise the reduced fraction "p/q"'),
  numerator: z.string().describe('Numerator of the reduced fraction (carries the sign)'),
  denominator: z.string().describe('Denominator of the reduced fraction (positive; "1" for integers)'),
  is_integer: z.boolean(),
  decimal: z
    .string()
    .describe(`The value in decimal, exact when it terminates within ${DECIMAL_DIGITS} significant digits, otherwise rounded to ${DECIMAL_DIGITS}`),
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
    .describe(
      `A number as a string: an integer ("123", any size), a decimal ("-4.5") or a fraction ("3/7"). A JSON number is accepted too, but strings stay exact`,
    );

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
    run: ({ a, b }) =>
      exact(() => {
        const x = parseNumber(String(a), 'a');
        const y = parseNumber(String(b), 'b');
        const expression = `${operandText(String(a))} ${symbol} ${operandText(String(b))}`;
        if (symbol === '/' && y.isZero) throw new ToolError(`Division by zero: b is ${JSON.stringify(String(b))}`);
        return result(expression, checkedSize(op(x, y)));
      }),
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
    run: ({ expression }) => exact(() => result(expression, evaluateExpression(expression))),
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
