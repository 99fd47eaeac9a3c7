/**
 * Shared prompt prefixes: a batch's common prefix computed once, and (graphs that read the prefix
 * themselves) prefixes kept per session, reused or extended across calls.
 */
import type * as ort from 'onnxruntime-node';
import type { Graph } from './graph.ts';
import type { KvSlots, ModelShape, Prefix } from './kv-slots.ts';

/** How many first tokens a and b have in common. */
export function commonLength(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** The prefixes of an OnnxModel (read through its `shape`), computed with its graph and laid out as its slots are. */
export class PrefixCache {
  constructor(
    private readonly shape: ModelShape,
    private readonly graph: Graph,
    private readonly kv: KvSlots,
    /** The model's options (read at each call). */
    private readonly options: { sharePrefix?: boolean },
  ) {}

  /** Prefixes computed on each session, most recently used last (graphs that read the prefix: reused across calls). */
  private readonly cached = new WeakMap<ort.InferenceSession, Prefix[]>();

  /**
   * The keys and values of the prompts' longest common prefix (a group's identical prompts, the
   * system prompt and tool list of a batch), computed once and copied into every row's slots
   * instead of being recomputed per row; undefined when it is too short to pay. At least one
   * token of each prompt is left to the row's own prefill, which yields its logits.
   */
  async sharedPrefix(session: ort.InferenceSession, prompts: number[][]): Promise<Prefix | undefined> {
    // A graph that reads the prefix keeps it for later calls (prefixOf): worth it for one prompt too.
    if (this.options.sharePrefix === false || (prompts.length < 2 && !this.shape.graphPrefix)) return undefined;
    let n = Math.min(...prompts.map((p) => p.length)) - 1;
    const first = prompts[0]!;
    for (const p of prompts) n = Math.min(n, commonLength(first, p));
    return n < 16 ? undefined : this.prefixOf(session, first.slice(0, n));
  }

  /**
   * The keys and values of `tokens` (a prompt prefix). With a graph that reads the prefix itself, a
   * prefix computed before on this session (the same weights) serves again: one that `tokens` extend
   * is extended by the new tokens only; one that shares at least three quarters of `tokens` (and 16)
   * is used as it is (each row reads as much of it as its prompt shares). So a chat template's tool
   * list is computed once per weights version, not once per batch.
   */
  async prefixOf(session: ort.InferenceSession, tokens: number[]): Promise<Prefix> {
    if (!this.shape.graphPrefix) return this.computePrefix(session, tokens);
    const cache = this.cached.get(session) ?? [];
    this.cached.set(session, cache);
    let best: Prefix | undefined;
    let m = 0;
    for (const c of cache) {
      const k = commonLength(c.tokens, tokens);
      if (k > m) [best, m] = [c, k];
    }
    let out: Prefix;
    if (best && m === best.n && m === tokens.length) out = best;
    else if (best && m === best.n && m >= 16) out = await this.extendPrefix(session, best, tokens.slice(m));
    else if (best && m >= 16 && 4 * m >= 3 * tokens.length) out = best;
    else out = await this.computePrefix(session, tokens);
    const i = cache.indexOf(out);
    if (i >= 0) cache.splice(i, 1);
    cache.push(out);
    if (cache.length > 4) cache.shift();
    return out;
  }

  /** `prefix` followed by `more` tokens: their keys and values computed reading `prefix`, appended to its own. */
  private async extendPrefix(session: ort.InferenceSession, prefix: Prefix, more: number[]): Promise<Prefix> {
    const { L, H, Dh } = this.shape;
    const n = more.length;
    const N = prefix.n + n;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(more, (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(prefix.n + t));
    const r = await this.graph.run(session, ids, pos, new Float32Array(n).fill(1), 1, n, 0, none, none, 'logits', {
      p: prefix,
      mask: new Float32Array(prefix.n).fill(1),
    });
    const K = Array.from({ length: L }, () => new Float32Array(H * Dh * N));
    const V = Array.from({ length: L }, () => new Float32Array(H * N * Dh));
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        V[l]!.set(prefix.V[l]!.subarray(h * prefix.n * Dh, (h + 1) * prefix.n * Dh), h * N * Dh);
        for (let d = 0; d < Dh; d++) K[l]!.set(prefix.K[l]!.subarray((h * Dh + d) * prefix.n, (h * Dh + d + 1) * prefix.n), (h * Dh + d) * N);
      }
    }
    this.kv.store(r.newK, r.newV, 1, 0, n, K, V, 0, prefix.n, N);
    return { tokens: [...prefix.tokens, ...more], n: N, K, V };
  }

  /** The keys and values of `tokens`, computed in one pass. */
  private async computePrefix(session: ort.InferenceSession, tokens: number[]): Promise<Prefix> {
    const { L } = this.shape;
    const n = tokens.length;
    const none = Array.from({ length: L }, () => new Float32Array(0));
    const ids = BigInt64Array.from(tokens, (t) => BigInt(t));
    const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(t));
    const r = await this.graph.run(session, ids, pos, new Float32Array(n).fill(1), 1, n, 0, none, none);
    const K = Array.from({ length: L }, () => new Float32Array(this.shape.H * this.shape.Dh * n));
    const V = Array.from({ length: L }, () => new Float32Array(this.shape.H * n * this.shape.Dh));
    this.kv.store(r.newK, r.newV, 1, 0, n, K, V, 0, 0, n);
    return { tokens, n, K, V };
  }
}
