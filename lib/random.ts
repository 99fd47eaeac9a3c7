/**
 * The seeded randomness of everything the project generates (the corpus, the shop data set, the
 * task suites, the schema samplers, the policies' sampling): mulberry32, a `RandomFn` factory
 * over it, and a small helper class. Same seed, same data.
 */

/** A source of floats in [0, 1), like `Math.random`. */
export type RandomFn = () => number;

/** mulberry32: a tiny, fast 32-bit seeded PRNG; returns a function giving floats in [0, 1). */
export function mulberry32(seed: number): RandomFn {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The project's seeded generator (mulberry32): the same seed gives the same values. */
export function seededRandom(seed: number): RandomFn {
  return mulberry32(seed);
}

/**
 * A seeded generator that counts its numbers and can be put back to any count from its start: what a
 * checkpoint stores of a run's task draws and replay draws (resume and rollback draw on from there).
 */
export class CountedRandom {
  private gen: RandomFn;
  private n = 0;

  constructor(
    private readonly seed: number,
    count = 0,
  ) {
    this.gen = seededRandom(seed);
    this.seek(count);
  }

  /** Numbers drawn so far. */
  get count(): number {
    return this.n;
  }

  /** Back to the start, then `count` numbers on. */
  seek(count: number): void {
    this.gen = seededRandom(this.seed);
    for (let i = 0; i < count; i++) this.gen();
    this.n = count;
  }

  next(): number {
    this.n++;
    return this.gen();
  }
}

/** Helpers over a seeded generator: integers, picks, shuffles, digit strings. */
export class SeededRandom {
  private readonly next: RandomFn;

  constructor(seed: number) {
    this.next = mulberry32(seed);
  }

  float(): number {
    return this.next();
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }

  /** `n` distinct items. */
  sample<T>(items: readonly T[], n: number): T[] {
    return this.shuffle(items).slice(0, n);
  }

  /** A positive integer with exactly `digits` digits, as a string (any size). */
  digits(digits: number): string {
    let s = String(this.int(1, 9));
    for (let i = 1; i < digits; i++) s += String(this.int(0, 9));
    return s;
  }

  /** An integer spread evenly over orders of magnitude between lo and hi. */
  logInt(lo: number, hi: number): number {
    return Math.round(Math.exp(Math.log(lo) + this.next() * (Math.log(hi) - Math.log(lo))));
  }
}
