import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { bundledServers } from '../servers/index.ts';
import { CLI, ROOT } from './helpers.ts';

const run = async (args: string[]) => {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [CLI, ...args], { cwd: ROOT });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

describe('mcp-gym command line', () => {
  it('--help lists its commands and the bundled servers', async () => {
    const { code, stdout } = await run(['--help']);
    expect(code).toBe(0);
    for (const command of ['serve <name>', 'servers', 'demo', 'help', 'rollout', 'repair <file>']) expect(stdout).toContain(command);
    expect(stdout).toContain(`Bundled servers: ${Object.keys(bundledServers).join(', ')}`);
  });

  it('every command takes --help: its own, or its part of the list', async () => {
    for (const command of [
      'serve',
      'servers',
      'suites',
      'rollout',
      'repair',
      'sft',
      'demo',
      'eval',
      'train',
      'bench',
      'tasks',
      'view',
      'pipeline',
      'serve-policy',
    ]) {
      const { code, stdout, stderr } = await run([command, '--help']);
      expect(stderr, command).toBe('');
      expect(code, command).toBe(0);
      expect(stdout.length, command).toBeGreaterThan(40);
    }
    const sft = await run(['sft', '-h']);
    expect(sft.stdout).toContain('Usage: mcp-gym sft');
    expect(sft.stdout).toContain('--d-model D --layers L');
    expect(sft.stdout).not.toContain('pipeline r1'); // the next command's lines are not part of it
    // The flags the help lists are taken: --no-eval gets to the check of --out.
    const noEval = await run(['sft', '--no-eval']);
    expect(noEval.stderr).toContain('sft needs --out <model dir>');
    expect(noEval.code).toBe(2);
  });

  it('lists the servers with their tools and how they isolate episodes', async () => {
    const { code, stdout } = await run(['servers']);
    expect(code).toBe(0);
    for (const def of Object.values(bundledServers)) {
      expect(stdout).toContain(def.name);
      expect(stdout).toContain(def.tools.map((t) => t.name).join(', '));
    }
  });

  it('refuses bad usage with a clear message and exit code 2', async () => {
    const unknown = await run(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("Unknown command 'frobnicate'. Run 'mcp-gym --help'");
    const noName = await run(['serve']);
    expect(noName.code).toBe(2);
    expect(noName.stderr).toContain('serve needs a server name: one of');
    const badServer = await run(['serve', 'nope']);
    expect(badServer.code).toBe(1);
    expect(badServer.stderr).toContain("Unknown bundled server 'nope'. Bundled servers:");
    const badPort = await run(['serve', 'kv', '--http', '--port', 'abc']);
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toContain("--port must be a non-negative integer, got 'abc'");
    const noFile = await run(['repair']);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toContain('repair needs one file: mcp-gym repair <trajectories.jsonl> [--drop]');
    const missing = await run(['repair', '/nonexistent/trajectories.jsonl']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('repair: /nonexistent/trajectories.jsonl: no such file');
    const badFlag = await run(['serve', 'kv', '--bogus']);
    expect(badFlag.code).not.toBe(0);
    expect(badFlag.stderr).toContain("Unknown option '--bogus'");
  });
});
