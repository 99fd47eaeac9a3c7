// mcp-gym view: the list of runs, evaluations and benchmarks, and the selection made in it.
import { renderBench } from './bench.js{{QUERY}}';
import { h, interval, when } from './dom.js{{QUERY}}';
import { renderEvals } from './evals.js{{QUERY}}';
import { pushUrl } from './routing.js{{QUERY}}';
import { loadRun, renderCharts, renderConfig, renderMetricPicker } from './runs.js{{QUERY}}';
import { api, state } from './state.js{{QUERY}}';
import { renderTrajSource } from './trajectories.js{{QUERY}}';

export async function refreshList() {
  try {
    const data = await api('/api/list');
    state.entries = data.entries;
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    renderList();
  } catch (err) {
    document.getElementById('updated').textContent = 'error: ' + err.message;
  }
}

export function renderList() {
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

export async function onSelectionChanged() {
  await Promise.all(state.selected.map((id) => loadRun(id)));
  renderAll();
}

function renderAll() {
  renderMetricPicker();
  renderCharts();
  renderTrajSource();
  if (state.tab === 'config') renderConfig();
  if (state.tab === 'evals') renderEvals();
  if (state.tab === 'bench') renderBench();
}
