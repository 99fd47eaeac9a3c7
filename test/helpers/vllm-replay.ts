/**
 * A local stand-in for a vLLM OpenAI-compatible server (`vllm serve <model> --enable-lora
 * --max-lora-rank R --max-loras N` with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), for tests of
 * training through vLLM where vLLM cannot run. It implements the documented shapes of:
 *
 * - `GET /v1/models`: `{object: 'list', data: [card...]}`, the base model's card (`id`, `object:
 *   'model'`, `created`, `owned_by: 'vllm'`, `root`, `parent: null`, `max_model_len`,
 *   `permission`) then one per loaded LoRA adapter (`root`: its path, `parent`: the base model);
 * - `POST /v1/load_lora_adapter` `{lora_name, lora_path}`: 200 with the plain-text
 *   `Success: LoRA adapter '<name>' added successfully.`; 400 (`InvalidUserInput`) when a field is
 *   missing or the name is already loaded; 404 (`NotFoundError`, "No adapter found for ...") when
 *   the directory lacks adapter_config.json or adapter_model.safetensors; 400 (`BadRequestError`)
 *   when the adapter's rank is over `--max-lora-rank` or the safetensors file does not parse;
 * - `POST /v1/unload_lora_adapter` `{lora_name}`: 200 `Success: LoRA adapter '<name>' removed
 *   successfully.`; 404 (`NotFoundError`) for a name not loaded;
 * - `POST /v1/chat/completions` (non-streaming, n = 1): the base model or a loaded adapter as
 *   `model` (else vLLM's 404 `The model \`x\` does not exist.`); the prompt is the request's
 *   messages and tools rendered with the checkpoint's own chat template (add_generation_prompt)
 *   and encoded with its tokenizer, as vLLM does (src/agents/hf); `return_token_ids` adds the
 *   top-level `prompt_token_ids` and the choice's `token_ids`; `logprobs` gives one entry per
 *   sampled token (`token_id:<id>` with `return_tokens_as_token_ids`), each `logprob`;
 *   a prompt over `max_model_len` is vLLM's 400.
 *
 * Errors are vLLM's ErrorResponse with the HTTP status as `code`: `{error: {message, type, param:
 * null, code}}` (current vLLM, as OpenAI nests it), or with `errorShape: 'legacy'` the flat
 * `{object: 'error', message, type, param: null, code}` of vLLM before the change. With `apiKey`, every /v1 request needs `Authorization: Bearer
 * <key>` (vLLM's --api-key), else 401.
 *
 * What it "samples" is canned and deterministic (there is no model): a user message asking to
 * compute an expression gets a Hermes/Qwen tool call of the tool named `evaluate`
 * (`<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call><|im_end|>`); a tool result gets a
 * final answer: the result itself when the request's seed is even, a wrong number when odd (so a
 * group's rewards differ); anything else gets a short refusal. The text is encoded with the real
 * tokenizer, so what the template renders for the returned message on the next turn is the same
 * token sequence (no re-tokenisation drift).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ChatTemplateRenderer, HfTokenizer, type ChatMessage, type ToolSpec } from '../../src/agents/hf/index.ts';

export interface VllmReplayOptions {
  /** The checkpoint whose tokenizer and chat template render the prompts. */
  modelDir: string;
  /** The base model's name (vllm serve's --served-model-name). */
  servedName: string;
  /** --max-model-len (default 4096). */
  maxModelLen?: number;
  /** --max-lora-rank (default 16). */
  maxLoraRank?: number;
  /** --api-key: required as a bearer token on /v1 requests. */
  apiKey?: string;
  /** The logprob of every sampled token (default -0.5). */
  logprob?: number;
  /** vLLM's error body: nested as OpenAI's (default; current vLLM) or flat (older vLLM). */
  errorShape?: 'nested' | 'legacy';
}

export interface LoadRecord {
  name: string;
  path: string;
  /** adapter_config.json, parsed. */
  config: Record<string, unknown>;
  /** The tensor names in adapter_model.safetensors. */
  tensors: string[];
  /** sha256 of adapter_model.safetensors as loaded. */
  sha256: string;
  /** Completion requests answered before this load. */
  afterCompletions: number;
}

export interface CompletionRecord {
  model: string;
  seed?: number;
  messages: number;
  promptTokens: number;
  completionTokens: number;
}

export interface VllmReplay {
  url: string;
  port: number;
  /** Successful loads, unloads and completions, in order; every request with its status. */
  loads: LoadRecord[];
  unloads: { name: string; afterCompletions: number }[];
  completions: CompletionRecord[];
  requests: { method: string; path: string; status: number; authorization?: string }[];
  /** The adapters loaded now. */
  loaded(): string[];
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}

/** Tensor names of a safetensors file (its JSON header), or throws. */
function safetensorNames(file: string): string[] {
  const buf = readFileSync(file);
  if (buf.length < 8) throw new Error('the file is shorter than a safetensors header');
  const n = Number(buf.readBigUInt64LE(0));
  if (n <= 0 || 8 + n > buf.length) throw new Error(`a header of ${n} bytes does not fit the file (${buf.length} bytes)`);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, unknown>;
  return Object.keys(header).filter((k) => k !== '__metadata__');
}

export async function startVllmReplay(o: VllmReplayOptions): Promise<VllmReplay> {
  const tokenizer = HfTokenizer.load(o.modelDir);
  const renderer = ChatTemplateRenderer.fromTokenizer(tokenizer);
  const imEnd = tokenizer.tokenId('<|im_end|>');
  if (imEnd === undefined) throw new Error('vllm-replay: the tokenizer has no <|im_end|> (a Qwen-style checkpoint is expected)');
  const maxModelLen = o.maxModelLen ?? 4096;
  const maxLoraRank = o.maxLoraRank ?? 16;
  const logprob = o.logprob ?? -0.5;
  const created = Math.floor(Date.now() / 1000);
  const adapters = new Map<string, string>();
  const loads: LoadRecord[] = [];
  const unloads: { name: string; afterCompletions: number }[] = [];
  const completions: CompletionRecord[] = [];
  const requests: VllmReplay['requests'] = [];
  let nextId = 1;

  const card = (id: string, root: string, parent: string | null) => ({
    id,
    object: 'model',
    created,
    owned_by: 'vllm',
    root,
    parent,
    ...(parent === null ? { max_model_len: maxModelLen } : {}),
    permission: [
      {
        id: `modelperm-${id}`,
        object: 'model_permission',
        created,
        allow_create_engine: false,
        allow_sampling: true,
        allow_logprobs: true,
        allow_search_indices: false,
        allow_view: true,
        allow_fine_tuning: false,
        organization: '*',
        group: null,
        is_blocking: false,
      },
    ],
  });

  const loadAdapter = (body: Record<string, unknown>): string => {
    const name = body.lora_name;
    const path = body.lora_path;
    if (typeof name !== 'string' || !name || typeof path !== 'string' || !path)
      throw new HttpError(400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
    if (adapters.has(name)) throw new HttpError(400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
    const cfgFile = join(path, 'adapter_config.json');
    const weights = join(path, 'adapter_model.safetensors');
    if (!existsSync(cfgFile) || !existsSync(weights)) throw new HttpError(404, 'NotFoundError', `Loading lora ${name} failed: No adapter found for ${path}`);
    let config: Record<string, unknown>;
    let tensors: string[];
    try {
      config = JSON.parse(readFileSync(cfgFile, 'utf8')) as Record<string, unknown>;
      tensors = safetensorNames(weights);
    } catch (err) {
      throw new HttpError(400, 'BadRequestError', `Loading lora ${name} failed: ${(err as Error).message}`);
    }
    const r = Number(config.r);
    if (!(r > 0)) throw new HttpError(400, 'BadRequestError', `Loading lora ${name} failed: adapter_config.json has no rank r`);
    if (r > maxLoraRank)
      throw new HttpError(400, 'BadRequestError', `Loading lora ${name} failed: LoRA rank ${r} is greater than max_lora_rank ${maxLoraRank}.`);
    adapters.set(name, path);
    loads.push({ name, path, config, tensors, sha256: createHash('sha256').update(readFileSync(weights)).digest('hex'), afterCompletions: completions.length });
    return `Success: LoRA adapter '${name}' added successfully.`;
  };

  const unloadAdapter = (body: Record<string, unknown>): string => {
    const name = body.lora_name;
    if (typeof name !== 'string' || !name) throw new HttpError(400, 'InvalidUserInput', "either 'lora_name' and 'lora_int_id' needs to be provided.");
    if (!adapters.has(name)) throw new HttpError(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    adapters.delete(name);
    unloads.push({ name, afterCompletions: completions.length });
    return `Success: LoRA adapter '${name}' removed successfully.`;
  };

  /** The canned turn: its text (without the end token), and the message vLLM's tool parser would return. */
  const cannedTurn = (
    messages: ChatMessage[],
    tools: ToolSpec[],
    seed: number,
  ): { text: string; content: string | null; call?: { name: string; arguments: string } } => {
    const last = messages[messages.length - 1];
    const tool = tools.find((t) => /(^|_)evaluate$/.test(t.function.name)) ?? tools[0];
    if (last?.role === 'user' && tool) {
      const m = /compute (.+?)\.(?:\s|$)/.exec(last.content ?? '');
      const args = JSON.stringify({ expression: m?.[1] ?? '1 + 1' }).replace(/^\{"expression":/, '{"expression": ');
      return {
        text: `<tool_call>\n{"name": "${tool.function.name}", "arguments": ${args}}\n</tool_call>`,
        content: null,
        call: { name: tool.function.name, arguments: args },
      };
    }
    if (last?.role === 'tool') {
      const result = (last.content ?? '').trim();
      const answer = seed % 2 === 0 ? result : String((Number(result) || 0) + 1000);
      return { text: answer, content: answer };
    }
    return { text: 'I cannot help with that.', content: 'I cannot help with that.' };
  };

  const chat = (body: Record<string, unknown>) => {
    const model = body.model;
    if (typeof model !== 'string' || (model !== o.servedName && !adapters.has(model)))
      throw new HttpError(404, 'NotFoundError', `The model \`${String(model)}\` does not exist.`);
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw new HttpError(400, 'BadRequestError', "'messages' must be a non-empty list");
    if (body.stream) throw new HttpError(400, 'BadRequestError', 'vllm-replay: streaming is not implemented');
    if (body.n !== undefined && body.n !== 1) throw new HttpError(400, 'BadRequestError', 'vllm-replay: n must be 1');
    const messages = body.messages as ChatMessage[];
    const tools = (Array.isArray(body.tools) ? body.tools : []) as ToolSpec[];
    const prompt = tokenizer.encode(renderer.render(messages, { tools, addGenerationPrompt: true }));
    const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? maxModelLen - prompt.length);
    if (prompt.length + Math.min(maxTokens, 1) > maxModelLen) {
      throw new HttpError(
        400,
        'BadRequestError',
        `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${prompt.length} input tokens. Please reduce the length of the input messages.`,
      );
    }
    const seed = typeof body.seed === 'number' ? body.seed : 0;
    const turn = cannedTurn(messages, tools, seed);
    let ids = [...tokenizer.encode(turn.text), imEnd];
    let finish = turn.call ? 'tool_calls' : 'stop';
    let message: Record<string, unknown> = {
      role: 'assistant',
      content: turn.content,
      tool_calls: turn.call ? [{ id: `chatcmpl-tool-${(nextId++).toString(16).padStart(8, '0')}`, type: 'function', function: turn.call }] : [],
      reasoning_content: null,
    };
    const budget = Math.min(maxTokens, maxModelLen - prompt.length);
    if (ids.length > budget) {
      ids = ids.slice(0, Math.max(0, budget));
      finish = 'length';
      message = { role: 'assistant', content: tokenizer.decode(ids, { skipSpecialTokens: true }), tool_calls: [], reasoning_content: null };
    }
    const asIds = body.return_tokens_as_token_ids === true;
    const logprobs =
      body.logprobs === true
        ? {
            content: ids.map((id) => ({
              token: asIds ? `token_id:${id}` : tokenizer.decode([id]),
              logprob,
              bytes: [...Buffer.from(tokenizer.decode([id]), 'utf8')],
              top_logprobs: [],
            })),
          }
        : null;
    const withIds = body.return_token_ids === true;
    completions.push({
      model,
      ...(typeof body.seed === 'number' ? { seed: body.seed } : {}),
      messages: messages.length,
      promptTokens: prompt.length,
      completionTokens: ids.length,
    });
    return {
      id: `chatcmpl-${(nextId++).toString(16).padStart(12, '0')}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [{ index: 0, message, logprobs, finish_reason: finish, stop_reason: null, ...(withIds ? { token_ids: ids } : {}) }],
      service_tier: null,
      system_fingerprint: null,
      usage: { prompt_tokens: prompt.length, total_tokens: prompt.length + ids.length, completion_tokens: ids.length, prompt_tokens_details: null },
      prompt_logprobs: null,
      ...(withIds ? { prompt_token_ids: prompt } : {}),
      kv_transfer_params: null,
    };
  };

  const errorBody = (e: HttpError) => {
    const info = { message: e.message, type: e.type, param: null, code: e.status };
    return o.errorShape === 'legacy' ? { object: 'error', ...info } : { error: info };
  };

  const send = (res: ServerResponse, status: number, body: unknown, text = false) => {
    res.writeHead(status, { 'content-type': text ? 'text/plain; charset=utf-8' : 'application/json' });
    res.end(text ? String(body) : JSON.stringify(body));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const record = (status: number) =>
      requests.push({ method: req.method ?? '', path, status, ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}) });
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    try {
      if (o.apiKey && path.startsWith('/v1') && req.headers.authorization !== `Bearer ${o.apiKey}`) {
        // vLLM's --api-key middleware
        record(401);
        send(res, 401, { error: 'Unauthorized' });
        return;
      }
      let body: Record<string, unknown> = {};
      if (req.method === 'POST') {
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>;
        } catch {
          throw new HttpError(400, 'BadRequestError', 'the body is not valid JSON');
        }
      }
      const route = `${req.method} ${path}`;
      if (route === 'GET /v1/models') {
        record(200);
        send(res, 200, { object: 'list', data: [card(o.servedName, o.modelDir, null), ...[...adapters].map(([name, p]) => card(name, p, o.servedName))] });
      } else if (route === 'POST /v1/load_lora_adapter') {
        const r = loadAdapter(body);
        record(200);
        send(res, 200, r, true);
      } else if (route === 'POST /v1/unload_lora_adapter') {
        const r = unloadAdapter(body);
        record(200);
        send(res, 200, r, true);
      } else if (route === 'POST /v1/chat/completions') {
        const r = chat(body);
        record(200);
        send(res, 200, r);
      } else {
        // FastAPI's answer for a route it does not have
        record(404);
        send(res, 404, { detail: 'Not Found' });
      }
    } catch (err) {
      const e = err instanceof HttpError ? err : new HttpError(500, 'InternalServerError', (err as Error).message);
      record(e.status);
      send(res, e.status, errorBody(e));
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, errorBody(new HttpError(500, 'InternalServerError', String(err))));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    loads,
    unloads,
    completions,
    requests,
    loaded: () => [...adapters.keys()],
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
