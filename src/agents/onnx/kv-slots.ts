/**
 * The KV cache in slots: a lane's rows with their keys [slots, H, Dh, C] and values
 * [slots, H, C, Dh], mask and next-token scores; making room in a lane, taking a row out of it,
 * and writing keys and values into a row's slots.
 */
import type * as ort from 'onnxruntime-node';
import type { Generation, ResolvedRow } from './generation.ts';

/**
 * What the sampler's parts read of their OnnxModel (the model itself, read as they run): the
 * cache's shape, the vocabulary, the context, and whether the graph reads a shared prefix.
 */
export interface ModelShape {
  readonly L: number;
  /** Heads of the KV cache: the GPT's heads, a Hugging Face model's key/value heads (n_kv_heads). */
  readonly H: number;
  readonly Dh: number;
  readonly V: number;
  readonly maxLen: number;
  readonly graphPrefix: boolean;
}

/** A prompt prefix's keys [H, Dh, n] and values [H, n, Dh] per layer. */
export interface Prefix {
  tokens: number[];
  n: number;
  K: Float32Array[];
  V: Float32Array[];
}

/**
 * A row being sampled: its prompt, settings, tokens so far, its row in the lane's cache and its
 * next cache slot. With a graph that reads the shared prefix itself, the row reads the first
 * `base` tokens of the lane's prefix and its slots hold the tokens after them (slot s is position
 * base + s); otherwise `base` is 0 and slot s is position s.
 */
export interface LaneRow {
  prompt: number[];
  opts: ResolvedRow;
  gen: Generation;
  slot: number;
  next: number;
  base: number;
  onDone?: (g: Generation) => void;
  /** Prompt tokens this row took from a kept RowCache instead of prefilling them. */
  reused?: number;
  /** What the row's slot of `logits` holds now, in a lane whose rows choose (Lane.perRow); else the lane's `scores`. */
  scores?: Scores;
}

/** What a lane's rows sample from: the logits, or the probabilities a Hugging Face graph also returns. */
export type Scores = 'logits' | 'probs';

/**
 * Rows sampled together: B running rows in the first B of `slots` slots, each with C cache slots
 * (per layer keys [slots, H, Dh, C], values [slots, H, C, Dh]), a mask [slots, C] that is 1 where
 * a slot holds a token, and each row's next logits [slots, V].
 */
export interface Lane {
  session: ort.InferenceSession;
  B: number;
  slots: number;
  C: number;
  K: Float32Array[];
  V: Float32Array[];
  mask: Float32Array;
  /** Each row's next-token scores: logits, or (`scores: 'probs'`) the graph's softmax at temperature 1. */
  logits: Float32Array;
  scores: Scores;
  /**
   * Each graph run asks for the scores its rows can all sample from (continuous batching, whose rows
   * come with their own settings): the probabilities while every row samples the whole vocabulary at
   * temperature 1, else the logits; each row records which its slot holds (LaneRow.scores).
   */
  perRow?: boolean;
  /**
   * The capacity follows the running rows (continuous batching): a row joins with room for its prompt,
   * and before each decode step the capacity is fitted to the longest row (grown, or shrunk once rows
   * that ran long have left), so that a step reads the slots rows use, not the most any row might use.
   */
  elastic?: boolean;
  /** The running rows by cache row, and in the order they joined (the order rows are sampled in). */
  rows: LaneRow[];
  order: LaneRow[];
  prefix?: Prefix;
  /** A decode step's inputs (ids, positions, mask), kept from step to step. */
  step?: { ids: BigInt64Array; pos: BigInt64Array; mask: Float32Array };
}

/** A lane's slots, for an OnnxModel (read through its `shape`): made, grown, emptied of a row, and written into. */
export class KvSlots {
  /** Times an elastic lane's capacity was fitted larger or smaller (laneFit). */
  readonly fits = { grown: 0, shrunk: 0 };

  constructor(private readonly shape: ModelShape) {}

  /** A lane with room for `slots` rows of capacity C (both grow with laneReserve). */
  newLane(session: ort.InferenceSession, slots: number, C: number, prefix?: Prefix, scores: Scores = 'logits'): Lane {
    const { L, H, Dh, V } = this.shape;
    return {
      session,
      scores,
      B: 0,
      slots,
      C,
      K: Array.from({ length: L }, () => new Float32Array(slots * H * Dh * C)),
      V: Array.from({ length: L }, () => new Float32Array(slots * H * C * Dh)),
      mask: new Float32Array(slots * C),
      logits: new Float32Array(slots * V),
      rows: [],
      order: [],
      prefix,
    };
  }

  /** Makes room for `slots` rows of capacity C, keeping the running rows' keys, values, masks and logits. */
  laneReserve(lane: Lane, slots: number, C: number): void {
    if (slots <= lane.slots && C <= lane.C) return;
    // Rows are added one at a time: room doubles (up to 64 rows) rather than growing by one.
    const S = slots > lane.slots ? Math.max(slots, Math.min(2 * lane.slots, 64)) : lane.slots;
    this.relay(lane, S, Math.max(lane.C, C));
  }

  /**
   * Gives the lane a capacity of exactly C slots a row, larger or smaller (an elastic lane, Lane.elastic):
   * every running row's tokens must fit in C.
   */
  laneFit(lane: Lane, C: number): void {
    if (C === lane.C) return;
    if (C > lane.C) this.fits.grown++;
    else this.fits.shrunk++;
    this.relay(lane, lane.slots, C);
  }

  /** Re-lays the lane as S rows of capacity C2, keeping the running rows' first min(C, C2) slots, masks and logits. */
  private relay(lane: Lane, S: number, C2: number): void {
    const { L, H, Dh, V } = this.shape;
    const C1 = lane.C;
    const c = Math.min(C1, C2);
    const B = lane.B;
    const K = Array.from({ length: L }, () => new Float32Array(S * H * Dh * C2));
    const Vc = Array.from({ length: L }, () => new Float32Array(S * H * C2 * Dh));
    const mask = new Float32Array(S * C2);
    for (let l = 0; l < L; l++) {
      if (C2 === C1) {
        K[l]!.set(lane.K[l]!.subarray(0, B * H * Dh * C1));
        Vc[l]!.set(lane.V[l]!.subarray(0, B * H * C1 * Dh));
        continue;
      }
      const srcK = lane.K[l]!;
      const srcV = lane.V[l]!;
      for (let bh = 0; bh < B * H; bh++) {
        Vc[l]!.set(srcV.subarray(bh * C1 * Dh, bh * C1 * Dh + c * Dh), bh * C2 * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(srcK.subarray((bh * Dh + d) * C1, (bh * Dh + d) * C1 + c), (bh * Dh + d) * C2);
      }
    }
    for (let b = 0; b < B; b++) mask.set(lane.mask.subarray(b * C1, b * C1 + c), b * C2);
    const logits = S === lane.slots ? lane.logits : new Float32Array(S * V);
    if (logits !== lane.logits) logits.set(lane.logits.subarray(0, B * V));
    Object.assign(lane, { slots: S, C: C2, K, V: Vc, mask, logits });
  }

  /** Takes row b out of the lane: the last row moves into its slot. */
  laneRemove(lane: Lane, b: number): void {
    const { L, H, Dh, V } = this.shape;
    const last = lane.B - 1;
    if (b !== last) {
      const C = lane.C;
      const n = H * Dh * C;
      for (let l = 0; l < L; l++) {
        lane.K[l]!.copyWithin(b * n, last * n, (last + 1) * n);
        lane.V[l]!.copyWithin(b * n, last * n, (last + 1) * n);
      }
      lane.mask.copyWithin(b * C, last * C, (last + 1) * C);
      lane.logits.copyWithin(b * V, last * V, (last + 1) * V);
      lane.rows[b] = lane.rows[last]!;
      lane.rows[b]!.slot = b;
    }
    lane.rows.pop();
    lane.B--;
  }

  /** Copies the shared prefix's keys/values (one row of capacity n) into slots [0, n) of row `dstRow`. */
  copyPrefix(prefix: Prefix, cacheK: Float32Array[], cacheV: Float32Array[], dstRow: number, C: number): void {
    const { L, H, Dh } = this.shape;
    const n = prefix.n;
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        const bh = dstRow * H + h;
        cacheV[l]!.set(prefix.V[l]!.subarray(h * n * Dh, (h + 1) * n * Dh), bh * C * Dh);
        for (let d = 0; d < Dh; d++) cacheK[l]!.set(prefix.K[l]!.subarray((h * Dh + d) * n, (h * Dh + d + 1) * n), (bh * Dh + d) * C);
      }
    }
  }

  /**
   * Writes row `srcRow` of new keys/values [L, srcB, H, Tn, Dh] into row `dstRow` of the caches
   * (keys [dstB, H, Dh, C] transposed, values [dstB, H, C, Dh]) at slots [slot, slot + Tn).
   */
  store(
    newK: Float32Array,
    newV: Float32Array,
    srcB: number,
    srcRow: number,
    Tn: number,
    cacheK: Float32Array[],
    cacheV: Float32Array[],
    dstRow: number,
    slot: number,
    C: number,
  ): void {
    const { L, H, Dh } = this.shape;
    const n = Tn * Dh;
    for (let l = 0; l < L; l++) {
      const K = cacheK[l]!;
      const Vc = cacheV[l]!;
      for (let h = 0; h < H; h++) {
        const src = ((l * srcB + srcRow) * H + h) * n;
        const bh = dstRow * H + h;
        Vc.set(newV.subarray(src, src + n), bh * C * Dh + slot * Dh);
        const kBase = bh * Dh * C + slot;
        for (let t = 0; t < Tn; t++) {
          const row = src + t * Dh;
          for (let d = 0; d < Dh; d++) K[kBase + d * C + t] = newK[row + d]!;
        }
      }
    }
  }
}
