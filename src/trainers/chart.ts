/**
 * Formatting and chart helpers shared by the run report (report.ts) and anything else that shows a
 * run to people: nice axis ticks, numbers without float noise, the config as grouped rows, and an
 * SVG line chart with axes, gridlines, a legend, interval bands and step markers. No imports and no
 * Node built-ins: the module runs as well in a browser.
 */

/** HTML/XML escaping of text and attribute values. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** A "nice" number near x (1, 2 or 5 times a power of ten): rounded to the nearest, or the one at or above it. */
function niceNum(x: number, round: boolean): number {
  const exp = Math.floor(Math.log10(x));
  const p = Math.pow(10, exp);
  const f = x / p;
  const nice = round ? (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) : f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * p;
}

/** v without the noise of binary floating point (12 significant digits), and without a negative zero. */
function clean(v: number): number {
  const r = Number(v.toPrecision(12));
  return r === 0 ? 0 : r;
}

/**
 * About n evenly spaced round tick values (steps of 1, 2 or 5 × 10^k) that cover [min, max]: the
 * first at or below min, the last at or above max. Equal bounds get a range around the value
 * (±10% of it, ±1 around 0); bounds in the wrong order are swapped; a bound that is not finite
 * is left out ([] when both are). The values are clean: 0.1 + 0.2 gives 0.3.
 */
export function niceTicks(min: number, max: number, n = 5): number[] {
  if (!Number.isFinite(min) && !Number.isFinite(max)) return [];
  if (!Number.isFinite(min)) min = max;
  if (!Number.isFinite(max)) max = min;
  if (min > max) [min, max] = [max, min];
  const count = Math.min(50, Math.max(2, Number.isFinite(n) ? Math.round(n) : 5));
  if (max - min <= Math.max(Math.abs(min), Math.abs(max)) * 1e-12) {
    const d = min === 0 ? 1 : Math.abs(min) * 0.1;
    min -= d;
    max += d;
  }
  const span = max - min;
  if (!Number.isFinite(span)) return [min, max].map(clean); // beyond the doubles' range: the bounds alone
  const step = niceNum(span / (count - 1), true);
  const lo = Math.floor(min / step + 1e-9);
  const hi = Math.ceil(max / step - 1e-9);
  const out: number[] = [];
  for (let i = lo; i <= hi && out.length < 4 * count; i++) out.push(clean(i * step));
  return out;
}

/**
 * Ticks for an axis of training steps: whole steps, about n of them, within [first, last] and
 * always with the first and the last (an interior tick too close to either is dropped).
 */
export function stepTicks(first: number, last: number, n = 6): number[] {
  if (!Number.isFinite(first) || !Number.isFinite(last)) return [];
  if (first > last) [first, last] = [last, first];
  if (first === last) return [clean(first)];
  let inner = niceTicks(first, last, n);
  if (inner.length > 1 && inner[1]! - inner[0]! < 1) inner = Array.from({ length: Math.floor(last) - Math.ceil(first) + 1 }, (_, i) => Math.ceil(first) + i);
  const spacing = inner.length > 1 ? inner[1]! - inner[0]! : last - first;
  inner = inner.filter((t) => t > first + spacing * 0.5 && t < last - spacing * 0.5);
  return [clean(first), ...inner, clean(last)];
}

/**
 * A value for people: numbers to `digits` significant digits without float noise
 * (0.6499999999999999 → 0.65), small and huge ones in short exponent form (5e-4, 1.2e21), whole
 * numbers below 10^15 exact; booleans as true/false; lists as items separated by commas; objects
 * as key=value pairs; '' as (empty); null and undefined as —.
 */
export function formatValue(x: unknown, digits = 4): string {
  if (x === null || x === undefined) return '—';
  if (typeof x === 'number') return formatNumber(x, digits);
  if (typeof x === 'boolean') return x ? 'true' : 'false';
  if (typeof x === 'string') return x === '' ? '(empty)' : x;
  if (typeof x === 'bigint') return String(x);
  if (Array.isArray(x))
    return x.length ? x.map((v) => (v && typeof v === 'object' ? `(${formatValue(v, digits)})` : formatValue(v, digits))).join(', ') : '(none)';
  if (typeof x === 'object') {
    const entries = Object.entries(x as Record<string, unknown>);
    return entries.length
      ? entries.map(([k, v]) => `${k}=${v && typeof v === 'object' ? `(${formatValue(v, digits)})` : formatValue(v, digits)}`).join(', ')
      : '(none)';
  }
  return String(x);
}

function formatNumber(x: number, digits: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '-∞';
  if (x === 0) return '0';
  const d = Math.min(21, Math.max(1, Math.round(digits)));
  const a = Math.abs(x);
  if (Number.isInteger(x) && a < 1e15) return String(x);
  const r = Number(x.toPrecision(d));
  if (a < 1e-3 || Math.abs(r) >= 1e6) return r.toExponential().replace('e+', 'e');
  return String(r);
}

/**
 * Labels for a set of evenly spaced ticks (niceTicks), all in one form: fixed with the decimals of
 * the spacing (0, 0.25, 0.5), or exponents when the values are all tiny or some huge.
 */
export function formatTicks(ticks: number[]): string[] {
  const finite = ticks.filter(Number.isFinite);
  const maxAbs = Math.max(0, ...finite.map(Math.abs));
  if (maxAbs >= 1e6 || (maxAbs > 0 && maxAbs < 1e-3))
    return ticks.map((t) => (Number.isFinite(t) && t !== 0 ? Number(t.toPrecision(6)).toExponential().replace('e+', 'e') : formatValue(t)));
  const spacing =
    finite.length > 1
      ? Math.min(
          ...finite
            .slice(1)
            .map((t, i) => Math.abs(t - finite[i]!))
            .filter((d) => d > 0),
        )
      : 0;
  const decimals = (x: number) => {
    const s = String(Number(x.toPrecision(6)));
    return s.includes('e-') ? Number(s.split('e-')[1]) : (s.split('.')[1]?.length ?? 0);
  };
  const dec = Math.min(10, Math.max(0, ...finite.map(decimals), Number.isFinite(spacing) && spacing > 0 ? decimals(spacing) : 0));
  return ticks.map((t) => (Number.isFinite(t) ? (t === 0 ? 0 : t).toFixed(dec) : formatValue(t)));
}

/** The groups of the config table, in their order. */
export const CONFIG_GROUPS = [
  'task / suite',
  'model',
  'algorithm / loss',
  'optimisation',
  'sampling',
  'rollout',
  'evaluation',
  'curriculum / replay',
  'other',
] as const;
export type ConfigGroup = (typeof CONFIG_GROUPS)[number];

const GROUP_OF: Record<string, ConfigGroup> = {};
const put = (group: ConfigGroup, keys: string) =>
  keys
    .split(/\s+/)
    .filter(Boolean)
    .forEach((k) => (GROUP_OF[k] = group));
put('task / suite', 'suite tasks eval_tasks max_difficulty faults bundled_servers');
put(
  'model',
  'model policy base_url request_timeout_ms api_key_env learner learner_token learner_shared_fs device threads learner_procs learner_parallel sampler_threads sampler_keep_rows dtype gradient_checkpointing lora_rank lora_alpha lora_dropout lora_targets logit_chunk',
);
put(
  'algorithm / loss',
  'preset reward composer_weights advantage per_turn loss clip_low clip_high dual_clip beta entropy_coef ref_reset_every is_correction is_cap is_min gae_gamma gae_lambda gae_level value_coef value_clip whiten_advantages overlong_max overlong_cache policy_token_budget dr_grpo_constant judge judge_base_url judge_api_key_env ruler ruler_votes ruler_weight ruler_verifier_weight ruler_rubric',
);
put(
  'optimisation',
  'lr warmup_steps total_steps min_lr_ratio weight_decay adam_eps adam_beta1 adam_beta2 vector_lr_scale max_grad_norm epochs minibatch_size micro_batch_size',
);
put('sampling', 'temperature top_k top_p max_new_tokens dynamic_sampling dynamic_sampling_on max_resample_rounds');
put('rollout', 'steps tasks_per_step group concurrency max_staleness time_budget_minutes checkpoint_every seed');
put('evaluation', 'eval_every eval_limit eval_samples eval_temperature');

/** The group of a config field: by name, then by prefix (curriculum_*, replay_*, eval_*), else other. */
export function configGroup(key: string): ConfigGroup {
  const g = GROUP_OF[key];
  if (g) return g;
  if (/^(curriculum|replay)(_|$)/.test(key)) return 'curriculum / replay';
  if (/^eval_/.test(key)) return 'evaluation';
  if (/^(lora|adam)_/.test(key)) return key.startsWith('lora') ? 'model' : 'optimisation';
  return 'other';
}

/** A field whose value is a secret (a bearer token, a key, a password): shown as hidden. Names of environment variables are not secrets. */
export function isSecretField(key: string): boolean {
  return /(^|_)(token|secret|password|api_key|apikey)$/i.test(key) && !/_env$/.test(key);
}

/** A JSON.stringify replacer that writes `(hidden)` for the non-empty string values of secret fields. */
export function hideSecrets(key: string, value: unknown): unknown {
  return isSecretField(key) && typeof value === 'string' && value !== '' ? '(hidden)' : value;
}

export interface ConfigRow {
  group: ConfigGroup;
  key: string;
  /** The value for people (formatValue). */
  value: string;
  raw: unknown;
  /** The default for people, when defaults were given and the field differs from it. */
  default?: string;
  /** The field differs from its default (false everywhere without defaults). */
  changed: boolean;
}

/** Equal as config values: numbers within float noise, lists and objects field by field. */
export function sameValue(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' && typeof b === 'number') return a === b || Math.abs(a - b) <= 1e-12 * Math.max(Math.abs(a), Math.abs(b));
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => sameValue(v, b[i]));
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
    const kb = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
  }
  return a === b;
}

/**
 * The config as rows for a table: grouped (CONFIG_GROUPS, in that order; the fields in the
 * config's order within a group), each value formatted for people (6 significant digits), secrets
 * hidden, and, with `defaults` (e.g. the preset's values), the fields that differ from them marked.
 */
export function configRows(config: Record<string, unknown>, defaults?: Record<string, unknown>): ConfigRow[] {
  const rows: ConfigRow[] = [];
  for (const [key, raw] of Object.entries(config)) {
    if (raw === undefined) continue;
    const secret = isSecretField(key) && typeof raw === 'string' && raw !== '';
    const changed = defaults !== undefined && !sameValue(raw, defaults[key]);
    rows.push({
      group: configGroup(key),
      key,
      value: secret ? '(hidden)' : formatValue(raw, 6),
      raw: secret ? '(hidden)' : raw,
      ...(changed ? { default: formatValue(defaults[key], 6) } : {}),
      changed,
    });
  }
  return CONFIG_GROUPS.flatMap((g) => rows.filter((r) => r.group === g));
}

export interface Series {
  name: string;
  points: [number, number][];
  color: string;
}

/** An interval per step (e.g. a 95% confidence interval), drawn as a shaded band: [x, low, high]. */
export interface Band {
  name: string;
  points: [number, number, number][];
  color: string;
}

export interface ChartOptions {
  /** The y axis covers at least [yMin, yMax] (the data may widen it). */
  yMin?: number;
  yMax?: number;
  /** The y axis' label: the metric and its unit. */
  yLabel?: string;
  /** The x axis' label (default: step). */
  xLabel?: string;
  /** The x axis' range (default: the data's steps): charts of one run share it so that they line up. */
  xDomain?: [number, number];
  /** Steps marked by a dashed vertical line (e.g. the reference resets of ref_reset_every), drawn under the series. */
  markers?: { step: number; label: string }[];
  /** Intervals drawn as shaded bands under the series. */
  bands?: Band[];
  width?: number;
  height?: number;
}

const f1 = (v: number) => (Math.round(v * 10) / 10).toString();
const finitePoint = ([x, y]: [number, number]) => Number.isFinite(x) && Number.isFinite(y);

/**
 * An SVG line chart over training steps: x axis with step ticks (the first and last step always
 * labelled) and its label, y axis with nice ticks and the metric's label, gridlines, the series
 * (polyline `class="series"` with `data-n` points, a `class="dot"` with a tooltip per point up to 60), bands
 * (`class="band"`), dashed markers (`class="marker"`) and, with several series, a bands or markers,
 * a legend.
 */
export function lineChart(id: string, title: string, series: Series[], opts: ChartOptions = {}): string {
  const W = opts.width ?? 540;
  const H = opts.height ?? 300;
  const m = { l: 68, r: 18, t: 14, b: 46 };
  const bands = (opts.bands ?? []).map((b) => ({
    ...b,
    points: b.points.filter(([x, lo, hi]) => Number.isFinite(x) && Number.isFinite(lo) && Number.isFinite(hi)),
  }));
  const drawn = series.map((s) => ({ ...s, points: s.points.filter(finitePoint) }));
  const xs = [...drawn.flatMap((s) => s.points.map((p) => p[0])), ...bands.flatMap((b) => b.points.map((p) => p[0]))];
  const ys = [...drawn.flatMap((s) => s.points.map((p) => p[1])), ...bands.flatMap((b) => b.points.flatMap((p) => [p[1], p[2]]))];
  const [dx0, dx1] = opts.xDomain ?? [xs.length ? Math.min(...xs) : 0, xs.length ? Math.max(...xs) : 1];
  const xTicks = stepTicks(dx0, dx1, 7);
  const [x0, x1] = dx0 === dx1 ? [dx0 - 1, dx1 + 1] : [dx0, dx1];
  const lo = Math.min(...ys, ...(opts.yMin !== undefined ? [opts.yMin] : []));
  const hi = Math.max(...ys, ...(opts.yMax !== undefined ? [opts.yMax] : []));
  const yTicks = Number.isFinite(lo) && Number.isFinite(hi) ? niceTicks(lo, hi, 6) : niceTicks(0, 1, 6);
  const y0 = yTicks[0]!;
  const y1 = yTicks[yTicks.length - 1]!;
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0)) * pw;
  const sy = (y: number) => m.t + ph - ((y - y0) / (y1 - y0)) * ph;
  const xLabels = formatTicks(xTicks);
  const yLabels = formatTicks(yTicks);
  const grid = [
    ...yTicks.map((t) => `<line x1="${m.l}" x2="${W - m.r}" y1="${f1(sy(t))}" y2="${f1(sy(t))}"/>`),
    ...xTicks.map((t) => `<line x1="${f1(sx(t))}" x2="${f1(sx(t))}" y1="${m.t}" y2="${m.t + ph}"/>`),
  ].join('');
  const yAxis = yTicks
    .map(
      (t, i) =>
        `<line x1="${m.l - 4}" x2="${m.l}" y1="${f1(sy(t))}" y2="${f1(sy(t))}" stroke="#888"/><text class="tick" data-value="${t}" x="${m.l - 7}" y="${f1(sy(t) + 4)}" text-anchor="end">${escapeHtml(yLabels[i]!)}</text>`,
    )
    .join('');
  const xAxis = xTicks
    .map(
      (t, i) =>
        `<line x1="${f1(sx(t))}" x2="${f1(sx(t))}" y1="${m.t + ph}" y2="${m.t + ph + 4}" stroke="#888"/><text class="tick" data-value="${t}" x="${f1(sx(t))}" y="${m.t + ph + 17}" text-anchor="middle">${escapeHtml(xLabels[i]!)}</text>`,
    )
    .join('');
  const yLabel = opts.yLabel ?? (series.length === 1 ? series[0]!.name : '');
  const marks = (opts.markers ?? []).filter((k) => Number.isFinite(k.step) && k.step >= x0 && k.step <= x1);
  const markerSvg = marks
    .map(
      (k) =>
        `<line class="marker" data-step="${k.step}" x1="${f1(sx(k.step))}" x2="${f1(sx(k.step))}" y1="${m.t}" y2="${m.t + ph}" stroke="#999" stroke-dasharray="4 3"><title>${escapeHtml(k.label)}</title></line>`,
    )
    .join('');
  const bandSvg = bands
    .map((b) => {
      const n = b.points.length;
      const common = `class="band" data-series="${escapeHtml(b.name)}" data-n="${n}" fill="${b.color}" fill-opacity="0.22" stroke="${b.color}" stroke-opacity="0.5"`;
      if (n === 0) return '';
      if (n === 1) {
        // One interval: an error bar.
        const [x, l, h] = b.points[0]!;
        return `<path ${common} stroke-width="1.5" d="M${f1(sx(x))},${f1(sy(l))}V${f1(sy(h))}M${f1(sx(x) - 4)},${f1(sy(l))}h8M${f1(sx(x) - 4)},${f1(sy(h))}h8"><title>${escapeHtml(`${b.name}: step ${x}, ${formatValue(l)}–${formatValue(h)}`)}</title></path>`;
      }
      const upper = b.points.map(([x, , h]) => `${f1(sx(x))},${f1(sy(h))}`);
      const lower = [...b.points].reverse().map(([x, l]) => `${f1(sx(x))},${f1(sy(l))}`);
      return `<path ${common} stroke-width="0.8" d="M${upper.join('L')}L${lower.join('L')}Z"><title>${escapeHtml(b.name)}</title></path>`;
    })
    .join('');
  const lines = drawn
    .map((s) => {
      const coords = s.points.map(([x, y]) => `${f1(sx(x))},${f1(sy(y))}`).join(' ');
      const dots =
        s.points.length <= 60
          ? s.points
              .map(
                ([x, y]) =>
                  `<circle class="dot" cx="${f1(sx(x))}" cy="${f1(sy(y))}" r="2.6" fill="${s.color}"><title>${escapeHtml(`${s.name}: step ${formatValue(x)}, ${formatValue(y)}`)}</title></circle>`,
              )
              .join('')
          : '';
      return `<polyline class="series" data-series="${escapeHtml(s.name)}" data-n="${s.points.length}" fill="none" stroke="${s.color}" stroke-width="2" stroke-linejoin="round" points="${coords}"/>${dots}`;
    })
    .join('');
  const empty =
    drawn.every((s) => s.points.length === 0) && bands.every((b) => b.points.length === 0)
      ? `<text class="empty" x="${m.l + pw / 2}" y="${m.t + ph / 2}" text-anchor="middle" fill="#999">no data</text>`
      : '';
  const swatch = (body: string) => `<svg class="swatch" width="22" height="10" viewBox="0 0 22 10" aria-hidden="true">${body}</svg>`;
  const legendItems = [
    ...series.map(
      (s) =>
        `<span class="item" style="display:inline-flex;align-items:center;gap:4px">${swatch(`<line x1="1" x2="21" y1="5" y2="5" stroke="${s.color}" stroke-width="2"/><circle cx="11" cy="5" r="2.6" fill="${s.color}"/>`)}${escapeHtml(s.name)}</span>`,
    ),
    ...bands.map(
      (b) =>
        `<span class="item" style="display:inline-flex;align-items:center;gap:4px">${swatch(`<rect x="1" y="1" width="20" height="8" fill="${b.color}" fill-opacity="0.22" stroke="${b.color}" stroke-opacity="0.5"/>`)}${escapeHtml(b.name)}</span>`,
    ),
    ...(marks.length
      ? [
          `<span class="item" style="display:inline-flex;align-items:center;gap:4px">${swatch('<line x1="11" x2="11" y1="0" y2="10" stroke="#999" stroke-dasharray="3 2"/>')}${escapeHtml(marks[0]!.label.replace(/ at step \d+$/, ''))}</span>`,
        ]
      : []),
  ];
  const legend =
    series.length > 1 || bands.length || marks.length
      ? `<div class="legend" style="display:flex;flex-wrap:wrap;gap:4px 12px;font-size:12px">${legendItems.join('')}</div>`
      : '';
  return `<figure class="chart" id="${id}"><figcaption>${escapeHtml(title)}</figcaption>
<svg class="plot" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${escapeHtml(title)}" font-size="11" font-family="system-ui,sans-serif">
<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" fill="#fcfcfc"/>
<g class="grid" stroke="#e6e6e6">${grid}</g>
<g class="y-axis" fill="#444">${yAxis}<text class="axis-label" transform="translate(16 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle" fill="#222">${escapeHtml(yLabel)}</text></g>
<g class="x-axis" fill="#444">${xAxis}<text class="axis-label" x="${m.l + pw / 2}" y="${H - 8}" text-anchor="middle" fill="#222">${escapeHtml(opts.xLabel ?? 'step')}</text></g>
<path d="M${m.l},${m.t}V${m.t + ph}H${W - m.r}" fill="none" stroke="#888"/>
${markerSvg}${bandSvg}${lines}${empty}
</svg>${legend}</figure>`;
}
