/**
 * GenerationBatcher: concurrent generation requests sampled together, continuously
 * (OnnxModel.serve) or in static batches (OnnxModel.generate), on a model that can be swapped.
 */
import type { RandomFn } from '../../../lib/index.ts';
import type { SamplingOptions } from '../sampling.ts';
import type { Generation, RowSource } from './generation.ts';
import type { OnnxModel } from './model.ts';

/** One request to a GenerationBatcher: a prompt and its row's settings. */
export interface BatchRequest {
  prompt: number[];
  maxNewTokens: number;
  /** Default: the batcher's. */
  sampling?: SamplingOptions;
  /** Default: the batcher's shared random source (rows then draw from it in turn). */
  rng?: RandomFn;
  onToken?: (token: number, logprob: number) => void;
  /** Aborted while queued: the request is dropped (rejected); while sampled: its row stops. */
  signal?: AbortSignal;
  /** Keep the row's keys and values for a later request with the same key (RowOptions.cacheKey). */
  cacheKey?: string;
}

/** A generation and the version of the weights that sampled it. */
export interface BatchedGeneration extends Generation {
  version: number;
}

export interface BatcherOptions {
  /** Rows sampled together at most. Default 32. */
  maxBatch?: number;
  /**
   * `continuous` (default): requests join the running batch between decode steps. `static`: a
   * batch is the requests queued when the previous one ends (after waiting up to `gatherMs` for
   * as many as that one had), sampled together to the end (OnnxModel.generate): clients that are
   * answered together come back together, and their prompts' common prefix is computed once.
   */
  mode?: 'continuous' | 'static';
  /** static: how long to wait for the previous batch's number of requests. Default 5 ms. */
  gatherMs?: number;
  /** The settings of requests that bring none. */
  sampling: SamplingOptions;
  rng: RandomFn;
}

export interface BatcherStats {
  /** Runs of the sampler (a run lasts while rows keep coming), and the requests they sampled. */
  runs: number;
  rows: number;
  /** Decode steps, and the rows they stepped in all (rowSteps / steps: the mean batch). */
  steps: number;
  rowSteps: number;
  /** The most rows of one decode step. */
  largestBatch: number;
  /** Rows being sampled now, and requests waiting to join. */
  running: number;
  queued: number;
}

interface Queued {
  request: BatchRequest;
  resolve: (g: BatchedGeneration) => void;
  reject: (e: unknown) => void;
}

/**
 * Samples concurrent generation requests together with continuous batching (OnnxModel.serve):
 * a request joins the running batch at the next decode step, and is answered as soon as its own
 * row finishes; rows keep their own sampling settings, token limit and random source. The model
 * can be swapped: rows finish on the model they started with, and new rows go to the new one.
 */
export class GenerationBatcher {
  private readonly queue: Queued[] = [];
  private running = 0;
  private draining = false;
  private current?: { model: OnnxModel; done: Promise<void> };
  private closed = false;
  private readonly counts = { runs: 0, rows: 0, steps: 0, rowSteps: 0, largestBatch: 0 };

  constructor(
    private active: OnnxModel,
    private readonly options: BatcherOptions,
  ) {}

  /** The model new rows are sampled with. */
  get model(): OnnxModel {
    return this.active;
  }

  submit(request: BatchRequest): Promise<BatchedGeneration> {
    if (this.closed) return Promise.reject(new Error('the batcher is closed'));
    if (request.signal?.aborted) return Promise.reject(request.signal.reason ?? new Error('aborted'));
    const p = request.prompt;
    if (p.length === 0) return Promise.reject(new Error('generate: an empty prompt'));
    if (p.length >= this.active.maxLen)
      return Promise.reject(new Error(`generate: a prompt of ${p.length} tokens does not fit the context of ${this.active.maxLen}`));
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  stats(): BatcherStats {
    return { ...this.counts, running: this.running, queued: this.queue.length };
  }

  /**
   * Makes `next` the model of the rows to come; resolves with the previous model once no row
   * runs on it any more (the caller closes it).
   */
  async swap(next: OnnxModel): Promise<OnnxModel> {
    const previous = this.active;
    this.active = next;
    while (this.current?.model === previous) await this.current.done;
    return previous;
  }

  /** Rejects the queued requests and waits for the running rows. The model is the caller's to close. */
  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queue.splice(0)) q.reject(new Error('the batcher is closed'));
    while (this.current) await this.current.done;
  }

  /** Runs the sampler while requests come. */
  private async drain(): Promise<void> {
    this.draining = true;
    try {
      // Let the other requests of this tick queue theirs too (their common prefix is computed once).
      await new Promise((r) => setImmediate(r));
      while (this.queue.length && !this.closed) {
        if (this.options.mode === 'static') await this.runStatic();
        else await this.run();
      }
    } finally {
      this.draining = false;
    }
  }

  private lastBatch = 1;

  /** One static batch: the queued requests (after the gather wait), sampled together to the end. */
  private async runStatic(): Promise<void> {
    const deadline = performance.now() + (this.options.gatherMs ?? 5);
    while (this.queue.length < this.lastBatch && performance.now() < deadline && !this.closed) await new Promise((r) => setTimeout(r, 1));
    const batch: Queued[] = [];
    for (const q of this.queue.splice(0, this.options.maxBatch ?? 32)) {
      if (q.request.signal?.aborted) q.reject(q.request.signal.reason ?? new Error('aborted'));
      else batch.push(q);
    }
    if (batch.length === 0) return;
    this.lastBatch = batch.length;
    const model = this.active;
    let finish!: () => void;
    this.current = { model, done: new Promise<void>((r) => (finish = r)) };
    const c = this.counts;
    c.runs++;
    c.rows += batch.length;
    c.largestBatch = Math.max(c.largestBatch, batch.length);
    this.running += batch.length;
    const d = this.options;
    try {
      const gens = await model.generate(
        batch.map((q) => q.request.prompt),
        {
          ...d.sampling,
          maxNewTokens: Math.max(...batch.map((q) => q.request.maxNewTokens)),
          rng: d.rng,
          rows: batch.map(({ request: r }) => ({
            sampling: r.sampling ?? d.sampling,
            maxNewTokens: r.maxNewTokens,
            rng: r.rng ?? d.rng,
            onToken: r.onToken,
            signal: r.signal,
          })),
          onStep: (rows) => {
            c.steps++;
            c.rowSteps += rows;
          },
        },
      );
      batch.forEach((q, i) => q.resolve({ ...gens[i]!, version: model.version }));
    } catch (err) {
      for (const q of batch) q.reject(err);
    } finally {
      this.running -= batch.length;
      this.current = undefined;
      finish();
    }
  }

  private async run(): Promise<void> {
    const model = this.active;
    let finish!: () => void;
    this.current = { model, done: new Promise<void>((r) => (finish = r)) };
    const c = this.counts;
    c.runs++;
    const taken = new Set<Queued>();
    const defaults = this.options;
    const source: RowSource = {
      pending: () => this.queue.slice(0, defaults.maxBatch ?? 32).map((q) => q.request),
      peek: () => {
        // Requests whose client went away are dropped; new rows wait for a swapped-in model.
        while (this.queue[0]?.request.signal?.aborted) {
          const q = this.queue.shift()!;
          q.reject(q.request.signal!.reason ?? new Error('aborted'));
        }
        return this.active === model && !this.closed ? this.queue[0]?.request : undefined;
      },
      take: () => {
        const q = this.queue.shift();
        if (!q) return undefined;
        const r = q.request;
        taken.add(q);
        this.running++;
        c.rows++;
        return {
          prompt: r.prompt,
          opts: {
            sampling: r.sampling ?? defaults.sampling,
            maxNewTokens: r.maxNewTokens,
            rng: r.rng ?? defaults.rng,
            onToken: r.onToken,
            signal: r.signal,
            ...(r.cacheKey !== undefined ? { cacheKey: r.cacheKey } : {}),
          },
          onDone: (g, version) => {
            taken.delete(q);
            this.running--;
            q.resolve({ ...g, version });
          },
        };
      },
    };
    try {
      await model.serve(source, {
        maxRows: defaults.maxBatch ?? 32,
        onStep: (rows) => {
          c.steps++;
          c.rowSteps += rows;
          c.largestBatch = Math.max(c.largestBatch, rows);
        },
      });
    } catch (err) {
      for (const q of taken) q.reject(err);
      this.running -= taken.size;
    } finally {
      this.current = undefined;
      finish();
    }
  }
}
