/**
 * Latencies: a preallocated store of every sample (exact quantiles, nothing allocated per call)
 * and a log-bucket histogram of it for charts.
 */

export interface LatencySummary {
  count: number;
  min_ms: number;
  mean_ms: number;
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms: number;
}

/** A fixed-capacity store of latencies in milliseconds. `record` is a bounds check and a write. */
export class LatencyStore {
  private readonly values: Float64Array;
  private n = 0;
  private sorted?: Float64Array;

  constructor(capacity: number) {
    this.values = new Float64Array(Math.max(1, capacity));
  }

  get count(): number {
    return this.n;
  }

  get capacity(): number {
    return this.values.length;
  }

  /** Keeps the sample; beyond the capacity samples are dropped (the caller bounds the calls). */
  record(ms: number): void {
    if (this.n < this.values.length) this.values[this.n++] = ms;
    this.sorted = undefined;
  }

  /** The recorded samples, sorted ascending (a copy, cached until the next record). */
  sortedValues(): Float64Array {
    this.sorted ??= this.values.slice(0, this.n).sort();
    return this.sorted;
  }

  /** The exact q-quantile (nearest rank): the smallest sample with at least q of them at or below it. */
  quantile(q: number): number {
    return quantileOf(this.sortedValues(), q);
  }

  summary(): LatencySummary {
    const s = this.sortedValues();
    let sum = 0;
    for (let i = 0; i < s.length; i++) sum += s[i]!;
    return {
      count: s.length,
      min_ms: s.length ? s[0]! : 0,
      mean_ms: s.length ? sum / s.length : 0,
      p50_ms: quantileOf(s, 0.5),
      p95_ms: quantileOf(s, 0.95),
      p99_ms: quantileOf(s, 0.99),
      max_ms: s.length ? s[s.length - 1]! : 0,
    };
  }

  histogram(bucketsPerDecade = 10): Histogram {
    return logHistogram(this.sortedValues(), bucketsPerDecade);
  }
}

/** Nearest-rank quantile of ascending values; 0 when there are none. */
export function quantileOf(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return 0;
  const i = Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1));
  return sorted[i]!;
}

export interface Histogram {
  /** Lower edge of each bucket, ms; bucket i covers [edges[i], edges[i + 1]). */
  edges: number[];
  counts: number[];
}

/**
 * Counts in logarithmic buckets (`bucketsPerDecade` per factor of 10), from the decade of the
 * smallest sample to that of the largest: the shape of an HDR histogram, for drawing.
 */
export function logHistogram(sorted: ArrayLike<number>, bucketsPerDecade = 10): Histogram {
  const n = sorted.length;
  if (n === 0) return { edges: [], counts: [] };
  const floor = 1e-3; // 1 µs: nothing below is told apart
  const lo = Math.max(floor, sorted[0]!);
  const hi = Math.max(lo, sorted[n - 1]!);
  const start = Math.floor(Math.log10(lo) * bucketsPerDecade);
  const end = Math.floor(Math.log10(hi) * bucketsPerDecade) + 1;
  const edges: number[] = [];
  for (let b = start; b <= end; b++) edges.push(10 ** (b / bucketsPerDecade));
  const counts = new Array<number>(end - start).fill(0);
  for (let i = 0; i < n; i++) {
    const v = Math.max(floor, sorted[i]!);
    const b = Math.min(counts.length - 1, Math.max(0, Math.floor(Math.log10(v) * bucketsPerDecade) - start));
    counts[b]!++;
  }
  return { edges, counts };
}
