/**
 * Sampling semantics against the reference (issue 31): the distribution mcp-gym's sampler draws
 * from (src/agents/sampling.ts) is the one transformers' generation draws from, with its own
 * warpers in its order (temperature, top-k, top-p, min-p; learner/mcp_gym_learner/sampling_reference.py),
 * and the one the learner recomputes (logprobs.processed_logprobs, temperature included); the
 * logprob a draw records is the log of that probability; and the sampler's frequencies over many
 * draws match it (a chi-square test with a fixed seed).
 */
import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../lib/index.ts';
import { processedLogprobs, sampleToken, type SamplingOptions } from '../../src/agents/sampling.ts';
import { rng } from '../helpers/conversations.ts';
import { learnerModule } from '../helpers/hf-fixtures.ts';

interface Case {
  logits: number[];
  temperature: number;
  top_k: number;
  top_p: number;
  min_p: number;
}

function reference(cases: Case[]): { probs: number[]; learner: number[] | null }[] {
  const out = learnerModule('sampling_reference', [], JSON.stringify(cases));
  return JSON.parse(out) as { probs: number[]; learner: number[] | null }[];
}

const opts = (c: Case): SamplingOptions => ({ temperature: c.temperature, topK: c.top_k, topP: c.top_p, minP: c.min_p });

function ours(c: Case): number[] {
  const out = new Float64Array(c.logits.length);
  processedLogprobs(c.logits, 0, c.logits.length, opts(c), out);
  return Array.from(out, (x) => Math.exp(x));
}

/** Logits: Gaussian-ish, some rounded to a quarter (ties, as low-precision logits have), over 64 tokens. */
function makeCases(n: number): Case[] {
  const r = rng(7);
  const settings: Omit<Case, 'logits'>[] = [
    { temperature: 1, top_k: 0, top_p: 1, min_p: 0 },
    { temperature: 0.7, top_k: 0, top_p: 1, min_p: 0 },
    { temperature: 1.3, top_k: 8, top_p: 1, min_p: 0 },
    { temperature: 1, top_k: 0, top_p: 0.9, min_p: 0 },
    { temperature: 0.6, top_k: 20, top_p: 0.95, min_p: 0 },
    { temperature: 1, top_k: 0, top_p: 1, min_p: 0.05 },
    { temperature: 0.8, top_k: 10, top_p: 0.9, min_p: 0.1 },
    { temperature: 1.5, top_k: 0, top_p: 0.5, min_p: 0.2 },
  ];
  return Array.from({ length: n }, (_, i) => {
    const quarter = i % 3 === 0;
    const logits = Array.from({ length: 64 }, () => {
      const g = (r() + r() + r() + r() - 2) * 4;
      return quarter ? Math.round(g * 4) / 4 : g;
    });
    return { logits, ...settings[i % settings.length]! };
  });
}

describe("sampling: the distribution drawn from is transformers' and the learner's", () => {
  const cases = makeCases(96);
  const ref = reference(cases);

  it("processed probabilities equal transformers' warpers (temperature, top-k, top-p, min-p in its order) and the learner's", () => {
    let learnerCompared = 0;
    let topPTies = 0;
    cases.forEach((c, i) => {
      const a = ours(c);
      const b = ref[i]!.probs;
      const where = `case ${i} ${JSON.stringify({ t: c.temperature, k: c.top_k, p: c.top_p, m: c.min_p })}`;
      // The same tokens kept, and the same probabilities; except for a tie at the top-p boundary,
      // where transformers' unstable sort keeps an arbitrary part of the tied tokens and mcp-gym
      // (and the learner) keep them all.
      const differ = a.map((x, j) => x > 0 !== b[j]! > 0);
      if (differ.some(Boolean)) {
        const lowest = Math.min(...c.logits.filter((_, j) => a[j]! > 0));
        differ.forEach((d, j) => {
          if (d) expect(a[j]! > 0 && c.logits[j] === lowest && c.top_p < 1, `${where} token ${j}: kept by one side only, not a top-p tie`).toBe(true);
        });
        topPTies++;
      } else {
        for (let j = 0; j < a.length; j++) expect(Math.abs(a[j]! - b[j]!), `${where} token ${j}`).toBeLessThan(1e-12);
      }
      if (ref[i]!.learner) {
        learnerCompared++;
        const l = ref[i]!.learner!;
        for (let j = 0; j < a.length; j++) expect(Math.abs(a[j]! - l[j]!), `${where} token ${j} (learner)`).toBeLessThan(1e-12);
      }
    });
    expect(learnerCompared).toBeGreaterThan(40);
    console.log(
      `${cases.length} cases: equal to transformers' warpers in ${cases.length - topPTies}, a tie at the top-p boundary in ${topPTies}; ${learnerCompared} compared with the learner too`,
    );
    expect(topPTies).toBeLessThan(cases.length / 4);
  });

  it('a tie at the top-k boundary is kept whole, as transformers keeps it', () => {
    const c: Case = { logits: [3, 2, 2, 2, 1, 0], temperature: 1, top_k: 2, top_p: 1, min_p: 0 };
    const [r] = reference([c]);
    expect(ours(c).map((x) => x > 0)).toEqual([true, true, true, true, false, false]);
    expect(r!.probs.map((x) => x > 0)).toEqual([true, true, true, true, false, false]);
  });

  it('200,000 draws follow the reference distribution (chi-square, fixed seed); each draw records the log of its probability', () => {
    const picks = [4, 6, 7]; // top-p 0.9 with top-k 20 and t 0.6; min-p 0.05; everything at once
    const draws = 200_000;
    const scratch = new Float64Array(2 * 64);
    for (const i of picks) {
      const c = cases[i]!;
      const p = ref[i]!.probs;
      const counts = new Array<number>(64).fill(0);
      const random = seededRandom(1000 + i);
      for (let d = 0; d < draws; d++) {
        const { token, logprob } = sampleToken(c.logits, 0, 64, opts(c), random, scratch);
        counts[token]!++;
        if (d < 2000) expect(Math.abs(logprob - Math.log(p[token]!)), `case ${i} draw ${d}`).toBeLessThan(1e-9);
      }
      // Tokens the reference removed are never drawn; the rest by Pearson's chi-square.
      let chi = 0;
      let dof = -1;
      for (let j = 0; j < 64; j++) {
        if (p[j] === 0) {
          expect(counts[j], `case ${i}: token ${j} is outside the sampled set`).toBe(0);
          continue;
        }
        const e = p[j]! * draws;
        chi += (counts[j]! - e) ** 2 / e;
        dof++;
      }
      // The 99.99th percentile of chi-square with dof degrees of freedom (Wilson-Hilferty).
      const z = 3.719;
      const limit = dof * (1 - 2 / (9 * dof) + z * Math.sqrt(2 / (9 * dof))) ** 3;
      console.log(`case ${i}: ${dof + 1} tokens kept, chi-square ${chi.toFixed(1)} (dof ${dof}, 99.99% limit ${limit.toFixed(1)})`);
      expect(chi, `case ${i}`).toBeLessThan(limit);
    }
  });
});
