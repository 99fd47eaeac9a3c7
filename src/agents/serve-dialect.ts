/**
 * What serve-policy speaks for each kind of model (serve-policy/): how a request's messages and
 * tools become the prompt's token ids, and how the sampled tokens are read back as an assistant
 * message, at once or token by token (streaming).
 *
 * - the embedded GPT (`gptDialect`): its own template (template.ts), tool calls as
 *   `<|tool_call|>name args<|/tool_call|>`;
 * - a Hugging Face checkpoint (`hfDialect`): its tokenizer and its own chat template with the tool
 *   format it is trained with (HfTurns: the template's tools, or the Hermes format), rendered as
 *   transformers' apply_chat_template renders it; the calls read by the family's parser
 *   (parseToolCalls, the lenient forms included). Streamed, the text before the first
 *   `<tool_call>` goes out as it comes and the calls when the turn ends.
 */
import { toChatMessages, type HfTurns } from './hf-turns.ts';
import { parseToolCalls, turnEndToken, type ChatMessage, type TemplateFamily, type ToolSpec } from './hf/index.ts';
import { decode, T, type ChatTemplate, type TemplateMessage } from './template.ts';

export interface ParsedCall {
  name: string;
  arguments: string;
}

/** What one token added to the message: text, and/or a tool call that just closed. */
export interface Delta {
  content?: string;
  call?: ParsedCall;
}

/**
 * Reads an assistant turn's tokens as they come: the text before the first tool call (decoded
 * as template.ts's `decode` does: special tokens dropped, each run of bytes decoded on its own),
 * then each tool call once it closes. Stops at `<|end|>`.
 */
export class CompletionParser implements Streamer {
  content = '';
  readonly calls: ParsedCall[] = [];
  private state: 'content' | 'call' | 'after' | 'ended' = 'content';
  private decoder = new TextDecoder('utf-8');
  private call: number[] = [];

  push(token: number): Delta {
    if (this.state === 'ended') return {};
    if (token === T.end) return this.finish();
    if (this.state === 'content') {
      if (token < 256) return this.text(this.decoder.decode(Uint8Array.of(token), { stream: true }));
      const tail = this.decoder.decode();
      if (token === T.callOpen) {
        this.state = 'call';
        this.call = [];
      }
      return this.text(tail);
    }
    if (token === T.callOpen) {
      // A call never closed is dropped; a new one starts.
      this.state = 'call';
      this.call = [];
      return {};
    }
    if (this.state === 'call') {
      if (token !== T.callClose) {
        this.call.push(token);
        return {};
      }
      this.state = 'after';
      const call = parseCall(decode(this.call, true));
      if (!call) return {};
      this.calls.push(call);
      return { call };
    }
    return {}; // text after a tool call
  }

  /** The end of the turn (its <|end|>, or the cut): the text's incomplete character, if any. */
  finish(): Delta {
    const wasContent = this.state === 'content';
    this.state = 'ended';
    return wasContent ? this.text(this.decoder.decode()) : {};
  }

  private text(s: string): Delta {
    if (!s) return {};
    this.content += s;
    return { content: s };
  }
}

/** `name args` (the arguments as sampled, after one space), or undefined without a tool name. */
function parseCall(inner: string): ParsedCall | undefined {
  const m = /^\s*([A-Za-z_][\w.-]*)([\s\S]*)$/.exec(inner);
  if (!m) return undefined;
  const rest = m[2]!;
  return { name: m[1]!, arguments: rest.startsWith(' ') ? rest.slice(1) : rest.trimStart() };
}

/**
 * An assistant turn's tokens as the server returns them: the content (untrimmed) and the closed
 * tool calls with their arguments as sampled; `rendersBack` tells whether `assistantBody` of them
 * gives the tokens again (with the `<|end|>` that a cut-off turn gets).
 */
export function parseCompletion(
  tokens: number[],
  template: Pick<ChatTemplate, 'assistantBody'>,
): { content: string; toolCalls: ParsedCall[]; rendersBack: boolean } {
  const p = new CompletionParser();
  for (const t of tokens) p.push(t);
  p.finish();
  const rendered = template.assistantBody(p.content, p.calls);
  const sampled = tokens.indexOf(T.end) === tokens.length - 1 ? tokens : [...tokens, T.end];
  const rendersBack = rendered.length === sampled.length && rendered.every((t, i) => t === sampled[i]);
  return { content: p.content, toolCalls: p.calls, rendersBack };
}

/** A completion read back: content, calls, and whether sending it back renders the same tokens again. */
export interface ServedTurn {
  content: string;
  toolCalls: ParsedCall[];
  rendersBack: boolean;
}

export interface Streamer {
  push(token: number): Delta;
  finish(): Delta;
  readonly calls: ParsedCall[];
}

/** A request's conversation: its messages and its tools (OpenAI function objects, and their names). */
export interface Conversation {
  messages: TemplateMessage[];
  tools: ToolSpec[];
  toolNames: string[];
}

export interface Dialect {
  prompt(c: Conversation): number[];
  parse(c: Conversation, tokens: number[]): ServedTurn;
  tokenText(id: number): string;
  /** A token's bytes (logprobs entries), where known. */
  tokenBytes(id: number): number[] | null;
  streamer(): Streamer;
}

export function gptDialect(template: ChatTemplate): Dialect {
  const text: string[] = [];
  return {
    prompt: (c) => template.prompt(c.messages, c.toolNames),
    parse: (_c, tokens) => parseCompletion(tokens, template),
    tokenText: (id) => (text[id] ??= decode([id])),
    tokenBytes: (id) => (id < 256 ? [id] : null),
    streamer: () => new CompletionParser(),
  };
}

/** The messages of a request as the chat template wants them (tool calls keep their ids). */
function chatMessages(messages: TemplateMessage[]): ChatMessage[] {
  return toChatMessages(
    messages.map((m) => ({
      ...m,
      ...(m.tool_calls ? { tool_calls: m.tool_calls.map((c, i) => ({ id: c.id ?? `call_${i}`, type: 'function' as const, function: c.function })) } : {}),
    })) as never,
  );
}

/** A Hugging Face turn's text read as a message: the content before the first call, the calls with their arguments as written. */
function readTurn(raw: string, family: TemplateFamily): { content: string; toolCalls: ParsedCall[] } {
  const parsed = parseToolCalls(raw, family);
  const toolCalls = parsed.calls.map((c) => ({ name: c.name, arguments: c.argumentsText ?? JSON.stringify(c.arguments) }));
  const at = raw.indexOf('<tool_call>');
  const content = toolCalls.length && at >= 0 ? raw.slice(0, at).replace(/\n$/, '') : parsed.content;
  return { content, toolCalls };
}

export function hfDialect(turns: HfTurns): Dialect {
  const { tokenizer, renderer } = turns;
  const end = turnEndToken(renderer.family);
  const text: string[] = [];
  const render = (c: Conversation, extra: ChatMessage[], gen: boolean) =>
    renderer.render([...chatMessages(c.messages), ...extra], { ...(c.tools.length ? { tools: c.tools } : {}), addGenerationPrompt: gen });
  return {
    prompt: (c) => tokenizer.encode(render(c, [], true)),
    parse: (c, tokens) => {
      const raw = tokenizer.decode(tokens);
      const { content, toolCalls } = readTurn(raw, renderer.family);
      // Sent back (followed by another message, as the next request has it), the message renders
      // after the prompt's text: the same tokens when it renders as sampled. (Followed by nothing,
      // some templates render the last assistant turn otherwise: Qwen3 adds an empty think block.)
      let rendersBack = false;
      try {
        const message: ChatMessage = {
          role: 'assistant',
          content,
          ...(toolCalls.length ? { tool_calls: toolCalls.map((f, i) => ({ id: `call_${i}`, type: 'function' as const, function: f })) } : {}),
        };
        const sampled = end !== undefined && !raw.endsWith(end) ? raw + end : raw;
        rendersBack = render(c, [message, { role: 'user', content: '.' }], false).startsWith(render(c, [], true) + sampled);
      } catch {
        rendersBack = false;
      }
      return { content, toolCalls, rendersBack };
    },
    tokenText: (id) => (text[id] ??= tokenizer.decode([id])),
    tokenBytes: () => null,
    streamer: () => new HfStreamer((ids) => tokenizer.decode(ids), renderer.family, end),
  };
}

/**
 * A Hugging Face turn streamed: the text before the first `<tool_call>` (end tokens left out) goes
 * out as it is decoded; the calls go out when the turn ends, read from the whole text.
 */
class HfStreamer implements Streamer {
  readonly calls: ParsedCall[] = [];
  private readonly tokens: number[] = [];
  private sent = 0;
  private ended = false;

  constructor(
    private readonly decodeIds: (ids: number[]) => string,
    private readonly family: TemplateFamily,
    private readonly end: string | undefined,
  ) {}

  /** The text that may go out: up to the first call's tag, without a trailing end token or a partial character. */
  private visible(final: boolean): string {
    let t = this.decodeIds(this.tokens);
    // Llama 3.x calls are the whole turn (bare JSON or <|python_tag|>): such a turn is held back to its end.
    if (!final && this.family === 'llama3' && /^\s*(\{|<$|<\||<\|python_tag)/.test(t)) return '';
    const at = t.indexOf('<tool_call>');
    if (at >= 0) t = t.slice(0, at);
    if (this.end && t.endsWith(this.end)) t = t.slice(0, -this.end.length);
    if (!final) {
      // hold back what may be the start of a tag or an unfinished character
      const lt = t.lastIndexOf('<');
      if (lt >= 0 && lt > t.length - 12) t = t.slice(0, lt);
      if (t.endsWith('\ufffd')) t = t.slice(0, -1);
      // and a newline that may be the one before a call's tag (not part of the content then)
      if (t.endsWith('\n')) t = t.slice(0, -1);
    }
    return t;
  }

  push(token: number): Delta {
    if (this.ended) return {};
    this.tokens.push(token);
    const t = this.visible(false);
    if (t.length <= this.sent) return {};
    const out = t.slice(this.sent);
    this.sent = t.length;
    return { content: out };
  }

  finish(): Delta {
    if (this.ended) return {};
    this.ended = true;
    const raw = this.decodeIds(this.tokens);
    const { content, toolCalls } = readTurn(raw, this.family);
    this.calls.push(...toolCalls);
    const rest = toolCalls.length ? content.slice(this.sent) : this.visible(true).slice(this.sent);
    return rest ? { content: rest } : {};
  }
}
