/**
 * A local replay server of Anthropic's Messages API, for tests of the Anthropic policy through the
 * real SDK: `POST /v1/messages` on 127.0.0.1 (port 0) answers each request with the next step of
 * a script, and records every request (its headers, its parsed JSON body and when it arrived).
 *
 * The shapes are the API's: a response is a Message (`id` msg_..., `type: 'message'`, `role:
 * 'assistant'`, `model`, `content` blocks, `stop_reason`, `stop_sequence: null`, `usage` with
 * input/output and prompt-cache tokens), its blocks `text` (citations null), `thinking` (with a
 * `signature`), `redacted_thinking` (opaque `data`) and `tool_use` (id toolu_..., name, input);
 * an error is `{type: 'error', error: {type, message}, request_id}` with the API's status and
 * type (400 invalid_request_error, 401 authentication_error, 403 permission_error, 404
 * not_found_error, 413 request_too_large, 429 rate_limit_error, 500 api_error, 529
 * overloaded_error). Each answer carries a `request-id` header, as the API's do.
 *
 * A request past the end of the script is answered 500 (api_error) with `x-should-retry: false`,
 * which the SDK obeys (it does not retry it), and recorded like any other: a test sees it as an
 * extra request, and the policy as a failed one.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'pause_turn' | 'refusal' | 'model_context_window_exceeded';

export interface TextBlock {
  type: 'text';
  text: string;
  citations: null;
}
export interface ThinkingBlock {
  type: 'thinking';
  thinking: string;
  signature: string;
}
export interface RedactedThinkingBlock {
  type: 'redacted_thinking';
  data: string;
}
export interface ToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
}
export type ReplayBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock;

export interface ReplayUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  service_tier: 'standard';
}

/** A Messages API response object. */
export interface ReplayMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: ReplayBlock[];
  stop_reason: StopReason;
  stop_sequence: string | null;
  usage: ReplayUsage;
}

export interface ReplayErrorBody {
  type: 'error';
  error: { type: string; message: string };
  request_id?: string;
}

export type ReplayStep = {
  /** Headers of the answer, e.g. `{'retry-after': '1'}`. */
  headers?: Record<string, string>;
  /** Wait this long before answering (ms). */
  delayMs?: number;
} & ({ status: 200; body: ReplayMessage } | { status: 400 | 401 | 403 | 404 | 413 | 429 | 500 | 503 | 529; body: ReplayErrorBody });

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON body (the raw text when it did not parse). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  /** When it arrived (performance.now(), ms). */
  at: number;
  /** The index of the script step that answered it; -1 past the end of the script. */
  step: number;
}

export interface AnthropicReplay {
  /** The base URL to give the SDK (`baseURL`), without `/v1`. */
  url: string;
  requests: RecordedRequest[];
  close(): Promise<void>;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** An id in the API's style: a prefix, then `01` and 22 base-62 characters. */
export function apiId(prefix: 'msg' | 'toolu' | 'req'): string {
  const tail = [...randomBytes(22)].map((b) => BASE62[b % 62]).join('');
  return `${prefix}_01${tail}`;
}

export function textBlock(text: string): TextBlock {
  return { type: 'text', text, citations: null };
}

/** A thinking block; its signature is opaque base64 (the API checks it when the block comes back). */
export function thinkingBlock(thinking: string, signature = randomBytes(96).toString('base64')): ThinkingBlock {
  return { type: 'thinking', thinking, signature };
}

export function redactedThinkingBlock(data = randomBytes(128).toString('base64')): RedactedThinkingBlock {
  return { type: 'redacted_thinking', data };
}

export function toolUseBlock(name: string, input: Record<string, unknown>, id = apiId('toolu')): ToolUseBlock {
  return { type: 'tool_use', id, name, input };
}

/** A Message as the API returns it. */
export function messageResponse(
  content: ReplayBlock[],
  o: { stop_reason: StopReason; usage?: Partial<ReplayUsage>; model?: string; id?: string },
): ReplayMessage {
  return {
    id: o.id ?? apiId('msg'),
    type: 'message',
    role: 'assistant',
    model: o.model ?? 'claude-haiku-4-5-20251001',
    content,
    stop_reason: o.stop_reason,
    stop_sequence: null,
    usage: { input_tokens: 100, output_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: 'standard', ...o.usage },
  };
}

/** A 200 step answering with `message`. */
export function ok(message: ReplayMessage, headers?: Record<string, string>): ReplayStep {
  return { status: 200, body: message, ...(headers ? { headers } : {}) };
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  503: 'api_error',
  529: 'overloaded_error',
};

/** An error step, with the API's error type for the status unless given. */
export function apiError(
  status: 400 | 401 | 403 | 404 | 413 | 429 | 500 | 503 | 529,
  message: string,
  o: { type?: string; headers?: Record<string, string> } = {},
): ReplayStep {
  return {
    status,
    body: { type: 'error', error: { type: o.type ?? ERROR_TYPES[status]!, message }, request_id: apiId('req') },
    ...(o.headers ? { headers: o.headers } : {}),
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'request-id': apiId('req'), ...headers, 'content-length': String(Buffer.byteLength(text)) });
  res.end(text);
}

export async function startAnthropicReplay(script: ReplayStep[]): Promise<AnthropicReplay> {
  const requests: RecordedRequest[] = [];
  let next = 0;
  const server = createServer((req, res) => {
    const at = performance.now();
    void (async () => {
      const raw = await readBody(req);
      let body: unknown = raw;
      try {
        body = JSON.parse(raw);
      } catch {
        // kept as text
      }
      const path = (req.url ?? '').split('?')[0]!;
      const recorded: RecordedRequest = { method: req.method ?? '', path, headers: { ...req.headers }, body, at, step: -1 };
      requests.push(recorded);
      if (req.method !== 'POST' || path !== '/v1/messages') {
        send(
          res,
          404,
          { type: 'error', error: { type: 'not_found_error', message: `Not found: ${req.method} ${path}` }, request_id: apiId('req') },
          { 'x-should-retry': 'false' },
        );
        return;
      }
      const step = script[next];
      if (!step) {
        send(
          res,
          500,
          { type: 'error', error: { type: 'api_error', message: `replay script exhausted: request ${requests.length} has no step` }, request_id: apiId('req') },
          { 'x-should-retry': 'false' },
        );
        return;
      }
      recorded.step = next++;
      if (step.delayMs) await new Promise((r) => setTimeout(r, step.delayMs));
      send(res, step.status, step.body, step.headers);
    })().catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, { type: 'error', error: { type: 'api_error', message: String(err) } }, { 'x-should-retry': 'false' });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}
