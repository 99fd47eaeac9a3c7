/**
 * The onnxruntime session of a model directory: creating it, and counting the generations that run
 * on each session, so that a session replaced by a reload is released only after its last one.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { StartFailure } from '../../../lib/index.ts';
import type { ModelConfig } from '../model-config.ts';
import { isHfConfig, type HfOnnxConfig } from './config.ts';

/** Loads a model directory's graph into a session (`threads`, `spinning`: OnnxModelOptions'). */
export async function createSession(
  dir: string,
  config: ModelConfig | HfOnnxConfig,
  options: { threads?: number; spinning?: boolean },
): Promise<ort.InferenceSession> {
  const graph = isHfConfig(config) ? join(dir, 'onnx', config.graph) : join(dir, config.onnx!.graph);
  if (!existsSync(graph)) throw new Error(`The ONNX graph ${graph} is missing`);
  try {
    return await ort.InferenceSession.create(graph, {
      intraOpNumThreads: options.threads ?? 1,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
      ...(options.spinning === false ? { extra: { session: { 'intra_op.allow_spinning': '0' } } } : {}),
    });
  } catch (err) {
    // The files are there and named right: the model itself cannot start (a damaged or foreign graph).
    throw new StartFailure(`could not start the model ${dir}: onnxruntime cannot load ${graph}: ${(err as Error).message}`);
  }
}

/** Generations running on each session (a retired session is released when its count drops to 0). */
export class SessionUsers {
  private readonly users = new Map<ort.InferenceSession, number>();
  private readonly retired = new Set<ort.InferenceSession>();

  /** Counts a generation that starts on `s`; returns `s`. */
  acquire(s: ort.InferenceSession): ort.InferenceSession {
    this.users.set(s, (this.users.get(s) ?? 0) + 1);
    return s;
  }

  /** A generation on `s` ended: a retired `s` is released after its last. */
  async release(s: ort.InferenceSession): Promise<void> {
    const n = (this.users.get(s) ?? 1) - 1;
    if (n > 0) return void this.users.set(s, n);
    this.users.delete(s);
    if (this.retired.delete(s)) await s.release();
  }

  /** Releases `s` now, or once the generations running on it end. */
  async retire(s: ort.InferenceSession): Promise<void> {
    if (this.users.has(s)) this.retired.add(s);
    else await s.release();
  }
}
