/** The bench report for a terminal: text tables of load, fuzz, replay and agent success, and the feedback for server authors. */
import { feedbackSections, type Feedback } from './feedback.ts';
import type { BenchReport } from './report.ts';
import { agentTableRows, fmt, OUTCOME_LABEL, OUTCOME_ORDER, pct } from './report-format.ts';

/** A left-aligned text table (numbers right-aligned). */
export function textTable(rows: (string | number)[][]): string {
  const cells = rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)));
  const numeric = rows[1]?.map((c) => typeof c === 'number') ?? [];
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** The report for a terminal. */
export function renderText(r: BenchReport): string {
  const out: string[] = [];
  if (r.server) {
    out.push(`server: ${r.server.transport} ${r.server.target}${r.server.name ? ` (${r.server.name}${r.server.version ? ' ' + r.server.version : ''})` : ''}`);
    out.push(
      `connect ${fmt(r.connect_ms ?? 0)} ms, tools/list ${fmt(r.list_tools_ms ?? 0)} ms, ${r.tool_count ?? 0} tools` +
        (r.excluded.length ? ` (excluded: ${r.excluded.join(', ')})` : ''),
    );
    if (r.tool_surface) out.push(`tool surface: ${r.tool_surface.hash}`);
  }
  if (r.skipped?.length) {
    out.push(`skipped ${r.skipped.length} tool${r.skipped.length === 1 ? '' : 's'} that may write (not called; --allow-writes calls them):`);
    out.push(textTable([['tool', 'why'], ...r.skipped.map((s) => [s.tool, s.reason])]).replace(/^/gm, '  '));
  }
  if (r.may_write?.length) out.push(`--allow-writes: called although they may write: ${r.may_write.map((s) => `${s.tool} (${s.reason})`).join(', ')}`);
  if (r.process) {
    out.push(
      `server process: CPU ${fmt(r.process.cpu_ms)} ms in all, ${fmt(r.process.cpu_ms_window)} ms during the benchmark (${fmt(r.process.cpu_cores_window)} cores), peak memory ${fmt(r.process.peak_rss_mb)} MB (${r.process.processes} process${r.process.processes === 1 ? '' : 'es'})`,
    );
  }
  const tools = Object.values(r.tools);
  if (tools.length) {
    const levels = r.concurrency;
    out.push('');
    out.push(`load: up to ${r.calls_per_level} calls per tool and level; latency at concurrency ${levels[0]}; throughput in calls/s by concurrency`);
    const head = ['tool', 'calls', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', ...levels.map((c) => `c=${c}/s`), 'errors', 'timeouts'];
    const rows: (string | number)[][] = [head];
    for (const t of tools) {
      rows.push([
        t.tool + (t.args_valid ? '' : ' *'),
        t.calls,
        t.p50_ms,
        t.p95_ms,
        t.p99_ms,
        t.max_ms,
        ...levels.map((c) => t.calls_per_s[String(c)] ?? 0),
        `${t.errors} (${pct(t.error_rate)})`,
        `${t.timeouts} (${pct(t.timeout_rate)})`,
      ]);
    }
    out.push(textTable(rows));
    if (tools.some((t) => !t.args_valid)) out.push('* no generated arguments validated against the schema: pass --examples for this tool');
    for (const t of tools)
      if (t.first_error)
        out.push(
          `${t.tool}: ${Object.entries(t.error_kinds)
            .map(([k, v]) => `${v} ${k}`)
            .join(
              ', ',
            )}; e.g. ${t.first_error.split('\n')[0]!.slice(0, 160)}${t.ok_p50_ms !== undefined && t.error_p50_ms !== undefined ? ` (p50 ${fmt(t.ok_p50_ms)} ms when it succeeds, ${fmt(t.error_p50_ms)} ms when it fails)` : t.ok_p50_ms === undefined ? ' (no call succeeded: every figure above is the error path)' : ''}`,
        );
  }
  if (r.fuzz) {
    const f = r.fuzz;
    out.push('');
    out.push(
      `fuzz: seed ${f.seed}, up to ${f.cases_per_tool} cases per tool, timeout ${f.timeout_ms} ms; ${f.restarts} server restart${f.restarts === 1 ? '' : 's'}`,
    );
    const rows: (string | number)[][] = [['tool', 'cases', ...OUTCOME_ORDER.map((o) => OUTCOME_LABEL[o])]];
    for (const t of Object.values(f.tools)) rows.push([t.tool, t.cases, ...OUTCOME_ORDER.map((o) => t[o])]);
    rows.push(['all', f.totals.cases, ...OUTCOME_ORDER.map((o) => f.totals[o])]);
    out.push(textTable(rows));
    for (const x of f.failures.slice(0, 20))
      out.push(`  ${x.outcome}: ${x.tool} ${x.kind ?? ''} at ${x.path ?? '?'}: ${(x.detail ?? '').split('\n')[0]!.slice(0, 140)}`);
    if (f.failures.length > 20) out.push(`  ... and ${f.failures.length - 20} more`);
    if (f.failures_file)
      out.push(`${f.failures.length} failing input${f.failures.length === 1 ? '' : 's'} saved to ${f.failures_file} (replay: --replay ${f.failures_file})`);
  }
  if (r.replay) {
    const p = r.replay;
    out.push('');
    out.push(`replay${p.file ? ` of ${p.file}` : ''}: ${p.results.length} inputs, ${p.reproduced} reproduced`);
    const rows: (string | number)[][] = [['tool', 'kind', 'path', 'recorded', 'now', 'reproduced']];
    for (const x of p.results)
      rows.push([x.tool, x.kind ?? '', x.path ?? '', OUTCOME_LABEL[x.recorded] ?? x.recorded, OUTCOME_LABEL[x.outcome], x.reproduced ? 'yes' : 'no']);
    out.push(textTable(rows));
  }
  if (r.agent) {
    const a = r.agent;
    const K = a.k;
    out.push('');
    out.push(`agent: policy ${a.policy}, ${a.tasks} tasks x ${K} runs = ${a.episodes} episodes in ${fmt(a.seconds)} s`);
    const shown = 40;
    out.push(textTable(agentTableRows(a, shown)));
    if (a.per_task.length > shown) out.push(`(${a.per_task.length - shown} more tasks in --json and --html)`);
    out.push(
      `success rate ${pct(a.success_rate)} [${pct(a.success_ci95[0])}, ${pct(a.success_ci95[1])}], pass@1 ${fmt(a.pass_at_k['1'] ?? 0)}, pass@${K} ${fmt(a.pass_at_k[String(K)] ?? 0)}, pass^${K} ${fmt(a.pass_hat_k[String(K)] ?? 0)}, tool errors ${a.tool_errors} (${pct(a.tool_error_rate)} of calls), failed episodes ${a.failed_episodes}`,
    );
    if (a.feedback) out.push('', renderFeedbackText(a.feedback));
  }
  if (r.warnings.length) {
    out.push('');
    for (const w of r.warnings) out.push(`warning: ${w}`);
  }
  return out.join('\n');
}

/** Feedback for server authors (src/bench/feedback.ts) for a terminal: a table per server, then its argument errors by field and the tools never called. */
export function renderFeedbackText(f: Feedback): string {
  const out = [`feedback for server authors: ${f.tool_calls} tool calls in ${f.episodes} episodes (time: share of the episodes' ${fmt(f.episode_ms)} ms)`];
  for (const s of feedbackSections(f)) {
    out.push(`${s.heading}`);
    if (s.rows.length > 1) out.push(textTable(s.rows).replace(/^/gm, '  '));
    for (const n of s.notes) out.push(`  ${n}`);
  }
  if (f.unknown_tools.length) out.push(`tools called that no server offers: ${f.unknown_tools.map((u) => `${u.name} (${u.calls})`).join(', ')}`);
  return out.join('\n');
}
