/**
 * The embedded model's tokenizer and chat template: bytes (UTF-8) are tokens 0-255; roles, tool
 * calls, tool results and the end of a turn are special tokens. A conversation is
 *
 *   <|system|>tools: get, set<|end|>            (the tool names, when the template says so)
 *   <|user|>Add 5 to c.<|end|>
 *   <|assistant|><|tool_call|>incr {"key":"c","by":5}<|/tool_call|><|end|>
 *   <|tool|>{"key":"c","value":"15"}<|end|>
 *   <|assistant|>15<|end|>
 *
 * The rollout side owns tokenisation: sequences grow by appending these pieces; sampled tokens
 * are kept as sampled, never decoded and encoded again.
 */
import { SPECIAL_TOKENS } from './model-config.ts';

export const T = {
  system: SPECIAL_TOKENS['<|system|>'],
  user: SPECIAL_TOKENS['<|user|>'],
  assistant: SPECIAL_TOKENS['<|assistant|>'],
  tool: SPECIAL_TOKENS['<|tool|>'],
  callOpen: SPECIAL_TOKENS['<|tool_call|>'],
  callClose: SPECIAL_TOKENS['<|/tool_call|>'],
  end: SPECIAL_TOKENS['<|end|>'],
  pad: SPECIAL_TOKENS['<|pad|>'],
} as const;

const NAMES = Object.fromEntries(Object.entries(SPECIAL_TOKENS).map(([k, v]) => [v, k])) as Record<number, string>;
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

export function bytes(text: string): number[] {
  return Array.from(encoder.encode(text));
}

/** Text of token ids; special tokens are shown by name unless `skipSpecial`. */
export function decode(ids: ArrayLike<number>, skipSpecial = false): string {
  let out = '';
  let run: number[] = [];
  const flush = () => {
    if (run.length) out += decoder.decode(Uint8Array.from(run));
    run = [];
  };
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (id < 256) run.push(id);
    else {
      flush();
      if (!skipSpecial) out += NAMES[id] ?? `<|${id}|>`;
    }
  }
  flush();
  return out;
}

export interface TemplateOptions {
  maxToolResultBytes: number;
  systemTools: boolean;
}

export interface TemplateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_calls?: { id?: string; function: { name: string; arguments: string } }[];
  /** A tool result's call id and tool name (a Hugging Face template may render them). */
  tool_call_id?: string;
  name?: string;
}

/** Cuts a text to at most `max` bytes on a character boundary, marking the cut. */
export function clipBytes(text: string, max: number): number[] {
  const b = bytes(text);
  if (b.length <= max) return b;
  let cut = max - 3;
  while (cut > 0 && (b[cut]! & 0xc0) === 0x80) cut--; // not inside a UTF-8 sequence
  return [...b.slice(0, cut), ...bytes('...')];
}

export class ChatTemplate {
  constructor(readonly options: TemplateOptions) {}

  /** The prompt: system (tool names), user and earlier messages, ready for the first assistant turn. */
  prompt(messages: TemplateMessage[], toolNames: string[]): number[] {
    const ids: number[] = [];
    const system = messages.filter((m) => m.role === 'system').map((m) => m.content);
    if (this.options.systemTools && toolNames.length) system.push(`tools: ${toolNames.join(', ')}`);
    if (system.length) ids.push(T.system, ...bytes(system.join('\n')), T.end);
    for (const m of messages) {
      if (m.role === 'system') continue;
      if (m.role === 'user') ids.push(T.user, ...bytes(m.content), T.end);
      else if (m.role === 'assistant')
        ids.push(
          T.assistant,
          ...this.assistantBody(
            m.content,
            (m.tool_calls ?? []).map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
          ),
        );
      else ids.push(...this.toolResult(m.content));
    }
    ids.push(T.assistant);
    return ids;
  }

  /** An assistant turn's tokens after <|assistant|>: text, tool calls, <|end|>. */
  assistantBody(content: string, calls: { name: string; arguments: string | Record<string, unknown> }[]): number[] {
    const ids = bytes(content);
    for (const c of calls) {
      const args = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments);
      ids.push(T.callOpen, ...bytes(`${c.name} ${args}`), T.callClose);
    }
    ids.push(T.end);
    return ids;
  }

  toolResult(content: string): number[] {
    return [T.tool, ...clipBytes(content, this.options.maxToolResultBytes), T.end];
  }

  /** What the environment adds after an assistant turn: its tool results, then <|assistant|>. */
  continuation(toolContents: string[]): number[] {
    return [...toolContents.flatMap((c) => this.toolResult(c)), T.assistant];
  }

  /**
   * What the environment adds after an assistant turn, of any kind: tool results, a user's
   * follow-up (a system message too), then <|assistant|>. `addedTools`: tools added since the
   * prompt listed them, said first in a system block (`tools: a, b`) when the template lists tools.
   */
  continuationOf(messages: Pick<TemplateMessage, 'role' | 'content'>[], addedTools: string[] = []): number[] {
    const ids: number[] = [];
    if (this.options.systemTools && addedTools.length) ids.push(T.system, ...bytes(`tools: ${addedTools.join(', ')}`), T.end);
    for (const m of messages) {
      if (m.role === 'tool') ids.push(...this.toolResult(m.content));
      else if (m.role === 'user' || m.role === 'system') ids.push(m.role === 'user' ? T.user : T.system, ...bytes(m.content), T.end);
    }
    ids.push(T.assistant);
    return ids;
  }

  /**
   * A whole conversation for supervised training: ids, and a mask that is 1 on the assistant's
   * tokens (its text, tool calls and <|end|>, not the <|assistant|> marker) and 0 elsewhere.
   */
  conversation(messages: TemplateMessage[], toolNames: string[]): { ids: number[]; mask: number[] } {
    const firstAssistant = messages.findIndex((m) => m.role === 'assistant');
    const head = firstAssistant < 0 ? messages : messages.slice(0, firstAssistant);
    const ids = this.prompt(head, toolNames);
    const mask = ids.map(() => 0);
    const rest = firstAssistant < 0 ? [] : messages.slice(firstAssistant);
    // What the environment said between two assistant turns: tool results, a user's follow-up.
    let pending: TemplateMessage[] = [];
    for (const m of rest) {
      if (m.role !== 'assistant') {
        pending.push(m);
        continue;
      }
      if (pending.length) {
        const c = this.continuationOf(pending);
        ids.push(...c);
        mask.push(...c.map(() => 0));
        pending = [];
      } else if (ids[ids.length - 1] !== T.assistant) {
        ids.push(T.assistant);
        mask.push(0);
      }
      const body = this.assistantBody(
        m.content,
        (m.tool_calls ?? []).map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
      );
      ids.push(...body);
      mask.push(...body.map(() => 1));
    }
    return { ids, mask };
  }
}

export interface ParsedTurn {
  content: string;
  calls: { name: string; arguments: Record<string, unknown> | string }[];
  /** Set when something looked like a tool call but could not be read. */
  error?: string;
}

/**
 * Reads an assistant turn's sampled tokens: the text before the first tool call is the content;
 * each <|tool_call|>name {json}<|/tool_call|> is a call. A call that does not parse is reported
 * in `error` (the agent will see it), never thrown.
 */
export function parseAssistantTokens(ids: number[]): ParsedTurn {
  const end = ids.indexOf(T.end);
  const body = end >= 0 ? ids.slice(0, end) : ids;
  const calls: ParsedTurn['calls'] = [];
  const errors: string[] = [];
  let content = '';
  let i = 0;
  const firstCall = body.indexOf(T.callOpen);
  content = decode(firstCall >= 0 ? body.slice(0, firstCall) : body, true).trim();
  i = firstCall;
  while (i >= 0 && i < body.length) {
    const close = body.indexOf(T.callClose, i + 1);
    const next = body.indexOf(T.callOpen, i + 1);
    const stop = close >= 0 && (next < 0 || close < next) ? close : -1;
    const inner = decode(body.slice(i + 1, stop >= 0 ? stop : next >= 0 ? next : body.length), true).trim();
    if (stop < 0) errors.push(`tool call not closed with <|/tool_call|>: ${JSON.stringify(inner.slice(0, 80))}`);
    else {
      const m = /^([A-Za-z_][\w.-]*)\s*([\s\S]*)$/.exec(inner);
      if (!m) errors.push(`tool call without a tool name: ${JSON.stringify(inner.slice(0, 80))}`);
      else {
        const argText = m[2]!.trim();
        try {
          const parsed: unknown = argText === '' ? {} : JSON.parse(argText);
          if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('the arguments must be a JSON object');
          calls.push({ name: m[1]!, arguments: parsed as Record<string, unknown> });
        } catch (err) {
          errors.push(`the arguments of tool call '${m[1]}' are not a JSON object (${(err as Error).message}): ${JSON.stringify(argText.slice(0, 80))}`);
        }
      }
    }
    i = next;
  }
  if (end < 0) errors.push('the turn did not end with <|end|> (token limit reached)');
  return errors.length ? { content, calls, error: errors.join('; ') } : { content, calls };
}
