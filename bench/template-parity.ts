/**
 * Chat-template parity with transformers (issue 31; docs/models.md, "Parity with transformers"):
 * the corpus of test/agents/template-parity.test.ts rendered and tokenised by mcp-gym and by
 * transformers' apply_chat_template, per template: cases equal / total, tokens, and the time each
 * side took for the whole corpus (mcp-gym in-process; transformers including its import and the
 * tokenizers' loading, in the learner's venv).
 *
 *   npx tsx bench/template-parity.ts [--conversations 200] [--model smollm2-135m]
 *
 * Exits 1 when any case differs, printing the first differences with context.
 */
import { parseArgs } from 'node:util';
import { resolveModel } from '../src/trainers/models.ts';
import { cases, corpus, runParity, variants } from '../test/helpers/template-parity.ts';

const { values } = parseArgs({ options: { conversations: { type: 'string', default: '200' }, model: { type: 'string', default: 'smollm2-135m' } } });
const vs = variants(await resolveModel(values.model!, (l) => console.log(l)));
const conv = corpus(Number(values.conversations));
const all = cases(conv, vs);
const timing: { ours?: number; reference?: number } = {};
const results = runParity(vs, all, timing);
console.log(`${conv.length} conversations, ${all.length} renderings (each whole, and up to its last assistant turn with a generation prompt)\n`);
console.log('| template | equal / cases | refused on both sides | tokens compared |');
console.log('| --- | --- | --- | --- |');
for (const v of vs) {
  const mine = results.filter((r) => r.case.variant === v.name);
  const tokens = mine.reduce((s, r) => s + (r.ours.ids?.length ?? 0), 0);
  console.log(`| ${v.name} | ${mine.filter((r) => r.equal).length} / ${mine.length} | ${mine.filter((r) => r.ours.error && r.ref.error).length} | ${tokens} |`);
}
const bad = results.filter((r) => !r.equal);
console.log(
  `\nmcp-gym ${timing.ours!.toFixed(1)} s, transformers ${timing.reference!.toFixed(1)} s (ratio ${(timing.reference! / timing.ours!).toFixed(2)}): ${results.length - bad.length} of ${results.length} equal`,
);
for (const r of bad.slice(0, 5)) console.log(`\n${r.case.id} (${r.case.conversation}):\n${r.diff}`);
process.exit(bad.length ? 1 : 0);
