// Runs an exported model with onnxruntime-node the way the TypeScript sampler does (learner/PROTOCOL.md):
// a left-padded prefill with an empty slot cache (C = 0), then decode steps with a cache of C slots per row
// (keys [B, H, Dh, C], values [B, H, C, Dh]) into which each step's new keys and values are written.
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

function feeds(ids, pos, mask, Tn, cap) {
  const f = { input_ids: i64(ids, [B, Tn]), position_ids: i64(pos, [B, Tn]), attention_mask: new ort.Tensor('float32', Float32Array.from(mask), [B, cap + Tn]) };
  for (let l = 0; l < L; l++) {
    f[`past_key_${l}`] = new ort.Tensor('float32', cap ? K[l] : new Float32Array(0), [B, H, Dh, cap]);
    f[`past_value_${l}`] = new ort.Tensor('float32', cap ? V[l] : new Float32Array(0), [B, H, cap, Dh]);
  }
  return f;
}
function store(out, Tn, slot) {
  const nk = out.new_keys.data, nv = out.new_values.data;
  for (let l = 0; l < L; l++) for (let bh = 0; bh < B * H; bh++) for (let t = 0; t < Tn; t++) for (let d = 0; d < Dh; d++) {
    const src = ((l * B * H + bh) * Tn + t) * Dh + d;
    K[l][bh * Dh * C + d * C + slot + t] = nk[src];
    V[l][bh * C * Dh + (slot + t) * Dh + d] = nv[src];
  }
}

let out = await session.run(feeds(c.input_ids, c.position_ids, c.attention_mask, T, 0));
store(out, T, 0);
for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) slotMask[b * C + t] = c.attention_mask[b * T + t];
const result = { inputs: session.inputNames, outputs: session.outputNames, prefill: Array.from(out.logits.data), steps: [], new_dims: [out.new_keys.dims], probs_error: 0 };
// A graph with a `probs` output (the Hugging Face exports): its largest distance from softmax(logits), over every run.
function checkProbs(o) {
  if (!o.probs) return;
  const lg = o.logits.data, pr = o.probs.data, Vv = lg.length / B;
  for (let b = 0; b < B; b++) {
    let max = -Infinity, sum = 0;
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
