/** The run report draws its data: opened in headless Chromium, each chart reports the points it drew. */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { writeReport } from '../../src/trainers/index.ts';
import type { Trajectory } from '../../src/env/index.ts';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

const trajectory = {
  id: 't', task_id: 'calc-7', group_id: 'calc-7@0', sample: 0, split: 'eval', difficulty: 1, policy: { id: 'onnx:x' },
  messages: [
    { role: 'user', content: 'Use the calculator tool evaluate to compute 2 + 3.' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'evaluate', arguments: '{"expression":"2 + 3"}' } }] },
    { role: 'tool', tool_call_id: 'c', content: '5' },
    { role: 'assistant', content: '5' },
  ],
  turns: [], answer: '5', success: true, reward: 1.36, reward_parts: {}, checks: [],
  metrics: { turns: 2, tool_calls: 1, tool_errors: 0, policy_tokens: 40 },
  timings: { started_at: '', total_ms: 1, policy_ms: 1, tool_ms: 1 }, finish: 'answer',
} as unknown as Trajectory;

describe.skipIf(!CHROMIUM)('report.html in headless Chromium', () => {
  it('draws every chart with its data, and renders the sample trajectories', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-report-'));
    const file = join(dir, 'report.html');
    const metrics = Array.from({ length: 7 }, (_, i) => ({
      step: i + 1, reward_mean: 0.5 + i / 10, success_rate: 0.3 + i / 20, kl: i / 100, entropy: 1 - i / 20, policy_tokens_mean: 40 + i, turns_mean: 2,
      staleness_mean: i / 10, staleness_max: 1, stale_groups_dropped: 0, is_truncated_fraction: 0.01 * i, is_masked_fraction: 0, clip_fraction: 0.02, sampler_log_ratio_mean: -0.001 * i,
      step_seconds: 3 + i / 10, learner_seconds: 2.5, learner_idle_fraction: 0.1,
    }));
    const pass = (p: number) => ({ pass_at_k: { 1: p, 2: p + 0.1, 3: p + 0.15, 4: p + 0.2 }, pass_hat_k: { 1: p, 2: p - 0.1, 3: p - 0.15, 4: p - 0.2 } });
    writeReport(file, { title: 'test run', metrics, evals: [{ step: 0, success: 0.3, ci95: [0.2, 0.4], ...pass(0.3) }, { step: 5, success: 0.5, ci95: [0.4, 0.6], ...pass(0.5) }, { step: 7, success: 0.6, ci95: [0.5, 0.7], ...pass(0.6) }], samples: [{ label: 'eval', trajectory }] });
    const dom = execFileSync(CHROMIUM!, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', `--user-data-dir=${join(dir, 'profile')}`, '--virtual-time-budget=3000', '--dump-dom', `file://${file}`], { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] });
    expect(dom).toContain('data-ready="1"');
    const drawn = Object.fromEntries([...dom.matchAll(/<figure class="chart" id="([\w-]+)" data-drawn="(\d+)"/g)].map((m) => [m[1], Number(m[2])]));
    expect(drawn).toEqual({
      'chart-reward': 7, 'chart-success': 10, 'chart-kl': 7, 'chart-entropy': 7, 'chart-length': 14,
      'chart-pass': 18, // pass@1 and its two bounds, pass^2..pass^4: 6 series of 3 evaluations
      'chart-staleness': 21, 'chart-corrections': 28, 'chart-time': 21,
    });
    expect(dom).toContain('evaluate</b>(<code>{"expression":"2 + 3"}</code>)');
  });
  it('draws the curriculum and replay charts of a run that has them, and marks the reference resets on every chart', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-report-'));
    const file = join(dir, 'report.html');
    const metrics = Array.from({ length: 6 }, (_, i) => ({
      step: i + 1, reward_mean: 0.5, success_rate: 0.4, kl: 0.01, entropy: 1, policy_tokens_mean: 40, turns_mean: 2, ref_reset: i === 2 || i === 4,
      curriculum_levels: { calculator: 1 + Math.floor(i / 2), kv: 1 }, difficulty_mix: i < 2 ? { 1: 12 } : { 1: 6, 2: 6 },
      replay_groups: i ? 3 : 0, replay_buffer_size: 8 * i, replay_age_mean: i ? 1.5 : 0,
    }));
    writeReport(file, { title: 'curriculum run', metrics, evals: [{ step: 0, success: 0.3, ci95: [0.2, 0.4] }], samples: [] });
    const dom = execFileSync(CHROMIUM!, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', `--user-data-dir=${join(dir, 'profile')}`, '--virtual-time-budget=3000', '--dump-dom', `file://${file}`], { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] });
    const drawn = Object.fromEntries([...dom.matchAll(/<figure class="chart" id="([\w-]+)" data-drawn="(\d+)"/g)].map((m) => [m[1], Number(m[2])]));
    expect(drawn['chart-curriculum']).toBe(18); // two suites' levels and the mean difficulty, 6 steps
    expect(drawn['chart-difficulty-mix']).toBe(12); // difficulties 1 and 2 (0 where none)
    expect(drawn['chart-replay']).toBe(18);
    // The resets at steps 3 and 5: a dashed line on each chart of the training steps (with data over them).
    const stepCharts = ['reward', 'success', 'kl', 'entropy', 'length', 'curriculum', 'difficulty-mix', 'replay'].map((c) => `chart-${c}`);
    const charts = [...dom.matchAll(/<figure class="chart" id="([\w-]+)"[^]*?<\/figure>/g)].filter((m) => stepCharts.includes(m[1]!));
    expect(charts).toHaveLength(stepCharts.length);
    for (const m of charts) expect([...m[0].matchAll(/<line class="marker" data-step="(\d+)"/g)].map((x) => Number(x[1])), m[1]).toEqual([3, 5]);
    expect(dom).toContain('reference reset at step 3');
    // A run without them has neither chart nor marker.
    writeReport(file, { title: 'plain run', metrics: metrics.map(({ curriculum_levels: _l, replay_groups: _r, ref_reset: _f, ...m }) => m), evals: [], samples: [] });
    const plain = readFileSync(file, 'utf8');
    expect(plain).not.toContain('chart-curriculum');
    expect(plain).not.toContain('chart-replay');
    expect(plain).not.toContain('class="marker"');
  });
});
