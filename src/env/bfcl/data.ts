/**
 * BFCL's categories and entries. The entries are exported once per category by BFCL's own loaders
 * and converters (`python -m mcp_gym_bfcl export`, bfcl/mcp_gym_bfcl/data.py) into the cache,
 * then read from there.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { bfclCacheDir, bfclEnv, bfclPython, BFCL_VERSION } from './python.ts';

export const BFCL_NON_LIVE = ['simple_python', 'simple_java', 'simple_javascript', 'multiple', 'parallel', 'parallel_multiple', 'irrelevance'] as const;
export const BFCL_LIVE = ['live_simple', 'live_multiple', 'live_parallel', 'live_parallel_multiple', 'live_irrelevance', 'live_relevance'] as const;
export const BFCL_MULTI_TURN = ['multi_turn_base', 'multi_turn_miss_func', 'multi_turn_miss_param', 'multi_turn_long_context'] as const;
export const BFCL_CATEGORIES: readonly string[] = [...BFCL_NON_LIVE, ...BFCL_LIVE, ...BFCL_MULTI_TURN];
/** The groups a suite may name (`bfcl:non-live`, ...); `bfcl` and `bfcl:all` are every category. */
export const BFCL_GROUPS: Readonly<Record<string, readonly string[]>> = {
  'non-live': BFCL_NON_LIVE,
  live: BFCL_LIVE,
  'multi-turn': BFCL_MULTI_TURN,
  all: BFCL_CATEGORIES,
};
/** BFCL's categories mcp-gym leaves out, and why. */
export const BFCL_LEFT_OUT: Readonly<Record<string, string>> = {
  web_search_base: 'needs a live web search API (SerpAPI) and network access',
  web_search_no_snippet: 'needs a live web search API (SerpAPI) and network access',
  memory_kv: "BFCL's memory categories replay prerequisite conversations into a memory store first; not ported",
  memory_vector: 'downloads a sentence-transformers embedding model from a model hub',
  memory_rec_sum: "BFCL's memory categories replay prerequisite conversations into a memory store first; not ported",
  format_sensitivity: 'not a scoring category (BFCL reports only its spread)',
};

export interface BfclTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  /** `{"mcp-gym/control": true}` on the multi-turn server's control tool. */
  _meta?: Record<string, unknown>;
}

export interface BfclCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** One BFCL entry, as exported. */
export interface BfclEntry {
  id: string;
  category: string;
  multi_turn: boolean;
  /** BFCL's turns of messages (the first may hold a system message). */
  question: { role: 'system' | 'user' | 'assistant'; content: string }[][];
  /** The later turns' user messages (BFCL's own message where it left a turn empty for held-back functions). */
  followups: string[];
  /** The functions as MCP tools (BFCL's OpenAI converter), shown from the start. */
  tools: BfclTool[];
  /** multi_turn_miss_func: tools held back until a turn ("3": [...]). */
  missed?: Record<string, BfclTool[]>;
  /** The multi-turn server's control tools, listed beside the functions (bfcl/mcp_gym_bfcl/data.py). */
  control_tools?: BfclTool[];
  involved_classes?: string[];
  long_context?: boolean;
  /** A reference solution, per user turn: the calls. */
  expert: BfclCall[][];
}

/** Entries that no output can pass (their possible answer contradicts their function doc); see bfcl/mcp_gym_bfcl/data.py. */
export const BFCL_UNPASSABLE: ReadonlySet<string> = new Set([
  'simple_java_36',
  'simple_java_65',
  'simple_java_64',
  'live_simple_106-63-0',
  'live_simple_112-68-0',
  'live_multiple_507-149-4',
  'live_multiple_862-181-3',
  'live_multiple_964-207-0',
]);

export class UnknownBfclCategoryError extends Error {
  override name = 'UnknownBfclCategoryError';
}

/** The categories a suite name stands for (`bfcl`, `bfcl:all`, `bfcl:<group>`, `bfcl:<category>`, or several joined by '+'). */
export function bfclCategories(suite: string): string[] {
  const rest = suite === 'bfcl' ? 'all' : suite.replace(/^bfcl:/, '');
  const out: string[] = [];
  for (const part of rest.split('+')) {
    const cats = BFCL_GROUPS[part] ?? (BFCL_CATEGORIES.includes(part) ? [part] : undefined);
    if (!cats) {
      const why = BFCL_LEFT_OUT[part] ? ` (left out: ${BFCL_LEFT_OUT[part]})` : '';
      throw new UnknownBfclCategoryError(
        `Unknown BFCL category '${part}'${why}. Categories: ${BFCL_CATEGORIES.join(', ')}; groups: ${Object.keys(BFCL_GROUPS)
          .map((g) => `bfcl:${g}`)
          .join(', ')}`,
      );
    }
    for (const c of cats) if (!out.includes(c)) out.push(c);
  }
  return out;
}

const loaded = new Map<string, BfclEntry[]>();

/** The export file of a category (made when missing). */
export function bfclExportFile(category: string): string {
  const file = join(bfclCacheDir(), `export-${BFCL_VERSION}-v2`, `${category}.jsonl`);
  if (!existsSync(file)) {
    bfclCategories(`bfcl:${category}`);
    try {
      execFileSync(bfclPython(), ['-m', 'mcp_gym_bfcl', 'export', '--category', category, '--out', file], {
        env: bfclEnv(),
        stdio: ['ignore', 'ignore', 'pipe'],
        encoding: 'utf8',
      });
    } catch (err) {
      const stderr = String((err as { stderr?: unknown }).stderr ?? '').trim();
      throw new Error(`exporting BFCL category ${category} failed: ${stderr.split('\n').slice(-3).join(' ') || (err as Error).message}`);
    }
  }
  return file;
}

/** A category's entries, in BFCL's order. */
export function bfclEntries(category: string): BfclEntry[] {
  let entries = loaded.get(category);
  if (!entries) {
    const file = bfclExportFile(category);
    entries = readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as BfclEntry);
    loaded.set(category, entries);
  }
  return entries;
}

/** The category of an entry id (`live_simple_12-3-0` -> live_simple), as BFCL reads it. */
export function bfclCategoryOf(id: string): string {
  const cat = [...BFCL_CATEGORIES].sort((a, b) => b.length - a.length).find((c) => id.startsWith(`${c}_`));
  if (!cat) throw new UnknownBfclCategoryError(`'${id}' is not the id of an entry of a BFCL category mcp-gym serves`);
  return cat;
}

export function bfclEntry(category: string, id: string): BfclEntry {
  const e = bfclEntries(category).find((x) => x.id === id);
  if (!e) throw new Error(`no entry '${id}' in BFCL category ${category}`);
  return e;
}
