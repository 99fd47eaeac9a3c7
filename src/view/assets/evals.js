// mcp-gym view: the Evaluations tab: evaluations, rollouts and real-model jobs, and their failures by cause.
import { fmt, h } from './dom.js{{QUERY}}';
import { showTab } from './routing.js{{QUERY}}';
import { api, entryOf, labelOf, runPath, state } from './state.js{{QUERY}}';
import { loadTrajectories, renderTrajSource } from './trajectories.js{{QUERY}}';

export async function renderEvals() {
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
    cards.push(
      kind === 'job'
        ? jobCard(id, r, groups)
        : kind === 'eval'
          ? evalCard(id, r, groups)
          : h(
              'div',
              { class: 'card' },
              h('h2', {}, labelOf(id) + ' (rollout)'),
              failureTable(id, groups),
              h('pre', { class: 'json' }, JSON.stringify(r, null, 2)),
            ),
    );
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
  return h(
    'table',
    { class: 'failures' },
    h('thead', {}, h('tr', {}, ...['episodes', 'tasks', 'cause', 'why (example)', 'example'].map((x) => h('th', {}, x)))),
    h('tbody', {}, rows),
  );
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
      h(
        'td',
        { class: 'num' },
        Object.entries(hat)
          .map(([k, x]) => 'pass^' + k + ' ' + pct(x))
          .join(' '),
      ),
      h('td', { class: 'num' }, v && v.episodes !== undefined ? v.episodes + ' (' + v.tasks + ' tasks)' : ''),
      h(
        'td',
        {},
        ['strict', 'lenient', 'failed', 'none']
          .filter((m) => parse[m] !== undefined)
          .map((m) => m + ' ' + parse[m])
          .join(', '),
      ),
      h('td', {}, r.stage_files && r.stage_files[s] ? h('button', { class: 'link', onclick: () => showStage(id, s) }, 'trajectories') : ''),
    );
  });
  const d = res.rl_minus_sft;
  const secs = res.seconds || r.seconds || {};
  return h(
    'div',
    { class: 'card job-card', 'data-id': id },
    h(
      'h2',
      {},
      labelOf(id),
      ' ',
      h(
        'span',
        { class: 'muted' },
        (res.model || cfg.model_name || cfg.model || '') +
          ' · ' +
          (res.suite || cfg.suite || '') +
          ' · ' +
          (cfg.eval_tasks || '') +
          ' held-out tasks × ' +
          (cfg.k || ''),
      ),
    ),
    h(
      'table',
      { class: 'job-stages' },
      h('thead', {}, h('tr', {}, ...['stage', 'success', '95% (tasks)', 'pass^k', 'episodes', 'tool calls read', ''].map((x) => h('th', {}, x)))),
      h('tbody', {}, rows),
    ),
    d
      ? h(
          'p',
          {},
          'GRPO − SFT: ',
          h('b', {}, (d.points >= 0 ? '+' : '') + d.points.toFixed(1) + ' points'),
          ' [' + d.ci95[0].toFixed(1) + ', ' + d.ci95[1].toFixed(1) + '] over ' + d.tasks + ' tasks (paired)',
        )
      : h('p', { class: 'muted' }, 'running: the figures fill in as the stages end'),
    h(
      'p',
      { class: 'muted' },
      'seconds: ' +
        ['sft', 'rl', 'eval', 'total']
          .filter((k) => secs[k] !== undefined)
          .map((k) => k + ' ' + Math.round(secs[k]))
          .join(', '),
    ),
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
  const figures = h(
    'div',
    { class: 'figures' },
    ...[
      ['pass@1', r.pass_at_1],
      ['pass@' + k, r.pass_at_k],
      ['pass^' + k, r.pass_hat_k],
      ['mean reward', r.mean_reward],
    ].map(([n, v]) =>
      h(
        'div',
        { class: 'figure' },
        n,
        h('b', {}, v ? fmt(v.mean, 3) : ''),
        h('span', { class: 'muted' }, v && v.ci95 ? '95% [' + fmt(v.ci95[0], 3) + ', ' + fmt(v.ci95[1], 3) + ']' : ''),
      ),
    ),
  );
  const ks = Array.from({ length: k }, (_, i) => i + 1);
  const perTask = (r.per_task || []).map((t) =>
    h(
      'tr',
      { class: t.successes < t.runs ? 'failed-check' : '' },
      h('td', {}, t.task),
      h('td', {}, t.suite || ''),
      h('td', { class: 'num' }, t.successes + ' / ' + t.runs),
      ...ks.map((i) => h('td', { class: 'num' }, fmt((t.pass_at || [])[i - 1], 2))),
      ...ks.map((i) => h('td', { class: 'num' }, fmt((t.pass_hat || [])[i - 1], 2))),
      h('td', { class: 'num' }, fmt(t.mean_reward, 3)),
      h('td', { class: 'num' }, t.tool_errors),
    ),
  );
  const taskTable = h(
    'table',
    { class: 'per-task' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', {}, 'task'),
        h('th', {}, 'suite'),
        h('th', {}, 'successes'),
        ...ks.map((i) => h('th', { class: 'num' }, 'pass@' + i)),
        ...ks.map((i) => h('th', { class: 'num' }, 'pass^' + i)),
        h('th', {}, 'reward'),
        h('th', {}, 'tool errors'),
      ),
    ),
    h('tbody', {}, perTask),
  );
  const suites = Object.entries(r.by_suite || {}).map(([name, v]) =>
    h(
      'tr',
      {},
      h('td', {}, name),
      h('td', { class: 'num' }, v.tasks),
      h('td', {}, mci(v.pass_at_1)),
      h('td', {}, mci(v.pass_at_k)),
      h('td', {}, mci(v.pass_hat_k)),
      h('td', {}, mci(v.mean_reward)),
    ),
  );
  const failures = (r.failures || []).map((f) =>
    h('tr', {}, h('td', { class: 'num' }, f.episodes), h('td', {}, f.kind), h('td', {}, f.cause), h('td', {}, f.example || '')),
  );
  return h(
    'div',
    { class: 'card eval-card', 'data-id': id },
    h(
      'h2',
      {},
      labelOf(id),
      ' ',
      h('span', { class: 'muted' }, (r.policy || '') + ' · ' + (r.tasks || 0) + ' tasks × ' + k + ' · ' + (r.episodes || 0) + ' episodes'),
    ),
    figures,
    suites.length
      ? [
          h('h3', {}, 'by suite'),
          h(
            'table',
            {},
            h('thead', {}, h('tr', {}, ...['suite', 'tasks', 'pass@1', 'pass@k', 'pass^k', 'reward'].map((x) => h('th', {}, x)))),
            h('tbody', {}, suites),
          ),
        ]
      : null,
    h('h3', {}, 'unsuccessful episodes by cause'),
    failureTable(id, groups || []),
    failures.length
      ? [
          h('h3', {}, 'failed episodes (errors) by cause'),
          h(
            'table',
            { class: 'errors' },
            h('thead', {}, h('tr', {}, ...['episodes', 'kind', 'cause', 'example'].map((x) => h('th', {}, x)))),
            h('tbody', {}, failures),
          ),
        ]
      : null,
    h('h3', {}, 'per task'),
    taskTable,
  );
}
