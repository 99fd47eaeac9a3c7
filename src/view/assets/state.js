// mcp-gym view: the page's shared state (the entries, the selection, what each view holds) and
// the viewer's JSON API (src/view/server.ts), with the token the page was opened with.

const TOKEN = new URLSearchParams(location.search).get('token');
export const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f', '#7c2d12', '#1e3a8a'];
const DEFAULT_METRICS = [
  'reward_mean',
  'success_rate',
  'eval:success',
  'eval:pass_hat_k',
  'kl',
  'entropy',
  'clip_fraction',
  'tool_error_rate',
  'turns_mean',
  'rollout_tokens_per_s',
];

export const state = {
  entries: [],
  selected: [], // entry ids, in the order they were selected (the colour order)
  runs: {}, // id -> { rows: [], evals: [], entry }
  configs: {}, // id -> config object
  metricsShown: new Set(DEFAULT_METRICS),
  tab: 'curves',
  traj: { source: null, items: [], a: null, b: null },
};

export async function api(path) {
  const res = await fetch(path, { headers: TOKEN ? { authorization: 'Bearer ' + TOKEN } : {}, cache: 'no-store' });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.status + ' ' + res.statusText);
  return body;
}
export const runPath = (id, rest) => '/api/run/' + encodeURIComponent(id) + (rest ? '/' + rest : '');
export const entryOf = (id) => state.entries.find((e) => e.id === id);
export const colorOf = (id) => COLORS[Math.max(0, state.selected.indexOf(id)) % COLORS.length];
export const labelOf = (id) => {
  const e = entryOf(id);
  return e ? e.name + (e.preset ? ' (' + e.preset + ')' : '') : id;
};
