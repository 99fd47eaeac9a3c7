/**
 * `search`: BM25 search over a bundled, read-only encyclopedia of fictional documents (see
 * `corpus.ts`). The index is built once per process and shared by every episode; nothing a call
 * does changes any state.
 *
 * Scoring is Okapi BM25 with k1 = 1.2, b = 0.75 and idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)).
 * A document's terms are those of its title followed by those of its text; a query's terms are
 * counted once each. Terms: lowercased (after NFKC), split on anything that is not a letter, mark
 * or digit (Unicode-aware), minus a small list of stop words.
 */
import { z } from 'zod';
import { defineServer, defineTool, ToolError, type Backend } from './common.ts';
import { CORPUS, type Doc } from './corpus.ts';

export const STOP_WORDS: ReadonlySet<string> = new Set([
  'a',
  'an',
  'and',
  'are',
  'as',
  'at',
  'be',
  'but',
  'by',
  'did',
  'do',
  'does',
  'for',
  'from',
  'had',
  'has',
  'have',
  'he',
  'her',
  'his',
  'how',
  'i',
  'if',
  'in',
  'into',
  'is',
  'it',
  'its',
  'of',
  'on',
  'or',
  's',
  'she',
  'so',
  'than',
  'that',
  'the',
  'their',
  'them',
  'then',
  'there',
  'these',
  'they',
  'this',
  'to',
  'was',
  'were',
  'what',
  'when',
  'where',
  'which',
  'who',
  'whom',
  'why',
  'will',
  'with',
]);

/** The index terms of a text, in order (repeats kept). */
export function tokenize(text: string): string[] {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .split(/[^\p{L}\p{M}\p{N}]+/u)
    .filter((t) => t.length > 0 && !STOP_WORDS.has(t));
}

export interface IndexableDoc {
  id: string;
  title: string;
  text: string;
}

export interface Bm25Options {
  k1?: number;
  b?: number;
}

/** An in-memory BM25 index over any documents with an id, a title and a text. */
export class Bm25Index<D extends IndexableDoc = IndexableDoc> {
  readonly k1: number;
  readonly b: number;
  readonly avgLength: number;
  private readonly postings = new Map<string, { doc: number; tf: number }[]>();
  private readonly lengths: number[] = [];
  private readonly byId = new Map<string, D>();

  constructor(
    readonly docs: readonly D[],
    options: Bm25Options = {},
  ) {
    this.k1 = options.k1 ?? 1.2;
    this.b = options.b ?? 0.75;
    docs.forEach((d, i) => {
      if (this.byId.has(d.id)) throw new Error(`Bm25Index: duplicate document id '${d.id}'`);
      this.byId.set(d.id, d);
      const terms = tokenize(`${d.title}\n${d.text}`);
      this.lengths.push(terms.length);
      const tf = new Map<string, number>();
      for (const t of terms) tf.set(t, (tf.get(t) ?? 0) + 1);
      for (const [t, n] of tf) {
        let list = this.postings.get(t);
        if (!list) this.postings.set(t, (list = []));
        list.push({ doc: i, tf: n });
      }
    });
    this.avgLength = docs.length === 0 ? 0 : this.lengths.reduce((s, n) => s + n, 0) / docs.length;
  }

  get size(): number {
    return this.docs.length;
  }

  get(id: string): D | undefined {
    return this.byId.get(id);
  }

  /** The distinct terms of a query, in order of first appearance. */
  queryTerms(query: string): string[] {
    return [...new Set(tokenize(query))];
  }

  /** How many documents contain a term. */
  df(term: string): number {
    return this.postings.get(term)?.length ?? 0;
  }

  idf(term: string): number {
    const df = this.df(term);
    return Math.log(1 + (this.docs.length - df + 0.5) / (df + 0.5));
  }

  /**
   * The best `k` documents for a query, by score (descending), ties by id; documents that match
   * no query term are left out.
   */
  search(query: string, k = 10): { doc: D; score: number }[] {
    const scores = new Map<number, number>();
    for (const term of this.queryTerms(query)) {
      const list = this.postings.get(term);
      if (!list) continue;
      const idf = this.idf(term);
      for (const { doc, tf } of list) {
        const norm = 1 - this.b + (this.b * this.lengths[doc]!) / this.avgLength;
        scores.set(doc, (scores.get(doc) ?? 0) + (idf * tf * (this.k1 + 1)) / (tf + this.k1 * norm));
      }
    }
    return [...scores]
      .map(([doc, score]) => ({ doc: this.docs[doc]!, score }))
      .sort((x, y) => y.score - x.score || compare(x.doc.id, y.doc.id))
      .slice(0, Math.max(0, k));
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

const SNIPPET_MAX = 200;

/** The sentence of `text` that holds the most distinct query terms (the first one on ties), trimmed. */
export function snippet(text: string, terms: readonly string[]): string {
  const wanted = new Set(terms);
  let best = '';
  let bestHits = -1;
  for (const sentence of text.split(/(?<=[.!?])\s+/)) {
    const hits = new Set(tokenize(sentence).filter((t) => wanted.has(t))).size;
    if (hits > bestHits) {
      best = sentence;
      bestHits = hits;
    }
  }
  return best.length <= SNIPPET_MAX ? best : `${best.slice(0, SNIPPET_MAX - 1).trimEnd()}…`;
}

/** Levenshtein distance, for suggesting ids close to a mistyped one. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur.push(Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/** Up to three ids the agent may have meant: a document titled `id`, then ids at most 2 edits away. */
function closeIds(index: Bm25Index<Doc>, id: string): string[] {
  const wanted = id.trim().toLowerCase();
  const byTitle = index.docs.filter((d) => d.title.toLowerCase() === wanted).map((d) => d.id);
  const byEdits = index.docs
    .map((d) => ({ id: d.id, dist: editDistance(wanted, d.id) }))
    .filter((x) => x.dist <= 2)
    .sort((x, y) => x.dist - y.dist || compare(x.id, y.id))
    .map((x) => x.id);
  return [...new Set([...byTitle, ...byEdits])].slice(0, 3);
}

let shared: Bm25Index<Doc> | undefined;

/** The index of the bundled corpus, built on first use and then shared by the whole process. */
export function corpusIndex(): Bm25Index<Doc> {
  return (shared ??= new Bm25Index(CORPUS));
}

interface SearchState {
  index: Bm25Index<Doc>;
}

const MAX_K = 50;

const tools = [
  defineTool({
    name: 'search',
    description:
      'Search the encyclopedia (fictional countries, cities, people, chemical elements and companies) by keywords, ranked by BM25. ' +
      'Returns the best hits with their id, title, score and the sentence that best matches; use `open` with an id to read a whole document.',
    input: z.object({
      query: z
        .string()
        .min(1, 'query must not be empty')
        .max(1000, 'query must be at most 1000 characters')
        .describe('Keywords to search for, e.g. a name or "river founded"'),
      k: z.number().int().min(1).max(MAX_K).default(5).describe(`How many hits to return (at most ${MAX_K})`),
    }),
    output: z.object({
      query: z.string(),
      hits: z.array(z.object({ id: z.string(), title: z.string(), score: z.number(), snippet: z.string() })),
    }),
    readOnly: true,
    run: ({ query, k }, { index }: SearchState) => {
      const terms = index.queryTerms(query);
      if (terms.length === 0) {
        throw new ToolError(
          `search: the query ${JSON.stringify(query.slice(0, 100))} has no searchable words (only stop words or punctuation); use names or other keywords`,
        );
      }
      const hits = index
        .search(query, k)
        .map(({ doc, score }) => ({ id: doc.id, title: doc.title, score: Math.round(score * 1e4) / 1e4, snippet: snippet(doc.text, terms) }))
        // Scores are shown rounded; keep ties (after rounding) in id order.
        .sort((x, y) => y.score - x.score || compare(x.id, y.id));
      return { query, hits };
    },
  }),
  defineTool({
    name: 'open',
    description: 'Read a whole document by its id (as returned by `search`, e.g. "city-017").',
    input: z.object({ id: z.string().min(1, 'id must not be empty').max(200, 'id must be at most 200 characters').describe('The document id') }),
    output: z.object({ id: z.string(), title: z.string(), text: z.string() }),
    readOnly: true,
    run: ({ id }, { index }: SearchState) => {
      const doc = index.get(id);
      if (!doc) {
        const close = closeIds(index, id);
        const hint = close.length > 0 ? `did you mean ${close.map((c) => `'${c}' (${index.get(c)!.title})`).join(', ')}?` : 'use search to find document ids';
        throw new ToolError(`No document with id '${id.slice(0, 200)}'; ${hint}`);
      }
      return { id: doc.id, title: doc.title, text: doc.text };
    },
  }),
];

export const searchServer = defineServer<SearchState>({
  name: 'search',
  version: '0.1.0',
  description: `A read-only encyclopedia of ${CORPUS.length} fictional documents (countries, cities, people, chemical elements, companies) with BM25 search. Tools: search, open.`,
  isolation: 'none needed: the corpus is fixed and read-only, so every episode shares one index built once per process and no call changes any state',
  tools: tools as never,
  examples: [
    { tool: 'search', arguments: { query: 'river founded mayor', k: 3 } },
    { tool: 'open', arguments: { id: 'city-001' } },
  ],
  backend(): Backend<SearchState> {
    const state: SearchState = { index: corpusIndex() };
    return {
      episode: () => state,
      release: () => {},
      close: () => {},
    };
  },
});
