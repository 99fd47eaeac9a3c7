/**
 * `sql`: questions on the shop database of the `sql` server (counts, sums, top-k, joins). The
 * ground truth is the result of the very query of the reference solution, run at generation time
 * on a copy of the database built by `buildShopDatabase` (kept in memory, built once per process).
 * Questions about named customers and products are split by entity, so eval entities never
 * appear in train prompts; the other questions by their parameters. Each question has four
 * wordings: tasks use the first three (drawn); the fourth is in no task, and rephraseSqlTask asks
 * a held-out task in it.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { buildShopDatabase, generateShop, SHOP_DB_FILE, type ShopData } from '../../../servers/index.ts';
import { stableJson } from '../../../lib/index.ts';
import type { Task, TaskCall } from '../task.ts';
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
  /** The question in its first wording (phrasings[0]). */
  question: string;
  /**
   * Every wording of the question (SQL_PHRASINGS of them): the suite's tasks use the first
   * SQL_TRAIN_PHRASINGS; the last one (SQL_HELDOUT_PHRASING) is in no task the suite draws, so a model
   * trained on the suite has never seen it (rephraseSqlTask: the held-out tasks in it).
   */
  phrasings: string[];
  sql: string;
  kind: 'number' | 'text';
  /** Rows of a query that shows a tie (for top-k questions): rows k-1 and k must differ in their last column. */
  tie?: { sql: string; k: number };
  /** Join several rows into one answer (top-k lists). */
  list?: boolean;
  /** Answer hint appended to the prompt. */
  hint: string;
}

/** Wordings per question: the first SQL_TRAIN_PHRASINGS in the suite's tasks, the last held out of every one. */
export const SQL_PHRASINGS = 4;
export const SQL_TRAIN_PHRASINGS = 3;
export const SQL_HELDOUT_PHRASING = 3;

/** A question's wordings: the first is `question`. */
const ask = (...phrasings: string[]) => {
  if (phrasings.length !== SQL_PHRASINGS) throw new Error(`${phrasings.length} wordings of '${phrasings[0]}', not ${SQL_PHRASINGS}`);
  return { question: phrasings[0]!, phrasings };
};

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
          ...ask(
            `What is the price in cents of the product ${p.name}?`,
            `How much does the product ${p.name} cost, in cents?`,
            `What does ${p.name} sell for in cents?`,
            `Tell me the price of ${p.name} in cents.`,
          ),
          sql: `SELECT price_cents FROM products WHERE name = ${lit(p.name)}`,
          kind: 'number',
          hint: num,
        });
        out.push({
          family: 'sql.lookup',
          params: { q: 'category', product: p.id },
          splitKeys: [prod(p.id)],
          ...ask(
            `In which category is the product ${p.name}?`,
            `What category does the product ${p.name} belong to?`,
            `Which category is ${p.name} listed under?`,
            `Look up the category of the item ${p.name}.`,
          ),
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
          ...ask(
            `In which city does the customer ${c.name} live?`,
            `What city is the customer ${c.name} from?`,
            `Where does ${c.name} live (the city)?`,
            `Tell me the home city of the shopper ${c.name}.`,
          ),
          sql: `SELECT city FROM customers WHERE name = ${lit(c.name)}`,
          kind: 'text',
          hint: name,
        });
        out.push({
          family: 'sql.lookup',
          params: { q: 'joined', customer: c.id },
          splitKeys: [cust(c.id)],
          ...ask(
            `On which date did the customer ${c.name} join?`,
            `When did the customer ${c.name} join?`,
            `What is the join date of ${c.name}?`,
            `Tell me the day the shopper ${c.name} signed up.`,
          ),
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
          ...ask(
            `How many customers live in ${city}?`,
            `What is the number of customers in ${city}?`,
            `Count the customers who live in ${city}.`,
            `Tell me how many shoppers are based in ${city}.`,
          ),
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
          ...ask(
            `How many orders did the customer with id ${c.id} place?`,
            `What is the number of orders placed by the customer with id ${c.id}?`,
            `Count the orders of customer id ${c.id}.`,
            `Tell me the order count for the shopper whose id is ${c.id}.`,
          ),
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
            ...ask(
              `How many orders were placed in ${m} ${y}?`,
              `What is the number of orders placed in ${m} ${y}?`,
              `Count the orders from ${m} ${y}.`,
              `Tell me how many purchases were made during ${m} ${y}.`,
            ),
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
            ...ask(
              `How many orders placed in ${y} have the status ${s}?`,
              `What is the number of ${y} orders with the status ${s}?`,
              `Count the orders from ${y} whose status is ${s}.`,
              `Tell me how many purchases made in ${y} are marked ${s}.`,
            ),
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
            ...ask(
              `How many customers from ${city} joined in ${y}?`,
              `What is the number of customers in ${city} who joined in ${y}?`,
              `Count the ${city} customers who joined during ${y}.`,
              `Tell me how many shoppers based in ${city} signed up in ${y}.`,
            ),
            sql: `SELECT COUNT(*) FROM customers WHERE city = ${lit(city)} AND joined LIKE '${y}-%'`,
            kind: 'number',
            hint: num,
          });
        }
      }
      for (const cat of categories) {
        for (const dir of ['DESC', 'ASC'] as const) {
          const which = dir === 'DESC' ? 'most expensive' : 'cheapest';
          const [hi, least] = dir === 'DESC' ? ['highest', 'most'] : ['lowest', 'least'];
          out.push({
            family: 'sql.top',
            params: { q: 'price_extreme', category: cat, dir },
            splitKeys: [`sql:category-price:${cat}:${dir}`],
            ...ask(
              `Which product in the category ${cat} is the ${which}?`,
              `What is the ${which} product in the category ${cat}?`,
              `Name the product of the category ${cat} with the ${hi} price.`,
              `Tell me which ${cat} item costs the ${least}.`,
            ),
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
          ...ask(
            `How many units of the product ${p.name} were ordered in total?`,
            `What is the total number of units ordered of the product ${p.name}?`,
            `Count all units of ${p.name} across every order.`,
            `Tell me the total quantity of ${p.name} that shoppers bought.`,
          ),
          sql: `SELECT COALESCE(SUM(oi.quantity), 0) FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE p.name = ${lit(p.name)}`,
          kind: 'number',
          hint: num,
        });
        out.push({
          family: 'sql.join',
          params: { q: 'buyers_of_product', product: p.id },
          splitKeys: [prod(p.id)],
          ...ask(
            `How many different customers ordered the product ${p.name}?`,
            `What is the number of distinct customers who ordered the product ${p.name}?`,
            `Count the customers who ordered ${p.name} at least once.`,
            `Tell me how many separate shoppers bought ${p.name}.`,
          ),
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
          ...ask(
            `How many orders did the customer ${c.name} place?`,
            `What is the number of orders placed by the customer ${c.name}?`,
            `Count the orders of the customer ${c.name}.`,
            `Tell me how many purchases the shopper ${c.name} made.`,
          ),
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
            ...ask(
              `How many units of ${cat} products were ordered in ${y}?`,
              `What is the total number of units of ${cat} products ordered in ${y}?`,
              `Count the units of ${cat} products across the orders of ${y}.`,
              `Tell me the total quantity of ${cat} items bought during ${y}.`,
            ),
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
          ...ask(
            `How much did the customer ${c.name} spend in cents on orders that were not cancelled?`,
            `What is the total spent in cents by the customer ${c.name} on orders not cancelled?`,
            `Sum what the customer ${c.name} spent in cents, leaving out cancelled orders.`,
            `Tell me the amount in cents the shopper ${c.name} paid, ignoring cancelled purchases.`,
          ),
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
          ...ask(
            `What revenue in cents did the product ${p.name} bring on delivered orders?`,
            `How much revenue in cents came from the product ${p.name} on delivered orders?`,
            `Sum the revenue in cents of ${p.name} over delivered orders.`,
            `Tell me the income in cents that ${p.name} made from delivered purchases.`,
          ),
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
            ...ask(
              `Which ${cat} product sold the most units in ${y}?`,
              `What is the best-selling ${cat} product by units in ${y}?`,
              `Name the ${cat} product with the most units ordered in ${y}.`,
              `Tell me which ${cat} item shoppers bought the most of during ${y}.`,
            ),
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
          ...ask(
            `Which customer from ${city} placed the most orders?`,
            `Who is the customer from ${city} with the most orders?`,
            `Name the ${city} customer who ordered most often.`,
            `Tell me which shopper based in ${city} made the most purchases.`,
          ),
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
            ...ask(
              `Which three ${cat} products brought the most revenue in ${y} on orders that were not cancelled?`,
              `What are the three ${cat} products with the highest revenue in ${y}, cancelled orders left out?`,
              `Name the top three ${cat} products by revenue in ${y} (orders not cancelled).`,
              `Tell me the three ${cat} items that earned the most during ${y}, ignoring cancelled purchases.`,
            ),
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
            ...ask(
              `Customers of which city spent the most on ${cat} products in ${y} (orders not cancelled)?`,
              `Which city's customers spent the most on ${cat} products in ${y}, cancelled orders left out?`,
              `Name the city whose customers spent most on ${cat} products in ${y} (orders not cancelled).`,
              `Tell me the city where shoppers paid the most for ${cat} items during ${y}, ignoring cancelled purchases.`,
            ),
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
              ...ask(
                `What revenue in cents did ${cat} products bring in ${m} ${y} on orders that were not cancelled?`,
                `How much revenue in cents did ${cat} products make in ${m} ${y}, cancelled orders left out?`,
                `Sum the revenue in cents of ${cat} products in ${m} ${y} (orders not cancelled).`,
                `Tell me the income in cents from ${cat} items during ${m} ${y}, ignoring cancelled purchases.`,
              ),
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
            ...ask(
              `Which customer from ${city} spent the most in ${y} on orders that were not cancelled?`,
              `Who is the customer from ${city} who spent the most in ${y}, cancelled orders left out?`,
              `Name the ${city} customer with the highest spending in ${y} (orders not cancelled).`,
              `Tell me which shopper based in ${city} paid the most during ${y}, ignoring cancelled purchases.`,
            ),
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

/** A sql task's prompt: the question in one of its wordings, with the tools to use and the answer's form. */
function sqlPrompt(q: AnsweredSqlQuestion, difficulty: number, phrasing: number): string {
  const tools = difficulty >= 4 ? 'the sql tools describe_schema and query' : 'the sql tool query';
  return `Use ${tools} on the shop database (customers, products, orders, order_items) to answer: ${q.phrasings[phrasing]} ${q.hint}`;
}

export const sqlSampler: Sampler = (rng, difficulty, split) => {
  const pool = sqlPool(difficulty, split);
  if (pool.length === 0) return undefined;
  const q = rng.pick(pool);
  // One of the suite's wordings (never the held-out one); drawTasks asks each question once before it asks one again.
  const phrasing = rng.int(0, SQL_TRAIN_PHRASINGS - 1);
  const withSchema = difficulty >= 4;
  const calls: TaskCall[] = [...(withSchema ? [call('sql', 'describe_schema')] : []), call('sql', 'query', { sql: q.sql })];
  const candidate: Candidate = {
    family: q.family,
    params: { ...q.params, phrasing },
    question: stableJson({ family: q.family, params: q.params }),
    splitKeys: q.splitKeys,
    prompt: sqlPrompt(q, difficulty, phrasing),
    servers: { sql: 'sql' },
    checks: [q.kind === 'number' ? answerNumber(q.answer) : answerText(q.answer)],
    solution: { calls, answer: q.answer },
  };
  return candidate;
};

/**
 * A sql task of the suite asked in another wording (default: the held-out one, which no task of the suite
 * uses): the same question, checks and solution; its id ends in `-w<phrasing>`. The job's second held-out
 * set (docs/models.md): whether what training taught carries over to words it never saw.
 */
export function rephraseSqlTask(task: Task, phrasing = SQL_HELDOUT_PHRASING): Task {
  const { phrasing: _was, ...params } = (task.params ?? {}) as Record<string, string | number>;
  const key = stableJson({ family: task.family, params });
  const q = (['eval', 'train'] as const)
    .flatMap((split) => sqlPool(task.difficulty, split))
    .find((c) => stableJson({ family: c.family, params: c.params }) === key);
  if (!q) throw new Error(`task ${task.id}: not a question of the sql suite (family ${task.family}, params ${key})`);
  if (phrasing < 0 || phrasing >= SQL_PHRASINGS) throw new Error(`phrasing ${phrasing}: the sql questions have wordings 0-${SQL_PHRASINGS - 1}`);
  return { ...task, id: `${task.id}-w${phrasing}`, params: { ...params, phrasing }, prompt: sqlPrompt(q, task.difficulty, phrasing) };
}

export const sqlSuite = {
  name: 'sql',
  description:
    'Questions on the shop database: lookups, counts, sums, joins, top-k (ground truth from the same database); more tables, filters and ranking as the difficulty grows.',
  families: ['sql.lookup', 'sql.count', 'sql.join', 'sql.aggregate', 'sql.top'],
  servers: ['sql'],
  sampler: sqlSampler,
};
