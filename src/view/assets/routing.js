// mcp-gym view: routing: the tab shown, and the URL that names the page (deep links; the back button
// goes to the previous one).
import { entryOf, state } from './state.js{{QUERY}}';

/**
 * The views that showing a tab or a URL renders, set by app.js (the page's entry) when the page loads:
 * the views use routing (pushUrl, showTab), so routing does not import them back.
 */
export const views = {};

export function showTab(tab) {
  state.tab = tab;
  pushUrl();
  document.querySelectorAll('#tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === tab));
  document.querySelectorAll('.panel').forEach((p) => p.classList.toggle('active', p.id === 'panel-' + tab));
  if (tab === 'config') views.renderConfig();
  if (tab === 'trajectories') views.loadTrajectories();
  if (tab === 'evals') views.renderEvals();
  if (tab === 'bench') views.renderBench();
}

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
export function pushUrl() {
  if (applying) return;
  const hash = stateHash();
  if (hash === location.hash || (hash === '' && location.hash === '')) return;
  history.pushState(null, '', hash || location.pathname + location.search);
}

/** Shows the page the URL names: its selection, tab, trajectory filters and open trajectories. */
export async function applyUrl() {
  applying = true;
  try {
    const q = new URLSearchParams(location.hash.slice(1));
    state.selected = q.getAll('sel').filter((id) => entryOf(id));
    for (const f of FILTERS) document.getElementById('f-' + f).value = q.get(f) || '';
    const src = q.get('src') || state.selected[0] || null;
    state.traj.source = src;
    state.traj.a = q.has('traj') ? Number(q.get('traj')) : null;
    state.traj.b = q.has('beside') ? Number(q.get('beside')) : null;
    views.renderList();
    await views.onSelectionChanged();
    const tab = q.get('tab') || 'curves';
    showTab(document.querySelector('#tabs button[data-tab="' + tab + '"]') ? tab : 'curves');
    if (tab === 'trajectories') await views.loadTrajectories();
  } finally {
    applying = false;
  }
}
