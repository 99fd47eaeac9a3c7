/**
 * The command line end to end: `mcp-gym serve-policy` in its own process, `mcp-gym eval` of the
 * embedded model through it on two suites (the OpenAI-compatible policy over HTTP, with a bearer
 * key from the environment that must appear in no file and no output), and the usage errors.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, ROOT, runCli } from '../helpers.ts';

const KEY = 'sk-local-9b8e7d6c5a4f-secret';

/** Every file under `dir`, recursively. */
function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe('mcp-gym serve-policy and eval through it', () => {
  let server: ChildProcess;
  let url = '';
  let tmp: string;
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-serve-policy-'));
    server = spawn(process.execPath, [CLI, 'serve-policy', '--port', '0', '--token', KEY], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    url = await new Promise<string>((resolve, reject) => {
      let err = '';
      server.stderr!.on('data', (c: Buffer) => {
        err += c.toString();
        const m = /at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(err);
        if (m) resolve(m[1]!);
      });
      server.once('exit', (code) => reject(new Error(`serve-policy exited (${code}): ${err}`)));
    });
  });
  afterAll(() => {
    server.kill('SIGTERM');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('evaluates the embedded model through the server on two suites, k = 4; the key appears nowhere', async () => {
    const out = join(tmp, 'eval');
    process.env.MCP_GYM_TEST_KEY = KEY;
    const r = await runCli([
      'eval',
      '--suite',
      'calculator,kv',
      '--limit',
      '3',
      '--max-difficulty',
      '2',
      '-k',
      '4',
      '--policy',
      'openai:calc-tiny',
      '--base-url',
      url,
      '--api-key-env',
      'MCP_GYM_TEST_KEY',
      '--out',
      out,
      '--json',
    ]);
    delete process.env.MCP_GYM_TEST_KEY;
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(report.policy).toBe('openai:calc-tiny');
    expect(report.tasks).toBe(6);
    expect(report.episodes).toBe(24);
    expect(report.failed_episodes).toBe(0);
    expect(report.usage.requests).toBeGreaterThanOrEqual(24);
    expect(report.usage.failed_requests).toBe(0);
    expect(report.tokens.completion).toBe(report.usage.completion_tokens);
    expect(report.tokens.completion).toBe(report.tokens.policy); // every sampled token billed, and recorded
    expect(report.token_drift_turns).toBe(0);
    expect(report.pass_at_k.mean).toBeGreaterThanOrEqual(report.pass_at_1.mean);
    expect(report.pass_hat_k.mean).toBeLessThanOrEqual(report.pass_at_1.mean);
    for (const f of files(out)) expect(readFileSync(f, 'utf8')).not.toContain(KEY);
    expect(r.stdout + r.stderr).not.toContain(KEY);
    const run = JSON.parse(readFileSync(join(out, 'run.json'), 'utf8'));
    expect(run.api).toMatchObject({ base_url: url, api_key_env: 'MCP_GYM_TEST_KEY' });
  });

  it('refuses requests without the key, and a missing key variable is named', async () => {
    const r = await runCli([
      'eval',
      '--suite',
      'calculator',
      '--limit',
      '1',
      '-k',
      '1',
      '--policy',
      'openai:calc-tiny',
      '--base-url',
      url,
      '--out',
      join(tmp, 'nokey'),
      '--json',
    ]);
    // The evaluation runs and writes its report; its every episode failed (the server's 401): exit 4, the cause named.
    expect(r.code).toBe(4);
    expect(r.stderr).toMatch(/eval: every one of the 1 episodes failed:\n {2}1 x the policy failed: openai calc-tiny: HTTP 401/);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(report.failed_episodes).toBe(1);
    expect(report.failures[0].cause).toMatch(/the policy failed: openai calc-tiny: HTTP 401/);
    const noKey = await runCli(['eval', '--suite', 'calculator', '--policy', 'openai:gpt-x', '--out', join(tmp, 'x')]);
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/no API key: set the environment variable OPENAI_API_KEY/);
  });

  it('usage errors: an empty token, a bad --base-url, --ruler without a judge', async () => {
    const empty = await runCli(['serve-policy', '--token', '']);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/--token is empty/);
    const badUrl = await runCli(['eval', '--suite', 'calculator', '--policy', 'openai:m', '--base-url', 'not a url']);
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toMatch(/--base-url must be a URL/);
    const ruler = await runCli(['eval', '--suite', 'calculator', '--ruler', 'listwise']);
    expect(ruler.code).toBe(2);
    expect(ruler.stderr).toMatch(/--ruler needs a judge/);
  });
});
