/**
 * An episode's output in BFCL's result-file format for a function-calling model (what BFCL's
 * OpenAI handlers write, and what its evaluation reads): a reply with calls is
 * `[{name: json_arguments}, ...]`, a reply without is its text. A single-turn entry's result is
 * the first reply; a multi-turn entry's is, per user turn, the list of its replies (steps).
 * `writeBfclResults` writes them where `bfcl evaluate --result-dir` finds them.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Turn } from '../types.ts';
import { BFCL_LIVE, BFCL_MULTI_TURN, BFCL_NON_LIVE } from './data.ts';

/** The registry name whose decoder reads these results (an OpenAI function-calling model's; bfcl/mcp_gym_bfcl/__init__.py). */
export const BFCL_MODEL_NAME = 'gpt-4o-2024-11-20-FC';

type TurnLike = Pick<Turn, 'action'> & { user_turn?: number };

/** One reply as BFCL's FC handlers record it. Arguments that did not parse are passed on as written: BFCL's decoder refuses them. */
export function bfclStep(turn: TurnLike): unknown {
  const calls = turn.action.tool_calls;
  if (calls.length === 0) return turn.action.content;
  return calls.map((c) => ({ [c.name]: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments ?? {}) }));
}

/** An episode's result item for BFCL (`multiTurn`: grouped by user turn, up to the last turn reached). */
export function bfclResult(turns: readonly TurnLike[], multiTurn: boolean): unknown {
  if (!multiTurn) return turns.length ? bfclStep(turns[0]!) : '';
  const byTurn: unknown[][] = [];
  for (const t of turns) {
    const u = t.user_turn ?? 0;
    while (byTurn.length <= u) byTurn.push([]);
    byTurn[u]!.push(bfclStep(t));
  }
  return byTurn;
}

/** The folder of a category's result file, as BFCL groups them. */
export function bfclGroupDir(category: string): string {
  if ((BFCL_NON_LIVE as readonly string[]).includes(category)) return 'non_live';
  if ((BFCL_LIVE as readonly string[]).includes(category)) return 'live';
  if ((BFCL_MULTI_TURN as readonly string[]).includes(category)) return 'multi_turn';
  throw new Error(`no BFCL result folder for category '${category}'`);
}

/** Writes `<dir>/<model>/<group>/BFCL_v4_<category>_result.json` per category (JSON lines {id, result}); returns the files. */
export function writeBfclResults(dir: string, rows: readonly { category: string; id: string; result: unknown }[]): string[] {
  const byCategory = new Map<string, { id: string; result: unknown }[]>();
  for (const r of rows) {
    const list = byCategory.get(r.category) ?? [];
    list.push({ id: r.id, result: r.result });
    byCategory.set(r.category, list);
  }
  const files: string[] = [];
  for (const [category, list] of byCategory) {
    const folder = join(dir, BFCL_MODEL_NAME, bfclGroupDir(category));
    mkdirSync(folder, { recursive: true });
    const file = join(folder, `BFCL_v4_${category}_result.json`);
    writeFileSync(file, list.map((x) => JSON.stringify(x)).join('\n') + '\n');
    files.push(file);
  }
  return files;
}
