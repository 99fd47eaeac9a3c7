import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport } from '@modelcontextprotocol/server';
import { EPISODE_META_KEY, serverFactory } from '../../servers/common.ts';
import { mulberry32 } from '../../lib/index.ts';
import { buildCorpus, CORPUS, CORPUS_SEED, docById, FACT_NAMES, type Doc } from '../../servers/corpus.ts';
import { Bm25Index, searchServer, snippet, tokenize } from '../../servers/search.ts';

interface Hit {
  id: string;
  title: string;
  score: number;
  snippet: string;
}
interface SearchOut {
  query: string;
  hits: Hit[];
}
type CallResult = Awaited<ReturnType<Client['callTool']>>;

const textOf = (r: CallResult): string => {
  const first = r.content[0];
  return first?.type === 'text' ? first.text : '';
};

describe('corpus', () => {
  it('has between 300 and 500 documents with unique ids and titles', () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(300);
    expect(CORPUS.length).toBeLessThanOrEqual(500);
    expect(new Set(CORPUS.map((d) => d.id)).size).toBe(CORPUS.length);
    expect(new Set(CORPUS.map((d) => d.title.toLowerCase())).size).toBe(CORPUS.length);
    for (const d of CORPUS) expect(d.id).toMatch(new RegExp(`^${d.kind}-\\d{3}$`));
  });

  it('is deterministic: building it twice gives identical documents, another seed others', () => {
    expect(buildCorpus()).toEqual(CORPUS);
    expect(buildCorpus(CORPUS_SEED)).toEqual(buildCorpus(CORPUS_SEED));
    expect(buildCorpus(CORPUS_SEED + 1).map((d) => d.title)).not.toEqual(CORPUS.map((d) => d.title));
  });

  it('has every fact verbatim in its text, the documented fact names and 2 to 5 sentences', () => {
    for (const d of CORPUS) {
      for (const [name, value] of Object.entries(d.facts)) {
        expect(d.text, `${d.id}.${name}`).toContain(String(value));
        expect(FACT_NAMES[d.kind]).toContain(name);
      }
      const required = FACT_NAMES[d.kind].filter((n) => n !== 'known_for');
      expect(Object.keys(d.facts)).toEqual(expect.arrayContaining(required));
      const sentences = d.text.split(/(?<=[.!?])\s+/);
      expect(sentences.length, d.id).toBeGreaterThanOrEqual(2);
      expect(sentences.length, d.id).toBeLessThanOrEqual(5);
    }
  });

  it('has consistent cross references', () => {
    const byTitle = new Map(CORPUS.map((d) => [d.title, d]));
    const ref = (title: unknown, kind: string): Doc => {
      const d = byTitle.get(String(title));
      expect(d?.kind, `${String(title)} should be a ${kind}`).toBe(kind);
      return d!;
    };
    for (const d of CORPUS) {
      const f = d.facts;
      if (d.kind === 'city') {
        ref(f.country, 'country');
        const mayor = ref(f.mayor, 'person');
        expect(mayor.facts).toMatchObject({ profession: 'mayor', city: d.title });
        expect(ref(f.twin, 'city').facts.twin).toBe(d.title);
      } else if (d.kind === 'country') {
        expect(ref(f.capital, 'city').facts.country).toBe(d.title);
      } else if (d.kind === 'person') {
        ref(f.city, 'city');
      } else if (d.kind === 'element') {
        const chemist = ref(f.discoverer, 'person');
        expect(chemist.facts.profession).toBe('chemist');
        expect(Number(f.discovered) - Number(chemist.facts.born)).toBeGreaterThanOrEqual(20);
      } else {
        ref(f.headquarters, 'city');
        const founder = ref(f.founder, 'person');
        expect(Number(f.founded) - Number(founder.facts.born)).toBeGreaterThanOrEqual(18);
      }
    }
    const kinds = new Set(CORPUS.map((d) => d.kind));
    expect([...kinds].sort()).toEqual(Object.keys(FACT_NAMES).sort());
    expect(new Set(CORPUS.filter((d) => d.kind === 'element').map((d) => d.facts.symbol)).size).toBe(CORPUS.filter((d) => d.kind === 'element').length);
  });

  it('docById finds documents and only those', () => {
    const d = CORPUS[123]!;
    expect(docById(d.id)).toBe(d);
    expect(docById('city-999')).toBeUndefined();
  });

  it('mulberry32 is deterministic and gives floats in [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    for (const x of xs) expect(x >= 0 && x < 1).toBe(true);
    expect(mulberry32(43)()).not.toBe(mulberry32(42)());
  });
});

describe('BM25', () => {
  // Terms (title, then text): d1 = alpha river river stone (4), d2 = beta river (2), d3 = gamma stone field (3).
  const tiny = [
    { id: 'd1', title: 'Alpha', text: 'The river, the river and a stone.' },
    { id: 'd2', title: 'Beta', text: 'River!' },
    { id: 'd3', title: 'Gamma', text: 'Stone field' },
  ];
  const index = new Bm25Index(tiny);
  // N = 3, avgdl = 3, k1 = 1.2, b = 0.75.
  const idf2 = Math.log(1 + (3 - 2 + 0.5) / (2 + 0.5)); // df = 2: ln 1.6
  const idf1 = Math.log(1 + (3 - 1 + 0.5) / (1 + 0.5)); // df = 1: ln(8/3)
  const part = (tf: number, dl: number) => (tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * dl) / 3));

  it('tokenizes: lowercase, unicode-aware, stop words dropped', () => {
    expect(tokenize('The River, the river and a stone.')).toEqual(['river', 'river', 'stone']);
    expect(tokenize('Zürich-Straße 12 was ÉTÉ')).toEqual(['zürich', 'straße', '12', 'été']);
    expect(tokenize('the of and')).toEqual([]);
  });

  it('scores match a hand computation', () => {
    expect(index.avgLength).toBe(3);
    expect(index.idf('river')).toBeCloseTo(Math.log(1.6), 12);
    const river = index.search('river');
    expect(river.map((h) => h.doc.id)).toEqual(['d1', 'd2']);
    expect(river[0]!.score).toBeCloseTo(idf2 * (4.4 / 3.5), 12); // tf 2, dl 4
    expect(river[1]!.score).toBeCloseTo(idf2 * (2.2 / 1.9), 12); // tf 1, dl 2
    expect(river[0]!.score).toBeCloseTo(0.590862, 5);
    expect(river[1]!.score).toBeCloseTo(0.544215, 5);

    const both = index.search('river stone');
    expect(both.map((h) => h.doc.id)).toEqual(['d1', 'd2', 'd3']);
    expect(both[0]!.score).toBeCloseTo(idf2 * part(2, 4) + idf2 * part(1, 4), 12);
    expect(both[2]!.score).toBeCloseTo(idf2 * part(1, 3), 12);

    const gamma = index.search('GAMMA');
    expect(gamma).toHaveLength(1);
    expect(gamma[0]!.score).toBeCloseTo(idf1 * part(1, 3), 12);
  });

  it('counts repeated query terms once, ignores unknown terms and honours k', () => {
    expect(index.search('river river')).toEqual(index.search('river'));
    expect(index.search('river zebra')).toEqual(index.search('river'));
    expect(index.search('zebra')).toEqual([]);
    expect(index.search('river stone', 1).map((h) => h.doc.id)).toEqual(['d1']);
  });

  it('breaks ties by id and rejects duplicate ids', () => {
    const twins = new Bm25Index([
      { id: 'b', title: 'Same', text: 'words here' },
      { id: 'a', title: 'Same', text: 'words here' },
      { id: 'c', title: 'Other', text: 'nothing' },
    ]);
    expect(twins.search('same words').map((h) => h.doc.id)).toEqual(['a', 'b']);
    expect(() => new Bm25Index([tiny[0]!, tiny[0]!])).toThrow(/duplicate document id 'd1'/);
  });

  it('snippets pick the sentence with the most query terms', () => {
    expect(snippet('One river. Two stone river. Three.', ['stone', 'river'])).toBe('Two stone river.');
    expect(snippet('One river. Two stone river.', ['nothing'])).toBe('One river.');
  });
});

describe('search server over MCP', () => {
  const { factory, backend } = serverFactory(searchServer);
  const client = new Client({ name: 't', version: '1' });

  const call = (name: string, args: Record<string, unknown>, episode?: string): Promise<CallResult> =>
    client.callTool({ name, arguments: args, ...(episode ? { _meta: { [EPISODE_META_KEY]: episode } } : {}) });
  const search = async (args: Record<string, unknown>): Promise<SearchOut> => {
    const r = await call('search', args);
    expect(r.isError, textOf(r)).toBeFalsy();
    return r.structuredContent as SearchOut;
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

  it('lists read-only search and open tools with output schemas', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['open', 'search']);
    for (const t of tools) {
      expect(t.annotations?.readOnlyHint).toBe(true);
      expect(t.outputSchema).toBeDefined();
    }
  });

  it('returns hits sorted by score then id, 5 by default and k on request', async () => {
    const out = await search({ query: 'river' });
    expect(out.query).toBe('river');
    expect(out.hits).toHaveLength(5);
    const many = await search({ query: 'river city', k: 50 });
    expect(many.hits).toHaveLength(50);
    for (let i = 1; i < many.hits.length; i++) {
      const [p, h] = [many.hits[i - 1]!, many.hits[i]!];
      expect(p.score > h.score || (p.score === h.score && p.id < h.id)).toBe(true);
    }
    for (const h of many.hits) {
      expect(docById(h.id)?.title).toBe(h.title);
      expect(docById(h.id)?.text).toContain(h.snippet);
    }
  });

  it('ranks a document first when searching its exact title (for at least 95% of documents)', async () => {
    let first = 0;
    for (const d of CORPUS) {
      const out = await search({ query: d.title, k: 1 });
      if (out.hits[0]?.id === d.id) first++;
    }
    expect(first / CORPUS.length).toBeGreaterThanOrEqual(0.95);
  });

  it('finds a fact-bearing snippet', async () => {
    const city = CORPUS.find((d) => d.kind === 'city')!;
    const out = await search({ query: `${city.title} river`, k: 3 });
    expect(out.hits[0]!.id).toBe(city.id);
    expect(out.hits[0]!.snippet).toContain(`${city.facts.river} River`);
  });

  it('gives the same results in every episode (stateless)', async () => {
    const [a, b] = await Promise.all([call('search', { query: 'chemical element' }, 'ep-1'), call('search', { query: 'chemical element' }, 'ep-2')]);
    expect(a.structuredContent).toEqual(b.structuredContent);
  });

  it('returns an empty list when nothing matches', async () => {
    expect((await search({ query: 'xyzzyplugh' })).hits).toEqual([]);
  });

  it('open round-trips search hits', async () => {
    for (const d of [CORPUS[0]!, CORPUS[150]!, CORPUS[CORPUS.length - 1]!]) {
      const hit = (await search({ query: d.title, k: 1 })).hits[0]!;
      const r = await call('open', { id: hit.id });
      expect(r.isError).toBeFalsy();
      expect(r.structuredContent).toEqual({ id: d.id, title: d.title, text: d.text });
      expect(JSON.parse(textOf(r))).toEqual({ id: d.id, title: d.title, text: d.text });
    }
  });

  it('reports errors as isError results with clear text', async () => {
    const noTerms = await call('search', { query: 'the of and ?!' });
    expect(noTerms.isError).toBe(true);
    expect(textOf(noTerms)).toMatch(/no searchable words/);

    const unknown = await call('open', { id: 'city-999' });
    expect(unknown.isError).toBe(true);
    expect(textOf(unknown)).toMatch(/^No document with id 'city-999'; did you mean 'city-099'/);

    const byTitle = CORPUS[5]!;
    const titled = await call('open', { id: byTitle.title.toUpperCase() });
    expect(textOf(titled)).toContain(`did you mean '${byTitle.id}' (${byTitle.title})`);

    const nonsense = await call('open', { id: 'nothing-like-it' });
    expect(nonsense.isError).toBe(true);
    expect(textOf(nonsense)).toBe("No document with id 'nothing-like-it'; use search to find document ids");

    const invalid: [Record<string, unknown>, RegExp][] = [
      [{ query: '' }, /query must not be empty/],
      [{ query: 'river', k: 51 }, /k: too big/i],
      [{ query: 'river', k: 0 }, /k: too small/i],
    ];
    for (const [args, message] of invalid) {
      const bad = await call('search', args);
      expect(bad.isError, JSON.stringify(args)).toBe(true);
      expect(textOf(bad)).toMatch(message);
    }
    const emptyId = await call('open', { id: '' });
    expect(emptyId.isError).toBe(true);
    expect(textOf(emptyId)).toMatch(/id must not be empty/);
  });
});
