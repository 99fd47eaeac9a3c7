/**
 * The tool format of a Hugging Face checkpoint's chat template (docs/models.md, "Tool formats").
 *
 * - `native`: the template renders `tools`, assistant `tool_calls` and `tool` messages itself
 *   (Qwen3, Qwen2.5, Llama 3.1-3.3).
 * - `hermes`: the template knows no tools (SmolLM2's ChatML template renders only `content`), so
 *   the tool list is rendered the Hermes way (NousResearch's Hermes 2 Pro, as Qwen2.5 writes it):
 *   a system block listing each tool's JSON schema inside `<tools></tools>`; calls written as
 *   `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`; results sent back in a user turn
 *   as `<tool_response>\n...\n</tool_response>` (consecutive results in one turn).
 *
 * The Hermes format is a Jinja prelude put in front of the model's own template: it rewrites
 * `messages` into plain `{role, content}` messages (the tool block joined to the system message,
 * or a system message of its own; tool calls written into the assistant's content; tool results
 * into user messages) and clears `tools`, then the model's template renders them as it renders any
 * conversation. The result is an ordinary chat template: transformers' `apply_chat_template` and
 * vLLM render it as mcp-gym does, and a checkpoint trained with it carries it in its tokenizer
 * files (`writeChatTemplate`), so deployment renders the prompts it was trained on.
 *
 * The prelude needs a template whose turns end with `<|im_end|>` (ChatML: SmolLM2, Qwen1.5, ...),
 * since sampled turns are cut at that token; another template is refused with a message that says so.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChatTemplateRenderer, type TemplateFamily, type ToolSpec } from './chat-template.ts';

export type ToolFormat = 'native' | 'hermes';
export type ToolFormatChoice = 'auto' | ToolFormat;
export const TOOL_FORMAT_CHOICES: readonly ToolFormatChoice[] = ['auto', 'native', 'hermes'];

/** The first line of the prelude: how a template that already has it is recognised. */
export const HERMES_MARK = '{#- mcp-gym tool format: hermes (docs/models.md) -#}';

const TOOLS_HEAD =
  '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>';
const TOOLS_TAIL =
  '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within ' +
  '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>';

/**
 * The Jinja prelude (no output of its own). Written on one line per statement with `{%-`/`-%}` so
 * that it emits nothing; it ends with `{{ '' }}` so that the template after it starts exactly as
 * it would alone (trim_blocks would otherwise eat a newline it starts with).
 */
export const HERMES_PRELUDE = [
  HERMES_MARK,
  "{%- set ns = namespace(msgs=[], pending='', text='') -%}",
  '{%- set rest = messages -%}',
  '{%- if tools -%}',
  `{%- set ns.text = "${TOOLS_HEAD}" -%}`,
  '{%- for tool in tools -%}{%- set ns.text = ns.text ~ "\\n" ~ (tool | tojson) -%}{%- endfor -%}',
  `{%- set ns.text = ns.text ~ "${TOOLS_TAIL}" -%}`,
  "{%- if messages and messages[0]['role'] == 'system' -%}",
  "{%- set ns.msgs = [{'role': 'system', 'content': messages[0]['content'] ~ '\\n\\n' ~ ns.text}] -%}",
  '{%- set rest = messages[1:] -%}',
  '{%- else -%}',
  "{%- set ns.msgs = [{'role': 'system', 'content': ns.text}] -%}",
  '{%- endif -%}',
  '{%- endif -%}',
  '{%- for m in rest -%}',
  "{%- if m['role'] == 'tool' -%}",
  "{%- set ns.pending = ns.pending ~ ('\\n' if ns.pending else '') ~ '<tool_response>\\n' ~ m['content'] ~ '\\n</tool_response>' -%}",
  '{%- else -%}',
  "{%- if ns.pending -%}{%- set ns.msgs = ns.msgs + [{'role': 'user', 'content': ns.pending}] -%}{%- set ns.pending = '' -%}{%- endif -%}",
  "{%- if m['role'] == 'assistant' and m['tool_calls'] -%}",
  "{%- set ns.text = m['content'] if m['content'] else '' -%}",
  "{%- for call in m['tool_calls'] -%}",
  "{%- set f = call['function'] if call['function'] is defined else call -%}",
  "{%- set args = f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) -%}",
  "{%- set ns.text = ns.text ~ ('\\n' if ns.text else '') ~ '<tool_call>\\n{\"name\": \"' ~ f['name'] ~ '\", \"arguments\": ' ~ args ~ '}\\n</tool_call>' -%}",
  '{%- endfor -%}',
  "{%- set ns.msgs = ns.msgs + [{'role': 'assistant', 'content': ns.text}] -%}",
  '{%- else -%}',
  "{%- set ns.msgs = ns.msgs + [{'role': m['role'], 'content': m['content'] if m['content'] else ''}] -%}",
  '{%- endif -%}',
  '{%- endif -%}',
  '{%- endfor -%}',
  "{%- if ns.pending -%}{%- set ns.msgs = ns.msgs + [{'role': 'user', 'content': ns.pending}] -%}{%- endif -%}",
  '{%- set messages = ns.msgs -%}',
  '{%- set tools = none -%}',
  "{{ '' }}",
].join('\n');

/** Whether a template renders tools itself: it reads a `tools` variable or writes tool calls. */
export function templateHasTools(template: string): boolean {
  return /\btools\b/.test(template) || template.includes('tool_calls');
}

/** Whether a template is already the Hermes prelude over a model's template. */
export function isHermesTemplate(template: string): boolean {
  return template.startsWith(HERMES_MARK);
}

/** The model's template behind the Hermes prelude. */
export function hermesTemplate(template: string): string {
  if (isHermesTemplate(template)) return template;
  if (!template.includes('<|im_end|>')) {
    throw new Error(
      'tool format hermes: the chat template does not end its turns with <|im_end|> (ChatML); mcp-gym adds the Hermes tool format to ChatML templates only',
    );
  }
  return `${HERMES_PRELUDE}${template}`;
}

export interface ResolvedTemplate {
  template: string;
  format: ToolFormat;
  /** Whether mcp-gym added the format (the checkpoint's own template has no tools). */
  added: boolean;
}

/**
 * The template episodes are rendered with. `auto`: the template's own tools when it has them, else
 * the Hermes prelude; `native` refuses a template without tools; `hermes` adds the prelude even to
 * a template with tools of its own (its own tool handling is then bypassed).
 */
export function resolveToolFormat(template: string, choice: ToolFormatChoice = 'auto'): ResolvedTemplate {
  if (isHermesTemplate(template)) {
    if (choice === 'native')
      throw new Error(
        'tool format native: this checkpoint was trained with the Hermes tool format (its chat template begins with the mcp-gym prelude); use --tool-format hermes or auto',
      );
    return { template, format: 'hermes', added: false };
  }
  const has = templateHasTools(template);
  if (choice === 'native' || (choice === 'auto' && has)) {
    if (!has)
      throw new Error(
        "tool format native: the model's chat template has no tools (no `tools` variable, no tool_calls); use --tool-format hermes (or auto, which picks it)",
      );
    return { template, format: 'native', added: false };
  }
  return { template: hermesTemplate(template), format: 'hermes', added: true };
}

/**
 * Writes `template` as the checkpoint's chat template: `chat_template.jinja` (transformers 5 reads it
 * before tokenizer_config.json), and removes `chat_template` from tokenizer_config.json so that no
 * reader finds another one.
 */
export function writeChatTemplate(dir: string, template: string): void {
  writeFileSync(join(dir, 'chat_template.jinja'), template);
  const configFile = join(dir, 'tokenizer_config.json');
  if (!existsSync(configFile)) return;
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  if (!('chat_template' in config)) return;
  delete config.chat_template;
  writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);
}

/** Each tool as the templates write it in their tool lists: transformers' `tojson` (Python's json.dumps), indented for Llama 3.x. */
const TOOL_JSON = {
  line: new ChatTemplateRenderer("{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"),
  indented: new ChatTemplateRenderer("{%- for tool in tools -%}{{ tool | tojson(indent=4) }}{{ '\\n\\n' }}{%- endfor -%}"),
};

/**
 * How a change of the tools reaches a Hugging Face model mid-episode, append-only: the system
 * prompt (which lists the tools) was rendered once and its tokens are kept, so the tools added
 * since are written at the start of the next message the environment adds (the user's follow-up,
 * or a tool result), each tool's JSON schema as the template lists tools (Qwen and the Hermes
 * format: in `<tools></tools>`, one JSON per line; Llama 3.x: JSON objects indented by 4), and the
 * names of those removed after them. BFCL prompts models the same way when its tools change
 * mid-conversation ("{functions}\nI have updated some more functions you can choose from.").
 * The empty string when nothing changed.
 */
export function toolChangeNotice(family: TemplateFamily, added: ToolSpec[], removed: string[]): string {
  const parts: string[] = [];
  if (added.length > 0) {
    const ctx = { tools: added, addGenerationPrompt: false };
    if (family === 'llama3') parts.push(`You can now also call these functions:\n\n${TOOL_JSON.indented.render([], ctx).trimEnd()}`);
    else
      parts.push(
        `You can now also call these functions, their signatures within <tools></tools> XML tags:\n<tools>\n${TOOL_JSON.line.render([], ctx).trimEnd()}\n</tools>`,
      );
  }
  if (removed.length > 0) parts.push(`These functions are no longer available: ${removed.join(', ')}.`);
  return parts.length ? `${parts.join('\n')}\n\n` : '';
}
