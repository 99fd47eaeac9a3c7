/**
 * Reads tool calls out of an assistant turn's text (special tokens kept, as HfTokenizer.decode
 * gives them):
 *
 * - qwen (Qwen3, Hermes): `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, any
 *   number per turn, after optional text (and an optional <think>...</think> block); a last call
 *   left open (no `</tool_call>` before the turn ends) is read when it is one whole call, as vLLM's
 *   `hermes` parser reads it (mode `lenient`);
 * - llama3 (Llama 3.1-3.3): the turn is a JSON object `{"name": "f", "parameters": {...}}`
 *   (`"arguments"` accepted too), optionally after `<|python_tag|>`; several calls may be separated
 *   by `;` or whitespace. As vLLM's `llama3_json` parser reads them, a call after some text and text
 *   after the calls are read too (mode `lenient`, the text as content); a turn without a call
 *   object is a plain answer.
 *
 * Arguments written as a JSON string holding an object are read as that object (both dialects).
 * test/agents/tool-call-parity.test.ts compares this parser with vLLM's documented `hermes` and
 * `llama3_json` parsers.
 *
 * A call that cannot be read is reported in `error` (the agent is shown it), never thrown, as
 * template.ts's parseAssistantTokens does.
 *
 * Small models do not always keep the format (docs/models.md, "What small models emit"): with
 * `lenient` (the default for the qwen/Hermes dialect), a turn without `<tool_call>` is also read
 * for a call written as a fenced JSON block (```json ... ```) or as a bare JSON object with a
 * "name" and "arguments" (or "parameters"). `mode` says how the turn was read: `strict` (the
 * dialect's own form), `lenient`, `failed` (it tried a call that could not be read) or `none` (a
 * plain answer).
 */
import type { TemplateFamily } from './chat-template.ts';

export interface ParsedToolCall {
  name: string;
  arguments: Record<string, unknown>;
  /** The arguments' JSON as the model wrote it, when it could be cut out of the call. */
  argumentsText?: string;
}

/** How a turn's tool calls were read (see the file header). */
export type CallParse = 'strict' | 'lenient' | 'failed' | 'none';

export interface ParsedToolCalls {
  /** The text outside tool calls (end-of-turn tokens removed, trimmed). */
  content: string;
  calls: ParsedToolCall[];
  error?: string;
  mode: CallParse;
}

const modeOf = (calls: number, error: string | undefined): CallParse => (error ? 'failed' : calls ? 'strict' : 'none');

const END_TOKENS = ['<|im_end|>', '<|endoftext|>', '<|eot_id|>', '<|eom_id|>', '<|end_of_text|>'];

function stripEnd(text: string): string {
  let t = text;
  for (;;) {
    const trimmed = t.replace(/\s+$/, '');
    const end = END_TOKENS.find((e) => trimmed.endsWith(e));
    if (!end) return t;
    t = trimmed.slice(0, -end.length);
  }
}

const snippet = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}...` : s);

/** Cuts the raw JSON of the value of `key` out of an object's text, if it is the last member. */
function rawMember(objText: string, key: string, value: unknown): string | undefined {
  const m = new RegExp(`"${key}"\\s*:\\s*`).exec(objText);
  if (!m) return undefined;
  const body = objText.trimEnd();
  if (!body.endsWith('}')) return undefined;
  const raw = body.slice(m.index + m[0].length, body.length - 1).trim();
  try {
    return JSON.stringify(JSON.parse(raw)) === JSON.stringify(value) ? raw : undefined;
  } catch {
    return undefined;
  }
}

/** One call's JSON: `{"name": string, <argsKey>: object}`; an error message when it is not that. */
function readCall(json: string, argKeys: string[]): ParsedToolCall | string {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch (err) {
    return `a tool call is not valid JSON (${(err as Error).message}): ${snippet(json)}`;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return `a tool call must be a JSON object: ${snippet(json)}`;
  const o = v as Record<string, unknown>;
  if (typeof o.name !== 'string' || !o.name) return `a tool call has no "name": ${snippet(json)}`;
  const key = argKeys.find((k) => k in o);
  const args = key === undefined ? {} : o[key];
  // Arguments written as a JSON string that holds an object (small models do): the object, as vLLM passes the string on.
  if (typeof args === 'string') {
    try {
      const inner: unknown = JSON.parse(args);
      if (inner !== null && typeof inner === 'object' && !Array.isArray(inner)) return { name: o.name, arguments: inner as Record<string, unknown> };
    } catch {
      // not JSON: reported below
    }
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return `the arguments of tool call '${o.name}' are not a JSON object: ${snippet(json)}`;
  const raw = key === undefined ? undefined : rawMember(json, key, args);
  return { name: o.name, arguments: args as Record<string, unknown>, ...(raw !== undefined ? { argumentsText: raw } : {}) };
}

function parseQwen(text: string): ParsedToolCalls {
  let unclosed = false;
  const calls: ParsedToolCall[] = [];
  const errors: string[] = [];
  const outside: string[] = [];
  let i = 0;
  for (;;) {
    const open = text.indexOf('<tool_call>', i);
    if (open < 0) {
      outside.push(text.slice(i));
      break;
    }
    outside.push(text.slice(i, open));
    const start = open + '<tool_call>'.length;
    const close = text.indexOf('</tool_call>', start);
    const next = text.indexOf('<tool_call>', start);
    if (close < 0 && next < 0) {
      // The last call left open (the turn ended before </tool_call>): read as vLLM's hermes parser
      // reads it, when what follows the tag is one whole call.
      const r = readCall(text.slice(start).trim(), ['arguments', 'parameters']);
      if (typeof r !== 'string') {
        calls.push(r);
        unclosed = true;
        break;
      }
    }
    if (close < 0 || (next >= 0 && next < close)) {
      const stop = next >= 0 ? next : text.length;
      errors.push(`tool call not closed with </tool_call>: ${snippet(text.slice(start, stop).trim())}`);
      i = stop;
      if (next < 0) break;
      continue;
    }
    const r = readCall(text.slice(start, close).trim(), ['arguments', 'parameters']);
    if (typeof r === 'string') errors.push(r);
    else calls.push(r);
    i = close + '</tool_call>'.length;
  }
  const content = outside.join('').trim();
  const error = errors.length ? errors.join('; ') : undefined;
  return { content, calls, mode: unclosed && !error ? 'lenient' : modeOf(calls.length, error), ...(error ? { error } : {}) };
}

const FENCE = /```[A-Za-z]*[ \t]*\n?([\s\S]*?)```/g;

/**
 * A turn without `<tool_call>`, read for a call in another form: fenced JSON blocks first, else the
 * bare JSON objects of the text. An object counts as a call when it has a string "name" and an
 * "arguments" (or "parameters") member; text that holds `"name"` and `"arguments"` but no such
 * object is a failed call; anything else is a plain answer.
 */
function parseLenient(text: string): ParsedToolCalls {
  const blocks = [...text.matchAll(FENCE)];
  const sources = blocks.length ? blocks.map((m) => m[1]!) : [text];
  const calls: ParsedToolCall[] = [];
  const errors: string[] = [];
  let outside = blocks.length ? text.replace(FENCE, '') : text;
  for (const src of sources) {
    const { objects, unclosed } = jsonObjects(src);
    for (const o of objects) {
      let v: unknown;
      try {
        v = JSON.parse(o);
      } catch {
        continue;
      }
      if (v === null || typeof v !== 'object' || Array.isArray(v) || typeof (v as Record<string, unknown>).name !== 'string') continue;
      if (!('arguments' in (v as object)) && !('parameters' in (v as object))) continue;
      const r = readCall(o, ['arguments', 'parameters']);
      if (typeof r === 'string') errors.push(r);
      else calls.push(r);
      if (!blocks.length) outside = outside.replace(o, '');
    }
    if (unclosed !== undefined && /"name"\s*:/.test(unclosed)) errors.push(`a tool call's JSON is not closed: ${snippet(unclosed)}`);
  }
  const content = outside.trim();
  if (!calls.length && !errors.length && /"name"\s*:/.test(text) && /"(arguments|parameters)"\s*:/.test(text)) {
    errors.push(`a tool call is not valid JSON: ${snippet(text.trim())}`);
  }
  if (errors.length) return { content, calls, error: errors.join('; '), mode: 'failed' };
  return { content, calls, mode: calls.length ? 'lenient' : 'none' };
}

/** Splits text into top-level JSON objects (braces counted outside strings); the rest is returned as `rest`. */
function jsonObjects(text: string): { objects: string[]; rest: string; unclosed?: string } {
  const objects: string[] = [];
  let rest = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c !== '{') {
      rest += c;
      i++;
      continue;
    }
    let depth = 0;
    let inString = false;
    let j = i;
    for (; j < text.length; j++) {
      const d = text[j]!;
      if (inString) {
        if (d === '\\') j++;
        else if (d === '"') inString = false;
      } else if (d === '"') inString = true;
      else if (d === '{') depth++;
      else if (d === '}' && --depth === 0) break;
    }
    if (j >= text.length) return { objects, rest, unclosed: text.slice(i) };
    objects.push(text.slice(i, j + 1));
    i = j + 1;
  }
  return { objects, rest };
}

function parseLlama(text: string): ParsedToolCalls {
  const tagged = text.includes('<|python_tag|>');
  const body = tagged ? text.slice(text.indexOf('<|python_tag|>') + '<|python_tag|>'.length) : text;
  const before = tagged ? text.slice(0, text.indexOf('<|python_tag|>')).trim() : '';
  const t = body.trim();
  if (!tagged && !t.startsWith('{')) {
    // A call after some text: vLLM's llama3_json reads the first JSON object anywhere in the turn.
    const at = t.indexOf('{');
    if (at > 0) {
      const r = parseLlama(t.slice(at));
      if (r.calls.length && !r.error) return { ...r, content: t.slice(0, at).trim(), mode: 'lenient' };
    }
    return { content: t, calls: [], mode: 'none' };
  }
  const { objects, rest, unclosed } = jsonObjects(t);
  const calls: ParsedToolCall[] = [];
  const errors: string[] = [];
  for (const o of objects) {
    const r = readCall(o, ['parameters', 'arguments']);
    if (typeof r === 'string') errors.push(r);
    else calls.push(r);
  }
  if (unclosed !== undefined) errors.push(`a tool call's JSON is not closed: ${snippet(unclosed)}`);
  // Text after the calls (not between them) is left out, as vLLM leaves it: the turn is read as its calls.
  const tail = objects.length ? t.slice(t.lastIndexOf(objects.at(-1)!) + objects.at(-1)!.length) : '';
  const leftover = rest.slice(0, rest.length - tail.length).replace(/[;\s]/g, '');
  if (leftover) errors.push(`text that is not a JSON tool call: ${snippet(rest.trim())}`);
  if (!objects.length && unclosed === undefined && !leftover && !tail.trim()) errors.push('<|python_tag|> without a tool call');
  const error = errors.length ? errors.join('; ') : undefined;
  const trailing = tail.replace(/^[;\s]+/, '').trim();
  return {
    content: [before, trailing].filter(Boolean).join('\n'),
    calls,
    mode: trailing && calls.length && !error ? 'lenient' : modeOf(calls.length, error),
    ...(error ? { error } : {}),
  };
}

/**
 * The tool calls of an assistant turn's text in a family's dialect (see the file header); `lenient`
 * (default true) also reads a qwen/Hermes turn without `<tool_call>` for a fenced or bare JSON call.
 */
export function parseToolCalls(text: string, family: TemplateFamily, options: { lenient?: boolean } = {}): ParsedToolCalls {
  const t = stripEnd(text);
  if (family === 'llama3') return parseLlama(t);
  // qwen, and the Hermes format as the default for unknown templates
  if (t.includes('<tool_call>') || options.lenient === false) return parseQwen(t);
  return parseLenient(t);
}
