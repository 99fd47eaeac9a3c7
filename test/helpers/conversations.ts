/**
 * Generated conversations for the chat-template tests (hf-template, hf-tool-format): an optional
 * system prompt, a user message, 0-3 tool-call turns (parallel calls, reasoning, results with
 * unicode, JSON and several lines) and a final answer; and `rollout`, which builds a conversation's
 * token sequence by appending, as an episode does.
 */
import { expect } from 'vitest';
import { ChatTemplateRenderer, HfSequence, HfTokenizer, type ChatMessage, type ToolSpec } from '../../src/agents/hf/index.ts';

export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const TOOL_POOL: ToolSpec[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'kv_set',
      description: 'Sets a key.',
      parameters: { type: 'object', properties: { key: { type: 'string' }, value: { type: 'integer', minimum: 0 } }, required: ['key', 'value'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search_docs',
      description: 'Full-text search; returns JSON hits.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string' }, limit: { type: 'integer' }, filters: { type: 'object', properties: { lang: { type: 'string' } } } },
        required: ['query'],
      },
    },
  },
  {
    type: 'function',
    function: { name: 'read_file', description: 'Reads a file.', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
  },
];
const WORDS = ['Zürich', 'naïve café', '東京', 'emoji 🎉', 'a "quoted" word', 'back\\slash', 'plain', 'tab\there', 'x'];
const RESULTS = [
  '{"temp": 21.5, "sky": "clear"}',
  'line one\nline two\n\nline four',
  'Ünïcödé ✓ — 終わり',
  '[{"hit": 1, "text": "a <b>tag</b>"}, {"hit": 2}]',
  'ok',
  '{\n  "nested": {"k": [1, 2, 3]}\n}',
  'error: file not found: /tmp/ñ.txt',
];

function argsFor(tool: ToolSpec, r: () => number, i: number): Record<string, unknown> {
  const w = WORDS[Math.floor(r() * WORDS.length)]!;
  switch (tool.function.name) {
    case 'get_weather':
      return r() < 0.5 ? { city: w } : { city: w, unit: 'c' };
    case 'kv_set':
      return { key: `k${i}`, value: Math.floor(r() * 1000) };
    case 'search_docs':
      return r() < 0.5 ? { query: w, limit: 3 } : { query: w, filters: { lang: 'de' } };
    default:
      return { path: `/data/${w}/${i}.txt` };
  }
}

export interface GenOptions {
  parallel: boolean;
  reasoning: boolean;
}

/** A conversation: optional system, user, 0-3 tool-call turns (each followed by its results), final answer. */
export function generate(seed: number, o: GenOptions): { messages: ChatMessage[]; tools: ToolSpec[] } {
  const r = rng(seed);
  const tools = [...TOOL_POOL].sort(() => r() - 0.5).slice(0, 1 + Math.floor(r() * 3));
  const messages: ChatMessage[] = [];
  if (r() < 0.6) messages.push({ role: 'system', content: `You are agent #${seed}. Use tools when needed.` });
  messages.push({ role: 'user', content: `Task ${seed}: ${WORDS[seed % WORDS.length]} — please help.\nSecond line.` });
  const turns = Math.floor(r() * 4);
  let callNo = 0;
  for (let t = 0; t < turns; t++) {
    const n = o.parallel ? 1 + Math.floor(r() * 3) : 1;
    const tool_calls = Array.from({ length: n }, () => {
      const tool = tools[Math.floor(r() * tools.length)]!;
      const id = `call_${callNo++}`;
      return { id, type: 'function' as const, function: { name: tool.function.name, arguments: JSON.stringify(argsFor(tool, r, callNo)) } };
    });
    let content = o.parallel && r() < 0.4 ? 'Let me check that.' : '';
    if (o.reasoning && r() < 0.5) content = `<think>\nStep ${t}: I need ${tool_calls[0]!.function.name}.\n</think>\n\n${content}`;
    messages.push({ role: 'assistant', content, tool_calls });
    for (const c of tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: RESULTS[Math.floor(r() * RESULTS.length)]! });
  }
  messages.push({ role: 'assistant', content: `Done: ${WORDS[Math.floor(r() * WORDS.length)]}.\n\nSummary → ${turns} step(s).` });
  return { messages, tools };
}

/**
 * Builds the sequence by appending: start(prompt) -> the "sampled" assistant turn (the encoding of
 * the template's own rendering of that turn, cut from the whole rendering up to its end token) ->
 * continue(tool results) -> ... Returns the sequence and the whole rendering.
 */
export function rollout(tok: HfTokenizer, renderer: ChatTemplateRenderer, endToken: string, messages: ChatMessage[], tools: ToolSpec[]) {
  const full = renderer.render(messages, { tools });
  const seq = new HfSequence(tok, renderer);
  const firstAssistant = messages.findIndex((m) => m.role === 'assistant');
  seq.start(messages.slice(0, firstAssistant), tools);
  let i = firstAssistant;
  let turns = 0;
  while (i < messages.length) {
    expect(full.startsWith(seq.text)).toBe(true);
    const end = full.indexOf(endToken, seq.text.length);
    expect(end).toBeGreaterThanOrEqual(0);
    const sampled = tok.encode(full.slice(seq.text.length, end + endToken.length));
    expect(seq.appendSampled(sampled)).toEqual([]);
    turns++;
    i++;
    const next: ChatMessage[] = [];
    while (i < messages.length && messages[i]!.role !== 'assistant') next.push(messages[i++]!);
    if (next.length) {
      const c = seq.continue(next);
      if (!c.ok) throw new Error(`continue failed: ${JSON.stringify(c).slice(0, 600)}`);
    }
  }
  return { seq, full, turns };
}
