/**
 * `mixed`: tasks over two servers. Look a fact up (search or sql) and store it (kv or a file),
 * compute with the calculator from numbers found with sql, search or kv, and store or answer
 * the result. Difficulty: 1 one lookup stored in kv; 2 a lookup written to a file, or kv numbers
 * combined; 3 two lookups combined by the calculator; 4 a chain of references written to a file,
 * or two sql answers stored; 5 a two-document age computation, or big kv numbers combined.
 */
import { evaluateExpression, type SeededRandom } from '../../../lib/index.ts';
import type { Doc } from '../../../servers/index.ts';
import type { TaskCall } from '../task.ts';
import { agentTool, answerNumber, call, entityKey, quote, type Candidate, type CheckInput, type MatcherInput, type Sampler, type Split } from './common.ts';
import { chainCalls, chainFrom, chainMatcher, searchPool, type Chain } from './search.ts';
import { sqlPool, type AnsweredSqlQuestion } from './sql.ts';

const slug = (s: string) =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_|_$/g, '');

/** A short name for what a chain asks ("founded", "twin_mayor"), for key and file names. */
const chainSlug = (c: Chain) => c.template.split('.').slice(1).join('_');

function storeCheck(server: 'kv' | 'files', where: string, expect: MatcherInput): CheckInput {
  return server === 'kv'
    ? { kind: 'state', call: call('kv', 'get', { key: where }), path: 'value', expect }
    : { kind: 'state', call: call('files', 'read_file', { path: where }), path: 'content', expect };
}

function sqlMatcher(q: AnsweredSqlQuestion): MatcherInput {
  return q.kind === 'number' ? { kind: 'number', value: q.answer } : { kind: 'exact', value: q.answer, ignore_case: true };
}

/** A search question stored in kv (d1) or in a file (d2: one lookup, d4: a chain of references). */
function searchStore(rng: SeededRandom, split: Split, level: number, store: 'kv' | 'files'): Candidate | undefined {
  const chain = rng.pick(searchPool(level, split));
  const start = chain.docs[0]!;
  const servers: Record<string, string> = store === 'kv' ? { search: 'search', kv: 'kv' } : { search: 'search', files: 'files' };
  const where = store === 'kv' ? `${chainSlug(chain)}:${slug(start.title)}` : `answers/${slug(start.title)}_${chainSlug(chain)}.txt`;
  const searchTool = agentTool(servers, 'search', 'search');
  const storeText = store === 'kv' ? `store the answer under the kv key ${quote(where)} with set` : `write the answer into the file ${where} with write_file`;
  const storeCall =
    store === 'kv' ? call('kv', 'set', { key: where, value: chain.answer }) : call('files', 'write_file', { path: where, content: chain.answer });
  return {
    family: store === 'kv' ? 'mixed.search_kv' : 'mixed.search_files',
    params: { question: chain.template, start: start.id, store },
    splitKeys: [entityKey(start.id)],
    prompt: `Use ${searchTool} and open to answer: ${chain.question} Then ${storeText} (the ${chain.answerKind === 'year' ? 'year' : chain.answerKind === 'number' ? 'number' : 'name'} only). When finished, answer done.`,
    servers,
    checks: [storeCheck(store, where, chainMatcher(chain))],
    solution: { calls: [...chainCalls(chain), storeCall], answer: 'done' },
  };
}

/** One (d1) or two (d4) sql answers stored in kv. */
function sqlKv(rng: SeededRandom, split: Split, levels: number[]): Candidate | undefined {
  const qs = levels.map((l) => rng.pick(sqlPool(l, split)));
  if (qs.length === 2 && qs[0]!.sql === qs[1]!.sql) return undefined;
  const keys = qs.map((q, i) => `answer:${i + 1}`);
  const calls: TaskCall[] = [];
  qs.forEach((q, i) => calls.push(call('sql', 'query', { sql: q.sql }), call('kv', 'set', { key: keys[i]!, value: q.answer })));
  const asks = qs.map((q, i) => `${q.question} Store the answer under the kv key ${quote(keys[i]!)} with set.`);
  return {
    family: 'mixed.sql_kv',
    params: { questions: qs.map((q) => q.params) },
    splitKeys: qs.flatMap((q) => q.splitKeys),
    prompt: `Use the sql tool query on the shop database (customers, products, orders, order_items). ${asks.join(' ')} Store only the value. When finished, answer done.`,
    servers: { sql: 'sql', kv: 'kv' },
    checks: qs.map((q, i) => storeCheck('kv', keys[i]!, sqlMatcher(q))),
    solution: { calls, answer: 'done' },
  };
}

/** Two numeric sql answers combined with the calculator (d3). */
function sqlCalculator(rng: SeededRandom, split: Split): Candidate | undefined {
  const pool = sqlPool(3, split).filter((q) => q.kind === 'number' && q.params.q === 'units_of_product');
  const [a, b] = rng.sample(pool, 2);
  if (!a || !b) return undefined;
  const op = rng.pick(['+', '-', '*'] as const);
  const expression = `${a.answer} ${op} ${b.answer}`;
  const value = evaluateExpression(expression).toString();
  const what = { '+': 'the sum of the two numbers', '-': 'the first number minus the second', '*': 'the product of the two numbers' }[op];
  const first = a.question.replace(/^How many units of the product (.*) were ordered in total\?$/, '$1');
  const second = b.question.replace(/^How many units of the product (.*) were ordered in total\?$/, '$1');
  return {
    family: 'mixed.sql_calculator',
    params: { a: a.params, b: b.params, op },
    splitKeys: [...a.splitKeys, ...b.splitKeys],
    prompt: `Use the sql tool query to find how many units of the product ${first} and of the product ${second} were ordered in total, then use evaluate to compute ${what}. Answer with the number only.`,
    servers: { sql: 'sql', calculator: 'calculator' },
    checks: [answerNumber(value), { kind: 'call', server: 'calculator', tool: 'evaluate', weight: 0.25 }],
    solution: {
      calls: [call('sql', 'query', { sql: a.sql }), call('sql', 'query', { sql: b.sql }), call('calculator', 'evaluate', { expression })],
      answer: value,
    },
  };
}

/** Numbers in kv combined with the calculator and stored back: small (d2) or big (d5). */
function kvCalculator(rng: SeededRandom, big: boolean): Candidate {
  const name = rng.pick(['alpha', 'beta', 'gamma', 'delta', 'omega', 'sigma', 'kappa', 'theta', 'lambda', 'zeta']);
  const n = big ? 3 : 2;
  const keys = Array.from({ length: n }, (_, i) => `${name}:${'abc'[i]}`);
  const values = keys.map(() => rng.digits(big ? rng.int(15, 25) : rng.int(2, 4)));
  const ops = big ? [rng.pick(['*', '+'] as const), rng.pick(['-', '+'] as const)] : [rng.pick(['+', '-', '*'] as const)];
  const expression = values.reduce((acc, v, i) => (i === 0 ? v : `${acc} ${ops[i - 1]} ${v}`), '');
  const symbolic = keys.reduce((acc, k, i) => (i === 0 ? k : `${acc} ${ops[i - 1]} ${k}`), '');
  const value = evaluateExpression(expression).toString();
  const target = `${name}:result`;
  return {
    family: 'mixed.kv_calculator',
    params: { keys, values, ops: [...ops] },
    prompt: `Read the kv keys ${keys.map(quote).join(', ')} with get, compute ${symbolic} (using their values) with evaluate, and store the result under ${quote(target)} with set. When finished, answer done.`,
    servers: { kv: 'kv', calculator: 'calculator' },
    setup: keys.map((key, i) => call('kv', 'set', { key, value: values[i]! })),
    checks: [storeCheck('kv', target, { kind: 'number', value }), { kind: 'call', server: 'calculator', tool: 'evaluate', weight: 0.25 }],
    solution: {
      calls: [...keys.map((key) => call('kv', 'get', { key })), call('calculator', 'evaluate', { expression }), call('kv', 'set', { key: target, value })],
      answer: 'done',
    },
  };
}

const CITIES_BY_SPLIT = new Map<Split, Doc[]>();

/** The years between the foundings of two cities (d3), or a person's age at an event (d5). */
function searchCalculator(rng: SeededRandom, split: Split, level: 3 | 5): Candidate | undefined {
  const servers = { search: 'search', calculator: 'calculator' };
  if (level === 3) {
    let cities = CITIES_BY_SPLIT.get(split);
    if (!cities) {
      cities = searchPool(1, split)
        .filter((c) => c.template === 'city.founded')
        .map((c) => c.docs[0]!);
      CITIES_BY_SPLIT.set(split, cities);
    }
    const [x, y] = rng.sample(cities, 2);
    if (!x || !y) return undefined;
    const cx = chainFrom(x, { kind: 'city', hops: [], fact: 'founded' })!;
    const cy = chainFrom(y, { kind: 'city', hops: [], fact: 'founded' })!;
    const [late, early] = Number(cx.answer) >= Number(cy.answer) ? [cx, cy] : [cy, cx];
    const expression = `${late.answer} - ${early.answer}`;
    const value = evaluateExpression(expression).toString();
    return {
      family: 'mixed.search_calculator',
      params: { question: 'years_between_foundings', cities: [x.id, y.id] },
      splitKeys: [entityKey(x.id), entityKey(y.id)],
      prompt: `Use search and open to find the years in which the cities ${x.title} and ${y.title} were founded, then use evaluate to compute how many years lie between them (the later year minus the earlier). Answer with the number only.`,
      servers,
      checks: [answerNumber(value), { kind: 'call', server: 'calculator', tool: 'evaluate', weight: 0.25 }],
      solution: { calls: [...chainCalls(cx), ...chainCalls(cy), call('calculator', 'evaluate', { expression })], answer: value },
    };
  }
  // How old was the founder (discoverer) when the company was founded (the element discovered)?
  const pool = searchPool(3, split).filter((c) => c.template === 'company.founder.born' || c.template === 'element.discoverer.born');
  const chain = rng.pick(pool);
  const start = chain.docs[0]!;
  const isCompany = start.kind === 'company';
  const eventYear = String(start.facts[isCompany ? 'founded' : 'discovered']);
  const expression = `${eventYear} - ${chain.answer}`;
  const value = evaluateExpression(expression).toString();
  const question = isCompany
    ? `How old was the founder of the company ${start.title} in the year the company was founded?`
    : `How old was the discoverer of the element ${start.title} in the year the element was discovered?`;
  return {
    family: 'mixed.search_calculator',
    params: { question: isCompany ? 'founder_age' : 'discoverer_age', start: start.id },
    splitKeys: [entityKey(start.id)],
    prompt: `Use search and open to find the years, then evaluate to answer: ${question} (the event year minus the birth year) Answer with the number only.`,
    servers,
    checks: [answerNumber(value), { kind: 'call', server: 'calculator', tool: 'evaluate', weight: 0.25 }],
    solution: { calls: [...chainCalls(chain), call('calculator', 'evaluate', { expression })], answer: value },
  };
}

export const mixedSampler: Sampler = (rng, difficulty, split) => {
  switch (difficulty) {
    case 1:
      return rng.chance(0.5) ? searchStore(rng, split, 1, 'kv') : sqlKv(rng, split, [1]);
    case 2:
      return rng.chance(0.5) ? searchStore(rng, split, 2, 'files') : kvCalculator(rng, false);
    case 3:
      return rng.chance(0.5) ? sqlCalculator(rng, split) : searchCalculator(rng, split, 3);
    case 4:
      return rng.chance(0.5) ? searchStore(rng, split, 3, 'files') : sqlKv(rng, split, [2, 3]);
    default:
      return rng.chance(0.5) ? searchCalculator(rng, split, 5) : kvCalculator(rng, true);
  }
};

export const mixedSuite = {
  name: 'mixed',
  description: 'Two servers at once: a search or sql lookup stored in kv or a file, sql/search/kv numbers combined with the calculator and answered or stored.',
  families: ['mixed.search_kv', 'mixed.search_files', 'mixed.sql_kv', 'mixed.sql_calculator', 'mixed.search_calculator', 'mixed.kv_calculator'],
  servers: ['search', 'kv', 'files', 'sql', 'calculator'],
  sampler: mixedSampler,
};
