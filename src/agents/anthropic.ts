/**
 * The Anthropic policy (`anthropic:<model>`): Claude through the Messages API, with the official
 * `@anthropic-ai/sdk`. It implements Policy (tool-using episodes) and ChatModel (a judge).
 *
 * The environment keeps the conversation in the OpenAI chat format; each turn it is converted
 * whole into Messages API parameters (the API is stateless), following the API's rules:
 * - system messages go, joined, to the top-level `system` parameter;
 * - an assistant turn with tool calls becomes content blocks: the turn's thinking blocks exactly
 *   as the API returned them, its text, then one `tool_use` block per call with the API's own id;
 * - the tool results that follow go back as ONE user message of `tool_result` blocks, in order,
 *   each with the `tool_use_id` of its call (the API refuses a tool_use without its result in the
 *   very next user message, and wants the tool_result blocks before any text in that message);
 *   a tool message that answers no tool_use of the preceding turn (the environment's
 *   `invalid_<turn>` notes) becomes a text block after them;
 * - empty or whitespace-only text blocks are left out (the API refuses them);
 * - thinking (`thinking` with its `signature`) and `redacted_thinking` blocks must be passed back
 *   unchanged when continuing a tool-use turn, so the raw content of every turn is kept per
 *   episode (keyed by the episode id and the turn) and released by `endEpisode`.
 *
 * API version. The SDK (1.x) sends `anthropic-version: 2026-10-21` and the key as
 * `Authorization: Bearer <key>` (no longer `x-api-key`). That version refuses `temperature`,
 * `top_p` and `top_k` with a 400 on every model, even at their defaults, and the SDK's types no
 * longer have them: they are never sent (a `temperature` / `topP` option only draws a warning,
 * and a judge request's `temperature` is ignored). The API has no seed either.
 *
 * Sampling: `max_tokens` is required (default 1024); with manual thinking it must exceed
 * `budget_tokens` (at least 1024), so it is raised to budget + 1024 when it does not. Adaptive
 * thinking is sent as `{type: 'adaptive'}`, the effort as `output_config.effort`. Which thinking
 * type a model accepts is the API's call (newer models refuse `enabled` with a budget).
 *
 * The response: text blocks joined are the content, `tool_use` blocks the tool calls (kept with
 * the API's ids), `stop_reason` is recorded as is. `max_tokens` (and
 * `model_context_window_exceeded`) can cut a tool_use block short: its calls are dropped and the
 * text is the answer. `refusal` and `pause_turn` end the turn with the text (may be empty).
 *
 * Retries are the SDK's own (see api.ts): on a connection error, 408, 409, 429, 5xx and 529
 * "overloaded" it waits for `retry-after` / `retry-after-ms` when the server sends one (under a
 * minute), else with jittered exponential backoff (0.5 s doubling to 8 s), up to `maxRetries`
 * times (default 4), each try limited to `timeoutMs` (default 120 s; passing a timeout also keeps
 * the SDK from refusing large non-streaming `max_tokens`). A request that still fails throws
 * `anthropic <model>: <error>`, which ends only that episode (finish `error`); the meter counts it.
 * The API key is read from the environment, sent only in the SDK's Authorization header, and
 * cut out of every error message.
 */
import Anthropic from '@anthropic-ai/sdk';
import type { ApiUsage, ChatMessage, ChatModel, ChatRequest, ChatResult, Observation, Policy, PolicyAction, ProposedCall, TokenUsage } from '../env/index.ts';
import { apiKeyFrom, concurrencyLimit, describeApiError, UsageMeter, type ApiOptions } from './api.ts';

type MessageParam = Anthropic.Messages.MessageParam;
type ContentBlock = Anthropic.Messages.ContentBlock;
type ContentBlockParam = Anthropic.Messages.ContentBlockParam;
type CreateParams = Anthropic.Messages.MessageCreateParamsNonStreaming;
type Effort = NonNullable<Anthropic.Messages.OutputConfig['effort']>;

export type AnthropicThinking = { type: 'enabled'; budgetTokens: number } | { type: 'adaptive' };

export interface AnthropicPolicyOptions extends ApiOptions {
  /**
   * Extended thinking: `enabled` with a budget of thinking tokens (at least 1024), or `adaptive`
   * (the model decides how much to think; newer models). Off when not given.
   */
  thinking?: AnthropicThinking;
  /** How much effort the model puts into a response (`output_config.effort`; with adaptive thinking). */
  effort?: Effort;
}

/** The stop reasons after which tool_use blocks may be cut short or are not to be run. */
const NO_CALLS = new Set(['max_tokens', 'model_context_window_exceeded', 'refusal', 'pause_turn']);

/** A turn's raw assistant content as the API returned it, and the ids of the tool calls it gave. */
interface RawTurn {
  content: ContentBlock[];
  toolIds: string[];
}

export class AnthropicPolicy implements Policy, ChatModel {
  readonly id: string;
  private readonly client: Anthropic;
  private readonly key: string;
  private readonly limit: ReturnType<typeof concurrencyLimit>;
  private readonly meter = new UsageMeter();
  /** Per episode, per turn: the raw assistant content (for thinking blocks to be passed back). */
  private readonly raw = new Map<string, Map<number, RawTurn>>();

  constructor(
    readonly model: string,
    private readonly options: AnthropicPolicyOptions = {},
  ) {
    if (!model) throw new Error('anthropic: name the model: --policy anthropic:<model>');
    const thinking = options.thinking;
    if (thinking?.type === 'enabled' && !(Number.isInteger(thinking.budgetTokens) && thinking.budgetTokens >= 1024)) {
      throw new Error(`anthropic: the thinking budget must be an integer of at least 1024 tokens, got ${thinking.budgetTokens}`);
    }
    this.id = `anthropic:${model}`;
    this.key = apiKeyFrom(options.apiKeyEnv ?? 'ANTHROPIC_API_KEY', { required: true, provider: 'anthropic', flag: '--api-key-env' })!;
    // A key passed in code is the SDK's only credential: it reads no other from the environment.
    this.client = new Anthropic({
      apiKey: this.key,
      ...(options.baseURL ? { baseURL: options.baseURL } : {}),
      // The SDK's retries: retry-after honoured, else jittered exponential backoff, on 408/409/429/5xx/529.
      maxRetries: options.maxRetries ?? 4,
      timeout: options.timeoutMs ?? 120_000,
      ...(options.headers ? { defaultHeaders: options.headers } : {}),
    });
    this.limit = concurrencyLimit(options);
    if (options.temperature !== undefined || options.topP !== undefined) {
      process.emitWarning(`anthropic: temperature and top_p are not sent: API version 2026-10-21 refuses them on every model`, {
        code: 'MCP_GYM_ANTHROPIC_SAMPLING',
      });
    }
  }

  usage(): ApiUsage {
    return this.meter.snapshot();
  }

  /** Episodes whose raw assistant content is held (released by endEpisode). */
  get heldEpisodes(): number {
    return this.raw.size;
  }

  async act(obs: Observation, signal?: AbortSignal): Promise<PolicyAction> {
    const turns = this.raw.get(obs.episodeId);
    // The k-th assistant message of the episode's own is turn k; any before them came with the task.
    const opening = obs.messages.filter((m) => m.role === 'assistant').length - obs.turn;
    const { system, messages } = toAnthropicMessages(obs.messages, (index, m) => {
      const stored = turns?.get(index - opening);
      const ids = (m.tool_calls ?? []).map((c) => c.id);
      // Only the turn that gave exactly these calls (the API's ids) has its raw blocks reused.
      return stored && stored.toolIds.length === ids.length && stored.toolIds.every((id, i) => id === ids[i]) ? stored.content : undefined;
    });
    const tools = obs.tools.map(
      (t): Anthropic.Messages.Tool => ({
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        input_schema: { ...t.inputSchema, type: 'object' } as Anthropic.Messages.Tool.InputSchema,
      }),
    );
    const response = await this.request(
      {
        model: this.model,
        messages,
        ...(system ? { system } : {}),
        ...(tools.length ? { tools } : {}),
        ...this.samplingParams(),
      },
      signal,
    );

    const stopReason = response.stop_reason ?? undefined;
    const content = textOf(response.content);
    const calls: ProposedCall[] =
      stopReason !== undefined && NO_CALLS.has(stopReason)
        ? []
        : response.content.flatMap((b) => (b.type === 'tool_use' ? [{ id: b.id, name: b.name, arguments: asArguments(b.input) }] : []));
    let episode = turns;
    if (!episode) this.raw.set(obs.episodeId, (episode = new Map()));
    episode.set(obs.turn, { content: response.content, toolIds: calls.map((c) => c.id!) });
    return {
      content,
      ...(calls.length ? { toolCalls: calls } : {}),
      ...(stopReason ? { stopReason } : {}),
      usage: usageOf(response.usage),
    };
  }

  endEpisode(episodeId: string): void {
    this.raw.delete(episodeId);
  }

  /** A plain messages call without tools (a judge), with thinking as configured. */
  async complete(request: ChatRequest, signal?: AbortSignal): Promise<ChatResult> {
    const messages: MessageParam[] = request.messages.filter((m) => m.content.trim() !== '').map((m) => ({ role: m.role, content: m.content }));
    const response = await this.request(
      {
        model: this.model,
        messages,
        ...(request.system ? { system: request.system } : {}),
        ...this.samplingParams({ maxTokens: request.maxTokens }),
      },
      signal,
    );
    return { text: textOf(response.content), usage: usageOf(response.usage) };
  }

  async close(): Promise<void> {
    this.raw.clear();
  }

  /** max_tokens, thinking and effort, as the API allows them together. */
  private samplingParams(o: { maxTokens?: number } = {}): Pick<CreateParams, 'max_tokens' | 'thinking' | 'output_config'> {
    const p = this.options;
    let maxTokens = o.maxTokens ?? p.maxTokens ?? 1024;
    let thinking: CreateParams['thinking'];
    if (p.thinking?.type === 'enabled') {
      // budget_tokens must be below max_tokens (thinking tokens count toward it).
      if (maxTokens <= p.thinking.budgetTokens) maxTokens = p.thinking.budgetTokens + 1024;
      thinking = { type: 'enabled', budget_tokens: p.thinking.budgetTokens };
    } else if (p.thinking?.type === 'adaptive') {
      thinking = { type: 'adaptive' };
    }
    return { max_tokens: maxTokens, ...(thinking ? { thinking } : {}), ...(p.effort ? { output_config: { effort: p.effort } } : {}) };
  }

  private async request(body: CreateParams, signal?: AbortSignal): Promise<Anthropic.Messages.Message> {
    return this.limit(async () => {
      let r: Anthropic.Messages.Message;
      try {
        r = await this.client.messages.create(body, signal ? { signal } : undefined);
      } catch (err) {
        this.meter.fail();
        throw new Error(`anthropic ${this.model}: ${describeApiError(err, this.key)}`);
      }
      this.meter.record(usageOf(r.usage));
      return r;
    });
  }
}

/**
 * The environment's conversation (OpenAI format) as Messages API parameters. `rawTurn(index, m)`
 * gives the raw content the API returned for the index-th assistant message, when known: its
 * blocks are then passed back in their order (thinking blocks unchanged), with the tool_use
 * blocks that the message's calls name.
 */
export function toAnthropicMessages(
  messages: ChatMessage[],
  rawTurn: (index: number, m: ChatMessage) => ContentBlock[] | undefined = () => undefined,
): { system?: string; messages: MessageParam[] } {
  const system: string[] = [];
  const out: MessageParam[] = [];
  /** Appends blocks as a message of `role`, merged into the previous one when it has that role. */
  const push = (role: 'user' | 'assistant', blocks: ContentBlockParam[]) => {
    if (blocks.length === 0) return;
    const last = out[out.length - 1];
    if (last && last.role === role && Array.isArray(last.content)) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  let assistantIndex = 0;
  let lastToolIds = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role === 'system') {
      if (m.content.trim()) system.push(m.content);
    } else if (m.role === 'user') {
      push('user', text(m.content));
    } else if (m.role === 'assistant') {
      const calls = m.tool_calls ?? [];
      const uses = calls.map(
        (c): Anthropic.Messages.ToolUseBlockParam => ({ type: 'tool_use', id: c.id, name: c.function.name, input: parseArguments(c.function.arguments) }),
      );
      const raw = calls.length ? rawTurn(assistantIndex, m) : undefined;
      let blocks: ContentBlockParam[];
      if (raw) {
        // The API's own order: thinking blocks unchanged, text, the tool_use blocks.
        const byId = new Map(uses.map((u) => [u.id, u]));
        blocks = raw.flatMap((b): ContentBlockParam[] => {
          if (b.type === 'thinking') return [{ type: 'thinking', thinking: b.thinking, signature: b.signature }];
          if (b.type === 'redacted_thinking') return [{ type: 'redacted_thinking', data: b.data }];
          if (b.type === 'text') return text(b.text);
          if (b.type === 'tool_use') {
            const u = byId.get(b.id);
            byId.delete(b.id);
            return u ? [u] : [];
          }
          return [];
        });
        blocks.push(...byId.values());
      } else {
        blocks = [...text(m.content), ...uses];
      }
      push('assistant', blocks);
      lastToolIds = new Set(calls.map((c) => c.id));
      assistantIndex++;
    } else {
      // A run of tool messages: one user message, the tool_result blocks first (in order), then notes.
      const results: ContentBlockParam[] = [];
      const notes: ContentBlockParam[] = [];
      for (; i < messages.length && messages[i]!.role === 'tool'; i++) {
        const t = messages[i]!;
        if (t.tool_call_id !== undefined && lastToolIds.has(t.tool_call_id)) {
          results.push({
            type: 'tool_result',
            tool_use_id: t.tool_call_id,
            ...(t.content ? { content: t.content } : {}),
            ...(t.is_error ? { is_error: true } : {}),
          });
        } else {
          notes.push(...text(t.content));
        }
      }
      i--;
      push('user', [...results, ...notes]);
    }
  }
  return { ...(system.length ? { system: system.join('\n\n') } : {}), messages: out };
}

/** A text block, or none for empty or whitespace-only text (the API refuses those). */
function text(s: string): Anthropic.Messages.TextBlockParam[] {
  return s.trim() === '' ? [] : [{ type: 'text', text: s }];
}

function textOf(content: ContentBlock[]): string {
  return content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('');
}

/** A tool call's arguments (a JSON object text) as a tool_use input; `{}` when they do not parse. */
function parseArguments(s: string): Record<string, unknown> {
  try {
    const v: unknown = s.trim() === '' ? {} : JSON.parse(s);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** A tool_use input as the environment's arguments (an object; anything else as its JSON text). */
function asArguments(input: unknown): Record<string, unknown> | string {
  return input !== null && typeof input === 'object' && !Array.isArray(input) ? (input as Record<string, unknown>) : JSON.stringify(input ?? {});
}

/** The API's usage as tokens: input includes the prompt-cache writes and reads. */
function usageOf(u: Anthropic.Messages.Usage | undefined): TokenUsage {
  return {
    prompt_tokens: (u?.input_tokens ?? 0) + (u?.cache_creation_input_tokens ?? 0) + (u?.cache_read_input_tokens ?? 0),
    completion_tokens: u?.output_tokens ?? 0,
  };
}
