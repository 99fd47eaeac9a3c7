/**
 * The run report draws its data: opened in headless Chromium, each chart reports the points it
 * drew and has labelled axes; the config is a readable table. And the chart helpers (chart.ts)
 * on awkward inputs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig, writeReport } from '../../src/trainers/index.ts';
import { configDefaults, configRows, CONFIG_GROUPS, formatTicks, formatValue, niceTicks, renderReport, stepTicks } from '../../src/trainers/report.ts';
import type { Trajectory } from '../../src/env/index.ts';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

/** The DOM of a page as headless Chromium renders it (after its script ran). */
function renderedDom(dir: string, file: string): string {
  return execFileSync(
    CHROMIUM!,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${join(dir, 'profile')}`,
      '--virtual-time-budget=3000',
      '--dump-dom',
      `file://${file}`,
    ],
    { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] },
  );
}

/** Each chart of a page: its id, the values and labels of its x and y ticks, its axis labels, and its bands' points. */
function chartsOf(html: string) {
  return [...html.matchAll(/<figure class="chart" id="([\w-]+)"[^]*?<\/figure>/g)].map((m) => {
    const axis = (name: string) => {
      const g = new RegExp(`<g class="${name}"[^>]*>([^]*?)</g>`).exec(m[0])?.[1] ?? '';
      const ticks = [...g.matchAll(/<text class="tick" data-value="([^"]+)"[^>]*>([^<]*)<\/text>/g)].map((t) => ({ value: Number(t[1]), label: t[2]! }));
      const label = /<text class="axis-label"[^>]*>([^<]*)<\/text>/.exec(g)?.[1] ?? '';
      return { ticks, label };
    };
    const bands = Object.fromEntries([...m[0].matchAll(/<path class="band" data-series="([^"]+)" data-n="(\d+)"/g)].map((b) => [b[1], Number(b[2])]));
    const dots = (m[0].match(/<circle class="dot"/g) ?? []).length;
    return { id: m[1]!, x: axis('x-axis'), y: axis('y-axis'), bands, dots, html: m[0] };
  });
}

const trajectory = {
  id: 't',
  task_id: 'calc-7',
  group_id: 'calc-7@0',
  sample: 0,
  split: 'eval',
  difficulty: 1,
  policy: { id: 'onnx:x' },
  messages: [
    { role: 'user', content: 'Use the calculator tool evaluate to compute 2 + 3.' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'evaluate', arguments: '{"expression":"2 + 3"}' } }] },
    { role: 'tool', tool_call_id: 'c', content: '5' },
    { role: 'assistant', content: '5' },
  ],
  turns: [],
  answer: '5',
  success: true,
  reward: 1.36,
  reward_parts: {},
  checks: [],
  metrics: { turns: 2, tool_calls: 1, tool_errors: 0, policy_tokens: 40 },
  timings: { started_at: '', total_ms: 1, policy_ms: 1, tool_ms: 1 },
  finish: 'answer',
} as unknown as Trajectory;

describe.skipIf(!CHROMIUM)('report.html in headless Chromium', () => {
  it('draws every chart with its data, and renders the sample trajectories', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-report-'));
    const file = join(dir, 'report.html');
    const metrics = Array.from({ length: 7 }, (_, i) => ({
      step: i + 1,
      reward_mean: 0.5 + i / 10,
      success_rate: 0.3 + i / 20,
      kl: i / 100,
      entropy: 1 - i / 20,
      policy_tokens_mean: 40 + i,
      turns_mean: 2,
      staleness_mean: i / 10,
      staleness_max: 1,
      stale_groups_dropped: 0,
      is_truncated_fraction: 0.01 * i,
      is_masked_fraction: 0,
      clip_fraction: 0.02,
      sampler_log_ratio_mean: -0.001 * i,
      step_seconds: 3 + i / 10,
      learner_seconds: 2.5,
      learner_idle_fraction: 0.1,
    }));
    const pass = (p: number) => ({ pass_at_k: { 1: p, 2: p + 0.1, 3: p + 0.15, 4: p + 0.2 }, pass_hat_k: { 1: p, 2: p - 0.1, 3: p - 0.15, 4: p - 0.2 } });
    const evals = [
      { step: 0, success: 0.3, ci95: [0.2, 0.4] as [number, number], ...pass(0.3) },
      { step: 5, success: 0.5, ci95: [0.4, 0.6] as [number, number], ...pass(0.5) },
      { step: 7, success: 0.6, ci95: [0.5, 0.7] as [number, number], ...pass(0.6) },
    ];
    // A config set away from the art preset in three fields, one of them float noise; and a secret.
    const config = resolveConfig({ preset: 'art', steps: 7, curriculum_share: 0.6499999999999999, lr: 5e-4, learner_token: 'sekret-token' });
    const before = { step: 0, success: 0.3, ci95: [0.3393765611244294, 0.4742041800000517], episodes: 200, mean_reward: 0.7617000000000023 };
    writeReport(file, {
      title: 'test run',
      metrics,
      evals,
      samples: [{ label: 'eval', trajectory }],
      summary: { before, train_seconds: 15.195904591, steps: 7, config },
    });
    const dom = renderedDom(dir, file);
    expect(dom).toContain('data-ready="1"');
    const drawn = Object.fromEntries([...dom.matchAll(/<figure class="chart" id="([\w-]+)" data-drawn="(\d+)"/g)].map((m) => [m[1], Number(m[2])]));
    expect(drawn).toEqual({
      'chart-reward': 7,
      'chart-success': 10,
      'chart-kl': 7,
      'chart-entropy': 7,
      'chart-length': 14,
      'chart-pass': 12, // pass@1 and pass^2..pass^4: 4 series of 3 evaluations (pass@1's interval is a band)
      'chart-staleness': 21,
      'chart-corrections': 28,
      'chart-time': 21,
    });
    expect(dom).toContain('evaluate</b>(<code>{"expression":"2 + 3"}</code>)');

    // Axes: every chart labels its first and last step (the evaluation at 0, the last step 7) and
    // at least two y values covering its data, and names both axes.
    const charts = chartsOf(dom);
    expect(charts.map((c) => c.id).sort()).toEqual(Object.keys(drawn).sort());
    for (const c of charts) {
      expect(c.x.ticks[0], c.id).toEqual({ value: 0, label: '0' });
      expect(c.x.ticks.at(-1), c.id).toEqual({ value: 7, label: '7' });
      expect(
        c.x.ticks.every((t) => Number.isInteger(t.value)),
        c.id,
      ).toBe(true);
      expect(c.x.label, c.id).toBe('step');
      expect(c.y.ticks.length, c.id).toBeGreaterThanOrEqual(2);
      expect(c.y.label, c.id).not.toBe('');
      for (const t of [...c.x.ticks, ...c.y.ticks]) expect(t.label, c.id).toMatch(/^-?\d+(\.\d{1,4})?$|^-?\d(\.\d+)?e-?\d+$/);
      expect(c.html, c.id).toContain('class="grid"');
    }
    const byId = Object.fromEntries(charts.map((c) => [c.id, c]));
    // The reward axis covers the data (0.5 .. 1.1) with round ticks; the success axis is 0 .. 1.
    expect(byId['chart-reward']!.y.ticks[0]!.value).toBeLessThanOrEqual(0.5);
    expect(byId['chart-reward']!.y.ticks.at(-1)!.value).toBeGreaterThanOrEqual(1.1);
    expect(byId['chart-success']!.y.ticks.map((t) => t.label)).toEqual(['0.0', '0.2', '0.4', '0.6', '0.8', '1.0']);
    expect(byId['chart-reward']!.y.label).toBe('reward (mean per episode)');
    // One dot per point drawn (up to 60 a series), the intervals as bands with one point per evaluation.
    for (const c of charts) expect(c.dots, c.id).toBe(drawn[c.id]);
    expect(byId['chart-success']!.bands).toEqual({ 'eval 95% interval': 3 });
    expect(byId['chart-pass']!.bands).toEqual({ 'pass@1 95% interval': 3 });
    // A legend where a chart has several series (or a band), none on a chart of one series.
    expect(byId['chart-success']!.html).toContain('class="legend"');
    expect(byId['chart-reward']!.html).not.toContain('class="legend"');

    // The config: a grouped table, the fields set away from the preset marked with the preset's value.
    expect(dom).toContain('<table class="config" data-group="rollout">');
    const changed = [...dom.matchAll(/<tr class="changed" data-key="(\w+)">[^]*?<td class="value">([^<]*)<\/td><td class="default">([^<]*)<\/td>/g)].map(
      (m) => [m[1], m[2], m[3]],
    );
    expect(changed).toEqual(
      [
        ['curriculum_share', '0.65', '0.5'],
        ['steps', '7', '30'],
        ['lr', '5e-4', '1e-4'],
        ['learner_token', '(hidden)', '—'],
      ].sort((a, b) => CONFIG_GROUPS.indexOf(groupOf(dom, a[0]!)) - CONFIG_GROUPS.indexOf(groupOf(dom, b[0]!))),
    );
    expect(dom).toMatch(/<tr data-key="beta"><th[^>]*>beta<\/th><td class="value">0.04<\/td><td class="default"><\/td><\/tr>/);
    // No float noise outside the raw JSON, which is there, collapsed, for copying; the secret nowhere.
    const raw = /<details class="raw">[^]*?<\/details>/.exec(dom)?.[0] ?? '';
    expect(raw).toContain('"curriculum_share": 0.6499999999999999');
    const outside = dom.replace(raw, '');
    for (const noise of ['0.6499999999999999', '0.3393765611244294', '0.7617000000000023', '15.195904591']) expect(outside).not.toContain(noise);
    expect(outside).toContain('success 30% (95% interval 33.9% – 47.4%)');
    expect(outside).toContain('15.2 s');
    expect(dom).not.toContain('sekret-token');
  });
  it('draws the curriculum and replay charts of a run that has them, and marks the reference resets on every chart', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-report-'));
    const file = join(dir, 'report.html');
    const metrics = Array.from({ length: 6 }, (_, i) => ({
      step: i + 1,
      reward_mean: 0.5,
      success_rate: 0.4,
      kl: 0.01,
      entropy: 1,
      policy_tokens_mean: 40,
      turns_mean: 2,
      ref_reset: i === 2 || i === 4,
      curriculum_levels: { calculator: 1 + Math.floor(i / 2), kv: 1 },
      difficulty_mix: i < 2 ? { 1: 12 } : { 1: 6, 2: 6 },
      replay_groups: i ? 3 : 0,
      replay_buffer_size: 8 * i,
      replay_age_mean: i ? 1.5 : 0,
    }));
    writeReport(file, { title: 'curriculum run', metrics, evals: [{ step: 0, success: 0.3, ci95: [0.2, 0.4] }], samples: [] });
    const dom = renderedDom(dir, file);
    const drawn = Object.fromEntries([...dom.matchAll(/<figure class="chart" id="([\w-]+)" data-drawn="(\d+)"/g)].map((m) => [m[1], Number(m[2])]));
    expect(drawn['chart-curriculum']).toBe(18); // two suites' levels and the mean difficulty, 6 steps
    expect(drawn['chart-difficulty-mix']).toBe(12); // difficulties 1 and 2 (0 where none)
    expect(drawn['chart-replay']).toBe(18);
    // The resets at steps 3 and 5: a dashed line on each chart of the training steps (with data over them).
    const stepCharts = ['reward', 'success', 'kl', 'entropy', 'length', 'curriculum', 'difficulty-mix', 'replay'].map((c) => `chart-${c}`);
    const charts = [...dom.matchAll(/<figure class="chart" id="([\w-]+)"[^]*?<\/figure>/g)].filter((m) => stepCharts.includes(m[1]!));
    expect(charts).toHaveLength(stepCharts.length);
    for (const m of charts)
      expect(
        [...m[0].matchAll(/<line class="marker" data-step="(\d+)"/g)].map((x) => Number(x[1])),
        m[1],
      ).toEqual([3, 5]);
    expect(dom).toContain('reference reset at step 3');
    // A run without them has neither chart nor marker.
    writeReport(file, {
      title: 'plain run',
      metrics: metrics.map(({ curriculum_levels: _l, replay_groups: _r, ref_reset: _f, ...m }) => m),
      evals: [],
      samples: [],
    });
    const plain = readFileSync(file, 'utf8');
    expect(plain).not.toContain('chart-curriculum');
    expect(plain).not.toContain('chart-replay');
    expect(plain).not.toContain('class="marker"');
    expect(plain).not.toContain('<table class="config"');
    // The steps of a run without evaluations: 1 .. 6 on every axis.
    for (const c of chartsOf(plain)) expect([c.x.ticks[0]?.label, c.x.ticks.at(-1)?.label], c.id).toEqual(['1', '6']);
  });
});

/** The group (data-group) of the config table that holds a field's row. */
function groupOf(dom: string, key: string): (typeof CONFIG_GROUPS)[number] {
  const table = [...dom.matchAll(/<table class="config" data-group="([^"]+)">[^]*?<\/table>/g)].find((m) => m[0].includes(`data-key="${key}"`));
  return table![1] as (typeof CONFIG_GROUPS)[number];
}

describe('chart helpers', () => {
  const evenlySpaced = (t: number[]) => t.slice(1).every((v, i) => Math.abs(v - t[i]! - (t[1]! - t[0]!)) <= Math.abs(t[1]! - t[0]!) * 1e-9);
  const covers = (t: number[], lo: number, hi: number) => t[0]! <= lo && t.at(-1)! >= hi && t.length >= 2 && t.length <= 16 && evenlySpaced(t);

  it('niceTicks: round, evenly spaced values that cover the range, on awkward inputs', () => {
    expect(niceTicks(0, 1, 6)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0, 0.3, 4)).toEqual([0, 0.1, 0.2, 0.3]); // no 0.30000000000000004
    expect(niceTicks(1, 0, 6)).toEqual(niceTicks(0, 1, 6));
    // Equal bounds: a range around the value.
    for (const v of [0, 5, -3, 1e-7, 1e12]) {
      const t = niceTicks(v, v);
      expect(covers(t, v, v), String(v)).toBe(true);
      expect(t[0]!, String(v)).toBeLessThan(t.at(-1)!);
    }
    // Negative, and across 0 (no negative zero).
    const neg = niceTicks(-3.7, -0.2);
    expect(covers(neg, -3.7, -0.2)).toBe(true);
    const across = niceTicks(-1, 1);
    expect(across).toContain(0);
    expect(across.some((v) => Object.is(v, -0))).toBe(false);
    // Tiny, between 1e-7 and 1e-6: clean multiples of the spacing.
    const tiny = niceTicks(1e-7, 1e-6);
    expect(covers(tiny, 1e-7, 1e-6)).toBe(true);
    expect(tiny).toEqual([0, 2e-7, 4e-7, 6e-7, 8e-7, 1e-6]);
    expect(formatTicks(tiny)).toEqual(['0', '2e-7', '4e-7', '6e-7', '8e-7', '1e-6']);
    // Huge, and a range beyond the doubles' (its span overflows).
    const huge = niceTicks(0, 3e21);
    expect(covers(huge, 0, 3e21)).toBe(true);
    expect(formatTicks(huge)).toEqual(['0', '1e21', '2e21', '3e21']);
    expect(formatTicks(niceTicks(0, 3e21, 7))).toEqual(['0', '5e20', '1e21', '1.5e21', '2e21', '2.5e21', '3e21']);
    const widest = niceTicks(-1e308, 1e308);
    expect(widest.every(Number.isFinite) && widest[0]! <= -1e308 && widest.at(-1)! >= 1e308).toBe(true);
    // Not finite: left out.
    expect(niceTicks(Number.NaN, Number.NaN)).toEqual([]);
    expect(covers(niceTicks(Number.NaN, 2), 2, 2)).toBe(true);
    expect(niceTicks(0, 1, 1e9).length).toBeLessThanOrEqual(200);
  });

  it('stepTicks: whole steps with the first and the last', () => {
    expect(stepTicks(0, 7)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(stepTicks(0, 4)).toEqual([0, 1, 2, 3, 4]);
    const long = stepTicks(1, 297);
    expect(long[0]).toBe(1);
    expect(long.at(-1)).toBe(297);
    expect(long.every(Number.isInteger) && long.length <= 9 && long.slice(1).every((v, i) => v > long[i]!)).toBe(true);
    expect(stepTicks(3, 3)).toEqual([3]);
    expect(stepTicks(Number.NaN, 3)).toEqual([]);
  });

  it('formatValue: no float noise, short exponents for the tiny and the huge', () => {
    const cases: [unknown, string][] = [
      [0.6499999999999999, '0.65'],
      [0.1 + 0.2, '0.3'],
      [-0.30000000000000004, '-0.3'],
      [0, '0'],
      [-0, '0'],
      [5e-4, '5e-4'],
      [0.0005, '5e-4'],
      [1e-8, '1e-8'],
      [1.0627040792892259e-7, '1.063e-7'],
      [0.001, '0.001'],
      [0.7617000000000023, '0.7617'],
      [123456789, '123456789'],
      [1234567.891, '1.235e6'],
      [1e21, '1e21'],
      [-3.3e25, '-3.3e25'],
      [Number.NaN, 'NaN'],
      [Infinity, '∞'],
      [-Infinity, '-∞'],
      [true, 'true'],
      [false, 'false'],
      ['', '(empty)'],
      ['grpo', 'grpo'],
      [null, '—'],
      [undefined, '—'],
      [[1, 0.1 + 0.2], '1, 0.3'],
      [[], '(none)'],
      [{ correctness: 1, safety: 0.25 }, 'correctness=1, safety=0.25'],
    ];
    for (const [x, want] of cases) expect(formatValue(x), String(x)).toBe(want);
    expect(formatValue(0.123456789, 6)).toBe('0.123457');
    expect(formatTicks([0, 0.25, 0.5])).toEqual(['0.00', '0.25', '0.50']);
    expect(formatTicks([0, 5, 10])).toEqual(['0', '5', '10']);
    expect(formatTicks([-0.2, 0, 0.2])).toEqual(['-0.2', '0.0', '0.2']);
    expect(formatTicks(niceTicks(3.1e9, 3.3e9))).toEqual(['3.1e9', '3.15e9', '3.2e9', '3.25e9', '3.3e9']); // short enough for the axis
  });

  it('configRows: grouped, formatted, the fields away from the preset marked', () => {
    const config = resolveConfig({ preset: 'prorl', steps: 4, curriculum_share: 0.6499999999999999 });
    const rows = configRows(config, configDefaults(config));
    expect(rows.map((r) => r.group)).toEqual([...rows.map((r) => r.group)].sort((a, b) => CONFIG_GROUPS.indexOf(a) - CONFIG_GROUPS.indexOf(b)));
    expect(rows.filter((r) => r.changed).map((r) => [r.key, r.value, r.default])).toEqual([
      ['steps', '4', '30'],
      ['curriculum_share', '0.65', '0.5'],
    ]);
    const byKey = Object.fromEntries(rows.map((r) => [r.key, r]));
    // The preset's own values (beta 0.01, the adaptive curriculum) are not marked.
    expect(byKey.beta).toMatchObject({ value: '0.01', changed: false, group: 'algorithm / loss' });
    expect(byKey.curriculum).toMatchObject({ value: 'adaptive', changed: false, group: 'curriculum / replay' });
    expect(byKey.lr).toMatchObject({ value: '1e-4', group: 'optimisation' });
    expect(byKey.composer_weights!.value).toBe('correctness=1');
    expect(byKey.eval_every!.group).toBe('evaluation');
    expect(byKey.temperature!.group).toBe('sampling');
    // Without defaults nothing is marked; a field no group knows is "other".
    expect(configRows({ steps: 4, something_new: 1 }).map((r) => [r.key, r.group, r.changed])).toEqual([
      ['steps', 'rollout', false],
      ['something_new', 'other', false],
    ]);
    // A report without a summary has no config section.
    expect(renderReport({ title: 't', metrics: [], evals: [], samples: [] })).not.toContain('class="config"');
  });
});
