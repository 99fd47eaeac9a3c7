/** `mcp-gym pipeline r1` on the command line (the built dist/: node scripts/build.mjs): help, and the refusals before anything runs. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers.ts';

describe('mcp-gym pipeline', () => {
  it('is listed in the help, and its own help lists the stages and every field as a flag', async () => {
    const main = await runCli(['--help']);
    expect(main.stdout).toContain('pipeline r1');
    const r = await runCli(['pipeline', '--help']);
    expect(r.code).toBe(0);
    for (const s of ['1-sft', '2-grpo', '3-rs-sft', '4-grpo', '--rs-max-per-task', '--grpo2-steps', '--sft-demos', '--train-config', '--out DIR'])
      expect(r.stdout).toContain(s);
  });

  it('refuses an unknown pipeline, a missing --out and bad values, naming the flag or field (exit 2)', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'mcp-gym-pipeline-cli-')), 'p');
    const unknown = await runCli(['pipeline', 'r2']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown pipeline 'r2'; pipelines: r1/);
    const noOut = await runCli(['pipeline', 'r1']);
    expect(noOut.code).toBe(2);
    expect(noOut.stderr).toMatch(/needs --out/);
    const notInt = await runCli(['pipeline', 'r1', '--out', out, '--rs-k', 'many']);
    expect(notInt.code).toBe(2);
    expect(notInt.stderr).toMatch(/--rs-k must be a positive integer, got 'many'/);
    const zero = await runCli(['pipeline', 'r1', '--out', out, '--rs-k', '0']);
    expect(zero.code).toBe(2);
    expect(zero.stderr).toMatch(/--rs-k must be a positive integer, got '0'/);
    const noModel = await runCli(['pipeline', 'r1', '--out', out, '--model', join(out, 'nothing')]);
    expect(noModel.code).toBe(2);
    expect(noModel.stderr).toMatch(/model: no model directory/);
    const sftAlone = await runCli(['pipeline', 'r1', '--out', out, '--sft']);
    expect(sftAlone.code).toBe(2);
    expect(sftAlone.stderr).toMatch(/sft: /);
  });
});
