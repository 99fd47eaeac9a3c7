/**
 * The sampler: rows prefilled into a lane's slots, then decode steps that sample each row's next
 * token from its scores (logits, or the graph's probabilities) until every row has ended.
 */
import type * as ort from 'onnxruntime-node';
import { sampleFromProbs, samplesWholeVocabulary, sampleToken, type SamplingOptions } from '../sampling.ts';
import type { Graph } from './graph.ts';
import type { KvSlots, Lane, LaneRow, ModelShape, Prefix, Scores } from './kv-slots.ts';
import { commonLength } from './prefix-cache.ts';
import type { RowCaches } from './row-cache.ts';

/** Prefill results a lane keeps for rows with the same prompt (LaneSampler.prefilled). */
const PREFILLS_KEPT = 32;

/** A prompt's prefill: from which position it ran, and the graph's results. */
type Prefilled = { p0: number; r: Awaited<ReturnType<Graph['run']>> };

/** Samples the lanes of an OnnxModel (read through its `shape`), with its graph, its slots and the rows it keeps. */
export class LaneSampler {
  constructor(
    private readonly shape: ModelShape,
    private readonly graph: Graph,
    private readonly kv: KvSlots,
    private readonly rowCaches: RowCaches,
  ) {}

  /**
   * What rows with these sampling options sample from: the graph's probabilities when it returns
   * them (Hugging Face exports) and every row samples the whole vocabulary at temperature 1 (a
   * cumulative walk, no exponential per vocabulary entry), else the logits.
   */
  scoresFor(session: ort.InferenceSession, options: SamplingOptions[]): Scores {
    if (!session.outputNames.includes('probs')) return 'logits';
    return options.every((o) => o.temperature === 1 && samplesWholeVocabulary(o, this.shape.V)) ? 'probs' : 'logits';
  }

  /** What a graph run over these rows of the lane asks for (Lane.perRow), or the lane's fixed scores. */
  private runScores(lane: Lane, rows: { opts: { sampling: SamplingOptions } }[]): Scores {
    return lane.perRow
      ? this.scoresFor(
          lane.session,
          rows.map((r) => r.opts.sampling),
        )
      : lane.scores;
  }

  /**
   * Prefill results of a lane's prompts: rows with the same prompt (a group's first turn) share one graph
   * run. The last PREFILLS_KEPT prompts of a lane are kept (a continuous batch's lane lasts a whole rollout).
   */
  private readonly prefilled = new WeakMap<Lane, Map<string, Prefilled>>();

  private memo(lane: Lane): Map<string, Prefilled> {
    let m = this.prefilled.get(lane);
    if (!m) this.prefilled.set(lane, (m = new Map()));
    return m;
  }

  private remember(lane: Lane, key: string, value: Prefilled): void {
    const m = this.memo(lane);
    m.set(key, value);
    if (m.size > PREFILLS_KEPT) m.delete(m.keys().next().value!);
  }

  /**
   * Prefills a row into the lane's next slot: after the keys and values its episode kept from its
   * last turn (RowOptions.cacheKey, the same weights: only what the environment added and the last
   * sampled token are new), else after the shared prefix when the prompt starts with it; its keys and
   * values, its mask, and the logits of its first token. A prompt prefilled before in this lane (the
   * group's rows share their first prompt) is not run again: its results are copied.
   */
  async laneAdd(lane: Lane, row: LaneRow): Promise<void> {
    if (this.shape.graphPrefix) return this.laneAddRead(lane, row);
    const { L, V } = this.shape;
    const p = row.prompt;
    this.kv.laneReserve(lane, lane.B + 1, Math.min(this.shape.maxLen, p.length + (lane.elastic ? 1 : row.opts.maxNewTokens)));
    const kept = this.rowCaches.reusable(lane, row);
    const prefix = kept ?? (lane.prefix && lane.prefix.n < p.length && lane.prefix.tokens.every((t, i) => p[i] === t) ? lane.prefix : undefined);
    const scores = this.runScores(lane, [row]);
    const key = kept ? undefined : `${scores}:${p.join(',')}`;
    let done = key === undefined ? undefined : this.memo(lane).get(key);
    if (!done) {
      const p0 = prefix?.n ?? 0;
      const n = p.length - p0;
      const none = Array.from({ length: L }, () => new Float32Array(0));
      const ids = BigInt64Array.from(p.slice(p0), (t) => BigInt(t));
      const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(p0 + t));
      const r = await this.graph.run(lane.session, ids, pos, new Float32Array(p0 + n).fill(1), 1, n, p0, prefix?.K ?? none, prefix?.V ?? none, scores);
      done = { p0, r };
      if (key !== undefined) this.remember(lane, key, done);
    }
    const { p0, r } = done;
    const n = p.length - p0;
    if (kept) row.reused = p0;
    row.scores = scores;
    const b = lane.B;
    const C = lane.C;
    lane.logits.set(r.logits, b * V);
    if (prefix) this.kv.copyPrefix(prefix, lane.K, lane.V, b, C);
    this.kv.store(r.newK, r.newV, 1, 0, n, lane.K, lane.V, b, p0, C);
    lane.mask.fill(0, b * C, (b + 1) * C);
    lane.mask.fill(1, b * C, b * C + p.length);
    row.next = p.length;
    row.slot = b;
    lane.rows.push(row);
    lane.order.push(row);
    lane.B++;
  }

  /**
   * laneAdd for a graph that reads the shared prefix itself: the row reads the lane prefix's first
   * `base` tokens (as many as its prompt shares, at most all but its last token); its slots hold the
   * rest of the prompt, prefilled on its own.
   */
  private async laneAddRead(lane: Lane, row: LaneRow): Promise<void> {
    const { L, V, H, Dh } = this.shape;
    const p = row.prompt;
    const kept = this.rowCaches.reusable(lane, row);
    const base = kept ? kept.base : lane.prefix ? Math.min(commonLength(lane.prefix.tokens, p), p.length - 1) : 0;
    this.kv.laneReserve(lane, lane.B + 1, Math.min(this.shape.maxLen - base, p.length - base + (lane.elastic ? 1 : row.opts.maxNewTokens)));
    const c0 = kept?.n ?? 0; // slots taken from the kept cache
    const n = p.length - base - c0; // tokens to prefill
    const scores = this.runScores(lane, [row]);
    // A fresh row whose prompt a row of this lane had (a group's first turn): its results are copied.
    const key = kept ? undefined : `${scores}:${base}:${p.join(',')}`;
    let r = key === undefined ? undefined : this.memo(lane).get(key)?.r;
    if (!r) {
      const none = Array.from({ length: L }, () => new Float32Array(0));
      const ids = BigInt64Array.from(p.slice(base + c0), (t) => BigInt(t));
      const pos = BigInt64Array.from({ length: n }, (_, t) => BigInt(base + c0 + t));
      const read = lane.prefix ? { p: lane.prefix, mask: new Float32Array(lane.prefix.n).fill(1, 0, base) } : undefined;
      r = await this.graph.run(lane.session, ids, pos, new Float32Array(c0 + n).fill(1), 1, n, c0, kept?.K ?? none, kept?.V ?? none, scores, read);
      if (key !== undefined) this.remember(lane, key, { p0: base, r });
    }
    row.scores = scores;
    const b = lane.B;
    const C = lane.C;
    lane.logits.set(r.logits, b * V);
    if (kept) {
      for (let l = 0; l < L; l++) {
        for (let h = 0; h < H; h++) {
          const bh = b * H + h;
          lane.V[l]!.set(kept.V[l]!.subarray(h * c0 * Dh, (h + 1) * c0 * Dh), bh * C * Dh);
          for (let d = 0; d < Dh; d++) lane.K[l]!.set(kept.K[l]!.subarray((h * Dh + d) * c0, (h * Dh + d + 1) * c0), (bh * Dh + d) * C);
        }
      }
      row.reused = c0;
    }
    this.kv.store(r.newK, r.newV, 1, 0, n, lane.K, lane.V, b, c0, C);
    lane.mask.fill(0, b * C, (b + 1) * C);
    lane.mask.fill(1, b * C, b * C + c0 + n);
    row.base = base;
    row.next = c0 + n;
    row.slot = b;
    lane.rows.push(row);
    lane.order.push(row);
    lane.B++;
  }

  /**
   * Samples the lane's rows until none is left: each step samples every row's next token from
   * its logits, takes finished rows out, and feeds the others' tokens at their next slots. With
   * `admit`, rows join before each step. A row ends with any of the `stop` tokens.
   */
  async runLane(lane: Lane, stop: readonly number[], admit?: () => Promise<void>, onStep?: (rows: number) => void): Promise<void> {
    const { V } = this.shape;
    const scratch = new Float64Array(2 * V);
    const finished: LaneRow[] = [];
    for (;;) {
      if (admit) await admit();
      if (lane.B === 0) return;
      finished.length = 0;
      for (const row of lane.order) {
        const o = row.opts;
        if (o.signal?.aborted) {
          finished.push(row);
          continue;
        }
        const { token, logprob } =
          (row.scores ?? lane.scores) === 'probs'
            ? sampleFromProbs(lane.logits, row.slot * V, V, o.rng)
            : sampleToken(lane.logits, row.slot * V, V, o.sampling, o.rng, scratch);
        const g = row.gen;
        g.tokens.push(token);
        g.logprobs.push(logprob);
        if (stop.includes(token)) {
          g.stopped = true;
          finished.push(row);
        } else if (g.tokens.length >= o.maxNewTokens || (!lane.elastic && row.next >= lane.C) || row.base + row.next + 1 >= this.shape.maxLen) {
          finished.push(row);
        }
        if (o.onToken) {
          try {
            o.onToken(token, logprob);
          } catch {
            // a listener's failure is its own; the batch goes on
          }
        }
      }
      if (finished.length) {
        for (const row of finished) this.rowCaches.keepRow(lane, row);
        // Highest cache row first: the row moved into a freed one has not finished.
        for (const row of [...finished].sort((a, b) => b.slot - a.slot)) this.kv.laneRemove(lane, row.slot);
        lane.order = lane.order.filter((r) => !finished.includes(r));
        for (const row of finished) row.onDone?.(row.gen);
      }
      if (lane.B === 0) continue;
      if (lane.elastic) this.fit(lane);
      onStep?.(lane.B);
      await this.laneStep(lane);
    }
  }

  /**
   * An elastic lane's capacity before a decode step: room for the longest row's next token, in steps of
   * 32 slots; grown by one step of slack when a row has filled it, shrunk when it is two steps over.
   */
  private fit(lane: Lane): void {
    let need = 0;
    for (const row of lane.order) need = Math.max(need, row.next + 1);
    const tight = Math.ceil(need / 32) * 32;
    if (need > lane.C || lane.C > tight + 64) this.kv.laneFit(lane, Math.min(this.shape.maxLen, tight + 32));
  }

  /** One decode step: every row's last sampled token at its next slot. */
  private async laneStep(lane: Lane): Promise<void> {
    const { B, C } = lane;
    const { H, Dh, V } = this.shape;
    if (!lane.step || lane.step.ids.length < B || lane.step.mask.length < B * (C + 1)) {
      lane.step = { ids: new BigInt64Array(lane.slots), pos: new BigInt64Array(lane.slots), mask: new Float32Array(lane.slots * (lane.C + 1)) };
    }
    const ids = lane.step.ids.subarray(0, B);
    const pos = lane.step.pos.subarray(0, B);
    const mask = lane.step.mask.subarray(0, B * (C + 1));
    for (let b = 0; b < B; b++) {
      const row = lane.rows[b]!;
      ids[b] = BigInt(row.gen.tokens[row.gen.tokens.length - 1]!);
      pos[b] = BigInt(row.base + row.next);
      mask.set(lane.mask.subarray(b * C, (b + 1) * C), b * (C + 1));
      mask[b * (C + 1) + C] = 1;
    }
    // The prefix positions each row reads (graphs that read the shared prefix).
    let read: { p: Prefix; mask: Float32Array } | undefined;
    if (this.shape.graphPrefix && lane.prefix) {
      const P = lane.prefix.n;
      const pm = new Float32Array(B * P);
      for (let b = 0; b < B; b++) pm.fill(1, b * P, b * P + lane.rows[b]!.base);
      read = { p: lane.prefix, mask: pm };
    }
    const scores = this.runScores(lane, lane.rows);
    const r = await this.graph.run(
      lane.session,
      ids,
      pos,
      mask,
      B,
      1,
      C,
      lane.K.map((k) => k.subarray(0, B * H * Dh * C)),
      lane.V.map((v) => v.subarray(0, B * H * C * Dh)),
      scores,
      read,
    );
    for (let b = 0; b < B; b++) {
      const row = lane.rows[b]!;
      this.kv.store(r.newK, r.newV, B, b, 1, lane.K, lane.V, b, row.next, C);
      lane.mask[b * C + row.next] = 1;
      row.next++;
      row.scores = scores;
    }
    lane.logits.set(r.logits.subarray(0, B * V));
  }
}
