/** The bench report's charts as inline SVG: latency histograms, throughput against concurrency, fuzz outcomes, pass@k. */
import { esc } from '../../lib/index.ts';
import type { AgentReport } from './agent.ts';
import type { FuzzReport } from './fuzz.ts';
import type { Outcome } from './fuzz-classify.ts';
import type { Histogram } from './latency.ts';
import { fmt, OUTCOME_LABEL, OUTCOME_ORDER } from './report-format.ts';

const PALETTE = ['#4269d0', '#efb118', '#ff725c', '#6cc5b0', '#3ca951', '#ff8ab7', '#a463f2', '#97bbf5', '#9c6b4e', '#9498a0'];

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** A latency histogram: log-bucket bars with p50 and p99 marked. */
export function histogramSvg(title: string, h: Histogram, marks: { label: string; ms: number }[]): string {
  const W = 520;
  const H = 220;
  const L = 48;
  const R = 12;
  const T = 28;
  const B = 36;
  const pw = W - L - R;
  const ph = H - T - B;
  const parts: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">`];
  parts.push(`<text x="${L}" y="18" class="t">${esc(title)}</text>`);
  if (!h.counts.length) {
    parts.push(`<text x="${L}" y="${T + ph / 2}">no calls</text></svg>`);
    return parts.join('');
  }
  const lo = Math.log10(h.edges[0]!);
  const hi = Math.log10(h.edges[h.edges.length - 1]!);
  const x = (ms: number) => L + ((Math.log10(Math.max(ms, 1e-3)) - lo) / Math.max(1e-9, hi - lo)) * pw;
  const ymax = niceMax(Math.max(...h.counts));
  const y = (c: number) => T + ph - (c / ymax) * ph;
  parts.push(`<line x1="${L}" y1="${T + ph}" x2="${L + pw}" y2="${T + ph}" class="ax"/><line x1="${L}" y1="${T}" x2="${L}" y2="${T + ph}" class="ax"/>`);
  for (let i = 0; i < h.counts.length; i++) {
    const x0 = x(h.edges[i]!);
    const x1 = x(h.edges[i + 1]!);
    const c = h.counts[i]!;
    if (c > 0)
      parts.push(
        `<rect x="${x0.toFixed(1)}" y="${y(c).toFixed(1)}" width="${Math.max(1, x1 - x0 - 1).toFixed(1)}" height="${(T + ph - y(c)).toFixed(1)}" fill="#4269d0"><title>${fmt(h.edges[i]!)}–${fmt(h.edges[i + 1]!)} ms: ${c}</title></rect>`,
      );
  }
  for (let d = Math.ceil(lo); d <= Math.floor(hi); d++) {
    const v = 10 ** d;
    parts.push(
      `<line x1="${x(v).toFixed(1)}" y1="${T + ph}" x2="${x(v).toFixed(1)}" y2="${T + ph + 4}" class="ax"/><text x="${x(v).toFixed(1)}" y="${T + ph + 16}" text-anchor="middle">${v >= 1 ? v : v.toPrecision(1)}</text>`,
    );
  }
  parts.push(`<text x="${L + pw}" y="${H - 4}" text-anchor="end">ms (log scale)</text>`);
  parts.push(`<text x="${L - 4}" y="${T + 4}" text-anchor="end">${ymax}</text><text x="${L - 4}" y="${T + ph}" text-anchor="end">0</text>`);
  marks.forEach((m, i) => {
    const mx = x(m.ms).toFixed(1);
    parts.push(
      `<line x1="${mx}" y1="${T}" x2="${mx}" y2="${T + ph}" stroke="${i ? '#ff725c' : '#3ca951'}" stroke-dasharray="4 3"/><text x="${(Number(mx) + 3).toFixed(1)}" y="${T + 10 + i * 12}" fill="${i ? '#ff725c' : '#3ca951'}">${esc(m.label)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

/** Throughput against concurrency: one line per series, concurrency levels evenly spaced. */
export function throughputSvg(levels: number[], series: { name: string; values: Record<string, number> }[]): string {
  const W = 640;
  const H = 300;
  const L = 64;
  const R = 160;
  const T = 28;
  const B = 40;
  const pw = W - L - R;
  const ph = H - T - B;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="throughput against concurrency">`,
  ];
  parts.push(`<text x="${L}" y="18" class="t">Throughput (calls/s) against concurrency</text>`);
  const ymax = niceMax(Math.max(1, ...series.flatMap((s) => Object.values(s.values))));
  const x = (i: number) => L + (levels.length > 1 ? (i / (levels.length - 1)) * pw : pw / 2);
  const y = (v: number) => T + ph - (v / ymax) * ph;
  parts.push(`<line x1="${L}" y1="${T + ph}" x2="${L + pw}" y2="${T + ph}" class="ax"/><line x1="${L}" y1="${T}" x2="${L}" y2="${T + ph}" class="ax"/>`);
  for (let g = 0; g <= 4; g++) {
    const v = (ymax * g) / 4;
    parts.push(
      `<line x1="${L}" y1="${y(v).toFixed(1)}" x2="${L + pw}" y2="${y(v).toFixed(1)}" class="grid"/><text x="${L - 4}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${fmt(v)}</text>`,
    );
  }
  levels.forEach((c, i) => parts.push(`<text x="${x(i).toFixed(1)}" y="${T + ph + 16}" text-anchor="middle">${c}</text>`));
  parts.push(`<text x="${L + pw / 2}" y="${H - 4}" text-anchor="middle">concurrency</text>`);
  series.forEach((s, si) => {
    const color = PALETTE[si % PALETTE.length]!;
    const pts = levels.map((c, i) => [i, s.values[String(c)]] as const).filter(([, v]) => v !== undefined);
    parts.push(
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map(([i, v]) => `${x(i).toFixed(1)},${y(v!).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const [i, v] of pts)
      parts.push(
        `<circle cx="${x(i).toFixed(1)}" cy="${y(v!).toFixed(1)}" r="3" fill="${color}"><title>${esc(s.name)} at ${levels[i]}: ${fmt(v!)} calls/s</title></circle>`,
      );
    parts.push(
      `<rect x="${L + pw + 12}" y="${T + si * 16}" width="10" height="10" fill="${color}"/><text x="${L + pw + 26}" y="${T + si * 16 + 9}">${esc(s.name)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

const OUTCOME_COLOR: Record<Outcome, string> = { rejected: '#3ca951', accepted: '#97bbf5', protocol_error: '#efb118', crash: '#d62728', hang: '#a463f2' };

/** Fuzz outcomes: one stacked bar per tool. */
export function fuzzSvg(f: FuzzReport): string {
  const rows = Object.values(f.tools);
  const W = 640;
  const L = 160;
  const R = 16;
  const T = 44;
  const bar = 18;
  const H = T + rows.length * (bar + 6) + 12;
  const pw = W - L - R;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="fuzz outcomes by tool">`,
  ];
  parts.push(`<text x="8" y="18" class="t">Fuzz outcomes by tool</text>`);
  OUTCOME_ORDER.forEach((o, i) =>
    parts.push(
      `<rect x="${L + i * 96}" y="26" width="10" height="10" fill="${OUTCOME_COLOR[o]}"/><text x="${L + i * 96 + 14}" y="35">${OUTCOME_LABEL[o]}</text>`,
    ),
  );
  rows.forEach((t, ri) => {
    const yy = T + ri * (bar + 6);
    parts.push(`<text x="${L - 6}" y="${yy + 13}" text-anchor="end">${esc(t.tool)}</text>`);
    let x0 = L;
    for (const o of OUTCOME_ORDER) {
      const w = t.cases ? (t[o] / t.cases) * pw : 0;
      if (w > 0)
        parts.push(
          `<rect x="${x0.toFixed(1)}" y="${yy}" width="${w.toFixed(1)}" height="${bar}" fill="${OUTCOME_COLOR[o]}"><title>${esc(t.tool)}: ${t[o]} ${OUTCOME_LABEL[o]}</title></rect>`,
        );
      x0 += w;
    }
  });
  parts.push('</svg>');
  return parts.join('');
}

/** pass@k and pass^k against k. */
export function passSvg(a: AgentReport): string {
  const levels = Array.from({ length: a.k }, (_, i) => i + 1);
  const svg = throughputSvg(levels, [
    { name: 'pass@k', values: Object.fromEntries(levels.map((k) => [String(k), a.pass_at_k[String(k)] ?? 0])) },
    { name: 'pass^k', values: Object.fromEntries(levels.map((k) => [String(k), a.pass_hat_k[String(k)] ?? 0])) },
  ]);
  return svg
    .replace('Throughput (calls/s) against concurrency', 'pass@k and pass^k against k')
    .replace('>concurrency</text>', '>k</text>')
    .replace('throughput against concurrency', 'pass@k and pass^k');
}
