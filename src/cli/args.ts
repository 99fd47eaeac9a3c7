/** Command-line argument helpers. */
import { readFileSync } from 'node:fs';
import { httpUrlProblem, parseThreshold, parseUrlList, splitCommandLine } from '../../lib/index.ts';
import type { ServerSpec } from '../tools/index.ts';

export class UsageError extends Error {}

/** `--fail-under X`: a success rate from 0 to 1, or undefined. */
export function thresholdFlag(value: string | undefined, flag = '--fail-under'): number | undefined {
  try {
    return parseThreshold(value, flag);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function intFlag(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`${flag} must be a non-negative integer, got '${value}'`);
  return n;
}

/** Why `token` (from `source`) cannot serve as the bearer token: a usage error; or nothing. */
export function checkToken(token: string, source: '--token' | 'MCP_GYM_TOKEN'): void {
  const unset = source === '--token' ? 'leave --token out' : 'unset MCP_GYM_TOKEN';
  if (token === '') throw new UsageError(`${source} is empty: a server with an empty token would refuse every request (${unset} to serve without a token)`);
  if (token.trim() !== token) throw new UsageError(`${source} begins or ends with whitespace, which HTTP drops from header values: no request could carry it`);
}

/** A number flag within [min, max]. */
export function numFlag(value: string | undefined, flag: string, o: { min?: number; max?: number } = {}): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (o.min !== undefined && n < o.min) || (o.max !== undefined && n > o.max)) {
    const range = o.min !== undefined && o.max !== undefined ? ` from ${o.min} to ${o.max}` : o.min !== undefined ? ` of at least ${o.min}` : '';
    throw new UsageError(`${flag} must be a number${range}, got '${value}'`);
  }
  return n;
}

/** The base URLs of `--base-urls-file FILE`: one a line, `#` comments and blank lines skipped; a bad line is a usage error naming FILE:line. */
export function baseUrlsFile(file: string): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`--base-urls-file: cannot read ${file}: ${(err as Error).message}`);
  }
  try {
    return parseUrlList(text, file);
  } catch (err) {
    throw new UsageError(`--base-urls-file ${(err as Error).message}`);
  }
}

/** The flags of the API policies (openai:, anthropic:), shared by rollout, eval and bench. */
export const API_FLAGS = {
  'base-url': { type: 'string', multiple: true },
  'base-urls-file': { type: 'string' },
  'api-key-env': { type: 'string' },
  'max-tokens': { type: 'string' },
  'top-p': { type: 'string' },
  'request-timeout-ms': { type: 'string' },
  'max-retries': { type: 'string' },
  'api-concurrency': { type: 'string' },
  'thinking-budget': { type: 'string' },
  thinking: { type: 'string' },
  effort: { type: 'string' },
  'no-token-ids': { type: 'boolean', default: false },
} as const;

export const API_HELP = `API policies (--policy openai:<model> | anthropic:<model>):
  --base-url URL          an OpenAI-compatible server (vLLM, SGLang, llama.cpp, mcp-gym serve-policy), up to /v1;
                          repeated (or --base-urls-file FILE, one URL a line): servers of the same model, each
                          turn to the least-loaded healthy one, a failing one taken out (openai: only)
  --api-key-env NAME      the environment variable with the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)
  --max-tokens N          tokens of one completion (default 1024)     --top-p P
  --request-timeout-ms N  limit of one request (default 120000)      --max-retries N (default 4)
  --api-concurrency N     requests in flight at most (default 8)
  --thinking-budget N     Anthropic extended thinking with budget_tokens N (e.g. claude-sonnet-4-6)
  --thinking adaptive     Anthropic adaptive thinking (e.g. claude-opus-4-6)   --effort low|medium|high|xhigh|max
  --no-token-ids          do not ask the server for vLLM's token ids and logprobs`;

/** API policy options from the flags of API_FLAGS (undefined values left out). */
export function apiOptionsFrom(v: Partial<Record<keyof typeof API_FLAGS, string | string[] | boolean | undefined>>): Record<string, unknown> {
  const s = (k: keyof typeof API_FLAGS) => (typeof v[k] === 'string' ? (v[k] as string) : undefined);
  const urls = [v['base-url'] ?? []].flat().map(String);
  for (const u of urls) {
    const why = httpUrlProblem(u);
    if (why)
      throw new UsageError(`--base-url must be a URL such as http://127.0.0.1:8000/v1, got '${u}'${why.includes('http or https') ? ' (http or https)' : ''}`);
  }
  if (s('base-urls-file') !== undefined) urls.push(...baseUrlsFile(s('base-urls-file')!));
  const twice = urls.find((u, i) => urls.indexOf(u) !== i);
  if (twice) throw new UsageError(`--base-url: ${twice} is given twice (with --base-url or --base-urls-file): each server once`);
  const thinkingBudget = s('thinking-budget') === undefined ? undefined : intFlag(s('thinking-budget'), '--thinking-budget', 0);
  const thinking = s('thinking');
  if (thinking !== undefined && thinking !== 'adaptive')
    throw new UsageError(`--thinking takes 'adaptive' (for a budget: --thinking-budget N), got '${thinking}'`);
  if (thinking !== undefined && thinkingBudget !== undefined) throw new UsageError('--thinking adaptive and --thinking-budget exclude each other');
  if (thinkingBudget !== undefined && thinkingBudget < 1024)
    throw new UsageError(`--thinking-budget must be at least 1024 tokens (the API's minimum), got ${thinkingBudget}`);
  const o: Record<string, unknown> = {
    baseURL: urls.length === 1 ? urls[0] : undefined,
    // Several servers: a fleet (src/agents/fleet.ts) that says on stderr when one is taken out or back.
    baseURLs: urls.length > 1 ? urls : undefined,
    log: urls.length > 1 ? (line: string) => process.stderr.write(`mcp-gym: ${line}\n`) : undefined,
    apiKeyEnv: s('api-key-env'),
    maxTokens: s('max-tokens') === undefined ? undefined : intFlag(s('max-tokens'), '--max-tokens', 0),
    topP: numFlag(s('top-p'), '--top-p', { min: 0, max: 1 }),
    timeoutMs: s('request-timeout-ms') === undefined ? undefined : intFlag(s('request-timeout-ms'), '--request-timeout-ms', 0),
    maxRetries: s('max-retries') === undefined ? undefined : intFlag(s('max-retries'), '--max-retries', 0),
    concurrency: s('api-concurrency') === undefined ? undefined : intFlag(s('api-concurrency'), '--api-concurrency', 0),
    thinking: thinkingBudget !== undefined ? { type: 'enabled', budgetTokens: thinkingBudget } : thinking === 'adaptive' ? { type: 'adaptive' } : undefined,
    effort: s('effort'),
    tokenIds: v['no-token-ids'] === true ? false : undefined,
  };
  if (o.effort !== undefined && !['low', 'medium', 'high', 'xhigh', 'max'].includes(o.effort as string))
    throw new UsageError(`--effort must be low, medium, high, xhigh or max, got '${String(o.effort)}'`);
  return Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined));
}

/** The server of `--stdio "<command line>"` or `--url U` (with `--token`, `--header K:V`), or undefined. */
export function serverFromFlags(values: { stdio?: string; url?: string; openenv?: string; token?: string; header?: string[] }): ServerSpec | undefined {
  if (values.stdio !== undefined) {
    let words: string[];
    try {
      words = splitCommandLine(values.stdio);
    } catch (err) {
      throw new UsageError(`--stdio: ${(err as Error).message}`);
    }
    if (!words.length) throw new UsageError('--stdio needs a command line, e.g. --stdio "npx mcp-gym serve kv"');
    return { transport: 'stdio', command: words[0]!, args: words.slice(1) };
  }
  const url = values.url ?? values.openenv;
  const flag = values.url !== undefined ? '--url' : '--openenv';
  if (url === undefined) return undefined;
  try {
    new URL(url);
  } catch {
    throw new UsageError(`${flag} must be a URL, got '${url}'`);
  }
  const headers: Record<string, string> = {};
  for (const h of values.header ?? []) {
    const i = h.indexOf(':');
    if (i <= 0) throw new UsageError(`--header must be K:V, got '${h}'`);
    headers[h.slice(0, i).trim()] = h.slice(i + 1).trim();
  }
  return {
    // an OpenEnv environment's MCP tools, over its WebSocket session (src/tools/openenv-transport.ts)
    transport: values.url !== undefined ? 'http' : 'openenv',
    url,
    ...(Object.keys(headers).length ? { headers } : {}),
    ...(values.token !== undefined ? { token: values.token } : {}),
  };
}
