/**
 * Reading a chat completion request: its messages, tools and sampling settings, checked (a 400 in
 * OpenAI's shape naming the parameter for what is malformed or not supported).
 */
import type { ToolSpec } from '../hf/index.ts';
import type { SamplingOptions } from '../sampling.ts';
import type { Conversation } from '../serve-dialect.ts';
import type { TemplateMessage } from '../template.ts';
import { bad, given, isObject } from './http.ts';

export interface ChatRequest extends Conversation {
  sampling: SamplingOptions;
  maxTokens?: number;
  seed?: number;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  tokensAsIds: boolean;
  returnTokenIds: boolean;
}

function optBool(body: Record<string, unknown>, key: string): boolean {
  const v = body[key];
  if (!given(v)) return false;
  if (typeof v !== 'boolean') throw bad(`'${key}' must be a boolean`, key);
  return v;
}

function optNumber(body: Record<string, unknown>, key: string, check: (x: number) => boolean, what: string): number | undefined {
  const v = body[key];
  if (!given(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || !check(v)) throw bad(`'${key}' must be ${what}, got ${JSON.stringify(v)}`, key);
  return v;
}

/** Text of a message's content: a string, null (empty), or text parts. */
function textOf(content: unknown, where: string, nullable: boolean): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) {
    if (nullable) return '';
    throw bad(`${where}.content is missing`, `${where}.content`);
  }
  if (Array.isArray(content)) {
    return content
      .map((part, i) => {
        if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
        throw bad(`${where}.content[${i}]: only text parts ({"type": "text", "text": ...}) are supported`, `${where}.content`);
      })
      .join('');
  }
  throw bad(`${where}.content must be a string or an array of text parts`, `${where}.content`);
}

function readMessages(raw: unknown): TemplateMessage[] {
  if (!Array.isArray(raw) || raw.length === 0) throw bad("'messages' must be a non-empty array", 'messages');
  return raw.map((m, i): TemplateMessage => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw bad(`${where} must be an object`, where);
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: textOf(m.content, where, false) };
      case 'user':
        return { role: 'user', content: textOf(m.content, where, false) };
      case 'tool':
        return {
          role: 'tool',
          content: textOf(m.content, where, false),
          ...(typeof m.tool_call_id === 'string' ? { tool_call_id: m.tool_call_id } : {}),
          ...(typeof m.name === 'string' ? { name: m.name } : {}),
        };
      case 'assistant': {
        if (given(m.function_call)) throw bad(`${where}: function_call is not supported; use tool_calls`, `${where}.function_call`);
        const calls = m.tool_calls;
        if (given(calls) && !Array.isArray(calls)) throw bad(`${where}.tool_calls must be an array`, `${where}.tool_calls`);
        const tool_calls = ((calls ?? []) as unknown[]).map((c, j) => {
          const fn = isObject(c) ? c.function : undefined;
          if (!isObject(fn) || typeof fn.name !== 'string')
            throw bad(`${where}.tool_calls[${j}] must be {"type": "function", "function": {"name", "arguments"}}`, `${where}.tool_calls`);
          const args = fn.arguments ?? '';
          const id = isObject(c) && typeof c.id === 'string' ? { id: c.id } : {};
          return { ...id, function: { name: fn.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } };
        });
        return { role: 'assistant', content: textOf(m.content, where, true), ...(tool_calls.length ? { tool_calls } : {}) };
      }
      default:
        throw bad(`${where}.role must be system, developer, user, assistant or tool, got ${JSON.stringify(m.role)}`, `${where}.role`);
    }
  });
}

export function readChatRequest(body: Record<string, unknown>): ChatRequest {
  const messages = readMessages(body.messages);
  let tools: ToolSpec[] = [];
  if (given(body.tools)) {
    if (!Array.isArray(body.tools)) throw bad("'tools' must be an array", 'tools');
    tools = body.tools.map((t, i): ToolSpec => {
      if (!isObject(t) || t.type !== 'function' || !isObject(t.function) || typeof t.function.name !== 'string') {
        throw bad(`tools[${i}] must be {"type": "function", "function": {"name", "description", "parameters"}}`, 'tools');
      }
      const f = t.function;
      if (given(f.description) && typeof f.description !== 'string') throw bad(`tools[${i}].function.description must be a string`, 'tools');
      if (given(f.parameters) && !isObject(f.parameters)) throw bad(`tools[${i}].function.parameters must be a JSON schema object`, 'tools');
      return {
        type: 'function',
        function: {
          name: f.name as string,
          ...(typeof f.description === 'string' ? { description: f.description } : {}),
          ...(isObject(f.parameters) ? { parameters: f.parameters } : {}),
        },
      };
    });
  }
  if (given(body.tool_choice) && body.tool_choice !== 'auto')
    throw bad(`tool_choice ${JSON.stringify(body.tool_choice)} is not supported (only "auto": the model decides)`, 'tool_choice');
  const n = optNumber(body, 'n', Number.isInteger, 'an integer');
  if (n !== undefined && n !== 1) throw bad(`n must be 1: this server returns one choice per request (got ${n}); send several requests instead`, 'n');
  const topLogprobs = optNumber(body, 'top_logprobs', (x) => Number.isInteger(x) && x >= 0, 'a non-negative integer');
  if (topLogprobs)
    throw bad(
      `top_logprobs ${topLogprobs} is not supported: only the sampled token's logprob is returned (use top_logprobs 0 or leave it out)`,
      'top_logprobs',
    );
  for (const key of ['stop', 'stop_token_ids']) {
    const v = body[key];
    if (given(v) && !(Array.isArray(v) && v.length === 0))
      throw bad(`'${key}' is not supported: a turn ends at the model's end-of-turn token or at max_tokens`, key);
  }
  if (isObject(body.logit_bias) && Object.keys(body.logit_bias).length) throw bad('logit_bias is not supported', 'logit_bias');
  for (const key of ['presence_penalty', 'frequency_penalty']) {
    if (given(body[key]) && body[key] !== 0) throw bad(`'${key}' is not supported (only 0)`, key);
  }
  if (given(body.repetition_penalty) && body.repetition_penalty !== 1) throw bad("'repetition_penalty' is not supported (only 1)", 'repetition_penalty');
  if (given(body.response_format) && !(isObject(body.response_format) && body.response_format.type === 'text'))
    throw bad('response_format other than {"type": "text"} is not supported', 'response_format');
  for (const key of ['echo', 'ignore_eos', 'use_beam_search']) if (body[key] === true) throw bad(`'${key}' is not supported`, key);
  if (given(body.best_of) && body.best_of !== 1) throw bad("'best_of' is not supported (only 1)", 'best_of');

  const temperature = optNumber(body, 'temperature', (x) => x >= 0, 'a number >= 0') ?? 1;
  const topP = optNumber(body, 'top_p', (x) => x > 0 && x <= 1, 'a number in (0, 1]') ?? 1;
  const topK = optNumber(body, 'top_k', (x) => Number.isInteger(x) && x >= -1, 'an integer >= -1 (-1 or 0: no limit)') ?? 0;
  const minP = optNumber(body, 'min_p', (x) => x >= 0 && x <= 1, 'a number in [0, 1] (0: off)') ?? 0;
  const maxTokens =
    optNumber(body, 'max_completion_tokens', (x) => Number.isInteger(x) && x >= 1, 'a positive integer') ??
    optNumber(body, 'max_tokens', (x) => Number.isInteger(x) && x >= 1, 'a positive integer');
  const seed = optNumber(body, 'seed', Number.isSafeInteger, 'an integer');
  const stream = optBool(body, 'stream');
  let includeUsage = false;
  if (given(body.stream_options)) {
    if (!isObject(body.stream_options)) throw bad("'stream_options' must be an object", 'stream_options');
    includeUsage = optBool(body.stream_options, 'include_usage');
  }
  return {
    messages,
    tools,
    toolNames: tools.map((t) => t.function.name),
    sampling: { temperature, topP, topK: Math.max(0, topK), ...(minP > 0 ? { minP } : {}) },
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...(seed !== undefined ? { seed } : {}),
    stream,
    includeUsage,
    logprobs: optBool(body, 'logprobs'),
    tokensAsIds: optBool(body, 'return_tokens_as_token_ids'),
    returnTokenIds: optBool(body, 'return_token_ids'),
  };
}
