/**
 * Decode throughput of the embedded policy: OnnxPolicy's sampler (onnxruntime-node, slot KV
 * cache, per-row prefill after a shared prefix computed once, rows in cache-sized chunks) against
 * PyTorch eager (bench/torch_decode.py: the usual left-padded batch, KV cache by concatenation)
 * on the same weights and the same prompts, at batch 1 and 16, in one run; and the compute-bound
 * ceiling of this machine for the model (its FLOPs per token against a measured matrix-multiply
 * rate). Timed: prefill and 64 sampled tokens per prompt; tokens/s counts the sampled tokens.
 *
 *   npx tsx bench/policy-decode.ts [--model models/calc-tiny] [--new-tokens 64] [--threads 1]
 *
 * Last line: {"onnx_tok_s_b16", "torch_tok_s_b16", "ratio_b16", "ceiling_fraction_b16", ...}
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxModel, ChatTemplate } from '../src/agents/index.ts';
import { openingMessages } from '../src/env/index.ts';
import { generateSuite } from '../src/env/suites/index.ts';
import { seededRandom } from '../lib/index.ts';
import { LearnerClient, learnerPython } from '../src/trainers/index.ts';

const { values } = parseArgs({
  options: { model: { type: 'string' }, 'new-tokens': { type: 'string', default: '64' }, threads: { type: 'string', default: '1' } },
});
const NEW = Number(values['new-tokens']);
const threads = Number(values.threads);

let dir = values.model ?? 'models/calc-tiny';
if (!existsSync(join(dir, 'config.json'))) {
  dir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-decode-')), 'random');
  console.log(`no model at ${values.model ?? 'models/calc-tiny'}: using a freshly initialised one in ${dir}`);
  const l = LearnerClient.start();
  await l.request('create', { model_dir: dir, name: 'random', architecture: { max_seq_len: 512 }, seed: 0 });
  await l.request('load', { model_dir: dir, device: 'cpu' });
  await l.request('export', { model_dir: dir, full: true });
  await l.close();
}

const model = await OnnxModel.load(dir, { threads });
const tpl = new ChatTemplate({ maxToolResultBytes: model.config.chat_template.max_tool_result_bytes, systemTools: true });
const tasks = generateSuite('calculator')
  .filter((t) => t.split === 'eval')
  .slice(0, 16);
const prompts = tasks.map((t) => tpl.prompt(openingMessages(t), ['evaluate', 'add', 'subtract', 'multiply', 'divide']));
const a = model.config.architecture;
const avgPrompt = prompts.reduce((s, p) => s + p.length, 0) / prompts.length;

const REPS = 5; // each rate is the median of REPS timed runs (this machine's timings are noisy)
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

// The baseline: a persistent PyTorch process, asked for one timed run at a time, so that its
// runs alternate with ours and both sides are timed in the same minutes.
const py = spawn(learnerPython(), [join(import.meta.dirname, 'torch_decode.py')], { stdio: ['pipe', 'pipe', 'inherit'] });
const lines = createInterface({ input: py.stdout! })[Symbol.asyncIterator]();
async function ask<R>(req: Record<string, unknown>): Promise<R> {
  py.stdin!.write(JSON.stringify(req) + '\n');
  const next = await lines.next();
  if (next.done) throw new Error('torch_decode.py exited');
  const r = JSON.parse(next.value) as R & { error?: string };
  if (r.error) throw new Error(`torch_decode.py: ${r.error}`);
  return r;
}
const { torch: torchVersion } = await ask<{ torch: string }>({ model_dir: dir, prompts, threads });

async function onnxRun(B: number, m: OnnxModel, seed: number): Promise<number> {
  const ps = prompts.slice(0, B);
  const t0 = performance.now();
  const g = await m.generate(ps, { temperature: 1, topK: 0, topP: 1, maxNewTokens: NEW, rng: seededRandom(seed), stop: -1 });
  return g.reduce((s, x) => s + x.tokens.length, 0) / ((performance.now() - t0) / 1000);
}

// What the shared prompt prefix (system prompt and tool list, computed once per batch) adds.
const plain = await OnnxModel.load(dir, { threads, sharePrefix: false });
const rates: Record<string, number[]> = {};
const push = (k: string, v: number) => (rates[k] ??= []).push(v);
for (const B of [1, 16]) {
  await model.generate(prompts.slice(0, B), { temperature: 1, topK: 0, topP: 1, maxNewTokens: 4, rng: seededRandom(0), stop: -1 });
  await plain.generate(prompts.slice(0, B), { temperature: 1, topK: 0, topP: 1, maxNewTokens: 4, rng: seededRandom(0), stop: -1 });
  for (let k = 0; k < REPS; k++) {
    push(`onnx${B}`, await onnxRun(B, model, 1 + k));
    push(`torch${B}`, (await ask<{ tok_s: number }>({ batch: B, new_tokens: NEW })).tok_s);
    if (B === 16) push('plain16', await onnxRun(B, plain, 1 + k));
  }
}
const { matmul_gflops } = await ask<{ matmul_gflops: number }>({ matmul: true });
py.stdin!.end();
await model.close();
await plain.close();
const onnx1 = median(rates.onnx1!);
const onnx16 = median(rates.onnx16!);
const onnx16Plain = median(rates.plain16!);
const torch = { tok_s: { '1': median(rates.torch1!), '16': median(rates.torch16!) } as Record<string, number>, matmul_gflops, torch: torchVersion };
const ratios16 = rates.onnx16!.map((x, i) => x / rates.torch16![i]!);

// FLOPs per generated token: 2 per weight (blocks and the tied head; embeddings are lookups)
// plus attention (QK and PV: 4·D per layer per position attended), at the mean context.
const D = a.d_model;
const blockParams = a.n_layers * (4 * D * D + 2 * D * a.d_ff);
const ctx = avgPrompt + NEW / 2;
const flopsPerToken = 2 * (blockParams + a.vocab_size * D) + 4 * a.n_layers * D * ctx;
const ceiling = (torch.matmul_gflops * 1e9) / flopsPerToken;

const r = (x: number) => Math.round(x * 10) / 10;
console.log(
  `model ${dir}: d=${D}, layers ${a.n_layers}, heads ${a.n_heads}; prompts of ${avgPrompt.toFixed(0)} tokens on average, ${NEW} new tokens each, ${threads} thread(s)`,
);
console.log(`batch  1: onnx ${r(onnx1)} tok/s   torch eager ${r(torch.tok_s['1']!)} tok/s   ratio ${(onnx1 / torch.tok_s['1']!).toFixed(2)}`);
console.log(`batch 16: onnx ${r(onnx16)} tok/s   torch eager ${r(torch.tok_s['16']!)} tok/s   ratio ${(onnx16 / torch.tok_s['16']!).toFixed(2)}`);
console.log(`batch 16, each round's ratio (onnx run / the torch run right after it): ${ratios16.map((x) => x.toFixed(2)).join(' ')}`);
console.log(`batch 16 without the shared-prefix prefill: onnx ${r(onnx16Plain)} tok/s   ratio ${(onnx16Plain / torch.tok_s['16']!).toFixed(2)}`);
console.log(
  `ceiling: ${(flopsPerToken / 1e6).toFixed(2)} MFLOP/token at ${torch.matmul_gflops.toFixed(1)} GFLOP/s (512² matmul, torch ${torch.torch}) = ${r(ceiling)} tok/s; onnx at batch 16 reaches ${((100 * onnx16) / ceiling).toFixed(1)}% of it`,
);
console.log(
  JSON.stringify({
    onnx_tok_s_b1: r(onnx1),
    torch_tok_s_b1: r(torch.tok_s['1']!),
    ratio_b1: +(onnx1 / torch.tok_s['1']!).toFixed(3),
    onnx_tok_s_b16: r(onnx16),
    torch_tok_s_b16: r(torch.tok_s['16']!),
    ratio_b16: +(onnx16 / torch.tok_s['16']!).toFixed(3),
    onnx_tok_s_b16_no_shared_prefix: r(onnx16Plain),
    ratio_b16_rounds: ratios16.map((x) => +x.toFixed(3)),
    ceiling_tok_s: r(ceiling),
    ceiling_fraction_b16: +(onnx16 / ceiling).toFixed(4),
    flops_per_token: Math.round(flopsPerToken),
    matmul_gflops: +torch.matmul_gflops.toFixed(1),
  }),
);
