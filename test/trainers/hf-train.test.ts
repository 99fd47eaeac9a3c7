/**
 * Training a Hugging Face checkpoint end to end on CPU, sampled in-process (policy onnx) through
 * the library API `train`: a fresh tiny Qwen3 (real tokenizer and chat template, random weights,
 * not exported) is copied into the run, the copy exported to ONNX, sampled with its own template,
 * trained by the learner, and its export kept current after each step.
 *
 * - full fine-tuning (preset art, 3 steps of 2 tasks × 4): 3 metrics rows; onnx/config.json's
 *   version is 1 + the writes; the learner's importance ratios are 1 (epochs 1: its logprobs of the
 *   sampled tokens are the sampler's); every trajectory trainable, its turns with the version they
 *   were sampled with; the prompt is Qwen3's template with the tools; the weights change exactly
 *   when a step had a gradient (a random model's groups may all have equal rewards);
 * - LoRA (rank 4, 2 steps), with a reward that differs within every group (the share of even
 *   code points in the turns' text: a random model's art rewards are all equal, so nothing would be learnt) and lr
 *   1e-2: a trained adapter (lora_B not zero) in <run>/model/adapter/, the base weights
 *   byte-identical, the export merged anew after each step and sampled from (ratios still 1).
 *
 * Needs the learner's venv (.venv/bin/python or $MCP_GYM_HF_PYTHON); without it the file is skipped.
 */
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { HfTokenizer } from '../../src/agents/hf/index.ts';
import { HfTurns } from '../../src/agents/index.ts';
import type { RewardFn, Trajectory } from '../../src/env/index.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import { ensureHfOnnx, hfOnnxStale, RunDir, train } from '../../src/trainers/index.ts';
import { HAVE_HF_PY, HF_PY, makeTinyCheckpoints } from '../helpers/hf-fixtures.ts';

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const rows = <T>(file: string) =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
const onnxData = (dir: string) => sha(join(dir, 'onnx', 'model.onnx.data'));
const onnxVersion = (dir: string) => (JSON.parse(readFileSync(join(dir, 'onnx', 'config.json'), 'utf8')) as { version: number }).version;

/** The float32 tensors of a safetensors file whose names match, as arrays. */
function tensors(file: string, match: RegExp): Map<string, Float32Array> {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; data_offsets: [number, number] }>;
  const out = new Map<string, Float32Array>();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__' || !match.test(name)) continue;
    expect(t.dtype).toBe('F32');
    const bytes = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    out.set(name, new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
  }
  return out;
}

/** A reward that differs within a group of a random model's episodes: the share of even code points in its turns' text. */
const evenShare: RewardFn = (e) => {
  const codes = [...e.turns.map((u) => u.action.content).join('')].map((c) => c.codePointAt(0)!);
  const r = codes.filter((c) => c % 2 === 0).length / Math.max(1, codes.length);
  return { reward: r, parts: { even_share: r } };
};

// Synchronous (max_staleness 0): each step's turns are sampled by the weights it trains from, so the
// learner's recomputed logprobs must equal the sampler's (ratios 1) and versions follow the steps.
const BASE = {
  preset: 'art',
  suite: 'calculator',
  tasks_per_step: 2,
  group: 4,
  eval_limit: 4,
  eval_samples: 1,
  eval_every: 0,
  max_new_tokens: 32,
  epochs: 1,
  device: 'cpu',
  threads: 2,
  max_staleness: 0,
} as const;

let src = '';
let srcSha = '';

describe.skipIf(!HAVE_HF_PY)(`train on a tiny Hugging Face Qwen3, sampled in-process (learner Python: ${HF_PY})`, () => {
  beforeAll(() => {
    src = makeTinyCheckpoints([{ name: 'qwen3', family: 'qwen3' }]).qwen3!;
    expect(existsSync(join(src, 'onnx'))).toBe(false); // not exported: train must export the run's copy
    srcSha = sha(join(src, 'model.safetensors'));
  }, 120_000);

  it('full fine-tuning, 3 steps: exported run copy, versions, ratios = 1, trainable trajectories, weights change iff a step had a gradient', async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-hf-train-')), 'run');
    const logs: string[] = [];
    const t0 = performance.now();
    const model = join(runDir, 'model');
    const data: string[] = [];
    const r = await train({
      config: { ...BASE, model: src, steps: 3 },
      runDir,
      onLog: (l) => logs.push(l),
      beforeRollout: (step) => void (step === 1 && data.push(onnxData(model))), // the first export
      onStep: () => void data.push(onnxData(model)),
    });
    const seconds = (performance.now() - t0) / 1000;
    expect(r.steps).toBe(3);
    expect(r.stopped).toBe(false);
    expect(logs.some((l) => /exporting .*run\/model to ONNX/.test(l))).toBe(true);
    expect(existsSync(join(src, 'onnx'))).toBe(false); // the source checkpoint is left as it was
    expect(sha(join(src, 'model.safetensors'))).toBe(srcSha);

    const metrics = rows<Record<string, number>>(join(runDir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(data).toHaveLength(4);
    // A step with policy tokens trains and writes (export), and each write brings the ONNX export up a version.
    const writes = metrics.filter((m) => m.ratio_mean !== undefined).length;
    expect(writes).toBe(3);
    expect(onnxVersion(model)).toBe(1 + writes);
    metrics.forEach((m, i) => expect(m.policy_version).toBe(2 + i));
    // The learner's logprobs of the sampled tokens are the sampler's (one epoch: measured before any update).
    for (const m of metrics) {
      expect(Math.abs(m.ratio_mean! - 1)).toBeLessThan(1e-3);
      expect(Math.abs(m.ratio_min! - 1)).toBeLessThan(1e-2);
      expect(Math.abs(m.ratio_max! - 1)).toBeLessThan(1e-2);
    }

    const trajectories = rows<Trajectory>(join(runDir, 'trajectories.jsonl'));
    expect(trajectories).toHaveLength(3 * 2 * 4);
    const tok = HfTokenizer.load(model);
    for (const t of trajectories) {
      const step = Number(/@train\.(\d+)\./.exec(t.group_id)?.[1]);
      expect(step).toBeGreaterThanOrEqual(1);
      for (const u of t.turns) {
        expect(u.tokens!.length).toBeGreaterThan(0);
        expect(u.env_tokens).toBeDefined();
        expect(u.logprobs).toHaveLength(u.tokens!.length);
        expect(u.token_drift).toBeUndefined();
        expect(u.policy_version).toBe(step); // step s samples with version s (1: the first export)
      }
      expect(sequenceOf(t)).toBeDefined();
    }
    // The prompt is Qwen3's template with the tools and its tool-call instructions.
    const prompt = tok.decode(trajectories[0]!.turns[0]!.env_tokens!);
    expect(prompt.startsWith('<|im_start|>system\n')).toBe(true);
    expect(prompt).toContain('<tools>\n{"type": "function", "function": {"name": "evaluate"');
    expect(prompt).toContain('</tools>');
    expect(prompt).toContain('For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags');
    expect(prompt).toContain(trajectories[0]!.messages.find((m) => m.role === 'user')!.content);
    expect(prompt.endsWith('<|im_start|>assistant\n')).toBe(true);

    // The weights, and the export's: changed exactly when (and at the steps where) there was a gradient.
    const gradient = metrics.some((m) => m.grad_norm! > 0);
    const changed = sha(join(model, 'model.safetensors')) !== srcSha;
    metrics.forEach((m, i) => expect(data[i + 1] !== data[i]).toBe(m.grad_norm! > 0));
    const rewards = trajectories.map((t) => t.reward);
    console.log(
      `full: ${seconds.toFixed(1)} s; rewards ${Math.min(...rewards).toFixed(3)}..${Math.max(...rewards).toFixed(3)}; zero-variance groups per step ${metrics.map((m) => m.zero_variance_groups).join(',')}; ` +
        `grad_norm ${metrics.map((m) => m.grad_norm!.toExponential(2)).join(',')}; ratio_mean ${metrics.map((m) => m.ratio_mean!.toFixed(6)).join(',')}; ` +
        `ratio_min ${metrics.map((m) => m.ratio_min!.toFixed(5)).join(',')}; ratio_max ${metrics.map((m) => m.ratio_max!.toFixed(5)).join(',')}; onnx version ${onnxVersion(model)}; weights changed: ${changed}`,
    );
    expect(changed).toBe(gradient);
    if (!gradient) for (const m of metrics) expect(m.zero_variance_groups).toBe(2); // no signal: every group's rewards equal
  }, 180_000);

  it("tool_format hermes: the run's model carries the chat template its episodes were rendered with, and the source keeps its own", async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-hf-hermes-')), 'run');
    const srcTemplate = HfTokenizer.load(src).chatTemplate;
    const r = await train({ config: { ...BASE, model: src, steps: 1, tool_format: 'hermes' }, runDir });
    expect(r.steps).toBe(1);
    const model = join(runDir, 'model');
    const carried = readFileSync(join(model, 'chat_template.jinja'), 'utf8');
    expect(carried.startsWith('{#- mcp-gym tool format: hermes')).toBe(true);
    // Loaded alone, with the default (auto) format, the trained checkpoint renders the episodes' prompt token for token.
    const turns = HfTurns.load(model);
    expect(turns.toolFormat).toBe('hermes');
    const t = rows<Trajectory>(join(runDir, 'trajectories.jsonl'))[0]!;
    const messages = t.messages.filter((m) => m.role === 'system' || m.role === 'user');
    const first = turns.prompt({ task: undefined as never, messages, tools: (t.tools ?? []) as never, turn: 0, newMessages: [], episodeId: 'check' });
    expect(first.env).toEqual(t.turns[0]!.env_tokens);
    expect(HfTokenizer.load(src).chatTemplate).toBe(srcTemplate);
    expect(existsSync(join(src, 'chat_template.jinja'))).toBe(false);
  }, 300_000);

  it('LoRA rank 4, 2 steps with signal: a trained adapter in <run>/model/adapter, the base weights byte-identical, the export merged anew each step', async () => {
    const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-hf-lora-')), 'run');
    const model = join(runDir, 'model');
    const data: string[] = [];
    const t0 = performance.now();
    const r = await train({
      config: { ...BASE, model: src, steps: 2, lora_rank: 4, lr: 1e-2 },
      runDir,
      reward: evenShare,
      beforeRollout: (step) => void (step === 1 && data.push(onnxData(model))),
      onStep: () => void data.push(onnxData(model)),
    });
    const seconds = (performance.now() - t0) / 1000;
    expect(r.steps).toBe(2);
    const adapter = JSON.parse(readFileSync(join(model, 'adapter', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(adapter).toMatchObject({ r: 4, lora_alpha: 8, peft_type: 'LORA' });
    // Trained: PEFT starts lora_B at zero; the steps moved it.
    const bs = tensors(join(model, 'adapter', 'adapter_model.safetensors'), /lora_B/);
    expect(bs.size).toBeGreaterThan(0);
    const maxB = Math.max(...[...bs.values()].map((a) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0)));
    expect(maxB).toBeGreaterThan(0);
    // The base weights are the source's, byte for byte.
    expect(sha(join(model, 'model.safetensors'))).toBe(srcSha);
    const metrics = rows<Record<string, number>>(join(runDir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([1, 2]);
    for (const m of metrics) {
      expect(m.zero_variance_groups).toBe(0);
      expect(m.grad_norm).toBeGreaterThan(0);
    }
    // Each step's write merged the adapter into the export (new data, a new version), and the sampler
    // samples from it: step 2's ratios, computed by the learner with the adapter, are still 1.
    expect(onnxVersion(model)).toBe(3);
    expect(new Set(data).size).toBe(3);
    for (const m of metrics) {
      expect(Math.abs(m.ratio_mean! - 1)).toBeLessThan(1e-3);
      expect(Math.abs(m.ratio_min! - 1)).toBeLessThan(1e-2);
      expect(Math.abs(m.ratio_max! - 1)).toBeLessThan(1e-2);
    }
    for (const t of rows<Trajectory>(join(runDir, 'trajectories.jsonl'))) expect(sequenceOf(t)).toBeDefined();
    console.log(
      `lora: ${seconds.toFixed(1)} s; grad_norm ${metrics.map((m) => m.grad_norm!.toExponential(2)).join(',')}; max |lora_B| ${maxB.toExponential(2)}; ` +
        `ratio_mean ${metrics.map((m) => m.ratio_mean!.toFixed(6)).join(',')}; ratio_min ${metrics.map((m) => m.ratio_min!.toFixed(5)).join(',')}; ratio_max ${metrics.map((m) => m.ratio_max!.toFixed(5)).join(',')}; onnx version ${onnxVersion(model)}`,
    );
  }, 150_000);
  it("a new run takes the source's ONNX export when it is current (no second export), and leaves a stale one out", () => {
    const root = mkdtempSync(join(tmpdir(), 'mcp-gym-hf-run-copy-'));
    const exported = join(root, 'exported');
    cpSync(src, exported, { recursive: true });
    expect(ensureHfOnnx(exported)).toBe(true);
    const current = new RunDir(join(root, 'run-current'), { resume: false, model: exported, config: {} });
    current.close();
    expect(existsSync(join(current.modelDir, 'onnx', 'model.onnx'))).toBe(true);
    expect(hfOnnxStale(current.modelDir)).toBeUndefined();
    // Weights newer than the export: the export is not the weights' any more, and stays behind.
    const later = new Date(Date.now() + 60_000);
    utimesSync(join(exported, 'model.safetensors'), later, later);
    expect(hfOnnxStale(exported)).toMatch(/newer than the export/);
    const stale = new RunDir(join(root, 'run-stale'), { resume: false, model: exported, config: {} });
    stale.close();
    expect(existsSync(join(stale.modelDir, 'onnx'))).toBe(false);
    expect(hfOnnxStale(stale.modelDir)).toBe('no ONNX export yet');
  }, 120_000);
});
