// mcp-gym view: the Trajectories tab: a run's trajectories, filtered, and one or two opened side by side.
import { fmt, h, pretty } from './dom.js{{QUERY}}';
import { pushUrl } from './routing.js{{QUERY}}';
import { api, entryOf, labelOf, runPath, state } from './state.js{{QUERY}}';

export function renderTrajSource() {
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

export async function loadTrajectories() {
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
      h(
        'td',
        {},
        h(
          'button',
          {
            class: 'link',
            title: 'show this group only',
            onclick: () => ((document.getElementById('f-group').value = t.group_id), pushUrl(), loadTrajectories()),
          },
          t.group_id,
        ),
      ),
      h('td', { class: 'num' }, t.sample),
      h(
        'td',
        {},
        h('span', { class: t.success ? 'pass' : 'fail' }, t.success ? 'success' : 'failure' + (t.finish && t.finish !== 'answer' ? ' (' + t.finish + ')' : '')),
      ),
      h('td', { class: 'num' }, fmt(t.reward, 3)),
      h('td', { class: 'num' }, t.turns),
      h('td', { class: 'num' }, t.tool_calls),
      h('td', { class: 'num' + (t.tool_errors ? ' fail' : '') }, t.tool_errors),
      h(
        'td',
        {},
        h('button', { class: 'link open-a', onclick: () => openTrajectory(t.index, 'a') }, 'open'),
        h('button', { class: 'link open-b', onclick: () => openTrajectory(t.index, 'b') }, 'beside'),
      ),
    ),
  );
  list.replaceChildren(
    h(
      'p',
      { class: 'muted' },
      data.matched + ' of ' + data.total + ' trajectories' + (data.matched > data.items.length ? ' (first ' + data.items.length + ' shown)' : ''),
    ),
    h('table', { id: 'traj-table' }, h('thead', {}, head), h('tbody', {}, rows)),
  );
}

async function openTrajectory(index, slot) {
  state.traj[slot] = index;
  pushUrl();
  await renderTrajSlots();
  document
    .querySelectorAll('#traj-table tbody tr')
    .forEach((tr) => tr.classList.toggle('open', Number(tr.dataset.index) === state.traj.a || Number(tr.dataset.index) === state.traj.b));
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

function renderTrajectory(t, index, step, slot) {
  const close = h('button', { class: 'link', onclick: () => ((state.traj[slot] = null), pushUrl(), renderTrajSlots()) }, 'close');
  const head = h(
    'div',
    {},
    h('h3', {}, '#' + index + ' ', t.task_id, ' ', h('span', { class: t.success ? 'pass' : 'fail' }, t.success ? 'success' : 'failure'), ' ', close),
    h(
      'div',
      { class: 'muted' },
      'group ' +
        t.group_id +
        ' · sample ' +
        t.sample +
        (step !== undefined && step !== null ? ' · step ' + step : '') +
        ' · policy ' +
        (t.policy ? t.policy.id + (t.policy.version !== undefined ? ' v' + t.policy.version : '') : '') +
        ' · reward ' +
        fmt(t.reward, 3) +
        (t.reward_name ? ' (' + t.reward_name + ')' : '') +
        ' · finish ' +
        (t.finish || '') +
        (t.task_error ? ' · task error: ' + t.task_error : ''),
    ),
  );
  const convo = [];
  const msgs = Array.isArray(t.messages) ? t.messages : [];
  const firstAssistant = msgs.findIndex((m) => m.role === 'assistant');
  for (const m of msgs.slice(0, firstAssistant < 0 ? msgs.length : firstAssistant))
    convo.push(
      h('div', { class: 'msg ' + m.role }, h('span', { class: 'role' }, m.role), typeof m.content === 'string' ? m.content : JSON.stringify(m.content)),
    );
  (t.turns || []).forEach((turn, i) => {
    const parts = [
      h(
        'span',
        { class: 'role' },
        'assistant · turn ' +
          (i + 1) +
          (turn.policy_ms !== undefined ? ' · ' + Math.round(turn.policy_ms) + ' ms' : '') +
          (turn.policy_version !== undefined ? ' · v' + turn.policy_version : '') +
          (turn.policy_server !== undefined ? ' · ' + turn.policy_server : ''),
      ),
    ];
    // A Hugging Face model's turn as it wrote it (special tokens kept), and how its call was read.
    if (typeof turn.text === 'string')
      parts.push(h('pre', { class: 'model-text' }, turn.text), turn.call_parse ? h('div', { class: 'muted' }, 'call read: ' + turn.call_parse) : null);
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
        convo.push(
          h(
            'div',
            { class: 'tool-result' + (err ? ' error' : '') },
            h(
              'b',
              {},
              (err ? '✗ error' + (r.errorKind ? ' (' + r.errorKind + ')' : '') : '← result') +
                (r.fault ? ' [fault: ' + r.fault + ']' : '') +
                ' · ' +
                Math.round(r.ms) +
                ' ms',
            ),
            h('pre', {}, r.text),
            structured,
          ),
        );
      }
    }
    convo.push(h('div', { class: 'step-reward' }, 'step reward ' + fmt(turn.step_reward, 3)));
  });
  convo.push(h('div', { class: 'msg final' }, h('span', { class: 'role' }, 'answer'), t.answer === null || t.answer === undefined ? '(none)' : t.answer));
  const parts = Object.entries(t.reward_parts || {});
  const partsTable = h(
    'table',
    { class: 'reward-parts' },
    h('thead', {}, h('tr', {}, h('th', {}, 'reward part'), h('th', { class: 'num' }, 'value'))),
    h(
      'tbody',
      {},
      parts.map(([k, v]) => h('tr', {}, h('td', {}, k), h('td', { class: 'num' }, fmt(v, 3)))),
    ),
  );
  const checks = (t.checks || []).map((c) => {
    const passed = c.score >= 1 && !c.error;
    return h(
      'tr',
      { class: passed ? '' : 'failed-check' },
      h('td', {}, h('span', { class: passed ? 'pass' : 'fail' }, passed ? 'passed' : c.error ? 'error (' + c.error + ')' : c.score > 0 ? 'partial' : 'failed')),
      h('td', {}, c.kind),
      h('td', { class: 'num' }, fmt(c.weight, 2)),
      h('td', { class: 'num' }, fmt(c.score, 2)),
      h('td', {}, c.detail),
    );
  });
  const checksTable = h(
    'table',
    { class: 'checks' },
    h('thead', {}, h('tr', {}, ...['check', 'kind', 'weight', 'score', 'why'].map((x) => h('th', {}, x)))),
    h('tbody', {}, checks),
  );
  return h(
    'div',
    { class: 'traj', 'data-index': index },
    head,
    h('div', { class: 'conversation' }, convo),
    h('h3', {}, 'checks'),
    checksTable,
    h('h3', {}, 'reward parts'),
    partsTable,
  );
}
