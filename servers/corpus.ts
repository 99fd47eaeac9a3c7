/**
 * The bundled corpus of the `search` server: a fictional encyclopedia generated deterministically
 * from `CORPUS_SEED` with a small seeded PRNG (no file to ship, the same documents on every machine).
 *
 * Kinds and their facts (every fact value appears verbatim, as `String(value)`, in its doc's text):
 * - country (`country-NNN`): established (year), capital (a city title), currency, language
 * - city (`city-NNN`): country (a country title), founded (year), population, river (the name
 *   without "River"), mayor (a person title), twin (a city title; twinning is symmetric)
 * - person (`person-NNN`): born (year), city (a city title), profession; people who are neither
 *   mayors nor chemists also have known_for (the title of a work or feat)
 * - element (`element-NNN`): symbol, discovered (year), discoverer (a person title, a chemist),
 *   weight (atomic weight), state (solid, liquid or gas)
 * - company (`company-NNN`): industry, founded (year), founder (a person title), headquarters
 *   (a city title), employees
 *
 * Cross references are consistent: a city's mayor is a person whose profession is mayor and whose
 * city is that city; a country's capital is one of its cities; an element's discoverer is a chemist
 * born well before the discovery; a company's founder was an adult when it was founded.
 *
 * Distractors, so that search is not trivial: some cities have near-namesakes (a spelling variant,
 * or "New X", "Upper X" ... on the same river in the same country); about half of the companies
 * carry their founder's surname, a few carry a city's name; people share first names and surnames.
 */
import { SeededRandom } from '../lib/index.ts';

export type DocKind = 'country' | 'city' | 'person' | 'element' | 'company';

export interface Doc {
  id: string;
  title: string;
  kind: DocKind;
  /** 2 to 5 sentences. */
  text: string;
  /** The structured truth behind the text, for generating questions. */
  facts: Record<string, string | number>;
}

/** The fact names of each kind (`known_for` only on people who are neither mayors nor chemists). */
export const FACT_NAMES: Readonly<Record<DocKind, readonly string[]>> = {
  country: ['established', 'capital', 'currency', 'language'],
  city: ['country', 'founded', 'population', 'river', 'mayor', 'twin'],
  person: ['born', 'city', 'profession', 'known_for'],
  element: ['symbol', 'discovered', 'discoverer', 'weight', 'state'],
  company: ['industry', 'founded', 'founder', 'headquarters', 'employees'],
};

export const CORPUS_SEED = 0x5eed_2024;

const ONSETS = ['b', 'br', 'c', 'd', 'dr', 'f', 'g', 'gr', 'h', 'k', 'kr', 'l', 'm', 'n', 'p', 'r', 's', 'st', 't', 'th', 'v', 'z', 'sh', 'w', 'j', 'qu'];
const VOWELS = ['a', 'e', 'i', 'o', 'u', 'a', 'e', 'i', 'o', 'a', 'ei', 'ou', 'ia', 'ae'];
const CODAS = ['', '', '', 'n', 'r', 'l', 's', 'm', 'nd', 'rk', 'st', 'th', 'x', 'v'];
/** Words the generator must never produce (they would be stop words or plain English). */
const RESERVED = new Set(['the', 'and', 'new', 'port', 'upper', 'lower', 'north', 'south', 'river', 'city', 'mayor', 'works', 'labs', 'gas']);

/** Generates capitalised syllable words, never the same word twice. */
class Words {
  private readonly used = new Set<string>();

  constructor(private readonly rng: SeededRandom) {}

  claim(word: string): boolean {
    const key = word.toLowerCase();
    if (this.used.has(key) || RESERVED.has(key)) return false;
    this.used.add(key);
    return true;
  }

  word(minSyllables = 2, maxSyllables = 3, suffixes: readonly string[] = ['']): string {
    for (;;) {
      const n = this.rng.int(minSyllables, maxSyllables);
      let w = '';
      for (let i = 0; i < n; i++) w += this.rng.pick(ONSETS) + this.rng.pick(VOWELS) + (i === n - 1 ? this.rng.pick(CODAS) : '');
      const suffix = this.rng.pick(suffixes);
      // No vowel pile-up where a word ending in a vowel meets a suffix starting with one.
      if (/^[aeiou]/.test(suffix)) w = w.replace(/[aeiouy]+$/, '');
      w += suffix;
      if (w.length < 4 || w.length > 12 || /quu|ii|uu|(.)\1\1/.test(w)) continue;
      const cap = w[0]!.toUpperCase() + w.slice(1);
      if (this.claim(cap)) return cap;
    }
  }
}

interface Country {
  name: string;
  established: number;
  currency: string;
  language: string;
  capital?: City;
  cities: City[];
}

interface City {
  name: string;
  country: Country;
  founded: number;
  population: number;
  river: string;
  mayor?: Person;
  twin?: City;
  id?: string;
}

interface Person {
  name: string;
  surname: string;
  born: number;
  city: City;
  profession: string;
  knownFor?: string;
  mayorOf?: City;
  discovered: Element[];
  founded: Company[];
}

interface Element {
  name: string;
  symbol: string;
  discovered: number;
  discoverer: Person;
  weight: number;
  state: 'solid' | 'liquid' | 'gas';
}

interface Company {
  name: string;
  industry: string;
  founded: number;
  founder: Person;
  headquarters: City;
  employees: number;
}

/** How many documents of each kind the corpus holds. */
export const CORPUS_COUNTS = { country: 20, city: 100, person: 180, element: 40, company: 60 } as const;
const NEAR_NAMESAKES = 12;
const PREFIXES = ['New', 'Upper', 'Lower', 'Port', 'North', 'South'];
const CITY_SUFFIXES = ['', '', '', 'holm', 'ford', 'grad', 'mouth', 'burg', 'ton', 'vale', 'wick'];
const COUNTRY_SUFFIXES = ['ia', 'land', 'ovia', 'ara', 'eth', 'mark'];
const LANGUAGE_SUFFIXES = ['ic', 'ish', 'ese', 'an'];
const OTHER_PROFESSIONS: Record<string, readonly string[]> = {
  painter: ['Triptych', 'Harbour at Dusk', 'Portrait of a Weaver'],
  composer: ['Symphony', 'Requiem', 'Night Sonata'],
  architect: ['Bridge', 'Opera House', 'Tower'],
  engineer: ['Viaduct', 'Tunnel', 'Lighthouse'],
  explorer: ['Expedition', 'Crossing', 'Voyage'],
  physician: ['Fever Treatise', 'Clinic', 'Vaccine'],
  poet: ['Elegies', 'Songs of the Delta', 'Ballads'],
  astronomer: ['Comet', 'Star Atlas', 'Observatory'],
  sculptor: ['Colossus', 'Fountain', 'Monument'],
  entrepreneur: ['Arcade', 'Market Hall', 'Department Store'],
};
const INDUSTRIES = [
  'shipping',
  'textile',
  'optics',
  'brewing',
  'mining',
  'software',
  'railway',
  'chemicals',
  'publishing',
  'aviation',
  'clockmaking',
  'insurance',
];
const COMPANY_SUFFIXES = ['Works', 'Industries', 'Holdings', 'Labs', 'Foundry', 'Trading Company', 'Brothers', 'Mills', 'Instruments', 'Group'];

/** A spelling variant of a city name: one vowel changed, or a letter added or dropped at the end. */
function variant(rng: SeededRandom, name: string): string {
  const vowelAt = [...name].flatMap((c, i) => (i > 0 && 'aeiou'.includes(c) ? [i] : []));
  const mode = rng.int(0, 2);
  if (mode === 0 && vowelAt.length > 0) {
    const i = rng.pick(vowelAt);
    const v = rng.pick([...'aeiou'].filter((c) => c !== name[i]));
    return name.slice(0, i) + v + name.slice(i + 1);
  }
  if (mode === 1 && name.length > 5) return name.slice(0, -1) + rng.pick(['a', 'e', 'o', 'y', 'is']);
  return name + rng.pick(['a', 'e', 'en', 'er']);
}

/** Builds the corpus; the same seed always gives the same documents in the same order. */
export function buildCorpus(seed: number = CORPUS_SEED): Doc[] {
  const rng = new SeededRandom(seed);
  const words = new Words(rng);

  // Countries.
  const countries: Country[] = [];
  for (let i = 0; i < CORPUS_COUNTS.country; i++) {
    countries.push({
      name: words.word(2, 2, COUNTRY_SUFFIXES),
      established: rng.int(1150, 1960),
      currency: words.word(2, 2).toLowerCase(),
      language: words.word(2, 2, LANGUAGE_SUFFIXES),
      cities: [],
    });
  }

  // Cities, some with a near-namesake in the same country on the same river.
  const rivers = Array.from({ length: 32 }, () => words.word(2, 2));
  const cities: City[] = [];
  const newCity = (name: string, country: Country, river: string): City => {
    const city: City = { name, country, founded: rng.int(640, 1950), population: rng.logInt(1_500, 900_000), river };
    country.cities.push(city);
    cities.push(city);
    return city;
  };
  const base = CORPUS_COUNTS.city - NEAR_NAMESAKES;
  for (let i = 0; i < base; i++) {
    const country = i < countries.length ? countries[i]! : rng.pick(countries);
    newCity(words.word(2, 3, CITY_SUFFIXES), country, rng.pick(rivers));
  }
  for (const original of rng.shuffle(cities).slice(0, NEAR_NAMESAKES)) {
    let name: string;
    do {
      name = rng.chance(0.35) ? `${rng.pick(PREFIXES)} ${original.name}` : variant(rng, original.name);
    } while (!words.claim(name));
    newCity(name, original.country, original.river);
  }
  for (const country of countries) {
    const capital = country.cities[0]!;
    capital.population = Math.max(capital.population, rng.logInt(400_000, 4_000_000));
    country.capital = capital;
  }
  const cityOrder = rng.shuffle(cities);
  cityOrder.forEach((c, i) => (c.id = `city-${pad(i + 1)}`));
  const twins = rng.shuffle(cities);
  for (let i = 0; i + 1 < twins.length; i += 2) {
    twins[i]!.twin = twins[i + 1]!;
    twins[i + 1]!.twin = twins[i]!;
  }

  // People: one mayor per city, chemists (the discoverers of elements) and others.
  const firsts = Array.from({ length: 70 }, () => words.word(2, 2));
  const surnames = Array.from({ length: 110 }, () => words.word(2, 3));
  const personNames = new Set<string>();
  const people: Person[] = [];
  const newPerson = (born: number, city: City, profession: string): Person => {
    let first: string, surname: string;
    do {
      first = rng.pick(firsts);
      surname = rng.pick(surnames);
    } while (personNames.has(`${first} ${surname}`));
    const name = `${first} ${surname}`;
    personNames.add(name);
    const person: Person = { name, surname, born, city, profession, discovered: [], founded: [] };
    people.push(person);
    return person;
  };
  for (const city of cityOrder) {
    city.mayor = newPerson(rng.int(1945, 1992), city, 'mayor');
    city.mayor.mayorOf = city;
  }
  const chemists: Person[] = [];
  for (let i = 0; i < 30; i++) chemists.push(newPerson(rng.int(1740, 1940), rng.pick(cities), 'chemist'));
  const others: Person[] = [];
  const professions = Object.keys(OTHER_PROFESSIONS);
  while (people.length < CORPUS_COUNTS.person) {
    const profession = rng.pick(professions);
    const person = newPerson(rng.int(1760, 1985), rng.pick(cities), profession);
    person.knownFor = `the ${words.word(2, 2)} ${rng.pick(OTHER_PROFESSIONS[profession]!)}`;
    others.push(person);
  }

  // Elements, each discovered by a chemist (some chemists found two).
  const elements: Element[] = [];
  const symbols = new Set<string>();
  for (let i = 0; i < CORPUS_COUNTS.element; i++) {
    let name: string, symbol: string | undefined;
    do {
      name = words.word(2, 2, ['ium', 'ium', 'on', 'ine', 'ite', 'um']);
      const first = name[0]!;
      symbol = [...name.slice(1).toLowerCase()].map((c) => first + c).find((s) => !symbols.has(s));
    } while (symbol === undefined);
    symbols.add(symbol);
    const discoverer = i < chemists.length ? chemists[i]! : rng.pick(chemists);
    const state = rng.chance(0.6) ? 'solid' : rng.chance(0.4) ? 'liquid' : 'gas';
    const element: Element = {
      name,
      symbol,
      discovered: discoverer.born + rng.int(24, 58),
      discoverer,
      weight: Math.round((3 + rng.float() * 290) * 100) / 100,
      state,
    };
    discoverer.discovered.push(element);
    elements.push(element);
  }

  // Companies; about half named after their founder, a few after a city (not their headquarters).
  const companies: Company[] = [];
  const titles = new Set<string>();
  const founders = [...chemists, ...others];
  for (let i = 0; i < CORPUS_COUNTS.company; i++) {
    let founder: Person;
    do founder = rng.pick(founders);
    while (founder.founded.length >= 2 || founder.born > 1990);
    const headquarters = rng.chance(0.5) ? founder.city : rng.pick(cities);
    let name: string;
    do {
      const roll = rng.float();
      const stem =
        roll < 0.5 ? founder.surname : roll < 0.6 ? rng.pick(cities.filter((c) => c !== headquarters && !c.name.includes(' '))).name : words.word(2, 2);
      name = `${stem} ${rng.pick(COMPANY_SUFFIXES)}`;
    } while (titles.has(name));
    titles.add(name);
    const company: Company = {
      name,
      industry: rng.pick(INDUSTRIES),
      founded: Math.min(2023, founder.born + rng.int(22, 50)),
      founder,
      headquarters,
      employees: rng.logInt(12, 240_000),
    };
    founder.founded.push(company);
    companies.push(company);
  }

  // Documents.
  const docs: Doc[] = [];
  countries.forEach((c, i) => {
    const capital = c.capital!;
    const more = c.cities.filter((x) => x !== capital).map((x) => x.name);
    const sentences = [
      `${c.name} is a fictional country established in ${c.established}.`,
      rng.chance(0.5)
        ? `Its capital is ${capital.name}, its currency is the ${c.currency}, and its official language is ${c.language}.`
        : `The capital of ${c.name} is ${capital.name}. People there speak ${c.language} and pay in the ${c.currency}.`,
    ];
    if (more.length > 0) sentences.push(`Other cities of ${c.name} include ${listOf(more.slice(0, 3))}.`);
    docs.push({
      id: `country-${pad(i + 1)}`,
      title: c.name,
      kind: 'country',
      text: sentences.join(' '),
      facts: { established: c.established, capital: capital.name, currency: c.currency, language: c.language },
    });
  });
  for (const c of cityOrder) {
    const capital = c.country.capital === c;
    const sentences = rng.chance(0.5)
      ? [
          `${c.name} is a city in ${c.country.name}, founded in ${c.founded}.`,
          `It lies on the ${c.river} River and has a population of ${c.population}.`,
          `The mayor of ${c.name} is ${c.mayor!.name}, and its twin city is ${c.twin!.name}.`,
        ]
      : [
          `Founded in ${c.founded}, ${c.name} is a city of ${c.population} people on the ${c.river} River in ${c.country.name}.`,
          `Its mayor is ${c.mayor!.name}.`,
          `${c.name} is twinned with ${c.twin!.name}.`,
        ];
    if (capital) sentences.push(`It is the capital of ${c.country.name}.`);
    docs.push({
      id: c.id!,
      title: c.name,
      kind: 'city',
      text: sentences.join(' '),
      facts: { country: c.country.name, founded: c.founded, population: c.population, river: c.river, mayor: c.mayor!.name, twin: c.twin!.name },
    });
  }
  people.forEach((p, i) => {
    const sentences: string[] = [];
    const facts: Record<string, string | number> = { born: p.born, city: p.city.name, profession: p.profession };
    if (p.mayorOf) {
      sentences.push(`${p.name} is the mayor of ${p.city.name}.`, `${p.name} was born in ${p.born}.`);
    } else {
      const article = /^[aeiou]/.test(p.profession) ? 'an' : 'a';
      sentences.push(`${p.name} was ${article} ${p.profession} born in ${p.born} in ${p.city.name}.`);
    }
    for (const e of p.discovered) sentences.push(`${p.surname} discovered the element ${e.name} in ${e.discovered}.`);
    if (p.knownFor) {
      sentences.push(`${p.surname} is best known for ${p.knownFor}.`);
      facts.known_for = p.knownFor;
    }
    for (const c of p.founded) sentences.push(`In ${c.founded} ${p.surname} founded ${c.name}.`);
    docs.push({ id: `person-${pad(i + 1)}`, title: p.name, kind: 'person', text: sentences.join(' '), facts });
  });
  elements.forEach((e, i) => {
    const sentences = [
      `${e.name} is a fictional chemical element with the symbol ${e.symbol}.`,
      `It was discovered in ${e.discovered} by ${e.discoverer.name}.`,
      rng.chance(0.5)
        ? `Its atomic weight is ${e.weight}, and it is a ${e.state} at room temperature.`
        : `At room temperature ${e.name} is a ${e.state}; its atomic weight is ${e.weight}.`,
    ];
    docs.push({
      id: `element-${pad(i + 1)}`,
      title: e.name,
      kind: 'element',
      text: sentences.join(' '),
      facts: { symbol: e.symbol, discovered: e.discovered, discoverer: e.discoverer.name, weight: e.weight, state: e.state },
    });
  });
  companies.forEach((c, i) => {
    const article = /^[aeiou]/.test(c.industry) ? 'an' : 'a';
    const sentences = [
      `${c.name} is ${article} ${c.industry} company founded in ${c.founded} by ${c.founder.name}.`,
      `It is headquartered in ${c.headquarters.name} and employs ${c.employees} people.`,
    ];
    docs.push({
      id: `company-${pad(i + 1)}`,
      title: c.name,
      kind: 'company',
      text: sentences.join(' '),
      facts: { industry: c.industry, founded: c.founded, founder: c.founder.name, headquarters: c.headquarters.name, employees: c.employees },
    });
  });
  return docs;
}

function pad(n: number): string {
  return String(n).padStart(3, '0');
}

function listOf(items: string[]): string {
  return items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

/** The corpus, built once at import (frozen: documents and their facts are shared by everyone). */
export const CORPUS: readonly Doc[] = Object.freeze(
  buildCorpus().map((d) => {
    Object.freeze(d.facts);
    return Object.freeze(d);
  }),
);

const byId = new Map(CORPUS.map((d) => [d.id, d]));

export function docById(id: string): Doc | undefined {
  return byId.get(id);
}
