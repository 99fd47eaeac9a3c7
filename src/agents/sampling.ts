/**
 * Turning logits into a token: temperature, then top-k, then top-p (nucleus) on what is left,
 * renormalised; the logprob returned is that of the sampled token under exactly this
 * distribution (learner/PROTOCOL.md, "Logprobs"; the learner computes the same).
 */
import type { RandomFn } from '../../lib/index.ts';

export interface SamplingOptions {
  temperature: number;
  /** 0 = no limit. */
  topK: number;
  /** 1 = no limit. */
  topP: number;
}

/**
 * The processed log-distribution over the vocabulary: -Infinity for tokens cut by top-k/top-p.
 * `out` receives the logprobs (float64).
 */
export function processedLogprobs(logits: ArrayLike<number>, offset: number, vocab: number, o: SamplingOptions, out: Float64Array): void {
  const t = o.temperature;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) {
    const v = logits[offset + i]! / t;
    out[i] = v;
    if (v > max) max = v;
  }
  let keep: Uint8Array | undefined;
  if (o.topK > 0 && o.topK < vocab) {
    // Keep exactly k: the k largest (earlier index first among equals).
    const idx = Array.from({ length: vocab }, (_, i) => i).sort((a, b) => out[b]! - out[a]! || a - b);
    keep = new Uint8Array(vocab);
    for (let j = 0; j < o.topK; j++) keep[idx[j]!] = 1;
  }
  let sum = 0;
  for (let i = 0; i < vocab; i++) if (!keep || keep[i]) sum += Math.exp(out[i]! - max);
  let lse = max + Math.log(sum);
  if (o.topP < 1) {
    const idx = Array.from({ length: vocab }, (_, i) => i)
      .filter((i) => !keep || keep[i])
      .sort((a, b) => out[b]! - out[a]! || a - b);
    const nucleus = new Uint8Array(vocab);
    let cum = 0;
    for (const i of idx) {
      nucleus[i] = 1;
      cum += Math.exp(out[i]! - lse);
      if (cum >= o.topP) break;
    }
    keep = nucleus;
    sum = 0;
    for (let i = 0; i < vocab; i++) if (keep[i]) sum += Math.exp(out[i]! - max);
    lse = max + Math.log(sum);
  }
  for (let i = 0; i < vocab; i++) out[i] = !keep || keep[i] ? out[i]! - lse : -Infinity;
}

/**
 * Samples from processed logprobs; returns the token and its logprob. Greedy when temperature is 0.
 * `scratch` holds at least 2 x vocab numbers.
 */
export function sampleToken(logits: ArrayLike<number>, offset: number, vocab: number, o: SamplingOptions, rng: RandomFn, scratch: Float64Array): { token: number; logprob: number } {
  if (o.temperature <= 0) {
    let best = 0;
    for (let i = 1; i < vocab; i++) if (logits[offset + i]! > logits[offset + best]!) best = i;
    return { token: best, logprob: 0 };
  }
  if (!(o.topK > 0 && o.topK < vocab) && !(o.topP < 1)) {
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
