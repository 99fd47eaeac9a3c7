/**
 * The Hermes tool format added to a chat template without tools (src/agents/hf/tool-format.ts):
 * SmolLM2-135M-Instruct's ChatML template (its text below, as its tokenizer ships it) renders no
 * tools; with the prelude, mcp-gym renders tool lists, calls and results, and so does transformers'
 * own `apply_chat_template` over the same template text: the same strings and the same token ids
 * (compared in the learner's venv, on the real Qwen3 tokenizer, which has ChatML's special tokens).
 * Also: the choice of format (auto, native, hermes) and its errors; the template written into a
 * checkpoint; the append-only episode sequence with the prelude equal to the whole rendering.
 */
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ChatTemplateRenderer,
  HfTokenizer,
  hermesTemplate,
  isHermesTemplate,
  resolveToolFormat,
  templateHasTools,
  writeChatTemplate,
  type ChatMessage,
  type ToolSpec,
} from '../../src/agents/hf/index.ts';
import { HfTurns } from '../../src/agents/index.ts';
import { generate, rollout, TOOL_POOL } from '../helpers/conversations.ts';
import { HAVE_HF_PY, hfPython, QWEN_TOK, SMOLLM2_TEMPLATE, smolTokenizerDir } from '../helpers/hf-fixtures.ts';

const RENDER_PY = `
import json, sys
from transformers import AutoTokenizer
d = json.load(open(sys.argv[1]))
tok = AutoTokenizer.from_pretrained(d["dir"])
if d.get("template") is not None:
    tok.chat_template = d["template"]
out = []
for c in d["cases"]:
    kw = dict(tools=c["tools"] or None, add_generation_prompt=c["gen"])
    text = tok.apply_chat_template(c["messages"], tokenize=False, **kw)
    ids = tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True, **kw)["input_ids"]
    out.append({"text": text, "ids": list(ids)})
json.dump(out, open(sys.argv[2], "w"))
print("ok")
`;

interface Case {
  messages: ChatMessage[];
  tools: ToolSpec[];
  gen: boolean;
}

/** transformers' apply_chat_template over `cases` (strings and token ids), with `template` set on the tokenizer (null: its own). */
function transformersRender(dir: string, template: string | null, cases: Case[]): { text: string; ids: number[] }[] {
  const work = mkdtempSync(join(tmpdir(), 'mcp-gym-render-'));
  writeFileSync(join(work, 'in.json'), JSON.stringify({ dir, template, cases }));
  hfPython(RENDER_PY, [join(work, 'in.json'), join(work, 'out.json')]);
  return JSON.parse(readFileSync(join(work, 'out.json'), 'utf8')) as { text: string; ids: number[] }[];
}

function firstDifference(a: string, b: string): string {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return `at ${i}: ${JSON.stringify(a.slice(Math.max(0, i - 30), i + 40))} vs ${JSON.stringify(b.slice(Math.max(0, i - 30), i + 40))}`;
}

/** The conversations compared: generated ones (one call per turn and parallel calls), each with and without tools and a generation prompt. */
function cases(): Case[] {
  const out: Case[] = [];
  for (let seed = 1; seed <= 30; seed++) {
    const { messages, tools } = generate(seed, { parallel: seed % 2 === 0, reasoning: false });
    out.push({ messages, tools, gen: false });
    const lastUser = messages.findIndex((m) => m.role === 'assistant');
    out.push({ messages: messages.slice(0, Math.max(1, lastUser)), tools, gen: true });
  }
  out.push({ messages: [{ role: 'user', content: 'no tools at all' }], tools: [], gen: true });
  out.push({
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'x' },
      { role: 'assistant', content: 'y' },
    ],
    tools: [],
    gen: false,
  });
  // arguments given as objects (transformers' users do that): the template writes them through tojson
  out.push({
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'kv_set', arguments: { key: 'k', value: 3 } } }] },
      { role: 'tool', tool_call_id: 'a', content: 'ok' },
    ],
    tools: TOOL_POOL,
    gen: true,
  });
  return out;
}

describe('choosing the tool format', () => {
  it("auto: the template's own tools when it has them, else the Hermes prelude; native and hermes on demand; errors that say what to do", () => {
    expect(templateHasTools(SMOLLM2_TEMPLATE)).toBe(false);
    const qwen = HfTokenizer.load(QWEN_TOK).chatTemplate!;
    expect(templateHasTools(qwen)).toBe(true);
    expect(resolveToolFormat(qwen)).toEqual({ template: qwen, format: 'native', added: false });
    const h = resolveToolFormat(SMOLLM2_TEMPLATE);
    expect(h.format).toBe('hermes');
    expect(h.added).toBe(true);
    expect(isHermesTemplate(h.template)).toBe(true);
    expect(h.template.endsWith(SMOLLM2_TEMPLATE)).toBe(true);
    // a checkpoint that carries the prelude keeps it as it is (not added twice)
    expect(resolveToolFormat(h.template)).toEqual({ template: h.template, format: 'hermes', added: false });
    expect(hermesTemplate(h.template)).toBe(h.template);
    expect(() => resolveToolFormat(SMOLLM2_TEMPLATE, 'native')).toThrow(/has no tools.*--tool-format hermes/);
    expect(() => resolveToolFormat(h.template, 'native')).toThrow(/trained with the Hermes tool format/);
    expect(resolveToolFormat(qwen, 'hermes').format).toBe('hermes');
    expect(() => resolveToolFormat('{{ messages[0].content }}')).toThrow(/ChatML/);
  });

  it('HfTurns.load picks the format from the checkpoint and records it', () => {
    const dir = smolTokenizerDir();
    expect(HfTurns.load(dir).toolFormat).toBe('hermes');
    expect(HfTurns.load(dir).family).toBe('qwen');
    expect(HfTurns.load(QWEN_TOK).toolFormat).toBe('native');
    expect(() => HfTurns.load(dir, { toolFormat: 'native' })).toThrow(/has no tools/);
  });
});

describe.skipIf(!HAVE_HF_PY)("the Hermes format against transformers' apply_chat_template", () => {
  it('renders 63 conversations to the same strings and token ids (tools, parallel calls, results, generation prompts)', () => {
    const dir = smolTokenizerDir();
    const template = resolveToolFormat(SMOLLM2_TEMPLATE).template;
    const tok = HfTokenizer.load(dir);
    const renderer = new ChatTemplateRenderer(template, { bosToken: '<|im_start|>', eosToken: '<|im_end|>' });
    const all = cases();
    const ref = transformersRender(dir, template, all);
    let tokens = 0;
    all.forEach((c, i) => {
      const ours = renderer.render(c.messages, { tools: c.tools, addGenerationPrompt: c.gen });
      if (ours !== ref[i]!.text) throw new Error(`case ${i}: ${firstDifference(ours, ref[i]!.text)}`);
      expect(tok.encode(ours)).toEqual(ref[i]!.ids);
      tokens += ref[i]!.ids.length;
      if (c.tools.length) expect(ours).toContain('<tools>\n{"type": "function", "function": {"name": ');
    });
    expect(all.length).toBe(63);
    console.log(`hermes: ${all.length} conversations, ${tokens} tokens equal to transformers'`);
  });

  it('a checkpoint written with the template renders in transformers as in mcp-gym, without setting anything', () => {
    const dir = smolTokenizerDir();
    const template = resolveToolFormat(SMOLLM2_TEMPLATE).template;
    writeChatTemplate(dir, template);
    expect(readFileSync(join(dir, 'chat_template.jinja'), 'utf8')).toBe(template);
    expect(JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')).chat_template).toBeUndefined();
    const turns = HfTurns.load(dir);
    expect(turns.toolFormat).toBe('hermes');
    const c = cases().slice(0, 6);
    const ref = transformersRender(dir, null, c);
    c.forEach((x, i) => expect(turns.renderer.render(x.messages, { tools: x.tools, addGenerationPrompt: x.gen })).toBe(ref[i]!.text));
  });
});

describe('episodes in the Hermes format', () => {
  it('the append-only sequence of 30 conversations equals the encoding of the whole rendering', () => {
    const dir = smolTokenizerDir();
    const tok = HfTokenizer.load(dir);
    const renderer = new ChatTemplateRenderer(resolveToolFormat(SMOLLM2_TEMPLATE).template, { eosToken: '<|im_end|>' });
    expect(renderer.family).toBe('qwen');
    for (let seed = 1; seed <= 30; seed++) {
      const { messages, tools } = generate(seed, { parallel: seed % 3 === 0, reasoning: false });
      const r = rollout(tok, renderer, '<|im_end|>', messages, tools);
      expect(r.full.endsWith('<|im_end|>\n')).toBe(true);
      expect([...r.seq.ids]).toEqual(tok.encode(r.full.slice(0, -1)));
    }
  });

  it('tool results of one turn go back in one user turn, each in <tool_response>', () => {
    const r = new ChatTemplateRenderer(resolveToolFormat(SMOLLM2_TEMPLATE).template);
    const text = r.render(
      [
        { role: 'user', content: 'q' },
        {
          role: 'assistant',
          content: 'Checking.',
          tool_calls: [
            { id: 'a', function: { name: 'f', arguments: '{"x": 1}' } },
            { id: 'b', function: { name: 'g', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'a', content: '1' },
        { role: 'tool', tool_call_id: 'b', content: 'two\nlines' },
      ],
      { tools: TOOL_POOL.slice(0, 1), addGenerationPrompt: true },
    );
    expect(
      text.endsWith(
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\ntwo\nlines\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      ),
    ).toBe(true);
    expect(text.startsWith('<|im_start|>system\n# Tools\n\nYou may call one or more functions')).toBe(true);
    expect(existsSync(QWEN_TOK)).toBe(true);
  });
});
