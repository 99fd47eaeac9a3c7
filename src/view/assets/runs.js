// mcp-gym view: the Curves and Config tabs: training runs' metrics (polled), their curves and configs.
import { lineChart } from './charts.js{{QUERY}}';
import { h } from './dom.js{{QUERY}}';
import { api, colorOf, entryOf, labelOf, runPath, state } from './state.js{{QUERY}}';

export async function loadRun(id) {
  const e = entryOf(id);
  if (!e || e.kind !== 'run') return false;
  const held = state.runs[id] || { rows: [], evals: [], entry: e };
  const data = await api(runPath(id, 'metrics?since=' + held.rows.length));
  let changed = false;
  if (data.next < held.rows.length) {
    // the file was rewritten (a run rolled back): read it all again
    const all = await api(runPath(id, 'metrics?since=0'));
    held.rows = all.rows;
    changed = true;
  } else if (data.rows.length) {
    held.rows = held.rows.concat(data.rows);
    changed = true;
  }
  if (JSON.stringify(data.evals) !== JSON.stringify(held.evals)) {
    held.evals = data.evals;
    changed = true;
  }
  held.entry = data.entry;
  state.runs[id] = held;
  if (!state.configs[id]) {
    try {
      state.configs[id] = await api(runPath(id, 'config'));
    } catch {
      state.configs[id] = {};
    }
  }
  return changed;
}

/** The numeric leaves of a metrics row, nested objects as "a.b". */
function flatten(row, prefix, out) {
  for (const [k, v] of Object.entries(row)) {
    const key = prefix ? prefix + '.' + k : k;
    if (typeof v === 'number' && Number.isFinite(v)) out[key] = v;
    else if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, key, out);
  }
  return out;
}

export function selectedRuns() {
  return state.selected.filter((id) => state.runs[id]);
}

/** Each selected run's series: x (step, wall-clock) and the metric's values. */
function seriesOf(id, metric, xAxis) {
  const run = state.runs[id];
  const wallAt = new Map([[0, 0]]);
  let wall = 0;
  const flat = run.rows.map((r) => {
    wall += Number(r.step_seconds ?? r.seconds ?? 0) || 0;
    const step = Number(r.step);
    wallAt.set(step, wall);
    return { step, wall, values: flatten(r, '', {}) };
  });
  if (metric.startsWith('eval:')) {
    const key = metric.slice(5);
    const pts = [];
    for (const e of run.evals) {
      const f = flatten(e, '', {});
      let y = f[key];
      if (y === undefined && (key === 'pass_hat_k' || key === 'pass_at_k')) {
        const ks = Object.keys(e[key] || {})
          .map(Number)
          .sort((a, b) => a - b);
        if (ks.length) y = e[key][String(ks.at(-1))];
      }
      if (typeof y !== 'number') continue;
      const x = xAxis === 'wall' ? wallAt.get(Number(e.step)) : Number(e.step);
      if (x === undefined) continue;
      const p = { x, y };
      if (key === 'success' && Array.isArray(e.ci95)) {
        p.lo = e.ci95[0];
        p.hi = e.ci95[1];
      }
      pts.push(p);
    }
    return pts;
  }
  return flat.filter((r) => r.values[metric] !== undefined).map((r) => ({ x: xAxis === 'wall' ? r.wall : r.step, y: r.values[metric] }));
}

function metricNames() {
  const names = new Set();
  for (const id of selectedRuns()) {
    const run = state.runs[id];
    for (const r of run.rows) for (const k of Object.keys(flatten(r, '', {}))) if (k !== 'step') names.add(k);
    for (const e of run.evals) {
      for (const k of Object.keys(flatten(e, '', {}))) if (k !== 'step' && k !== 'episodes' && !k.startsWith('ci95')) names.add('eval:' + k);
      if (e.pass_hat_k) names.add('eval:pass_hat_k');
      if (e.pass_at_k) names.add('eval:pass_at_k');
    }
  }
  return [...names].sort((a, b) => a.localeCompare(b));
}

export function renderMetricPicker() {
  const box = document.getElementById('metrics');
  const q = document.getElementById('metric-filter').value.trim().toLowerCase();
  box.replaceChildren();
  for (const name of metricNames()) {
    if (q && !name.toLowerCase().includes(q)) continue;
    const cb = h('input', { type: 'checkbox', 'data-metric': name, checked: state.metricsShown.has(name) });
    cb.addEventListener('change', () => {
      if (cb.checked) state.metricsShown.add(name);
      else state.metricsShown.delete(name);
      renderCharts();
    });
    box.append(h('label', {}, cb, ' ', name));
  }
}

function renderLegend() {
  const legend = document.getElementById('legend');
  legend.replaceChildren(
    ...selectedRuns().map((id) =>
      h('span', { class: 'item', 'data-run': id }, h('span', { class: 'swatch', style: 'background:' + colorOf(id) }), labelOf(id)),
    ),
  );
}

/** m minutes and ss seconds (as the terminal's progress bar writes them). */
function minutes(seconds) {
  const s = Math.max(0, Math.round(seconds));
  return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
}

/**
 * A run's progress, as \`mcp-gym train\` shows it on a terminal: the last step of its metrics of the
 * steps it was started for, the training success and reward of that step, its seconds, and (while it
 * runs) the time left: the mean step's seconds times the steps left.
 */
export function progressOf(run) {
  const rows = run.rows;
  const total = Number(run.entry && run.entry.steps_total);
  const last = rows.at(-1);
  if (!last || !(total > 0)) return undefined;
  const step = Number(last.step);
  const secs = rows.map((r) => Number(r.step_seconds)).filter((x) => Number.isFinite(x));
  const mean = secs.length ? secs.reduce((a, b) => a + b, 0) / secs.length : 0;
  const running = run.entry.status === 'running';
  return {
    step,
    total,
    fraction: Math.min(1, step / total),
    success: Number(last.success_rate),
    reward: Number(last.reward_mean),
    lastSeconds: Number(last.step_seconds),
    eta: running ? mean * Math.max(0, total - step) : undefined,
    status: run.entry.status,
  };
}

function renderProgress() {
  const box = document.getElementById('progress');
  const items = [];
  for (const id of selectedRuns()) {
    const p = progressOf(state.runs[id]);
    if (!p) continue;
    const pc = Math.round(100 * p.fraction);
    const text = [
      'step ' + p.step + '/' + p.total + ' (' + pc + '%)',
      Number.isFinite(p.success) ? 'success ' + (100 * p.success).toFixed(0) + '%' : undefined,
      Number.isFinite(p.reward) ? 'reward ' + p.reward.toFixed(3) : undefined,
      Number.isFinite(p.lastSeconds) ? 'last step ' + p.lastSeconds.toFixed(1) + ' s' : undefined,
      p.eta !== undefined ? 'ETA ' + minutes(p.eta) : p.status,
    ].filter(Boolean);
    items.push(
      h(
        'div',
        { class: 'progress-row', 'data-run': id },
        h('span', { class: 'swatch', style: 'background:' + colorOf(id) }),
        h('span', { class: 'label' }, labelOf(id)),
        h(
          'span',
          { class: 'bar', role: 'progressbar', 'aria-valuenow': pc, 'aria-valuemin': 0, 'aria-valuemax': 100 },
          h('span', { class: 'fill', style: 'width:' + pc + '%' }),
        ),
        h('span', { class: 'text' }, text.join(' · ')),
      ),
    );
  }
  box.replaceChildren(...items);
}

export function renderCharts() {
  renderLegend();
  renderProgress();
  const box = document.getElementById('charts');
  const ids = selectedRuns();
  if (!ids.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'Select one or more training runs in the list (the boxes on the left).'));
    return;
  }
  const xAxis = document.getElementById('x-axis').value;
  const smoothing = Number(document.getElementById('smoothing').value);
  const available = new Set(metricNames());
  const charts = [];
  for (const metric of [...state.metricsShown].filter((m) => available.has(m))) {
    const series = ids.map((id) => ({ id, label: labelOf(id), color: colorOf(id), points: seriesOf(id, metric, xAxis) }));
    const legend = h(
      'div',
      { class: 'legend' },
      ...series
        .filter((sr) => sr.points.length)
        .map((sr) => h('span', { class: 'item' }, h('span', { class: 'swatch', style: 'background:' + sr.color }), sr.label)),
    );
    charts.push(
      h(
        'div',
        { class: 'chart', 'data-metric': metric },
        h('h3', {}, metric),
        lineChart(series, { metric, smoothing, xLabel: xAxis === 'wall' ? 'wall-clock (s)' : 'step' }),
        legend,
      ),
    );
  }
  box.replaceChildren(...(charts.length ? charts : [h('p', { class: 'muted' }, 'Pick metrics above.')]));
}

export async function renderConfig() {
  const box = document.getElementById('config');
  const ids = state.selected.slice();
  for (const id of ids) {
    if (!state.configs[id]) {
      try {
        state.configs[id] = await api(runPath(id, 'config'));
      } catch {
        state.configs[id] = {};
      }
    }
  }
  if (!ids.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'Select runs to compare their configs.'));
    return;
  }
  const only = document.getElementById('only-diff').checked;
  const keys = [...new Set(ids.flatMap((id) => Object.keys(state.configs[id] || {})))];
  const head = h(
    'tr',
    {},
    h('th', {}, 'field'),
    ...ids.map((id) => h('th', {}, h('span', { class: 'swatch', style: 'background:' + colorOf(id) }), ' ', labelOf(id))),
  );
  const rows = [];
  for (const k of keys) {
    const vals = ids.map((id) => (state.configs[id] && k in state.configs[id] ? JSON.stringify(state.configs[id][k]) : undefined));
    const differs = ids.length > 1 && new Set(vals.map((v) => (v === undefined ? '(none)' : v))).size > 1;
    if (only && !differs) continue;
    rows.push(
      h(
        'tr',
        { class: differs ? 'diff' : '', 'data-field': k },
        h('td', {}, k),
        ...vals.map((v) => h('td', {}, v === undefined ? h('span', { class: 'muted' }, '(none)') : v)),
      ),
    );
  }
  const ndiff = keys.filter((k) => new Set(ids.map((id) => JSON.stringify((state.configs[id] || {})[k]) ?? '(none)')).size > 1).length;
  box.replaceChildren(
    h('p', { class: 'muted' }, ids.length > 1 ? ndiff + ' field(s) differ between the selected runs (highlighted)' : keys.length + ' fields'),
    h('table', { id: 'config-table' }, h('thead', {}, head), h('tbody', {}, rows)),
  );
}
