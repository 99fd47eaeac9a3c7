/**
 * Parity with the reference stack (issue 31): mcp-gym renders chat templates and tokenises prompts
 * exactly as transformers' `apply_chat_template` and tokenizer do (transformers and jinja2 in the
 * learner's venv), on a corpus of 212 conversations (12 hand-written, 200 generated) for every
 * template mcp-gym ships or names: Qwen3 (thinking on and off), Qwen2.5, Llama 3.1 and 3.2 (3.3's
 * template is 3.1's, byte for byte; 3.2 also with today's date through strftime_now), Hermes
 * 3, SmolLM2's ChatML and the Hermes tool block over it; each whole and up to its last assistant
 * turn with a generation prompt. Equal strings and equal token ids, case by case; a failure
 * prints the first differing character with its context. Then the Python semantics behind it
 * (src/agents/hf/jinja-python.ts), expression by expression against jinja2.
 *
 * The templates are the models' published ones (llama-cpp-python's source package on the Python
 * registry carries llama.cpp's verbatim copies: fetched once, pinned by sha256, cached with the
 * models); SmolLM2's comes from its checkpoint (`mcp-gym models get smollm2-135m`, cached).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplateRenderer } from '../../src/agents/hf/index.ts';
import { pyFloatRepr, pyStrip } from '../../src/agents/hf/jinja-python.ts';
import { resolveModel } from '../../src/trainers/models.ts';
import { learnerModule, QWEN_TOK } from '../helpers/hf-fixtures.ts';
import { cases, corpus, runParity, variants, type Variant } from '../helpers/template-parity.ts';

let vs: Variant[];

beforeAll(async () => {
  const smollm2 = await resolveModel('smollm2-135m', (l) => console.log(l));
  vs = variants(smollm2);
}, 600_000);

describe('chat templates: mcp-gym against transformers apply_chat_template', () => {
  it('renders 212 conversations x 9 templates to the same strings and token ids', () => {
    const conv = corpus(200);
    expect(conv.length).toBeGreaterThanOrEqual(200);
    const all = cases(conv, vs);
    const results = runParity(vs, all);
    const table = vs.map((v) => {
      const mine = results.filter((r) => r.case.variant === v.name);
      const rendered = mine.filter((r) => r.ours.text !== undefined);
      const tokens = rendered.reduce((s, r) => s + r.ours.ids!.length, 0);
      return `${v.name.padEnd(28)} ${mine.filter((r) => r.equal).length}/${mine.length} equal, ${rendered.length} rendered (${tokens} tokens), ${mine.length - rendered.length} refused by the template on both sides`;
    });
    console.log(table.join('\n'));
    const bad = results.filter((r) => !r.equal);
    const report = bad
      .slice(0, 5)
      .map((r) => `${r.case.id} (${r.case.conversation}, generation prompt ${r.case.addGenerationPrompt}):\n${r.diff}`)
      .join('\n\n');
    expect(bad.length, `${bad.length} of ${results.length} cases differ from transformers:\n\n${report}`).toBe(0);
    // Every template rendered most of the corpus (a template that refused everything would compare nothing).
    for (const v of vs) expect(results.filter((r) => r.case.variant === v.name && r.ours.text !== undefined).length, v.name).toBeGreaterThan(200);
  }, 300_000);
});

/** Expressions where Python and JavaScript differ, each rendered by jinja2 (transformers' environment) and by mcp-gym. */
const EXPRESSIONS: [string, Record<string, unknown>][] = [
  ["{{ x.strip('\\n') }}|{{ x.lstrip('\\n') }}|{{ x.rstrip('\\n') }}", { x: '\n\n  a b  \n\n' }],
  ['{{ x.strip() }}|{{ x | trim }}|{{ x.split() | length }}', { x: '\ufeff\u001f\u0085 a\u3000b \u00a0' }],
  ["{{ x.strip('ab') }}|{{ x.rstrip('b') }}|{{ x.lstrip('') }}", { x: 'abxyzba' }],
  ["{{ x.split() }}|{{ x.split(none, 1) }}|{{ x.split(',') }}", { x: ' a  b\u2003c,d ' }],
  ['{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f }}|{{ g }}', { a: 1e-5, b: 0.0001, c: 2.5e30, d: 1e16, e: 123456.789, f: -0.5, g: 1e21 }],
  ['{{ t | tojson }}', { t: { a: 1e-5, b: [0.1, 2, 1e16, 1.5e300], c: 'é"\\\n\u0001', d: null, e: true, f: {}, g: [] } }],
  ['{{ t | tojson(indent=2) }}', { t: { a: [1, { b: 2.5 }], c: [], d: {} } }],
  [
    "{{ t | tojson(sort_keys=true) }}|{{ t | tojson(ensure_ascii=true) }}|{{ t | tojson(separators=(',', ':')) }}",
    { t: { é: 1, Z: 2, a: '東京 🎉', B: [1, 2] } },
  ],
  ['{{ d }}|{{ l }}|{{ t }}|{{ f }}|{{ n }}', { d: { a: 1, b: "it's", c: [true, null, 0.5] }, l: ['x', 1.5], t: true, f: false, n: null }],
  ["{{ 'n=' ~ x ~ ';' ~ b ~ ';' ~ d }}|{{ x | string }}|{{ l | join(', ') }}", { x: 1e-7, b: true, d: { k: 'v' }, l: [1, 2.5, 'z'] }],
  ["{{ 1 == '1' }}|{{ l == [1, 2] }}|{{ d == {'a': 1} }}|{{ 1 == 1.0 }}|{{ true == 1 }}", { l: [1, 2], d: { a: 1 } }],
  ['{{ d is iterable }}|{{ u is iterable }}|{% for x in u %}never{% else %}empty{% endfor %}|{{ u | trim }}|', { d: { a: 1 } }],
];

/** transformers refuses an empty conversation: every expression is rendered with one message. */
const ONE = [{ role: 'user' as const, content: 'hi' }];

describe('the Python semantics (jinja-python.ts) expression by expression against jinja2', () => {
  it('renders each expression as jinja2 does; the library alone differs on most of them', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-parity-expr-'));
    const lines = EXPRESSIONS.map(([template, context], i) =>
      JSON.stringify({ id: String(i), tokenizer: QWEN_TOK, template, messages: ONE, tools: null, add_generation_prompt: false, context }),
    );
    writeFileSync(join(dir, 'cases.jsonl'), lines.join('\n') + '\n');
    learnerModule('template_parity', ['render', '--cases', join(dir, 'cases.jsonl'), '--out', join(dir, 'ref.jsonl')]);
    const ref = readFileSync(join(dir, 'ref.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { text?: string; error?: string });
    let libraryDiffers = 0;
    EXPRESSIONS.forEach(([template, context], i) => {
      expect(ref[i]!.error, template).toBeUndefined();
      const ours = new ChatTemplateRenderer(template, { context }).render(ONE);
      expect(ours, `${template} with ${JSON.stringify(context)}`).toBe(ref[i]!.text);
      let plain: string;
      try {
        const env = new Environment();
        for (const [k, v] of Object.entries({ messages: ONE, add_generation_prompt: false, tools: null, ...context })) env.set(k, v);
        plain = new Interpreter(env).run(new Template(template).parsed).value as string;
      } catch (err) {
        plain = `error: ${(err as Error).message}`;
      }
      if (plain !== ref[i]!.text) libraryDiffers++;
    });
    console.log(`@huggingface/jinja alone differs from jinja2 on ${libraryDiffers} of ${EXPRESSIONS.length} expressions; mcp-gym on none`);
    expect(libraryDiffers).toBeGreaterThan(EXPRESSIONS.length / 2);
  }, 120_000);

  it('pyFloatRepr writes floats as Python repr does; pyStrip strips as str.strip does', () => {
    const cases: [number, string][] = [
      [1e-5, '1e-05'],
      [0.0001, '0.0001'],
      [1e16, '1e+16'],
      [1e15, '1000000000000000.0'],
      [2.5e30, '2.5e+30'],
      [0.1 + 0.2, '0.30000000000000004'],
      [-1.5e-7, '-1.5e-07'],
      [5e-324, '5e-324'],
      [1.7976931348623157e308, '1.7976931348623157e+308'],
      [100, '100.0'],
      [-0, '-0.0'],
      [123456.789, '123456.789'],
    ];
    for (const [x, want] of cases) expect(pyFloatRepr(x), String(x)).toBe(want);
    expect(pyStrip('\n x \n', '\n')).toBe(' x ');
    expect(pyStrip('\ufeffx\ufeff')).toBe('\ufeffx\ufeff');
    expect(pyStrip('\u001fx\u0085')).toBe('x');
    expect(pyStrip('🎉a🎉', '🎉')).toBe('a');
    // A bad argument is an error that names the method, as Python's TypeError does.
    expect(() => new ChatTemplateRenderer("{{ 'x'.strip(1) }}").render(ONE)).toThrow(/strip\(\) argument must be a string or None/);
  });
});
