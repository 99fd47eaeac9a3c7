/**
 * BFCL's entries as mcp-gym tasks. A task has one server, `bfcl` (`bfcl:<category>/<id>`, see
 * server.ts), opens with the entry's first turn of messages, gets BFCL's later user turns as
 * follow-ups (with the control call that reveals held-back functions where BFCL adds them), and is
 * checked by one `bfcl` check: BFCL's own verdict on the episode's output. Its reference solution
 * is BFCL's possible answer (single turn) or ground truth (multi-turn), per user turn.
 *
 * Splits: BFCL is test data with no train split of its own. Every entry is in the eval split, and
 * a suite also gives each entry a copy with split 'train' (unless `train: 0`), so that `--split
 * train` and training work: train on one category group and hold out another, as `start --suite
 * bfcl` does (live for training, non-live held out).
 */
import { defineTask, type Task, type TaskInput } from '../task.ts';
import { BFCL_LIVE, bfclCategories, bfclEntries, BFCL_MULTI_TURN, BFCL_UNPASSABLE, type BfclEntry } from './data.ts';
import { bfclServerRef } from './server.ts';

/** The control tool of the multi-turn server (bfcl/mcp_gym_bfcl/server.py) that reveals a turn's held-back functions. */
export const REVEAL_TOOL = 'mcp_gym_reveal_functions';

/** BFCL allows 20 steps a turn and stops the entry at the 21st (MAXIMUM_STEP_LIMIT in bfcl_eval/constants/default_prompts.py). */
export const BFCL_STEPS_PER_TURN = 21;

const DIFFICULTY: Record<string, number> = {
  simple_python: 1,
  simple_java: 1,
  simple_javascript: 1,
  irrelevance: 1,
  live_simple: 1,
  live_irrelevance: 1,
  live_relevance: 1,
  multiple: 2,
  live_multiple: 2,
  parallel: 3,
  live_parallel: 3,
  parallel_multiple: 4,
  live_parallel_multiple: 4,
};

/** The task of one entry. */
export function bfclTask(entry: BfclEntry, split: 'train' | 'eval' = 'eval'): Task {
  const multi = entry.multi_turn;
  const server = 'bfcl';
  const first = entry.question[0] ?? [];
  const turns = entry.expert.map((calls) => ({
    calls: calls.map((c) => ({ server, tool: c.name, arguments: c.arguments as Record<string, never> })),
    answer: multi ? 'Done.' : calls.length === 0 ? 'None of the functions I have can do this.' : '',
    parallel: !multi,
  }));
  const input: TaskInput = {
    id: entry.id,
    split,
    difficulty: DIFFICULTY[entry.category] ?? 5,
    family: `bfcl.${entry.category}`,
    messages: first.map((m) => ({ role: m.role, content: m.content })),
    servers: { [server]: bfclServerRef(entry.category, entry.id) },
    max_turns: multi ? Math.min(1000, BFCL_STEPS_PER_TURN * entry.question.length) : 1,
    ...(multi
      ? {
          max_turns_per_user_turn: BFCL_STEPS_PER_TURN,
          followups: entry.followups.map((content, i) => ({
            content,
            setup: entry.missed?.[String(i + 1)] ? [{ server, tool: REVEAL_TOOL, arguments: { turn: i + 1 } }] : [],
          })),
        }
      : {}),
    checks: [{ kind: 'bfcl', category: entry.category, entry: entry.id }],
    solution: { calls: turns.flatMap((t) => t.calls), answer: turns.at(-1)?.answer ?? '', turns },
    params: { bfcl_category: entry.category, bfcl_id: entry.id, ...(BFCL_UNPASSABLE.has(entry.id) ? { bfcl_unpassable: true } : {}) },
  } as TaskInput;
  return defineTask(input);
}

/**
 * The tasks of a BFCL suite name (`bfcl`, `bfcl:<group>`, `bfcl:<category>`, joined by '+'): eval
 * first, then train, like the bundled suites. `eval`/`train` cap each category (a stride sample
 * over BFCL's order, so a cap spreads over the category); by default every entry.
 */
export function bfclSuite(name: string, options: { train?: number; eval?: number } = {}): Task[] {
  const cats = bfclCategories(name);
  const pick = (entries: BfclEntry[], n: number | undefined) => {
    if (n === undefined || n >= entries.length) return entries;
    if (n <= 0) return [];
    const stride = entries.length / n;
    return Array.from({ length: n }, (_, i) => entries[Math.floor(i * stride)]!);
  };
  const evalTasks = cats.flatMap((c) => pick(bfclEntries(c), options.eval).map((e) => bfclTask(e, 'eval')));
  const trainTasks = cats.flatMap((c) => pick(bfclEntries(c), options.train).map((e) => bfclTask(e, 'train')));
  return [...evalTasks, ...trainTasks];
}

export function isBfclSuite(name: string): boolean {
  return name === 'bfcl' || name.startsWith('bfcl:');
}

export { BFCL_LIVE, BFCL_MULTI_TURN };
