import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import { Environment, rollout, summarize } from '../../src/env/index.ts';
import { generateSuite, SUITE_NAMES } from '../../src/env/suites/index.ts';
import { CLI, ROOT, sleep } from '../helpers.ts';

const env = new Environment();
afterAll(() => env.close());

describe('the checks are right', () => {
  it.each(SUITE_NAMES)('the expert solves every task of the %s eval suite', async (name) => {
    const tasks = generateSuite(name).filter((t) => t.split === 'eval');
    const r = await rollout(env, new ExpertPolicy(), tasks, { concurrency: 16 });
    const failed = r.trajectories.filter((t) => !t.success).map((t) => `${t.task_id}: ${t.error ?? t.checks.map((c) => c.detail).join('; ')}`);
    expect(failed).toEqual([]);
    expect(r.trajectories).toHaveLength(tasks.length);
  });

  it('the random policy solves close to none', async () => {
    const tasks = generateSuite('all').filter((t) => t.split === 'eval');
    const r = await rollout(env, new RandomPolicy(11), tasks, { group: 2, concurrency: 16 });
    const s = summarize(r.trajectories, r.seconds);
    expect(s.episodes).toBe(tasks.length * 2);
    expect(s.success_rate).toBeLessThan(0.03);
    expect(s.failed_episodes).toBe(0); // random calls are tool errors, never episode errors
  });
});

const exec = promisify(execFile);

describe('mcp-gym rollout', () => {
  it('prints a summary and, with --json, one JSON object as its last line', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-cli-'));
    const { stdout } = await exec(process.execPath, [CLI, 'rollout', '--suite', 'calculator', '--split', 'eval', '--policy', 'expert', '--group', '2', '--concurrency', '16', '--limit', '10', '--out', out, '--json'], { cwd: ROOT });
    const lines = stdout.trim().split('\n');
    const summary = JSON.parse(lines.at(-1)!);
    expect(summary).toMatchObject({ episodes: 20, success_rate: 1 });
    expect(summary.episodes_per_s).toBeGreaterThan(0);
    expect(summary.mean_reward).toBeGreaterThan(1);
    for (const k of ['base', 'efficiency', 'tools']) expect(summary.reward_parts).toHaveProperty(k);
    expect(stdout).toMatch(/success rate\s+1/);
    expect(stdout).toMatch(/episodes per second/);
    expect(existsSync(join(out, 'summary.json'))).toBe(true);
    // The same --out again without --resume is refused: nothing is overwritten.
    await expect(exec(process.execPath, [CLI, 'rollout', '--suite', 'calculator', '--limit', '1', '--out', out], { cwd: ROOT })).rejects.toThrow(/already holds trajectories: pass --resume/);
  });

  it('a run killed with SIGKILL leaves only whole lines, and --resume finishes it without repeating or losing episodes', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-kill-'));
    const file = join(out, 'trajectories.jsonl');
    const args = [CLI, 'rollout', '--suite', 'kv', '--split', 'eval', '--policy', 'expert', '--group', '2', '--concurrency', '4', '--delay-ms', '25', '--out', out];
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: 'ignore' });
    const lineCount = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0);
    for (let i = 0; i < 600 && lineCount() < 12; i++) await sleep(50);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const text = readFileSync(file, 'utf8');
    const whole = text.endsWith('\n') ? text : text.slice(0, text.lastIndexOf('\n') + 1);
    const before = whole.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(before.length).toBeGreaterThanOrEqual(12);
    const total = generateSuite('kv').filter((t) => t.split === 'eval').length * 2;
    expect(before.length).toBeLessThan(total);

    const { stdout } = await exec(process.execPath, [...args, '--resume', '--json'], { cwd: ROOT });
    const summary = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(summary.episodes).toBe(total);
    expect(summary.resumed).toBe(before.length);
    const after = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(after).toHaveLength(total);
    const keys = new Set(after.map((t) => `${t.group_id}#${t.sample}`));
    expect(keys.size).toBe(total);
    // The episodes written before the kill are kept as they were.
    expect(after.slice(0, before.length).map((t) => t.id)).toEqual(before.map((t) => t.id));
    expect(summary.success_rate).toBe(1);
  });
});
