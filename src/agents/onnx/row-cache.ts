/**
 * Rows kept for their next turn (RowOptions.cacheKey): a finished row's keys and values, and the
 * check that a later row may start from them instead of prefilling its prompt again.
 */
import type * as ort from 'onnxruntime-node';
import type { Lane, LaneRow, ModelShape } from './kv-slots.ts';
import { commonLength } from './prefix-cache.ts';

/**
 * A finished row's keys and values, kept for its next turn: `tokens` (its prompt and the sampled
 * tokens fed back, i.e. all but the last) are positions 0 .. tokens.length - 1; the first `base` of
 * them were read from the lane's shared prefix (a graph that reads it; 0 for the embedded GPT, whose
 * slots hold the prefix too), the next `n` are in K [H, Dh, n] / V [H, n, Dh].
 */
export interface RowCache {
  session: ort.InferenceSession;
  tokens: number[];
  base: number;
  n: number;
  K: Float32Array[];
  V: Float32Array[];
}

/** The rows an OnnxModel (read through its `shape`) keeps. */
export class RowCaches {
  constructor(private readonly shape: ModelShape) {}

  /** Rows kept for their next turn (RowOptions.cacheKey), least recently kept first. */
  private readonly byKey = new Map<string, RowCache>();

  /** Drops what `cacheKey` kept (an episode that ended). */
  forgetRow(cacheKey: string): void {
    this.byKey.delete(cacheKey);
  }

  /** Whether a row of `prompt` on `session` will start from what `cacheKey` kept (a graph that keeps the prefix in its slots: the embedded GPT). */
  covers(session: ort.InferenceSession, cacheKey: string | undefined, prompt: number[]): boolean {
    const kept = cacheKey === undefined ? undefined : this.byKey.get(cacheKey);
    return kept !== undefined && kept.base === 0 && fits(kept, session, prompt);
  }

  /** The kept cache a row can start from: same weights, the same prefix read, and its tokens a prefix of the row's prompt. */
  reusable(lane: Lane, row: LaneRow): RowCache | undefined {
    const key = row.opts.cacheKey;
    const kept = key === undefined ? undefined : this.byKey.get(key);
    if (!kept || key === undefined) return undefined;
    this.byKey.delete(key);
    const samePrefix = kept.base === 0 || (lane.prefix !== undefined && commonLength(lane.prefix.tokens, kept.tokens) >= kept.base);
    return fits(kept, lane.session, row.prompt) && samePrefix ? kept : undefined;
  }

  /** Keeps a finished row's keys and values under its cacheKey (at most 512 rows, oldest dropped). */
  keepRow(lane: Lane, row: LaneRow): void {
    const key = row.opts.cacheKey;
    if (key === undefined || row.gen.tokens.length === 0) return;
    const { L, H, Dh } = this.shape;
    const n = row.next;
    const C = lane.C;
    const b = row.slot;
    const K = Array.from({ length: L }, () => new Float32Array(H * Dh * n));
    const V = Array.from({ length: L }, () => new Float32Array(H * n * Dh));
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const bh = b * H + h;
        V[l]!.set(lane.V[l]!.subarray(bh * C * Dh, bh * C * Dh + n * Dh), h * n * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(lane.K[l]!.subarray((bh * Dh + d) * C, (bh * Dh + d) * C + n), (h * Dh + d) * n);
      }
    }
    // The last sampled token was never fed back: the slots hold the prompt and the sampled tokens before it.
    const tokens = row.prompt.concat(row.gen.tokens.slice(0, -1));
    this.byKey.delete(key);
    this.byKey.set(key, { session: lane.session, tokens, base: row.base, n, K, V });
    while (this.byKey.size > 512) this.byKey.delete(this.byKey.keys().next().value!);
  }
}

/** Whether `kept` was computed on `session` (the same weights) and its tokens are a proper prefix of `prompt`. */
function fits(kept: RowCache, session: ort.InferenceSession, prompt: number[]): boolean {
  return kept.session === session && kept.tokens.length < prompt.length && commonLength(kept.tokens, prompt) === kept.tokens.length;
}
