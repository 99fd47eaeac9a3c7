// mcp-gym view: the charts, drawn as SVG: line charts (curves, throughput) and latency histograms.
import { fmt, s } from './dom.js{{QUERY}}';

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const span = hi - lo;
  const step0 = Math.pow(10, Math.floor(Math.log10(span / n)));
  const err = (n * step0) / span;
  const step = step0 * (err <= 0.15 ? 10 : err <= 0.35 ? 5 : err <= 0.75 ? 2 : 1);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
  return out;
}

function ema(ys, alpha) {
  if (!alpha) return ys.slice();
  // debiased exponential moving average (as TensorBoard draws it)
  let last = 0;
  let weight = 0;
  return ys.map((y) => {
    last = last * alpha + (1 - alpha) * y;
    weight = weight * alpha + (1 - alpha);
    return last / weight;
  });
}

/**
 * A line chart: each series a polyline (data-xs, data-ys: its values; data-drawn: the smoothed
 * values drawn), intervals as a band; the plot area and the axis ranges as data- attributes of
 * the svg, so that a point can be mapped back to its value.
 */
export function lineChart(series, o) {
  const W = o.width || 460;
  const H = o.height || 220;
  const m = { l: 52, r: 12, t: 10, b: 30 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const all = series.flatMap((sr) => sr.points);
  const svg = s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, class: 'line-chart' });
  if (!all.length) {
    svg.append(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no data'));
    return svg;
  }
  let x0 = Math.min(...all.map((p) => p.x));
  let x1 = Math.max(...all.map((p) => p.x));
  let y0 = Math.min(...all.map((p) => (p.lo !== undefined ? Math.min(p.lo, p.y) : p.y)));
  let y1 = Math.max(...all.map((p) => (p.hi !== undefined ? Math.max(p.hi, p.y) : p.y)));
  if (x1 === x0) {
    x0 -= 1;
    x1 += 1;
  }
  if (y1 === y0) {
    const d = Math.abs(y0) * 0.1 || 1;
    y0 -= d;
    y1 += d;
  } else {
    const pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  const X = (x) => m.l + ((x - x0) / (x1 - x0)) * pw;
  const Y = (y) => m.t + ph - ((y - y0) / (y1 - y0)) * ph;
  Object.entries({
    'data-x0': x0,
    'data-x1': x1,
    'data-y0': y0,
    'data-y1': y1,
    'data-left': m.l,
    'data-top': m.t,
    'data-width': pw,
    'data-height': ph,
  }).forEach(([k, v]) => svg.setAttribute(k, String(v)));
  for (const t of niceTicks(y0, y1, 5)) {
    svg.append(s('line', { class: 'grid', x1: m.l, x2: m.l + pw, y1: Y(t), y2: Y(t) }));
    svg.append(s('text', { x: m.l - 4, y: Y(t) + 3, 'text-anchor': 'end' }, fmt(t, 3)));
  }
  // Steps are whole numbers: their ticks too (every step when there are few).
  const xTicks = o.xLabel === 'step' ? [...new Set(niceTicks(x0, x1, 6).map((t) => Math.round(t)))].filter((t) => t >= x0 && t <= x1) : niceTicks(x0, x1, 6);
  for (const t of xTicks) {
    svg.append(s('line', { class: 'axis', x1: X(t), x2: X(t), y1: m.t + ph, y2: m.t + ph + 4 }));
    svg.append(s('text', { x: X(t), y: m.t + ph + 15, 'text-anchor': 'middle' }, fmt(t, 2)));
  }
  svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }));
  svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph }));
  svg.append(s('text', { x: m.l + pw / 2, y: H - 3, 'text-anchor': 'middle' }, o.xLabel || ''));
  for (const sr of series) {
    const pts = sr.points;
    if (!pts.length) continue;
    const ys = pts.map((p) => p.y);
    const drawn = ema(ys, o.smoothing || 0);
    const banded = pts.filter((p) => p.lo !== undefined);
    if (banded.length) {
      const upper = banded.map((p) => X(p.x) + ',' + Y(p.hi));
      const lower = banded.map((p) => X(p.x) + ',' + Y(p.lo)).reverse();
      svg.append(s('polygon', { class: 'band', fill: sr.color, points: upper.concat(lower).join(' ') }));
      for (const p of banded) svg.append(s('line', { stroke: sr.color, 'stroke-width': 1, x1: X(p.x), x2: X(p.x), y1: Y(p.lo), y2: Y(p.hi) }));
    }
    if (o.smoothing) svg.append(s('polyline', { class: 'raw', stroke: sr.color, points: pts.map((p) => X(p.x) + ',' + Y(p.y)).join(' ') }));
    svg.append(
      s('polyline', {
        class: 'series',
        stroke: sr.color,
        'data-run': sr.id,
        'data-label': sr.label,
        'data-metric': o.metric,
        'data-n': pts.length,
        'data-xs': JSON.stringify(pts.map((p) => p.x)),
        'data-ys': JSON.stringify(ys),
        'data-drawn': JSON.stringify(drawn),
        points: pts.map((p, i) => X(p.x).toFixed(2) + ',' + Y(drawn[i]).toFixed(2)).join(' '),
      }),
    );
    for (let i = 0; i < pts.length; i++) {
      const c = s('circle', { cx: X(pts[i].x), cy: Y(drawn[i]), r: pts.length > 60 ? 1.2 : 2.5, fill: sr.color });
      c.append(
        s(
          'title',
          {},
          sr.label +
            ': ' +
            (o.xLabel || 'x') +
            ' ' +
            fmt(pts[i].x, 2) +
            ', ' +
            fmt(pts[i].y, 4) +
            (pts[i].lo !== undefined ? ' [' + fmt(pts[i].lo, 3) + ', ' + fmt(pts[i].hi, 3) + ']' : ''),
        ),
      );
      svg.append(c);
    }
  }
  return svg;
}

export function barChart(edges, counts, o) {
  const W = o.width || 320;
  const H = o.height || 160;
  const m = { l: 36, r: 8, t: 8, b: 28 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const svg = s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, class: 'histogram', 'data-counts': JSON.stringify(counts) });
  const top = Math.max(1, ...counts);
  const bw = pw / Math.max(1, counts.length);
  counts.forEach((c, i) => {
    const bh = (c / top) * ph;
    const rect = s('rect', { x: m.l + i * bw + 1, y: m.t + ph - bh, width: Math.max(1, bw - 2), height: bh, fill: o.color || '#2563eb' });
    rect.append(s('title', {}, fmt(edges[i], 3) + '–' + fmt(edges[i + 1], 3) + ' ms: ' + c));
    svg.append(rect);
  });
  svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }));
  svg.append(s('text', { x: m.l - 4, y: m.t + 8, 'text-anchor': 'end' }, top));
  if (edges.length) {
    svg.append(s('text', { x: m.l, y: m.t + ph + 12, 'text-anchor': 'start' }, fmt(edges[0], 2)));
    svg.append(s('text', { x: m.l + pw, y: m.t + ph + 12, 'text-anchor': 'end' }, fmt(edges.at(-1), 2)));
  }
  svg.append(s('text', { x: m.l + pw / 2, y: H - 3, 'text-anchor': 'middle' }, 'latency (ms, log bins)'));
  return svg;
}
