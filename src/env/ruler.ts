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
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { z } from 'zod';
import { sha256Hex } from '../../lib/index.ts';
import type { ChatMessage, ChatModel, ChatRequest, Trajectory } from './types.ts';

export type RulerMode = 'listwise' | 'pairwise';

export interface RulerOptions {
  /** Default listwise. */
  mode?: RulerMode;
  /** The grading standards (default DEFAULT_RUBRIC). */
  rubric?: string;
  /** Pairwise: judge requests per pair (default 3). */
  votes?: number;
  /** The combined reward's weights (applyRuler): default ruler 1, verifier 0. */
  weights?: { ruler?: number; verifier?: number };
  /** A directory where the judge's answers are cached by content hash. */
  cacheDir?: string;
  /** Pairwise: judge requests of a group at once (default 4). */
  concurrency?: number;
  /** Tokens of a judge answer at most (default: listwise 256 + 192·G, pairwise 512). */
  maxTokens?: number;
  temperature?: number;
  /** A message's text (and a tool call's arguments) longer than this is cut in its middle (default 1500). */
  maxMessageChars?: number;
  signal?: AbortSignal;
}

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

/** The judge could not give a valid score: its request failed, or it answered invalidly twice. */
export class JudgeError extends Error {
  override name = 'JudgeError';
  /** Judge requests the failed scoring made (retries included), and answers it took from the cache. */
  calls = 0;
  cached = 0;
}

export const DEFAULT_RUBRIC = [
  '- A trajectory that achieves its goal should always get a significantly higher score than a trajectory that does not.',
  '- A trajectory that achieves its goal more efficiently (fewer turns and tool calls, no unproductive detours) should score higher than one that achieves it less efficiently.',
  '- Tool calls that fail (errors, invalid arguments, unknown tools) count against a trajectory.',
  '- Give partial credit to a trajectory that makes real progress towards its goal without reaching it.',
  '- If one trajectory is only slightly better than another, the difference in their scores should be small; if it is much better, large.',
  '- Scores are between 0 and 1.',
].join('\n');

const MAX_ERROR = 300;

// ---------------------------------------------------------------------------------------------
// The prompt

/** How many leading messages all the message lists share (equal role, content, calls, ids). */
export function commonPrefixLength(lists: ChatMessage[][]): number {
  if (lists.length === 0) return 0;
  const key = (m: ChatMessage) => JSON.stringify([m.role, m.content, m.tool_calls ?? null, m.tool_call_id ?? null, m.name ?? null]);
  const shortest = Math.min(...lists.map((l) => l.length));
  let n = 0;
  while (n < shortest && lists.every((l) => key(l[n]!) === key(lists[0]![n]!))) n++;
  // Every trajectory keeps at least its last message as its own part (one list, identical lists,
  // or one list that is all a prefix of the others).
  return n === shortest ? Math.max(0, n - 1) : n;
}

/** `text` cut in its middle to at most about `max` characters, saying how much was cut. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = Math.ceil((max * 2) / 3);
  const tail = Math.max(0, max - head);
  return `${text.slice(0, head)} …[${text.length - head - tail} characters cut]… ${tail ? text.slice(-tail) : ''}`;
}

function renderMessages(messages: ChatMessage[], t: Trajectory | undefined, max: number): string {
  const errors = new Set(t?.turns.flatMap((u) => u.tool_results.filter((s) => s.isError).map((s) => s.id)) ?? []);
  const lines: string[] = [];
  for (const m of messages) {
    if (m.role === 'tool') {
      const error = m.tool_call_id !== undefined && (errors.has(m.tool_call_id) || m.tool_call_id.startsWith('invalid_'));
      lines.push(`[tool result${m.name ? ` of ${m.name}` : ''}${error ? ', an error' : ''}] ${clip(m.content, max)}`);
      continue;
    }
    if (m.content.trim() || !m.tool_calls?.length) lines.push(`[${m.role}] ${clip(m.content, max)}`);
    for (const c of m.tool_calls ?? []) lines.push(`[tool call] ${c.function.name}(${clip(c.function.arguments, max)})`);
  }
  return lines.join('\n');
}

function ending(t: Trajectory): string {
  return t.finish === 'answer'
    ? '(the episode ended with the final answer above)'
    : t.finish === 'max_turns'
      ? '(the episode ran out of turns without a final answer)'
      : '(the episode failed)';
}

/** The shared opening messages, stated once. */
function contextBlock(trajectories: Trajectory[], prefix: number, max: number): string {
  const shared = trajectories[0]!.messages.slice(0, prefix);
  return `<context>\n${shared.length ? renderMessages(shared, undefined, max) : '(no messages are shared)'}\n</context>`;
}

function trajectoryBlock(id: string, t: Trajectory, prefix: number, max: number): string {
  return `<trajectory id="${id}">\n${renderMessages(t.messages.slice(prefix), t, max)}\n${ending(t)}\n</trajectory>`;
}

/** The listwise judge request for a group (ids `1`..`G`, in the order given). */
export function rulerPrompt(trajectories: Trajectory[], o: Pick<RulerOptions, 'rubric' | 'maxMessageChars' | 'maxTokens' | 'temperature'> = {}): ChatRequest {
  const max = o.maxMessageChars ?? 1500;
  const prefix = commonPrefixLength(trajectories.map((t) => t.messages));
  const system = [
    'All of the trajectories below were given the same goal by the same opening messages (the context). Consider each of them and give it a score between 0 and 1, using your best judgement of what the agent was asked to do.',
    '',
    'Grading standards:',
    o.rubric ?? DEFAULT_RUBRIC,
    '',
    'Answer with a JSON object and nothing else, one entry per trajectory, every trajectory id exactly once:',
    '{"scores": [{"trajectory_id": "1", "explanation": "one or two sentences", "score": 0.8}, ...]}',
  ].join('\n');
  const user = [
    'The opening messages every trajectory shares:',
    contextBlock(trajectories, prefix, max),
    '',
    `The ${trajectories.length} trajectories, each from after the context on:`,
    '<trajectories>',
    ...trajectories.map((t, i) => trajectoryBlock(String(i + 1), t, prefix, max)),
    '</trajectories>',
  ].join('\n');
  return {
    system,
    messages: [{ role: 'user', content: user }],
    maxTokens: o.maxTokens ?? 256 + 192 * trajectories.length,
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
  };
}

function pairPrompt(trajectories: Trajectory[], a: number, b: number, prefix: number, o: RulerOptions): ChatRequest {
  const max = o.maxMessageChars ?? 1500;
  const system = [
    'Two trajectories of an agent below were given the same goal by the same opening messages (the context). Decide which one is better, using your best judgement of what the agent was asked to do.',
    '',
    'Grading standards:',
    o.rubric ?? DEFAULT_RUBRIC,
    '',
    'Explain briefly, then end your answer with a last line that is exactly one of:',
    'VERDICT: A',
    'VERDICT: B',
    'VERDICT: TIE',
  ].join('\n');
  const user = [
    'The opening messages both trajectories share:',
    contextBlock(trajectories, prefix, max),
    '',
    trajectoryBlock('A', trajectories[a]!, prefix, max),
    trajectoryBlock('B', trajectories[b]!, prefix, max),
    '',
    'Which trajectory is better: A, B, or is it a TIE?',
  ].join('\n');
  return {
    system,
    messages: [{ role: 'user', content: user }],
    maxTokens: o.maxTokens ?? 512,
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Parsing the answers

type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

/** The JSON values an answer may hold: its ```json fences, the whole answer, the text between its first `{` and last `}`. */
export function jsonCandidates(text: string): unknown[] {
  const texts: string[] = [];
  for (const m of text.matchAll(/```(?:json|JSON)?\s*\n?([\s\S]*?)```/g)) texts.push(m[1]!);
  texts.push(text);
  const first = text.indexOf('{');
  const last = text.lastIndexOf('}');
  if (first >= 0 && last > first) texts.push(text.slice(first, last + 1));
  const out: unknown[] = [];
  for (const t of texts) {
    try {
      out.push(JSON.parse(t.trim()));
    } catch {
      // not JSON: the next candidate
    }
  }
  return out;
}

const ListwiseAnswerSchema = z.object({
  scores: z.array(
    z.object({
      trajectory_id: z.union([z.string(), z.number()]).transform(String),
      explanation: z.string().optional(),
      score: z.number(),
    }),
  ),
});

/** A listwise answer for ids `1`..`n`: scores clamped to [0, 1], in id order; or what is wrong with it. */
export function parseListwise(text: string, n: number): Parsed<{ scores: number[]; explanations: string[] }> {
  const candidates = jsonCandidates(text);
  if (candidates.length === 0) return { ok: false, error: 'no JSON object was found in the answer' };
  let error = '';
  for (const c of candidates) {
    const r = ListwiseAnswerSchema.safeParse(c);
    if (!r.success) {
      const i = r.error.issues[0]!;
      error ||= `the JSON does not have the expected shape: ${i.path.join('.') || '(root)'}: ${i.message}`;
      continue;
    }
    const ids = Array.from({ length: n }, (_, i) => String(i + 1));
    const seen = new Map<string, number>();
    for (const s of r.data.scores) seen.set(s.trajectory_id, (seen.get(s.trajectory_id) ?? 0) + 1);
    const missing = ids.filter((id) => !seen.has(id));
    const twice = [...seen].filter(([, k]) => k > 1).map(([id]) => id);
    const unknown = [...seen.keys()].filter((id) => !ids.includes(id));
    if (missing.length || twice.length || unknown.length) {
      error = [
        missing.length ? `missing trajectory_id ${missing.map((id) => `"${id}"`).join(', ')}` : '',
        twice.length ? `trajectory_id given more than once: ${twice.join(', ')}` : '',
        unknown.length ? `unknown trajectory_id ${unknown.map((id) => `"${id}"`).join(', ')} (the ids are "1" to "${n}")` : '',
      ]
        .filter(Boolean)
        .join('; ');
      continue;
    }
    const by = new Map(r.data.scores.map((s) => [s.trajectory_id, s]));
    return {
      ok: true,
      value: {
        scores: ids.map((id) => Math.min(1, Math.max(0, by.get(id)!.score))),
        explanations: ids.map((id) => by.get(id)!.explanation ?? ''),
      },
    };
  }
  return { ok: false, error };
}

export type Verdict = 'A' | 'B' | 'TIE';

/** A pairwise verdict: the answer's last non-empty line `VERDICT: A|B|TIE` (or a JSON `{"verdict": ...}`). */
export function parseVerdict(text: string): Parsed<Verdict> {
  for (const c of jsonCandidates(text)) {
    if (c && typeof c === 'object' && !Array.isArray(c)) {
      const v = (c as Record<string, unknown>).verdict ?? (c as Record<string, unknown>).winner;
      if (typeof v === 'string' && /^(A|B|TIE)$/i.test(v.trim())) return { ok: true, value: v.trim().toUpperCase() as Verdict };
    }
  }
  const last =
    text
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .at(-1) ?? '';
  const plain = last
    .replace(/[*_`#>]/g, '')
    .replace(/[.!]+$/, '')
    .trim();
  const m = /^(?:(?:final\s+)?(?:verdict|answer|winner)\s*[:=-]?\s*)?(A|B|TIE)$/i.exec(plain);
  if (m) return { ok: true, value: m[1]!.toUpperCase() as Verdict };
  return { ok: false, error: `the last line is ${JSON.stringify(clip(last, 120))}, not one of "VERDICT: A", "VERDICT: B", "VERDICT: TIE"` };
}

// ---------------------------------------------------------------------------------------------
// Asking the judge (cache, one retry)

interface Ctx {
  judge: ChatModel;
  o: RulerOptions;
  mode: RulerMode;
  rubric: string;
  calls: number;
  cached: number;
}

function cacheFile(ctx: Ctx, request: ChatRequest, extra: Record<string, unknown>): string | undefined {
  if (!ctx.o.cacheDir) return undefined;
  const prompt = [request.system ?? '', ...request.messages.map((m) => `${m.role}: ${m.content}`)].join('\n\n');
  const key = sha256Hex(JSON.stringify({ judge: ctx.judge.id, mode: ctx.mode, rubric: ctx.rubric, prompt, ...extra }));
  return join(ctx.o.cacheDir, `${key}.json`);
}

function readCache(file: string | undefined): string | undefined {
  if (!file) return undefined;
  try {
    const v = JSON.parse(readFileSync(file, 'utf8')) as { text?: unknown };
    return typeof v.text === 'string' ? v.text : undefined;
  } catch {
    return undefined; // absent or unreadable: ask the judge
  }
}

function writeCache(file: string | undefined, ctx: Ctx, text: string): void {
  if (!file) return;
  mkdirSync(ctx.o.cacheDir!, { recursive: true });
  const tmp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  writeFileSync(tmp, JSON.stringify({ judge: ctx.judge.id, mode: ctx.mode, text }) + '\n');
  renameSync(tmp, file);
}

async function complete(ctx: Ctx, request: ChatRequest): Promise<string> {
  ctx.calls++;
  try {
    return (await ctx.judge.complete(request, ctx.o.signal)).text;
  } catch (err) {
    throw new JudgeError(`judge ${ctx.judge.id}: the request failed: ${clip((err as Error).message ?? String(err), MAX_ERROR)}`, { cause: err });
  }
}

/**
 * The judge's answer to `request`, parsed: from the cache, or asked (and asked once more, saying
 * what was wrong, when the first answer does not parse). A request that throws is a JudgeError.
 */
async function ask<T>(
  ctx: Ctx,
  request: ChatRequest,
  parse: (text: string) => Parsed<T>,
  retryHint: string,
  extra: Record<string, unknown> = {},
): Promise<Parsed<T>> {
  const file = cacheFile(ctx, request, extra);
  const hit = readCache(file);
  if (hit !== undefined) {
    const p = parse(hit);
    if (p.ok) {
      ctx.cached++;
      return p;
    }
  }
  const first = await complete(ctx, request);
  const p1 = parse(first);
  if (p1.ok) {
    writeCache(file, ctx, first);
    return p1;
  }
  const retry: ChatRequest = {
    ...request,
    messages: [
      ...request.messages,
      { role: 'assistant', content: first },
      { role: 'user', content: `Your answer could not be used: ${p1.error}. ${retryHint}` },
    ],
  };
  const second = await complete(ctx, retry);
  const p2 = parse(second);
  if (p2.ok) {
    writeCache(file, ctx, second);
    return p2;
  }
  return { ok: false, error: `${p1.error}; asked again: ${p2.error}` };
}

// ---------------------------------------------------------------------------------------------
// Scores

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
