/**
 * The OpenAI-compatible policy (`openai:<model>`): any server that speaks the Chat Completions
 * API (OpenAI, vLLM, SGLang, llama.cpp, `mcp-gym serve-policy`), through the official `openai`
 * SDK. Tools go as functions, every tool call of a turn is returned (parallel calls), and the
 * conversation is sent whole each turn (the API is stateless).
 *
 * Trainable trajectories. With `tokenIds` (the default when a base URL is given) the request asks
 * for vLLM's token information: `logprobs`, `return_token_ids` (the prompt's ids, top level
 * `prompt_token_ids`, and the completion's, per choice `token_ids`) and
 * `return_tokens_as_token_ids` (each logprob entry's token as `token_id:<id>`). The policy keeps
 * each episode's token sequence (prompt, then each turn's completion) and records a turn's
 * environment tokens as what the server's prompt adds to that sequence. When the prompt does not
 * start with the sequence (the server's chat template rendered the conversation so far into other
 * tokens than it sampled: re-tokenisation drift) the turn says so (`token_drift`) and the
 * trajectory is not trained on: training on a sequence that was never sampled is the bug that
 * multi-turn RL on re-rendered prompts is known for.
 *
 * Serving a policy being trained (train --policy openai:<model> --base-url URL): `reload` asks
 * mcp-gym serve-policy to load a model directory (`POST <base>/reload`); `loadLoraAdapter` and
 * `unloadLoraAdapter` are vLLM's runtime LoRA endpoints (`POST <base>/load_lora_adapter`
 * {lora_name, lora_path}, `POST <base>/unload_lora_adapter` {lora_name}; the server needs
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), and `useModel` points the requests at an adapter by its
 * name, with the version every turn it samples records (`policyVersion`).
 *
 * Retries, timeouts and the concurrency limit: see api.ts. A request that still fails ends only
 * its episode (the environment records finish `error`); the meter counts it.
 */
import OpenAI from 'openai';
import { fnv1a } from '../../lib/index.ts';
import type { ChatModel, ChatRequest, ChatResult, Observation, Policy, PolicyAction, ProposedCall, TokenUsage, ApiUsage } from '../env/index.ts';
import { apiKeyFrom, concurrencyLimit, describeApiError, shownUrl, UsageMeter, type ApiOptions } from './api.ts';

export interface OpenAIPolicyOptions extends ApiOptions {
  /** Ask for vLLM's token ids and logprobs (default: true when a base URL is given, false for OpenAI's own API, which refuses them). */
  tokenIds?: boolean;
  /** Ask for logprobs (default true; OpenAI's API gives them for text only). */
  logprobs?: boolean;
  /** Server-specific request fields (e.g. vLLM's `top_k`), sent with every policy request. */
  extraBody?: Record<string, unknown>;
  /**
   * The episodes' token sequences, by episode id: given, the map is shared with other policies
   * (a fleet's servers, src/agents/fleet.ts), so that an episode whose next turn goes to another
   * server continues the same sequence. Default: the policy's own.
   */
  sequences?: Map<string, number[]>;
}

/** vLLM's additions to a chat completion (absent elsewhere). */
interface TokenInfo {
  prompt_token_ids?: number[] | null;
  choices: { token_ids?: number[] | null; prompt_token_ids?: number[] | null; logprobs?: { content?: { token: string; logprob: number }[] | null } | null }[];
}

/** Token ids and logprobs of a completion when the server gave them, else undefined. */
export function completionTokens(response: TokenInfo): { prompt?: number[]; tokens?: number[]; logprobs?: number[] } {
  const choice = response.choices[0];
  const prompt = response.prompt_token_ids ?? choice?.prompt_token_ids ?? undefined;
  const content = choice?.logprobs?.content ?? undefined;
  const logprobs = content?.map((c) => c.logprob);
  let tokens = choice?.token_ids ?? undefined;
  if (!tokens && content && content.length > 0 && content.every((c) => /^token_id:\d+$/.test(c.token))) tokens = content.map((c) => Number(c.token.slice(9)));
  return { ...(prompt ? { prompt } : {}), ...(tokens ? { tokens } : {}), ...(logprobs ? { logprobs } : {}) };
}

/** A request that failed after its retries: the message (key-free), the HTTP status and the API's error code. */
export class ApiRequestError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** A model the server lists in /v1/models (vLLM: the base model, then each LoRA adapter with its `parent`). */
export interface ServedModel {
  id: string;
  parent?: string | null;
  root?: string;
  max_model_len?: number;
  version?: string | number;
}

/** An answer of the server's management endpoints that is not a success: the endpoint, the HTTP status and the server's message. */
export class ServerEndpointError extends Error {
  constructor(
    message: string,
    readonly endpoint: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** The message of an error body: vLLM's `{object: "error", message, type, code}`, OpenAI's `{error: {message, type, code}}`, or the text. */
function errorBodyMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { message?: unknown; type?: unknown; error?: { message?: unknown; type?: unknown } | string; detail?: unknown };
    const e = typeof j.error === 'object' && j.error !== null ? j.error : j;
    const message =
      typeof e.message === 'string'
        ? e.message
        : typeof j.error === 'string'
          ? j.error
          : typeof j.detail === 'string'
            ? j.detail
            : JSON.stringify(j.detail ?? j);
    return typeof e.type === 'string' ? `${message} (${e.type})` : message;
  } catch {
    return text.trim() || '(no body)';
  }
}

/** Where `seq` and `prompt` first differ, for a drift message. */
function firstDifference(seq: number[], prompt: number[]): string {
  let i = 0;
  while (i < seq.length && i < prompt.length && seq[i] === prompt[i]) i++;
  if (i >= prompt.length) return `the prompt (${prompt.length} tokens) is shorter than the episode's ${seq.length} tokens so far`;
  return `the prompt differs from the episode's tokens at position ${i} of ${seq.length} (token ${prompt[i]}, sampled ${seq[i]})`;
}

export class OpenAIPolicy implements Policy, ChatModel {
  readonly id: string;
  private readonly client: OpenAI;
  private readonly key: string | undefined;
  private readonly limit: ReturnType<typeof concurrencyLimit>;
  private readonly meter = new UsageMeter();
  private readonly sequences: Map<string, number[]>;
  private readonly tokenIds: boolean;
  private currentVersion: string | number | undefined;
  /** The model requests name: the one given, or an adapter chosen with `useModel`. */
  private requestModel: string;

  constructor(
    readonly baseModel: string,
    private readonly options: OpenAIPolicyOptions = {},
  ) {
    if (!baseModel) throw new Error('openai: name the model: --policy openai:<model>');
    this.id = `openai:${baseModel}`;
    this.requestModel = baseModel;
    // OpenAI's own API needs a key; a local server (vLLM, serve-policy) may not.
    const keyEnv = options.apiKeyEnv ?? 'OPENAI_API_KEY';
    this.key = apiKeyFrom(keyEnv, { required: options.baseURL === undefined, provider: 'openai', flag: '--api-key-env' });
    this.client = new OpenAI({
      apiKey: this.key ?? 'none',
      ...(options.baseURL ? { baseURL: options.baseURL } : {}),
      maxRetries: options.maxRetries ?? 4,
      timeout: options.timeoutMs ?? 120_000,
      ...(options.headers ? { defaultHeaders: options.headers } : {}),
    });
    this.tokenIds = options.tokenIds ?? options.baseURL !== undefined;
    this.limit = concurrencyLimit(options);
    this.sequences = options.sequences ?? new Map();
  }

  get version(): string | number | undefined {
    return this.currentVersion;
  }

  /** The model the requests name now (the base model, or a LoRA adapter chosen with `useModel`). */
  get model(): string {
    return this.requestModel;
  }

  /**
   * Sends the next requests to `model` (e.g. a LoRA adapter just loaded, by its name), sampled
   * turns recording `version`. Requests in flight finish on the model they named.
   */
  useModel(model: string, version?: string | number): void {
    this.requestModel = model;
    this.currentVersion = version;
  }

  usage(): ApiUsage {
    return this.meter.snapshot();
  }

  /** The episode's token sequence so far (when the server gives token ids). */
  sequence(episodeId: string): number[] | undefined {
    return this.sequences.get(episodeId);
  }

  async act(obs: Observation, signal?: AbortSignal): Promise<PolicyAction> {
    const tools = obs.tools.map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.inputSchema } }));
    const version = this.currentVersion; // the weights this request samples from (the model named now)
    const body = {
      model: this.requestModel,
      messages: toOpenAIMessages(obs.messages),
      ...(tools.length ? { tools } : {}),
      ...this.samplingParams(),
      // A seeded policy gives each turn its own seed (the policy's, the episode's group and sample,
      // the turn): reproducible, yet the G episodes of a group do not all sample the same.
      ...(this.options.seed !== undefined ? { seed: fnv1a(`${this.options.seed}:${obs.episodeKey ?? obs.episodeId}:${obs.turn}`) } : {}),
    };
    let response: OpenAI.Chat.Completions.ChatCompletion;
    try {
      response = await this.request(body, signal);
    } catch (err) {
      // A conversation longer than the model's context (OpenAI's code context_length_exceeded,
      // vLLM's and serve-policy's "maximum context length" 400) ends the episode as the embedded
      // policy ends it: an answer that scores as unsolved, not a failed episode.
      if (err instanceof ApiRequestError && err.status === 400 && (err.code === 'context_length_exceeded' || /maximum context length/i.test(err.message))) {
        return {
          content: 'The conversation no longer fits my context.',
          stopReason: 'context_length',
          ...(version !== undefined ? { policyVersion: version } : {}),
        };
      }
      throw err;
    }
    const choice = response.choices[0];
    if (!choice) throw new Error(`openai ${this.model}: the response has no choices`);
    const message = choice.message;
    const calls: ProposedCall[] = (message.tool_calls ?? []).flatMap((c) =>
      c.type === 'function' ? [{ id: c.id, name: c.function.name, arguments: c.function.arguments }] : [],
    );
    const action: PolicyAction = {
      content: message.content ?? '',
      ...(calls.length ? { toolCalls: calls } : {}),
      ...(choice.finish_reason ? { stopReason: choice.finish_reason } : {}),
      ...(response.usage ? { usage: { prompt_tokens: response.usage.prompt_tokens, completion_tokens: response.usage.completion_tokens } } : {}),
      ...(version !== undefined ? { policyVersion: version } : {}),
    };
    const t = completionTokens(response as unknown as TokenInfo);
    if (t.prompt && t.tokens && t.logprobs && t.logprobs.length === t.tokens.length) {
      const seq = obs.turn === 0 ? [] : (this.sequences.get(obs.episodeId) ?? []);
      const extends_ = t.prompt.length >= seq.length && seq.every((id, i) => t.prompt![i] === id);
      if (extends_) {
        action.envTokens = t.prompt.slice(seq.length);
        action.tokens = t.tokens;
        action.logprobs = t.logprobs;
      } else {
        action.tokenDrift = firstDifference(seq, t.prompt);
      }
      this.sequences.set(obs.episodeId, t.prompt.concat(t.tokens));
    }
    return action;
  }

  endEpisode(episodeId: string): void {
    this.sequences.delete(episodeId);
  }

  async complete(request: ChatRequest, signal?: AbortSignal): Promise<ChatResult> {
    const messages = [...(request.system ? [{ role: 'system' as const, content: request.system }] : []), ...request.messages];
    const response = await this.request(
      {
        model: this.requestModel,
        messages,
        ...this.samplingParams({ logprobs: false, tokenIds: false }),
        ...(request.maxTokens !== undefined ? { max_completion_tokens: request.maxTokens } : {}),
        ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      },
      signal,
    );
    const usage: TokenUsage | undefined = response.usage
      ? { prompt_tokens: response.usage.prompt_tokens, completion_tokens: response.usage.completion_tokens }
      : undefined;
    return { text: response.choices[0]?.message.content ?? '', ...(usage ? { usage } : {}) };
  }

  /** The models the server lists (`GET <base>/models`). */
  async models(): Promise<ServedModel[]> {
    const out: ServedModel[] = [];
    for await (const m of await this.client.models.list()) out.push(m as unknown as ServedModel);
    return out;
  }

  /** The served model's context length (vLLM's `max_model_len` in /v1/models), when the server says. */
  async contextLength(): Promise<number | undefined> {
    for (const info of await this.models()) {
      if (info.id === this.baseModel) {
        if (info.version !== undefined) this.currentVersion = info.version;
        return info.max_model_len;
      }
    }
    throw new Error(`openai: the server at ${this.options.baseURL ? shownUrl(this.options.baseURL) : 'the OpenAI API'} serves no model '${this.baseModel}'`);
  }

  /**
   * vLLM: loads a LoRA adapter (a PEFT directory: adapter_config.json, adapter_model.safetensors)
   * under `name` (`POST <base>/load_lora_adapter`); requests then name it as their model.
   */
  async loadLoraAdapter(name: string, path: string): Promise<string> {
    return this.post('load_lora_adapter', { lora_name: name, lora_path: path });
  }

  /** vLLM: unloads the LoRA adapter `name` (`POST <base>/unload_lora_adapter`). */
  async unloadLoraAdapter(name: string): Promise<string> {
    return this.post('unload_lora_adapter', { lora_name: name });
  }

  /**
   * A POST to one of the server's management endpoints (not retried: loading an adapter twice is
   * an error). Answers the body's text; a status other than 2xx throws a ServerEndpointError
   * naming the endpoint, the status and the server's message (any echo of the key cut out).
   */
  private async post(endpoint: string, body: Record<string, unknown>): Promise<string> {
    const base = this.options.baseURL ?? 'https://api.openai.com/v1';
    // The URL as given (a query string kept after the path), and as it may be shown: no user, password or query.
    const u = new URL(base);
    const secrets = [u.username, u.password, u.search.slice(1)].filter((x) => x.length >= 3);
    u.pathname = `${u.pathname.replace(/\/+$/, '')}/${endpoint}`;
    const url = u.toString();
    const shown = `${shownUrl(base)}/${endpoint}`;
    const clean = (t: string) => {
      let out = this.key ? t.split(this.key).join('[key]') : t;
      for (const x of secrets) out = out.split(x).join('[redacted]');
      return out.replace(/\s+/g, ' ').trim().slice(0, 500);
    };
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.key ? { authorization: `Bearer ${this.key}` } : {}), ...this.options.headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 120_000),
      });
    } catch (err) {
      throw new ServerEndpointError(`POST ${shown}: cannot reach the server: ${clean((err as Error).message)}`, endpoint);
    }
    const text = await res.text();
    if (!res.ok) throw new ServerEndpointError(`POST ${shown} answered ${res.status}: ${clean(errorBodyMessage(text))}`, endpoint, res.status);
    return text;
  }

  /**
   * Asks the server to load new weights: `POST <base>/reload` with the model directory (mcp-gym
   * serve-policy's endpoint), for training through a server. Returns the served version.
   */
  async reload(modelDir?: string): Promise<string | number | undefined> {
    const r = await this.client.post<{ version?: string | number }>('/reload', { body: modelDir ? { model_dir: modelDir } : {} });
    this.currentVersion = r.version;
    return r.version;
  }

  async close(): Promise<void> {
    this.sequences.clear();
  }

  private samplingParams(o: { logprobs?: boolean; tokenIds?: boolean } = {}): Record<string, unknown> {
    const p = this.options;
    const logprobs = o.logprobs ?? p.logprobs ?? true;
    const tokenIds = o.tokenIds ?? this.tokenIds;
    return {
      ...(p.temperature !== undefined ? { temperature: p.temperature } : {}),
      ...(p.topP !== undefined ? { top_p: p.topP } : {}),
      max_completion_tokens: p.maxTokens ?? 1024,
      ...(p.seed !== undefined ? { seed: p.seed } : {}),
      ...(logprobs ? { logprobs: true } : {}),
      ...(tokenIds ? { return_token_ids: true, return_tokens_as_token_ids: true } : {}),
      ...(o.logprobs === false ? {} : p.extraBody),
    };
  }

  private async request(body: Record<string, unknown>, signal?: AbortSignal): Promise<OpenAI.Chat.Completions.ChatCompletion> {
    return this.limit(async () => {
      try {
        const r = await this.client.chat.completions.create(
          body as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming,
          signal ? { signal } : undefined,
        );
        this.meter.record(r.usage ? { prompt_tokens: r.usage.prompt_tokens, completion_tokens: r.usage.completion_tokens } : undefined);
        return r;
      } catch (err) {
        this.meter.fail();
        const e = err as { status?: number; code?: string | null };
        throw new ApiRequestError(`openai ${this.model}: ${describeApiError(err, this.key)}`, e.status, e.code ?? undefined);
      }
    });
  }
}

/** The environment's messages (already in the OpenAI format) as request messages. */
export function toOpenAIMessages(messages: Observation['messages']): OpenAI.Chat.Completions.ChatCompletionMessageParam[] {
  return messages.map((m): OpenAI.Chat.Completions.ChatCompletionMessageParam => {
    if (m.role === 'tool') return { role: 'tool', tool_call_id: m.tool_call_id ?? '', content: m.content };
    if (m.role === 'assistant') return { role: 'assistant', content: m.content, ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}) };
    return { role: m.role, content: m.content };
  });
}
