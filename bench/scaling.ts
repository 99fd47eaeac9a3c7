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
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUNDLED_MODEL_DIR, CLI_PATH, PACKAGE_ROOT } from '../src/paths.ts';
import { ensureHfOnnx, isHfModelDir, resolveModel } from '../src/trainers/index.ts';
import { BenchError, LEARNER_SEQ, LEARNER_THREADS, MODELS, QUICK, REPS, SERVER_THREADS, emit, intOpt, log, median, round, values } from './scaling/options.ts';
import { shapeOf, weightFiles } from './scaling/shape.ts';
import { children, samplingRun, startServer, stopServer, type SampleRun, type Workload } from './scaling/servers.ts';
import { learnerAndPush, loraPush } from './scaling/learner.ts';
import { cpuCeilings, table, type ModelSummary } from './scaling/report.ts';

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
