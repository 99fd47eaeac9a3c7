/**
 * Feeding the exported graph: one onnxruntime run over new tokens with the slot cache (and, for a
 * graph that reads one, a shared prefix), timed as a prefill or a decode step.
 */
import * as ort from 'onnxruntime-node';
import type { ModelShape, Prefix, Scores } from './kv-slots.ts';

/** Calls, rows, tokens and seconds of the graph runs of one kind (OnnxModel.timing). */
interface RunTiming {
  calls: number;
  rows: number;
  tokens: number;
  seconds: number;
}

/** The graph runs that prefill and the decode steps (OnnxModel.timing). */
export interface Timing {
  prefill: RunTiming;
  decode: RunTiming;
}

/** The graph of an OnnxModel (read through its `shape`); each run is counted in `timing`. */
export class Graph {
  constructor(
    private readonly shape: ModelShape,
    private readonly timing: Timing,
  ) {}

  /**
   * One forward pass on `session` (OnnxModel.forward's, with `scores` the output the rows sample
   * from). `prefix` (graphs that read one, `graphPrefix`): the shared prefix's keys and values and which of
   * its positions each row reads (`mask` [B, n]); without it the graph reads an empty prefix.
   */
  async run(
    session: ort.InferenceSession,
    ids: BigInt64Array,
    positions: BigInt64Array,
    mask: Float32Array,
    B: number,
    Tn: number,
    C: number,
    keys: Float32Array[],
    values: Float32Array[],
    scores: Scores = 'logits',
    prefix?: { p: Prefix; mask: Float32Array },
  ) {
    const { L, H, Dh } = this.shape;
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', ids, [B, Tn]),
      position_ids: new ort.Tensor('int64', positions, [B, Tn]),
      attention_mask: new ort.Tensor('float32', mask, [B, C + Tn]),
    };
    for (let l = 0; l < L; l++) {
      feeds[`past_key_${l}`] = new ort.Tensor('float32', keys[l]!, [B, H, Dh, C]);
      feeds[`past_value_${l}`] = new ort.Tensor('float32', values[l]!, [B, H, C, Dh]);
    }
    if (this.shape.graphPrefix) {
      // The graph needs a prefix of at least one position: without one, a position no row reads.
      const n = prefix?.p.n ?? 1;
      feeds.prefix_mask = new ort.Tensor('float32', prefix?.mask ?? new Float32Array(B), [B, n]);
      for (let l = 0; l < L; l++) {
        feeds[`prefix_key_${l}`] = new ort.Tensor('float32', prefix?.p.K[l] ?? new Float32Array(H * Dh), [1, H, Dh, n]);
        feeds[`prefix_value_${l}`] = new ort.Tensor('float32', prefix?.p.V[l] ?? new Float32Array(H * Dh), [1, H, n, Dh]);
      }
    }
    // Only the outputs used: the [B, V] scores the rows sample from, and the new keys and values.
    const t0 = performance.now();
    const out = await session.run(feeds, [scores, 'new_keys', 'new_values']);
    const kind = Tn > 1 || (B === 1 && C === 0) ? 'prefill' : 'decode';
    const st = this.timing[kind];
    st.calls++;
    st.rows += B;
    st.tokens += B * Tn;
    st.seconds += (performance.now() - t0) / 1000;
    return { logits: out[scores]!.data as Float32Array, newK: out.new_keys!.data as Float32Array, newV: out.new_values!.data as Float32Array };
  }
}
