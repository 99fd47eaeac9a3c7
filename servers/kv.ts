/**
 * `kv`: a key-value store in a real SQLite database (better-sqlite3), one namespace per episode.
 * Values are strings; `incr` treats a value as an integer (arbitrary size).
 */
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { defineServer, defineTool, EpisodeStore, ToolError, type Backend } from './common.ts';

interface KvState {
  ns: string;
  db: KvDb;
}

class KvDb {
  readonly db: Database.Database;
  readonly get: Database.Statement<[string, string], { value: string }>;
  readonly set: Database.Statement<[string, string, string]>;
  readonly del: Database.Statement<[string, string]>;
  readonly list: Database.Statement<[string, string, string, number], { key: string; value: string }>;
  readonly count: Database.Statement<[string, string, string], { n: number }>;
  readonly dropNs: Database.Statement<[string]>;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec('CREATE TABLE IF NOT EXISTS kv (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (ns, key)) WITHOUT ROWID');
    this.get = this.db.prepare('SELECT value FROM kv WHERE ns = ? AND key = ?');
    this.set = this.db.prepare('INSERT INTO kv (ns, key, value) VALUES (?, ?, ?) ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value');
    this.del = this.db.prepare('DELETE FROM kv WHERE ns = ? AND key = ?');
    // Prefix match by range, so that `%` and `_` in keys mean nothing special.
    this.list = this.db.prepare('SELECT key, value FROM kv WHERE ns = ? AND key >= ? AND key < ? ORDER BY key LIMIT ?');
    this.count = this.db.prepare('SELECT count(*) AS n FROM kv WHERE ns = ? AND key >= ? AND key < ?');
    this.dropNs = this.db.prepare('DELETE FROM kv WHERE ns = ?');
  }
}

/** The smallest string greater than every string that starts with `prefix` ('' means no bound). */
function prefixEnd(prefix: string): string {
  return prefix + '\u{10FFFF}';
}

const Key = z.string().min(1, 'key must not be empty').max(512, 'key must be at most 512 characters').describe('The key');
const MAX_VALUE = 100_000;

const tools = [
  defineTool({
    name: 'get',
    description: 'Read the value stored under a key. Returns found=false and value=null when the key is absent.',
    input: z.object({ key: Key }),
    output: z.object({ key: z.string(), value: z.string().nullable(), found: z.boolean() }),
    readOnly: true,
    run: ({ key }, { ns, db }: KvState) => {
      const row = db.get.get(ns, key);
      return { key, value: row?.value ?? null, found: row !== undefined };
    },
  }),
  defineTool({
    name: 'set',
    description: 'Store a string value under a key, replacing any previous value.',
    input: z.object({ key: Key, value: z.string().max(MAX_VALUE, `value must be at most ${MAX_VALUE} characters`).describe('The value to store') }),
    output: z.object({ key: z.string(), value: z.string(), previous: z.string().nullable() }),
    readOnly: false,
    run: ({ key, value }, { ns, db }: KvState) => {
      const previous = db.get.get(ns, key)?.value ?? null;
      db.set.run(ns, key, value);
      return { key, value, previous };
    },
  }),
  defineTool({
    name: 'delete',
    description: 'Delete a key. Returns deleted=false when the key was absent.',
    input: z.object({ key: Key }),
    output: z.object({ key: z.string(), deleted: z.boolean() }),
    readOnly: false,
    run: ({ key }, { ns, db }: KvState) => ({ key, deleted: db.del.run(ns, key).changes > 0 }),
  }),
  defineTool({
    name: 'list',
    description: 'List keys (with their values) that start with a prefix, in key order. An empty prefix lists everything.',
    input: z.object({
      prefix: z.string().max(512).default('').describe('Only keys starting with this'),
      limit: z.number().int().min(1).max(1000).default(100).describe('At most this many entries'),
    }),
    output: z.object({
      prefix: z.string(),
      entries: z.array(z.object({ key: z.string(), value: z.string() })),
      total: z.number().int(),
      truncated: z.boolean(),
    }),
    readOnly: true,
    run: ({ prefix, limit }, { ns, db }: KvState) => {
      const end = prefixEnd(prefix);
      const entries = db.list.all(ns, prefix, end, limit);
      const total = db.count.get(ns, prefix, end)?.n ?? 0;
      return { prefix, entries, total, truncated: total > entries.length };
    },
  }),
  defineTool({
    name: 'incr',
    description: 'Add an integer to the integer stored under a key (a missing key counts as 0) and return the new value.',
    input: z.object({
      key: Key,
      by: z
        .union([z.number().int(), z.string().regex(/^-?\d+$/, 'by must be an integer')])
        .default(1)
        .describe('The amount to add (an integer, or a string of digits for big numbers)'),
    }),
    output: z.object({ key: z.string(), value: z.string() }),
    readOnly: false,
    run: ({ key, by }, { ns, db }: KvState) => {
      const tx = db.db.transaction(() => {
        const current = db.get.get(ns, key)?.value ?? '0';
        if (!/^\s*-?\d+\s*$/.test(current)) throw new ToolError(`incr: the value of '${key}' is not an integer: ${JSON.stringify(current.slice(0, 50))}`);
        const next = (BigInt(current.trim()) + BigInt(by)).toString();
        db.set.run(ns, key, next);
        return next;
      });
      return { key, value: tx() };
    },
  }),
];

export const kvServer = defineServer<KvState>({
  name: 'kv',
  version: '0.1.0',
  description: 'A key-value store (SQLite). Tools: get, set, delete, list (by prefix), incr.',
  isolation: "each episode (the `mcp-gym/episode` key of a request's _meta) is its own namespace in the SQLite table; a released episode's rows are deleted",
  tools: tools as never,
  examples: [
    { tool: 'set', arguments: { key: 'user:1', value: 'ada' } },
    { tool: 'incr', arguments: { key: 'visits', by: 41 } },
    { tool: 'list', arguments: { prefix: 'user:' } },
  ],
  backend(options): Backend<KvState> {
    const ownDir = options.dataDir === undefined;
    const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'mcp-gym-kv-'));
    mkdirSync(dir, { recursive: true });
    const db = new KvDb(join(dir, 'kv.sqlite'));
    const store = new EpisodeStore<KvState>(
      (ns) => ({ ns, db }),
      (ns) => db.dropNs.run(ns),
      options,
    );
    return {
      episode: (id) => store.get(id),
      release: (id) => store.release(id),
      close() {
        store.clear();
        db.db.close();
        if (ownDir) rmSync(dir, { recursive: true, force: true });
      },
    };
  },
});
