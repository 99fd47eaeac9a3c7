/**
 * The command line on a Hugging Face checkpoint (the built CLI in dist/: run `node scripts/build.mjs`
 * first): `rollout --model DIR` exports the checkpoint to ONNX when it has no export and samples it;
 * `--model` with `--policy`, a missing directory and `sft --lora-rank` without `--model` are usage
 * errors; `sft --model DIR` fine-tunes a copy that transformers loads, with an ONNX export, and
 * evaluates it (sft has no --no-eval: the eval runs on the task file's two eval tasks).
 *
 * Needs the learner's venv (.venv/bin/python or $MCP_GYM_HF_PYTHON); without it the Hugging Face
 * runs are skipped (the usage errors are not).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { HfTokenizer } from '../../src/agents/hf/index.ts';
import type { Trajectory } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { runCli } from '../helpers.ts';
import { HAVE_HF_PY, HF_PY, hfPython, makeTinyCheckpoints } from '../helpers/hf-fixtures.ts';

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `mcp-gym-hf-cli-${name}-`));

describe('usage errors of --model and --lora-rank', () => {
  it('--model with --policy names both; a missing --model directory is named; sft --lora-rank needs --model', async () => {
    const both = await runCli([
      'rollout',
      '--model',
      tmp('both'),
      '--policy',
      'expert',
      '--suite',
      'calculator',
      '--limit',
      '1',
      '--out',
      join(tmp('both-out'), 'r'),
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/--model/);
    expect(both.stderr).toMatch(/--policy/);
    expect(both.stderr).toContain('not both');

    const missing = await runCli([
      'rollout',
      '--model',
      '/nonexistent/tiny-qwen3',
      '--suite',
      'calculator',
      '--limit',
      '1',
      '--out',
      join(tmp('missing'), 'r'),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('/nonexistent/tiny-qwen3');

    const lora = await runCli(['sft', '--lora-rank', '2', '--out', join(tmp('lora'), 'm')]);
    expect(lora.code).toBe(2);
    expect(lora.stderr).toContain('--lora-rank');
    expect(lora.stderr).toContain('--model');
  });
});

describe.skipIf(!HAVE_HF_PY)(`the CLI on a tiny Hugging Face Qwen3 (learner Python: ${HF_PY})`, () => {
  let src = '';
  beforeAll(() => {
    src = makeTinyCheckpoints([{ name: 'qwen3', family: 'qwen3' }]).qwen3!;
  }, 120_000);

  it('rollout --model DIR: exports onnx/ when missing, samples with the template, writes the trajectories', async () => {
    expect(existsSync(join(src, 'onnx', 'config.json'))).toBe(false);
    const out = join(tmp('rollout'), 'run');
    const t0 = performance.now();
    const r = await runCli(['rollout', '--model', src, '--suite', 'calculator', '--limit', '2', '--out', out, '--json']);
    const seconds = (performance.now() - t0) / 1000;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/exporting .*qwen3 to ONNX for sampling \(no ONNX export yet\)/);
    const cfg = JSON.parse(readFileSync(join(src, 'onnx', 'config.json'), 'utf8')) as { version: number; family: string };
    expect(cfg).toMatchObject({ version: 1, family: 'qwen3' });
    const summary = JSON.parse(r.stdout.trim().split('\n').pop()!) as { episodes: number };
    expect(summary.episodes).toBe(2);
    const run = JSON.parse(readFileSync(join(out, 'run.json'), 'utf8')) as { policy: string };
    expect(run.policy).toBe(`onnx:${src}`);
    const ts = readFileSync(join(out, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory);
    expect(ts).toHaveLength(2);
    const tok = HfTokenizer.load(src);
    for (const t of ts) {
      expect(t.finish).not.toBe('error');
      expect(t.policy.id).toBe('onnx:qwen3');
      expect(t.policy.version).toBe(1);
      const first = t.turns[0]!;
      expect(first.tokens!.length).toBeGreaterThan(0);
      expect(first.logprobs).toHaveLength(first.tokens!.length);
      expect(tok.decode(first.env_tokens!)).toContain('<tools>');
    }
    // A second run finds the export current: no export again.
    const again = await runCli(['rollout', '--model', src, '--suite', 'calculator', '--limit', '1', '--out', join(tmp('rollout2'), 'run')]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).not.toMatch(/exporting/);
    console.log(`rollout --model: ${seconds.toFixed(1)} s with the export`);
  }, 120_000);

  it('sft --model DIR: a checkpoint transformers loads, trained, with an onnx/ export; the eval runs on it', async () => {
    // A task file: train tasks for the demonstrations, two eval tasks for sft's own evaluation.
    const suite = generateSuite('calculator').filter((t) => t.difficulty === 1);
    const dir = tmp('sft');
    const tasks = join(dir, 'tasks.jsonl');
    writeFileSync(
      tasks,
      [...suite.filter((t) => t.split === 'train').slice(0, 16), ...suite.filter((t) => t.split === 'eval').slice(0, 2)]
        .map((t) => JSON.stringify(t))
        .join('\n') + '\n',
    );
    const out = join(dir, 'model');
    const t0 = performance.now();
    const r = await runCli(['sft', '--model', src, '--tasks', tasks, '--out', out, '--demos', '8', '--steps', '2', '--batch', '2', '--lr', '1e-3', '--json']);
    const seconds = (performance.now() - t0) / 1000;
    // The exit status, the export and the eval are checked softly (reported, the test goes on): what
    // sft trained and wrote is checked below either way.
    expect.soft(r.code, r.stderr).toBe(0);
    expect.soft(existsSync(join(out, 'onnx', 'config.json')), 'sft --model wrote no ONNX export (onnx/config.json)').toBe(true);
    expect(r.stdout).toMatch(/8 demonstrations in qwen format/);
    const loss = /trained: loss ([\d.]+) -> ([\d.]+)/.exec(r.stdout);
    expect(loss).not.toBeNull();
    const [lossFirst, lossLast] = [Number(loss![1]), Number(loss![2])];
    expect(lossLast).toBeLessThan(lossFirst);
    if (r.code === 0) {
      const summary = JSON.parse(r.stdout.trim().split('\n').pop()!) as { demos: number; masked_tokens: number; eval: { episodes: number } };
      expect(summary.demos).toBe(8);
      expect(summary.masked_tokens).toBeGreaterThan(0);
      expect(summary.eval.episodes).toBe(2); // the task file's eval tasks, sampled from the export
      expect(existsSync(join(out, 'onnx', 'model.onnx'))).toBe(true);
    }
    // Trained: the weights are not the source's; the tokenizer came along.
    expect(sha(join(out, 'model.safetensors'))).not.toBe(sha(join(src, 'model.safetensors')));
    expect(existsSync(join(out, 'tokenizer.json'))).toBe(true);
    // transformers loads it, as a standard checkpoint.
    const loaded = JSON.parse(
      hfPython(
        `
import json, sys, torch, transformers
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
t = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps({"type": m.config.model_type, "params": sum(p.numel() for p in m.parameters()), "finite": all(bool(torch.isfinite(p).all()) for p in m.parameters()), "im_end": t.convert_tokens_to_ids("<|im_end|>")}))
`,
        [out],
      ),
    ) as { type: string; params: number; finite: boolean; im_end: number };
    expect(loaded).toMatchObject({ type: 'qwen3', finite: true, im_end: 151645 });
    expect(loaded.params).toBeGreaterThan(1e6);
    console.log(
      `sft --model: exit ${r.code} in ${seconds.toFixed(1)} s; loss ${lossFirst} -> ${lossLast}; ${loaded.params} parameters loaded by transformers; onnx/ ${existsSync(join(out, 'onnx', 'config.json')) ? 'written' : 'missing'}`,
    );
  }, 150_000);
});
