/**
 * Renders a Hugging Face model's own chat template (Jinja, run by @huggingface/jinja) for
 * OpenAI-format messages and tools, as transformers' `apply_chat_template` does.
 *
 * Tool-call arguments: OpenAI messages carry `function.arguments` as a JSON string; templates
 * differ in what they expect. Llama 3.x writes `tool_call.arguments | tojson` (a string would come
 * out quoted), so arguments are parsed into objects for it. Qwen3's template tests
 * `tool_call.arguments is string` and writes a string as it is, an object through `tojson`; with
 * the default `argumentsAs: 'auto'` a template that has that test gets the arguments as they are,
 * strings and objects (what transformers renders for the same messages), any other template gets
 * objects. A string that
 * is not JSON is passed on as a string either way.
 *
 * Dates: templates that print today's date (Llama 3.x via `strftime_now`) would render differently
 * across midnight and so break the append-only rule; the renderer fixes the date when it is made
 * (`now`), so one renderer renders one date.
 */
import { Environment, Template } from '@huggingface/jinja';
import { PythonInterpreter } from './jinja-python.ts';
import type { HfTokenizer } from './tokenizer.ts';

export interface OpenAiToolCall {
  id?: string;
  type?: 'function';
  function: { name: string; arguments: string | Record<string, unknown> };
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: OpenAiToolCall[];
  tool_call_id?: string;
  name?: string;
  /** Qwen3's separate reasoning field (else reasoning lives in content as <think>...</think>). */
  reasoning_content?: string;
}

export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** The tool-call dialect of a template: Qwen/Hermes (<tool_call> JSON) or Llama 3.x (bare JSON, <|python_tag|>). */
export type TemplateFamily = 'qwen' | 'llama3' | 'unknown';

/** Qwen3 (and Hermes-style templates): `<tool_call>` in the template; Llama 3.x: `<|python_tag|>`, an `ipython` role or its header tokens. */
export function detectFamily(template: string | undefined, tokenizer?: Pick<HfTokenizer, 'tokenId'>): TemplateFamily {
  if (template?.includes('<tool_call>')) return 'qwen';
  if (template && (template.includes('<|python_tag|>') || template.includes('ipython') || template.includes('<|start_header_id|>'))) return 'llama3';
  if (tokenizer?.tokenId('<tool_call>') !== undefined) return 'qwen';
  if (tokenizer?.tokenId('<|python_tag|>') !== undefined || tokenizer?.tokenId('<|eot_id|>') !== undefined) return 'llama3';
  return 'unknown';
}

/** The text that ends an assistant turn in a family's template. */
export function turnEndToken(family: TemplateFamily): string | undefined {
  return family === 'qwen' ? '<|im_end|>' : family === 'llama3' ? '<|eot_id|>' : undefined;
}

export interface RendererOptions {
  bosToken?: string;
  eosToken?: string;
  /** How tool-call arguments reach the template (see the file header); default 'auto'. */
  argumentsAs?: 'auto' | 'object' | 'string';
  /** The date the template sees (strftime_now); default: when the renderer is made. */
  now?: Date;
  /** More template variables for every rendering (enable_thinking, tools_in_user_message...). */
  context?: Record<string, unknown>;
}

export interface RenderOptions {
  tools?: ToolSpec[];
  addGenerationPrompt?: boolean;
  context?: Record<string, unknown>;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const FULL_MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

/** The strftime subset chat templates use (%d %b %B %m %Y %y %e), for a fixed date. */
function strftime(now: Date, format: string): string {
  const pad = (n: number) => String(n).padStart(2, '0');
  return format.replace(/%([dbBmYye%])/g, (_m, c: string) => {
    switch (c) {
      case 'd':
        return pad(now.getDate());
      case 'e':
        return String(now.getDate());
      case 'b':
        return MONTHS[now.getMonth()]!;
      case 'B':
        return FULL_MONTHS[now.getMonth()]!;
      case 'm':
        return pad(now.getMonth() + 1);
      case 'Y':
        return String(now.getFullYear());
      case 'y':
        return pad(now.getFullYear() % 100);
      default:
        return '%';
    }
  });
}

export class ChatTemplateRenderer {
  readonly family: TemplateFamily;
  private readonly compiled: Template;
  private readonly argumentsAs: 'object' | 'string';
  private readonly now: Date;

  constructor(
    readonly template: string,
    readonly options: RendererOptions = {},
  ) {
    try {
      this.compiled = new Template(template);
    } catch (err) {
      throw new Error(`ChatTemplateRenderer: the chat template does not parse (${(err as Error).message})`);
    }
    this.family = detectFamily(template);
    const a = options.argumentsAs ?? 'auto';
    this.argumentsAs = a === 'auto' ? (/arguments(?:'\]|"\])?\s+is\s+string/.test(template) ? 'string' : 'object') : a;
    this.now = options.now ?? new Date();
  }

  static fromTokenizer(tokenizer: HfTokenizer, options: RendererOptions = {}): ChatTemplateRenderer {
    if (!tokenizer.chatTemplate)
      throw new Error('ChatTemplateRenderer: the checkpoint has no chat template (tokenizer_config.json chat_template or chat_template.jinja)');
    return new ChatTemplateRenderer(tokenizer.chatTemplate, {
      ...(tokenizer.bosToken !== undefined ? { bosToken: tokenizer.bosToken } : {}),
      ...(tokenizer.eosToken !== undefined ? { eosToken: tokenizer.eosToken } : {}),
      ...options,
    });
  }

  /** Messages as the template wants them: tool-call arguments as objects or strings (see the header). */
  prepareMessages(messages: ChatMessage[]): Record<string, unknown>[] {
    return messages.map((m) => {
      const out: Record<string, unknown> = { ...m, content: m.content ?? '' };
      if (m.tool_calls) {
        out.tool_calls = m.tool_calls.map((c) => ({
          ...c,
          type: c.type ?? 'function',
          function: { name: c.function.name, arguments: this.convertArguments(c.function.arguments) },
        }));
      }
      return out;
    });
  }

  private convertArguments(args: string | Record<string, unknown>): string | Record<string, unknown> {
    // A template that tests `is string` writes a string as it is and an object through tojson: both as given.
    if (this.argumentsAs === 'string') return args;
    if (typeof args !== 'string') return args;
    try {
      const parsed: unknown = JSON.parse(args);
      return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : args;
    } catch {
      return args;
    }
  }

  /** The template's text for a conversation; throws when the template raises (e.g. Llama 3.1 on parallel calls). */
  render(messages: ChatMessage[], options: RenderOptions = {}): string {
    const now = this.now;
    const ctx: Record<string, unknown> = {
      messages: this.prepareMessages(messages),
      add_generation_prompt: options.addGenerationPrompt ?? false,
      bos_token: this.options.bosToken ?? '',
      eos_token: this.options.eosToken ?? '',
      strftime_now: (format: string) => strftime(now, format),
      ...this.options.context,
      ...options.context,
    };
    // As transformers passes them: `tools` and `documents` are always defined (None when not given).
    ctx.tools = options.tools ?? null;
    if (!('documents' in ctx)) ctx.documents = null;
    try {
      // Template.render declares strftime_now itself (today's date) and refuses a redeclaration,
      // so the environment is set up here with the same globals and a fixed date.
      const env = new Environment();
      const globals: Record<string, unknown> = {
        false: false,
        true: true,
        none: null,
        False: false,
        True: true,
        None: null,
        raise_exception: (message: string) => {
          throw new Error(message);
        },
        range: (start: number, stop?: number, step = 1) => {
          const [a, b] = stop === undefined ? [0, start] : [start, stop];
          const out: number[] = [];
          for (let i = a; step > 0 ? i < b : i > b; i += step) out.push(i);
          return out;
        },
      };
      for (const [k, v] of Object.entries({ ...globals, ...ctx })) env.set(k, v);
      // Python's semantics where the library's differ (strip(chars), numbers, tojson, str()): jinja-python.ts.
      return new PythonInterpreter(env).run(this.compiled.parsed).value as string;
    } catch (err) {
      throw new Error(`ChatTemplateRenderer: rendering failed (${(err as Error).message})`);
    }
  }
}
