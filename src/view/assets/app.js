// mcp-gym view: the page. Plain browser JavaScript, no framework, charts drawn as SVG here.
// It polls the viewer's JSON API (src/view/server.ts): the list every 5 s, each selected run's
// metrics every 2 s from the row count it already holds (/metrics?since=N), so a running run's
// curves grow without a reload.
'use strict';

(function () {
  const TOKEN = new URLSearchParams(location.search).get('token');
  const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f', '#7c2d12', '#1e3a8a'];
  const DEFAULT_METRICS = ['reward_mean', 'success_rate', 'eval:success', 'eval:pass_hat_k', 'kl', 'entropy', 'clip_fraction', 'tool_error_rate', 'turns_mean', 'rollout_tokens_per_s'];
  const SVG_NS = 'http://www.w3.org/2000/svg';

  const state = {
    entries: [],
    selected: [], // entry ids, in the order they were selected (the colour order)
    runs: {}, // id -> { rows: [], evals: [], entry }
    configs: {}, // id -> config object
    metricsShown: new Set(DEFAULT_METRICS),
    tab: 'curves',
    traj: { source: null, items: [], a: null, b: null },
  };

  // ---------- helpers ----------
  async function api(path) {
    const res = await fetch(path, { headers: TOKEN ? { authorization: 'Bearer ' + TOKEN } : {}, cache: 'no-store' });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.error || res.status + ' ' + res.statusText);
    return body;
  }
  const runPath = (id, rest) => '/api/run/' + encodeURIComponent(id) + (rest ? '/' + rest : '');

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'style') el.style.cssText = v; // through the CSSOM: the page's CSP refuses style attributes
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
    return el;
  }
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
    for (const c of children.flat()) if (c !== undefined && c !== null) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }
  function fmt(v, digits) {
    if (v === undefined || v === null) return '';
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return String(v);
      if (Number.isInteger(v)) return String(v);
      const a = Math.abs(v);
      if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
      return v.toFixed(digits === undefined ? 3 : digits);
    }
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }
  const pct = (x) => (typeof x === 'number' ? (100 * x).toFixed(1) + '%' : '');
  function interval(iv) {
    if (!iv) return '';
    return pct(iv.success) + (iv.ci95 ? ' [' + (100 * iv.ci95[0]).toFixed(1) + ', ' + (100 * iv.ci95[1]).toFixed(1) + ']' : '');
  }
  function when(isoString) {
    if (!isoString) return '';
    const d = new Date(isoString);
    return d.toLocaleString(undefined, { year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }
  const entryOf = (id) => state.entries.find((e) => e.id === id);
  const colorOf = (id) => COLORS[Math.max(0, state.selected.indexOf(id)) % COLORS.length];
  const labelOf = (id) => {
    const e = entryOf(id);
    return e ? e.name + (e.preset ? ' (' + e.preset + ')' : '') : id;
  };
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const span = hi - lo;
    const step0 = Math.pow(10, Math.floor(Math.log10(span / n)));
    const err = (n * step0) / span;
    const step = step0 * (err <= 0.15 ? 10 : err <= 0.35 ? 5 : err <= 0.75 ? 2 : 1);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
    return out;
  }

  // ---------- the list ----------
  async function refreshList() {
    try {
      const data = await api('/api/list');
      state.entries = data.entries;
      document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
      renderList();
    } catch (err) {
      document.getElementById('updated').textContent = 'error: ' + err.message;
    }
  }

  function renderList() {
    const q = document.getElementById('list-filter').value.trim().toLowerCase();
    const tbody = document.querySelector('#entries tbody');
    tbody.replaceChildren();
    let shown = 0;
    for (const e of state.entries) {
      const text = [e.name, e.kind, e.preset, e.policy, e.model, e.suite, e.status, e.path].join(' ').toLowerCase();
      if (q && !text.includes(q)) continue;
      shown++;
      const checked = state.selected.includes(e.id);
      const box = h('input', { type: 'checkbox', class: 'sel', checked, title: 'select' });
      box.addEventListener('click', (ev) => {
        ev.stopPropagation();
        toggle(e.id, box.checked);
      });
      const steps = e.steps === undefined ? '' : e.steps + (e.steps_total !== undefined ? ' / ' + e.steps_total : '');
      const modelName = e.model ? e.model.split('/').filter(Boolean).at(-1) : '';
      const tr = h(
        'tr',
        { 'data-id': e.id, 'data-kind': e.kind, 'data-status': e.status, class: checked ? 'selected' : '', title: e.path },
        h('td', {}, box),
        h('td', { class: 'name' }, e.name),
        h('td', {}, e.kind),
        h('td', {}, [e.preset, e.kind !== 'run' ? e.policy : undefined].filter(Boolean).join(' ')),
        h('td', { title: e.model || '' }, modelName),
        h('td', {}, e.suite || ''),
        h('td', {}, h('span', { class: 'status ' + e.status, title: e.status_note || '' }, e.status)),
        h('td', { class: 'num' }, steps),
        h('td', { class: 'num' }, interval(e.before)),
        h('td', { class: 'num' }, interval(e.after)),
        h('td', {}, when(e.started_at)),
        h('td', {}, when(e.updated_at)),
      );
      tr.addEventListener('click', () => toggle(e.id, !state.selected.includes(e.id)));
      tbody.append(tr);
    }
    document.getElementById('list-count').textContent = shown + ' of ' + state.entries.length + ' directories';
  }

  function toggle(id, on) {
    const i = state.selected.indexOf(id);
    if (on && i < 0) state.selected.push(id);
    if (!on && i >= 0) state.selected.splice(i, 1);
    renderList();
    onSelectionChanged().then(pushUrl);
  }

  async function onSelectionChanged() {
    await Promise.all(state.selected.map((id) => loadRun(id)));
    renderAll();
  }

  // ---------- runs: metrics ----------
  async function loadRun(id) {
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

  function selectedRuns() {
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
          const ks = Object.keys(e[key] || {}).map(Number).sort((a, b) => a - b);
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

  function renderMetricPicker() {
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

  function ema(ys, alpha) {
    if (!alpha) return ys.slice();
    // debiased exponential moving average (as TensorBoard draws it)
    let last = 0;
    let weight = 0;
    return ys.map((y) => {
      last = last * alpha + (1 - alpha) * y;
      weight = weight * alpha + (1 - alpha);
      return last / weight;
    });
  }

  function renderLegend() {
    const legend = document.getElementById('legend');
    legend.replaceChildren(...selectedRuns().map((id) => h('span', { class: 'item', 'data-run': id }, h('span', { class: 'swatch', style: 'background:' + colorOf(id) }), labelOf(id))));
  }

  /**
   * A line chart: each series a polyline (data-xs, data-ys: its values; data-drawn: the smoothed
   * values drawn), intervals as a band; the plot area and the axis ranges as data- attributes of
   * the svg, so that a point can be mapped back to its value.
   */
  function lineChart(series, o) {
    const W = o.width || 460;
    const H = o.height || 220;
    const m = { l: 52, r: 12, t: 10, b: 30 };
    const pw = W - m.l - m.r;
    const ph = H - m.t - m.b;
    const all = series.flatMap((sr) => sr.points);
    const svg = s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, class: 'line-chart' });
    if (!all.length) {
      svg.append(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no data'));
      return svg;
    }
    let x0 = Math.min(...all.map((p) => p.x));
    let x1 = Math.max(...all.map((p) => p.x));
    let y0 = Math.min(...all.map((p) => (p.lo !== undefined ? Math.min(p.lo, p.y) : p.y)));
    let y1 = Math.max(...all.map((p) => (p.hi !== undefined ? Math.max(p.hi, p.y) : p.y)));
    if (x1 === x0) {
      x0 -= 1;
      x1 += 1;
    }
    if (y1 === y0) {
      const d = Math.abs(y0) * 0.1 || 1;
      y0 -= d;
      y1 += d;
    } else {
      const pad = (y1 - y0) * 0.05;
      y0 -= pad;
      y1 += pad;
    }
    const X = (x) => m.l + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => m.t + ph - ((y - y0) / (y1 - y0)) * ph;
    Object.entries({ 'data-x0': x0, 'data-x1': x1, 'data-y0': y0, 'data-y1': y1, 'data-left': m.l, 'data-top': m.t, 'data-width': pw, 'data-height': ph }).forEach(([k, v]) => svg.setAttribute(k, String(v)));
    for (const t of niceTicks(y0, y1, 5)) {
      svg.append(s('line', { class: 'grid', x1: m.l, x2: m.l + pw, y1: Y(t), y2: Y(t) }));
      svg.append(s('text', { x: m.l - 4, y: Y(t) + 3, 'text-anchor': 'end' }, fmt(t, 3)));
    }
    // Steps are whole numbers: their ticks too (every step when there are few).
    const xTicks = o.xLabel === 'step' ? [...new Set(niceTicks(x0, x1, 6).map((t) => Math.round(t)))].filter((t) => t >= x0 && t <= x1) : niceTicks(x0, x1, 6);
    for (const t of xTicks) {
      svg.append(s('line', { class: 'axis', x1: X(t), x2: X(t), y1: m.t + ph, y2: m.t + ph + 4 }));
      svg.append(s('text', { x: X(t), y: m.t + ph + 15, 'text-anchor': 'middle' }, fmt(t, 2)));
    }
    svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }));
    svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph }));
    svg.append(s('text', { x: m.l + pw / 2, y: H - 3, 'text-anchor': 'middle' }, o.xLabel || ''));
    for (const sr of series) {
      const pts = sr.points;
      if (!pts.length) continue;
      const ys = pts.map((p) => p.y);
      const drawn = ema(ys, o.smoothing || 0);
      const banded = pts.filter((p) => p.lo !== undefined);
      if (banded.length) {
        const upper = banded.map((p) => X(p.x) + ',' + Y(p.hi));
        const lower = banded.map((p) => X(p.x) + ',' + Y(p.lo)).reverse();
        svg.append(s('polygon', { class: 'band', fill: sr.color, points: upper.concat(lower).join(' ') }));
        for (const p of banded) svg.append(s('line', { stroke: sr.color, 'stroke-width': 1, x1: X(p.x), x2: X(p.x), y1: Y(p.lo), y2: Y(p.hi) }));
      }
      if (o.smoothing) svg.append(s('polyline', { class: 'raw', stroke: sr.color, points: pts.map((p) => X(p.x) + ',' + Y(p.y)).join(' ') }));
      svg.append(
        s('polyline', {
          class: 'series',
          stroke: sr.color,
          'data-run': sr.id,
          'data-label': sr.label,
          'data-metric': o.metric,
          'data-n': pts.length,
          'data-xs': JSON.stringify(pts.map((p) => p.x)),
          'data-ys': JSON.stringify(ys),
          'data-drawn': JSON.stringify(drawn),
          points: pts.map((p, i) => X(p.x).toFixed(2) + ',' + Y(drawn[i]).toFixed(2)).join(' '),
        }),
      );
      for (let i = 0; i < pts.length; i++) {
        const c = s('circle', { cx: X(pts[i].x), cy: Y(drawn[i]), r: pts.length > 60 ? 1.2 : 2.5, fill: sr.color });
        c.append(s('title', {}, sr.label + ': ' + (o.xLabel || 'x') + ' ' + fmt(pts[i].x, 2) + ', ' + fmt(pts[i].y, 4) + (pts[i].lo !== undefined ? ' [' + fmt(pts[i].lo, 3) + ', ' + fmt(pts[i].hi, 3) + ']' : '')));
        svg.append(c);
      }
    }
    return svg;
  }

  function renderCharts() {
    renderLegend();
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
      const legend = h('div', { class: 'legend' }, ...series.filter((sr) => sr.points.length).map((sr) => h('span', { class: 'item' }, h('span', { class: 'swatch', style: 'background:' + sr.color }), sr.label)));
      charts.push(h('div', { class: 'chart', 'data-metric': metric }, h('h3', {}, metric), lineChart(series, { metric, smoothing, xLabel: xAxis === 'wall' ? 'wall-clock (s)' : 'step' }), legend));
    }
    box.replaceChildren(...(charts.length ? charts : [h('p', { class: 'muted' }, 'Pick metrics above.')]));
  }

  // ---------- config ----------
  async function renderConfig() {
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
    const head = h('tr', {}, h('th', {}, 'field'), ...ids.map((id) => h('th', {}, h('span', { class: 'swatch', style: 'background:' + colorOf(id) }), ' ', labelOf(id))));
    const rows = [];
    for (const k of keys) {
      const vals = ids.map((id) => (state.configs[id] && k in state.configs[id] ? JSON.stringify(state.configs[id][k]) : undefined));
      const differs = ids.length > 1 && new Set(vals.map((v) => (v === undefined ? '(none)' : v))).size > 1;
      if (only && !differs) continue;
      rows.push(h('tr', { class: differs ? 'diff' : '', 'data-field': k }, h('td', {}, k), ...vals.map((v) => h('td', {}, v === undefined ? h('span', { class: 'muted' }, '(none)') : v))));
    }
    const ndiff = keys.filter((k) => new Set(ids.map((id) => JSON.stringify((state.configs[id] || {})[k]) ?? '(none)')).size > 1).length;
    box.replaceChildren(
      h('p', { class: 'muted' }, ids.length > 1 ? ndiff + ' field(s) differ between the selected runs (highlighted)' : keys.length + ' fields'),
      h('table', { id: 'config-table' }, h('thead', {}, head), h('tbody', {}, rows)),
    );
  }

  // ---------- trajectories ----------
  function renderTrajSource() {
    const sel = document.getElementById('traj-source');
    const ids = state.selected.filter((id) => {
      const e = entryOf(id);
      return e && e.kind !== 'bench';
    });
    const current = state.traj.source && ids.includes(state.traj.source) ? state.traj.source : ids[0] || null;
    sel.replaceChildren(...ids.map((id) => h('option', { value: id, selected: id === current }, labelOf(id) + ' [' + entryOf(id).kind + ']')));
    if (current !== state.traj.source) {
      state.traj.source = current;
      state.traj.a = state.traj.b = null;
      loadTrajectories();
    }
  }

  async function loadTrajectories() {
    const list = document.getElementById('traj-list');
    const src = state.traj.source;
    renderTrajSlots();
    if (!src) {
      list.replaceChildren(h('p', { class: 'muted' }, 'Select a run, eval or rollout in the list.'));
      return;
    }
    const q = new URLSearchParams();
    const val = (id) => document.getElementById(id).value.trim();
    if (val('f-task')) q.set('task', val('f-task'));
    if (val('f-step')) q.set('step', val('f-step'));
    if (val('f-outcome')) q.set('outcome', val('f-outcome'));
    if (val('f-min')) q.set('min', val('f-min'));
    if (val('f-max')) q.set('max', val('f-max'));
    if (val('f-group')) q.set('group', val('f-group'));
    q.set('limit', '500');
    let data;
    try {
      data = await api(runPath(src, 'trajectories?' + q.toString()));
    } catch (err) {
      list.replaceChildren(h('p', { class: 'fail' }, err.message));
      return;
    }
    state.traj.items = data.items;
    const head = h('tr', {}, ...['#', 'step', 'task', 'group', 'sample', 'outcome', 'reward', 'turns', 'tool calls', 'errors', ''].map((t) => h('th', {}, t)));
    const rows = data.items.map((t) =>
      h(
        'tr',
        { 'data-index': t.index, class: state.traj.a === t.index || state.traj.b === t.index ? 'open' : '' },
        h('td', { class: 'num' }, t.index),
        h('td', { class: 'num' }, t.stage ?? t.step ?? ''),
        h('td', {}, t.task_id),
        h('td', {}, h('button', { class: 'link', title: 'show this group only', onclick: () => ((document.getElementById('f-group').value = t.group_id), pushUrl(), loadTrajectories()) }, t.group_id)),
        h('td', { class: 'num' }, t.sample),
        h('td', {}, h('span', { class: t.success ? 'pass' : 'fail' }, t.success ? 'success' : 'failure' + (t.finish && t.finish !== 'answer' ? ' (' + t.finish + ')' : ''))),
        h('td', { class: 'num' }, fmt(t.reward, 3)),
        h('td', { class: 'num' }, t.turns),
        h('td', { class: 'num' }, t.tool_calls),
        h('td', { class: 'num' + (t.tool_errors ? ' fail' : '') }, t.tool_errors),
        h('td', {}, h('button', { class: 'link open-a', onclick: () => openTrajectory(t.index, 'a') }, 'open'), h('button', { class: 'link open-b', onclick: () => openTrajectory(t.index, 'b') }, 'beside')),
      ),
    );
    list.replaceChildren(h('p', { class: 'muted' }, data.matched + ' of ' + data.total + ' trajectories' + (data.matched > data.items.length ? ' (first ' + data.items.length + ' shown)' : '')), h('table', { id: 'traj-table' }, h('thead', {}, head), h('tbody', {}, rows)));
  }

  async function openTrajectory(index, slot) {
    state.traj[slot] = index;
    pushUrl();
    await renderTrajSlots();
    document.querySelectorAll('#traj-table tbody tr').forEach((tr) => tr.classList.toggle('open', Number(tr.dataset.index) === state.traj.a || Number(tr.dataset.index) === state.traj.b));
  }

  async function renderTrajSlots() {
    for (const slot of ['a', 'b']) {
      const box = document.getElementById('traj-' + slot);
      const index = state.traj[slot];
      if (index === null || !state.traj.source) {
        box.replaceChildren();
        continue;
      }
      try {
        const data = await api(runPath(state.traj.source, 'trajectory/' + index));
        box.replaceChildren(renderTrajectory(data.trajectory, index, data.step, slot));
      } catch (err) {
        box.replaceChildren(h('p', { class: 'fail' }, err.message));
      }
    }
  }

  function pretty(v) {
    if (typeof v === 'string') {
      try {
        return JSON.stringify(JSON.parse(v), null, 2);
      } catch {
        return v;
      }
    }
    return JSON.stringify(v, null, 2);
  }

  function renderTrajectory(t, index, step, slot) {
    const close = h('button', { class: 'link', onclick: () => ((state.traj[slot] = null), pushUrl(), renderTrajSlots()) }, 'close');
    const head = h(
      'div',
      {},
      h('h3', {}, '#' + index + ' ', t.task_id, ' ', h('span', { class: t.success ? 'pass' : 'fail' }, t.success ? 'success' : 'failure'), ' ', close),
      h('div', { class: 'muted' }, 'group ' + t.group_id + ' · sample ' + t.sample + (step !== undefined && step !== null ? ' · step ' + step : '') + ' · policy ' + (t.policy ? t.policy.id + (t.policy.version !== undefined ? ' v' + t.policy.version : '') : '') + ' · reward ' + fmt(t.reward, 3) + (t.reward_name ? ' (' + t.reward_name + ')' : '') + ' · finish ' + (t.finish || '') + (t.task_error ? ' · task error: ' + t.task_error : '')),
    );
    const convo = [];
    const msgs = Array.isArray(t.messages) ? t.messages : [];
    const firstAssistant = msgs.findIndex((m) => m.role === 'assistant');
    for (const m of msgs.slice(0, firstAssistant < 0 ? msgs.length : firstAssistant)) convo.push(h('div', { class: 'msg ' + m.role }, h('span', { class: 'role' }, m.role), typeof m.content === 'string' ? m.content : JSON.stringify(m.content)));
    (t.turns || []).forEach((turn, i) => {
      const parts = [h('span', { class: 'role' }, 'assistant · turn ' + (i + 1) + (turn.policy_ms !== undefined ? ' · ' + Math.round(turn.policy_ms) + ' ms' : '') + (turn.policy_version !== undefined ? ' · v' + turn.policy_version : ''))];
      // A Hugging Face model's turn as it wrote it (special tokens kept), and how its call was read.
      if (typeof turn.text === 'string') parts.push(h('pre', { class: 'model-text' }, turn.text), turn.call_parse ? h('div', { class: 'muted' }, 'call read: ' + turn.call_parse) : null);
      else if (turn.action && turn.action.content) parts.push(turn.action.content);
      const msg = h('div', { class: 'msg assistant turn', 'data-turn': i }, parts);
      convo.push(msg);
      if (turn.parse_error) convo.push(h('div', { class: 'tool-result error parse-error' }, h('b', {}, 'unparsed tool call: '), turn.parse_error));
      const results = turn.tool_results || [];
      for (const call of (turn.action && turn.action.tool_calls) || []) {
        convo.push(h('div', { class: 'tool-call', 'data-tool': call.name }, h('b', {}, '→ ' + call.name), h('pre', { class: 'args' }, pretty(call.arguments))));
        const r = results.find((x) => x.id === call.id);
        if (r) {
          const err = r.isError;
          const structured = r.structured !== undefined ? h('details', {}, h('summary', {}, 'structured'), h('pre', {}, pretty(r.structured))) : null;
          convo.push(h('div', { class: 'tool-result' + (err ? ' error' : '') }, h('b', {}, (err ? '✗ error' + (r.errorKind ? ' (' + r.errorKind + ')' : '') : '← result') + (r.fault ? ' [fault: ' + r.fault + ']' : '') + ' · ' + Math.round(r.ms) + ' ms'), h('pre', {}, r.text), structured));
        }
      }
      convo.push(h('div', { class: 'step-reward' }, 'step reward ' + fmt(turn.step_reward, 3)));
    });
    convo.push(h('div', { class: 'msg final' }, h('span', { class: 'role' }, 'answer'), t.answer === null || t.answer === undefined ? '(none)' : t.answer));
    const parts = Object.entries(t.reward_parts || {});
    const partsTable = h('table', { class: 'reward-parts' }, h('thead', {}, h('tr', {}, h('th', {}, 'reward part'), h('th', { class: 'num' }, 'value'))), h('tbody', {}, parts.map(([k, v]) => h('tr', {}, h('td', {}, k), h('td', { class: 'num' }, fmt(v, 3))))));
    const checks = (t.checks || []).map((c) => {
      const passed = c.score >= 1 && !c.error;
      return h('tr', { class: passed ? '' : 'failed-check' }, h('td', {}, h('span', { class: passed ? 'pass' : 'fail' }, passed ? 'passed' : c.error ? 'error (' + c.error + ')' : c.score > 0 ? 'partial' : 'failed')), h('td', {}, c.kind), h('td', { class: 'num' }, fmt(c.weight, 2)), h('td', { class: 'num' }, fmt(c.score, 2)), h('td', {}, c.detail));
    });
    const checksTable = h('table', { class: 'checks' }, h('thead', {}, h('tr', {}, ...['check', 'kind', 'weight', 'score', 'why'].map((x) => h('th', {}, x)))), h('tbody', {}, checks));
    return h('div', { class: 'traj', 'data-index': index }, head, h('div', { class: 'conversation' }, convo), h('h3', {}, 'checks'), checksTable, h('h3', {}, 'reward parts'), partsTable);
  }

  // ---------- evaluations ----------
  async function renderEvals() {
    const box = document.getElementById('evals');
    const ids = state.selected.filter((id) => {
      const e = entryOf(id);
      return e && (e.kind === 'eval' || e.kind === 'rollout' || e.kind === 'job');
    });
    if (!ids.length) {
      box.replaceChildren(h('p', { class: 'muted' }, 'Select evaluations or rollouts in the list (a training run’s evaluations are its eval:* curves).'));
      return;
    }
    const cards = [];
    for (const id of ids) {
      let r;
      try {
        r = await api(runPath(id, 'eval'));
      } catch (err) {
        cards.push(h('div', { class: 'card' }, h('h2', {}, labelOf(id)), h('p', { class: 'muted' }, err.message)));
        continue;
      }
      let groups = [];
      try {
        groups = await api(runPath(id, 'failures'));
      } catch {
        groups = [];
      }
      const kind = entryOf(id).kind;
      cards.push(kind === 'job' ? jobCard(id, r, groups) : kind === 'eval' ? evalCard(id, r, groups) : h('div', { class: 'card' }, h('h2', {}, labelOf(id) + ' (rollout)'), failureTable(id, groups), h('pre', { class: 'json' }, JSON.stringify(r, null, 2))));
    }
    box.replaceChildren(...cards);
  }

  function mci(o) {
    return o ? fmt(o.mean, 3) + (o.ci95 ? ' [' + fmt(o.ci95[0], 3) + ', ' + fmt(o.ci95[1], 3) + ']' : '') : '';
  }

  function failureTable(id, groups) {
    if (!groups.length) return h('p', { class: 'muted' }, 'every episode succeeded');
    const rows = groups.map((g) =>
      h(
        'tr',
        {},
        h('td', { class: 'num' }, g.episodes),
        h('td', { class: 'num' }, g.tasks),
        h('td', {}, g.cause),
        h('td', {}, g.example.detail),
        h('td', {}, h('button', { class: 'link', onclick: () => showExample(id, g.example.index) }, '#' + g.example.index)),
      ),
    );
    return h('table', { class: 'failures' }, h('thead', {}, h('tr', {}, ...['episodes', 'tasks', 'cause', 'why (example)', 'example'].map((x) => h('th', {}, x)))), h('tbody', {}, rows));
  }

  function showExample(id, index) {
    state.traj.source = id;
    state.traj.a = index;
    state.traj.b = null;
    showTab('trajectories');
    renderTrajSource();
  }

  // A real-model job (mcp-gym start --model): its three held-out evaluations side by side.
  function jobCard(id, r, groups) {
    const res = r.result || {};
    const cfg = r.config || {};
    const pct = (x) => (typeof x === 'number' ? (100 * x).toFixed(1) + '%' : '');
    const ci = (v) => (v && v.ci95 ? '[' + (100 * v.ci95[0]).toFixed(1) + ', ' + (100 * v.ci95[1]).toFixed(1) + ']' : '');
    const rows = ['base', 'sft', 'rl'].map((s) => {
      const v = res[s] || (r.stages || {})[s];
      const parse = (v && v.tool_call_parse) || {};
      const hat = (v && v.pass_hat_k) || {};
      return h(
        'tr',
        { 'data-stage': s },
        h('td', {}, s === 'base' ? 'base model' : s === 'sft' ? 'after SFT' : 'after GRPO'),
        h('td', { class: 'num' }, v ? pct(v.success) : '(not yet)'),
        h('td', {}, v ? ci(v) : ''),
        h('td', { class: 'num' }, Object.entries(hat).map(([k, x]) => 'pass^' + k + ' ' + pct(x)).join(' ')),
        h('td', { class: 'num' }, v && v.episodes !== undefined ? v.episodes + ' (' + v.tasks + ' tasks)' : ''),
        h('td', {}, ['strict', 'lenient', 'failed', 'none'].filter((m) => parse[m] !== undefined).map((m) => m + ' ' + parse[m]).join(', ')),
        h('td', {}, r.stage_files && r.stage_files[s] ? h('button', { class: 'link', onclick: () => showStage(id, s) }, 'trajectories') : ''),
      );
    });
    const d = res.rl_minus_sft;
    const secs = res.seconds || (r.seconds || {});
    return h(
      'div',
      { class: 'card job-card', 'data-id': id },
      h('h2', {}, labelOf(id), ' ', h('span', { class: 'muted' }, (res.model || cfg.model_name || cfg.model || '') + ' · ' + (res.suite || cfg.suite || '') + ' · ' + (cfg.eval_tasks || '') + ' held-out tasks × ' + (cfg.k || ''))),
      h('table', { class: 'job-stages' }, h('thead', {}, h('tr', {}, ...['stage', 'success', '95% (tasks)', 'pass^k', 'episodes', 'tool calls read', ''].map((x) => h('th', {}, x)))), h('tbody', {}, rows)),
      d ? h('p', {}, 'GRPO − SFT: ', h('b', {}, (d.points >= 0 ? '+' : '') + d.points.toFixed(1) + ' points'), ' [' + d.ci95[0].toFixed(1) + ', ' + d.ci95[1].toFixed(1) + '] over ' + d.tasks + ' tasks (paired)') : h('p', { class: 'muted' }, 'running: the figures fill in as the stages end'),
      h('p', { class: 'muted' }, 'seconds: ' + ['sft', 'rl', 'eval', 'total'].filter((k) => secs[k] !== undefined).map((k) => k + ' ' + Math.round(secs[k])).join(', ')),
      h('h3', {}, 'unsuccessful episodes by cause (all stages)'),
      failureTable(id, groups || []),
    );
  }

  function showStage(id, stage) {
    state.traj.source = id;
    state.traj.a = state.traj.b = null;
    document.getElementById('f-step').value = stage;
    showTab('trajectories');
    renderTrajSource();
    loadTrajectories();
  }

  function evalCard(id, r, groups) {
    const k = r.k || 1;
    const figures = h('div', { class: 'figures' }, ...[['pass@1', r.pass_at_1], ['pass@' + k, r.pass_at_k], ['pass^' + k, r.pass_hat_k], ['mean reward', r.mean_reward]].map(([n, v]) => h('div', { class: 'figure' }, n, h('b', {}, v ? fmt(v.mean, 3) : ''), h('span', { class: 'muted' }, v && v.ci95 ? '95% [' + fmt(v.ci95[0], 3) + ', ' + fmt(v.ci95[1], 3) + ']' : ''))));
    const ks = Array.from({ length: k }, (_, i) => i + 1);
    const perTask = (r.per_task || []).map((t) =>
      h('tr', { class: t.successes < t.runs ? 'failed-check' : '' }, h('td', {}, t.task), h('td', {}, t.suite || ''), h('td', { class: 'num' }, t.successes + ' / ' + t.runs), ...ks.map((i) => h('td', { class: 'num' }, fmt((t.pass_at || [])[i - 1], 2))), ...ks.map((i) => h('td', { class: 'num' }, fmt((t.pass_hat || [])[i - 1], 2))), h('td', { class: 'num' }, fmt(t.mean_reward, 3)), h('td', { class: 'num' }, t.tool_errors)),
    );
    const taskTable = h('table', { class: 'per-task' }, h('thead', {}, h('tr', {}, h('th', {}, 'task'), h('th', {}, 'suite'), h('th', {}, 'successes'), ...ks.map((i) => h('th', { class: 'num' }, 'pass@' + i)), ...ks.map((i) => h('th', { class: 'num' }, 'pass^' + i)), h('th', {}, 'reward'), h('th', {}, 'tool errors'))), h('tbody', {}, perTask));
    const suites = Object.entries(r.by_suite || {}).map(([name, v]) => h('tr', {}, h('td', {}, name), h('td', { class: 'num' }, v.tasks), h('td', {}, mci(v.pass_at_1)), h('td', {}, mci(v.pass_at_k)), h('td', {}, mci(v.pass_hat_k)), h('td', {}, mci(v.mean_reward))));
    const failures = (r.failures || []).map((f) => h('tr', {}, h('td', { class: 'num' }, f.episodes), h('td', {}, f.kind), h('td', {}, f.cause), h('td', {}, f.example || '')));
    return h(
      'div',
      { class: 'card eval-card', 'data-id': id },
      h('h2', {}, labelOf(id), ' ', h('span', { class: 'muted' }, (r.policy || '') + ' · ' + (r.tasks || 0) + ' tasks × ' + k + ' · ' + (r.episodes || 0) + ' episodes')),
      figures,
      suites.length ? [h('h3', {}, 'by suite'), h('table', {}, h('thead', {}, h('tr', {}, ...['suite', 'tasks', 'pass@1', 'pass@k', 'pass^k', 'reward'].map((x) => h('th', {}, x)))), h('tbody', {}, suites))] : null,
      h('h3', {}, 'unsuccessful episodes by cause'),
      failureTable(id, groups || []),
      failures.length ? [h('h3', {}, 'failed episodes (errors) by cause'), h('table', { class: 'errors' }, h('thead', {}, h('tr', {}, ...['episodes', 'kind', 'cause', 'example'].map((x) => h('th', {}, x)))), h('tbody', {}, failures))] : null,
      h('h3', {}, 'per task'),
      taskTable,
    );
  }

  // ---------- benchmarks ----------
  function barChart(edges, counts, o) {
    const W = o.width || 320;
    const H = o.height || 160;
    const m = { l: 36, r: 8, t: 8, b: 28 };
    const pw = W - m.l - m.r;
    const ph = H - m.t - m.b;
    const svg = s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, class: 'histogram', 'data-counts': JSON.stringify(counts) });
    const top = Math.max(1, ...counts);
    const bw = pw / Math.max(1, counts.length);
    counts.forEach((c, i) => {
      const bh = (c / top) * ph;
      const rect = s('rect', { x: m.l + i * bw + 1, y: m.t + ph - bh, width: Math.max(1, bw - 2), height: bh, fill: o.color || '#2563eb' });
      rect.append(s('title', {}, fmt(edges[i], 3) + '–' + fmt(edges[i + 1], 3) + ' ms: ' + c));
      svg.append(rect);
    });
    svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }));
    svg.append(s('text', { x: m.l - 4, y: m.t + 8, 'text-anchor': 'end' }, top));
    if (edges.length) {
      svg.append(s('text', { x: m.l, y: m.t + ph + 12, 'text-anchor': 'start' }, fmt(edges[0], 2)));
      svg.append(s('text', { x: m.l + pw, y: m.t + ph + 12, 'text-anchor': 'end' }, fmt(edges.at(-1), 2)));
    }
    svg.append(s('text', { x: m.l + pw / 2, y: H - 3, 'text-anchor': 'middle' }, 'latency (ms, log bins)'));
    return svg;
  }

  async function renderBench() {
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
      const latency = tools.map((t) => h('tr', {}, h('td', {}, t.tool), h('td', { class: 'num' }, t.calls), h('td', { class: 'num' }, fmt(t.p50_ms, 2)), h('td', { class: 'num' }, fmt(t.p95_ms, 2)), h('td', { class: 'num' }, fmt(t.p99_ms, 2)), h('td', { class: 'num' }, fmt(t.max_ms, 2)), h('td', { class: 'num' + (t.errors ? ' fail' : '') }, t.errors), h('td', { class: 'num' }, t.timeouts)));
      const hists = tools.filter((t) => t.histogram && t.histogram.counts).map((t, i) => h('div', { class: 'chart', 'data-tool': t.tool }, h('h3', {}, t.tool), barChart(t.histogram.edges_ms, t.histogram.counts, { color: COLORS[i % COLORS.length] })));
      const throughput = tools.map((t, i) => ({ id: t.tool, label: t.tool, color: COLORS[i % COLORS.length], points: Object.entries(t.calls_per_s || {}).map(([c, v]) => ({ x: Number(c), y: v })).sort((a, c) => a.x - c.x) }));
      const tpLegend = h('div', { class: 'legend' }, ...throughput.map((sr) => h('span', { class: 'item' }, h('span', { class: 'swatch', style: 'background:' + sr.color }), sr.label)));
      const fuzz = b.fuzz;
      const fuzzRows = fuzz ? Object.values(fuzz.tools || {}).map((t) => h('tr', {}, h('td', {}, t.tool), h('td', { class: 'num' }, t.cases), h('td', { class: 'num' }, t.rejected), h('td', { class: 'num' }, t.accepted), h('td', { class: 'num' + (t.protocol_error ? ' fail' : '') }, t.protocol_error), h('td', { class: 'num' + (t.crash ? ' fail' : '') }, t.crash), h('td', { class: 'num' + (t.hang ? ' fail' : '') }, t.hang))) : [];
      const findings = fuzz ? (fuzz.failures || []).map((f) => h('tr', { class: 'failed-check' }, h('td', {}, f.outcome), h('td', {}, f.tool), h('td', {}, f.kind || ''), h('td', {}, f.path || ''), h('td', {}, h('pre', { class: 'json' }, f.arguments === undefined ? '(not recorded)' : pretty(f.arguments))), h('td', {}, (f.detail || '').slice(0, 300)))) : [];
      const skipped = (b.skipped || []).map((x) => h('tr', {}, h('td', {}, x.tool), h('td', {}, x.reason)));
      cards.push(
        h(
          'div',
          { class: 'card bench-card', 'data-id': id },
          h('h2', {}, labelOf(id), ' ', h('span', { class: 'muted' }, (b.server ? b.server.transport + ' ' + b.server.target : '') + ' · connect ' + fmt(b.connect_ms, 1) + ' ms · ' + (b.tool_count || 0) + ' tools')),
          h('h3', {}, 'latency per tool'),
          h('table', {}, h('thead', {}, h('tr', {}, ...['tool', 'calls', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', 'errors', 'timeouts'].map((x) => h('th', {}, x)))), h('tbody', {}, latency)),
          hists.length ? h('div', { class: 'charts-row' }, hists) : null,
          throughput.some((sr) => sr.points.length) ? [h('h3', {}, 'throughput (calls/s) against concurrency'), h('div', { class: 'chart' }, lineChart(throughput, { metric: 'calls_per_s', xLabel: 'concurrency' }), tpLegend)] : null,
          fuzz ? [h('h3', {}, 'fuzz (' + fuzz.cases_per_tool + ' cases per tool, seed ' + fuzz.seed + ')'), h('table', {}, h('thead', {}, h('tr', {}, ...['tool', 'cases', 'rejected', 'accepted', 'protocol errors', 'crashes', 'hangs'].map((x) => h('th', {}, x)))), h('tbody', {}, fuzzRows)), h('h3', {}, 'findings'), findings.length ? h('table', { class: 'findings' }, h('thead', {}, h('tr', {}, ...['outcome', 'tool', 'kind', 'path', 'input', 'detail'].map((x) => h('th', {}, x)))), h('tbody', {}, findings)) : h('p', { class: 'muted' }, 'no crash, hang or protocol error')] : null,
          h('h3', {}, 'skipped tools (may write; --allow-writes calls them)'),
          skipped.length ? h('table', { class: 'skipped' }, h('thead', {}, h('tr', {}, h('th', {}, 'tool'), h('th', {}, 'why'))), h('tbody', {}, skipped)) : h('p', { class: 'muted' }, 'none'),
        ),
      );
    }
    box.replaceChildren(...cards);
  }

  // ---------- wiring ----------
  function renderAll() {
    renderMetricPicker();
    renderCharts();
    renderTrajSource();
    if (state.tab === 'config') renderConfig();
    if (state.tab === 'evals') renderEvals();
    if (state.tab === 'bench') renderBench();
  }

  function showTab(tab) {
    state.tab = tab;
    pushUrl();
    document.querySelectorAll('#tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === tab));
    document.querySelectorAll('.panel').forEach((p) => p.classList.toggle('active', p.id === 'panel-' + tab));
    if (tab === 'config') renderConfig();
    if (tab === 'trajectories') loadTrajectories();
    if (tab === 'evals') renderEvals();
    if (tab === 'bench') renderBench();
  }

  async function poll() {
    if (!document.getElementById('live').checked) return;
    let changed = false;
    for (const id of selectedRuns()) {
      try {
        if (await loadRun(id)) changed = true;
      } catch {
        // the next poll tries again
      }
    }
    if (changed) {
      renderMetricPicker();
      renderCharts();
    }
  }

  // ---------- the URL: every page has its own (deep links; the back button goes to the previous one) ----------
  // #sel=ID&sel=ID2&tab=trajectories&src=ID&step=3&task=T&outcome=failure&group=G&traj=12&beside=30
  const FILTERS = ['task', 'step', 'outcome', 'min', 'max', 'group'];
  let applying = false;

  function stateHash() {
    const q = new URLSearchParams();
    for (const id of state.selected) q.append('sel', id);
    if (state.tab !== 'curves') q.set('tab', state.tab);
    if (state.tab === 'trajectories') {
      if (state.traj.source && state.traj.source !== state.selected[0]) q.set('src', state.traj.source);
      for (const f of FILTERS) {
        const v = document.getElementById('f-' + f).value.trim();
        if (v) q.set(f, v);
      }
      if (state.traj.a !== null) q.set('traj', String(state.traj.a));
      if (state.traj.b !== null) q.set('beside', String(state.traj.b));
    }
    const text = q.toString();
    return text ? '#' + text : '';
  }

  /** A new history entry for the page shown now (not while the URL itself is being applied). */
  function pushUrl() {
    if (applying) return;
    const hash = stateHash();
    if (hash === location.hash || (hash === '' && location.hash === '')) return;
    history.pushState(null, '', hash || location.pathname + location.search);
  }

  /** Shows the page the URL names: its selection, tab, trajectory filters and open trajectories. */
  async function applyUrl() {
    applying = true;
    try {
      const q = new URLSearchParams(location.hash.slice(1));
      state.selected = q.getAll('sel').filter((id) => entryOf(id));
      for (const f of FILTERS) document.getElementById('f-' + f).value = q.get(f) || '';
      const src = q.get('src') || state.selected[0] || null;
      state.traj.source = src;
      state.traj.a = q.has('traj') ? Number(q.get('traj')) : null;
      state.traj.b = q.has('beside') ? Number(q.get('beside')) : null;
      renderList();
      await onSelectionChanged();
      const tab = q.get('tab') || 'curves';
      showTab(document.querySelector('#tabs button[data-tab="' + tab + '"]') ? tab : 'curves');
      if (tab === 'trajectories') await loadTrajectories();
    } finally {
      applying = false;
    }
  }
  window.addEventListener('popstate', () => applyUrl());

  document.querySelectorAll('#tabs button').forEach((b) => b.addEventListener('click', () => showTab(b.dataset.tab)));
  document.getElementById('list-filter').addEventListener('input', renderList);
  document.getElementById('metric-filter').addEventListener('input', renderMetricPicker);
  document.getElementById('x-axis').addEventListener('change', renderCharts);
  document.getElementById('smoothing').addEventListener('input', () => {
    document.getElementById('smoothing-value').textContent = document.getElementById('smoothing').value;
    renderCharts();
  });
  document.getElementById('only-diff').addEventListener('change', renderConfig);
  document.getElementById('traj-source').addEventListener('change', (ev) => {
    state.traj.source = ev.target.value;
    state.traj.a = state.traj.b = null;
    pushUrl();
    loadTrajectories();
  });
  document.getElementById('traj-filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    pushUrl();
    loadTrajectories();
  });

  refreshList().then(() => (location.hash ? applyUrl() : undefined));
  setInterval(() => {
    if (document.getElementById('live').checked) refreshList();
  }, 5000);
  setInterval(poll, 2000);
})();
