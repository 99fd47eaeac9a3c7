/**
 * `calculator`: exact arithmetic (+, -, *, /) with operands and operation counts growing with the
 * difficulty, up to integers of 30 digits. The answer is computed by lib's exact evaluator, the one
 * behind the calculator server, so it is the value the `evaluate` tool returns.
 */
import { evaluateExpression, type SeededRandom } from '../../../lib/index.ts';
import { answerNumber, call, type Candidate, type Sampler } from './common.ts';

type Op = '+' | '-' | '*' | '/';

interface Level {
  operands: [number, number];
  /** Digits of each operand. */
  digits: [number, number];
  ops: Op[];
  /** Chance that a sum or difference inside a product is kept in parentheses. */
  parens: number;
}

const LEVELS: Record<number, Level> = {
  1: { operands: [2, 2], digits: [1, 2], ops: ['+', '-', '*'], parens: 0 },
  2: { operands: [3, 3], digits: [2, 3], ops: ['+', '-', '*'], parens: 0.3 },
  3: { operands: [3, 4], digits: [3, 4], ops: ['+', '-', '*', '/'], parens: 0.5 },
  4: { operands: [4, 5], digits: [5, 8], ops: ['+', '-', '*', '/'], parens: 0.5 },
  5: { operands: [4, 6], digits: [12, 30], ops: ['+', '-', '*', '/'], parens: 0.6 },
};

/** An expression tree, written out with the fewest parentheses its meaning needs. */
type Node = { kind: 'num'; text: string } | { kind: 'op'; op: Op; left: Node; right: Node };

const PREC: Record<Op, number> = { '+': 1, '-': 1, '*': 2, '/': 2 };

function write(node: Node): string {
  if (node.kind === 'num') return node.text;
  const p = PREC[node.op];
  const left = node.left.kind === 'op' && PREC[node.left.op] < p ? `(${write(node.left)})` : write(node.left);
  // The right operand needs parentheses at equal precedence too: a - (b + c), a / (b * c).
  const right = node.right.kind === 'op' && PREC[node.right.op] <= p ? `(${write(node.right)})` : write(node.right);
  return `${left} ${node.op} ${right}`;
}

function build(rng: SeededRandom, level: Level): Node {
  const n = rng.int(level.operands[0], level.operands[1]);
  const num = (): Node => ({ kind: 'num', text: rng.digits(rng.int(level.digits[0], level.digits[1])) });
  let node: Node = num();
  for (let i = 1; i < n; i++) {
    const op = rng.pick(level.ops);
    let right: Node = num();
    if (op === '/' && node.kind === 'num' && right.kind === 'num') {
      // Mostly exact divisions: the dividend becomes a multiple of a smaller divisor.
      let divisor = rng.digits(Math.max(1, Math.min(3, right.text.length)));
      if (divisor === '1') divisor = '7';
      right = { kind: 'num', text: divisor };
      if (rng.chance(0.7)) node = { kind: 'num', text: (BigInt(node.text) * BigInt(divisor)).toString() };
    }
    // Sometimes group the new operand with a fresh one first: a * (b + c).
    if (rng.chance(level.parens) && i + 1 < n) {
      const inner = rng.pick(['+', '-'] as const);
      right = { kind: 'op', op: inner, left: right, right: num() };
      i++;
    }
    node = rng.chance(0.5) || op === '/' ? { kind: 'op', op, left: node, right } : { kind: 'op', op, left: right, right: node };
  }
  return node;
}

export const calculatorSampler: Sampler = (rng, difficulty) => {
  const level = LEVELS[difficulty]!;
  const expression = write(build(rng, level));
  let value: string;
  try {
    value = evaluateExpression(expression).toString();
  } catch {
    return undefined; // e.g. a division by zero
  }
  const candidate: Candidate = {
    family: 'calculator.arith',
    params: { expression },
    prompt: `Use the calculator tool evaluate to compute ${expression}. Answer with the exact result only.`,
    servers: { calculator: 'calculator' },
    checks: [answerNumber(value), { kind: 'call', server: 'calculator', tool: 'evaluate', weight: 0.25 }],
    solution: { calls: [call('calculator', 'evaluate', { expression })], answer: value },
  };
  return candidate;
};

export const calculatorSuite = {
  name: 'calculator',
  description:
    'Exact arithmetic with the calculator: +, -, *, / with more operations, parentheses and bigger operands (up to 30-digit integers) as the difficulty grows.',
  families: ['calculator.arith'],
  servers: ['calculator'],
  sampler: calculatorSampler,
};
