/** Parsing RULER's judge answers: a listwise answer's scores, a pairwise answer's verdict, or what is wrong with the answer. */
import { z } from 'zod';
import { clip } from './ruler-prompt.ts';

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

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
