/**
 * BFCL's figures for an evaluation of BFCL tasks: per category BFCL's accuracy (each entry's first
 * sample, graded by BFCL's own checker through the task's `bfcl` check, as BFCL scores one output
 * per entry) beside mcp-gym's pass@1 with its 95% interval over entries and pass^k; then BFCL's
 * summary figures (non-live AST, live, multi-turn, overall) computed by BFCL's own
 * generate_leaderboard_csv from those accuracies. `--bfcl-results DIR` writes the first samples'
 * outputs in BFCL's result-file format, for BFCL's own `evaluate` command.
 */
import { summarizeEpisodes } from '../../lib/index.ts';
import { bfclGrader, bfclResult, writeBfclResults, type BfclTables, type Task, type Trajectory } from '../env/index.ts';

export interface BfclCategoryScore {
  category: string;
  entries: number;
  /** BFCL's accuracy: the share of entries whose first sample BFCL's checker accepts. */
  bfcl_accuracy: number;
  /** mcp-gym's estimate over every sample, with its 95% interval over entries. */
  pass_at_1: number;
  ci95: [number, number];
  pass_hat_k: number;
}

export interface BfclReport {
  categories: BfclCategoryScore[];
  /** BFCL's summary figures, as its leaderboard computes them (categories not run count as BFCL counts them: 0, shown N/A). */
  summary: Record<string, string>;
  tables?: BfclTables;
}

/** The BFCL category of a task (its params), or undefined for other tasks. */
export function bfclCategoryOfTask(task: Pick<Task, 'params'>): string | undefined {
  const c = task.params?.bfcl_category;
  return typeof c === 'string' ? c : undefined;
}

/** The first sample of each BFCL task, with its output in BFCL's format. */
export function bfclOutputs(tasks: readonly Task[], trajectories: readonly Trajectory[]): { category: string; id: string; result: unknown; valid: boolean }[] {
  const byTask = new Map(tasks.map((t) => [t.id, t]));
  const first = new Map<string, Trajectory>();
  for (const t of trajectories) {
    const prev = first.get(t.task_id);
    if (!prev || t.sample < prev.sample) first.set(t.task_id, t);
  }
  const out: { category: string; id: string; result: unknown; valid: boolean }[] = [];
  for (const [id, t] of first) {
    const task = byTask.get(id);
    const category = task && bfclCategoryOfTask(task);
    if (!category) continue;
    const multi = (task.followups?.length ?? 0) > 0 || category.startsWith('multi_turn');
    out.push({ category, id, result: bfclResult(t.turns, multi), valid: t.success });
  }
  return out;
}

/** The summary figures BFCL's leaderboard shows, from its overall table's columns. */
const SUMMARY_COLUMNS = ['Overall Acc', 'Non-Live AST Acc', 'Live Acc', 'Multi Turn Acc', 'Irrelevance Detection', 'Relevance Detection'];

export async function bfclReport(tasks: readonly Task[], trajectories: readonly Trajectory[], k: number, withTables = false): Promise<BfclReport | undefined> {
  const outputs = bfclOutputs(tasks, trajectories);
  if (outputs.length === 0) return undefined;
  const categoryOf = new Map(tasks.map((t) => [t.id, bfclCategoryOfTask(t)]));
  const categories: BfclCategoryScore[] = [];
  for (const category of [...new Set(outputs.map((o) => o.category))]) {
    const firsts = outputs.filter((o) => o.category === category);
    const episodes = trajectories.filter((t) => categoryOf.get(t.task_id) === category);
    const s = summarizeEpisodes(episodes, k);
    categories.push({
      category,
      entries: firsts.length,
      bfcl_accuracy: firsts.filter((o) => o.valid).length / firsts.length,
      pass_at_1: s.success,
      ci95: s.ci95,
      pass_hat_k: s.pass_hat_K.mean,
    });
  }
  const tables = await bfclGrader().summary(Object.fromEntries(categories.map((c) => [c.category, { accuracy: c.bfcl_accuracy, total_count: c.entries }])));
  const overall = tables.data_overall?.[0] ?? {};
  const summary = Object.fromEntries(SUMMARY_COLUMNS.filter((c) => c in overall).map((c) => [c, overall[c]!]));
  return { categories, summary, ...(withTables ? { tables } : {}) };
}

/** Writes the first samples' outputs for BFCL's own evaluation; returns the files. */
export function writeBfclResultDir(dir: string, tasks: readonly Task[], trajectories: readonly Trajectory[]): string[] {
  return writeBfclResults(dir, bfclOutputs(tasks, trajectories));
}

/** The report as table rows for the terminal. */
export function bfclRows(r: BfclReport): string[][] {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  return [
    ['category', 'entries', 'BFCL accuracy', 'pass@1 [95%]', 'pass^k'],
    ...r.categories.map((c) => [
      c.category,
      String(c.entries),
      pct(c.bfcl_accuracy),
      `${pct(c.pass_at_1)} [${pct(c.ci95[0])}, ${pct(c.ci95[1])}]`,
      pct(c.pass_hat_k),
    ]),
    ...Object.entries(r.summary).map(([k, v]) => [`BFCL ${k}`, '', v, '', '']),
  ];
}
