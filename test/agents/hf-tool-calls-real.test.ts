/**
 * Tool calls as SmolLM2-135M-Instruct really writes them (test/fixtures/smollm2-turns.jsonl): 42
 * assistant turns sampled by `mcp-gym start --model smollm2-135m` on the sql suite (Hermes tool
 * format), 16 from the base model and 26 from the SFT checkpoint, each labelled by hand with how
 * its call must be read (`strict`, `failed`, or `none` for a plain answer) and the calls in it.
 *
 * What the labels decide: JSON must be JSON, as deployment parsers read it (vLLM's Hermes parser
 * uses json.loads): a call missing a closing brace, with a raw newline or unescaped quotes inside
 * its SQL string, is `failed` (the agent is shown the error), not repaired; a JSON object without
 * "name" and "arguments" in prose, a fenced code block of another language, or a tag other than
 * <tool_call> is a plain answer. (No turn of these stages wrote a fenced or bare JSON call, so
 * `lenient` has no real example here; hf-tool-format.test.ts covers it.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseToolCalls, type CallParse } from '../../src/agents/hf/tool-calls.ts';

interface Labelled {
  source: string;
  text: string;
  mode: CallParse;
  calls: { name: string; arguments: Record<string, unknown> }[];
}

const corpus = readFileSync(join(import.meta.dirname, '..', 'fixtures', 'smollm2-turns.jsonl'), 'utf8')
  .trim()
  .split('\n')
  .map((l) => JSON.parse(l) as Labelled);

describe('real SmolLM2 turns, hand-labelled', () => {
  it('the corpus covers base and SFT turns of each kind', () => {
    const count = (source: string, mode: string) => corpus.filter((c) => c.source.endsWith(source) && c.mode === mode).length;
    expect([count('base', 'failed'), count('base', 'none'), count('sft', 'failed'), count('sft', 'strict'), count('sft', 'none')]).toEqual([4, 12, 8, 12, 6]);
  });

  corpus.forEach((c, i) => {
    it(`#${i} ${c.source}: ${c.mode}${c.calls.length ? ` ${c.calls.map((k) => k.name).join(', ')}` : ''}`, () => {
      const r = parseToolCalls(c.text, 'qwen');
      expect(r.mode).toBe(c.mode);
      expect(r.calls.map((k) => ({ name: k.name, arguments: k.arguments }))).toEqual(c.calls);
      if (c.mode === 'failed') expect(r.error).toBeTruthy();
      if (c.mode === 'none') expect(r.error).toBeUndefined();
    });
  });
});
