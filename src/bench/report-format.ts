/** Formatting shared by the bench report's renderings: numbers, percentages, and the fuzz outcomes' labels and order. */
import type { AgentReport } from './agent.ts';
import type { Outcome } from './fuzz-classify.ts';

export const OUTCOME_LABEL: Record<Outcome, string> = {
  rejected: 'rejected',
  accepted: 'accepted',
  protocol_error: 'protocol error',
  crash: 'crash',
  hang: 'hang',
};
export const OUTCOME_ORDER: Outcome[] = ['rejected', 'accepted', 'protocol_error', 'crash', 'hang'];

export function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

export const pct = (x: number) => `${(100 * x).toFixed(x > 0 && x < 0.001 ? 3 : 1)}%`;

/**
 * The agent table's rows, for the text and the HTML report alike: a header, a row per task (the
 * first `limit`), and the mean. pass@K and pass^K of a task run fewer than K times are not
 * defined: '-' (the mean leaves such tasks out, as agentStats computes it).
 */
export function agentTableRows(a: AgentReport, limit = Infinity): (string | number)[][] {
  const K = a.k;
  const rows: (string | number)[][] = [
    ['task', 'runs', 'success', 'pass@1', `pass@${K}`, `pass^${K}`, 'turns', 'tool calls', 'tool errors', 'episode ms', 'tool ms'],
  ];
  for (const t of a.per_task.slice(0, limit))
    rows.push([
      t.task,
      t.runs,
      t.success_rate,
      t.pass_at[0] ?? '-',
      t.pass_at[K - 1] ?? '-',
      t.pass_hat[K - 1] ?? '-',
      t.mean_turns,
      t.mean_tool_calls,
      t.tool_errors,
      t.mean_episode_ms,
      t.mean_tool_ms,
    ]);
  rows.push([
    'mean',
    a.episodes,
    a.success_rate,
    a.pass_at_k['1'] ?? 0,
    a.pass_at_k[String(K)] ?? 0,
    a.pass_hat_k[String(K)] ?? 0,
    a.mean_turns,
    a.mean_tool_calls,
    a.tool_errors,
    a.mean_episode_ms,
    a.mean_tool_ms,
  ]);
  return rows;
}
