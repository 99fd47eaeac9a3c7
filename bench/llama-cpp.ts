/**
 * The ONNX sampler against llama.cpp on the CPU (issue 49, point 6): decode tokens/s of the rollout
 * side's sampler (OnnxModel.generate in onnxruntime-node, float32 weights) and of llama.cpp
 * (llama-batched-bench) on the very same float32 weights (an F32 GGUF made from the checkpoint by
 * llama.cpp's own convert_hf_to_gguf.py), at batch 1 and 16, in one run.
 *
 *   bash scripts/build-llama-cpp.sh                      (once: llama.cpp from the llama-cpp-python sdist; the bench runs it too)
 *   npx tsx bench/llama-cpp.ts [--model smollm2-135m] [--threads 2] [--new-tokens 64] [--reps 5]
 *       [--kv-type f32] [--extra-gguf PATH]... [--no-f16] [--no-kv-unified] [--no-spin] [--llama-arg ARG]...
 *
 * The prompt: the conversation of bench/hf-sampling.ts (bench/lib/onnx-decode.ts: a system
 * prompt, one tool, a user question: 230 tokens for SmolLM2, rendered with its tool format), shared by
 * the B rows of a batch. Every row samples exactly --new-tokens (N) tokens.
 *
 * What each figure counts, tok/s = B · (N - 1) / seconds:
 * - "onnx" (ours, end to end): the seconds from the first sampled token to the last, N - 1 decode
 *   steps of one token per row, each step = the graph run (onnxruntime session.run, which also
 *   returns the softmax over the whole vocabulary) + JS sampling at temperature 1 from that softmax
 *   (all 49152 entries of each row) + writing the new keys and values into the rows' slots.
 * - "onnx graph": the same N - 1 steps, counting only the seconds inside session.run (the graph
 *   alone: no sampling, no KV writes in JS; OnnxModel.timing). This is the figure comparable to
 *   llama.cpp's.
 * - "llama.cpp": llama-batched-bench's S_TG: -npp P (the prompt's length), -ntg N - 1, -npl B,
 *   -pps -kvu (the prompt prefilled once, and its cells shared by the B sequences in one unified KV
 *   buffer, as the ONNX sampler shares its prefix; --no-kv-unified: a copy per sequence),
 *   llama_decode of one token per sequence per step with the logits of every row computed; random
 *   token ids, NO sampling. Threads -t/-tb = --threads; KV cache --kv-type (f32
 *   by default, as the ONNX sampler keeps it); flash attention at llama.cpp's default (auto).
 *   Each call is a fresh process (its own warm-up; the load is not timed). llama.cpp's CPU threads
 *   spin at barriers (OpenMP): on a machine whose cores other work also uses, --threads 2 on 2 cores
 *   collapses (measured 3.9 tok/s at batch 16); OMP_WAIT_POLICY=passive in the environment avoids it.
 *   --no-spin does the same for onnxruntime's threads (OnnxModelOptions.spinning false).
 * Prefill (the prompt's forward pass) is excluded on both sides. Each figure is the median of
 * --reps rounds; within a round the two sides alternate at each batch size (the order flips every
 * round), so both are timed in the same minutes of a machine that other work may share.
 * Extra lines, llama.cpp alone at llama.cpp's defaults (F16 KV): the same weights converted to
 * F16 (unless --no-f16), and each --extra-gguf (e.g. the package's original Q4_1 GGUF; a
 * SmolLM2 Q4_1 file in the cache's gguf/ folder is picked up by itself). These are other
 * precisions: no ONNX counterpart, no ratio.
 *
 * Then, for the ONNX side: a decode step's parts at a context of the prompt (graph alone, JS
 * sampling alone; bench/lib/onnx-decode.ts), to say what limits it.
 *
 * llama.cpp: built by scripts/build-llama-cpp.sh into $MCP_GYM_LLAMA_CPP_DIR (default
 * ~/.cache/mcp-gym/llama-cpp); the GGUFs are made once into its gguf/ folder.
 *
 * Last line: one JSON object with every figure.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxModel } from '../src/agents/index.ts';
import { ensureHfOnnx, learnerPython, resolveModel } from '../src/trainers/index.ts';
import { benchPrompt, median, onnxDecodeRun, onnxStepParts, onnxWarmUp, type OnnxDecodeRun } from './lib/onnx-decode.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'smollm2-135m' },
    threads: { type: 'string', default: '2' },
    'new-tokens': { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    'kv-type': { type: 'string', default: 'f32' },
    'extra-gguf': { type: 'string', multiple: true, default: [] },
    'no-f16': { type: 'boolean', default: false },
    'no-kv-unified': { type: 'boolean', default: false },
    'no-spin': { type: 'boolean', default: false },
    'llama-arg': { type: 'string', multiple: true, default: [] },
  },
});
const THREADS = Number(values.threads);
const NEW = Number(values['new-tokens']);
const REPS = Number(values.reps);
const BATCHES = [1, 16] as const;
const ROOT = resolve(import.meta.dirname, '..');
const CACHE = process.env.MCP_GYM_LLAMA_CPP_DIR || join(homedir(), '.cache', 'mcp-gym', 'llama-cpp');

const dir = resolve(await resolveModel(values.model!, (l) => console.log(l)));
ensureHfOnnx(dir, (l) => console.log(l));

// ---------------------------------------------------------------------------------------------
// llama.cpp and the GGUFs, made once.

function sh(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync(cmd, args, { cwd: ROOT, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}):\n${(r.stderr ?? '').slice(-3000)}`);
  return r.stdout;
}
/** Both streams of a run (llama.cpp's tools log to either). */
function shAll(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
  const all = `${r.stdout ?? ''}\n${r.stderr ?? ''}`;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}):\n${all.slice(-3000)}`);
  return all;
}
console.log(`llama.cpp: scripts/build-llama-cpp.sh (builds once into ${CACHE}) ...`);
const bin = sh('bash', [join(ROOT, 'scripts', 'build-llama-cpp.sh')], { ...process.env, MCP_GYM_LLAMA_CPP_DIR: CACHE })
  .trim()
  .split('\n')
  .pop()!;
const src = resolve(bin, '..', '..', basename(resolve(bin, '..')).replace(/^build-/, 'src-'));
const sdistVersion = basename(src).replace(/^src-/, '');
const changelog = existsSync(join(CACHE, 'sdist')) ? sdistChangelogCommit(sdistVersion) : undefined;

/** The llama.cpp commit the sdist's changelog names for its version ("update llama.cpp to ...@abc"). */
function sdistChangelogCommit(version: string): string | undefined {
  const tar = join(CACHE, 'sdist', `llama_cpp_python-${version}.tar.gz`);
  if (!existsSync(tar)) return undefined;
  const r = spawnSync('tar', ['xzf', tar, '-O', `llama_cpp_python-${version}/CHANGELOG.md`], { encoding: 'utf8', maxBuffer: 16 << 20 });
  const section = r.stdout?.split(`## [${version}]`)[1]?.split('\n## [')[0] ?? '';
  return /llama\.cpp@([0-9a-f]{7,40})/.exec(section)?.[1];
}

/** The checkpoint converted by llama.cpp's convert_hf_to_gguf.py to `outtype`, once. */
function ensureGguf(outtype: 'f32' | 'f16'): string {
  const out = join(CACHE, 'gguf', `${basename(dir)}-${outtype}.gguf`);
  if (existsSync(out)) return out;
  mkdirSync(join(CACHE, 'gguf'), { recursive: true });
  console.log(`converting ${dir} to ${out} (convert_hf_to_gguf.py --outtype ${outtype}) ...`);
  // The converter imports sentencepiece before it looks for tokenizer.model; a checkpoint without
  // one (SmolLM2: tokenizer.json only) needs no sentencepiece, so a stub stands in for it.
  const stubs = join(CACHE, 'py-stubs');
  const env = { ...process.env };
  if (!existsSync(join(dir, 'tokenizer.model'))) {
    mkdirSync(stubs, { recursive: true });
    writeFileSync(
      join(stubs, 'sentencepiece.py'),
      'class SentencePieceProcessor:  # stub: the checkpoint has no tokenizer.model\n    def __init__(self, *a, **k):\n        raise FileNotFoundError("sentencepiece stub")\n',
    );
    env.PYTHONPATH = stubs;
  }
  sh(learnerPython({ hf: true }), [join(src, 'convert_hf_to_gguf.py'), dir, '--outtype', outtype, '--outfile', `${out}.tmp`], env);
  renameSync(`${out}.tmp`, out);
  return out;
}
const f32Gguf = ensureGguf('f32');
const extras: { name: string; path: string }[] = [];
if (!values['no-f16']) extras.push({ name: 'F16', path: ensureGguf('f16') });
const extraPaths = [...values['extra-gguf']!];
if (extraPaths.length === 0 && existsSync(join(CACHE, 'gguf')))
  for (const f of readdirSync(join(CACHE, 'gguf')))
    if (/smollm2.*q4_1\.gguf$/i.test(f) && /smollm2/i.test(basename(dir))) extraPaths.push(join(CACHE, 'gguf', f));
for (const p of extraPaths)
  extras.push({ name: /(?:^|[.-])((?:I?Q\d\w*)|BF16|F16)\.gguf$/i.exec(basename(p))?.[1]?.toUpperCase() ?? basename(p).replace(/\.gguf$/, ''), path: p });

// ---------------------------------------------------------------------------------------------
// The two sides.

const { prompt, format: toolFormat } = benchPrompt(dir);
const P = prompt.length;

interface LlamaRun {
  tok_s: number;
  prefill_ms: number;
  n_kv: number;
}
function llamaRun(gguf: string, B: number, kvType?: string): LlamaRun {
  const ctx = Math.ceil((B * (P + NEW + 8)) / 256) * 256;
  const args = ['-m', gguf, '-c', String(ctx), '-b', '2048', '-ub', '512', '-npp', String(P), '-ntg', String(NEW - 1), '-npl', String(B), '-pps'];
  args.push('-t', String(THREADS), '-tb', String(THREADS), '--output-format', 'jsonl', ...values['llama-arg']!);
  if (kvType) args.push('-ctk', kvType, '-ctv', kvType);
  if (!values['no-kv-unified']) args.push('-kvu');
  const out = shAll(join(bin, 'llama-batched-bench'), args);
  const line = out.split('\n').find((l) => l.startsWith('{') && l.includes('"speed_tg"'));
  if (!line) throw new Error(`llama-batched-bench ${args.join(' ')} printed no result (the context too small?):\n${out.slice(-2000)}`);
  const r = JSON.parse(line) as { speed_tg: number; t_pp: number; n_kv: number; pl: number; tg: number };
  if (r.pl !== B || r.tg !== NEW - 1) throw new Error(`llama-batched-bench ran pl ${r.pl}, tg ${r.tg}`);
  return { tok_s: r.speed_tg, prefill_ms: r.t_pp * 1000, n_kv: r.n_kv };
}

const model = await OnnxModel.load(dir, { threads: THREADS, ...(values['no-spin'] ? { spinning: false } : {}) });
await onnxWarmUp(model, prompt, BATCHES);
const onnx: Record<number, OnnxDecodeRun[]> = { 1: [], 16: [] };
const llama: Record<number, LlamaRun[]> = { 1: [], 16: [] };
const extraRuns: Record<string, LlamaRun[]> = {};
const t0 = performance.now();
for (let k = 0; k < REPS; k++) {
  for (const B of BATCHES) {
    const sides = k % 2 === 0 ? (['onnx', 'llama'] as const) : (['llama', 'onnx'] as const);
    for (const s of sides) {
      if (s === 'onnx') {
        const r = await onnxDecodeRun(model, prompt, B, NEW, 1 + k);
        onnx[B]!.push(r);
        console.log(
          `round ${k + 1}/${REPS} batch ${B} onnx: ${r.tok_s.toFixed(1)} tok/s (graph alone ${r.graph_tok_s.toFixed(1)}, ${(100 * r.graph_share).toFixed(0)}% of the decode)`,
        );
      } else {
        const r = llamaRun(f32Gguf, B, values['kv-type']);
        llama[B]!.push(r);
        console.log(`round ${k + 1}/${REPS} batch ${B} llama.cpp F32: ${r.tok_s.toFixed(1)} tok/s`);
      }
    }
    for (const e of extras) {
      const r = llamaRun(e.path, B);
      (extraRuns[`${e.name}/${B}`] ??= []).push(r);
      console.log(`round ${k + 1}/${REPS} batch ${B} llama.cpp ${e.name}: ${r.tok_s.toFixed(1)} tok/s`);
    }
  }
}
const wall = (performance.now() - t0) / 1000;
const parts: Record<number, { graph_ms: number; sample_ms: number }> = {};
for (const B of BATCHES) parts[B] = await onnxStepParts(model, prompt, B, 10);
await model.close();

// ---------------------------------------------------------------------------------------------
// The report.

const r1 = (x: number) => Math.round(x * 10) / 10;
const r3 = (x: number) => Math.round(x * 1000) / 1000;
const pad = (s: string | number, n: number) => String(s).padStart(n);
const medOnnx = (B: number, k: keyof OnnxDecodeRun) => median(onnx[B]!.map((r) => r[k]));
const medLlama = (runs: LlamaRun[], k: keyof LlamaRun) => median(runs.map((r) => r[k]));
console.log('');
console.log(`model ${dir} (float32 checkpoint), vocab ${model.V}; llama.cpp on ${f32Gguf} (F32, the same weights)`);
console.log(
  `llama.cpp from the llama-cpp-python ${sdistVersion} sdist (llama.cpp commit ${changelog ?? 'unknown'} per its changelog), llama-batched-bench; KV cache ${values['kv-type']}${values['no-kv-unified'] ? '' : ', unified (-kvu)'}; OMP_WAIT_POLICY ${process.env.OMP_WAIT_POLICY ?? 'unset'}; onnxruntime threads spin: ${values['no-spin'] ? 'no' : 'yes'}`,
);
console.log(
  `prompt ${P} tokens (tool format ${toolFormat}), shared by the batch; ${NEW} new tokens per row (decode = ${NEW - 1} steps); ${THREADS} thread(s) each side; medians of ${REPS} rounds (${wall.toFixed(0)} s)`,
);
console.log('');
console.log(`${'batch'.padEnd(6)}${'side'.padEnd(34)}${pad('tok/s', 9)}${pad('onnx / llama.cpp', 18)}`);
const ratios: Record<string, number> = {};
for (const B of BATCHES) {
  const l = medLlama(llama[B]!, 'tok_s');
  ratios[`b${B}`] = medOnnx(B, 'tok_s') / l;
  ratios[`b${B}_graph`] = medOnnx(B, 'graph_tok_s') / l;
  console.log(`${String(B).padEnd(6)}${'llama.cpp F32 (no sampling)'.padEnd(34)}${pad(r1(l), 9)}`);
  console.log(
    `${String(B).padEnd(6)}${'onnx (ours, JS sampling included)'.padEnd(34)}${pad(r1(medOnnx(B, 'tok_s')), 9)}${pad(ratios[`b${B}`]!.toFixed(2), 18)}`,
  );
  console.log(
    `${String(B).padEnd(6)}${'onnx graph alone (no sampling)'.padEnd(34)}${pad(r1(medOnnx(B, 'graph_tok_s')), 9)}${pad(ratios[`b${B}_graph`]!.toFixed(2), 18)}`,
  );
  for (const e of extras)
    console.log(`${String(B).padEnd(6)}${`llama.cpp ${e.name} (other precision)`.padEnd(34)}${pad(r1(medLlama(extraRuns[`${e.name}/${B}`]!, 'tok_s')), 9)}`);
}
const perRound = onnx[16]!.map((r, i) => (r.tok_s / llama[16]![i]!.tok_s).toFixed(2));
console.log(`batch 16, onnx / llama.cpp in each round: ${perRound.join(' ')}; at least 1.0: ${ratios.b16! >= 1 ? 'yes' : 'NO'}`);
console.log('');
for (const B of BATCHES)
  console.log(
    `onnx decode step, batch ${pad(B, 2)} (context = the prompt, medians of 10): graph ${parts[B]!.graph_ms.toFixed(2)} ms; JS sampleToken over the logits ${parts[B]!.sample_ms.toFixed(2)} ms (the top-k / top-p path: these runs sample the graph's probs, cheaper); in the runs session.run is ${(100 * medOnnx(B, 'graph_share')).toFixed(0)}% of the decode`,
  );
const fig = (B: number) => ({
  onnx_tok_s: r1(medOnnx(B, 'tok_s')),
  onnx_graph_tok_s: r1(medOnnx(B, 'graph_tok_s')),
  onnx_graph_share: r3(medOnnx(B, 'graph_share')),
  onnx_prefill_ms: Math.round(medOnnx(B, 'prefill_s') * 1000),
  llama_f32_tok_s: r1(medLlama(llama[B]!, 'tok_s')),
  llama_f32_prefill_ms: Math.round(medLlama(llama[B]!, 'prefill_ms')),
  ratio: r3(ratios[`b${B}`]!),
  ratio_graph: r3(ratios[`b${B}_graph`]!),
  extras: Object.fromEntries(extras.map((e) => [e.name, r1(medLlama(extraRuns[`${e.name}/${B}`]!, 'tok_s'))])),
  parts: parts[B],
});
console.log(
  JSON.stringify({
    model: basename(dir),
    precision: 'float32 weights both sides',
    llama_cpp: {
      sdist: `llama-cpp-python ${sdistVersion}`,
      commit: changelog ?? null,
      kv_type: values['kv-type'],
      kv_unified: !values['no-kv-unified'],
      omp_wait_policy: process.env.OMP_WAIT_POLICY ?? null,
      tool: 'llama-batched-bench S_TG',
    },
    prompt_tokens: P,
    new_tokens: NEW,
    threads: THREADS,
    onnx_spinning: !values['no-spin'],
    reps: REPS,
    b1: fig(1),
    b16: fig(16),
    ratio_b16_rounds: perRound.map(Number),
    ratio_b16_at_least_1: ratios.b16! >= 1,
  }),
);
