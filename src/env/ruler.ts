/**
 * RULER: an LLM judge that scores a whole group of trajectories of one task (docs/architecture.md,
 * "RULER"; after OpenPipe ART's RULER). The judge is any ChatModel (the API policies implement it).
 *
 * Listwise (ART's RULER), one judge request per group: the messages that every trajectory of the
 * group begins with (system prompt, task, ...) are stated once, then each trajectory's own
 * messages (assistant text, tool calls with their arguments, tool results, each cut to
 * `maxMessageChars`), labelled `1`..`G`, and a rubric. The judge answers
 *     {"scores": [{"trajectory_id": "1", "explanation": "...", "score": 0.8}, ...]}
 * The JSON is found in a ```json fence, or as the whole answer, or between the answer's first `{`
 * and last `}`; it must give every id exactly once with a number score; scores are clamped to
 * [0, 1]. An invalid answer is asked again once, the follow-up saying what was wrong; a second
 * invalid answer, or a judge request that throws, is a JudgeError: never a made-up score.
 *
 * Pairwise (the seed's `compute_relative_reward`): for each pair i < j, `votes` judge requests
 * (default 3) ask "which is better: A, B or TIE"; the answer's last line must be `VERDICT: A`,
 * `VERDICT: B` or `VERDICT: TIE` (a JSON `{"verdict": "A"}` is accepted too). A vote is +1 for i,
 * −1 for j, 0 for a tie, and rel(i, j) is the mean of the pair's votes. To cancel position bias,
 * the order shown alternates: vote n of the group (counted over all pairs, pair by pair) shows i as
 * A when n is even and j as A when n is odd. A vote whose answer does not parse is asked again once
 * (saying what was wrong), then counted as a tie; a group in which not one vote parsed is a
 * JudgeError (its all-zero scores would be made up). Each trajectory's total is
 * Σ_j rel(i, j) − Σ_j rel(j, i), and the totals are standardised within the group:
 *     z_i = (total_i − mean) / (sampleStd + 1e-8)
 * with the sample standard deviation (Bessel-corrected, divisor G − 1), the std GRPO's advantages
 * use (src/trainers/advantages.ts); totals that are all equal give all zeros. Pairwise scores are
 * these standardised values, not mapped to [0, 1]: the combined reward uses them as they are.
 *
 * Cache: with `cacheDir`, each judge answer that parsed is stored as `<cacheDir>/<key>.json`,
 * key = sha256 of (judge id, mode, rubric, the request's prompt text, and for pairwise the vote's
 * index within its pair), written atomically (a temporary file, then rename). A cached answer is
 * reused without a request, so a resumed run or an evaluation run again does not pay twice.
 *
 * The reward (applyRuler): failed episodes (finish `error`) are not judged and keep reward 0 and
 * their empty parts. Every other trajectory of the group keeps its parts and gets two more:
 *     reward_parts.verifier = its reward before the judge (the total its reward function gave)
 *     reward_parts.ruler    = the judge's score (listwise: in [0, 1]; pairwise: standardised)
 *     reward                = weights.ruler · ruler + weights.verifier · verifier
 * (defaults: ruler 1, verifier 0). A trajectory already judged (it has both parts) is combined
 * from its recorded `verifier` part, so judging it again does not compound. A reward function's
 * own parts named `verifier` or `ruler` are overwritten.
 */
import pLimit from 'p-limit';
import type { ChatModel, Trajectory } from './types.ts';
import { DEFAULT_RUBRIC, JudgeError, type RulerOptions } from './ruler-types.ts';
import { clip, commonPrefixLength, pairPrompt, rulerPrompt } from './ruler-prompt.ts';
import { parseListwise, parseVerdict } from './ruler-parse.ts';
import { ask, MAX_ERROR, type Ctx } from './ruler-judge.ts';

export interface RulerScores {
  /** One per trajectory, in the order given. */
  scores: number[];
  explanations: string[];
  /** Judge requests made (retries included). */
  calls: number;
  /** Answers taken from the cache instead. */
  cached: number;
}

export interface RulerApplied extends RulerScores {
  /** Trajectories judged (those that did not fail). */
  judged: number;
}

/** (x − mean) / (sample std + 1e-8); all zeros when the values are all equal (or fewer than two). */
export function standardise(xs: number[]): number[] {
  if (xs.length < 2 || Math.max(...xs) - Math.min(...xs) <= 1e-12) return xs.map(() => 0);
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  const s = Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
  return xs.map((x) => (x - m) / (s + 1e-8));
}

async function listwise(trajectories: Trajectory[], ctx: Ctx): Promise<{ scores: number[]; explanations: string[] }> {
  const n = trajectories.length;
  const request = rulerPrompt(trajectories, ctx.o);
  const hint = `Answer with only the JSON object {"scores": [{"trajectory_id": "1", "explanation": "...", "score": 0.8}, ...]}, with every trajectory_id from "1" to "${n}" exactly once and a number score between 0 and 1.`;
  const r = await ask(ctx, request, (text) => parseListwise(text, n), hint);
  if (!r.ok) throw new JudgeError(`judge ${ctx.judge.id}: invalid answer twice: ${clip(r.error, MAX_ERROR)}`);
  return r.value;
}

async function pairwise(trajectories: Trajectory[], ctx: Ctx): Promise<{ scores: number[]; explanations: string[] }> {
  const n = trajectories.length;
  const votes = Math.max(1, Math.floor(ctx.o.votes ?? 3));
  const prefix = commonPrefixLength(trajectories.map((t) => t.messages));
  const limit = pLimit(Math.max(1, ctx.o.concurrency ?? 4));
  const hint = 'End your answer with a last line that is exactly "VERDICT: A", "VERDICT: B" or "VERDICT: TIE".';
  const jobs: Promise<{ i: number; j: number; vote: number; parsed: boolean }>[] = [];
  let count = 0;
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      for (let k = 0; k < votes; k++) {
        const swapped = count++ % 2 === 1; // alternate which one is shown as A, to cancel position bias
        const [a, b] = swapped ? [j, i] : [i, j];
        jobs.push(
          limit(async () => {
            const r = await ask(ctx, pairPrompt(trajectories, a, b, prefix, ctx.o), parseVerdict, hint, { vote: k });
            if (!r.ok) return { i, j, vote: 0, parsed: false }; // unparseable twice: a tie
            const forA = r.value === 'A' ? 1 : r.value === 'B' ? -1 : 0;
            return { i, j, vote: swapped ? -forA : forA, parsed: true };
          }),
        );
      }
    }
  }
  const results = await Promise.all(jobs);
  if (results.length > 0 && results.every((r) => !r.parsed)) {
    throw new JudgeError(`judge ${ctx.judge.id}: none of the ${results.length} pairwise verdicts could be parsed (each asked twice)`);
  }
  const totals = new Array<number>(n).fill(0);
  const tally = Array.from({ length: n }, () => ({ won: 0, lost: 0, tied: 0, unparsed: 0 }));
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const pair = results.filter((r) => r.i === i && r.j === j);
      const rel = pair.reduce((s, r) => s + r.vote, 0) / pair.length;
      totals[i]! += rel;
      totals[j]! -= rel;
      for (const r of pair) {
        const [ti, tj] = [tally[i]!, tally[j]!];
        if (!r.parsed) {
          ti.unparsed++;
          tj.unparsed++;
        } else if (r.vote > 0) {
          ti.won++;
          tj.lost++;
        } else if (r.vote < 0) {
          ti.lost++;
          tj.won++;
        } else {
          ti.tied++;
          tj.tied++;
        }
      }
    }
  }
  const explanations = totals.map((total, i) => {
    const t = tally[i]!;
    return `pairwise: total ${total.toFixed(4)} over ${n - 1} opponents; votes won ${t.won}, lost ${t.lost}, tied ${t.tied}${t.unparsed ? `, unparseable (counted as ties) ${t.unparsed}` : ''}`;
  });
  return { scores: standardise(totals), explanations };
}

/**
 * The judge's scores of a group's trajectories (in the order given): listwise in [0, 1], pairwise
 * standardised within the group. Throws a JudgeError when the judge cannot give them.
 */
export async function rulerScore(trajectories: Trajectory[], judge: ChatModel, o: RulerOptions = {}): Promise<RulerScores> {
  const mode = o.mode ?? 'listwise';
  if (mode !== 'listwise' && mode !== 'pairwise') throw new Error(`ruler: unknown mode '${String(mode)}' (listwise or pairwise)`);
  const ctx: Ctx = { judge, o, mode, rubric: o.rubric ?? DEFAULT_RUBRIC, calls: 0, cached: 0 };
  if (trajectories.length === 0) return { scores: [], explanations: [], calls: 0, cached: 0 };
  try {
    const r = mode === 'listwise' ? await listwise(trajectories, ctx) : await pairwise(trajectories, ctx);
    return { ...r, calls: ctx.calls, cached: ctx.cached };
  } catch (err) {
    if (err instanceof JudgeError) Object.assign(err, { calls: ctx.calls, cached: ctx.cached });
    throw err;
  }
}

/**
 * Judges a group and combines the scores into each trajectory's reward (see the top of this file):
 * failed episodes are left as they are; the others get `reward_parts.verifier` (the reward before)
 * and `reward_parts.ruler`, and reward = w_ruler·ruler + w_verifier·verifier. Nothing is changed
 * when the judge fails (a JudgeError).
 */
export async function applyRuler(group: Trajectory[], judge: ChatModel, o: RulerOptions = {}): Promise<RulerApplied> {
  const judged = group.filter((t) => t.finish !== 'error');
  const r = await rulerScore(judged, judge, o);
  const wRuler = o.weights?.ruler ?? 1;
  const wVerifier = o.weights?.verifier ?? 0;
  judged.forEach((t, i) => {
    const before = t.reward_parts.ruler !== undefined && t.reward_parts.verifier !== undefined ? t.reward_parts.verifier : t.reward;
    const score = r.scores[i]!;
    t.reward_parts = { ...t.reward_parts, verifier: before, ruler: score };
    t.reward = wRuler * score + wVerifier * before;
  });
  return { ...r, judged: judged.length };
}
