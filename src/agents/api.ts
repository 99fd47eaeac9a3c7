/**
 * What the API-backed policies share (OpenAI-compatible and Anthropic): their options, the API
 * key read from the environment (never logged), a concurrency limit, and the usage meter.
 *
 * Retries are the official SDKs' own: on a connection error, 408, 409, 429 and 5xx (Anthropic's
 * 529 "overloaded" included) they wait with jittered exponential backoff (0.5 s doubling to 8 s,
 * less up to a quarter at random) or for the `retry-after` / `retry-after-ms` the server sent
 * when it is under a minute, up to `maxRetries` times; each try has the `timeoutMs` limit.
 */
import pLimit, { type LimitFunction } from 'p-limit';
import type { ApiUsage, TokenUsage } from '../env/index.ts';

export interface ApiOptions {
  /** The server's base URL (OpenAI-compatible: up to and with `/v1`). */
  baseURL?: string;
  /** The environment variable holding the API key (default OPENAI_API_KEY / ANTHROPIC_API_KEY). */
  apiKeyEnv?: string;
  /** Tries after the first on a retryable error (default 4). */
  maxRetries?: number;
  /** Limit of one request, in ms (default 120 000). */
  timeoutMs?: number;
  /** Requests in flight at most (default 8). */
  concurrency?: number;
  temperature?: number;
  topP?: number;
  /** Tokens of one completion at most (default 1024). */
  maxTokens?: number;
  seed?: number;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
}

/** Key of an API from the environment variable `name`; a clear error names the variable (never a value). */
export function apiKeyFrom(name: string, o: { required: boolean; provider: string; flag?: string }): string | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (!o.required) return undefined;
    throw new Error(`${o.provider}: no API key: set the environment variable ${name}${o.flag ? ` (or name another with ${o.flag})` : ''}`);
  }
  return v;
}

/** Requests, failures and tokens of an API client, summed over its life. */
export class UsageMeter {
  private u: ApiUsage = { requests: 0, failed_requests: 0, prompt_tokens: 0, completion_tokens: 0 };

  record(usage: TokenUsage | undefined): void {
    this.u.requests++;
    this.u.prompt_tokens += usage?.prompt_tokens ?? 0;
    this.u.completion_tokens += usage?.completion_tokens ?? 0;
  }

  fail(): void {
    this.u.requests++;
    this.u.failed_requests++;
  }

  snapshot(): ApiUsage {
    return { ...this.u };
  }
}

/** Sums usages (e.g. of a run's trajectories' turns). */
export function addUsage(a: TokenUsage, b: TokenUsage | undefined): TokenUsage {
  return { prompt_tokens: a.prompt_tokens + (b?.prompt_tokens ?? 0), completion_tokens: a.completion_tokens + (b?.completion_tokens ?? 0) };
}

export function concurrencyLimit(o: ApiOptions): LimitFunction {
  return pLimit(Math.max(1, o.concurrency ?? 8));
}

/**
 * One line about an API error: the HTTP status and the server's message, cut to 300 characters.
 * The SDKs' errors carry no request headers, so no key reaches it; a key that a server echoes in
 * its message is cut out all the same.
 */
export function describeApiError(err: unknown, key?: string): string {
  const e = err as { status?: number; message?: string; name?: string };
  // The SDKs' messages begin with the status ("429 Rate limit ..."): it is said once.
  const message = (e.message ?? String(err)).replace(e.status !== undefined ? new RegExp(`^${e.status}\\s+`) : /^$/, '');
  // A connection error says why underneath (ECONNREFUSED, ECONNRESET, ...): that code is said too.
  let code: unknown;
  for (let c = (err as { cause?: unknown }).cause, depth = 0; c && depth < 4 && code === undefined; c = (c as { cause?: unknown }).cause, depth++)
    code = (c as { code?: unknown }).code;
  const why = e.status === undefined && typeof code === 'string' && !message.includes(code) ? ` (${code})` : '';
  let text = `${e.status !== undefined ? `HTTP ${e.status}: ` : ''}${message}${why}`.replace(/\s+/g, ' ').trim();
  if (key) text = text.split(key).join('[key]');
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

/** A base URL as it may be shown and recorded: without user, password, query or fragment (a key never rides along). */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return url.replace(/[?#].*$/, '');
  }
}
