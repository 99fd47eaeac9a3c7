/**
 * A Hugging Face model's episode with follow-up user turns whose tools change (HfTurns, append-only):
 * the expert's actions written in the family's format through HfTurns, run by the environment on
 * the counter server (test/helpers/counter-server.ts), whose follow-up 1 reveals the tool `double`
 * and follow-up 2 removes it. The prompt lists the first tools only; the next message the
 * environment adds after each change (the follow-up) starts with the change, the added tool's JSON
 * schema as the template lists tools; the sequence is never re-rendered (no drift), and it is
 * what HfTurns held. Qwen3's template (its Hermes-style <tools> block), a Llama-3.1-shaped one, and
 * the Hermes format added to a ChatML template.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { HfTurns, toToolSpecs } from '../../src/agents/hf-turns.ts';
import { Environment } from '../../src/env/index.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import { counterTask } from '../helpers/counter-server.ts';
import { buildLlama31TokenizerDir, pyJson, QWEN_TOK, type CallFamily, ExpertTurns } from '../helpers/hf-fixtures.ts';

let llamaTokDir = '';
beforeAll(() => {
  llamaTokDir = buildLlama31TokenizerDir();
});

const CASES: { name: string; family: CallFamily; load: () => HfTurns }[] = [
  { name: 'qwen3 (native)', family: 'qwen', load: () => HfTurns.load(QWEN_TOK) },
  { name: 'qwen3 (hermes)', family: 'qwen', load: () => HfTurns.load(QWEN_TOK, { toolFormat: 'hermes' }) },
  { name: 'llama 3.1', family: 'llama3', load: () => HfTurns.load(llamaTokDir) },
];

describe('HfTurns: follow-ups whose tools change stay append-only', () => {
  for (const c of CASES) {
    it(`${c.name}: the added tool's schema opens the next follow-up, a removed one is named; no drift; the sequence is the turns' tokens`, async () => {
      const turns = c.load();
      const policy = new ExpertTurns(turns, c.family, -0.5);
      const env = new Environment();
      const t = await env.runEpisode(counterTask(), policy);
      await env.close();
      expect(t.error).toBeUndefined();
      expect(t.success).toBe(true);
      expect(t.turns.map((u) => u.user_turn)).toEqual([0, 0, 1, 1, 2, 2]);
      for (const u of t.turns) {
        expect(u.token_drift).toBeUndefined();
        expect(u.parse_error).toBeUndefined();
      }
      // Append-only: the turns' env and sampled tokens, concatenated, are what HfTurns held to the end.
      const s = sequenceOf(t)!;
      expect(s).toBeDefined();
      expect(s.ids).toEqual(policy.finals.get(t.id));
      const tok = turns.tokenizer;
      const env0 = tok.decode(t.turns[0]!.env_tokens!);
      expect(env0).toContain('"add"');
      expect(env0).not.toContain('double');
      expect(env0).not.toContain('reveal'); // control tools are never shown
      // The follow-up after the change: the added tool's JSON schema, as the template lists tools, then the user's words.
      const env2 = tok.decode(t.turns[2]!.env_tokens!);
      const [double] = toToolSpecs(t.tools!.filter((x) => x.name === 'double'));
      const json = c.family === 'llama3' ? JSON.stringify(double, null, 4) : pyJson(double);
      const notice =
        c.family === 'llama3'
          ? `You can now also call these functions:\n\n${json}\n\nNow double it, and tell me the value.`
          : `You can now also call these functions, their signatures within <tools></tools> XML tags:\n<tools>\n${json}\n</tools>\n\nNow double it, and tell me the value.`;
      expect(env2).toContain(notice);
      // The same JSON as the template writes for a tool it lists in the prompt.
      const listed = turns.renderer.render([{ role: 'user', content: 'x' }], { tools: [double!], addGenerationPrompt: true });
      expect(listed).toContain(json);
      // The second change names the tool taken away, at the start of follow-up 2.
      const env4 = tok.decode(t.turns[4]!.env_tokens!);
      expect(env4).toContain('These functions are no longer available: double.\n\nAdd 1 more, and tell me the value.');
      // Turns without a change add no notice.
      expect(tok.decode(t.turns[3]!.env_tokens!)).not.toContain('You can now also call');
    });
  }
});
