/**
 * Per-component costs of one synchronous RL step, measured here (issue 36): the inputs that
 * bench/scaling_model.py's step-time model takes, on this machine's CPU.
 *
 *   npx tsx bench/scaling.ts [--models calc-tiny,smollm2-135m] [--quick] [--help]
 *
 * For each model, on a private copy of its directory (the original is never written):
 *
 * 1. sampling: two real `mcp-gym serve-policy` processes (the CLI, each --threads 1), driven by
 *    concurrent chat completions through the openai SDK, as an RL client asks them (tools,
 *    logprobs, return_token_ids, a seed per request; client c talks to server c mod N). Three
 *    configurations a round, in rotating order: 1 server; 2 servers sharing the same requests
 *    and concurrency (a step's fixed rollouts spread over more servers: each one's batch
 *    halves); 2 servers each as loaded as the one (twice the clients and requests). Completion
 *    tokens/s (usage.completion_tokens over the wall time), per server, the ratio to 1 server
 *    (the median of each round's ratio), the cores the servers kept busy (/proc) and the tokens
 *    per server CPU-second (what the machine's other load changes least); medians of --reps rounds.
 * 2. learner: the learner process (learner/PROTOCOL.md), `load` then `train` steps on a batch of
 *    random tokens (no shared prefix, so nothing is computed once for several sequences; GRPO,
 *    beta 0, one epoch, one optimizer step: the main job's on-policy settings); the first step is
 *    a warm-up; learner_tokens_per_s is the train result's own metric; median over --learner-steps.
 * 3. weight push: after each timed train step, `export` (the new weights written into the model
 *    directory, and for a Hugging Face model its ONNX data updated) timed from the request to the
 *    answer, then `POST /v1/reload {model_dir}` to both servers at once, each timed from the
 *    request to the answered version. With a Hugging Face model also a LoRA learner (r 16,
 *    all-linear): the adapter's export and its size (--no-lora skips it).
 * 4. the CPU's ceilings (bench/scaling_cpu.py): float32 matmul GFLOP/s and memory-copy GB/s, which
 *    bench/scaling_model.py --calibrate compares the measured rates with.
 *
 * Prints one JSON line per measurement ({"bench": "scaling", "kind": ...}), then a table. On a
 * shared 2-core machine every figure moves with the load: read the medians and the ratio, not
 * the last digit.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import type { ChatCompletionTool } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { seededRandom } from '../lib/index.ts';
import { bundledServers } from '../servers/index.ts';
import { openingMessages } from '../src/env/index.ts';
import { generateSuite } from '../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR, CLI_PATH, PACKAGE_ROOT } from '../src/paths.ts';
import { ensureHfOnnx, isHfModelDir, LearnerClient, learnerPython, resolveModel } from '../src/trainers/index.ts';

const HELP = `bench/scaling.ts: per-component costs of one RL step on this machine (issue 36; docs/scaling.md)

  npx tsx bench/scaling.ts [options]

  --models LIST        comma-separated: calc-tiny (the embedded model of npm start), a registered
                       model (smollm2-135m), a model directory or a .gguf file
                       (default calc-tiny,smollm2-135m; with --quick: calc-tiny)
  --quick              calc-tiny, fewer repeats, half the requests (about 20 s on a quiet machine)
  --reps N             sampling rounds, each: 1 server, 2 servers on the same requests, 2 servers each
                       as loaded as the one (default 3; quick 2)
  --clients N          requests in flight in all, over the servers (default: 64 calc-tiny, 16 others)
  --requests N         requests per run (default: 512 calc-tiny, 16 others (one batch); quick: half)
  --max-tokens N       max_tokens of each request (default: 64 calc-tiny, 48 others)
  --server-threads N   each serve-policy's --threads (default 1: two servers fill the 2 cores)
  --learner-threads N  the learner's CPU threads (default: the cores, ${cpus().length})
  --learner-steps N    timed train steps (after one warm-up), each followed by a push (default 3; quick 2)
  --learner-batch N    sequences per train step (default: 64 calc-tiny, 4 others; the warm-up step: 2)
  --learner-seq N      tokens per sequence (default 256; at most the model's context)
  --no-lora            skip the LoRA learner (Hugging Face models only)
  --no-learner         sampling only: no learner, no push, no LoRA
  --cli auto|dist|src  how serve-policy runs: dist (bin/mcp-gym.js, needs npm run build), src (the
                       sources under tsx), auto (default: dist when it is current, else src)
  --keep               keep the temporary model copies (their path is printed)
  -h, --help           this text

Output: JSON lines ({"bench": "scaling", "kind": "sampling" | "learner" | "push" | "lora" | "cpu_ceiling" |
"model", ...}), then a table. Feed the JSON lines to the model: npx tsx bench/scaling.ts | tee out.txt;
python3 bench/scaling_model.py --calibrate out.txt.
`;

class BenchError extends Error {}

const { values } = (() => {
  try {
    return parseArgs({
      options: {
        models: { type: 'string' },
        quick: { type: 'boolean', default: false },
        reps: { type: 'string' },
        clients: { type: 'string' },
        requests: { type: 'string' },
        'max-tokens': { type: 'string' },
        'server-threads': { type: 'string', default: '1' },
        'learner-threads': { type: 'string', default: String(cpus().length) },
        'learner-steps': { type: 'string' },
        'learner-batch': { type: 'string' },
        'learner-seq': { type: 'string', default: '256' },
        'no-lora': { type: 'boolean', default: false },
        'no-learner': { type: 'boolean', default: false },
        cli: { type: 'string', default: 'auto' },
        keep: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    process.stderr.write(`bench/scaling.ts: ${(err as Error).message}\n(--help lists the options)\n`);
    process.exit(2);
  }
})();
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}

/** A positive integer flag, or its default; anything else exits 2 naming the flag. */
function intOpt(name: string, value: string | undefined, dflt: number): number {
  if (value === undefined) return dflt;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(`bench/scaling.ts: --${name} must be a positive integer, got '${value}'\n`);
    process.exit(2);
  }
  return n;
}

const QUICK = values.quick;
const REPS = intOpt('reps', values.reps, QUICK ? 2 : 3);
const SERVER_THREADS = intOpt('server-threads', values['server-threads'], 1);
const LEARNER_THREADS = intOpt('learner-threads', values['learner-threads'], cpus().length);
const LEARNER_STEPS = intOpt('learner-steps', values['learner-steps'], QUICK ? 2 : 3);
const LEARNER_SEQ = intOpt('learner-seq', values['learner-seq'], 256);
if (!['auto', 'dist', 'src'].includes(values.cli)) {
  process.stderr.write(`bench/scaling.ts: --cli must be auto, dist or src, got '${values.cli}'\n`);
  process.exit(2);
}
const MODELS = (values.models ?? (QUICK ? 'calc-tiny' : 'calc-tiny,smollm2-135m'))
  .split(',')
  .map((m) => m.trim())
  .filter(Boolean);
if (!MODELS.length) {
  process.stderr.write('bench/scaling.ts: --models names no model\n');
  process.exit(2);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[n >> 1]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
};
const round = (x: number, d = 3) => Number(x.toFixed(d));
function emit(kind: string, row: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify({ bench: 'scaling', kind, ...row })}\n`);
}
const log = (line: string) => process.stderr.write(`[scaling] ${line}\n`);

// ---------------------------------------------------------------------------------------------
// How serve-policy runs: the built CLI (bin/mcp-gym.js) when dist/ is current, else the sources.

async function cliPrefix(): Promise<{ args: string[]; how: string }> {
  const { staleReason } = (await import(join(PACKAGE_ROOT, 'scripts', 'build.mjs'))) as { staleReason: () => string | null };
  const stale = staleReason();
  if (values.cli === 'dist' && stale) throw new BenchError(`--cli dist: dist/ is not current (${stale}); run npm run build, or use --cli src`);
  if (values.cli === 'dist' || (values.cli === 'auto' && !stale)) return { args: [CLI_PATH], how: 'dist (bin/mcp-gym.js)' };
  const main = join(PACKAGE_ROOT, 'src', 'cli', 'main.ts');
  return {
    args: ['--import', 'tsx', '--eval', `import(${JSON.stringify(main)}).then((m) => m.main(process.argv.slice(1)))`],
    how: `src under tsx${stale ? ` (dist/ not current: ${stale})` : ''}`,
  };
}

// ---------------------------------------------------------------------------------------------
// The model: its directory, a private copy, its shape.

interface Shape {
  family: string;
  n_layers: number;
  d_model: number;
  n_heads: number;
  n_kv_heads: number;
  head_dim: number;
  d_ff: number;
  vocab_size: number;
  context: number;
  tied: boolean;
  /** Parameters that are lookups, not matmuls, per token: the untied input embedding, learned positions. */
  lookup_params: number;
}

function shapeOf(dir: string): Shape {
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  if (c.format === 'mcp-gym-model/1') {
    const a = c.architecture as Record<string, number | boolean>;
    const d = Number(a.d_model);
    const tied = Boolean(a.tie_embeddings);
    return {
      family: 'gpt',
      n_layers: Number(a.n_layers),
      d_model: d,
      n_heads: Number(a.n_heads),
      n_kv_heads: Number(a.n_heads),
      head_dim: d / Number(a.n_heads),
      d_ff: Number(a.d_ff),
      vocab_size: Number(a.vocab_size),
      context: Number(a.max_seq_len),
      tied,
      lookup_params: Number(a.max_seq_len) * d + (tied ? 0 : Number(a.vocab_size) * d),
    };
  }
  const n = (k: string) => {
    const v = c[k];
    if (typeof v !== 'number') throw new BenchError(`${join(dir, 'config.json')}: no number '${k}' (a Llama/Qwen-style config is expected)`);
    return v;
  };
  const d = n('hidden_size');
  const heads = n('num_attention_heads');
  const tied = c.tie_word_embeddings !== false;
  return {
    family: String(c.model_type ?? 'hf'),
    n_layers: n('num_hidden_layers'),
    d_model: d,
    n_heads: heads,
    n_kv_heads: typeof c.num_key_value_heads === 'number' ? c.num_key_value_heads : heads,
    head_dim: typeof c.head_dim === 'number' ? c.head_dim : d / heads,
    d_ff: n('intermediate_size'),
    vocab_size: n('vocab_size'),
    context: n('max_position_embeddings'),
    tied,
    lookup_params: tied ? 0 : n('vocab_size') * d,
  };
}

/** Bytes of the weight files a push moves (the learner's own formats). */
function weightFiles(dir: string): { files: string[]; bytes: number } {
  const names = isHfModelDir(dir)
    ? [...readdirSync(dir).filter((f) => f.endsWith('.safetensors')), ...(existsSync(join(dir, 'onnx')) ? ['onnx/model.onnx.data'] : [])]
    : ['weights.pt', 'model.onnx.data'];
  const files = names.filter((f) => existsSync(join(dir, f)));
  return { files, bytes: files.reduce((s, f) => s + statSync(join(dir, f)).size, 0) };
}

function dirBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  return readdirSync(dir, { withFileTypes: true }).reduce((s, e) => s + (e.isDirectory() ? dirBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size), 0);
}

// ---------------------------------------------------------------------------------------------
// serve-policy processes.

interface Server {
  url: string;
  child: ChildProcess;
  client: OpenAI;
  name: string;
}
const children = new Set<ChildProcess>();

function startServer(cli: string[], dir: string, seed: number): Promise<Server> {
  const child = spawn(process.execPath, [...cli, 'serve-policy', '--model', dir, '--port', '0', '--threads', String(SERVER_THREADS), '--seed', String(seed)], {
    cwd: PACKAGE_ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise<Server>((res, rej) => {
    let err = '';
    const timer = setTimeout(
      () => rej(new BenchError(`serve-policy --model ${dir} did not print its URL within 300 s; its stderr: ${err.slice(-800)}`)),
      300_000,
    );
    child.stderr!.on('data', (c: Buffer) => {
      err += c.toString();
      const m = /model '([^']+)' \(version [^)]*\) at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(err);
      if (m) {
        clearTimeout(timer);
        res({ url: m[2]!, child, name: m[1]!, client: new OpenAI({ baseURL: m[2]!, apiKey: 'bench', maxRetries: 0, timeout: 600_000 }) });
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new BenchError(`serve-policy --model ${dir} exited (${signal ?? code}) before serving; its stderr: ${err.trim().slice(-800)}`));
    });
  });
}

async function stopServer(s: Server): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  const t = setTimeout(() => s.child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
}

/** POST /v1/reload {model_dir}: seconds from the request to the answer, and the answer. */
async function reload(s: Server, dir: string): Promise<{ seconds: number; version: number; reloaded: boolean }> {
  const t0 = performance.now();
  const r = await fetch(`${s.url}/reload`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model_dir: dir }) });
  const body = (await r.json()) as { version?: number; reloaded?: boolean; error?: { message?: string } };
  const seconds = (performance.now() - t0) / 1000;
  if (!r.ok) throw new BenchError(`POST ${s.url}/reload {model_dir: ${dir}}: HTTP ${r.status}: ${body.error?.message ?? JSON.stringify(body)}`);
  return { seconds, version: Number(body.version), reloaded: Boolean(body.reloaded) };
}

// ---------------------------------------------------------------------------------------------
// 1. Sampling: the same requests over 1 server and over 2.

interface Workload {
  suite: string;
  clients: number;
  requests: number;
  maxTokens: number;
}

interface SampleRun {
  servers: number;
  tokens: number;
  prompt_tokens: number;
  requests: number;
  seconds: number;
  tok_s: number;
  /** Cores the servers kept busy (their CPU seconds / the wall seconds), when /proc tells. */
  server_cores?: number;
  /** Cores this client process kept busy. */
  client_cores: number;
}

/** CPU seconds (user + system) a process has used, from /proc (Linux); undefined elsewhere. */
function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return undefined;
  }
}

async function samplingRun(servers: Server[], w: Workload, seedBase: number): Promise<SampleRun> {
  // The suite's tasks in order, again from the first when there are more requests than tasks (each request has its own seed).
  const suite = generateSuite(w.suite);
  if (!suite.length) throw new BenchError(`the ${w.suite} suite has no tasks`);
  const tasks = Array.from({ length: w.requests }, (_, i) => suite[i % suite.length]!);
  const def = bundledServers[w.suite];
  if (!def) throw new BenchError(`no bundled server '${w.suite}' for the prompts' tools`);
  const tools: ChatCompletionTool[] = def.tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: z.toJSONSchema(t.input) as Record<string, unknown> },
  }));
  let tokens = 0;
  let promptTokens = 0;
  const cpu0 = servers.map((s) => cpuSeconds(s.child.pid));
  const self0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: w.clients }, async (_, c) => {
      const s = servers[c % servers.length]!;
      for (let i = c; i < w.requests; i += w.clients) {
        const r = await s.client.chat.completions.create({
          model: s.name,
          messages: openingMessages(tasks[i]!),
          tools,
          temperature: 1,
          max_tokens: w.maxTokens,
          seed: seedBase + i,
          logprobs: true,
          return_token_ids: true,
        } as never);
        const usage = (r as { usage: { completion_tokens: number; prompt_tokens: number } }).usage;
        tokens += usage.completion_tokens;
        promptTokens += usage.prompt_tokens;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu1 = servers.map((s) => cpuSeconds(s.child.pid));
  const used = cpu0.every((c) => c !== undefined) && cpu1.every((c) => c !== undefined) ? cpu1.reduce((a, c, i) => a + c! - cpu0[i]!, 0) : undefined;
  const self = process.cpuUsage(self0);
  return {
    servers: servers.length,
    tokens,
    prompt_tokens: promptTokens,
    requests: w.requests,
    seconds,
    tok_s: tokens / seconds,
    server_cores: used === undefined ? undefined : used / seconds,
    client_cores: (self.user + self.system) / 1e6 / seconds,
  };
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. The learner, and the push of its weights.

/** A batch of random tokens (seeded): `batch` sequences of `seq` tokens, the first quarter the prompt, groups of 8 with advantages ±1. */
function randomBatch(batch: number, seq: number, vocab: number, seed: number) {
  const rng = seededRandom(seed);
  const ids: number[][] = [];
  const mask: number[][] = [];
  const old: number[][] = [];
  const adv: number[] = [];
  const groups: string[] = [];
  const lp = -Math.log(vocab);
  for (let b = 0; b < batch; b++) {
    ids.push(Array.from({ length: seq }, () => Math.floor(rng() * vocab)));
    mask.push(Array.from({ length: seq }, (_, i) => (i >= Math.max(1, seq >> 2) ? 1 : 0)));
    old.push(Array.from({ length: seq }, () => lp));
    adv.push(b % 2 ? -1 : 1);
    groups.push(`g${b >> 3}`);
  }
  return { ids, mask, old_logprobs: old, advantages: adv, group_ids: groups };
}

const TRAIN_CONFIG = { loss: 'grpo', beta: 0, epochs: 1, minibatch_size: 0, micro_batch_size: 16, lr: 1e-6, max_grad_norm: 1 } as const;

interface LearnerFigures {
  tokens_per_s: number[];
  /** Tokens per CPU second of the learner process (all threads): what the machine's other load does not change much. */
  per_cpu: number[];
  step_s: number[];
  export_s: number[];
  export_inner_s: number[];
  onnx_s: number[];
  reload_s: number[];
  reload_wall_s: number[];
}

async function learnerAndPush(
  name: string,
  dir: string,
  shape: Shape,
  servers: Server[],
  batch: number,
  seq: number,
): Promise<LearnerFigures & { params: number }> {
  const hf = isHfModelDir(dir);
  const learner = LearnerClient.start({ hf, threads: LEARNER_THREADS });
  const f: LearnerFigures = { per_cpu: [], tokens_per_s: [], step_s: [], export_s: [], export_inner_s: [], onnx_s: [], reload_s: [], reload_wall_s: [] };
  try {
    const t0 = performance.now();
    const loaded = (await learner.request('load', { model_dir: dir, threads: LEARNER_THREADS, device: 'cpu' })) as Record<string, unknown>;
    const params = Number(loaded.params);
    log(
      `${name}: learner loaded ${params.toLocaleString('en')} parameters in ${((performance.now() - t0) / 1000).toFixed(1)} s (python: ${learnerPython({ hf })})`,
    );
    const computeParams = params - shape.lookup_params;
    for (let k = 0; k <= LEARNER_STEPS; k++) {
      const ts = performance.now();
      const r = (await learner.request('train', {
        batch: randomBatch(k === 0 ? Math.min(2, batch) : batch, seq, shape.vocab_size, 100 + k),
        config: { ...TRAIN_CONFIG, seed: k },
      } as never)) as {
        metrics: Record<string, number>;
      };
      const wall = (performance.now() - ts) / 1000;
      const m = r.metrics;
      if (k === 0) {
        log(`${name}: warm-up train step ${wall.toFixed(2)} s (${m.tokens} tokens)`);
        continue;
      }
      const te = performance.now();
      const ex = (await learner.request('export', {})) as Record<string, unknown>;
      const exportWall = (performance.now() - te) / 1000;
      const tr = performance.now();
      const answers = await Promise.all(servers.map((s) => reload(s, dir)));
      const reloadWall = (performance.now() - tr) / 1000;
      const notReloaded = answers.filter((a) => !a.reloaded);
      if (notReloaded.length)
        throw new BenchError(
          `${name}: POST /v1/reload answered reloaded: false after an export (version ${notReloaded[0]!.version}): the export did not change the served version`,
        );
      f.tokens_per_s.push(m.learner_tokens_per_s!);
      if (m.cpu_seconds) f.per_cpu.push(m.tokens! / m.cpu_seconds);
      f.step_s.push(wall);
      f.export_s.push(exportWall);
      f.export_inner_s.push(Number(ex.seconds));
      f.onnx_s.push(Number(ex.onnx_seconds ?? 0));
      f.reload_s.push(...answers.map((a) => a.seconds));
      f.reload_wall_s.push(reloadWall);
      emit('learner', {
        model: name,
        step: k,
        sequences: batch,
        seq_len: seq,
        tokens: m.tokens,
        learner_tokens_per_s: round(m.learner_tokens_per_s!, 1),
        seconds: round(m.seconds!),
        wall_seconds: round(wall),
        cpu_seconds: round(m.cpu_seconds ?? 0),
        tokens_per_cpu_s: m.cpu_seconds ? round(m.tokens! / m.cpu_seconds, 1) : null,
        threads: LEARNER_THREADS,
        params,
        compute_params: computeParams,
        achieved_gflops_6n: round((6 * computeParams * m.learner_tokens_per_s!) / 1e9, 2),
        loadavg_1m: round(loadavg()[0]!, 2),
      });
      emit('push', {
        model: name,
        step: k,
        export_wall_seconds: round(exportWall),
        export_seconds: round(Number(ex.seconds)),
        onnx_update_seconds: ex.onnx_seconds === undefined ? null : round(Number(ex.onnx_seconds)),
        version: ex.version,
        weight_files: weightFiles(dir).files,
        weight_bytes: weightFiles(dir).bytes,
        reload_seconds: answers.map((a) => round(a.seconds)),
        reload_wall_seconds: round(reloadWall),
        servers: servers.length,
      });
    }
    return { ...f, params };
  } finally {
    await learner.close();
  }
}

/** A LoRA learner on a Hugging Face model: one train step, then the adapter's export (and the ONNX update of the merged weights), timed. */
async function loraPush(name: string, dir: string, shape: Shape, servers: Server[], batch: number, seq: number) {
  const learner = LearnerClient.start({ hf: true, threads: LEARNER_THREADS });
  try {
    const loaded = (await learner.request('load', {
      model_dir: dir,
      threads: LEARNER_THREADS,
      device: 'cpu',
      lora: { r: 16, alpha: 32, dropout: 0, target_modules: 'all-linear' },
      reference: 'swap',
    } as never)) as { trainable_params?: number };
    const r = (await learner.request('train', { batch: randomBatch(batch, seq, shape.vocab_size, 7), config: { ...TRAIN_CONFIG, lr: 1e-5 } } as never)) as {
      metrics: Record<string, number>;
    };
    const te = performance.now();
    const ex = (await learner.request('export', {})) as Record<string, unknown>;
    const exportWall = (performance.now() - te) / 1000;
    const tr = performance.now();
    const answers = await Promise.all(servers.map((s) => reload(s, dir)));
    const reloadWall = (performance.now() - tr) / 1000;
    const adapterBytes = dirBytes(join(dir, 'adapter'));
    emit('lora', {
      model: name,
      rank: 16,
      trainable_params: loaded.trainable_params ?? null,
      learner_tokens_per_s: round(r.metrics.learner_tokens_per_s!, 1),
      export_wall_seconds: round(exportWall),
      export_seconds: round(Number(ex.seconds)),
      onnx_update_seconds: ex.onnx_seconds === undefined ? null : round(Number(ex.onnx_seconds)),
      adapter_bytes: adapterBytes,
      reload_seconds: answers.map((a) => round(a.seconds)),
      reload_wall_seconds: round(reloadWall),
    });
    return { exportWall, adapterBytes, onnx: Number(ex.onnx_seconds ?? 0), tokS: r.metrics.learner_tokens_per_s! };
  } finally {
    await learner.close();
  }
}

// ---------------------------------------------------------------------------------------------
// The CPU's ceilings.

function cpuCeilings(): Record<string, unknown>[] {
  const py = learnerPython({ hf: false });
  const threads = [...new Set([SERVER_THREADS, LEARNER_THREADS])].join(',');
  const r = spawnSync(py, [join(PACKAGE_ROOT, 'bench', 'scaling_cpu.py'), '--threads', threads], { encoding: 'utf8' });
  if (r.status !== 0) throw new BenchError(`bench/scaling_cpu.py failed (${r.error?.message ?? `exit ${r.status}`}): ${(r.stderr ?? '').trim().slice(-600)}`);
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

// ---------------------------------------------------------------------------------------------

interface ModelSummary {
  name: string;
  clients: number;
  params: number;
  tok1: number;
  tok2: number;
  ratio: number;
  ratios: number[];
  tok2Loaded: number;
  ratioLoaded: number;
  ratiosLoaded: number[];
  cores2Loaded?: number;
  perCpu2Loaded?: number;
  meanTokens: number;
  cores1?: number;
  cores2?: number;
  perCpu1?: number;
  perCpu2?: number;
  learner?: LearnerFigures;
  pushBytes: number;
  lora?: { exportWall: number; adapterBytes: number; onnx: number; tokS: number };
}

/** The directory `--models` names: calc-tiny (the bundled model), a registered name (fetched once), a directory or a .gguf file. */
async function modelSource(spec: string): Promise<string> {
  if (spec === 'calc-tiny') return BUNDLED_MODEL_DIR;
  try {
    return await resolveModel(spec, log);
  } catch (err) {
    throw new BenchError(`--models ${spec}: ${(err as Error).message.replace(/^--model: /, '')}`);
  }
}

async function benchModel(spec: string, source: string, cli: string[], tmp: string, seedBase: number): Promise<ModelSummary> {
  const name =
    spec === 'calc-tiny'
      ? 'calc-tiny'
      : spec
          .replace(/[/\\]+$/, '')
          .split(/[/\\]/)
          .pop()!;
  const dir = join(tmp, name);
  const tc = performance.now();
  // A private copy (timestamps kept, so that a current ONNX export stays current): export and reload write here.
  cpSync(source, dir, { recursive: true, preserveTimestamps: true });
  log(`${name}: copied ${source} to ${dir} in ${((performance.now() - tc) / 1000).toFixed(1)} s`);
  if (ensureHfOnnx(dir, log)) log(`${name}: exported to ONNX (the copy's export was missing or stale)`);
  const shape = shapeOf(dir);
  const tiny = spec === 'calc-tiny';
  const w: Workload = {
    suite: tiny ? 'calculator' : 'sql',
    clients: intOpt('clients', values.clients, tiny ? 64 : 16),
    requests: intOpt('requests', values.requests, (tiny ? 512 : 16) / (QUICK ? 2 : 1)),
    maxTokens: intOpt('max-tokens', values['max-tokens'], tiny ? 64 : 48),
  };
  const seq = Math.min(LEARNER_SEQ, shape.context);
  const batch = intOpt('learner-batch', values['learner-batch'], tiny ? 64 : 4);

  const ts = performance.now();
  const servers = await Promise.all([startServer(cli, dir, seedBase + 1), startServer(cli, dir, seedBase + 2)]);
  log(`${name}: 2 serve-policy processes up in ${((performance.now() - ts) / 1000).toFixed(1)} s (${servers.map((s) => s.url).join(', ')})`);
  try {
    // Warm-up: every server sees the prompts once (tool-block prefix cache, onnxruntime's first runs).
    await samplingRun(servers, { ...w, requests: Math.min(w.requests, w.clients) }, 9_000_000);
    await samplingRun([servers[0]!], { ...w, requests: Math.min(w.requests, w.clients) }, 9_100_000);
    const one: SampleRun[] = [];
    const two: SampleRun[] = [];
    const twoLoaded: SampleRun[] = [];
    // Three configurations a round: 1 server; 2 servers sharing the same requests (a fixed step's rollouts
    // spread over more servers: each server's batch halves); 2 servers each as loaded as the 1 (twice the
    // clients and requests: what a second server adds at the same batch). The order rotates every round.
    const configs = [
      { key: 'one', servers: 1, w },
      { key: 'two', servers: 2, w },
      { key: 'two_loaded', servers: 2, w: { ...w, clients: 2 * w.clients, requests: 2 * w.requests } },
    ] as const;
    for (let k = 0; k < REPS; k++) {
      const seed = 1000 * (k + 1);
      for (let j = 0; j < configs.length; j++) {
        const c = configs[(j + k) % configs.length]!;
        const r = await samplingRun(servers.slice(0, c.servers), c.w, seed);
        (c.key === 'one' ? one : c.key === 'two' ? two : twoLoaded).push(r);
        emit('sampling', {
          model: name,
          rep: k,
          config: c.key,
          servers: c.servers,
          suite: c.w.suite,
          clients: c.w.clients,
          requests: r.requests,
          max_tokens: c.w.maxTokens,
          completion_tokens: r.tokens,
          prompt_tokens_per_request: round(r.prompt_tokens / r.requests, 1),
          seconds: round(r.seconds),
          tok_s: round(r.tok_s, 1),
          tok_s_per_server: round(r.tok_s / c.servers, 1),
          server_cores: r.server_cores === undefined ? null : round(r.server_cores, 2),
          tok_per_server_cpu_s: r.server_cores === undefined ? null : round(r.tok_s / r.server_cores, 1),
          client_cores: round(r.client_cores, 2),
          server_threads: SERVER_THREADS,
          loadavg_1m: round(loadavg()[0]!, 2),
        });
      }
    }
    const ratios = one.map((o, i) => two[i]!.tok_s / o.tok_s);
    const ratiosLoaded = one.map((o, i) => twoLoaded[i]!.tok_s / o.tok_s);
    const perCpu = (rs: SampleRun[]) => (rs.every((r) => r.server_cores) ? median(rs.map((r) => r.tok_s / r.server_cores!)) : undefined);
    const summary: ModelSummary = {
      name,
      clients: w.clients,
      params: 0,
      tok1: median(one.map((r) => r.tok_s)),
      tok2: median(two.map((r) => r.tok_s)),
      ratio: median(ratios),
      ratios,
      tok2Loaded: median(twoLoaded.map((r) => r.tok_s)),
      ratioLoaded: median(ratiosLoaded),
      ratiosLoaded,
      cores2Loaded: twoLoaded.every((r) => r.server_cores !== undefined) ? median(twoLoaded.map((r) => r.server_cores!)) : undefined,
      perCpu2Loaded: perCpu(twoLoaded),
      meanTokens: median([...one, ...two].map((r) => r.tokens / r.requests)),
      pushBytes: 0,
      cores1: one.every((r) => r.server_cores !== undefined) ? median(one.map((r) => r.server_cores!)) : undefined,
      cores2: two.every((r) => r.server_cores !== undefined) ? median(two.map((r) => r.server_cores!)) : undefined,
      perCpu1: perCpu(one),
      perCpu2: perCpu(two),
    };
    const lf = values['no-learner'] ? undefined : await learnerAndPush(name, dir, shape, servers, batch, seq);
    summary.learner = lf;
    summary.params = lf?.params ?? 0;
    summary.pushBytes = weightFiles(dir).bytes;
    const cores = (rs: SampleRun[]) => (rs.every((r) => r.server_cores !== undefined) ? round(median(rs.map((r) => r.server_cores!)), 2) : null);
    emit('model', {
      model: name,
      source,
      params: lf?.params ?? null,
      compute_params: lf ? lf.params - shape.lookup_params : null,
      ...shape,
      bytes_per_param_served: 4,
      sampling_tok_s_1_server: round(summary.tok1, 1),
      sampling_tok_s_2_servers: round(summary.tok2, 1),
      sampling_ratio_2_over_1: round(summary.ratio),
      sampling_ratios: ratios.map((r) => round(r)),
      sampling_tok_s_2_servers_loaded: round(summary.tok2Loaded, 1),
      sampling_ratio_2_loaded_over_1: round(summary.ratioLoaded),
      sampling_ratios_loaded: ratiosLoaded.map((r) => round(r)),
      sampling_server_cores_2_loaded: summary.cores2Loaded === undefined ? null : round(summary.cores2Loaded, 2),
      sampling_tok_per_server_cpu_s_2_loaded: summary.perCpu2Loaded === undefined ? null : round(summary.perCpu2Loaded, 1),
      sampling_server_cores_1: cores(one),
      sampling_server_cores_2: cores(two),
      sampling_tok_per_server_cpu_s_1: summary.perCpu1 === undefined ? null : round(summary.perCpu1, 1),
      sampling_tok_per_server_cpu_s_2: summary.perCpu2 === undefined ? null : round(summary.perCpu2, 1),
      learner_tokens_per_cpu_s: lf && lf.per_cpu.length ? round(median(lf.per_cpu), 1) : null,
      sampling_clients: w.clients,
      completion_tokens_per_request: round(summary.meanTokens, 1),
      prompt_tokens_per_request: round(median([...one, ...two].map((r) => r.prompt_tokens / r.requests)), 1),
      learner_tokens_per_s: lf ? round(median(lf.tokens_per_s), 1) : null,
      learner_tokens_per_s_best: lf ? round(Math.max(...lf.tokens_per_s), 1) : null,
      learner_threads: LEARNER_THREADS,
      learner_seq_len: seq,
      export_wall_seconds: lf ? round(median(lf.export_s)) : null,
      reload_seconds: lf ? round(median(lf.reload_s)) : null,
      push_weight_bytes: summary.pushBytes,
      server_threads: SERVER_THREADS,
    });
    if (lf && isHfModelDir(dir) && !values['no-lora']) summary.lora = await loraPush(name, dir, shape, servers, batch, seq);
    return summary;
  } finally {
    await Promise.all(servers.map(stopServer));
  }
}

function table(ceil: Record<string, unknown>[], sums: ModelSummary[], how: string): string {
  const rows: string[] = [];
  const date = new Date().toISOString().slice(0, 10);
  rows.push('');
  rows.push(`bench/scaling.ts, ${date}, ${cpus().length} cores (${cpus()[0]?.model ?? 'cpu'}), serve-policy from ${how}; medians; a shared machine: noisy`);
  for (const c of ceil)
    rows.push(`CPU ceiling (${c.when}), ${c.threads} thread(s): float32 matmul ${c.matmul_gflops} GFLOP/s, memory copy ${c.copy_gbps} GB/s`);
  rows.push('');
  rows.push(
    '| model | params | servers | clients | tok/s | tok/s per server | ratio to 1 server (per round) | server cores busy | tokens per server CPU-s | tokens/request |',
  );
  rows.push('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const f1 = (x: number | undefined) => (x === undefined ? '?' : x.toFixed(2));
  const f0 = (x: number | undefined) => (x === undefined ? '?' : x.toFixed(0));
  for (const s of sums) {
    const p = s.params ? `${(s.params / 1e6).toFixed(1)}M` : '?';
    rows.push(
      `| ${s.name} | ${p} | 1 | ${s.clients} | ${s.tok1.toFixed(1)} | ${s.tok1.toFixed(1)} | | ${f1(s.cores1)} | ${f0(s.perCpu1)} | ${s.meanTokens.toFixed(1)} |`,
    );
    rows.push(
      `| | | 2, same requests | ${s.clients} | ${s.tok2.toFixed(1)} | ${(s.tok2 / 2).toFixed(1)} | **${s.ratio.toFixed(2)}x** (${s.ratios.map((r) => r.toFixed(2)).join(', ')}) | ${f1(s.cores2)} | ${f0(s.perCpu2)} | |`,
    );
    rows.push(
      `| | | 2, each as loaded | ${2 * s.clients} | ${s.tok2Loaded.toFixed(1)} | ${(s.tok2Loaded / 2).toFixed(1)} | **${s.ratioLoaded.toFixed(2)}x** (${s.ratiosLoaded.map((r) => r.toFixed(2)).join(', ')}) | ${f1(s.cores2Loaded)} | ${f0(s.perCpu2Loaded)} | |`,
    );
  }
  rows.push('');
  rows.push(
    `| model | learner tokens/s (${LEARNER_THREADS} threads) | tokens per learner CPU-s | train step s | export s (weights written) | reload s per server (2 at once) | bytes pushed | LoRA r16: adapter bytes, export s |`,
  );
  rows.push('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const s of sums) {
    const l = s.learner;
    if (!l) {
      rows.push(`| ${s.name} | (--no-learner) | | | | | | |`);
      continue;
    }
    rows.push(
      `| ${s.name} | ${median(l.tokens_per_s).toFixed(1)} (${l.tokens_per_s.map((x) => x.toFixed(0)).join(', ')}) | ${l.per_cpu.length ? median(l.per_cpu).toFixed(1) : '?'} | ${median(l.step_s).toFixed(2)} | ${median(l.export_s).toFixed(2)} (ONNX update ${median(l.onnx_s).toFixed(2)}) | ${median(l.reload_s).toFixed(2)} (wall ${median(l.reload_wall_s).toFixed(2)}) | ${(s.pushBytes / 1e6).toFixed(1)} MB | ${s.lora ? `${(s.lora.adapterBytes / 1e6).toFixed(2)} MB, ${s.lora.exportWall.toFixed(2)} s (ONNX update ${s.lora.onnx.toFixed(2)} s)` : 'n/a'} |`,
    );
  }
  return `${rows.join('\n')}\n`;
}

const tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-scaling-'));
const cleanup = () => {
  for (const c of children) c.kill('SIGKILL');
  if (!values.keep) rmSync(tmp, { recursive: true, force: true });
};
process.once('SIGINT', () => {
  cleanup();
  process.exit(130);
});
try {
  const t0 = performance.now();
  const { args: cli, how } = await cliPrefix();
  log(`serve-policy runs from ${how}; temporary copies in ${tmp}`);
  // The CPU's ceilings before and after the models (the machine's load moves them; the model takes the best).
  const sources: string[] = [];
  for (const m of MODELS) sources.push(await modelSource(m));
  const ceil = cpuCeilings().map((c) => ({ ...c, when: 'start' }));
  for (const c of ceil) emit('cpu_ceiling', c);
  const sums: ModelSummary[] = [];
  for (const [i, m] of MODELS.entries()) sums.push(await benchModel(m, sources[i]!, cli, tmp, 10 * i));
  const end = cpuCeilings().map((c) => ({ ...c, when: 'end' }));
  for (const c of end) emit('cpu_ceiling', c);
  process.stdout.write(table([...ceil, ...end], sums, how));
  emit('done', { seconds: round((performance.now() - t0) / 1000, 1), models: MODELS, quick: QUICK, cores: cpus().length, date: new Date().toISOString() });
  if (values.keep) log(`kept ${tmp}`);
} catch (err) {
  process.stderr.write(`bench/scaling.ts: ${(err as Error).message}\n`);
  cleanup();
  process.exit(1);
}
cleanup();
