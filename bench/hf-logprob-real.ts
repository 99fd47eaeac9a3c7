/**
 * The sampler's logprobs against the learner's recomputation, on a real model's own episodes: the
 * trajectories an evaluation sampled (OnnxModel in Node: float32 ONNX graph, shared prefix, slot
 * KV cache, continuous batching) and the checkpoint that sampled them, recomputed by the learner's
 * scoring path (transformers float32, HFAdapter packed rows with the shared prefix, LogprobModule).
 * Temperature 1 and the whole vocabulary (as the job samples), so both are plain log-softmax.
 *
 *   npx tsx bench/hf-logprob-real.ts --model runs/model-X/sft --trajectories runs/model-X/rl/evals/step-00000.jsonl [--episodes 32]
 *
 * Prints max and mean |Δ logprob| over every sampled token, their count, the share over 1e-3, and
 * the same for the log of the sequence probability per episode; last line: one JSON object.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { readTrajectories } from '../src/env/index.ts';
import { sequenceOf } from '../src/trainers/batch.ts';
import { LEARNER_DIR, learnerPython } from '../src/trainers/index.ts';

const { values } = parseArgs({ options: { model: { type: 'string' }, trajectories: { type: 'string' }, episodes: { type: 'string', default: '32' } } });
if (!values.model || !values.trajectories) throw new Error('usage: --model DIR --trajectories FILE [--episodes N]');
const trajectories = readTrajectories(resolve(values.trajectories)).slice(0, Number(values.episodes));
const rows = trajectories.map(sequenceOf).filter((s) => s !== undefined);
const PY = `
import json, sys, time, torch, transformers
from mcp_gym_learner.policy import HFAdapter, LogprobModule
from mcp_gym_learner.runtime import configure_threads
configure_threads(2)
req = json.load(open(sys.argv[1]))
m = transformers.AutoModelForCausalLM.from_pretrained(req["dir"], dtype=torch.float32).eval()
adapter = HFAdapter(m)
module = LogprobModule(m, adapter)
out = []
t0 = time.perf_counter()
for r in req["rows"]:
    ids = r["ids"]
    inputs, starts = adapter.inputs([torch.tensor(ids)], "cpu")
    pos = [i for i, k in enumerate(r["mask"]) if k == 1]
    with torch.no_grad():
        lp, _, _ = module(inputs, torch.tensor([starts[0] + i - 1 for i in pos]), torch.tensor([ids[i] for i in pos]), temperature=1.0, top_k=0, top_p=1.0)
    out.append(lp.tolist())
print(json.dumps({"logprobs": out, "seconds": time.perf_counter() - t0}))
`;
const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-lp-'));
const file = join(dir, 'req.json');
writeFileSync(file, JSON.stringify({ dir: resolve(values.model), rows: rows.map((r) => ({ ids: r.ids, mask: r.mask })) }));
const r = spawnSync(learnerPython({ hf: true }), ['-c', PY, file], {
  cwd: LEARNER_DIR,
  env: { ...process.env, PYTHONPATH: LEARNER_DIR },
  encoding: 'utf8',
  maxBuffer: 256 << 20,
});
if (r.status !== 0) throw new Error(r.stderr.slice(-3000));
const got = JSON.parse(r.stdout) as { logprobs: number[][]; seconds: number };
let max = 0;
let sum = 0;
let n = 0;
let over = 0;
const seqDiffs: number[] = [];
rows.forEach((row, i) => {
  const sampled = row.logprobs.filter((_, j) => row.mask[j] === 1);
  const learner = got.logprobs[i]!;
  if (learner.length !== sampled.length) throw new Error(`episode ${i}: ${learner.length} recomputed, ${sampled.length} sampled`);
  let seq = 0;
  sampled.forEach((lp, j) => {
    const d = Math.abs(lp - learner[j]!);
    max = Math.max(max, d);
    sum += d;
    n++;
    if (d > 1e-3) over++;
    seq += lp - learner[j]!;
  });
  seqDiffs.push(Math.abs(seq));
});
const result = {
  model: resolve(values.model),
  episodes: rows.length,
  tokens: n,
  max_abs: +max.toExponential(3),
  mean_abs: +(sum / n).toExponential(3),
  share_over_1e3: +(over / n).toFixed(5),
  max_abs_sequence: +Math.max(...seqDiffs).toExponential(3),
  learner_seconds: +got.seconds.toFixed(1),
};
console.log(`sampler (onnxruntime-node) vs learner (transformers float32) on ${result.episodes} episodes of ${result.model}:`);
console.log(`  ${n} sampled tokens: max |Δ logprob| ${result.max_abs}, mean ${result.mean_abs}, over 1e-3: ${(100 * result.share_over_1e3).toFixed(3)}%`);
console.log(`  per episode, |Δ log p(sequence)| at most ${result.max_abs_sequence}`);
console.log(JSON.stringify(result));
