/**
 * An episode's token sequence for a Hugging Face model, grown by appending (the rollout side's
 * rule: the sampled tokens are kept as sampled, never decoded and encoded again):
 *
 *   start(messages, tools)  -> the prompt: the template's rendering with add_generation_prompt;
 *   appendSampled(ids)      -> the model's turn, as sampled (ending with <|im_end|> / <|eot_id|>);
 *   continue(newMessages)   -> what the environment adds (tool results, the next generation
 *                              prompt): render(longer conversation) minus the text so far.
 *
 * `continue` checks that the text so far (prompt texts + the decoded sampled tokens) is a prefix
 * of the template's rendering of the longer conversation. When it is not, the template renders
 * the earlier turns differently from what the sequence holds and the result says so
 * (`ok: false, reason: 'prefix-mismatch'`) instead of silently drifting; the sequence is left as it
 * was, and the caller marks the episode (or starts over from `rendered`). Known cases:
 *
 * - Qwen3 drops `<think>...</think>` from assistant turns before the last user message, so a
 *   new user message after a turn with reasoning rewrites that turn; it also renders an empty
 *   `<think>\n\n</think>\n\n` only on the last assistant turn, so a turn sampled after the
 *   enable_thinking=false prompt (which ends with that empty block) does not survive the next
 *   rendering either;
 * - Llama 3.1 trims message contents, so a sampled answer with trailing whitespace differs.
 *
 * Each piece is encoded on its own. That equals encoding the whole text when pieces meet at a
 * special token (the sampled turn ends with one, the environment's piece starts after it): byte-level
 * BPE never merges across special tokens.
 */
import type { HfTokenizer } from './tokenizer.ts';
import { type ChatMessage, type ChatTemplateRenderer, type RenderOptions, type ToolSpec, turnEndToken } from './chat-template.ts';
import { parseToolCalls } from './tool-calls.ts';

/** Where the template would render a sampled turn otherwise than it was sampled (continue's keepSampled). */
export interface Rewritten {
  at: number;
  expected: string;
  actual: string;
}

export type ContinueResult =
  | { ok: true; ids: number[]; text: string; rewritten?: Rewritten }
  | {
      ok: false;
      reason: 'prefix-mismatch';
      /** The first character where the rendering and the sequence's text differ. */
      at: number;
      /** The rendering around `at`, and the sequence's text there. */
      expected: string;
      actual: string;
      /** The template's rendering of the whole longer conversation. */
      rendered: string;
    }
  | { ok: false; reason: 'render-error'; error: string };

const around = (s: string, at: number) => s.slice(Math.max(0, at - 40), at + 60);

/** The assistant message a sampled turn's text stands for, as the template should render it again. */
export function assistantMessageFromText(text: string, family: ChatTemplateRenderer['family']): ChatMessage {
  const end = turnEndToken(family);
  let body = text;
  if (end && body.endsWith(end)) body = body.slice(0, -end.length);
  if (family === 'llama3' && body.endsWith('<|eom_id|>')) body = body.slice(0, -'<|eom_id|>'.length);
  const parsed = parseToolCalls(body, family);
  if (!parsed.calls.length) return { role: 'assistant', content: body };
  const tool_calls = parsed.calls.map((c, i) => ({
    id: `call_${i}`,
    type: 'function' as const,
    function: { name: c.name, arguments: c.argumentsText ?? c.arguments },
  }));
  const first = body.indexOf('<tool_call>');
  if (family === 'qwen' && first >= 0) {
    const content = body.slice(0, first).replace(/\n$/, '');
    return { role: 'assistant', content, tool_calls };
  }
  return { role: 'assistant', content: parsed.content, tool_calls };
}

export class HfSequence {
  private _ids: number[] = [];
  private _mask: number[] = [];
  private _text = '';
  private _messages: ChatMessage[] = [];
  private tools: ToolSpec[] | undefined;
  /** The sampled turn not yet followed by `continue`. */
  private pending: ChatMessage | undefined;
  /** The template's rendering of the conversation so far (differs from the text after a kept rewrite). */
  private shadow = '';
  /** Where the generation prompt starts in `shadow` (Qwen3's may hold an empty think block the next rendering drops). */
  private historyEnd = 0;

  constructor(
    readonly tokenizer: HfTokenizer,
    readonly renderer: ChatTemplateRenderer,
    readonly options: { context?: Record<string, unknown> } = {},
  ) {}

  get ids(): readonly number[] {
    return this._ids;
  }
  /** 1 on sampled tokens, 0 on prompt and environment tokens. */
  get mask(): readonly number[] {
    return this._mask;
  }
  /** The text the sequence stands for (prompt and environment texts, decoded sampled tokens). */
  get text(): string {
    return this._text;
  }
  get messages(): readonly ChatMessage[] {
    return this._messages;
  }

  private renderOptions(addGenerationPrompt: boolean): RenderOptions {
    return { ...(this.tools ? { tools: this.tools } : {}), addGenerationPrompt, ...(this.options.context ? { context: this.options.context } : {}) };
  }

  /** The prompt's ids (the rendering with add_generation_prompt, encoded); the sequence starts over. */
  start(messages: ChatMessage[], tools?: ToolSpec[]): number[] {
    this.tools = tools && tools.length ? tools : undefined;
    this._messages = [...messages];
    this.pending = undefined;
    this._text = this.renderer.render(this._messages, this.renderOptions(true));
    this.shadow = this._text;
    this.historyEnd = this.renderedHistoryLength(this._messages, this._text);
    this._ids = this.tokenizer.encode(this._text);
    this._mask = this._ids.map(() => 0);
    return [...this._ids];
  }

  /**
   * Appends the model's sampled turn as it is. `message` is the turn as an OpenAI message (for
   * later renderings); by default it is read from the decoded tokens. A turn cut off before its
   * end token gets the family's end token appended (mask 0); those ids are returned.
   */
  appendSampled(ids: number[], message?: ChatMessage): number[] {
    let text = this.tokenizer.decode(ids);
    this._ids.push(...ids);
    this._mask.push(...ids.map(() => 1));
    const added: number[] = [];
    const last = ids[ids.length - 1];
    if (last === undefined || !this.isTurnEnd(last)) {
      const end = turnEndToken(this.renderer.family);
      const endId = end === undefined ? this.tokenizer.eosTokenIds[0] : this.tokenizer.tokenId(end);
      if (endId !== undefined) {
        added.push(endId);
        this._ids.push(endId);
        this._mask.push(0);
        text += this.tokenizer.decode([endId]);
      }
    }
    this._text += text;
    this.pending = message ?? assistantMessageFromText(text, this.renderer.family);
    return added;
  }

  private isTurnEnd(id: number): boolean {
    if (this.tokenizer.eosTokenIds.includes(id)) return true;
    const t = this.tokenizer.decode([id]);
    return t === turnEndToken(this.renderer.family) || t === '<|eom_id|>';
  }

  /**
   * The ids the environment adds after the sampled turn: the rendering of the conversation with
   * `newMessages` (tool results, or a user message) and the next generation prompt, minus the text
   * so far. On a mismatch nothing is appended (see the file header), unless `keepSampled`: then
   * the template's rewriting of the sampled turn is allowed (Qwen3's empty think block, tool-call
   * JSON written with other spacing, Llama's trimming): the sequence keeps the turn as sampled, and
   * the environment's piece is what the rendering has after that turn's end token (found through
   * a placeholder assistant turn, so that it is the same whatever the model wrote). The result's
   * `rewritten` says where the template would have differed. The text before the sampled turn must
   * still be a prefix of the rendering, else the result is a `prefix-mismatch` as without it.
   */
  continue(newMessages: ChatMessage[], options: { keepSampled?: boolean } = {}): ContinueResult {
    const conversation = [...this._messages, ...(this.pending ? [this.pending] : []), ...newMessages];
    let rendered: string;
    try {
      rendered = this.renderer.render(conversation, this.renderOptions(true));
    } catch (err) {
      return { ok: false, reason: 'render-error', error: (err as Error).message };
    }
    if (rendered.startsWith(this._text)) return this.commit(conversation, rendered, rendered, rendered.slice(this._text.length));
    let at = 0;
    while (at < rendered.length && rendered[at] === this._text[at]) at++;
    const mismatch = { ok: false as const, reason: 'prefix-mismatch' as const, at, expected: around(rendered, at), actual: around(this._text, at), rendered };
    // keepSampled: the history up to the sampled turn renders as before; the environment's piece is
    // what follows the turn's end token in the rendering.
    const end = turnEndToken(this.renderer.family);
    const history = this.shadow.slice(0, this.historyEnd);
    if (!options.keepSampled || !this.pending || !end || !rendered.startsWith(history)) return mismatch;
    const stop = rendered.indexOf(end, history.length);
    if (stop < 0) return mismatch;
    const piece = rendered.slice(stop + end.length);
    return this.commit(conversation, this._text + piece, rendered, piece, { at, expected: mismatch.expected, actual: mismatch.actual });
  }

  /** The length of the rendering without the generation prompt, when it is a prefix of `rendered` (else all of it). */
  private renderedHistoryLength(conversation: ChatMessage[], rendered: string): number {
    try {
      const bare = this.renderer.render(conversation, this.renderOptions(false));
      return rendered.startsWith(bare) ? bare.length : rendered.length;
    } catch {
      return rendered.length;
    }
  }

  private commit(conversation: ChatMessage[], text: string, rendered: string, piece: string, rewritten?: Rewritten): ContinueResult {
    const ids = this.tokenizer.encode(piece);
    this._messages = conversation;
    this.pending = undefined;
    this._text = text;
    this.shadow = rendered;
    this.historyEnd = this.renderedHistoryLength(conversation, rendered);
    this._ids.push(...ids);
    this._mask.push(...ids.map(() => 0));
    return { ok: true, ids, text: piece, ...(rewritten ? { rewritten } : {}) };
  }
}
