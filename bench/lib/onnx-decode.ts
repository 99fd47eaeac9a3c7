/**
 * The ONNX sampler's side of the decode benches (bench/hf-sampling.ts, bench/llama-cpp.ts): the
 * prompt they share (one real conversation rendered with the checkpoint's tool format), one timed
 * OnnxModel.generate call, its warm-up, and a decode step's parts (the graph alone, the JS sampling
 * alone) at a fixed context.
 */
import { OnnxModel, sampleToken } from '../../src/agents/index.ts';
import { ChatTemplateRenderer, HfTokenizer, type ChatMessage, type ToolSpec } from '../../src/agents/hf/index.ts';
import { resolveToolFormat } from '../../src/agents/hf/tool-format.ts';
import { seededRandom } from '../../lib/index.ts';

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

/**
 * The bench prompt: a system prompt, one tool and a user question (~190 tokens), rendered by the
 * checkpoint's own chat template with its tool format (Hermes for SmolLM2's ChatML).
 */
export function benchPrompt(dir: string): { prompt: number[]; format: string; tokenizer: HfTokenizer } {
  const tokenizer = HfTokenizer.load(dir);
  const format = resolveToolFormat(tokenizer.chatTemplate!, 'auto');
  const renderer = new ChatTemplateRenderer(format.template, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken, now: new Date(2026, 0, 15) });
  const tools: ToolSpec[] = [
    {
      type: 'function',
      function: {
        name: 'query',
        description: 'Run a read-only SQL query on the shop database.',
        parameters: { type: 'object', properties: { sql: { type: 'string' } }, required: ['sql'] },
      },
    },
  ];
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are a careful data analyst. Use the tools to look things up; answer with the exact value.' },
    { role: 'user', content: 'How many orders placed in March 2025 were shipped to customers in Lyon, and what was their total value in euros?' },
  ];
  const prompt = tokenizer.encode(renderer.render(messages, { tools, addGenerationPrompt: true }));
  return { prompt, format: format.format, tokenizer };
}

/** One timed generation (see OnnxDecodeRun's fields). */
export interface OnnxDecodeRun {
  /** B · (N - 1) / the seconds from the first sampled token to the last (graph runs, JS sampling, KV writes). */
  tok_s: number;
  /** B · N / the whole call. */
  total_tok_s: number;
  /** The prompt's graph runs and the first sample, seconds. */
  prefill_s: number;
  /** B · (N - 1) / the seconds of the decode steps' graph runs alone (onnxruntime's session.run). */
  graph_tok_s: number;
  /** The share of the decode's seconds spent in session.run. */
  graph_share: number;
}

/**
 * `model.generate` over B copies of `prompt`, each row sampling exactly `newTokens` tokens at
 * temperature 1 from the whole vocabulary (topK 0, topP 1, a stop id that cannot occur).
 */
export async function onnxDecodeRun(model: OnnxModel, prompt: number[], B: number, newTokens: number, seed: number): Promise<OnnxDecodeRun> {
  const prompts = Array.from({ length: B }, () => prompt);
  let first = 0;
  let graph0 = 0;
  const t0 = performance.now();
  const g = await model.generate(prompts, {
    temperature: 1,
    topK: 0,
    topP: 1,
    maxNewTokens: newTokens,
    rng: seededRandom(seed),
    stop: -1,
    onStep: () => {
      if (first) return;
      first = performance.now();
      graph0 = model.timing.decode.seconds;
    },
  });
  const t1 = performance.now();
  for (const x of g) if (x.tokens.length !== newTokens) throw new Error(`onnx: a row sampled ${x.tokens.length} tokens, not ${newTokens}`);
  const decodeS = (t1 - first) / 1000;
  const graphS = model.timing.decode.seconds - graph0;
  return {
    tok_s: (B * (newTokens - 1)) / decodeS,
    total_tok_s: (B * newTokens) / ((t1 - t0) / 1000),
    prefill_s: (first - t0) / 1000,
    graph_tok_s: (B * (newTokens - 1)) / graphS,
    graph_share: graphS / decodeS,
  };
}

/** Warm-up: a short generation at each batch size (the session and its allocations). */
export async function onnxWarmUp(model: OnnxModel, prompt: number[], batches: readonly number[]): Promise<void> {
  for (const B of batches)
    await model.generate(
      Array.from({ length: B }, () => prompt),
      { temperature: 1, topK: 0, topP: 1, maxNewTokens: 4, rng: seededRandom(0), stop: -1 },
    );
}

/**
 * A decode step's parts at a context of the prompt (its keys and values zero, in the rows' own
 * slots): model.forward over one token per row alone, and JS sampleToken over the B rows' real
 * logits alone; medians of `reps` (after one untimed run each), in ms.
 */
export async function onnxStepParts(model: OnnxModel, prompt: number[], B: number, reps: number): Promise<{ graph_ms: number; sample_ms: number }> {
  const { L, H, Dh, V } = model;
  const P = prompt.length;
  const C = P;
  const keys = Array.from({ length: L }, () => new Float32Array(B * H * Dh * C));
  const vals = Array.from({ length: L }, () => new Float32Array(B * H * C * Dh));
  const ids = BigInt64Array.from({ length: B }, () => BigInt(prompt[P - 1]!));
  const pos = BigInt64Array.from({ length: B }, () => BigInt(P));
  const mask = new Float32Array(B * (C + 1)).fill(1);
  let logits: Float32Array = new Float32Array(0);
  const graph: number[] = [];
  for (let i = 0; i <= reps; i++) {
    const t = performance.now();
    logits = (await model.forward(ids, pos, mask, B, 1, C, keys, vals)).logits;
    if (i > 0) graph.push(performance.now() - t);
  }
  const scratch = new Float64Array(2 * V);
  const rng = seededRandom(7);
  const sample: number[] = [];
  for (let i = 0; i <= reps; i++) {
    const t = performance.now();
    for (let b = 0; b < B; b++) sampleToken(logits, b * V, V, { temperature: 1, topK: 0, topP: 1 }, rng, scratch);
    if (i > 0) sample.push(performance.now() - t);
  }
  return { graph_ms: median(graph), sample_ms: median(sample) };
}
