/**
 * The turns of a Hugging Face checkpoint's episodes, on the rollout side: the model's own chat
 * template (with the tool list) renders the prompt, each sampled turn is appended as sampled, and
 * what the environment adds (tool results, the next generation prompt) is the template's rendering
 * of the longer conversation minus the text so far (HfSequence). No turn is decoded and encoded
 * again, so the token sequence the learner trains on is the one the model sampled from.
 *
 * A template that would render the sampled turn itself otherwise (Qwen3 drops an empty think
 * block from turns before the last, tool-call JSON comes back with the template's spacing, Llama
 * 3.1 trims contents) does not break the sequence: the turn stays as sampled and the environment's
 * piece is what the template renders after it (HfSequence.continue's keepSampled); the model goes
 * on from its own tokens, as it would in one long generation. Only a template that rewrites the
 * history before the sampled turn (Qwen3 drops reasoning from earlier turns once a new user
 * message comes, as a task's follow-up is) or cannot render the conversation ends the append: the
 * turn is marked `tokenDrift` (the trajectory is then never trained on) and the episode goes on
 * from the template's rendering of the whole conversation.
 *
 * The tools are rendered once, in the prompt. When they change mid-episode (a server's
 * tools/list_changed), the added tools' schemas, as the template lists tools, and the removed
 * tools' names are written at the start of the next message the environment adds (the follow-up,
 * or a tool result): toolChangeNotice (hf/tool-format.ts). The sequence stays append-only.
 */
import type { Observation, PolicyAction, ProposedCall } from '../env/index.ts';
import {
  ChatTemplateRenderer,
  HfSequence,
  HfTokenizer,
  parseToolCalls,
  resolveToolFormat,
  toolChangeNotice,
  turnEndToken,
  type ChatMessage,
  type ToolFormat,
  type ToolFormatChoice,
  type ToolSpec,
} from './hf/index.ts';

export interface HfTurnsOptions {
  /** More chat-template variables for every rendering (e.g. `enable_thinking: false` for Qwen3). */
  context?: Record<string, unknown>;
  /** The date templates print (Llama 3.1's "Today Date"); default: now. Fix it for reproducible runs. */
  now?: Date;
  /** How tools are rendered (hf/tool-format.ts): the template's own, or the Hermes format; default auto. */
  toolFormat?: ToolFormatChoice;
}

/** The prompt of a turn: the tokens the environment adds before it, and why the sequence was restarted, if it was. */
export interface TurnPrompt {
  env: number[];
  drift?: string;
  /** The tool schemas' tokens in the episode's sequence now: the prompt's tool list, and every tool change appended since. */
  toolTokens: number;
}

/** The environment's messages as chat-template messages. */
export function toChatMessages(messages: Observation['messages']): ChatMessage[] {
  return messages.map((m): ChatMessage => {
    if (m.role === 'tool')
      return { role: 'tool', content: m.content, ...(m.tool_call_id ? { tool_call_id: m.tool_call_id } : {}), ...(m.name ? { name: m.name } : {}) };
    if (m.role === 'assistant') return { role: 'assistant', content: m.content, ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}) };
    return { role: m.role, content: m.content };
  });
}

/** Tools as the chat template lists them (OpenAI's function format). */
export function toToolSpecs(
  tools: { name: string; description?: string; inputSchema?: Record<string, unknown>; parameters?: Record<string, unknown> }[],
): ToolSpec[] {
  return tools.map((t) => ({
    type: 'function',
    function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.inputSchema ?? t.parameters ?? { type: 'object' } },
  }));
}

/**
 * Messages the environment adds, with a change of the tools since the model was last told of them
 * (`told`: by name, each spec's JSON) written at the start of the first user or tool message
 * (toolChangeNotice), and `told` updated. With no such message the change waits for the next one.
 */
export function toolNoticeIn(
  told: Map<string, string>,
  specs: ToolSpec[],
  messages: ChatMessage[],
  family: ChatTemplateRenderer['family'],
): { messages: ChatMessage[]; notice?: string } {
  const added = specs.filter((t) => told.get(t.function.name) !== JSON.stringify(t));
  const current = new Set(specs.map((t) => t.function.name));
  const removed = [...told.keys()].filter((n) => !current.has(n));
  const at = messages.findIndex((m) => m.role === 'user' || m.role === 'tool');
  if ((added.length === 0 && removed.length === 0) || at < 0) return { messages };
  const out = [...messages];
  const m = out[at]!;
  const notice = toolChangeNotice(family, added, removed);
  out[at] = { ...m, content: notice + (m.content ?? '') };
  told.clear();
  for (const t of specs) told.set(t.function.name, JSON.stringify(t));
  return { messages: out, notice };
}

/**
 * A demonstration as the model's own template renders it, with the loss on the assistant's turns
 * only: the sequence is built as a rollout builds it (HfSequence: the prompt, each assistant turn
 * appended as the template writes it when the turn is the conversation's last, the environment's
 * pieces after it), so what SFT teaches is what sampling continues from. `toolsAt`: the tools
 * shown at each assistant turn, where they changed during the episode (the toolbelt and search
 * modes): the prompt lists the first turn's, and each change is written as a rollout writes it
 * (toolNoticeIn). Undefined when the template cannot render it.
 */
export function hfDemoExample(
  turns: Pick<HfTurns, 'tokenizer' | 'renderer'>,
  messages: ChatMessage[],
  tools: ToolSpec[],
  toolsAt?: ToolSpec[][],
): { ids: number[]; mask: number[] } | undefined {
  const seq = new HfSequence(turns.tokenizer, turns.renderer);
  let i = messages.findIndex((m) => m.role === 'assistant');
  if (i <= 0) return undefined;
  const opts = (gen: boolean) => ({ ...(tools.length ? { tools } : {}), addGenerationPrompt: gen });
  const first = toolsAt?.[0] ?? tools;
  const told = new Map(first.map((t) => [t.function.name, JSON.stringify(t)]));
  let k = 0; // the assistant turn
  seq.start(messages.slice(0, i), first);
  const end = turnEndToken(turns.renderer.family)!;
  for (;;) {
    let text: string;
    try {
      const before = turns.renderer.render(messages.slice(0, i), opts(true));
      const after = turns.renderer.render(messages.slice(0, i + 1), opts(false));
      if (!after.startsWith(before)) return undefined;
      const turn = after.slice(before.length);
      const stop = turn.indexOf(end);
      if (stop < 0) return undefined;
      text = turn.slice(0, stop + end.length);
    } catch {
      return undefined;
    }
    seq.appendSampled(turns.tokenizer.encode(text), messages[i]);
    let j = i + 1;
    while (j < messages.length && messages[j]!.role !== 'assistant') j++;
    if (j >= messages.length) break;
    k++;
    const piece = toolsAt?.[k] ? toolNoticeIn(told, toolsAt[k]!, messages.slice(i + 1, j), turns.renderer.family).messages : messages.slice(i + 1, j);
    if (!seq.continue(piece, { keepSampled: true }).ok) return undefined;
    i = j;
  }
  return { ids: [...seq.ids], mask: [...seq.mask] };
}

export class HfTurns {
  /** Per episode: its sequence, the end token a cut-off turn still owes, and the tools it told the model of (by name, their spec's JSON). */
  private readonly episodes = new Map<string, { seq: HfSequence; carry: number[]; tools: Map<string, string>; toolTokens: number }>();

  constructor(
    readonly tokenizer: HfTokenizer,
    readonly renderer: ChatTemplateRenderer,
    private readonly options: HfTurnsOptions = {},
    /** How tools are rendered: the template's own format, or the Hermes format mcp-gym added or the checkpoint carries. */
    readonly toolFormat: ToolFormat = 'native',
  ) {
    if (renderer.family === 'unknown')
      throw new Error('HfTurns: the chat template has no known tool-call format (Qwen/Hermes <tool_call> or Llama 3.x JSON calls)');
  }

  /** The tokenizer and chat template of a checkpoint directory; a template without tools gets the Hermes format (options.toolFormat). */
  static load(dir: string, options: HfTurnsOptions = {}): HfTurns {
    const tokenizer = HfTokenizer.load(dir);
    if (!tokenizer.chatTemplate) throw new Error(`HfTurns: ${dir} has no chat template (tokenizer_config.json chat_template or chat_template.jinja)`);
    const resolved = resolveToolFormat(tokenizer.chatTemplate, options.toolFormat ?? 'auto');
    const renderer = new ChatTemplateRenderer(resolved.template, {
      ...(tokenizer.bosToken !== undefined ? { bosToken: tokenizer.bosToken } : {}),
      ...(tokenizer.eosToken !== undefined ? { eosToken: tokenizer.eosToken } : {}),
      ...(options.now ? { now: options.now } : {}),
      ...(options.context ? { context: options.context } : {}),
    });
    return new HfTurns(tokenizer, renderer, options, resolved.format);
  }

  /** The chat template episodes are rendered with (with the Hermes prelude when the format was added). */
  get template(): string {
    return this.renderer.template;
  }

  get family(): ChatTemplateRenderer['family'] {
    return this.renderer.family;
  }

  /** The ids that end a sampled turn. */
  get stopIds(): number[] {
    return this.tokenizer.eosTokenIds;
  }

  /** The tokens to append before the episode's next turn (the whole prompt on its first turn). */
  prompt(obs: Observation): TurnPrompt {
    const key = obs.episodeId;
    const ep = this.episodes.get(key);
    const start = (why?: string): TurnPrompt => {
      const seq = new HfSequence(this.tokenizer, this.renderer, this.options.context ? { context: this.options.context } : {});
      const specs = toToolSpecs(obs.tools);
      const messages = toChatMessages(obs.messages);
      const env = seq.start(messages, specs);
      const toolTokens = specs.length ? env.length - this.tokenizer.encode(this.renderer.render(messages, this.renderOptions())).length : 0;
      this.episodes.set(key, { seq, carry: [], tools: new Map(specs.map((t) => [t.function.name, JSON.stringify(t)])), toolTokens });
      return why ? { env, drift: why, toolTokens } : { env, toolTokens };
    };
    if (!ep || obs.turn === 0) return start();
    const r = ep.seq.continue(this.withToolChange(ep, obs), { keepSampled: true });
    if (r.ok) {
      const env = [...ep.carry, ...r.ids];
      ep.carry = [];
      return { env, toolTokens: ep.toolTokens };
    }
    const why =
      r.reason === 'prefix-mismatch'
        ? `the chat template renders the earlier turns differently from what was sampled (at character ${r.at}: expected ${JSON.stringify(r.expected)}, the sequence has ${JSON.stringify(r.actual)}); the episode continues from the template's rendering`
        : `the chat template cannot render the conversation (${r.error}); the episode continues from the rendering of its messages`;
    return start(why);
  }

  /**
   * The observation's new messages for the template, with the change of its tools since the model
   * was last told of them (toolNoticeIn); the notice's tokens are counted in the episode's tool tokens.
   */
  private withToolChange(ep: { tools: Map<string, string>; toolTokens: number }, obs: Observation): ChatMessage[] {
    const { messages, notice } = toolNoticeIn(ep.tools, toToolSpecs(obs.tools), toChatMessages(obs.newMessages), this.renderer.family);
    if (notice) ep.toolTokens += this.tokenizer.encode(notice).length;
    return messages;
  }

  /** The template's options for a prompt without tools (to count the tool list's tokens). */
  private renderOptions(): { addGenerationPrompt: boolean; context?: Record<string, unknown> } {
    return { addGenerationPrompt: true, ...(this.options.context ? { context: this.options.context } : {}) };
  }

  /** Appends a sampled turn to its episode and reads its text and tool calls. */
  sampled(obs: Observation, tokens: number[]): Pick<PolicyAction, 'content' | 'toolCalls' | 'parseError' | 'callParse' | 'text'> {
    const ep = this.episodes.get(obs.episodeId);
    if (!ep) throw new Error(`HfTurns: episode ${obs.episodeId} has no prompt`);
    // A turn cut off before its end token gets one (not sampled): it leads the next turn's env tokens.
    ep.carry = ep.seq.appendSampled(tokens);
    const text = this.tokenizer.decode(tokens);
    const parsed = parseToolCalls(text, this.renderer.family);
    const calls: ProposedCall[] = parsed.calls.map((c) => ({ name: c.name, arguments: c.arguments }));
    return {
      text,
      content: parsed.content,
      ...(calls.length ? { toolCalls: calls } : {}),
      ...(parsed.error ? { parseError: parsed.error } : {}),
      ...(parsed.mode !== 'none' ? { callParse: parsed.mode } : {}),
    };
  }

  /** The episode's whole token sequence so far. */
  ids(episodeId: string): readonly number[] | undefined {
    return this.episodes.get(episodeId)?.seq.ids;
  }

  end(episodeId: string): void {
    this.episodes.delete(episodeId);
  }
}
