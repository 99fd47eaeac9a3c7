import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport } from '@modelcontextprotocol/server';
import {
  evaluateExpression,
  MathError,
  MAX_DEPTH,
  MAX_EXPRESSION_LENGTH,
  parseExpression,
  parseNumber,
  Rational,
  toDecimal,
  type ExprNode,
} from '../../lib/index.ts';
import { EPISODE_META_KEY, serverFactory } from '../../servers/common.ts';
import { calculatorServer } from '../../servers/calculator.ts';

interface CalcOut {
  expression: string;
  value: string;
  numerator: string;
  denominator: string;
  is_integer: boolean;
  decimal: string;
}
type CallResult = Awaited<ReturnType<Client['callTool']>>;

const textOf = (r: CallResult): string => {
  const first = r.content[0];
  return first?.type === 'text' ? first.text : '';
};

/** The exact value of an expression as "n" or "p/q". */
const calc = (src: string): string => evaluateExpression(src).toString();

/** The message of the MathError that `f` throws (the server turns it into a ToolError with the same message). */
function errorOf(f: () => unknown): string {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(MathError);
    return (err as Error).message;
  }
  throw new Error('expected a MathError, nothing was thrown');
}

/** A syntax tree in prefix notation, e.g. "(+ 1 (* 2 3))", to compare shapes briefly. */
function show(node: ExprNode): string {
  switch (node.type) {
    case 'number':
      return node.value.toString();
    case 'unary':
      return `(${node.op === '-' ? 'neg' : 'pos'} ${show(node.operand)})`;
    case 'binary':
      return `(${node.op} ${show(node.left)} ${show(node.right)})`;
    case 'call':
      return `(${node.name}${node.args.map((a) => ' ' + show(a)).join('')})`;
  }
}

describe('Rational', () => {
  it('is always reduced with a positive denominator', () => {
    const x = Rational.of(6n, -4n);
    expect([x.num, x.den]).toEqual([-3n, 2n]);
    expect(Rational.of(0n, -7n).toString()).toBe('0');
    expect(Rational.of(10n, 5n).isInteger).toBe(true);
    expect(() => Rational.of(1n, 0n)).toThrow('Division by zero');
  });

  it('does exact arithmetic, floor, ceil, round and sqrt', () => {
    const third = Rational.of(1n, 3n);
    const sixth = Rational.of(1n, 6n);
    expect(third.add(sixth).toString()).toBe('1/2');
    expect(third.sub(third).toString()).toBe('0');
    expect(third.mul(Rational.int(3n)).toString()).toBe('1');
    expect(third.div(sixth).toString()).toBe('2');
    expect(Rational.of(-7n, 2n).floor().toString()).toBe('-4');
    expect(Rational.of(-7n, 2n).ceil().toString()).toBe('-3');
    expect(Rational.of(-7n, 2n).round().toString()).toBe('-4');
    expect(Rational.of(7n, 2n).round().toString()).toBe('4');
    expect(Rational.of(9n, 4n).sqrt()?.toString()).toBe('3/2');
    expect(Rational.int(2n).sqrt()).toBeNull();
    expect(Rational.of(2n, 3n).pow(-2n).toString()).toBe('9/4');
  });

  it('adds large fractions exactly (the Lehmer gcd agrees with the plain one)', () => {
    const a = Rational.of(3n ** 4000n + 1n, 2n ** 5000n + 3n);
    const b = Rational.of(5n ** 3000n - 7n, 2n ** 5000n + 3n);
    const sum = a.add(b);
    const g = (x: bigint, y: bigint): bigint => (y === 0n ? x : g(y, x % y));
    const n = 3n ** 4000n + 5n ** 3000n - 6n;
    const d = 2n ** 5000n + 3n;
    const k = g(n, d);
    expect([sum.num, sum.den]).toEqual([n / k, d / k]);
    expect(sum.sub(b).toString()).toBe(a.toString());
  });
});

describe('toDecimal', () => {
  it('is exact when the expansion terminates within 20 significant digits', () => {
    expect(toDecimal(Rational.of(5n, 4n))).toBe('1.25');
    expect(toDecimal(Rational.of(-1n, 8n))).toBe('-0.125');
    expect(toDecimal(Rational.of(1n, 1000n))).toBe('0.001');
    expect(toDecimal(Rational.int(1000n))).toBe('1000');
    expect(toDecimal(Rational.int(0n))).toBe('0');
    expect(toDecimal(Rational.int(2n ** 64n))).toBe('18446744073709551616');
  });

  it('rounds to 20 significant digits otherwise, scientific outside 1e-7 to 1e21', () => {
    expect(toDecimal(Rational.of(1n, 3n))).toBe('0.33333333333333333333');
    expect(toDecimal(Rational.of(2n, 3n))).toBe('0.66666666666666666667');
    expect(toDecimal(Rational.of(-22n, 7n))).toBe('-3.1428571428571428571');
    expect(toDecimal(Rational.int(2n ** 200n))).toBe('1.6069380442589902755e+60');
    expect(toDecimal(Rational.of(1n, 10n ** 8n))).toBe('1e-8');
    expect(toDecimal(Rational.of(10n ** 21n - 1n, 10n ** 21n))).toBe('1'); // 0.999... rounds up to 1
  });
});

describe('parseExpression', () => {
  it('gives * / % precedence over + -, and both are left-associative', () => {
    expect(show(parseExpression('1 + 2 * 3'))).toBe('(+ 1 (* 2 3))');
    expect(show(parseExpression('10 - 4 - 3'))).toBe('(- (- 10 4) 3)');
    expect(show(parseExpression('8 / 4 / 2'))).toBe('(/ (/ 8 4) 2)');
    expect(show(parseExpression('7 % 4 * 2'))).toBe('(* (% 7 4) 2)');
    expect(show(parseExpression('(1 + 2) * 3'))).toBe('(* (+ 1 2) 3)');
  });

  it('makes ^ right-associative and tighter than unary minus, accepting ** and a signed exponent', () => {
    expect(show(parseExpression('2^3^2'))).toBe('(^ 2 (^ 3 2))');
    expect(show(parseExpression('-2^2'))).toBe('(neg (^ 2 2))');
    expect(show(parseExpression('2 ** -1'))).toBe('(^ 2 (neg 1))');
    expect(show(parseExpression('--+3'))).toBe('(neg (neg (pos 3)))');
  });

  it('reads decimals, exponents, functions, unicode operators and whitespace', () => {
    expect(show(parseExpression('1.25 + .5 + 2e3 + 1.5E-2'))).toBe('(+ (+ (+ 5/4 1/2) 2000) 3/200)');
    expect(show(parseExpression(' max( 1 ,gcd(4,6), ABS(-2) ) '))).toBe('(max 1 (gcd 4 6) (abs (neg 2)))');
    expect(show(parseExpression('6 × 2 ÷ 3 − 1'))).toBe('(- (/ (* 6 2) 3) 1)');
    expect(show(parseExpression('\t1\n+\r2 '))).toBe('(+ 1 2)');
  });

  it('records the position of every operator and number', () => {
    const tree = parseExpression('12 + 3 * 4');
    expect(tree).toMatchObject({
      type: 'binary',
      op: '+',
      pos: 3,
      left: { pos: 0 },
      right: { type: 'binary', op: '*', pos: 7, left: { pos: 5 }, right: { pos: 9 } },
    });
  });

  it('reports syntax errors with their position and the expression', () => {
    expect(errorOf(() => parseExpression('2 + $'))).toBe(`Unexpected character '$' at position 4 in "2 + $"`);
    expect(errorOf(() => parseExpression('2 +'))).toMatch(/^Unexpected end of expression at position 3 in "2 \+": expected a number/);
    expect(errorOf(() => parseExpression('2 * * 3'))).toMatch(/^Unexpected '\*' at position 4 in "2 \* \* 3"/);
    expect(errorOf(() => parseExpression('2 3'))).toMatch(/^Unexpected number '3' at position 2 .*expected an operator/);
    expect(errorOf(() => parseExpression('2(3)'))).toContain("write '*' to multiply");
    expect(errorOf(() => parseExpression('1,2'))).toMatch(/^Unexpected ',' at position 1/);
    expect(errorOf(() => parseExpression('1 + .'))).toMatch(/^Unexpected character '\.' at position 4/);
    expect(errorOf(() => parseExpression(''))).toMatch(/^Empty expression/);
    expect(errorOf(() => parseExpression('   '))).toMatch(/^Empty expression/);
  });

  it('reports mismatched parentheses', () => {
    expect(errorOf(() => parseExpression('(1 + 2'))).toBe(`Mismatched parenthesis at position 0 in "(1 + 2": '(' is never closed`);
    expect(errorOf(() => parseExpression('1 + 2)'))).toBe(`Mismatched parenthesis at position 5 in "1 + 2)": ')' has no matching '('`);
    expect(errorOf(() => parseExpression(')'))).toMatch(/^Mismatched parenthesis at position 0/);
    expect(errorOf(() => parseExpression('max(1, (2)'))).toMatch(/^Mismatched parenthesis at position 3 .*never closed/);
    expect(errorOf(() => parseExpression('(1 2)'))).toMatch(/^Unexpected number '2' at position 3 .*an operator or '\)'/);
  });

  it('reports unknown functions and names, missing parentheses and wrong argument counts', () => {
    expect(errorOf(() => parseExpression('1 + foo(2)'))).toMatch(
      /^Unknown function 'foo' at position 4 in "1 \+ foo\(2\)": available functions are abs, ceil, floor, gcd, lcm, max, min, round, sqrt$/,
    );
    expect(errorOf(() => parseExpression('2 * pi'))).toMatch(/^Unknown name 'pi' at position 4 .*no variables or constants/);
    expect(errorOf(() => parseExpression('sqrt 4'))).toMatch(/^Function 'sqrt' needs its arguments in parentheses at position 0/);
    expect(errorOf(() => parseExpression('abs(1, 2)'))).toMatch(/^Wrong number of arguments for abs at position 0 .*exactly 1 argument, got 2/);
    expect(errorOf(() => parseExpression('max()'))).toMatch(/^Wrong number of arguments for max .*at least 1 argument, got 0/);
  });

  it('caps the length and the nesting depth', () => {
    const deep = (n: number) => '('.repeat(n) + '1' + ')'.repeat(n);
    expect(show(parseExpression(deep(MAX_DEPTH)))).toBe('1');
    expect(errorOf(() => parseExpression(deep(MAX_DEPTH + 1)))).toMatch(
      new RegExp(`^Expression nested too deeply at position ${MAX_DEPTH} in "…\\(+1\\)+…": at most ${MAX_DEPTH} levels`),
    );
    expect(errorOf(() => parseExpression('-'.repeat(5000) + '1'))).toMatch(/^Expression nested too deeply/);
    expect(
      errorOf(() =>
        parseExpression(
          Array(MAX_DEPTH + 2)
            .fill('2')
            .join('^'),
        ),
      ),
    ).toMatch(/^Expression nested too deeply/);
    expect(errorOf(() => parseExpression('1'.repeat(MAX_EXPRESSION_LENGTH + 1)))).toBe(
      `Expression too long: ${MAX_EXPRESSION_LENGTH + 1} characters, at most ${MAX_EXPRESSION_LENGTH} are allowed`,
    );
  });

  it('handles long flat expressions without deep recursion', () => {
    const sum = Array(5000).fill('1').join('+'); // 9,999 characters
    expect(calc(sum)).toBe('5000');
    expect(calc(Array(3000).fill('2').join('-'))).toBe(String(2 - 2 * 2999));
  });
});

describe('evaluateExpression', () => {
  it('computes big integers exactly', () => {
    expect(calc('2^200')).toBe((2n ** 200n).toString());
    expect(calc('2^200 - 1')).toBe('1606938044258990275541962092341162602522202993782792835301375');
    expect(calc('123456789012345678901234567890 * 987654321098765432109876543210')).toBe(
      (123456789012345678901234567890n * 987654321098765432109876543210n).toString(),
    );
    expect(calc('-(10^30) / 10^28')).toBe('-100');
  });

  it('computes rationals and decimals exactly', () => {
    expect(calc('1/3 + 1/6')).toBe('1/2');
    expect(calc('0.1 + 0.2')).toBe('3/10');
    expect(calc('1.25')).toBe('5/4');
    expect(calc('.5 * 4')).toBe('2');
    expect(calc('2e-3')).toBe('1/500');
    expect(calc('(1/3) * 3 - 1')).toBe('0');
    expect(calc('2^-3')).toBe('1/8');
    expect(calc('(2/3)^-2')).toBe('9/4');
  });

  it('follows precedence, associativity and unary minus', () => {
    expect(calc('2 + 3 * 4')).toBe('14');
    expect(calc('(2 + 3) * 4')).toBe('20');
    expect(calc('10 - 4 - 3')).toBe('3');
    expect(calc('64 / 4 / 2')).toBe('8');
    expect(calc('2^3^2')).toBe('512');
    expect(calc('2**3**2')).toBe('512');
    expect(calc('-2^2')).toBe('-4');
    expect(calc('(-2)^2')).toBe('4');
    expect(calc('-3 * -3')).toBe('9');
    expect(calc('--3')).toBe('3');
    expect(calc('6 × 7 ÷ 2')).toBe('21');
  });

  it('takes % on integers, with the sign of the divisor', () => {
    expect(calc('7 % 3')).toBe('1');
    expect(calc('-7 % 3')).toBe('2');
    expect(calc('7 % -3')).toBe('-2');
    expect(calc('2^100 % 7')).toBe((2n ** 100n % 7n).toString());
    expect(errorOf(() => calc('1.5 % 1'))).toMatch(/^Modulo '%' needs integers at position 4/);
  });

  it('has the functions abs, gcd, lcm, min, max, floor, ceil, round and sqrt', () => {
    expect(calc('abs(-7/2)')).toBe('7/2');
    expect(calc('gcd(84, 36)')).toBe('12');
    expect(calc('gcd(12, 18, -8)')).toBe('2');
    expect(calc('lcm(4, 6)')).toBe('12');
    expect(calc('lcm(-4)')).toBe('4');
    expect(calc('min(3, 1/2, -1/3)')).toBe('-1/3');
    expect(calc('max(3, 1/2, 7/2)')).toBe('7/2');
    expect(calc('floor(-7/2) + ceil(7/2)')).toBe('0');
    expect(calc('round(5/2)')).toBe('3');
    expect(calc('round(-5/2)')).toBe('-3');
    expect(calc('sqrt(16)')).toBe('4');
    expect(calc('sqrt(9/4)')).toBe('3/2');
    expect(calc('sqrt(2^200)')).toBe((2n ** 100n).toString());
    expect(errorOf(() => calc('sqrt(2)'))).toMatch(/^Square root is not exact at position 0 in "sqrt\(2\)": sqrt\(2\) is irrational/);
    expect(errorOf(() => calc('sqrt(-4)'))).toMatch(/^Square root of a negative number/);
    expect(errorOf(() => calc('gcd(1.5, 2)'))).toMatch(/^gcd needs integers at position 0 .*got 3\/2/);
  });

  it('refuses division by zero, naming the operator', () => {
    expect(errorOf(() => calc('1/0'))).toBe('Division by zero at position 1 in "1/0"');
    expect(errorOf(() => calc('5 / (2 - 2)'))).toBe('Division by zero at position 2 in "5 / (2 - 2)"');
    expect(errorOf(() => calc('5 % 0'))).toMatch(/^Division by zero at position 2 .*modulo by 0/);
    expect(errorOf(() => calc('0^-1'))).toMatch(/^Division by zero at position 1 .*negative power/);
  });

  it('refuses huge exponents and results quickly instead of hanging', () => {
    const start = Date.now();
    expect(errorOf(() => calc('9^9^9'))).toBe('Exponent too large at position 1 in "9^9^9": 387420489 exceeds the limit of 10000 in magnitude');
    expect(errorOf(() => calc('2^100000'))).toMatch(/^Exponent too large/);
    expect(errorOf(() => calc('2^(10^100)'))).toMatch(/^Exponent too large/);
    expect(errorOf(() => calc('10^10000'))).toMatch(/^Result too large at position 2 .*limited to 10000 digits/);
    expect(errorOf(() => calc('(9^9999) * (9^9999) * (9^9999)'))).toMatch(/^Result too large/);
    expect(errorOf(() => calc('1e10001'))).toMatch(/^Exponent too large at position 0/);
    expect(errorOf(() => calc('2^(1/2)'))).toMatch(/^Exponent must be an integer at position 1 .*got 1\/2/);
    expect(Date.now() - start).toBeLessThan(2000);
    expect(calc('1^(10^100)')).toBe('1');
    expect(calc('(-1)^(10^100 + 1)')).toBe('-1');
    expect(calc('2^10000')).toBe((2n ** 10000n).toString());
  });

  it('reports syntax errors before evaluating anything', () => {
    expect(errorOf(() => calc('1/0 + $'))).toMatch(/^Unexpected character '\$'/);
  });
});

describe('parseNumber', () => {
  it('reads integers, decimals and fractions', () => {
    expect(parseNumber('123').toString()).toBe('123');
    expect(parseNumber('-4.5').toString()).toBe('-9/2');
    expect(parseNumber('3/7').toString()).toBe('3/7');
    expect(parseNumber(' -6 / -4 ').toString()).toBe('3/2');
    expect(parseNumber('1e+21').toString()).toBe('1' + '0'.repeat(21));
    expect(parseNumber('99999999999999999999999999').toString()).toBe('99999999999999999999999999');
  });

  it('refuses anything else with a message saying what to write', () => {
    expect(errorOf(() => parseNumber('abc', 'a'))).toBe('a is not a number: "abc"; write an integer ("123"), a decimal ("-4.5") or a fraction ("3/7")');
    expect(errorOf(() => parseNumber('1+2', 'b'))).toMatch(/^b is not a number/);
    expect(errorOf(() => parseNumber('1/2/3', 'b'))).toMatch(/^b is not a number: "1\/2\/3"; use at most one "\/"/);
    expect(errorOf(() => parseNumber('', 'a'))).toMatch(/^a is not a number/);
    expect(errorOf(() => parseNumber('3/0', 'a'))).toBe('Division by zero: a is "3/0"');
  });
});

describe('calculator server over MCP', () => {
  const { factory, backend } = serverFactory(calculatorServer);
  const client = new Client({ name: 'calculator-test', version: '1.0.0' });
  const call = (name: string, args: Record<string, unknown>) => client.callTool({ name, arguments: args });
  const ok = async (name: string, args: Record<string, unknown>): Promise<CalcOut> => {
    const r = await call(name, args);
    expect(r.isError, textOf(r)).toBeFalsy();
    const out = r.structuredContent as unknown as CalcOut;
    // The text an agent reads is the exact value (and the decimal of a fraction).
    expect(textOf(r)).toBe(out.is_integer ? out.value : `${out.value} (= ${out.decimal})`);
    return out;
  };
  const fails = async (name: string, args: Record<string, unknown>): Promise<string> => {
    const r = await call(name, args);
    expect(r.isError).toBe(true);
    expect(r.structuredContent).toBeUndefined();
    return textOf(r);
  };

  beforeAll(async () => {
    const [a, b] = InMemoryTransport.createLinkedPair();
    await factory().connect(a);
    await client.connect(b);
  });

  afterAll(async () => {
    await client.close();
    await backend.close();
  });

  it('lists the five tools, each read-only with an input and an output schema', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['add', 'divide', 'evaluate', 'multiply', 'subtract']);
    for (const tool of tools) {
      expect(tool.description, tool.name).toBeTruthy();
      expect(tool.inputSchema.type, tool.name).toBe('object');
      expect(tool.outputSchema?.type, tool.name).toBe('object');
      expect(Object.keys(tool.outputSchema?.properties ?? {}).sort(), tool.name).toEqual([
        'decimal',
        'denominator',
        'expression',
        'is_integer',
        'numerator',
        'value',
      ]);
      expect(tool.annotations?.readOnlyHint, tool.name).toBe(true);
    }
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(byName.get('evaluate')?.inputSchema.required).toEqual(['expression']);
    expect(byName.get('add')?.inputSchema.required).toEqual(['a', 'b']);
  });

  it('says it is stateless', () => {
    expect(calculatorServer.isolation).toBe('stateless: every call is independent');
  });

  it('evaluate returns the exact value, its parts and a decimal as structuredContent', async () => {
    expect(await ok('evaluate', { expression: '1/3 + 1/6' })).toEqual({
      expression: '1/3 + 1/6',
      value: '1/2',
      numerator: '1',
      denominator: '2',
      is_integer: false,
      decimal: '0.5',
    });
    expect(await ok('evaluate', { expression: '2^200' })).toEqual({
      expression: '2^200',
      value: (2n ** 200n).toString(),
      numerator: (2n ** 200n).toString(),
      denominator: '1',
      is_integer: true,
      decimal: '1.6069380442589902755e+60',
    });
    expect(await ok('evaluate', { expression: '-22/7' })).toMatchObject({
      value: '-22/7',
      numerator: '-22',
      denominator: '7',
      decimal: '-3.1428571428571428571',
    });
    expect(await ok('evaluate', { expression: '1.25 * 4 + sqrt(9/4)' })).toMatchObject({ value: '13/2', decimal: '6.5' });
  });

  it('evaluate returns errors an agent can act on as isError results', async () => {
    expect(await fails('evaluate', { expression: '2 + $' })).toBe(`Unexpected character '$' at position 4 in "2 + $"`);
    expect(await fails('evaluate', { expression: '1/(3-3)' })).toBe('Division by zero at position 1 in "1/(3-3)"');
    expect(await fails('evaluate', { expression: 'foo(1)' })).toMatch(/^Unknown function 'foo'/);
    expect(await fails('evaluate', { expression: '(1 + 2' })).toMatch(/^Mismatched parenthesis/);
    expect(await fails('evaluate', { expression: '9^9^9' })).toMatch(/^Exponent too large/);
    expect(await fails('evaluate', { expression: '1'.repeat(MAX_EXPRESSION_LENGTH + 1) })).toContain(
      `expression must be at most ${MAX_EXPRESSION_LENGTH} characters`,
    );
    expect(await fails('evaluate', {})).toMatch(/expression/);
  });

  it('add, subtract, multiply and divide take numbers as strings', async () => {
    expect(await ok('add', { a: '1/3', b: '1/6' })).toEqual({
      expression: '(1/3) + (1/6)',
      value: '1/2',
      numerator: '1',
      denominator: '2',
      is_integer: false,
      decimal: '0.5',
    });
    expect(await ok('subtract', { a: '123', b: '-4.5' })).toMatchObject({ expression: '123 - (-4.5)', value: '255/2', decimal: '127.5' });
    const big = '123456789012345678901234567890';
    expect(await ok('multiply', { a: big, b: big })).toMatchObject({ value: (123456789012345678901234567890n ** 2n).toString(), is_integer: true });
    expect(await ok('divide', { a: '1/2', b: '3/4' })).toMatchObject({ expression: '(1/2) / (3/4)', value: '2/3' });
    expect(await ok('divide', { a: 10, b: 4 })).toMatchObject({ expression: '10 / 4', value: '5/2' });
  });

  it('gives each binary tool an expression that evaluate reads back to the same value', async () => {
    for (const name of ['add', 'subtract', 'multiply', 'divide']) {
      const out = await ok(name, { a: '-3/7', b: '2.5' });
      expect((await ok('evaluate', { expression: out.expression })).value, name).toBe(out.value);
    }
  });

  it('the binary tools refuse non-numbers and division by zero', async () => {
    expect(await fails('add', { a: 'two', b: '2' })).toMatch(/^a is not a number: "two"; write an integer/);
    expect(await fails('multiply', { a: '2', b: '2^3' })).toMatch(/^b is not a number/);
    expect(await fails('divide', { a: '1', b: '0' })).toBe('Division by zero: b is "0"');
    expect(await fails('divide', { a: '1', b: '0.000' })).toMatch(/^Division by zero/);
  });

  it('is stateless: every episode sees the same results', async () => {
    const inEpisode = (episode: string) => client.callTool({ name: 'evaluate', arguments: { expression: '6*7' }, _meta: { [EPISODE_META_KEY]: episode } });
    const [x, y] = await Promise.all([inEpisode('e1'), inEpisode('e2')]);
    expect(x.structuredContent).toEqual(y.structuredContent);
    expect(backend.episode('e1')).toEqual({});
    backend.release('e1');
  });
});
