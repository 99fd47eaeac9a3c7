/**
 * `runs/<id>/report.html`: one self-contained page (inline SVG, no network) with the run's
 * summary, its config as a grouped table (the fields set away from the preset marked, the raw JSON
 * in a collapsed block), the curves of the run (reward, success on train and eval, KL, entropy,
 * pass@1 and pass^k, staleness, corrections, time, lengths, curriculum, replay) as charts with
 * axes (chart.ts), and sample trajectories with their tool calls and results. A small inline
 * script marks each chart with how many points it drew (`data-drawn`), so a headless browser can
 * check that the charts drew their data.
 */
import { renameSync, writeFileSync } from 'node:fs';
import { esc } from '../../lib/index.ts';
import type { Trajectory } from '../env/index.ts';
import { configRows, CONFIG_GROUPS, formatValue, hideSecrets, lineChart, type Band, type ChartOptions, type ConfigRow, type Series } from './chart.ts';
import { TrainConfigSchema } from './config.ts';
import { PRESETS } from './presets.ts';

export { configRows, configGroup, CONFIG_GROUPS, escapeHtml, formatTicks, formatValue, lineChart, niceTicks, sameValue, stepTicks } from './chart.ts';
export type { Band, ChartOptions, ConfigGroup, ConfigRow, Series } from './chart.ts';

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

type Chart = (id: string, title: string, series: Series[], opts?: ChartOptions) => string;

/** The held-out evaluations' pass@1 (its 95% interval as a band) and pass^k for each k sampled. */
function passChart(evals: ReportInput['evals'], chart: Chart): string {
  const K = Math.max(1, ...evals.map((e) => Object.keys(e.pass_hat_k ?? {}).length));
  const colors = ['#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#1f77b4'];
  const series: Series[] = [{ name: 'pass@1', points: evals.map((e) => [e.step, e.success] as [number, number]), color: '#2ca02c' }];
  for (let k = 2; k <= K; k++)
    series.push({
      name: `pass^${k}`,
      points: evals.filter((e) => e.pass_hat_k?.[k] !== undefined).map((e) => [e.step, e.pass_hat_k![k]!] as [number, number]),
      color: colors[(k - 2) % colors.length]!,
    });
  const bands: Band[] = [
    { name: 'pass@1 95% interval', points: evals.map((e) => [e.step, e.ci95?.[0], e.ci95?.[1]] as [number, number, number]), color: '#2ca02c' },
  ];
  return chart('chart-pass', 'Held-out pass@1 and pass^k (every k of the samples succeed)', series, {
    yMin: 0,
    yMax: 1,
    bands,
    yLabel: 'share of the held-out tasks',
  });
}

/**
 * The mean of each reward part per step (metrics' reward_parts_mean: the built-in parts and the
 * registered ones), the totals (art, rlvr, composer) aside: the reward chart shows the one trained on.
 * Drawn only when the metrics have them.
 */
function partsChart(metrics: Record<string, unknown>[], chart: Chart): string {
  const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const names = [...new Set(metrics.flatMap((m) => Object.keys((m.reward_parts_mean as Record<string, number> | undefined) ?? {})))].filter(
    (n) => !['art', 'rlvr', 'composer'].includes(n),
  );
  if (names.length === 0) return ''; // a run from before the parts were logged
  const series = names.map((n, i) => ({
    name: n,
    points: metrics.map((m) => [num(m.step), num((m.reward_parts_mean as Record<string, unknown> | undefined)?.[n])] as [number, number]),
    color: colors[i % colors.length]!,
  }));
  return chart('chart-reward-parts', 'Reward parts (train, mean)', series, { yLabel: 'reward part (mean per episode)' });
}

export interface ReportInput {
  title: string;
  metrics: Record<string, unknown>[];
  evals: { step: number; success: number; ci95: [number, number]; pass_at_k?: Record<string, number>; pass_hat_k?: Record<string, number> }[];
  samples: { label: string; trajectory: Trajectory }[];
  /** The run's summary (loop.ts: the config, the step; at the end the evaluations before and after and the training time). */
  summary?: Record<string, unknown>;
}

const num = (v: unknown) => (typeof v === 'number' ? v : Number.NaN);

/**
 * The curriculum (curriculum.ts) and replay (replay.ts) charts, for the runs that have them: each
 * suite's level and the mean difficulty of the step's tasks; the step's tasks per difficulty; the
 * groups replayed, the buffer's size and the replayed groups' mean age.
 */
function curriculumCharts(metrics: Record<string, unknown>[], chart: Chart): string[] {
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
    out.push(
      chart(
        'chart-curriculum',
        "Curriculum: level per suite, and the mean difficulty of the step's tasks",
        [
          ...suites.map((s, i) => ({
            name: `level: ${s}`,
            points: withLevels.map((m) => [num(m.step), num(rec(m.curriculum_levels)![s])] as [number, number]),
            color: colors[i % colors.length]!,
          })),
          { name: 'mean difficulty', points: withLevels.map((m) => [num(m.step), meanDifficulty(m)] as [number, number]), color: '#7f7f7f' },
        ],
        { yMin: 0, yMax: 5, yLabel: 'difficulty (1–5)' },
      ),
    );
    const ds = [...new Set(withLevels.flatMap((m) => Object.keys(rec(m.difficulty_mix) ?? {})))].sort();
    out.push(
      chart(
        'chart-difficulty-mix',
        'Tasks of the step per difficulty (groups)',
        ds.map((d, i) => ({
          name: `difficulty ${d}`,
          points: withLevels.map((m) => [num(m.step), rec(m.difficulty_mix)?.[d] ?? 0] as [number, number]),
          color: colors[i % colors.length]!,
        })),
        { yMin: 0, yLabel: 'groups' },
      ),
    );
  }
  const withReplay = metrics.filter((m) => typeof m.replay_groups === 'number');
  if (withReplay.length) {
    const p = (k: string) => withReplay.map((m) => [num(m.step), num(m[k])] as [number, number]);
    out.push(
      chart(
        'chart-replay',
        'Replay: groups replayed, buffer size (groups), mean age of the replayed (steps)',
        [
          { name: 'replayed groups', points: p('replay_groups'), color: '#1f77b4' },
          { name: 'buffer size', points: p('replay_buffer_size'), color: '#ff7f0e' },
          { name: 'mean age', points: p('replay_age_mean'), color: '#2ca02c' },
        ],
        { yMin: 0, yLabel: 'groups; age in steps' },
      ),
    );
  }
  return out;
}

/**
 * The values a config's fields would have without the run's own settings: its preset's (PRESETS
 * over the schema's defaults), or the schema's alone for a config without a known preset;
 * undefined for something that is no training config.
 */
export function configDefaults(config: Record<string, unknown>): Record<string, unknown> | undefined {
  const preset = typeof config.preset === 'string' && config.preset in PRESETS ? (config.preset as keyof typeof PRESETS) : undefined;
  const r = TrainConfigSchema.safeParse(preset ? { ...PRESETS[preset], preset } : {});
  return r.success ? (r.data as Record<string, unknown>) : undefined;
}

/** A field's help (the schema's `.describe()`), for the table's tooltips. */
function fieldHelp(key: string): string {
  const shape = TrainConfigSchema.shape as Record<string, { description?: string } | undefined>;
  return shape[key]?.description ?? '';
}

/** The config as one table per group (CONFIG_GROUPS), the fields set away from the defaults marked. */
export function configTableHtml(config: Record<string, unknown>, defaults = configDefaults(config)): string {
  const rows = configRows(config, defaults);
  const preset = typeof config.preset === 'string' ? config.preset : undefined;
  const against = defaults ? (preset && preset in PRESETS ? `the ${preset} preset` : 'the defaults') : undefined;
  const changed = rows.filter((r) => r.changed);
  const row = (r: ConfigRow) => {
    const help = fieldHelp(r.key);
    return `<tr${r.changed ? ' class="changed"' : ''} data-key="${esc(r.key)}"><th${help ? ` title="${esc(help)}"` : ''}>${esc(r.key)}</th><td class="value">${esc(r.value)}</td><td class="default">${r.changed ? `${esc(r.default ?? '—')}` : ''}</td></tr>`;
  };
  const tables = CONFIG_GROUPS.map((g) => {
    const rs = rows.filter((r) => r.group === g);
    if (!rs.length) return '';
    return `<table class="config" data-group="${esc(g)}"><caption>${esc(g)}</caption><thead><tr><th>field</th><th>value</th><th>${against ? esc(preset && preset in PRESETS ? `${preset} preset` : 'default') : ''}</th></tr></thead><tbody>${rs.map(row).join('')}</tbody></table>`;
  }).join('');
  const note = against
    ? `<p class="note">${changed.length ? `<span class="changed-mark">●</span> ${changed.length} field${changed.length === 1 ? '' : 's'} set away from ${esc(against)} (its value in the last column): ${changed.map((r) => `<b>${esc(r.key)}</b>`).join(', ')}.` : `Every field has the value of ${esc(against)}.`} Hover a field's name for its meaning.</p>`
    : '';
  return `${note}<div class="config-tables">${tables}</div>`;
}

/** A held-out evaluation (EvalResult) in a line: success with its interval, episodes, mean reward, pass^k and pass@k. */
function evalLine(e: Record<string, unknown>): string {
  const pct = (v: unknown) => (typeof v === 'number' ? `${formatValue(v * 100, 3)}%` : '—');
  const ci = Array.isArray(e.ci95) ? ` (95% interval ${pct(e.ci95[0])} – ${pct(e.ci95[1])})` : '';
  const parts = [`success ${pct(e.success)}${ci}`];
  if (typeof e.step === 'number') parts.push(`at step ${e.step}`);
  if (typeof e.episodes === 'number') parts.push(`${e.episodes} episodes`);
  if (typeof e.mean_reward === 'number') parts.push(`mean reward ${formatValue(e.mean_reward)}`);
  const ks = (rec: unknown, sym: string) =>
    Object.entries((rec as Record<string, number> | undefined) ?? {})
      .filter(([k]) => k !== '1')
      .map(([k, v]) => `${sym}${k} ${formatValue(v)}`);
  parts.push(...ks(e.pass_hat_k, 'pass^'), ...ks(e.pass_at_k, 'pass@'));
  return parts.join(', ');
}

const SUMMARY_LABELS: Record<string, string> = {
  step: 'step reached',
  steps: 'steps trained',
  before: 'held-out evaluation before training',
  after: 'held-out evaluation after training',
  train_seconds: 'training time',
};

/** The summary's fields other than the config, for people. */
function summaryHtml(summary: Record<string, unknown>): string {
  const rows = Object.entries(summary)
    .filter(([k, v]) => k !== 'config' && v !== undefined)
    .map(([k, v]) => {
      let value: string;
      if (v && typeof v === 'object' && !Array.isArray(v) && 'success' in v) value = evalLine(v as Record<string, unknown>);
      else if (k.endsWith('_seconds') && typeof v === 'number') value = v >= 120 ? `${formatValue(v / 60, 3)} min` : `${formatValue(v, 3)} s`;
      else value = formatValue(v);
      return `<tr data-key="${esc(k)}"><th>${esc(SUMMARY_LABELS[k] ?? k)}</th><td>${esc(value)}</td></tr>`;
    });
  return rows.length ? `<table class="summary">${rows.join('')}</table>` : '';
}

/** The summary as JSON for copying, the secrets (learner_token, ...) hidden. */
function rawJson(summary: Record<string, unknown>): string {
  return JSON.stringify(summary, hideSecrets, 2);
}

export function renderReport(r: ReportInput): string {
  const pts = (k: string) => r.metrics.map((m) => [num(m.step), num(m[k])] as [number, number]);
  // The steps whose learner call reset the reference and the optimizer (ref_reset_every): marked on every chart.
  const resets = r.metrics.filter((m) => m.ref_reset === true).map((m) => ({ step: num(m.step), label: `reference reset at step ${num(m.step)}` }));
  // One step axis for every chart (the training steps and the evaluations), so that the charts line up.
  const steps = [...r.metrics.map((m) => num(m.step)), ...r.evals.map((e) => e.step)].filter(Number.isFinite);
  const xDomain: [number, number] | undefined = steps.length ? [Math.min(...steps), Math.max(...steps)] : undefined;
  const chart: Chart = (id, title, series, opts = {}) => lineChart(id, title, series, { markers: resets, ...(xDomain ? { xDomain } : {}), ...opts });
  const evalBand: Band = {
    name: 'eval 95% interval',
    points: r.evals.map((e) => [e.step, e.ci95?.[0], e.ci95?.[1]] as [number, number, number]),
    color: '#d62728',
  };
  const charts = [
    chart('chart-reward', 'Reward (train, mean)', [{ name: 'reward', points: pts('reward_mean'), color: '#1f77b4' }], { yLabel: 'reward (mean per episode)' }),
    partsChart(r.metrics, chart),
    chart(
      'chart-success',
      'Success rate',
      [
        { name: 'train', points: pts('success_rate'), color: '#2ca02c' },
        { name: 'eval (held-out)', points: r.evals.map((e) => [e.step, e.success] as [number, number]), color: '#d62728' },
      ],
      { yMin: 0, yMax: 1, bands: r.evals.length ? [evalBand] : [], yLabel: 'success rate (share solved)' },
    ),
    chart('chart-kl', 'KL to the reference', [{ name: 'kl', points: pts('kl'), color: '#9467bd' }], { yLabel: 'KL (nats / token)' }),
    chart('chart-entropy', 'Entropy (nats / token)', [{ name: 'entropy', points: pts('entropy'), color: '#8c564b' }], { yLabel: 'entropy (nats / token)' }),
    passChart(r.evals, chart),
    chart(
      'chart-staleness',
      'Staleness (steps between the sampling weights and the trained ones)',
      [
        { name: 'mean', points: pts('staleness_mean'), color: '#1f77b4' },
        { name: 'max', points: pts('staleness_max'), color: '#ff7f0e' },
        { name: 'groups dropped (stale)', points: pts('stale_groups_dropped'), color: '#d62728' },
      ],
      { yMin: 0, yLabel: 'steps; dropped: groups' },
    ),
    chart(
      'chart-corrections',
      'Off-policy corrections (fractions of scored tokens; log-ratio learner − sampler)',
      [
        { name: 'IS truncated', points: pts('is_truncated_fraction'), color: '#9467bd' },
        { name: 'IS masked', points: pts('is_masked_fraction'), color: '#d62728' },
        { name: 'PPO clipped', points: pts('clip_fraction'), color: '#2ca02c' },
        { name: 'mean log-ratio', points: pts('sampler_log_ratio_mean'), color: '#8c564b' },
      ],
      { yLabel: 'share of tokens; log-ratio (nats)' },
    ),
    chart(
      'chart-time',
      'Seconds per step, and the learner idle fraction',
      [
        { name: 'step seconds', points: pts('step_seconds'), color: '#1f77b4' },
        { name: 'learner seconds', points: pts('learner_seconds'), color: '#ff7f0e' },
        { name: 'idle fraction', points: pts('learner_idle_fraction'), color: '#7f7f7f' },
      ],
      { yMin: 0, yLabel: 'seconds; idle: share' },
    ),
    chart(
      'chart-length',
      'Lengths',
      [
        { name: 'policy tokens / episode', points: pts('policy_tokens_mean'), color: '#ff7f0e' },
        { name: 'turns x 10', points: r.metrics.map((m) => [num(m.step), num(m.turns_mean) * 10] as [number, number]), color: '#17becf' },
      ],
      { yMin: 0, yLabel: 'tokens; turns × 10' },
    ),
    ...curriculumCharts(r.metrics, chart),
  ].join('\n');
  const config =
    r.summary?.config && typeof r.summary.config === 'object' && !Array.isArray(r.summary.config) ? (r.summary.config as Record<string, unknown>) : undefined;
  const summary = r.summary
    ? `<section class="run-summary"><h2>Run</h2>${summaryHtml(r.summary)}${config ? `<h2>Configuration</h2>${configTableHtml(config)}` : ''}
<details class="raw"><summary>Raw JSON (the run's summary${config ? ' and config' : ''}, for copying)</summary><pre>${esc(rawJson(r.summary))}</pre></details></section>`
    : '';
  const samples = r.samples.map((s) => trajectoryHtml(s.trajectory, s.label)).join('\n');
  return `<!doctype html><html><head><meta charset="utf-8"><title>${esc(r.title)}</title>
<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin:18px 0 8px}
.charts{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;border:1px solid #e4e4e4;border-radius:4px;padding:8px;background:#fff}
figcaption{font-size:13px;font-weight:600;margin-bottom:4px;max-width:540px}svg.plot{display:block;max-width:100%;height:auto}
.legend{font-size:12px;max-width:540px;display:flex;flex-wrap:wrap;gap:4px 12px;margin-top:4px}.legend .item{display:inline-flex;align-items:center;gap:4px}
.traj{margin:6px 0;border:1px solid #ddd;padding:6px}.traj.ok summary{color:#2a7}.traj.fail summary{color:#c33}.msg{margin:3px 0 3px 12px;font-size:13px}.msg.tool{color:#555}.role{font-weight:600}
code{background:#f4f4f4;padding:1px 3px}table{border-collapse:collapse;font-size:13px}table.summary th,table.summary td{text-align:left;padding:3px 10px 3px 0;vertical-align:top}
table.summary th{font-weight:600;white-space:nowrap}.config-tables{columns:360px;column-gap:16px}
table.config{width:100%;break-inside:avoid;margin:0 0 12px}table.config caption{text-align:left;font-weight:600;padding:4px 0;border-bottom:2px solid #ccc}
table.config thead th{font-size:11px;color:#888;font-weight:400;text-align:left;white-space:nowrap}table.config th,table.config td{padding:2px 6px;text-align:left;vertical-align:top;border-bottom:1px solid #f0f0f0}
table.config tbody th{font-weight:400;font-family:ui-monospace,monospace;font-size:12px;white-space:nowrap}table.config td.value{word-break:break-word;font-family:ui-monospace,monospace;font-size:12px}
table.config td.default{color:#888;font-size:12px}table.config tr.changed{background:#fff6d6}table.config tr.changed th{font-weight:700}table.config tr.changed th::before{content:"● ";color:#e69500}
.changed-mark{color:#e69500}.note{font-size:13px;color:#444}details.raw pre{background:#f8f8f8;padding:8px;font-size:12px;overflow:auto;max-height:480px}</style></head>
<body><h1>${esc(r.title)}</h1>${summary}<h2>Curves</h2><div class="charts">${charts}</div>
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
