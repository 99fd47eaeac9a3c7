/**
 * `search`: questions on the bundled encyclopedia, answered from the documents' structured facts.
 * A question starts at a named document and may follow references (a city's twin, its mayor, a
 * company's founder, ...) before asking for a fact: no hop at difficulty 1-2, one at 3, two at 4,
 * three at 5. The reference solution searches each document of the chain by its title and opens
 * it. Questions are split by their starting document, so eval entities never start a train question.
 */
import { corpusIndex, CORPUS, type Doc, type DocKind } from '../../../servers/index.ts';
import type { TaskCall } from '../task.ts';
import { call, entityKey, splitOf, type MatcherInput, type Sampler, type Split } from './common.ts';

/** Where a fact of a kind leads: the kind of document its value is the title of. */
const LINKS: Partial<Record<DocKind, Record<string, DocKind>>> = {
  city: { twin: 'city', mayor: 'person', country: 'country' },
  country: { capital: 'city' },
  person: { city: 'city' },
  element: { discoverer: 'person' },
  company: { founder: 'person', headquarters: 'city' },
};

const byTitle = new Map<string, Doc>();
for (const d of CORPUS) byTitle.set(`${d.kind}:${d.title}`, d);

function follow(doc: Doc, fact: string): Doc | undefined {
  const kind = LINKS[doc.kind]?.[fact];
  const value = doc.facts[fact];
  return kind && value !== undefined ? byTitle.get(`${kind}:${value}`) : undefined;
}

const queries = new Map<string, string>();

/** A query whose top 5 hits (the `search` tool's default) include the document. */
export function queryFor(doc: Doc): string {
  let q = queries.get(doc.id);
  if (q === undefined) {
    const index = corpusIndex();
    q = [doc.title, `${doc.title} ${doc.kind}`].find((text) => index.search(text, 5).some((h) => h.doc.id === doc.id));
    if (q === undefined) throw new Error(`no query finds ${doc.id}`);
    queries.set(doc.id, q);
  }
  return q;
}

/** How a document is named in a question. */
function named(doc: Doc): string {
  switch (doc.kind) {
    case 'person':
      return doc.title;
    default:
      return `the ${doc.kind} ${doc.title}`;
  }
}

/** How the document reached by a hop is named, from the phrase of the one before. */
function hopPhrase(fact: string, from: string): string {
  switch (fact) {
    case 'twin':
      return `the twin city of ${from}`;
    case 'mayor':
      return `the mayor of ${from}`;
    case 'country':
      return `the country of ${from}`;
    case 'capital':
      return `the capital of ${from}`;
    case 'city':
      return `the birthplace of ${from}`;
    case 'discoverer':
      return `the discoverer of ${from}`;
    case 'founder':
      return `the founder of ${from}`;
    case 'headquarters':
      return `the headquarters city of ${from}`;
    default:
      throw new Error(`no hop phrase for ${fact}`);
  }
}

type AnswerKind = 'year' | 'number' | 'name' | 'river';

/** The question asking for a fact of the document `ref` names, and the kind of its answer. */
function factQuestion(kind: DocKind, fact: string, ref: string): { question: string; answer: AnswerKind } | undefined {
  const key = `${kind}.${fact}`;
  switch (key) {
    case 'city.founded':
    case 'company.founded':
      return { question: `In which year was ${ref} founded?`, answer: 'year' };
    case 'country.established':
      return { question: `In which year was ${ref} established?`, answer: 'year' };
    case 'person.born':
      return { question: `In which year was ${ref} born?`, answer: 'year' };
    case 'element.discovered':
      return { question: `In which year was ${ref} discovered?`, answer: 'year' };
    case 'city.population':
      return { question: `What is the population of ${ref}?`, answer: 'number' };
    case 'company.employees':
      return { question: `How many people does ${ref} employ?`, answer: 'number' };
    case 'element.weight':
      return { question: `What is the atomic weight of ${ref}?`, answer: 'number' };
    case 'city.river':
      return { question: `On which river does ${ref} lie?`, answer: 'river' };
    case 'city.mayor':
      return { question: `Who is the mayor of ${ref}?`, answer: 'name' };
    case 'city.country':
      return { question: `In which country is ${ref}?`, answer: 'name' };
    case 'city.twin':
      return { question: `Which city is the twin city of ${ref}?`, answer: 'name' };
    case 'country.capital':
      return { question: `What is the capital of ${ref}?`, answer: 'name' };
    case 'country.currency':
      return { question: `What is the currency of ${ref}?`, answer: 'name' };
    case 'country.language':
      return { question: `What is the official language of ${ref}?`, answer: 'name' };
    case 'person.profession':
      return { question: `What is the profession of ${ref}?`, answer: 'name' };
    case 'person.city':
      return { question: `In which city was ${ref} born?`, answer: 'name' };
    case 'element.symbol':
      return { question: `What is the chemical symbol of ${ref}?`, answer: 'name' };
    case 'element.discoverer':
      return { question: `Who discovered ${ref}?`, answer: 'name' };
    case 'company.founder':
      return { question: `Who founded ${ref}?`, answer: 'name' };
    case 'company.headquarters':
      return { question: `In which city is ${ref} headquartered?`, answer: 'name' };
    default:
      return undefined;
  }
}

const HINTS: Record<AnswerKind, string> = {
  year: 'Answer with the year only.',
  number: 'Answer with the number only.',
  name: 'Answer with the name only.',
  river: 'Answer with the name of the river only.',
};

interface Template {
  kind: DocKind;
  hops: string[];
  fact: string;
}

const T = (kind: DocKind, path: string): Template => {
  const parts = path.split('.');
  return { kind, hops: parts.slice(0, -1), fact: parts[parts.length - 1]! };
};

/** The question templates of each difficulty. */
const LEVELS: Record<number, Template[]> = {
  1: [T('city', 'founded'), T('country', 'established'), T('element', 'symbol'), T('person', 'born'), T('company', 'founded')],
  2: [
    T('city', 'population'),
    T('city', 'river'),
    T('city', 'mayor'),
    T('city', 'country'),
    T('city', 'twin'),
    T('country', 'capital'),
    T('country', 'currency'),
    T('country', 'language'),
    T('element', 'discovered'),
    T('element', 'discoverer'),
    T('element', 'weight'),
    T('company', 'founder'),
    T('company', 'headquarters'),
    T('company', 'employees'),
    T('person', 'profession'),
    T('person', 'city'),
  ],
  3: [
    T('city', 'twin.mayor'),
    T('city', 'twin.founded'),
    T('city', 'mayor.born'),
    T('city', 'country.capital'),
    T('country', 'capital.mayor'),
    T('country', 'capital.population'),
    T('element', 'discoverer.born'),
    T('element', 'discoverer.city'),
    T('company', 'founder.born'),
    T('company', 'headquarters.country'),
    T('company', 'headquarters.mayor'),
  ],
  4: [
    T('city', 'twin.mayor.born'),
    T('city', 'twin.country.currency'),
    T('city', 'country.capital.founded'),
    T('company', 'founder.city.mayor'),
    T('company', 'headquarters.twin.river'),
    T('element', 'discoverer.city.country'),
    T('country', 'capital.twin.mayor'),
  ],
  5: [
    T('city', 'country.capital.mayor.born'),
    T('city', 'twin.country.capital.river'),
    T('company', 'headquarters.twin.mayor.born'),
    T('element', 'discoverer.city.country.currency'),
    T('company', 'founder.city.twin.founded'),
    T('country', 'capital.twin.country.language'),
  ],
};

export interface Chain {
  template: string;
  /** The documents the solution searches and opens, in order. */
  docs: Doc[];
  question: string;
  hint: string;
  answerKind: AnswerKind;
  answer: string;
}

/** The question of a template from a starting document, or undefined (a broken or looping chain, a mayor's birthplace). */
export function chainFrom(start: Doc, t: Template): Chain | undefined {
  if (start.kind !== t.kind) return undefined;
  const docs = [start];
  let ref = named(start);
  let doc = start;
  for (const hop of t.hops) {
    if (hop === 'city' && doc.facts.profession === 'mayor') return undefined; // a mayor's city is not a birthplace
    const next = follow(doc, hop);
    if (!next || docs.includes(next)) return undefined;
    ref = hopPhrase(hop, ref);
    docs.push(next);
    doc = next;
  }
  if (t.fact === 'city' && doc.facts.profession === 'mayor') return undefined;
  const value = doc.facts[t.fact];
  const q = factQuestion(doc.kind, t.fact, ref);
  if (value === undefined || !q) return undefined;
  const question = q.question.charAt(0).toUpperCase() + q.question.slice(1);
  return { template: `${t.kind}.${[...t.hops, t.fact].join('.')}`, docs, question, hint: HINTS[q.answer], answerKind: q.answer, answer: String(value) };
}

/** The calls that find and read every document of a chain. */
export function chainCalls(chain: Chain, alias = 'search'): TaskCall[] {
  return chain.docs.flatMap((d) => [call(alias, 'search', { query: queryFor(d) }), call(alias, 'open', { id: d.id })]);
}

/** The matcher of a chain's answer (rivers may be named with or without "River"). */
export function chainMatcher(chain: Chain): MatcherInput {
  if (chain.answerKind === 'year' || chain.answerKind === 'number') return { kind: 'number', value: chain.answer };
  if (chain.answerKind === 'river') return { kind: 'regex', value: `^\\s*(the\\s+)?${chain.answer}(\\s+river)?\\s*\\.?\\s*$`, flags: 'i' };
  return { kind: 'exact', value: chain.answer, ignore_case: true };
}

const pools = new Map<string, Chain[]>();

/** Every question of a difficulty whose starting document is in the split. */
export function searchPool(difficulty: number, split: Split): Chain[] {
  const key = `${difficulty}/${split}`;
  let pool = pools.get(key);
  if (!pool) {
    pool = [];
    for (const t of LEVELS[difficulty]!) {
      for (const doc of CORPUS) {
        if (doc.kind !== t.kind || splitOf([entityKey(doc.id)]) !== split) continue;
        const chain = chainFrom(doc, t);
        if (chain) pool.push(chain);
      }
    }
    pools.set(key, pool);
  }
  return pool;
}

export const searchSampler: Sampler = (rng, difficulty, split) => {
  // Templates first, then a start: every template is as likely, whatever its number of starts.
  const pool = searchPool(difficulty, split);
  const templates = [...new Set(pool.map((c) => c.template))];
  if (templates.length === 0) return undefined;
  const t = rng.pick(templates);
  const chain = rng.pick(pool.filter((c) => c.template === t));
  return {
    family: chain.docs.length === 1 ? 'search.lookup' : 'search.multihop',
    params: { question: chain.template, start: chain.docs[0]!.id },
    splitKeys: [entityKey(chain.docs[0]!.id)],
    prompt: `Use search and open to answer: ${chain.question} ${chain.hint}`,
    servers: { search: 'search' },
    checks: [{ kind: 'answer', expect: chainMatcher(chain) }],
    solution: { calls: chainCalls(chain), answer: chain.answer },
  };
};

export const searchSuite = {
  name: 'search',
  description:
    'Questions on the bundled encyclopedia (cities, countries, people, elements, companies): one lookup at difficulty 1-2, then chains of one to three references (twin city, mayor, founder, capital, ...).',
  families: ['search.lookup', 'search.multihop'],
  servers: ['search'],
  sampler: searchSampler,
};
