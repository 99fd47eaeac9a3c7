/** bench/scaling.ts: the learner's train steps on random tokens, the export and the push to the servers (full weights; LoRA). */
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { seededRandom } from '../../lib/index.ts';
import { isHfModelDir, LearnerClient, learnerPython } from '../../src/trainers/index.ts';
import { BenchError, LEARNER_STEPS, LEARNER_THREADS, emit, log, round } from './options.ts';
import { dirBytes, weightFiles, type Shape } from './shape.ts';
import { reload, type Server } from './servers.ts';

// ---------------------------------------------------------------------------------------------
// 2 and 3. The learner, and the push of its weights.

/** A batch of random tokens (seeded): `batch` sequences of `seq` tokens, the first quarter the prompt, groups of 8 with advantages ±1. */
export function randomBatch(batch: number, seq: number, vocab: number, seed: number) {
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

export const TRAIN_CONFIG = { loss: 'grpo', beta: 0, epochs: 1, minibatch_size: 0, micro_batch_size: 16, lr: 1e-6, max_grad_norm: 1 } as const;

export interface LearnerFigures {
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

export async function learnerAndPush(
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
export async function loraPush(name: string, dir: string, shape: Shape, servers: Server[], batch: number, seq: number) {
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
