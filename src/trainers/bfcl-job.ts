/**
 * The real-model job on BFCL (`mcp-gym start --model M --suite bfcl`, docs/bfcl.md): training on
 * BFCL's live categories (functions contributed by users; SFT demonstrations from their possible
 * answers; the GRPO reward from BFCL's verdict), held out on five non-live categories (functions
 * written by BFCL's authors: another source), scored by BFCL's strict verdict; and a small sample of
 * every multi-turn category evaluated at each checkpoint, reported whatever it scores.
 */
import { summarizeEpisodes } from '../../lib/index.ts';
import { bfclEntries, bfclSuite, isBfclSuite, type BfclEntry, type Task, type Trajectory } from '../env/index.ts';

/** The held-out categories, in equal shares. */
export const BFCL_JOB_HELD = ['simple_python', 'multiple', 'parallel', 'parallel_multiple', 'irrelevance'] as const;
/**
 * The training pool: every live category; live_multiple and live_irrelevance capped (a stride
 * sample), live_parallel and live_parallel_multiple repeated, so that the demonstrations and the
 * draws hold every kind of answer the held-out set asks for (one call, a choice among functions,
 * several calls, none) in shares near its own: without the repeats, several calls are 4% of the pool (14% with them).
 */
export const BFCL_JOB_TRAIN: Readonly<Record<string, { cap?: number; repeat?: number }>> = {
  live_simple: {},
  live_multiple: { cap: 300 },
  live_parallel: { repeat: 4 },
  live_parallel_multiple: { repeat: 4 },
  live_irrelevance: { cap: 150 },
  live_relevance: {},
};
/**
 * Training entries whose first turn and function docs fit in this many characters (about 850
 * tokens): 92% of live_simple, 40% of live_multiple, 61% of live_irrelevance. The held-out entries
 * are all shorter than that but for 2%; longer prompts cost the CPU learner more than they teach.
 */
export const BFCL_JOB_MAX_CHARS = 2000;
/** Multi-turn entries evaluated per category at each checkpoint (one sample each). */
export const BFCL_JOB_MULTI_TURN = 3;

export function isBfclJob(suite: string): boolean {
  return isBfclSuite(suite);
}

/** The job's tasks on BFCL: `held` held-out entries in equal shares of BFCL_JOB_HELD (each a stride sample of its category). */
export function bfclJobTasks(held: number): { train: Task[]; held: Task[]; multiTurn: Task[] } {
  const size = (e: BfclEntry) => JSON.stringify(e.tools).length + (e.question[0] ?? []).reduce((n, m) => n + m.content.length, 0);
  const short = new Set(
    Object.keys(BFCL_JOB_TRAIN).flatMap((c) =>
      bfclEntries(c)
        .filter((e) => size(e) < BFCL_JOB_MAX_CHARS)
        .map((e) => e.id),
    ),
  );
  const train = Object.entries(BFCL_JOB_TRAIN).flatMap(([c, { cap, repeat }]) => {
    const tasks = bfclSuite(`bfcl:${c}`, { eval: 0 })
      .filter((t) => short.has(t.id))
      .slice(0, cap ?? Infinity);
    return Array.from({ length: repeat ?? 1 }, () => tasks).flat();
  });
  const per = Math.ceil(held / BFCL_JOB_HELD.length);
  const heldTasks = BFCL_JOB_HELD.flatMap((c) => bfclSuite(`bfcl:${c}`, { train: 0, eval: per }));
  const multiTurn = bfclSuite('bfcl:multi-turn', { train: 0, eval: BFCL_JOB_MULTI_TURN });
  return { train, held: heldTasks, multiTurn };
}

export interface BfclCategoryFigures {
  entries: number;
  /** BFCL's accuracy: the share of entries whose first sample BFCL's checker accepts. */
  bfcl_accuracy: number;
  /** Over every sample, with the 95% interval over entries. */
  pass_at_1: number;
  ci95: [number, number];
}

export interface BfclStage {
  held_out: Record<string, BfclCategoryFigures>;
  multi_turn: Record<string, BfclCategoryFigures>;
}

function byCategory(tasks: readonly Task[], trajectories: readonly Trajectory[], k: number): Record<string, BfclCategoryFigures> {
  const cat = new Map(tasks.map((t) => [t.id, String(t.params?.bfcl_category ?? '')]));
  const out: Record<string, BfclCategoryFigures> = {};
  for (const c of [...new Set(tasks.map((t) => String(t.params?.bfcl_category ?? '')))]) {
    const of = trajectories.filter((t) => cat.get(t.task_id) === c);
    const first = new Map<string, Trajectory>();
    for (const t of of) if (!first.has(t.task_id) || t.sample < first.get(t.task_id)!.sample) first.set(t.task_id, t);
    const s = summarizeEpisodes(of, k);
    out[c] = {
      entries: first.size,
      bfcl_accuracy: first.size ? [...first.values()].filter((t) => t.success).length / first.size : 0,
      pass_at_1: s.success,
      ci95: s.ci95,
    };
  }
  return out;
}

/** A checkpoint's BFCL figures: the held-out categories and the multi-turn sample. */
export function bfclStage(held: readonly Task[], heldTrajectories: readonly Trajectory[], k: number, multiTurn: readonly Trajectory[]): BfclStage {
  const mtTasks = [...new Set(multiTurn.map((t) => t.task_id))].map((id) => ({ id, params: { bfcl_category: id.replace(/_\d+$/, '') } }) as unknown as Task);
  return { held_out: byCategory(held, heldTrajectories, k), multi_turn: byCategory(mtTasks, multiTurn, 1) };
}
