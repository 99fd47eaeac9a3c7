/**
 * Turning logits into a token, in the order transformers' generation applies its warpers
 * (`_get_logits_processor`: TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
 * MinPLogitsWarper): temperature, then top-k, then top-p (nucleus) on what is left, then min-p
 * on what is left, renormalised. The logprob returned is that of the sampled token under exactly
 * this distribution (learner/PROTOCOL.md, "Logprobs"; the learner computes the same, temperature
 * included). Ties at a boundary are kept, as transformers keeps them for top-k and min-p
 * (`scores < kth` and `probs < threshold` are what it removes); for top-p, where transformers'
 * unstable sort keeps an arbitrary part of a tie, every tied token is kept.
 */
import type { RandomFn } from '../../lib/index.ts';

export interface SamplingOptions {
  temperature: number;
  /** 0 = no limit. */
  topK: number;
  /** 1 = no limit. */
  topP: number;
  /** 0 = off: tokens with probability below minP x the top token's (after top-k and top-p) are cut. */
  minP?: number;
}

/** Whether the options sample the whole vocabulary (no top-k, top-p or min-p cut). */
export function samplesWholeVocabulary(o: SamplingOptions, vocab: number): boolean {
  return !(o.topK > 0 && o.topK < vocab) && !(o.topP < 1) && !((o.minP ?? 0) > 0);
}

/**
 * The processed log-distribution over the vocabulary: -Infinity for tokens cut by top-k, top-p or
 * min-p. `out` receives the logprobs (float64).
 */
export function processedLogprobs(logits: ArrayLike<number>, offset: number, vocab: number, o: SamplingOptions, out: Float64Array): void {
  const t = o.temperature;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) {
    const v = logits[offset + i]! / t;
    out[i] = v;
    if (v > max) max = v;
  }
  const keep = new Uint8Array(vocab).fill(1);
  // top-k: remove what is below the k-th largest (the tokens tied with it stay).
  if (o.topK > 0 && o.topK < vocab) {
    const kth = Float64Array.from(out.subarray(0, vocab))
      .sort()
      .at(vocab - o.topK)!;
    for (let i = 0; i < vocab; i++) if (out[i]! < kth) keep[i] = 0;
  }
  const lseOfKept = () => {
    let sum = 0;
    for (let i = 0; i < vocab; i++) if (keep[i]) sum += Math.exp(out[i]! - max);
    return max + Math.log(sum);
  };
  let lse = lseOfKept();
  // top-p: the smallest prefix (by probability, descending) whose mass reaches top_p, and every token tied with its last.
  if (o.topP < 1) {
    const idx: number[] = [];
    for (let i = 0; i < vocab; i++) if (keep[i]) idx.push(i);
    idx.sort((a, b) => out[b]! - out[a]! || a - b);
    let before = 0;
    let threshold = out[idx[0]!]!;
    for (const i of idx) {
      if (before >= o.topP) break;
      threshold = out[i]!;
      before += Math.exp(out[i]! - lse);
    }
    for (const i of idx) if (out[i]! < threshold) keep[i] = 0;
    lse = lseOfKept();
  }
  // min-p: remove the tokens whose probability is below min_p x the top token's.
  const minP = o.minP ?? 0;
  if (minP > 0) {
    // p_i < minP * p_max  <=>  x_i < x_max + log(minP)
    const cut = max + Math.log(minP);
    for (let i = 0; i < vocab; i++) if (keep[i] && out[i]! < cut) keep[i] = 0;
    lse = lseOfKept();
  }
  for (let i = 0; i < vocab; i++) out[i] = keep[i] ? out[i]! - lse : -Infinity;
}

/**
 * Samples from processed logprobs; returns the token and its logprob. Greedy when temperature is 0.
 * `scratch` holds at least 2 x vocab numbers.
 */
export function sampleToken(
  logits: ArrayLike<number>,
  offset: number,
  vocab: number,
  o: SamplingOptions,
  rng: RandomFn,
  scratch: Float64Array,
): { token: number; logprob: number } {
  if (o.temperature <= 0) {
    let best = 0;
    for (let i = 1; i < vocab; i++) if (logits[offset + i]! > logits[offset + best]!) best = i;
    return { token: best, logprob: 0 };
  }
  if (samplesWholeVocabulary(o, vocab)) {
    // The whole vocabulary: one pass of exponentials, then a walk of the cumulative sum.
    const t = o.temperature;
    let max = -Infinity;
    for (let i = 0; i < vocab; i++) {
      const v = logits[offset + i]! / t;
      scratch[i] = v;
      if (v > max) max = v;
    }
    let sum = 0;
    for (let i = 0; i < vocab; i++) {
      const e = Math.exp(scratch[i]! - max);
      sum += e;
      scratch[vocab + i] = e;
    }
    const logSum = Math.log(sum);
    let u = rng() * sum;
    let best = 0;
    for (let i = 0; i < vocab; i++) {
      u -= scratch[vocab + i]!;
      if (u <= 0) return { token: i, logprob: scratch[i]! - max - logSum };
      if (scratch[i]! > scratch[best]!) best = i;
    }
    return { token: best, logprob: scratch[best]! - max - logSum };
  }
  processedLogprobs(logits, offset, vocab, o, scratch);
  let u = rng();
  for (let i = 0; i < vocab; i++) {
    const lp = scratch[i]!;
    if (lp === -Infinity) continue;
    u -= Math.exp(lp);
    if (u <= 0) return { token: i, logprob: lp };
  }
  // Rounding left a sliver: the most likely kept token.
  let best = 0;
  for (let i = 1; i < vocab; i++) if (scratch[i]! > scratch[best]!) best = i;
  return { token: best, logprob: scratch[best]! };
}

/**
 * Samples from probabilities over the whole vocabulary (temperature 1, no top-k or top-p: what a
 * Hugging Face export's `probs` output holds, the runtime's softmax of the logits): one walk of
 * the cumulative sum (float64), as `sampleToken` walks its exponentials; the logprob is that of the
 * sampled token, log(p / sum).
 */
export function sampleFromProbs(probs: ArrayLike<number>, offset: number, vocab: number, rng: RandomFn): { token: number; logprob: number } {
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += probs[offset + i]!;
  let u = rng() * sum;
  let best = 0;
  for (let i = 0; i < vocab; i++) {
    const p = probs[offset + i]!;
    u -= p;
    if (u <= 0 && p > 0) return { token: i, logprob: Math.log(p / sum) };
    if (p > probs[offset + best]!) best = i;
  }
  return { token: best, logprob: Math.log(probs[offset + best]! / sum) };
}
