/** bench/scaling.ts: the CPU's ceilings, a model's summary and the table. */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../../src/paths.ts';
import { learnerPython } from '../../src/trainers/index.ts';
import { BenchError, LEARNER_THREADS, SERVER_THREADS, median } from './options.ts';
import type { LearnerFigures } from './learner.ts';

// ---------------------------------------------------------------------------------------------
// The CPU's ceilings.

export function cpuCeilings(): Record<string, unknown>[] {
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

export interface ModelSummary {
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

export function table(ceil: Record<string, unknown>[], sums: ModelSummary[], how: string): string {
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
