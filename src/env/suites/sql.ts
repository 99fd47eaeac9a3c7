/**
 * `sql`: questions on the shop database of the `sql` server (counts, sums, top-k, joins). The
 * ground truth is the result of the very query of the reference solution, run at generation time
 * on a copy of the database built by `buildShopDatabase` (kept in memory, built once per process).
 * Questions about named customers and products are split by entity, so eval entities never
 * appear in train prompts; the other questions by their parameters.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { buildShopDatabase, generateShop, SHOP_DB_FILE, type ShopData } from '../../../servers/index.ts';
import type { TaskCall } from '../task.ts';
import { answerNumber, answerText, call, splitOf, type Candidate, type Sampler, type Split } from './common.ts';

type Cell = string | number | bigint | null;

let shopDb: Database.Database | undefined;
const cache = new Map<string, Cell[][]>();

/** The shop database, built once into a temp file and then kept in memory. */
function database(): Database.Database {
  if (shopDb) return shopDb;
  const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-suites-'));
  try {
    const file = join(dir, SHOP_DB_FILE);
    buildShopDatabase(file);
    shopDb = new Database(readFileSync(file));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return shopDb;
}

/** The rows of a query on the shop database (cached by its text). */
export function shopQuery(sql: string): Cell[][] {
  let rows = cache.get(sql);
  if (!rows) {
    rows = database().prepare(sql).raw().all() as Cell[][];
    cache.set(sql, rows);
  }
  return rows;
}

/** The single value of a query. */
export function shopValue(sql: string): string {
  const v = shopQuery(sql)[0]?.[0];
  if (v === undefined || v === null) throw new Error(`no value for ${sql}`);
  return String(v);
}

let shopData: ShopData | undefined;
export const shop = (): ShopData => (shopData ??= generateShop());

/** A string literal of SQL. */
export const lit = (s: string) => `'${s.replaceAll("'", "''")}'`;

export const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
export const YEARS = [2022, 2023, 2024];
const STATUSES = ['delivered', 'shipped', 'pending', 'cancelled', 'returned'];

/** A question with its query; `answer` formats the rows (undefined: not a good question, e.g. a tie). */
export interface SqlQuestion {
  family: string;
  params: Record<string, string | number>;
  splitKeys: string[];
  question: string;
  sql: string;
  kind: 'number' | 'text';
  /** Rows of a query that shows a tie (for top-k questions): rows k-1 and k must differ in their last column. */
  tie?: { sql: string; k: number };
  /** Join several rows into one answer (top-k lists). */
  list?: boolean;
  /** Answer hint appended to the prompt. */
  hint: string;
}

const JOIN_ALL = 'FROM orders o JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id';

/** Every question of a difficulty. */
function questions(difficulty: number): SqlQuestion[] {
  const { customers, products } = shop();
  const cities = [...new Set(customers.map((c) => c.city))].sort();
  const categories = [...new Set(products.map((p) => p.category))].sort();
  const cust = (id: number) => `sql:customer:${id}`;
  const prod = (id: number) => `sql:product:${id}`;
  const out: SqlQuestion[] = [];
  const num = 'Answer with the number only.';
  const name = 'Answer with the name only.';
  switch (difficulty) {
    case 1:
      for (const p of products) {
        out.push({
          family: 'sql.lookup',
          params: { q: 'price', product: p.id },
          splitKeys: [prod(p.id)],
          question: `What is the price in cents of the product ${p.name}?`,
          sql: `SELECT price_cents FROM products WHERE name = ${lit(p.name)}`,
          kind: 'number',
          hint: num,
        });
        out.push({
          family: 'sql.lookup',
          params: { q: 'category', product: p.id },
          splitKeys: [prod(p.id)],
          question: `In which category is the product ${p.name}?`,
          sql: `SELECT category FROM products WHERE name = ${lit(p.name)}`,
          kind: 'text',
          hint: name,
        });
      }
      for (const c of customers) {
        out.push({
          family: 'sql.lookup',
          params: { q: 'city', customer: c.id },
          splitKeys: [cust(c.id)],
          question: `In which city does the customer ${c.name} live?`,
          sql: `SELECT city FROM customers WHERE name = ${lit(c.name)}`,
          kind: 'text',
          hint: name,
        });
        out.push({
          family: 'sql.lookup',
          params: { q: 'joined', customer: c.id },
          splitKeys: [cust(c.id)],
          question: `On which date did the customer ${c.name} join?`,
          sql: `SELECT joined FROM customers WHERE name = ${lit(c.name)}`,
          kind: 'text',
          hint: 'Answer with the date only (YYYY-MM-DD).',
        });
      }
      for (const city of cities) {
        out.push({
          family: 'sql.count',
          params: { q: 'customers_in_city', city },
          splitKeys: [`sql:city:${city}`],
          question: `How many customers live in ${city}?`,
          sql: `SELECT COUNT(*) FROM customers WHERE city = ${lit(city)}`,
          kind: 'number',
          hint: num,
        });
      }
      break;
    case 2:
      for (const c of customers) {
        out.push({
          family: 'sql.count',
          params: { q: 'orders_of_id', customer: c.id },
          splitKeys: [cust(c.id)],
          question: `How many orders did the customer with id ${c.id} place?`,
          sql: `SELECT COUNT(*) FROM orders WHERE customer_id = ${c.id}`,
          kind: 'number',
          hint: num,
        });
      }
      for (const y of YEARS) {
        MONTHS.forEach((m, i) => {
          const ym = `${y}-${String(i + 1).padStart(2, '0')}`;
          out.push({
            family: 'sql.count',
            params: { q: 'orders_in_month', month: ym },
            splitKeys: [`sql:month:${ym}`],
            question: `How many orders were placed in ${m} ${y}?`,
            sql: `SELECT COUNT(*) FROM orders WHERE ordered_at LIKE '${ym}-%'`,
            kind: 'number',
            hint: num,
          });
        });
        for (const s of STATUSES) {
          out.push({
            family: 'sql.count',
            params: { q: 'status_in_year', status: s, year: y },
            splitKeys: [`sql:status-year:${s}:${y}`],
            question: `How many orders placed in ${y} have the status ${s}?`,
            sql: `SELECT COUNT(*) FROM orders WHERE status = ${lit(s)} AND ordered_at LIKE '${y}-%'`,
            kind: 'number',
            hint: num,
          });
        }
      }
      for (const city of cities) {
        for (const y of [2022, 2023]) {
          out.push({
            family: 'sql.count',
            params: { q: 'joined_in_city_year', city, year: y },
            splitKeys: [`sql:city-year:${city}:${y}`],
            question: `How many customers from ${city} joined in ${y}?`,
            sql: `SELECT COUNT(*) FROM customers WHERE city = ${lit(city)} AND joined LIKE '${y}-%'`,
            kind: 'number',
            hint: num,
          });
        }
      }
      for (const cat of categories) {
        for (const dir of ['DESC', 'ASC'] as const) {
          const which = dir === 'DESC' ? 'most expensive' : 'cheapest';
          out.push({
            family: 'sql.top',
            params: { q: 'price_extreme', category: cat, dir },
            splitKeys: [`sql:category-price:${cat}:${dir}`],
            question: `Which product in the category ${cat} is the ${which}?`,
            sql: `SELECT name, price_cents FROM products WHERE category = ${lit(cat)} ORDER BY price_cents ${dir} LIMIT 1`,
            tie: { sql: `SELECT name, price_cents FROM products WHERE category = ${lit(cat)} ORDER BY price_cents ${dir} LIMIT 2`, k: 1 },
            kind: 'text',
            hint: name,
          });
        }
      }
      break;
    case 3:
      for (const p of products) {
        out.push({
          family: 'sql.join',
          params: { q: 'units_of_product', product: p.id },
          splitKeys: [prod(p.id)],
          question: `How many units of the product ${p.name} were ordered in total?`,
          sql: `SELECT COALESCE(SUM(oi.quantity), 0) FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE p.name = ${lit(p.name)}`,
          kind: 'number',
          hint: num,
        });
        out.push({
          family: 'sql.join',
          params: { q: 'buyers_of_product', product: p.id },
          splitKeys: [prod(p.id)],
          question: `How many different customers ordered the product ${p.name}?`,
          sql: `SELECT COUNT(DISTINCT o.customer_id) ${JOIN_ALL} WHERE p.name = ${lit(p.name)}`,
          kind: 'number',
          hint: num,
        });
      }
      for (const c of customers) {
        out.push({
          family: 'sql.join',
          params: { q: 'orders_of_name', customer: c.id },
          splitKeys: [cust(c.id)],
          question: `How many orders did the customer ${c.name} place?`,
          sql: `SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = ${lit(c.name)}`,
          kind: 'number',
          hint: num,
        });
      }
      for (const cat of categories) {
        for (const y of YEARS) {
          out.push({
            family: 'sql.join',
            params: { q: 'units_in_category_year', category: cat, year: y },
            splitKeys: [`sql:category-year:${cat}:${y}`],
            question: `How many units of ${cat} products were ordered in ${y}?`,
            sql: `SELECT COALESCE(SUM(oi.quantity), 0) ${JOIN_ALL} WHERE p.category = ${lit(cat)} AND o.ordered_at LIKE '${y}-%'`,
            kind: 'number',
            hint: num,
          });
        }
      }
      break;
    case 4:
      for (const c of customers) {
        out.push({
          family: 'sql.aggregate',
          params: { q: 'spent_by_customer', customer: c.id },
          splitKeys: [cust(c.id)],
          question: `How much did the customer ${c.name} spend in cents on orders that were not cancelled?`,
          sql: `SELECT COALESCE(SUM(oi.quantity * p.price_cents), 0) ${JOIN_ALL} JOIN customers c ON c.id = o.customer_id WHERE c.name = ${lit(c.name)} AND o.status != 'cancelled'`,
          kind: 'number',
          hint: num,
        });
      }
      for (const p of products) {
        out.push({
          family: 'sql.aggregate',
          params: { q: 'delivered_revenue_of_product', product: p.id },
          splitKeys: [prod(p.id)],
          question: `What revenue in cents did the product ${p.name} bring on delivered orders?`,
          sql: `SELECT COALESCE(SUM(oi.quantity * p.price_cents), 0) ${JOIN_ALL} WHERE p.name = ${lit(p.name)} AND o.status = 'delivered'`,
          kind: 'number',
          hint: num,
        });
      }
      for (const cat of categories) {
        for (const y of YEARS) {
          const q = (k: number) =>
            `SELECT p.name, SUM(oi.quantity) AS units ${JOIN_ALL} WHERE p.category = ${lit(cat)} AND o.ordered_at LIKE '${y}-%' GROUP BY p.id ORDER BY units DESC, p.name LIMIT ${k}`;
          out.push({
            family: 'sql.top',
            params: { q: 'best_seller_category_year', category: cat, year: y },
            splitKeys: [`sql:category-year:${cat}:${y}`],
            question: `Which ${cat} product sold the most units in ${y}?`,
            sql: q(1),
            tie: { sql: q(2), k: 1 },
            kind: 'text',
            hint: name,
          });
        }
      }
      for (const city of cities) {
        const q = (k: number) =>
          `SELECT c.name, COUNT(o.id) AS n FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.city = ${lit(city)} GROUP BY c.id ORDER BY n DESC, c.name LIMIT ${k}`;
        out.push({
          family: 'sql.top',
          params: { q: 'most_orders_in_city', city },
          splitKeys: [`sql:city:${city}`],
          question: `Which customer from ${city} placed the most orders?`,
          sql: q(1),
          tie: { sql: q(2), k: 1 },
          kind: 'text',
          hint: name,
        });
      }
      break;
    case 5:
      for (const cat of categories) {
        for (const y of YEARS) {
          const q = (k: number) =>
            `SELECT p.name, SUM(oi.quantity * p.price_cents) AS revenue ${JOIN_ALL} WHERE p.category = ${lit(cat)} AND o.ordered_at LIKE '${y}-%' AND o.status != 'cancelled' GROUP BY p.id ORDER BY revenue DESC, p.name LIMIT ${k}`;
          out.push({
            family: 'sql.top',
            params: { q: 'top3_revenue_category_year', category: cat, year: y },
            splitKeys: [`sql:category-year:${cat}:${y}`],
            question: `Which three ${cat} products brought the most revenue in ${y} on orders that were not cancelled?`,
            sql: q(3),
            tie: { sql: q(4), k: 3 },
            list: true,
            kind: 'text',
            hint: 'Answer with the three names, best first, separated by commas.',
          });
          const c = (k: number) =>
            `SELECT c.city, SUM(oi.quantity * p.price_cents) AS spent ${JOIN_ALL} JOIN customers c ON c.id = o.customer_id WHERE p.category = ${lit(cat)} AND o.ordered_at LIKE '${y}-%' AND o.status != 'cancelled' GROUP BY c.city ORDER BY spent DESC, c.city LIMIT ${k}`;
          out.push({
            family: 'sql.top',
            params: { q: 'top_city_category_year', category: cat, year: y },
            splitKeys: [`sql:category-year:${cat}:${y}`],
            question: `Customers of which city spent the most on ${cat} products in ${y} (orders not cancelled)?`,
            sql: c(1),
            tie: { sql: c(2), k: 1 },
            kind: 'text',
            hint: name,
          });
          MONTHS.forEach((m, i) => {
            const ym = `${y}-${String(i + 1).padStart(2, '0')}`;
            out.push({
              family: 'sql.aggregate',
              params: { q: 'revenue_category_month', category: cat, month: ym },
              splitKeys: [`sql:category-month:${cat}:${ym}`],
              question: `What revenue in cents did ${cat} products bring in ${m} ${y} on orders that were not cancelled?`,
              sql: `SELECT COALESCE(SUM(oi.quantity * p.price_cents), 0) ${JOIN_ALL} WHERE p.category = ${lit(cat)} AND o.ordered_at LIKE '${ym}-%' AND o.status != 'cancelled'`,
              kind: 'number',
              hint: num,
            });
          });
        }
      }
      for (const city of cities) {
        for (const y of YEARS) {
          const q = (k: number) =>
            `SELECT c.name, SUM(oi.quantity * p.price_cents) AS spent ${JOIN_ALL} JOIN customers c ON c.id = o.customer_id WHERE c.city = ${lit(city)} AND o.ordered_at LIKE '${y}-%' AND o.status != 'cancelled' GROUP BY c.id ORDER BY spent DESC, c.name LIMIT ${k}`;
          out.push({
            family: 'sql.top',
            params: { q: 'top_spender_city_year', city, year: y },
            splitKeys: [`sql:city-year:${city}:${y}`],
            question: `Which customer from ${city} spent the most in ${y} on orders that were not cancelled?`,
            sql: q(1),
            tie: { sql: q(2), k: 1 },
            kind: 'text',
            hint: name,
          });
        }
      }
      break;
  }
  return out;
}

/** The answer of a question, or undefined when it is not a good one (a tie, too few rows). */
export function sqlAnswer(q: SqlQuestion): string | undefined {
  const rows = shopQuery(q.sql);
  if (q.tie) {
    const all = shopQuery(q.tie.sql);
    if (all.length < q.tie.k) return undefined;
    const last = (r: Cell[] | undefined) => (r ? r[r.length - 1] : undefined);
    for (let i = 1; i < all.length; i++) if (last(all[i]) === last(all[i - 1])) return undefined;
  }
  if (q.list) return rows.length === q.tie?.k ? rows.map((r) => String(r[0])).join(', ') : undefined;
  const v = rows[0]?.[0];
  return v === undefined || v === null ? undefined : String(v);
}

export interface AnsweredSqlQuestion extends SqlQuestion {
  answer: string;
}

const pools = new Map<string, AnsweredSqlQuestion[]>();

/** The good questions of a difficulty in a split (computed once). */
export function sqlPool(difficulty: number, split: Split): AnsweredSqlQuestion[] {
  const key = `${difficulty}/${split}`;
  let pool = pools.get(key);
  if (!pool) {
    pool = [];
    for (const q of questions(difficulty)) {
      if (splitOf(q.splitKeys) !== split) continue;
      const answer = sqlAnswer(q);
      if (answer !== undefined) pool.push({ ...q, answer });
    }
    pools.set(key, pool);
  }
  return pool;
}

export const sqlSampler: Sampler = (rng, difficulty, split) => {
  const pool = sqlPool(difficulty, split);
  if (pool.length === 0) return undefined;
  const q = rng.pick(pool);
  const withSchema = difficulty >= 4;
  const calls: TaskCall[] = [...(withSchema ? [call('sql', 'describe_schema')] : []), call('sql', 'query', { sql: q.sql })];
  const tools = withSchema ? 'the sql tools describe_schema and query' : 'the sql tool query';
  const candidate: Candidate = {
    family: q.family,
    params: q.params,
    splitKeys: q.splitKeys,
    prompt: `Use ${tools} on the shop database (customers, products, orders, order_items) to answer: ${q.question} ${q.hint}`,
    servers: { sql: 'sql' },
    checks: [q.kind === 'number' ? answerNumber(q.answer) : answerText(q.answer)],
    solution: { calls, answer: q.answer },
  };
  return candidate;
};

export const sqlSuite = {
  name: 'sql',
  description:
    'Questions on the shop database: lookups, counts, sums, joins, top-k (ground truth from the same database); more tables, filters and ranking as the difficulty grows.',
  families: ['sql.lookup', 'sql.count', 'sql.join', 'sql.aggregate', 'sql.top'],
  servers: ['sql'],
  sampler: sqlSampler,
};
