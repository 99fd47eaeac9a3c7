/**
 * The unbiased estimators of pass@k (at least one of k draws succeeds) and pass^k (all k draws
 * succeed, tau-bench's reliability) from n samples with c successes.
 */

/** C(n, k)/C(m, k) computed as a product, stable for large n. */
function binomRatio(n: number, m: number, k: number): number {
  // C(n, k) / C(m, k) = Π_{i=0}^{k-1} (n − i) / (m − i)
  if (k > n) return 0;
  let r = 1;
  for (let i = 0; i < k; i++) r *= (n - i) / (m - i);
  return r;
}

/** pass@k from n samples with c successes: 1 − C(n−c, k)/C(n, k). */
export function passAtK(n: number, c: number, k: number): number {
  if (!(n >= 1) || k < 1 || k > n || c < 0 || c > n) throw new Error(`pass@k needs 1 <= k <= n and 0 <= c <= n (n=${n}, c=${c}, k=${k})`);
  if (n - c < k) return 1;
  return 1 - binomRatio(n - c, n, k);
}

/** pass^k from n samples with c successes: C(c, k)/C(n, k). */
export function passHatK(n: number, c: number, k: number): number {
  if (!(n >= 1) || k < 1 || k > n || c < 0 || c > n) throw new Error(`pass^k needs 1 <= k <= n and 0 <= c <= n (n=${n}, c=${c}, k=${k})`);
  return binomRatio(c, n, k);
}
