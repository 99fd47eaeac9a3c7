// mcp-gym view: the page. Plain browser JavaScript, no framework, charts drawn as SVG here.
// It polls the viewer's JSON API (src/view/server.ts): the list every 5 s, each selected run's
// metrics every 2 s from the row count it already holds (/metrics?since=N), so a running run's
// curves grow without a reload.
//
// This module (the one index.html loads) wires the page up: its controls, the back button, the
// polling. The views are modules beside it: list.js, runs.js, trajectories.js, evals.js,
// bench.js; routing.js (tabs, URL), charts.js, dom.js and state.js. Their import specifiers end in
// a placeholder that the server replaces with the page's ?token= query, as it does in index.html.
import { renderBench } from './bench.js{{QUERY}}';
import { renderEvals } from './evals.js{{QUERY}}';
import { onSelectionChanged, refreshList, renderList } from './list.js{{QUERY}}';
import { applyUrl, pushUrl, showTab, views } from './routing.js{{QUERY}}';
import { loadRun, renderCharts, renderConfig, renderMetricPicker, selectedRuns } from './runs.js{{QUERY}}';
import { state } from './state.js{{QUERY}}';
import { loadTrajectories } from './trajectories.js{{QUERY}}';

Object.assign(views, { renderList, onSelectionChanged, renderConfig, loadTrajectories, renderEvals, renderBench });

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
