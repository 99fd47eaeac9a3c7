/**
 * A fleet of OpenAI-compatible servers sampling one policy (`--base-url` given several times:
 * several `mcp-gym serve-policy` or vLLM processes serving the same model). One `OpenAIPolicy`
 * per server, sharing the episodes' token sequences, so that an episode may move between them.
 *
 * Routing: each request (a turn) goes to the healthy server with the fewest requests in flight;
 * on a tie, to the server the episode's previous turn went to (its prompt is in that server's
 * prefix cache), then to the first in the order given.
 *
 * Failover: a request that fails for want of a server (no connection, a timeout, HTTP 408, 429
 * or 5xx) takes its server out (one line logged, naming the URL and the error) and the same turn
 * is sent to another healthy server: the episode goes on, and is recorded once. A 4xx answer
 * (a prompt longer than the context, a refused request) is the episode's, as with one server.
 * A server taken out is probed again later (`GET /v1/models`, after 2 s, doubling to 60 s); when it
 * answers it is first brought to the fleet's weights (`sync`: a reload, or the current LoRA
 * adapter) and only then gets requests again. When no server is healthy a request waits for one,
 * up to `waitMs`, then fails naming every server and its last error.
 *
 * Each turn records the server that sampled it (`policyServer`: its URL without credentials or
 * query) and the version of the weights that server had (`policyVersion`).
 */
import type { ApiUsage, ChatModel, ChatRequest, ChatResult, Observation, Policy, PolicyAction } from '../env/index.ts';
import { describeApiError, shownUrl } from './api.ts';

export { shownUrl };
import { ApiRequestError, OpenAIPolicy, type OpenAIPolicyOptions } from './openai.ts';

/** The servers' options (each server's `OpenAIPolicy`; `maxRetries` defaults to 0 here), and the fleet's own. */
export interface PolicyFleetOptions extends Omit<OpenAIPolicyOptions, 'baseURL' | 'sequences'> {
  /** How long a request waits for a healthy server when none is, in ms (default: timeoutMs, else 120 000). */
  waitMs?: number;
  /** The first wait before probing a server taken out, in ms, doubled after each failed probe up to probeMaxMs (defaults 2 000 and 60 000). */
  probeMinMs?: number;
  probeMaxMs?: number;
  /** Hears the fleet's lines (a server taken out, back). */
  log?: (line: string) => void;
  /** Brings a server that answered its probe to the fleet's weights before it gets requests again; throws when it cannot. */
  sync?: (server: FleetServer) => Promise<void>;
}

/** `healthy`: gets requests; `out`: taken out, probed later; `syncing`: answered its probe, being brought to the fleet's weights. */
export type FleetServerState = 'healthy' | 'out' | 'syncing';

/** What a fleet says of one of its servers (the metrics' per-server figures). */
export interface FleetServerStats {
  url: string;
  state: FleetServerState;
  healthy: boolean;
  in_flight: number;
  /** Turns it sampled, requests that failed there, times it was taken out, weight loads it answered: since the fleet started. */
  turns: number;
  failed_requests: number;
  failures: number;
  pushes: number;
  version?: string | number;
  /** Why it was last taken out (or last failed its probe). */
  last_error?: string;
}

/** Whether a request's failure is its server's (no answer, a timeout, 408, 429, 5xx): the turn may go to another server. */
export function isServerFailure(err: unknown): boolean {
  if (!(err instanceof ApiRequestError)) return false;
  return err.status === undefined || err.status === 408 || err.status === 429 || err.status >= 500;
}

/** One server of a fleet: its policy (its own client, model and weights version) and its state. */
export class FleetServer {
  state: FleetServerState = 'healthy';
  inFlight = 0;
  /** The most requests it had in flight at once. */
  peakInFlight = 0;
  turns = 0;
  failedRequests = 0;
  failures = 0;
  /** Weight loads (reloads, adapters) it answered; counted by whoever pushes them. */
  pushes = 0;
  lastError?: string;
  /** Bumped each time it is taken out: a probe that began before is void. */
  epoch = 0;
  backoffMs: number;
  timer?: NodeJS.Timeout;
  private lock: Promise<unknown> = Promise.resolve();

  constructor(
    readonly index: number,
    /** The URL as shown (shownUrl). */
    readonly url: string,
    readonly policy: OpenAIPolicy,
    probeMinMs: number,
  ) {
    this.backoffMs = probeMinMs;
  }

  /** The version of the weights it samples with now. */
  get version(): string | number | undefined {
    return this.policy.version;
  }

  /** Runs `fn` once this server's earlier pushes ended: loads to one server never overlap. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => {});
    return run;
  }
}

export class PolicyFleet implements Policy, ChatModel {
  readonly id: string;
  readonly servers: FleetServer[];
  private readonly sequences = new Map<string, number[]>();
  private readonly lastServer = new Map<string, FleetServer>();
  private readonly waiters = new Set<() => void>();
  private readonly waitMs: number;
  private readonly probeMinMs: number;
  private readonly probeMaxMs: number;
  private fleetVersion: string | number | undefined;
  private closed = false;

  constructor(
    readonly baseModel: string,
    baseURLs: string[],
    private readonly options: PolicyFleetOptions = {},
  ) {
    if (baseURLs.length === 0) throw new Error('openai: a fleet needs at least one base URL (--base-url URL)');
    const shown = baseURLs.map(shownUrl);
    const twice = shown.find((u, i) => shown.indexOf(u) !== i);
    if (twice) throw new Error(`openai: the server ${twice} is given twice (--base-url): each server once`);
    this.id = `openai:${baseModel}`;
    this.waitMs = options.waitMs ?? options.timeoutMs ?? 120_000;
    this.probeMinMs = options.probeMinMs ?? 2_000;
    this.probeMaxMs = Math.max(this.probeMinMs, options.probeMaxMs ?? 60_000);
    const { waitMs: _w, probeMinMs: _a, probeMaxMs: _b, log: _l, sync: _s, ...api } = options;
    this.servers = baseURLs.map(
      // The SDK's retries are off unless asked for: another server is the retry, and is faster.
      (url, i) =>
        new FleetServer(i, shown[i]!, new OpenAIPolicy(baseModel, { maxRetries: 0, ...api, baseURL: url, sequences: this.sequences }), this.probeMinMs),
    );
  }

  /** The fleet's weights: the version set by whoever keeps the servers on them (setVersion), else the first healthy server's. */
  get version(): string | number | undefined {
    return this.fleetVersion ?? this.servers.find((s) => s.state === 'healthy')?.version;
  }

  setVersion(version: string | number | undefined): void {
    this.fleetVersion = version;
  }

  async act(obs: Observation, signal?: AbortSignal): Promise<PolicyAction> {
    return this.routed(obs.episodeId, signal, async (s) => {
      const action = await s.policy.act(obs, signal);
      s.turns++;
      this.lastServer.set(obs.episodeId, s);
      return { ...action, policyServer: s.url };
    });
  }

  async complete(request: ChatRequest, signal?: AbortSignal): Promise<ChatResult> {
    return this.routed(undefined, signal, (s) => s.policy.complete(request, signal));
  }

  endEpisode(episodeId: string): void {
    this.sequences.delete(episodeId);
    this.lastServer.delete(episodeId);
  }

  usage(): ApiUsage {
    const u: ApiUsage = { requests: 0, failed_requests: 0, prompt_tokens: 0, completion_tokens: 0 };
    for (const s of this.servers) {
      const x = s.policy.usage();
      u.requests += x.requests;
      u.failed_requests += x.failed_requests;
      u.prompt_tokens += x.prompt_tokens;
      u.completion_tokens += x.completion_tokens;
    }
    return u;
  }

  stats(): FleetServerStats[] {
    return this.servers.map((s) => ({
      url: s.url,
      state: s.state,
      healthy: s.state === 'healthy',
      in_flight: s.inFlight,
      turns: s.turns,
      failed_requests: s.failedRequests,
      failures: s.failures,
      pushes: s.pushes,
      ...(s.version !== undefined ? { version: s.version } : {}),
      ...(s.lastError !== undefined ? { last_error: s.lastError } : {}),
    }));
  }

  /**
   * Takes a server out (no more requests), logging why, and schedules its probe. A server already
   * out keeps its first reason logged and only its last error is updated.
   */
  takeOut(s: FleetServer, why: string): void {
    s.lastError = why;
    if (s.state === 'out') return;
    s.state = 'out';
    s.epoch++;
    s.failures++;
    this.options.log?.(`policy: the server ${s.url} is taken out: ${why}; probed again in ${s.backoffMs / 1000} s`);
    this.schedule(s);
  }

  /** Gives a server taken out its requests again (it just took the fleet's weights: a push that answered). */
  bringBack(s: FleetServer): void {
    if (this.closed || s.state === 'healthy') return;
    clearTimeout(s.timer);
    s.timer = undefined;
    s.epoch++; // a probe in progress is void
    this.markHealthy(s);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.servers) clearTimeout(s.timer);
    for (const wake of this.waiters) wake();
    await Promise.all(this.servers.map((s) => s.policy.close()));
    this.sequences.clear();
    this.lastServer.clear();
  }

  /** A request through the fleet: to the server `pick` chooses, again elsewhere while servers fail. */
  private async routed<T>(episodeId: string | undefined, signal: AbortSignal | undefined, send: (s: FleetServer) => Promise<T>): Promise<T> {
    // A turn fails at most twice as many times as there are servers: a request that fails wherever it
    // goes (a prompt that always gets a 500, or always outlasts the timeout) is the episode's failure,
    // not a reason to cycle through take-out, probe and sync for ever. (Servers that are all out in the
    // meantime are waited for, up to waitMs, as any request waits.)
    const failed: FleetServer[] = [];
    for (;;) {
      const s = await this.pick(episodeId, signal); // its request counted in flight already
      const epoch = s.epoch;
      try {
        const out = await send(s);
        s.backoffMs = this.probeMinMs; // it answers requests again, not only probes
        return out;
      } catch (err) {
        if (signal?.aborted || !isServerFailure(err)) throw err;
        s.failedRequests++;
        // A request sent before the server was taken out and brought back says nothing of it now.
        if (s.epoch === epoch) this.takeOut(s, (err as Error).message);
        failed.push(s);
        if (failed.length >= 2 * this.servers.length) {
          throw new ApiRequestError(
            `${(err as Error).message} (the turn failed ${failed.length} times: ${[...new Set(failed.map((f) => f.url))].join(', ')})`,
            (err as ApiRequestError).status,
            (err as ApiRequestError).code,
          );
        }
      } finally {
        s.inFlight--;
      }
    }
  }

  /**
   * The healthy server with the fewest requests in flight (tie: the episode's last server, then the
   * first), its count already raised for the request; waits up to waitMs for one.
   */
  private async pick(episodeId: string | undefined, signal: AbortSignal | undefined): Promise<FleetServer> {
    const deadline = Date.now() + this.waitMs;
    for (;;) {
      if (this.closed) throw new Error(`openai ${this.baseModel}: the fleet of servers is closed`);
      if (signal?.aborted) throw new Error('the request was cancelled');
      const last = episodeId === undefined ? undefined : this.lastServer.get(episodeId);
      let best: FleetServer | undefined;
      for (const s of this.servers) {
        if (s.state !== 'healthy') continue;
        if (!best || s.inFlight < best.inFlight || (s.inFlight === best.inFlight && s === last)) best = s;
      }
      if (best) {
        // Counted here, before any await: requests choosing at the same time see it.
        best.inFlight++;
        best.peakInFlight = Math.max(best.peakInFlight, best.inFlight);
        return best;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        const each = this.servers.map((s) => `${s.url} (${s.state}): ${s.lastError ?? 'no error recorded'}`).join('; ');
        throw new Error(`openai ${this.baseModel}: no server of the ${this.servers.length} answered within ${Math.round(this.waitMs / 100) / 10} s: ${each}`);
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waiters.delete(done);
          signal?.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.waiters.add(done);
        signal?.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** The probe of a server taken out, after its backoff (doubled each time, up to probeMaxMs). */
  private schedule(s: FleetServer): void {
    if (this.closed || s.timer) return;
    const delay = s.backoffMs;
    s.backoffMs = Math.min(this.probeMaxMs, s.backoffMs * 2);
    s.timer = setTimeout(() => {
      s.timer = undefined;
      void this.probe(s);
    }, delay);
    s.timer.unref();
  }

  /** Probes a server (GET /v1/models), brings it to the fleet's weights (sync), and only then gives it requests again. */
  private async probe(s: FleetServer): Promise<void> {
    if (this.closed || s.state !== 'out') return;
    const epoch = s.epoch;
    s.state = 'syncing';
    let answered = false;
    try {
      await s.policy.models();
      answered = true;
      if (this.closed || s.epoch !== epoch) return; // no weights pushed for a fleet that is closed (the server may serve another run now)
      const sync = this.options.sync;
      if (sync) await s.exclusive(() => sync(s));
    } catch (err) {
      if (s.epoch !== epoch) return; // taken out again meanwhile: that probe is scheduled
      s.state = 'out';
      s.lastError = answered ? (err as Error).message : describeApiError(err);
      // A server that answers yet cannot take the fleet's weights is said so (a silent server is not, each time).
      if (answered)
        this.options.log?.(
          `policy: the server ${s.url} answers but could not be brought to the fleet's weights: ${s.lastError}; probed again in ${s.backoffMs / 1000} s`,
        );
      this.schedule(s);
      return;
    }
    if (this.closed || s.epoch !== epoch) return;
    this.markHealthy(s);
  }

  private markHealthy(s: FleetServer): void {
    s.state = 'healthy'; // its probe delay is reset by a request that succeeds (routed), not by a probe
    this.options.log?.(`policy: the server ${s.url} is back${s.version !== undefined ? ` (weights version ${s.version})` : ''}`);
    for (const wake of this.waiters) wake();
  }
}
