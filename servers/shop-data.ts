/**
 * The data set of the `sql` server: a small shop (customers, products, orders, order items),
 * generated deterministically from a fixed seed by a small seeded PRNG (mulberry32), so that every
 * build gives the same rows and task generators can compute ground-truth answers from a database
 * built by `buildShopDatabase`.
 */
import { renameSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { mulberry32 } from '../lib/index.ts';

export const SHOP_SEED = 20_240_611;
export const SHOP_DB_FILE = 'shop.sqlite';

export interface Customer {
  id: number;
  name: string;
  city: string;
  /** YYYY-MM-DD */
  joined: string;
}

export interface Product {
  id: number;
  name: string;
  category: string;
  price_cents: number;
}

export interface Order {
  id: number;
  customer_id: number;
  /** YYYY-MM-DD */
  ordered_at: string;
  status: string;
}

export interface OrderItem {
  order_id: number;
  product_id: number;
  quantity: number;
}

export interface ShopData {
  customers: Customer[];
  products: Product[];
  orders: Order[];
  order_items: OrderItem[];
}

export const SHOP_SCHEMA = `
CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  joined DATE NOT NULL
);
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category TEXT NOT NULL,
  price_cents INTEGER NOT NULL CHECK (price_cents > 0)
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers (id),
  ordered_at DATE NOT NULL,
  status TEXT NOT NULL
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders (id),
  product_id INTEGER NOT NULL REFERENCES products (id),
  quantity INTEGER NOT NULL CHECK (quantity > 0),
  PRIMARY KEY (order_id, product_id)
);
CREATE INDEX orders_customer ON orders (customer_id);
CREATE INDEX order_items_product ON order_items (product_id);
`;

const FIRST_NAMES = [
  'Ana',
  'Ben',
  'Chloe',
  'David',
  'Elena',
  'Farid',
  'Grace',
  'Hugo',
  'Ines',
  'Jonas',
  'Keiko',
  'Liam',
  'Maya',
  'Noah',
  'Olga',
  'Pablo',
  'Quinn',
  'Rosa',
  'Sven',
  'Tara',
  'Umar',
  'Vera',
  'Wei',
  'Yara',
  'Zoe',
];
const LAST_NAMES = [
  'Almeida',
  'Becker',
  'Costa',
  'Dubois',
  'Evans',
  'Fischer',
  'Garcia',
  'Hansen',
  'Ito',
  'Jensen',
  'Kowalski',
  'Larsen',
  'Moreau',
  'Novak',
  "O'Brien",
  'Petrov',
  'Rossi',
  'Silva',
  'Tanaka',
  'Weber',
];
const CITIES = ['Lisbon', 'Porto', 'Madrid', 'Paris', 'Lyon', 'Berlin', 'Munich', 'Milan', 'Vienna', 'Dublin'];

/** Five categories of eight products each, with the price range of the category in cents. */
const CATALOG: { category: string; min: number; max: number; names: string[] }[] = [
  {
    category: 'Books',
    min: 900,
    max: 4500,
    names: [
      'The Quiet Harbor',
      'Atlas of Small Things',
      'Practical SQL',
      'A Year of Soups',
      'The Last Lighthouse',
      'Birds of the Coast',
      'Learning to Draw',
      'Stories for Long Trains',
    ],
  },
  {
    category: 'Electronics',
    min: 1500,
    max: 39900,
    names: ['Wireless Earbuds', 'USB-C Charger', 'Bluetooth Speaker', 'E-Reader', 'Smart Plug', 'Mechanical Keyboard', 'Webcam HD', 'Portable SSD'],
  },
  {
    category: 'Garden',
    min: 500,
    max: 12000,
    names: ['Pruning Shears', 'Watering Can', 'Tomato Seeds', 'Garden Gloves', 'Raised Bed Kit', 'Compost Bin', 'Hose Reel', 'Bird Feeder'],
  },
  {
    category: 'Kitchen',
    min: 700,
    max: 15000,
    names: ['Chef Knife', 'Cast Iron Pan', 'Pepper Mill', 'French Press', 'Cutting Board', 'Stand Mixer Bowl', 'Tea Kettle', 'Spice Rack'],
  },
  {
    category: 'Toys',
    min: 600,
    max: 8000,
    names: ['Wooden Train Set', 'Puzzle 1000 Pieces', 'Kite', 'Building Blocks', 'Plush Bear', 'Board Game Classic', 'Yo-Yo', 'Marble Run'],
  },
];

/** Order statuses and their weights. */
const STATUSES: [string, number][] = [
  ['delivered', 70],
  ['shipped', 10],
  ['pending', 6],
  ['cancelled', 8],
  ['returned', 6],
];

/** Quantities of an order item and their weights. */
const QUANTITIES: [string, number][] = [
  ['1', 60],
  ['2', 25],
  ['3', 10],
  ['4', 5],
];

const SIZES = { customers: 50, orders: 300 };
const DAY_MS = 86_400_000;
const FIRST_DAY = Date.UTC(2022, 0, 1);
const CUSTOMER_DAYS = 730; // customers joined in 2022-2023
const LAST_DAY = Date.UTC(2024, 11, 31);

function isoDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The rows of the shop data set for `seed` (pure: the same seed always gives the same rows). */
export function generateShop(seed: number = SHOP_SEED): ShopData {
  const rand = mulberry32(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
  const weighted = (items: readonly [string, number][]): string => {
    const total = items.reduce((sum, [, w]) => sum + w, 0);
    let r = rand() * total;
    for (const [item, w] of items) if ((r -= w) < 0) return item;
    return items[items.length - 1]![0];
  };

  const names = new Set<string>();
  const customers: Customer[] = [];
  while (customers.length < SIZES.customers) {
    const name = `${pick(FIRST_NAMES)} ${pick(LAST_NAMES)}`;
    if (names.has(name)) continue;
    names.add(name);
    customers.push({ id: customers.length + 1, name, city: pick(CITIES), joined: isoDay(FIRST_DAY + int(0, CUSTOMER_DAYS - 1) * DAY_MS) });
  }

  const products: Product[] = [];
  for (const { category, min, max, names: productNames } of CATALOG) {
    for (const name of productNames) {
      // Prices end in 99 cents.
      products.push({ id: products.length + 1, name, category, price_cents: int(Math.ceil(min / 100), Math.floor(max / 100)) * 100 - 1 });
    }
  }

  // Orders are drawn with a skew towards some customers (every twelfth customer never ordered),
  // then numbered by date.
  const buyers = customers.filter((c) => c.id % 12 !== 0);
  const drafts: Omit<Order, 'id'>[] = [];
  for (let i = 0; i < SIZES.orders; i++) {
    const customer = buyers[Math.floor(rand() ** 1.4 * buyers.length)]!;
    const start = Date.parse(customer.joined);
    const day = start + int(0, Math.round((LAST_DAY - start) / DAY_MS)) * DAY_MS;
    drafts.push({ customer_id: customer.id, ordered_at: isoDay(day), status: weighted(STATUSES) });
  }
  const orders: Order[] = drafts
    .map((draft, index) => ({ draft, index }))
    .sort((a, b) => (a.draft.ordered_at < b.draft.ordered_at ? -1 : a.draft.ordered_at > b.draft.ordered_at ? 1 : a.index - b.index))
    .map(({ draft }, i) => ({ id: i + 1, ...draft }));

  const order_items: OrderItem[] = [];
  for (const order of orders) {
    const count = int(1, 5);
    const chosen = new Set<number>();
    while (chosen.size < count) chosen.add(int(1, products.length));
    for (const product_id of [...chosen].sort((a, b) => a - b)) {
      order_items.push({ order_id: order.id, product_id, quantity: Number(weighted(QUANTITIES)) });
    }
  }
  return { customers, products, orders, order_items };
}

/**
 * Writes the shop database (schema and rows for `seed`) to `file`, replacing any file there.
 * It is built under a temporary name and renamed into place, so a reader never sees half a file.
 */
export function buildShopDatabase(file: string, seed: number = SHOP_SEED): void {
  const data = generateShop(seed);
  const tmp = `${file}.${process.pid}.${Date.now().toString(36)}.tmp`;
  const db = new Database(tmp);
  try {
    db.pragma('journal_mode = DELETE');
    db.pragma('foreign_keys = ON');
    db.exec(SHOP_SCHEMA);
    const insert = {
      customers: db.prepare<Customer>('INSERT INTO customers (id, name, city, joined) VALUES (@id, @name, @city, @joined)'),
      products: db.prepare<Product>('INSERT INTO products (id, name, category, price_cents) VALUES (@id, @name, @category, @price_cents)'),
      orders: db.prepare<Order>('INSERT INTO orders (id, customer_id, ordered_at, status) VALUES (@id, @customer_id, @ordered_at, @status)'),
      order_items: db.prepare<OrderItem>('INSERT INTO order_items (order_id, product_id, quantity) VALUES (@order_id, @product_id, @quantity)'),
    };
    db.transaction(() => {
      for (const row of data.customers) insert.customers.run(row);
      for (const row of data.products) insert.products.run(row);
      for (const row of data.orders) insert.orders.run(row);
      for (const row of data.order_items) insert.order_items.run(row);
    })();
    db.close();
    renameSync(tmp, file);
  } catch (err) {
    if (db.open) db.close();
    rmSync(tmp, { force: true });
    throw err;
  }
}
