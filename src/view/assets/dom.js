// mcp-gym view: building the page's elements (HTML and SVG) and formatting values for them.

const SVG_NS = 'http://www.w3.org/2000/svg';

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'style')
      el.style.cssText = v; // through the CSSOM: the page's CSP refuses style attributes
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== undefined && c !== null) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
export function fmt(v, digits) {
  if (v === undefined || v === null) return '';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 3 : digits);
  }
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}
const pct = (x) => (typeof x === 'number' ? (100 * x).toFixed(1) + '%' : '');
export function interval(iv) {
  if (!iv) return '';
  return pct(iv.success) + (iv.ci95 ? ' [' + (100 * iv.ci95[0]).toFixed(1) + ', ' + (100 * iv.ci95[1]).toFixed(1) + ']' : '');
}
export function when(isoString) {
  if (!isoString) return '';
  const d = new Date(isoString);
  return d.toLocaleString(undefined, { year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

export function pretty(v) {
  if (typeof v === 'string') {
    try {
      return JSON.stringify(JSON.parse(v), null, 2);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v, null, 2);
}
