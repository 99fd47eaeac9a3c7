/**
 * `runs/<id>/report.html`: one self-contained page (inline SVG, no network) with the curves of a
 * run (reward, success on train and eval, KL, entropy, lengths) and sample trajectories with
 * their tool calls and results. A small inline script marks each chart with how many points it
 * drew (`data-drawn`), so a headless browser can check that the charts drew their data.
 */
import { renameSync, writeFileSync } from 'node:fs';
import { esc } from '../../lib/index.ts';
import type { Trajectory } from '../env/index.ts';

export interface Series {
  name: string;
  points: [number, number][];
  color: string;
}


/**
 * An SVG line chart. `markers`: steps marked by a dashed vertical line (e.g. the reference resets
 * of ref_reset_every), drawn under the series.
 */
export function lineChart(id: string, title: string, series: Series[], opts: { yMin?: number; yMax?: number; markers?: { step: number; label: string }[] } = {}): string {
  const W = 460;
  const H = 220;
  const m = { l: 48, r: 12, t: 28, b: 30 };
  const all = series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const x0 = Math.min(0, ...xs);
  const x1 = Math.max(x0 + 1, ...xs);
  let y0 = opts.yMin ?? Math.min(...(ys.length ? ys : [0]));
  let y1 = opts.yMax ?? Math.max(...(ys.length ? ys : [1]));
  if (y1 - y0 < 1e-9) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
  const sy = (y: number) => H - m.b - ((y - y0) / (y1 - y0)) * (H - m.t - m.b);
  const ticks = [y0, (y0 + y1) / 2, y1];
  const lines = series
    .map((s) => {
      const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
      const coords = pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
      const dots = pts.length <= 60 ? pts.map(([x, y]) => `<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="2.2" fill="${s.color}"/>`).join('') : '';
      return `<polyline class="series" data-series="${esc(s.name)}" data-n="${pts.length}" fill="none" stroke="${s.color}" stroke-width="1.8" points="${coords}"/>${dots}`;
    })
    .join('');
  const marks = (opts.markers ?? []).filter((k) => Number.isFinite(k.step) && k.step >= x0 && k.step <= x1);
  const markerSvg = marks.map((k) => `<line class="marker" data-step="${k.step}" x1="${sx(k.step).toFixed(1)}" x2="${sx(k.step).toFixed(1)}" y1="${m.t}" y2="${H - m.b}" stroke="#aaa" stroke-dasharray="4 3"><title>${esc(k.label)}</title></line>`).join('');
  const markerLegend = marks.length ? ` <span style="color:#888">┆ ${esc(marks[0]!.label.replace(/ at step \d+$/, ''))}</span>` : '';
  const legend = `<div class="legend">${series.map((s) => `<span style="color:${s.color}">■ ${esc(s.name)}</span>`).join(' ')}${markerLegend}</div>`;
  return `<figure class="chart" id="${id}"><figcaption>${esc(title)}</figcaption>
<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">
<rect x="${m.l}" y="${m.t}" width="${W - m.l - m.r}" height="${H - m.t - m.b}" fill="#fafafa" stroke="#ddd"/>
${ticks.map((t) => `<text x="${m.l - 6}" y="${sy(t) + 4}" font-size="10" text-anchor="end">${Number(t.toFixed(3))}</text><line x1="${m.l}" x2="${W - m.r}" y1="${sy(t)}" y2="${sy(t)}" stroke="#eee"/>`).join('')}
<text x="${W - m.r}" y="${H - 8}" font-size="10" text-anchor="end">step ${Number(x1.toFixed(1))}</text>
<text x="${m.l}" y="${H - 8}" font-size="10">${Number(x0.toFixed(1))}</text>
${markerSvg}${lines}
</svg>${legend}</figure>`;
}

function trajectoryHtml(t: Trajectory, label: string): string {
  const msgs = t.messages
    .map((m) => {
      if (m.role === 'assistant' && m.tool_calls?.length) {
        const calls = m.tool_calls.map((c) => `<div class="call">→ <b>${esc(c.function.name)}</b>(<code>${esc(c.function.arguments)}</code>)</div>`).join('');
        return `<div class="msg assistant">${m.content ? `<div>${esc(m.content)}</div>` : ''}${calls}</div>`;
      }
      if (m.role === 'tool') return `<div class="msg tool">← <code>${esc(m.content.slice(0, 400))}</code></div>`;
      return `<div class="msg ${m.role}"><span class="role">${m.role}</span> ${esc(m.content.slice(0, 600))}</div>`;
    })
    .join('');
  return `<details class="traj ${t.success ? 'ok' : 'fail'}"><summary>${esc(label)}: ${esc(t.task_id)} — ${t.success ? 'solved' : 'failed'}, reward ${t.reward.toFixed(3)}, ${t.metrics.turns} turns, ${t.metrics.tool_calls} tool calls</summary>${msgs}</details>`;
}

/** The held-out evaluations' pass@1 (with its 95% interval as two dashed bounds) and pass^k for each k sampled. */
function passChart(evals: ReportInput['evals']): string {
  const K = Math.max(1, ...evals.map((e) => Object.keys(e.pass_hat_k ?? {}).length));
  const colors = ['#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#1f77b4'];
  const series: Series[] = [
    { name: 'pass@1', points: evals.map((e) => [e.step, e.success] as [number, number]), color: '#2ca02c' },
    { name: 'pass@1 95% low', points: evals.map((e) => [e.step, e.ci95[0]] as [number, number]), color: '#98df8a' },
    { name: 'pass@1 95% high', points: evals.map((e) => [e.step, e.ci95[1]] as [number, number]), color: '#98df8a' },
  ];
  for (let k = 2; k <= K; k++) series.push({ name: `pass^${k}`, points: evals.filter((e) => e.pass_hat_k?.[k] !== undefined).map((e) => [e.step, e.pass_hat_k![k]!] as [number, number]), color: colors[(k - 2) % colors.length]! });
  return lineChart('chart-pass', 'Held-out pass@1 and pass^k (every k of the samples succeed)', series, { yMin: 0, yMax: 1 });
}

/**
 * The mean of each reward part per step (metrics' reward_parts_mean: the built-in parts and the
 * registered ones), the totals (art, rlvr, composer) aside: the reward chart shows the one trained on.
 * Drawn only when the metrics have them.
 */
function partsChart(metrics: Record<string, unknown>[]): string {
  const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const names = [...new Set(metrics.flatMap((m) => Object.keys((m.reward_parts_mean as Record<string, number> | undefined) ?? {})))].filter((n) => !['art', 'rlvr', 'composer'].includes(n));
  if (names.length === 0) return ''; // a run from before the parts were logged
  const series = names.map((n, i) => ({ name: n, points: metrics.map((m) => [num(m.step), num((m.reward_parts_mean as Record<string, unknown> | undefined)?.[n])] as [number, number]), color: colors[i % colors.length]! }));
  return lineChart('chart-reward-parts', 'Reward parts (train, mean)', series);
}

export interface ReportInput {
  title: string;
  metrics: Record<string, unknown>[];
  evals: { step: number; success: number; ci95: [number, number]; pass_at_k?: Record<string, number>; pass_hat_k?: Record<string, number> }[];
  samples: { label: string; trajectory: Trajectory }[];
  summary?: Record<string, unknown>;
}

const num = (v: unknown) => (typeof v === 'number' ? v : Number.NaN);

/** The module's lineChart, for renderReport's marked one of the same name. */
const lineChartOf = lineChart;

/**
 * The curriculum (curriculum.ts) and replay (replay.ts) charts, for the runs that have them: each
 * suite's level and the mean difficulty of the step's tasks; the step's tasks per difficulty; the
 * groups replayed, the buffer's size and the replayed groups' mean age.
 */
function curriculumCharts(metrics: Record<string, unknown>[], chart: typeof lineChart): string[] {
  const out: string[] = [];
  const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];
  const rec = (v: unknown) => (v && typeof v === 'object' ? (v as Record<string, number>) : undefined);
  const withLevels = metrics.filter((m) => rec(m.curriculum_levels));
  if (withLevels.length) {
    const suites = [...new Set(withLevels.flatMap((m) => Object.keys(rec(m.curriculum_levels)!)))].sort();
    const meanDifficulty = (m: Record<string, unknown>) => {
      const mix = rec(m.difficulty_mix) ?? {};
      const n = Object.values(mix).reduce((a, b) => a + b, 0);
      return n ? Object.entries(mix).reduce((a, [d, c]) => a + Number(d) * c, 0) / n : Number.NaN;
    };
    out.push(chart('chart-curriculum', 'Curriculum: level per suite, and the mean difficulty of the step\'s tasks', [
      ...suites.map((s, i) => ({ name: `level: ${s}`, points: withLevels.map((m) => [num(m.step), num(rec(m.curriculum_levels)![s])] as [number, number]), color: colors[i % colors.length]! })),
      { name: 'mean difficulty', points: withLevels.map((m) => [num(m.step), meanDifficulty(m)] as [number, number]), color: '#7f7f7f' },
    ], { yMin: 0, yMax: 5 }));
    const ds = [...new Set(withLevels.flatMap((m) => Object.keys(rec(m.difficulty_mix) ?? {})))].sort();
    out.push(chart('chart-difficulty-mix', 'Tasks of the step per difficulty (groups)', ds.map((d, i) => ({ name: `difficulty ${d}`, points: withLevels.map((m) => [num(m.step), rec(m.difficulty_mix)?.[d] ?? 0] as [number, number]), color: colors[i % colors.length]! })), { yMin: 0 }));
  }
  const withReplay = metrics.filter((m) => typeof m.replay_groups === 'number');
  if (withReplay.length) {
    const p = (k: string) => withReplay.map((m) => [num(m.step), num(m[k])] as [number, number]);
    out.push(chart('chart-replay', 'Replay: groups replayed, buffer size (groups), mean age of the replayed (steps)', [
      { name: 'replayed groups', points: p('replay_groups'), color: '#1f77b4' },
      { name: 'buffer size', points: p('replay_buffer_size'), color: '#ff7f0e' },
      { name: 'mean age', points: p('replay_age_mean'), color: '#2ca02c' },
    ], { yMin: 0 }));
  }
  return out;
}

export function renderReport(r: ReportInput): string {
  const pts = (k: string) => r.metrics.map((m) => [num(m.step), num(m[k])] as [number, number]);
  // The steps whose learner call reset the reference and the optimizer (ref_reset_every): marked on every chart.
  const resets = r.metrics.filter((m) => m.ref_reset === true).map((m) => ({ step: num(m.step), label: `reference reset at step ${num(m.step)}` }));
  const lineChart: typeof lineChartOf = (id, title, series, opts = {}) => lineChartOf(id, title, series, { markers: resets, ...opts });
  const charts = [
    lineChart('chart-reward', 'Reward (train, mean)', [{ name: 'reward', points: pts('reward_mean'), color: '#1f77b4' }]),
    partsChart(r.metrics),
    lineChart(
      'chart-success',
      'Success rate',
      [
        { name: 'train', points: pts('success_rate'), color: '#2ca02c' },
        { name: 'eval (held-out)', points: r.evals.map((e) => [e.step, e.success] as [number, number]), color: '#d62728' },
      ],
      { yMin: 0, yMax: 1 },
    ),
    lineChart('chart-kl', 'KL to the reference', [{ name: 'kl', points: pts('kl'), color: '#9467bd' }]),
    lineChart('chart-entropy', 'Entropy (nats / token)', [{ name: 'entropy', points: pts('entropy'), color: '#8c564b' }]),
    passChart(r.evals),
    lineChart('chart-staleness', 'Staleness (steps between the sampling weights and the trained ones)', [
      { name: 'mean', points: pts('staleness_mean'), color: '#1f77b4' },
      { name: 'max', points: pts('staleness_max'), color: '#ff7f0e' },
      { name: 'groups dropped (stale)', points: pts('stale_groups_dropped'), color: '#d62728' },
    ], { yMin: 0 }),
    lineChart('chart-corrections', 'Off-policy corrections (fractions of scored tokens; log-ratio learner − sampler)', [
      { name: 'IS truncated', points: pts('is_truncated_fraction'), color: '#9467bd' },
      { name: 'IS masked', points: pts('is_masked_fraction'), color: '#d62728' },
      { name: 'PPO clipped', points: pts('clip_fraction'), color: '#2ca02c' },
      { name: 'mean log-ratio', points: pts('sampler_log_ratio_mean'), color: '#8c564b' },
    ]),
    lineChart('chart-time', 'Seconds per step, and the learner idle fraction', [
      { name: 'step seconds', points: pts('step_seconds'), color: '#1f77b4' },
      { name: 'learner seconds', points: pts('learner_seconds'), color: '#ff7f0e' },
      { name: 'idle fraction', points: pts('learner_idle_fraction'), color: '#7f7f7f' },
    ], { yMin: 0 }),
    lineChart('chart-length', 'Lengths', [
      { name: 'policy tokens / episode', points: pts('policy_tokens_mean'), color: '#ff7f0e' },
      { name: 'turns x 10', points: r.metrics.map((m) => [num(m.step), num(m.turns_mean) * 10] as [number, number]), color: '#17becf' },
    ]),
    ...curriculumCharts(r.metrics, lineChart),
  ].join('\n');
  const summary = r.summary ? `<pre class="summary">${esc(JSON.stringify(r.summary, null, 2))}</pre>` : '';
  const samples = r.samples.map((s) => trajectoryHtml(s.trajectory, s.label)).join('\n');
  return `<!doctype html><html><head><meta charset="utf-8"><title>${esc(r.title)}</title>
<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}.charts{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid #eee;padding:6px}figcaption{font-size:13px;font-weight:600}.traj{margin:6px 0;border:1px solid #ddd;padding:6px}
.traj.ok summary{color:#2a7}.traj.fail summary{color:#c33}.msg{margin:3px 0 3px 12px;font-size:13px}.msg.tool{color:#555}.role{font-weight:600}
code{background:#f4f4f4;padding:1px 3px}.legend{font-size:11px;max-width:460px}.summary{background:#f8f8f8;padding:8px;font-size:12px}</style></head>
<body><h1>${esc(r.title)}</h1>${summary}<div class="charts">${charts}</div>
<h2>Sample trajectories</h2>${samples || '<p>none yet</p>'}
<script>
for (const fig of document.querySelectorAll('figure.chart')) {
  let drawn = 0;
  for (const line of fig.querySelectorAll('polyline.series')) {
    const box = line.getBBox();
    if (line.points.numberOfItems > 0 && (box.width > 0 || box.height > 0 || line.points.numberOfItems === 1)) drawn += line.points.numberOfItems;
  }
  fig.dataset.drawn = String(drawn);
}
document.body.dataset.ready = '1';
</script></body></html>`;
}

/** Writes the report atomically (a reader never sees half a page). */
export function writeReport(file: string, r: ReportInput): void {
  writeFileSync(file + '.tmp', renderReport(r));
  renameSync(file + '.tmp', file);
}
