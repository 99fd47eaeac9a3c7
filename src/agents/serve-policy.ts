/**
 * The embedded policy behind an OpenAI-compatible HTTP server, in vLLM's formats, so that any
 * OpenAI client (and code written against vLLM) can sample from it:
 *
 *   GET  /v1/models             the served model, with `max_model_len` (its context) and `version`
 *   GET  /v1/models/<id>        the same, one model
 *   POST /v1/chat/completions   chat completions, tools, logprobs, token ids, streaming (SSE)
 *   POST /v1/reload             new weights: `{}` reloads the served directory when its version
 *                               changed; `{"model_dir": "..."}` switches to another directory
 *                               (same vocabulary and context); replies {version, model_dir, reloaded}
 *   GET  /health                200 while the server runs
 *
 * Every route checks the Host (and Origin, when sent) header against localhost names, the bound
 * host and `allowedHosts`, and, with a `token`, the `Authorization: Bearer <token>` header (the
 * scheme in any case); errors have OpenAI's shape `{error: {message, type, param, code}}`.
 *
 * Prompts are the model's own chat template (template.ts), rendered from the request's messages
 * exactly as the in-process OnnxPolicy renders the same conversation: system text (and the tool
 * names, when the model's template lists them), user turns, earlier assistant turns through
 * `assistantBody` (their content, then each tool call as `name arguments`), tool results through
 * `toolResult`, then `<|assistant|>`. Concurrent requests are sampled together with continuous
 * batching (GenerationBatcher and OnnxModel.serve, as OnnxPolicy samples episodes): a request
 * joins the running batch at the next decode step and is answered as soon as its own turn ends;
 * each row keeps its own temperature/top_p/top_k, token limit and random source (a request's
 * `seed` makes it reproducible whatever else is in the batch). Logprobs are those of the
 * distribution each token was sampled from (after temperature, top-k, top-p; 0 under greedy
 * decoding, temperature 0), as the learner recomputes them.
 *
 * Token ids: with `return_token_ids` (vLLM >= 0.10.2) the response carries the prompt's ids
 * (`prompt_token_ids`, top level) and the completion's (`choices[0].token_ids`): exactly the
 * sampled tokens, with the final `<|end|>` when the turn ended (as OnnxPolicy records turns), so
 * that a client can rebuild the episode's token sequence. `logprobs.content` has one entry per
 * token id; with `return_tokens_as_token_ids` each entry's `token` is `token_id:<id>`. Streamed,
 * each chunk carries its tokens' ids and logprobs, and the first chunk the prompt's ids.
 *
 * The assistant message is read from the tokens so that it renders back to them
 * (`parseCompletion`): `content` is the text before the first tool call, untrimmed; each closed
 * `<|tool_call|>name args<|/tool_call|>` is a tool call whose `arguments` are the text after the
 * name's one separating space, as sampled (not re-serialised, possibly not valid JSON). Sent back
 * in the next request, it renders to the same tokens, so the next `prompt_token_ids` extend this
 * prompt + completion. When it cannot (a client sees it by comparing `prompt_token_ids` with the
 * ids it holds; `stats().inexact` counts such completions):
 *   - a turn cut off by max_tokens or the context has no `<|end|>`, and the rendering adds one
 *     (so does OnnxPolicy, before the tool results): the next prompt then extends prompt +
 *     completion + `<|end|>`; it differs otherwise only when the cut falls inside a tool call or
 *     inside a UTF-8 character;
 *   - a malformed tool call (never closed, or without a tool name) is left out of the message;
 *     text after a tool call, a `<|/tool_call|>` without its opening, and a separator other
 *     than one space between a call's name and arguments do not render back as sampled;
 *   - bytes that are not valid UTF-8 become U+FFFD in the text (3 other bytes when rendered), a
 *     leading byte-order mark is dropped by the decoder, and special tokens sampled inside the
 *     text (other than the tool-call markers) are dropped.
 *
 * Not supported (400): `n` > 1, `top_logprobs` > 0, `stop` / `stop_token_ids`, penalties,
 * `logit_bias`, `tool_choice` other than `auto`, structured output. `max_tokens` (default: the
 * rest of the context, as vLLM) is clamped to what the context leaves (the turn then ends with
 * finish_reason `length`); a prompt that fills the context is a 400 naming both lengths.
 *
 * Reloading: rows already sampling finish on the weights they started with (new requests wait
 * for them, then start on the new weights); the old model is closed after them. The served
 * model's name (`modelName`, default the config's) stays the same across reloads;
 * `system_fingerprint` is `v<version>` of the weights that sampled the response.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { acceptedHostNames, invalidOption, seededRandom, tokenMatches, tokenProblem, type RandomFn } from '../../lib/index.ts';
import { isHfModelDir, readModelConfig, type ModelConfig } from './model-config.ts';
import { GenerationBatcher, OnnxModel, type BatcherStats, type BatchedGeneration, type Generation } from './onnx.ts';
import type { SamplingOptions } from './sampling.ts';
import type { TemplateMessage } from './template.ts';
import { HfTurns } from './hf-turns.ts';
import type { ToolSpec } from './hf/chat-template.ts';
import type { ToolFormatChoice } from './hf/tool-format.ts';

export interface PolicyServerOptions {
  /** The exported model directory (config.json with an onnx section). */
  modelDir: string;
  /** Interface to bind. Default 127.0.0.1 (localhost only). */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  /** When set, every request must carry `Authorization: Bearer <token>` (the scheme in any case). Must not be empty. */
  token?: string;
  /** Host names accepted in the Host and Origin headers beyond localhost names and the bound host (without a port). */
  allowedHosts?: string[];
  /** Requests sampled together at most. Default 32. */
  maxBatch?: number;
  /** Threads of onnxruntime's operators. Default 1. */
  threads?: number;
  /** Seeds the random source of requests that bring no `seed`. Default 1. */
  seed?: number;
  /** The model's name in the API. Default the model config's name. */
  modelName?: string;
  /**
   * How concurrent requests are batched (GenerationBatcher's mode). Default static: measured
   * faster with 16 clients (bench/serve-policy.ts: 1757 tok/s against 1473 continuous), since
   * clients answered together come back together and their prompts' common prefix is computed once.
   */
  batching?: 'continuous' | 'static';
  /**
   * A Hugging Face model's tool format (hf/tool-format.ts): `auto` (default) renders tools with
   * the template's own format, or adds the Hermes format to a template without tools.
   */
  toolFormat?: ToolFormatChoice;
  /**
   * Called with a model directory before it is loaded (the first, and each one /v1/reload names
   * or re-reads): the CLI exports a Hugging Face checkpoint's ONNX graph here (ensureHfOnnx).
   */
  prepare?: (dir: string) => void | Promise<void>;
}

export interface PolicyServerStats extends BatcherStats {
  /** Chat completions accepted (rendered and queued). */
  requests: number;
  /**
   * Completions whose message does not render back to their tokens (plus the `<|end|>` a cut
   * turn gets): sent back, they make the next prompt differ from prompt + completion.
   */
  inexact: number;
  /** The served weights' version and directory. */
  version: number;
  modelDir: string;
}

export interface PolicyServer {
  /** The API's base URL, ending in /v1 (an OpenAI client's `baseURL`). */
  url: string;
  port: number;
  /** The name requests must use (`model`). */
  modelName: string;
  /** The model new requests are sampled with. */
  readonly model: OnnxModel;
  stats(): PolicyServerStats;
  close(): Promise<void>;
}

/** An error answered in OpenAI's shape. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = 'invalid_request_error',
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

const bad = (message: string, param: string | null = null) => new ApiError(400, message, 'invalid_request_error', null, param);

const MAX_BODY_BYTES = 32 * 2 ** 20;

import { gptDialect, hfDialect, type Conversation, type Delta, type Dialect } from './serve-dialect.ts';
export { parseCompletion, type ParsedCall } from './serve-dialect.ts';

// ---------------------------------------------------------------------------------------------
// Requests.

interface ChatRequest extends Conversation {
  sampling: SamplingOptions;
  maxTokens?: number;
  seed?: number;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  tokensAsIds: boolean;
  returnTokenIds: boolean;
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
const given = (x: unknown) => x !== undefined && x !== null;

function optBool(body: Record<string, unknown>, key: string): boolean {
  const v = body[key];
  if (!given(v)) return false;
  if (typeof v !== 'boolean') throw bad(`'${key}' must be a boolean`, key);
  return v;
}

function optNumber(body: Record<string, unknown>, key: string, check: (x: number) => boolean, what: string): number | undefined {
  const v = body[key];
  if (!given(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || !check(v)) throw bad(`'${key}' must be ${what}, got ${JSON.stringify(v)}`, key);
  return v;
}

/** Text of a message's content: a string, null (empty), or text parts. */
function textOf(content: unknown, where: string, nullable: boolean): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) {
    if (nullable) return '';
    throw bad(`${where}.content is missing`, `${where}.content`);
  }
  if (Array.isArray(content)) {
    return content
      .map((part, i) => {
        if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
        throw bad(`${where}.content[${i}]: only text parts ({"type": "text", "text": ...}) are supported`, `${where}.content`);
      })
      .join('');
  }
  throw bad(`${where}.content must be a string or an array of text parts`, `${where}.content`);
}

function readMessages(raw: unknown): TemplateMessage[] {
  if (!Array.isArray(raw) || raw.length === 0) throw bad("'messages' must be a non-empty array", 'messages');
  return raw.map((m, i): TemplateMessage => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw bad(`${where} must be an object`, where);
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: textOf(m.content, where, false) };
      case 'user':
        return { role: 'user', content: textOf(m.content, where, false) };
      case 'tool':
        return {
          role: 'tool',
          content: textOf(m.content, where, false),
          ...(typeof m.tool_call_id === 'string' ? { tool_call_id: m.tool_call_id } : {}),
          ...(typeof m.name === 'string' ? { name: m.name } : {}),
        };
      case 'assistant': {
        if (given(m.function_call)) throw bad(`${where}: function_call is not supported; use tool_calls`, `${where}.function_call`);
        const calls = m.tool_calls;
        if (given(calls) && !Array.isArray(calls)) throw bad(`${where}.tool_calls must be an array`, `${where}.tool_calls`);
        const tool_calls = ((calls ?? []) as unknown[]).map((c, j) => {
          const fn = isObject(c) ? c.function : undefined;
          if (!isObject(fn) || typeof fn.name !== 'string') throw bad(`${where}.tool_calls[${j}] must be {"type": "function", "function": {"name", "arguments"}}`, `${where}.tool_calls`);
          const args = fn.arguments ?? '';
          const id = isObject(c) && typeof c.id === 'string' ? { id: c.id } : {};
          return { ...id, function: { name: fn.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } };
        });
        return { role: 'assistant', content: textOf(m.content, where, true), ...(tool_calls.length ? { tool_calls } : {}) };
      }
      default:
        throw bad(`${where}.role must be system, developer, user, assistant or tool, got ${JSON.stringify(m.role)}`, `${where}.role`);
    }
  });
}

function readChatRequest(body: Record<string, unknown>): ChatRequest {
  const messages = readMessages(body.messages);
  let tools: ToolSpec[] = [];
  if (given(body.tools)) {
    if (!Array.isArray(body.tools)) throw bad("'tools' must be an array", 'tools');
    tools = body.tools.map((t, i): ToolSpec => {
      if (!isObject(t) || t.type !== 'function' || !isObject(t.function) || typeof t.function.name !== 'string') {
        throw bad(`tools[${i}] must be {"type": "function", "function": {"name", "description", "parameters"}}`, 'tools');
      }
      const f = t.function;
      if (given(f.description) && typeof f.description !== 'string') throw bad(`tools[${i}].function.description must be a string`, 'tools');
      if (given(f.parameters) && !isObject(f.parameters)) throw bad(`tools[${i}].function.parameters must be a JSON schema object`, 'tools');
      return {
        type: 'function',
        function: { name: f.name as string, ...(typeof f.description === 'string' ? { description: f.description } : {}), ...(isObject(f.parameters) ? { parameters: f.parameters } : {}) },
      };
    });
  }
  if (given(body.tool_choice) && body.tool_choice !== 'auto') throw bad(`tool_choice ${JSON.stringify(body.tool_choice)} is not supported (only "auto": the model decides)`, 'tool_choice');
  const n = optNumber(body, 'n', Number.isInteger, 'an integer');
  if (n !== undefined && n !== 1) throw bad(`n must be 1: this server returns one choice per request (got ${n}); send several requests instead`, 'n');
  const topLogprobs = optNumber(body, 'top_logprobs', (x) => Number.isInteger(x) && x >= 0, 'a non-negative integer');
  if (topLogprobs) throw bad(`top_logprobs ${topLogprobs} is not supported: only the sampled token's logprob is returned (use top_logprobs 0 or leave it out)`, 'top_logprobs');
  for (const key of ['stop', 'stop_token_ids']) {
    const v = body[key];
    if (given(v) && !(Array.isArray(v) && v.length === 0)) throw bad(`'${key}' is not supported: a turn ends at the model's end-of-turn token or at max_tokens`, key);
  }
  if (isObject(body.logit_bias) && Object.keys(body.logit_bias).length) throw bad('logit_bias is not supported', 'logit_bias');
  for (const key of ['presence_penalty', 'frequency_penalty']) {
    if (given(body[key]) && body[key] !== 0) throw bad(`'${key}' is not supported (only 0)`, key);
  }
  if (given(body.repetition_penalty) && body.repetition_penalty !== 1) throw bad("'repetition_penalty' is not supported (only 1)", 'repetition_penalty');
  if (given(body.response_format) && !(isObject(body.response_format) && body.response_format.type === 'text')) throw bad('response_format other than {"type": "text"} is not supported', 'response_format');
  for (const key of ['echo', 'ignore_eos', 'use_beam_search']) if (body[key] === true) throw bad(`'${key}' is not supported`, key);
  if (given(body.best_of) && body.best_of !== 1) throw bad("'best_of' is not supported (only 1)", 'best_of');

  const temperature = optNumber(body, 'temperature', (x) => x >= 0, 'a number >= 0') ?? 1;
  const topP = optNumber(body, 'top_p', (x) => x > 0 && x <= 1, 'a number in (0, 1]') ?? 1;
  const topK = optNumber(body, 'top_k', (x) => Number.isInteger(x) && x >= -1, 'an integer >= -1 (-1 or 0: no limit)') ?? 0;
  const minP = optNumber(body, 'min_p', (x) => x >= 0 && x <= 1, 'a number in [0, 1] (0: off)') ?? 0;
  const maxTokens =
    optNumber(body, 'max_completion_tokens', (x) => Number.isInteger(x) && x >= 1, 'a positive integer') ??
    optNumber(body, 'max_tokens', (x) => Number.isInteger(x) && x >= 1, 'a positive integer');
  const seed = optNumber(body, 'seed', Number.isSafeInteger, 'an integer');
  const stream = optBool(body, 'stream');
  let includeUsage = false;
  if (given(body.stream_options)) {
    if (!isObject(body.stream_options)) throw bad("'stream_options' must be an object", 'stream_options');
    includeUsage = optBool(body.stream_options, 'include_usage');
  }
  return {
    messages,
    tools,
    toolNames: tools.map((t) => t.function.name),
    sampling: { temperature, topP, topK: Math.max(0, topK), ...(minP > 0 ? { minP } : {}) },
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...(seed !== undefined ? { seed } : {}),
    stream,
    includeUsage,
    logprobs: optBool(body, 'logprobs'),
    tokensAsIds: optBool(body, 'return_tokens_as_token_ids'),
    returnTokenIds: optBool(body, 'return_token_ids'),
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, `The request body is over ${MAX_BODY_BYTES} bytes`, 'invalid_request_error', 'request_too_large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function readJson(req: IncomingMessage, emptyIs?: Record<string, unknown>): Promise<Record<string, unknown>> {
  const text = await readBody(req);
  if (text.trim() === '' && emptyIs) return emptyIs;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw bad(`The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(body)) throw bad('The request body must be a JSON object');
  return body;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

function errorBody(e: ApiError) {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

function sendError(res: ServerResponse, e: ApiError, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  sendJson(res, e.status, errorBody(e), headers);
}

// ---------------------------------------------------------------------------------------------
// The server.

/** Starts the server; resolves once it listens. */
export async function startPolicyServer(o: PolicyServerOptions): Promise<PolicyServer> {
  const host = o.host ?? '127.0.0.1';
  const problem = o.token === undefined ? undefined : tokenProblem(o.token);
  if (problem) throw invalidOption(`the bearer token ${problem}`);
  const allowed = new Set(acceptedHostNames(host, o.allowedHosts));

  const modelOptions = { threads: o.threads ?? 1 };
  let modelDir = resolve(o.modelDir);
  // Each loaded model's dialect: how prompts are rendered and completions read (serve-dialect.ts).
  const dialects = new WeakMap<OnnxModel, Dialect>();
  const load = async (dir: string): Promise<OnnxModel> => {
    await o.prepare?.(dir);
    const model = await OnnxModel.load(dir, modelOptions);
    try {
      dialects.set(model, model.family === 'gpt' ? gptDialect(model.template) : hfDialect(HfTurns.load(dir, { toolFormat: o.toolFormat ?? 'auto' })));
    } catch (err) {
      await model.close();
      throw err;
    }
    return model;
  };
  const dialectOf = (model: OnnxModel): Dialect => dialects.get(model)!;
  const first = await load(modelDir);
  const modelName = o.modelName ?? first.name;
  const created = Math.floor(Date.now() / 1000);
  const serverRng = seededRandom(o.seed ?? 1);
  const batcher = new GenerationBatcher(first, { maxBatch: o.maxBatch ?? 32, sampling: { temperature: 1, topK: 0, topP: 1 }, rng: serverRng, mode: o.batching ?? 'static' });
  let requests = 0;
  let inexact = 0;
  let reloading: Promise<unknown> = Promise.resolve();
  const retiring: Promise<void>[] = [];

  function modelCard() {
    const m = batcher.model;
    return { id: modelName, object: 'model', created, owned_by: 'mcp-gym', root: modelDir, parent: null, max_model_len: m.maxLen, version: m.version };
  }

  function hostAllowed(req: IncomingMessage): boolean {
    const h = req.headers.host;
    if (!h) return false;
    try {
      if (!allowed.has(new URL(`http://${h}`).hostname)) return false;
      const origin = req.headers.origin;
      if (origin !== undefined && origin !== 'null' && !allowed.has(new URL(origin).hostname)) return false;
    } catch {
      return false;
    }
    return true;
  }

  async function chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson(req);
    if (given(body.model) && body.model !== modelName) {
      throw new ApiError(404, `The model \`${String(body.model)}\` does not exist: this server serves \`${modelName}\``, 'invalid_request_error', 'model_not_found', 'model');
    }
    const r = readChatRequest(body);
    const model = batcher.model;
    const dialect = dialectOf(model);
    const prompt = dialect.prompt(r);
    if (prompt.length >= model.maxLen) {
      // OpenAI's code for it, so that clients can tell it from other bad requests.
      throw new ApiError(400, `This model's maximum context length is ${model.maxLen} tokens, but the messages take ${prompt.length} tokens (at least one must be left for the completion). Shorten the messages.`, 'invalid_request_error', 'context_length_exceeded', 'messages');
    }
    const maxNew = Math.min(r.maxTokens ?? Infinity, model.maxLen - prompt.length);
    const rng: RandomFn = seededRandom(r.seed ?? Math.floor(serverRng() * 2 ** 32));
    const id = `chatcmpl-${randomUUID().replaceAll('-', '')}`;
    const now = Math.floor(Date.now() / 1000);
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    });
    const entry = (token: number, logprob: number) => ({
      token: r.tokensAsIds ? `token_id:${token}` : dialect.tokenText(token),
      logprob,
      bytes: dialect.tokenBytes(token),
      top_logprobs: [],
    });
    const callId = () => `call_${randomBytes(12).toString('hex')}`;
    const usage = (g: Generation) => ({ prompt_tokens: prompt.length, completion_tokens: g.tokens.length, total_tokens: prompt.length + g.tokens.length });
    requests++;

    if (!r.stream) {
      const g = await batcher.submit({ prompt, maxNewTokens: maxNew, sampling: r.sampling, rng, signal: abort.signal });
      if (abort.signal.aborted) return;
      const { content, toolCalls, rendersBack } = dialect.parse(r, g.tokens);
      if (!rendersBack) inexact++;
      sendJson(res, 200, {
        id,
        object: 'chat.completion',
        created: now,
        model: modelName,
        system_fingerprint: `v${g.version}`,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: toolCalls.length && !content ? null : content,
              ...(toolCalls.length ? { tool_calls: toolCalls.map((c) => ({ id: callId(), type: 'function', function: { name: c.name, arguments: c.arguments } })) } : {}),
            },
            logprobs: r.logprobs ? { content: g.tokens.map((t, i) => entry(t, g.logprobs[i]!)) } : null,
            finish_reason: finishReason(g, toolCalls.length),
            stop_reason: null,
            ...(r.returnTokenIds ? { token_ids: g.tokens } : {}),
          },
        ],
        usage: usage(g),
        ...(r.returnTokenIds ? { prompt_token_ids: prompt } : {}),
      });
      return;
    }

    // Streaming: one chunk per sampled token, as it is sampled (the same parser, token by token).
    const parser = dialect.streamer();
    const callIds: string[] = [];
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    let fingerprint = `v${model.version}`;
    const send = (choices: unknown[], extra: Record<string, unknown> = {}) => {
      if (!res.writableEnded && !res.destroyed) res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: now, model: modelName, system_fingerprint: fingerprint, choices, ...extra })}\n\n`);
    };
    const deltaOf = (d: Delta) => ({
      ...(d.content ? { content: d.content } : {}),
      ...(d.call ? { tool_calls: [{ index: callIds.length - 1, id: callIds[callIds.length - 1], type: 'function', function: { name: d.call.name, arguments: d.call.arguments } }] } : {}),
    });
    send([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], r.returnTokenIds ? { prompt_token_ids: prompt } : {});
    let g: BatchedGeneration;
    try {
      g = await batcher.submit({
        prompt,
        maxNewTokens: maxNew,
        sampling: r.sampling,
        rng,
        signal: abort.signal,
        onToken: (token, logprob) => {
          const d = parser.push(token);
          if (d.call) callIds.push(callId());
          send([
            {
              index: 0,
              delta: deltaOf(d),
              logprobs: r.logprobs ? { content: [entry(token, logprob)] } : null,
              finish_reason: null,
              ...(r.returnTokenIds ? { token_ids: [token] } : {}),
            },
          ]);
        },
      });
    } catch (err) {
      if (!res.writableEnded && !res.destroyed) {
        res.write(`data: ${JSON.stringify(errorBody(new ApiError(500, (err as Error).message, 'internal_server_error')))}\n\n`);
        res.end('data: [DONE]\n\n');
      }
      return;
    }
    if (abort.signal.aborted) return;
    fingerprint = `v${g.version}`;
    const tail = parser.finish();
    if (!dialect.parse(r, g.tokens).rendersBack) inexact++;
    if (tail.call) callIds.push(callId());
    if (tail.content || tail.call) send([{ index: 0, delta: deltaOf(tail), logprobs: null, finish_reason: null }]);
    // Calls read only once the turn ended (a Hugging Face model's, from the whole text) go out now, one chunk each.
    while (callIds.length < parser.calls.length) {
      callIds.push(callId());
      send([{ index: 0, delta: deltaOf({ call: parser.calls[callIds.length - 1]! }), logprobs: null, finish_reason: null }]);
    }
    send([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReason(g, parser.calls.length), stop_reason: null }]);
    if (r.includeUsage) send([], { usage: usage(g) });
    res.end('data: [DONE]\n\n');
  }

  function finishReason(g: Generation, calls: number): 'tool_calls' | 'stop' | 'length' {
    if (!g.stopped) return 'length';
    return calls ? 'tool_calls' : 'stop';
  }

  /** `{}`: the served directory, if its version changed; `{model_dir}`: that directory (same vocabulary and context). */
  async function reload(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson(req, {});
    if (given(body.model_dir) && typeof body.model_dir !== 'string') throw bad("'model_dir' must be a string (a model directory's path)", 'model_dir');
    const run = reloading.then(async () => {
      const current = batcher.model;
      const dir = typeof body.model_dir === 'string' ? resolve(body.model_dir) : modelDir;
      if (!existsSync(join(dir, 'config.json'))) throw bad(`No model at ${dir}: it has no config.json`, 'model_dir');
      const hf = isHfModelDir(dir);
      if (hf !== (current.family !== 'gpt')) throw bad(`The model at ${dir} is ${hf ? 'a Hugging Face checkpoint' : 'an embedded GPT'}; the served one is ${current.family === 'gpt' ? 'an embedded GPT' : 'a Hugging Face checkpoint'}: reload a model of the same kind`, 'model_dir');
      if (!hf) {
        let config: ModelConfig;
        try {
          config = readModelConfig(dir);
        } catch (err) {
          throw bad((err as Error).message, 'model_dir');
        }
        const a = config.architecture;
        const b = current.config.architecture;
        const differs = [
          a.vocab_size !== b.vocab_size ? `vocab_size ${a.vocab_size} (served: ${b.vocab_size})` : '',
          a.max_seq_len !== b.max_seq_len ? `max_seq_len (the context) ${a.max_seq_len} (served: ${b.max_seq_len})` : '',
        ].filter(Boolean);
        if (differs.length) throw bad(`The model at ${dir} has another architecture: ${differs.join(', ')}`, 'model_dir');
        if (dir === modelDir && config.version === current.version) return { version: current.version, model_dir: dir, reloaded: false };
      }
      let next: OnnxModel;
      try {
        next = await load(dir);
      } catch (err) {
        throw bad(`Cannot load the model at ${dir}: ${(err as Error).message}`, 'model_dir');
      }
      if (hf) {
        const differs = [
          next.V !== current.V ? `vocab_size ${next.V} (served: ${current.V})` : '',
          next.maxLen !== current.maxLen ? `the context ${next.maxLen} (served: ${current.maxLen})` : '',
        ].filter(Boolean);
        if (differs.length) {
          await next.close();
          throw bad(`The model at ${dir} has another architecture: ${differs.join(', ')}`, 'model_dir');
        }
        if (dir === modelDir && next.version === current.version) {
          await next.close();
          return { version: current.version, model_dir: dir, reloaded: false };
        }
      }
      modelDir = dir;
      // The previous model is closed once the rows sampling on it (if any) have finished.
      retiring.push(batcher.swap(next).then((previous) => previous.close()));
      return { version: next.version, model_dir: dir, reloaded: true };
    });
    reloading = run.catch(() => {});
    sendJson(res, 200, await run);
  }

  const ROUTES: Record<string, string[]> = { '/v1/models': ['GET'], '/v1/chat/completions': ['POST'], '/v1/reload': ['POST'], '/health': ['GET'] };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostAllowed(req)) throw new ApiError(403, `Forbidden: the Host or Origin header names a host this server does not answer (allowed: ${[...allowed].join(', ')})`, 'permission_error', 'host_not_allowed');
    if (o.token !== undefined && !tokenMatches(req.headers.authorization, o.token)) {
      throw new ApiError(401, 'Incorrect or missing API key: send Authorization: Bearer <token>', 'authentication_error', 'invalid_api_key');
    }
    const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const modelPath = /^\/v1\/models\/(.+)$/.exec(path);
    const methods = modelPath ? ['GET'] : ROUTES[path];
    if (!methods) throw new ApiError(404, `Not found: ${method} ${path}. Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/reload, GET /health`, 'not_found_error', 'not_found');
    if (!methods.includes(method)) throw new ApiError(405, `${path} answers ${methods.join(', ')}, not ${method}`, 'invalid_request_error', 'method_not_allowed');
    if (modelPath) {
      const name = decodeURIComponent(modelPath[1]!);
      if (name !== modelName) throw new ApiError(404, `The model \`${name}\` does not exist: this server serves \`${modelName}\``, 'invalid_request_error', 'model_not_found');
      return sendJson(res, 200, modelCard());
    }
    if (path === '/v1/models') return sendJson(res, 200, { object: 'list', data: [modelCard()] });
    if (path === '/health') return sendJson(res, 200, { status: 'ok' });
    if (path === '/v1/reload') return reload(req, res);
    return chat(req, res);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const e = err instanceof ApiError ? err : new ApiError(500, err instanceof Error ? err.message : String(err), 'internal_server_error');
      sendError(res, e, e.status === 401 ? { 'www-authenticate': 'Bearer' } : e.status === 405 ? { allow: ROUTES[new URL(req.url ?? '/', 'http://localhost').pathname]?.join(', ') ?? 'GET' } : {});
    });
  });
  server.keepAliveTimeout = 30_000;
  try {
    await new Promise<void>((ok, fail) => {
      server.once('error', fail);
      server.listen(o.port ?? 0, host, () => ok());
    });
  } catch (err) {
    await first.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closed = false;
  return {
    url: `http://${shownHost}:${port}/v1`,
    port,
    modelName,
    get model() {
      return batcher.model;
    },
    stats: () => ({ ...batcher.stats(), requests, inexact, version: batcher.model.version, modelDir }),
    async close() {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((r) => server.close(() => r()));
      await batcher.close();
      server.closeAllConnections();
      await stopped;
      await reloading;
      await Promise.all(retiring);
      await batcher.model.close();
    },
  };
}
