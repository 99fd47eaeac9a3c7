/**
 * The bench report as one self-contained HTML page (inline SVG charts, no scripts, no network), and
 * the feedback for server authors as an HTML section.
 */
import { esc } from '../../lib/index.ts';
import { feedbackSections, type Feedback } from './feedback.ts';
import type { BenchReport } from './report.ts';
import { agentTableRows, fmt, OUTCOME_LABEL, OUTCOME_ORDER, pct } from './report-format.ts';
import { fuzzSvg, histogramSvg, passSvg, throughputSvg } from './report-svg.ts';

function htmlTable(rows: (string | number)[][]): string {
  const [head, ...body] = rows;
  const cell = (c: string | number, tag: string) => `<${tag}${typeof c === 'number' ? ' class="n"' : ''}>${esc(typeof c === 'number' ? fmt(c) : c)}</${tag}>`;
  return `<table><thead><tr>${head!.map((c) => cell(c, 'th')).join('')}</tr></thead><tbody>${body.map((r) => `<tr>${r.map((c) => cell(c, 'td')).join('')}</tr>`).join('')}</tbody></table>`;
}

/** Feedback for server authors (src/bench/feedback.ts) as an HTML section. */
export function renderFeedbackHtml(f: Feedback): string {
  const parts = [
    `<section><h2>Feedback for server authors</h2><p>${f.tool_calls} tool calls in ${f.episodes} episodes; time is the share of the episodes' ${esc(fmt(f.episode_ms))} ms.</p>`,
  ];
  for (const s of feedbackSections(f)) {
    parts.push(
      `<h3>${esc(s.heading)}</h3>${s.rows.length > 1 ? htmlTable(s.rows) : ''}${s.notes.length ? `<ul>${s.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>` : ''}`,
    );
  }
  if (f.unknown_tools.length) parts.push(`<p>Tools called that no server offers: ${esc(f.unknown_tools.map((u) => `${u.name} (${u.calls})`).join(', '))}</p>`);
  parts.push('</section>');
  return parts.join('');
}

/** The report as one self-contained HTML page. */
export function renderHtml(r: BenchReport): string {
  const sections: string[] = [];
  const title = r.server ? `mcp-gym bench: ${r.server.name ?? r.server.target}` : 'mcp-gym bench';
  if (r.server) {
    const facts: (string | number)[][] = [
      ['', ''],
      ['server', `${r.server.transport} ${r.server.target}`],
      ['name', `${r.server.name ?? '?'} ${r.server.version ?? ''}`],
      ['connect ms', r.connect_ms ?? 0],
      ['tools/list ms', r.list_tools_ms ?? 0],
      ['tools', r.tool_count ?? 0],
      ['tool surface', r.tool_surface?.hash ?? '(none)'],
      ['excluded', r.excluded.join(', ') || '(none)'],
      ['skipped (may write)', r.skipped?.map((s) => s.tool).join(', ') || '(none)'],
    ];
    if (r.may_write?.length) facts.push(['called with --allow-writes, may write', r.may_write.map((s) => s.tool).join(', ')]);
    if (r.process) {
      facts.push(
        ['server CPU ms (all / during the benchmark)', `${fmt(r.process.cpu_ms)} / ${fmt(r.process.cpu_ms_window)}`],
        ['server peak memory MB', r.process.peak_rss_mb],
      );
    }
    sections.push(`<section><h2>Server</h2>${htmlTable(facts).replace(/<thead>.*?<\/thead>/, '')}</section>`);
    if (r.tool_surface) {
      const rows: (string | number)[][] = [['tool', 'hash', 'description', 'input schema', 'output schema']];
      for (const [name, f] of Object.entries(r.tool_surface.tools))
        rows.push([name, f.hash.slice(0, 16), f.description.slice(0, 16), f.input_schema.slice(0, 16), f.output_schema.slice(0, 16)]);
      sections.push(
        `<section><h2>Tool surface</h2><p>SHA-256 of each tool's canonical JSON (first 16 hex digits; in full in <code>--json</code>). Server: <code>${esc(r.tool_surface.hash)}</code>.</p>${htmlTable(rows)}</section>`,
      );
    }
  }
  if (r.skipped?.length) {
    sections.push(
      `<section><h2>Skipped tools</h2><p>Not called: their annotations say they may change or delete data. <code>--allow-writes</code> calls them.</p>${htmlTable([['tool', 'why'], ...r.skipped.map((s) => [s.tool, s.reason])])}</section>`,
    );
  }
  const tools = Object.values(r.tools);
  if (tools.length) {
    const levels = r.concurrency;
    const rows: (string | number)[][] = [
      ['tool', 'calls', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', ...levels.map((c) => `calls/s at ${c}`), 'errors', 'timeouts'],
    ];
    for (const t of tools)
      rows.push([
        t.tool,
        t.calls,
        t.p50_ms,
        t.p95_ms,
        t.p99_ms,
        t.max_ms,
        ...levels.map((c) => t.calls_per_s[String(c)] ?? 0),
        `${t.errors} (${pct(t.error_rate)})`,
        `${t.timeouts} (${pct(t.timeout_rate)})`,
      ]);
    sections.push(
      `<section><h2>Load</h2><p>Latency at concurrency ${levels[0]}; up to ${r.calls_per_level} calls per tool and level.</p>${htmlTable(rows)}</section>`,
    );
    sections.push(
      `<section><h2>Throughput against concurrency</h2>${throughputSvg(
        levels,
        tools.map((t) => ({ name: t.tool, values: t.calls_per_s })),
      )}</section>`,
    );
    sections.push(
      `<section><h2>Latency histograms</h2><div class="charts">${tools
        .map((t) =>
          histogramSvg(`${t.tool}: ${t.levels[0]?.calls ?? 0} calls at concurrency ${levels[0]}`, t.histogram, [
            { label: 'p50', ms: t.p50_ms },
            { label: 'p99', ms: t.p99_ms },
          ]),
        )
        .join('')}</div></section>`,
    );
  }
  if (r.fuzz) {
    const f = r.fuzz;
    const rows: (string | number)[][] = [['tool', 'cases', ...OUTCOME_ORDER.map((o) => OUTCOME_LABEL[o])]];
    for (const t of Object.values(f.tools)) rows.push([t.tool, t.cases, ...OUTCOME_ORDER.map((o) => t[o])]);
    rows.push(['all', f.totals.cases, ...OUTCOME_ORDER.map((o) => f.totals[o])]);
    const fails: (string | number)[][] = [['outcome', 'tool', 'kind', 'path', 'detail']];
    for (const x of f.failures.slice(0, 200)) fails.push([x.outcome, x.tool, x.kind ?? '', x.path ?? '', (x.detail ?? '').slice(0, 200)]);
    sections.push(
      `<section><h2>Fuzz</h2><p>Seed ${f.seed}, up to ${f.cases_per_tool} cases per tool, timeout ${f.timeout_ms} ms, ${f.restarts} server restarts.` +
        `${f.failures_file ? ` Failing inputs saved to <code>${esc(f.failures_file)}</code>.` : ''}</p>${fuzzSvg(f)}${htmlTable(rows)}${f.failures.length ? `<h3>Crashes and hangs</h3>${htmlTable(fails)}` : ''}</section>`,
    );
  }
  if (r.replay) {
    const rows: (string | number)[][] = [['tool', 'kind', 'path', 'recorded', 'now', 'reproduced']];
    for (const x of r.replay.results)
      rows.push([x.tool, x.kind ?? '', x.path ?? '', OUTCOME_LABEL[x.recorded] ?? x.recorded, OUTCOME_LABEL[x.outcome], x.reproduced ? 'yes' : 'no']);
    sections.push(`<section><h2>Replay</h2><p>${r.replay.results.length} inputs, ${r.replay.reproduced} reproduced.</p>${htmlTable(rows)}</section>`);
  }
  if (r.agent) {
    const a = r.agent;
    const K = a.k;
    const rows = agentTableRows(a);
    sections.push(`<section><h2>Agent success</h2><p>Policy ${esc(a.policy)}, ${a.tasks} tasks x ${K} runs.</p>${passSvg(a)}${htmlTable(rows)}</section>`);
    if (a.feedback) sections.push(renderFeedbackHtml(a.feedback));
  }
  if (r.warnings.length) sections.push(`<section><h2>Warnings</h2><ul>${r.warnings.map((w) => `<li>${esc(w)}</li>`).join('')}</ul></section>`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
svg{font:11px system-ui,sans-serif;margin:6px 12px 6px 0}svg .t{font-weight:600;font-size:12px}svg .ax{stroke:#555}svg .grid{stroke:#eee}
.charts{display:flex;flex-wrap:wrap}code{background:#f4f4f4;padding:1px 4px}
</style></head><body>
<h1>${esc(title)}</h1>
<p>Generated ${new Date().toISOString()} in ${fmt(r.seconds)} s.</p>
${sections.join('\n')}
</body></html>
`;
}
