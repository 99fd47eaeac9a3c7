/**
 * A benchmark's report and its three renderings: a terminal table, one JSON object (for the last
 * line of `--json`), and a self-contained HTML page with inline SVG charts (no scripts, no
 * network): latency histograms, throughput against concurrency, the fuzz table.
 */
import { esc } from '../../lib/index.ts';
import type { ServerSurface } from '../tools/index.ts';
import type { AgentReport } from './agent.ts';
import { feedbackSections, type Feedback } from './feedback.ts';
import type { FuzzReport, ReplayResult } from './fuzz.ts';
import type { Outcome } from './fuzz-classify.ts';
import type { Histogram } from './latency.ts';
import type { ToolLoad } from './load.ts';
import type { ProcessReport } from './proc.ts';
import type { SkippedTool } from './safety.ts';

export interface BenchReport {
  /** How the server was reached. */
  server?: { transport: string; target: string; name?: string; version?: string };
  /** Time to connect (spawn and initialize, or the HTTP handshake), ms. */
  connect_ms?: number;
  /** Time of the first complete `tools/list`, ms. */
  list_tools_ms?: number;
  /** Tools the server lists. */
  tool_count?: number;
  /** The server's tool surface (src/tools/surface.ts): its hash, and each tool's (and its parts'). */
  tool_surface?: ServerSurface;
  concurrency: number[];
  calls_per_level: number;
  /** Load figures by tool. */
  tools: Record<string, ToolLoad>;
  excluded: string[];
  /** Tools not called because their annotations say they may write (no `allowWrites`). */
  skipped?: SkippedTool[];
  /** Whether tools that may write were allowed (`--allow-writes`). */
  allow_writes?: boolean;
  /** With `allowWrites`: the tools called although their annotations say they may write. */
  may_write?: SkippedTool[];
  warnings: string[];
  /** CPU time and peak memory of a stdio server's process tree. */
  process?: ProcessReport;
  fuzz?: FuzzReport & { failures_file?: string; timeout_ms: number; tool_timeout_ms?: Record<string, number>; progress_resets?: boolean };
  replay?: { file?: string; results: ReplayResult[]; counts: Record<Outcome, number>; reproduced: number };
  agent?: AgentReport;
  seconds: number;
}

const OUTCOME_LABEL: Record<Outcome, string> = { rejected: 'rejected', accepted: 'accepted', protocol_error: 'protocol error', crash: 'crash', hang: 'hang' };
const OUTCOME_ORDER: Outcome[] = ['rejected', 'accepted', 'protocol_error', 'crash', 'hang'];

export function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

const pct = (x: number) => `${(100 * x).toFixed(x > 0 && x < 0.001 ? 3 : 1)}%`;

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
    const rows: (string | number)[][] = [
      ['task', 'runs', 'success', 'pass@1', `pass@${K}`, `pass^${K}`, 'turns', 'tool calls', 'tool errors', 'episode ms', 'tool ms'],
    ];
    const shown = a.per_task.slice(0, 40);
    for (const t of shown) {
      rows.push([
        t.task,
        t.runs,
        t.success_rate,
        t.pass_at[0] ?? 0,
        t.pass_at[K - 1] ?? t.pass_at[t.pass_at.length - 1] ?? 0,
        t.pass_hat[K - 1] ?? 0,
        t.mean_turns,
        t.mean_tool_calls,
        t.tool_errors,
        t.mean_episode_ms,
        t.mean_tool_ms,
      ]);
    }
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
    out.push(textTable(rows));
    if (a.per_task.length > shown.length) out.push(`(${a.per_task.length - shown.length} more tasks in --json and --html)`);
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

/** The same as an HTML section. */
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

/** The report as one JSON-ready object: saved failing inputs are listed without their (possibly huge) arguments. */
export function reportJson(r: BenchReport): Record<string, unknown> {
  const tools = Object.fromEntries(
    Object.entries(r.tools).map(([name, t]) => {
      const { histogram, ...rest } = t;
      return [name, { ...rest, histogram: { edges_ms: histogram.edges.map((e) => Number(e.toPrecision(4))), counts: histogram.counts } }];
    }),
  );
  const fuzz = r.fuzz && { ...r.fuzz, failures: r.fuzz.failures.map(({ arguments: _a, ...f }) => f) };
  // The headline figures first.
  return roundDeep({
    server: r.server,
    connect_ms: r.connect_ms,
    list_tools_ms: r.list_tools_ms,
    tool_count: r.tool_count,
    ...(r.tool_surface ? { tool_surface: r.tool_surface } : {}),
    concurrency: r.concurrency,
    calls_per_level: r.calls_per_level,
    tools,
    excluded: r.excluded,
    skipped: r.skipped ?? [],
    allow_writes: r.allow_writes ?? false,
    ...(r.may_write ? { may_write: r.may_write } : {}),
    process: r.process,
    ...(fuzz ? { fuzz } : {}),
    ...(r.replay ? { replay: r.replay } : {}),
    ...(r.agent ? { agent: r.agent } : {}),
    warnings: r.warnings,
    seconds: r.seconds,
  }) as Record<string, unknown>;
}

/** Every fractional number rounded to 4 decimals (0.1 µs for milliseconds). */
function roundDeep(v: unknown): unknown {
  if (typeof v === 'number') return Number.isInteger(v) || !Number.isFinite(v) ? v : Math.round(v * 1e4) / 1e4;
  if (Array.isArray(v)) return v.map(roundDeep);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, roundDeep(x)]));
  return v;
}

// ---------------------------------------------------------------- HTML

const PALETTE = ['#4269d0', '#efb118', '#ff725c', '#6cc5b0', '#3ca951', '#ff8ab7', '#a463f2', '#97bbf5', '#9c6b4e', '#9498a0'];

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** A latency histogram: log-bucket bars with p50 and p99 marked. */
export function histogramSvg(title: string, h: Histogram, marks: { label: string; ms: number }[]): string {
  const W = 520;
  const H = 220;
  const L = 48;
  const R = 12;
  const T = 28;
  const B = 36;
  const pw = W - L - R;
  const ph = H - T - B;
  const parts: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">`];
  parts.push(`<text x="${L}" y="18" class="t">${esc(title)}</text>`);
  if (!h.counts.length) {
    parts.push(`<text x="${L}" y="${T + ph / 2}">no calls</text></svg>`);
    return parts.join('');
  }
  const lo = Math.log10(h.edges[0]!);
  const hi = Math.log10(h.edges[h.edges.length - 1]!);
  const x = (ms: number) => L + ((Math.log10(Math.max(ms, 1e-3)) - lo) / Math.max(1e-9, hi - lo)) * pw;
  const ymax = niceMax(Math.max(...h.counts));
  const y = (c: number) => T + ph - (c / ymax) * ph;
  parts.push(`<line x1="${L}" y1="${T + ph}" x2="${L + pw}" y2="${T + ph}" class="ax"/><line x1="${L}" y1="${T}" x2="${L}" y2="${T + ph}" class="ax"/>`);
  for (let i = 0; i < h.counts.length; i++) {
    const x0 = x(h.edges[i]!);
    const x1 = x(h.edges[i + 1]!);
    const c = h.counts[i]!;
    if (c > 0)
      parts.push(
        `<rect x="${x0.toFixed(1)}" y="${y(c).toFixed(1)}" width="${Math.max(1, x1 - x0 - 1).toFixed(1)}" height="${(T + ph - y(c)).toFixed(1)}" fill="#4269d0"><title>${fmt(h.edges[i]!)}–${fmt(h.edges[i + 1]!)} ms: ${c}</title></rect>`,
      );
  }
  for (let d = Math.ceil(lo); d <= Math.floor(hi); d++) {
    const v = 10 ** d;
    parts.push(
      `<line x1="${x(v).toFixed(1)}" y1="${T + ph}" x2="${x(v).toFixed(1)}" y2="${T + ph + 4}" class="ax"/><text x="${x(v).toFixed(1)}" y="${T + ph + 16}" text-anchor="middle">${v >= 1 ? v : v.toPrecision(1)}</text>`,
    );
  }
  parts.push(`<text x="${L + pw}" y="${H - 4}" text-anchor="end">ms (log scale)</text>`);
  parts.push(`<text x="${L - 4}" y="${T + 4}" text-anchor="end">${ymax}</text><text x="${L - 4}" y="${T + ph}" text-anchor="end">0</text>`);
  marks.forEach((m, i) => {
    const mx = x(m.ms).toFixed(1);
    parts.push(
      `<line x1="${mx}" y1="${T}" x2="${mx}" y2="${T + ph}" stroke="${i ? '#ff725c' : '#3ca951'}" stroke-dasharray="4 3"/><text x="${(Number(mx) + 3).toFixed(1)}" y="${T + 10 + i * 12}" fill="${i ? '#ff725c' : '#3ca951'}">${esc(m.label)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

/** Throughput against concurrency: one line per series, concurrency levels evenly spaced. */
export function throughputSvg(levels: number[], series: { name: string; values: Record<string, number> }[]): string {
  const W = 640;
  const H = 300;
  const L = 64;
  const R = 160;
  const T = 28;
  const B = 40;
  const pw = W - L - R;
  const ph = H - T - B;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="throughput against concurrency">`,
  ];
  parts.push(`<text x="${L}" y="18" class="t">Throughput (calls/s) against concurrency</text>`);
  const ymax = niceMax(Math.max(1, ...series.flatMap((s) => Object.values(s.values))));
  const x = (i: number) => L + (levels.length > 1 ? (i / (levels.length - 1)) * pw : pw / 2);
  const y = (v: number) => T + ph - (v / ymax) * ph;
  parts.push(`<line x1="${L}" y1="${T + ph}" x2="${L + pw}" y2="${T + ph}" class="ax"/><line x1="${L}" y1="${T}" x2="${L}" y2="${T + ph}" class="ax"/>`);
  for (let g = 0; g <= 4; g++) {
    const v = (ymax * g) / 4;
    parts.push(
      `<line x1="${L}" y1="${y(v).toFixed(1)}" x2="${L + pw}" y2="${y(v).toFixed(1)}" class="grid"/><text x="${L - 4}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${fmt(v)}</text>`,
    );
  }
  levels.forEach((c, i) => parts.push(`<text x="${x(i).toFixed(1)}" y="${T + ph + 16}" text-anchor="middle">${c}</text>`));
  parts.push(`<text x="${L + pw / 2}" y="${H - 4}" text-anchor="middle">concurrency</text>`);
  series.forEach((s, si) => {
    const color = PALETTE[si % PALETTE.length]!;
    const pts = levels.map((c, i) => [i, s.values[String(c)]] as const).filter(([, v]) => v !== undefined);
    parts.push(
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map(([i, v]) => `${x(i).toFixed(1)},${y(v!).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const [i, v] of pts)
      parts.push(
        `<circle cx="${x(i).toFixed(1)}" cy="${y(v!).toFixed(1)}" r="3" fill="${color}"><title>${esc(s.name)} at ${levels[i]}: ${fmt(v!)} calls/s</title></circle>`,
      );
    parts.push(
      `<rect x="${L + pw + 12}" y="${T + si * 16}" width="10" height="10" fill="${color}"/><text x="${L + pw + 26}" y="${T + si * 16 + 9}">${esc(s.name)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

const OUTCOME_COLOR: Record<Outcome, string> = { rejected: '#3ca951', accepted: '#97bbf5', protocol_error: '#efb118', crash: '#d62728', hang: '#a463f2' };

/** Fuzz outcomes: one stacked bar per tool. */
export function fuzzSvg(f: FuzzReport): string {
  const rows = Object.values(f.tools);
  const W = 640;
  const L = 160;
  const R = 16;
  const T = 44;
  const bar = 18;
  const H = T + rows.length * (bar + 6) + 12;
  const pw = W - L - R;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="fuzz outcomes by tool">`,
  ];
  parts.push(`<text x="8" y="18" class="t">Fuzz outcomes by tool</text>`);
  OUTCOME_ORDER.forEach((o, i) =>
    parts.push(
      `<rect x="${L + i * 96}" y="26" width="10" height="10" fill="${OUTCOME_COLOR[o]}"/><text x="${L + i * 96 + 14}" y="35">${OUTCOME_LABEL[o]}</text>`,
    ),
  );
  rows.forEach((t, ri) => {
    const yy = T + ri * (bar + 6);
    parts.push(`<text x="${L - 6}" y="${yy + 13}" text-anchor="end">${esc(t.tool)}</text>`);
    let x0 = L;
    for (const o of OUTCOME_ORDER) {
      const w = t.cases ? (t[o] / t.cases) * pw : 0;
      if (w > 0)
        parts.push(
          `<rect x="${x0.toFixed(1)}" y="${yy}" width="${w.toFixed(1)}" height="${bar}" fill="${OUTCOME_COLOR[o]}"><title>${esc(t.tool)}: ${t[o]} ${OUTCOME_LABEL[o]}</title></rect>`,
        );
      x0 += w;
    }
  });
  parts.push('</svg>');
  return parts.join('');
}

/** pass@k and pass^k against k. */
export function passSvg(a: AgentReport): string {
  const levels = Array.from({ length: a.k }, (_, i) => i + 1);
  const svg = throughputSvg(levels, [
    { name: 'pass@k', values: Object.fromEntries(levels.map((k) => [String(k), a.pass_at_k[String(k)] ?? 0])) },
    { name: 'pass^k', values: Object.fromEntries(levels.map((k) => [String(k), a.pass_hat_k[String(k)] ?? 0])) },
  ]);
  return svg
    .replace('Throughput (calls/s) against concurrency', 'pass@k and pass^k against k')
    .replace('>concurrency</text>', '>k</text>')
    .replace('throughput against concurrency', 'pass@k and pass^k');
}

function htmlTable(rows: (string | number)[][]): string {
  const [head, ...body] = rows;
  const cell = (c: string | number, tag: string) => `<${tag}${typeof c === 'number' ? ' class="n"' : ''}>${esc(typeof c === 'number' ? fmt(c) : c)}</${tag}>`;
  return `<table><thead><tr>${head!.map((c) => cell(c, 'th')).join('')}</tr></thead><tbody>${body.map((r) => `<tr>${r.map((c) => cell(c, 'td')).join('')}</tr>`).join('')}</tbody></table>`;
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
    const rows: (string | number)[][] = [
      ['task', 'runs', 'success', 'pass@1', `pass@${K}`, `pass^${K}`, 'turns', 'tool calls', 'tool errors', 'episode ms', 'tool ms'],
    ];
    for (const t of a.per_task)
      rows.push([
        t.task,
        t.runs,
        t.success_rate,
        t.pass_at[0] ?? 0,
        t.pass_at[K - 1] ?? 0,
        t.pass_hat[K - 1] ?? 0,
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
