// mcp-gym view: the Benchmarks tab: latency, throughput, fuzz findings and skipped tools of each benchmark.
import { barChart, lineChart } from './charts.js{{QUERY}}';
import { fmt, h, pretty } from './dom.js{{QUERY}}';
import { COLORS, api, entryOf, labelOf, runPath, state } from './state.js{{QUERY}}';

export async function renderBench() {
  const box = document.getElementById('bench');
  const ids = state.selected.filter((id) => entryOf(id) && entryOf(id).kind === 'bench');
  if (!ids.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'Select benchmarks in the list (written by mcp-gym bench --out DIR).'));
    return;
  }
  const cards = [];
  for (const id of ids) {
    let b;
    try {
      b = await api(runPath(id, 'bench'));
    } catch (err) {
      cards.push(h('div', { class: 'card' }, h('h2', {}, labelOf(id)), h('p', { class: 'muted' }, err.message)));
      continue;
    }
    const tools = Object.values(b.tools || {});
    const latency = tools.map((t) =>
      h(
        'tr',
        {},
        h('td', {}, t.tool),
        h('td', { class: 'num' }, t.calls),
        h('td', { class: 'num' }, fmt(t.p50_ms, 2)),
        h('td', { class: 'num' }, fmt(t.p95_ms, 2)),
        h('td', { class: 'num' }, fmt(t.p99_ms, 2)),
        h('td', { class: 'num' }, fmt(t.max_ms, 2)),
        h('td', { class: 'num' + (t.errors ? ' fail' : '') }, t.errors),
        h('td', { class: 'num' }, t.timeouts),
      ),
    );
    const hists = tools
      .filter((t) => t.histogram && t.histogram.counts)
      .map((t, i) =>
        h(
          'div',
          { class: 'chart', 'data-tool': t.tool },
          h('h3', {}, t.tool),
          barChart(t.histogram.edges_ms, t.histogram.counts, { color: COLORS[i % COLORS.length] }),
        ),
      );
    const throughput = tools.map((t, i) => ({
      id: t.tool,
      label: t.tool,
      color: COLORS[i % COLORS.length],
      points: Object.entries(t.calls_per_s || {})
        .map(([c, v]) => ({ x: Number(c), y: v }))
        .sort((a, c) => a.x - c.x),
    }));
    const tpLegend = h(
      'div',
      { class: 'legend' },
      ...throughput.map((sr) => h('span', { class: 'item' }, h('span', { class: 'swatch', style: 'background:' + sr.color }), sr.label)),
    );
    const fuzz = b.fuzz;
    const fuzzRows = fuzz
      ? Object.values(fuzz.tools || {}).map((t) =>
          h(
            'tr',
            {},
            h('td', {}, t.tool),
            h('td', { class: 'num' }, t.cases),
            h('td', { class: 'num' }, t.rejected),
            h('td', { class: 'num' }, t.accepted),
            h('td', { class: 'num' + (t.protocol_error ? ' fail' : '') }, t.protocol_error),
            h('td', { class: 'num' + (t.crash ? ' fail' : '') }, t.crash),
            h('td', { class: 'num' + (t.hang ? ' fail' : '') }, t.hang),
          ),
        )
      : [];
    const findings = fuzz
      ? (fuzz.failures || []).map((f) =>
          h(
            'tr',
            { class: 'failed-check' },
            h('td', {}, f.outcome),
            h('td', {}, f.tool),
            h('td', {}, f.kind || ''),
            h('td', {}, f.path || ''),
            h('td', {}, h('pre', { class: 'json' }, f.arguments === undefined ? '(not recorded)' : pretty(f.arguments))),
            h('td', {}, (f.detail || '').slice(0, 300)),
          ),
        )
      : [];
    const skipped = (b.skipped || []).map((x) => h('tr', {}, h('td', {}, x.tool), h('td', {}, x.reason)));
    cards.push(
      h(
        'div',
        { class: 'card bench-card', 'data-id': id },
        h(
          'h2',
          {},
          labelOf(id),
          ' ',
          h(
            'span',
            { class: 'muted' },
            (b.server ? b.server.transport + ' ' + b.server.target : '') + ' · connect ' + fmt(b.connect_ms, 1) + ' ms · ' + (b.tool_count || 0) + ' tools',
          ),
        ),
        h('h3', {}, 'latency per tool'),
        h(
          'table',
          {},
          h('thead', {}, h('tr', {}, ...['tool', 'calls', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', 'errors', 'timeouts'].map((x) => h('th', {}, x)))),
          h('tbody', {}, latency),
        ),
        hists.length ? h('div', { class: 'charts-row' }, hists) : null,
        throughput.some((sr) => sr.points.length)
          ? [
              h('h3', {}, 'throughput (calls/s) against concurrency'),
              h('div', { class: 'chart' }, lineChart(throughput, { metric: 'calls_per_s', xLabel: 'concurrency' }), tpLegend),
            ]
          : null,
        fuzz
          ? [
              h('h3', {}, 'fuzz (' + fuzz.cases_per_tool + ' cases per tool, seed ' + fuzz.seed + ')'),
              h(
                'table',
                {},
                h('thead', {}, h('tr', {}, ...['tool', 'cases', 'rejected', 'accepted', 'protocol errors', 'crashes', 'hangs'].map((x) => h('th', {}, x)))),
                h('tbody', {}, fuzzRows),
              ),
              h('h3', {}, 'findings'),
              findings.length
                ? h(
                    'table',
                    { class: 'findings' },
                    h('thead', {}, h('tr', {}, ...['outcome', 'tool', 'kind', 'path', 'input', 'detail'].map((x) => h('th', {}, x)))),
                    h('tbody', {}, findings),
                  )
                : h('p', { class: 'muted' }, 'no crash, hang or protocol error'),
            ]
          : null,
        h('h3', {}, 'skipped tools (may write; --allow-writes calls them)'),
        skipped.length
          ? h('table', { class: 'skipped' }, h('thead', {}, h('tr', {}, h('th', {}, 'tool'), h('th', {}, 'why'))), h('tbody', {}, skipped))
          : h('p', { class: 'muted' }, 'none'),
      ),
    );
  }
  box.replaceChildren(...cards);
}
