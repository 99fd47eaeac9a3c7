// Runs an exported model with onnxruntime-node the way the TypeScript sampler does (learner/PROTOCOL.md):
// a left-padded prefill with an empty slot cache (C = 0), then decode steps with a cache of C slots per row
// (keys [B, H, Dh, C], values [B, H, C, Dh]) into which each step's new keys and values are written.
// A graph with shared-prefix inputs (hf_graph.py) reads `c.prefix_ids` (computed first, in a run of its own,
// one copy for all rows) when the case has them, else an empty prefix; the rows' positions follow it.
// usage: node learner/tests/ort_run.mjs <case.json> <out.json>   (onnxruntime-node from the repo's node_modules)
import fs from 'node:fs';
import ort from 'onnxruntime-node';

const [casePath, outPath] = process.argv.slice(2);
const i64 = (data, dims) => new ort.Tensor('int64', BigInt64Array.from(data.map((x) => BigInt(x))), dims);

const c = JSON.parse(fs.readFileSync(casePath, 'utf8'));
const session = await ort.InferenceSession.create(c.model);
const { B, T, L, H, Dh } = c;
const C = T + c.steps.length; // slots
const K = Array.from({ length: L }, () => new Float32Array(B * H * Dh * C));
const V = Array.from({ length: L }, () => new Float32Array(B * H * C * Dh));
const slotMask = new Float32Array(B * C);

const graphPrefix = session.inputNames.includes('prefix_mask');
let prefix = { n: 0, K: [], V: [] };

function feeds(ids, pos, mask, Tn, cap, rows = B, pre = prefix) {
  const f = {
    input_ids: i64(ids, [rows, Tn]),
    position_ids: i64(pos, [rows, Tn]),
    attention_mask: new ort.Tensor('float32', Float32Array.from(mask), [rows, cap + Tn]),
  };
  for (let l = 0; l < L; l++) {
    f[`past_key_${l}`] = new ort.Tensor('float32', cap ? K[l] : new Float32Array(0), [rows, H, Dh, cap]);
    f[`past_value_${l}`] = new ort.Tensor('float32', cap ? V[l] : new Float32Array(0), [rows, H, cap, Dh]);
  }
  if (graphPrefix) {
    // without a prefix: one position that no row reads (the graph needs P >= 1)
    const n = Math.max(pre.n, 1);
    f.prefix_mask = new ort.Tensor('float32', new Float32Array(rows * n).fill(pre.n ? 1 : 0), [rows, n]);
    for (let l = 0; l < L; l++) {
      f[`prefix_key_${l}`] = new ort.Tensor('float32', pre.n ? pre.K[l] : new Float32Array(H * Dh), [1, H, Dh, n]);
      f[`prefix_value_${l}`] = new ort.Tensor('float32', pre.n ? pre.V[l] : new Float32Array(H * Dh), [1, H, n, Dh]);
    }
  }
  return f;
}

if (c.prefix_ids) {
  const n = c.prefix_ids.length;
  const o = await session.run(
    feeds(
      c.prefix_ids,
      c.prefix_ids.map((_, t) => t),
      new Array(n).fill(1),
      n,
      0,
      1,
      { n: 0, K: [], V: [] },
    ),
  );
  const nk = o.new_keys.data,
    nv = o.new_values.data;
  prefix = { n, K: Array.from({ length: L }, () => new Float32Array(H * Dh * n)), V: Array.from({ length: L }, () => new Float32Array(H * n * Dh)) };
  for (let l = 0; l < L; l++)
    for (let h = 0; h < H; h++)
      for (let t = 0; t < n; t++)
        for (let d = 0; d < Dh; d++) {
          const src = ((l * H + h) * n + t) * Dh + d;
          prefix.K[l][(h * Dh + d) * n + t] = nk[src];
          prefix.V[l][(h * n + t) * Dh + d] = nv[src];
        }
}
function store(out, Tn, slot) {
  const nk = out.new_keys.data,
    nv = out.new_values.data;
  for (let l = 0; l < L; l++)
    for (let bh = 0; bh < B * H; bh++)
      for (let t = 0; t < Tn; t++)
        for (let d = 0; d < Dh; d++) {
          const src = ((l * B * H + bh) * Tn + t) * Dh + d;
          K[l][bh * Dh * C + d * C + slot + t] = nk[src];
          V[l][bh * C * Dh + (slot + t) * Dh + d] = nv[src];
        }
}

let out = await session.run(feeds(c.input_ids, c.position_ids, c.attention_mask, T, 0));
store(out, T, 0);
for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) slotMask[b * C + t] = c.attention_mask[b * T + t];
const result = {
  prefix: prefix.n,
  inputs: session.inputNames,
  outputs: session.outputNames,
  prefill: Array.from(out.logits.data),
  steps: [],
  new_dims: [out.new_keys.dims],
  probs_error: 0,
};
// A graph with a `probs` output (the Hugging Face exports): its largest distance from softmax(logits), over every run.
function checkProbs(o) {
  if (!o.probs) return;
  const lg = o.logits.data,
    pr = o.probs.data,
    Vv = lg.length / B;
  for (let b = 0; b < B; b++) {
    let max = -Infinity,
      sum = 0;
    for (let i = 0; i < Vv; i++) max = Math.max(max, lg[b * Vv + i]);
    for (let i = 0; i < Vv; i++) sum += Math.exp(lg[b * Vv + i] - max);
    for (let i = 0; i < Vv; i++) result.probs_error = Math.max(result.probs_error, Math.abs(pr[b * Vv + i] - Math.exp(lg[b * Vv + i] - max) / sum));
  }
}
checkProbs(out);
for (let s = 0; s < c.steps.length; s++) {
  const step = c.steps[s];
  const mask = [];
  for (let b = 0; b < B; b++) mask.push(...slotMask.slice(b * C, (b + 1) * C), 1);
  out = await session.run(feeds(step.input_ids, step.position_ids, mask, 1, C));
  store(out, 1, T + s);
  for (let b = 0; b < B; b++) slotMask[b * C + T + s] = 1;
  result.steps[s] = Array.from(out.logits.data);
  checkProbs(out);
  result.new_dims.push(out.new_keys.dims);
}
fs.writeFileSync(outPath, JSON.stringify(result));
