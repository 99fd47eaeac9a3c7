/**
 * Exact rational arithmetic on BigInts (never floating point): the `Rational` class (always
 * reduced, denominator > 0), a fast gcd, and `toDecimal` for printing. Errors (a division by zero)
 * are `MathError`s, which callers such as the calculator server turn into their own error type.
 * Dependency-free.
 */

/** An arithmetic or parse error with a message meant for the person (or agent) who wrote the input. */
export class MathError extends Error {
  override name = 'MathError';
}

/** Significant digits of `toDecimal` by default. */
export const DECIMAL_DIGITS = 20;

/** Exact number of bits of a non-negative bigint (0 for 0). */
export function bitLength(x: bigint): number {
  if (x === 0n) return 0;
  const hex = x.toString(16);
  return (hex.length - 1) * 4 + (32 - Math.clz32(parseInt(hex.charAt(0), 16)));
}

const LEHMER_MIN = 1n << 64n;

/**
 * Greatest common divisor (non-negative). Large operands go through Lehmer's algorithm (Knuth,
 * TAOCP 4.5.2, Algorithm L): runs of Euclid steps are simulated on the leading 50 bits in exact
 * double arithmetic, then applied to the full numbers at once, about ten times faster than plain
 * Euclid on numbers of thousands of digits.
 */
export function gcd(a: bigint, b: bigint): bigint {
  if (a < 0n) a = -a;
  if (b < 0n) b = -b;
  if (a < b) [a, b] = [b, a];
  while (b >= LEHMER_MIN) {
    const shift = BigInt(bitLength(a) - 50);
    let x = Number(a >> shift);
    let y = Number(b >> shift);
    let [A, B, C, D] = [1, 0, 0, 1];
    while (y + C !== 0 && y + D !== 0) {
      const q = Math.floor((x + A) / (y + C));
      if (q !== Math.floor((x + B) / (y + D))) break;
      [A, C] = [C, A - q * C];
      [B, D] = [D, B - q * D];
      [x, y] = [y, x - q * y];
    }
    if (B === 0) [a, b] = [b, a % b];
    else [a, b] = [BigInt(A) * a + BigInt(B) * b, BigInt(C) * a + BigInt(D) * b];
  }
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/** Largest r with r*r <= n (n >= 0). */
function isqrt(n: bigint): bigint {
  if (n < 2n) return n;
  let x = 1n << BigInt(Math.ceil(bitLength(n) / 2));
  for (;;) {
    const y = (x + n / x) >> 1n;
    if (y >= x) return x;
    x = y;
  }
}

/** An exact rational number: always reduced, denominator > 0. */
export class Rational {
  /** Trusts its caller to pass a reduced fraction with den > 0; use `Rational.of` otherwise. */
  private constructor(
    readonly num: bigint,
    readonly den: bigint,
  ) {}

  static readonly ZERO = new Rational(0n, 1n);
  static readonly ONE = new Rational(1n, 1n);

  static of(num: bigint, den: bigint = 1n): Rational {
    if (den === 0n) throw new MathError('Division by zero');
    if (den < 0n) {
      num = -num;
      den = -den;
    }
    const g = gcd(num, den);
    return g === 1n ? new Rational(num, den) : new Rational(num / g, den / g);
  }

  static int(n: bigint): Rational {
    return new Rational(n, 1n);
  }

  get isInteger(): boolean {
    return this.den === 1n;
  }

  get isZero(): boolean {
    return this.num === 0n;
  }

  neg(): Rational {
    return new Rational(-this.num, this.den);
  }

  abs(): Rational {
    return this.num < 0n ? this.neg() : this;
  }

  // Sums and products follow Knuth (TAOCP 4.5.1): the gcds involve the smaller operands.
  add(o: Rational): Rational {
    if (this.den === 1n && o.den === 1n) return Rational.int(this.num + o.num);
    const g = gcd(this.den, o.den);
    if (g === 1n) return new Rational(this.num * o.den + o.num * this.den, this.den * o.den);
    const t = this.num * (o.den / g) + o.num * (this.den / g);
    if (t === 0n) return Rational.ZERO;
    const g2 = gcd(t, g);
    return new Rational(t / g2, (this.den / g) * (o.den / g2));
  }

  sub(o: Rational): Rational {
    return this.add(o.neg());
  }

  mul(o: Rational): Rational {
    if (this.num === 0n || o.num === 0n) return Rational.ZERO;
    const g1 = gcd(this.num, o.den);
    const g2 = gcd(o.num, this.den);
    return new Rational((this.num / g1) * (o.num / g2), (this.den / g2) * (o.den / g1));
  }

  inverse(): Rational {
    if (this.num === 0n) throw new MathError('Division by zero');
    return this.num < 0n ? new Rational(-this.den, -this.num) : new Rational(this.den, this.num);
  }

  div(o: Rational): Rational {
    return this.mul(o.inverse());
  }

  /** Integer powers; a negative exponent of zero throws. */
  pow(e: bigint): Rational {
    if (e < 0n) return this.inverse().pow(-e);
    return new Rational(this.num ** e, this.den ** e); // powers of coprime numbers stay coprime
  }

  compare(o: Rational): number {
    const d = this.num * o.den - o.num * this.den;
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  }

  floor(): Rational {
    const q = this.num / this.den; // truncates toward zero
    return Rational.int(this.num < 0n && q * this.den !== this.num ? q - 1n : q);
  }

  ceil(): Rational {
    return this.neg().floor().neg();
  }

  /** Nearest integer, halves away from zero. */
  round(): Rational {
    const a = this.num < 0n ? -this.num : this.num;
    const r = (2n * a + this.den) / (2n * this.den);
    return Rational.int(this.num < 0n ? -r : r);
  }

  /** The exact square root, or null when it is not rational (or the number is negative). */
  sqrt(): Rational | null {
    if (this.num < 0n) return null;
    const n = isqrt(this.num);
    const d = isqrt(this.den);
    return n * n === this.num && d * d === this.den ? new Rational(n, d) : null;
  }

  /** "n" or "p/q". */
  toString(): string {
    return this.den === 1n ? this.num.toString() : `${this.num}/${this.den}`;
  }
}

/**
 * At most `digits` significant digits: exact when the decimal expansion terminates within them,
 * otherwise rounded (halves away from zero). Plain notation for magnitudes from 1e-7 up to 1e21,
 * scientific notation (like `1.6069380442589902755e+60`) outside, as JavaScript prints numbers.
 */
export function toDecimal(x: Rational, digits: number = DECIMAL_DIGITS): string {
  if (x.num === 0n) return '0';
  const negative = x.num < 0n;
  const p = negative ? -x.num : x.num;
  const q = x.den;
  // p/q * 10^shift lies in (10^(digits-1), 10^(digits+1)), so the quotient has digits or digits+1 digits.
  const shift = digits - (p.toString().length - q.toString().length);
  const num = shift >= 0 ? p * 10n ** BigInt(shift) : p;
  const den = shift >= 0 ? q : q * 10n ** BigInt(-shift);
  const limit = 10n ** BigInt(digits);
  let m = num / den;
  const rem = num % den;
  let exp = -shift; // the value is about m * 10^exp
  let roundUp = 2n * rem >= den;
  if (m >= limit) {
    const last = m % 10n;
    m /= 10n;
    exp += 1;
    roundUp = last >= 5n;
  }
  if (roundUp) {
    m += 1n;
    if (m === limit) {
      m /= 10n;
      exp += 1;
    }
  }
  let s = m.toString();
  const stripped = s.replace(/0+$/, '');
  exp += s.length - stripped.length;
  s = stripped;
  const lead = s.length - 1 + exp; // decimal exponent of the first digit
  let body: string;
  if (lead >= 21 || lead < -7) body = `${s.charAt(0)}${s.length > 1 ? '.' + s.slice(1) : ''}e${lead >= 0 ? '+' : '-'}${Math.abs(lead)}`;
  else if (exp >= 0) body = s + '0'.repeat(exp);
  else if (s.length + exp > 0) body = `${s.slice(0, s.length + exp)}.${s.slice(s.length + exp)}`;
  else body = `0.${'0'.repeat(-(s.length + exp))}${s}`;
  return negative ? `-${body}` : body;
}
