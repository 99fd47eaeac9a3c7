import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import { Environment, rollout, summarize } from '../../src/env/index.ts';
import { ALL_SUITE_NAMES, generateSuite } from '../../src/env/suites/index.ts';
import { CLI, ROOT, sleep } from '../helpers.ts';

const env = new Environment();
afterAll(() => env.close());

describe('the checks are right', () => {
  it.each(ALL_SUITE_NAMES)('the expert solves every task of the %s eval suite', async (name) => {
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
    const { stdout } = await exec(
      process.execPath,
      [
        CLI,
        'rollout',
        '--suite',
        'calculator',
        '--split',
        'eval',
        '--policy',
        'expert',
        '--group',
        '2',
        '--concurrency',
        '16',
        '--limit',
        '10',
        '--out',
        out,
        '--json',
      ],
      { cwd: ROOT },
    );
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
    await expect(exec(process.execPath, [CLI, 'rollout', '--suite', 'calculator', '--limit', '1', '--out', out], { cwd: ROOT })).rejects.toThrow(
      /already holds trajectories: pass --resume/,
    );
  });

  it('a run killed with SIGKILL leaves only whole lines, and --resume finishes it without repeating or losing episodes', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-kill-'));
    const file = join(out, 'trajectories.jsonl');
    const args = [
      CLI,
      'rollout',
      '--suite',
      'kv',
      '--split',
      'eval',
      '--policy',
      'expert',
      '--group',
      '2',
      '--concurrency',
      '4',
      '--delay-ms',
      '25',
      '--out',
      out,
    ];
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: 'ignore' });
    const lineCount = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0);
    for (let i = 0; i < 600 && lineCount() < 12; i++) await sleep(50);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const text = readFileSync(file, 'utf8');
    const whole = text.endsWith('\n') ? text : text.slice(0, text.lastIndexOf('\n') + 1);
    const before = whole
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(before.length).toBeGreaterThanOrEqual(12);
    const total = generateSuite('kv').filter((t) => t.split === 'eval').length * 2;
    expect(before.length).toBeLessThan(total);

    const { stdout } = await exec(process.execPath, [...args, '--resume', '--json'], { cwd: ROOT });
    const summary = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(summary.episodes).toBe(total);
    expect(summary.resumed).toBe(before.length);
    const after = readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(after).toHaveLength(total);
    const keys = new Set(after.map((t) => `${t.group_id}#${t.sample}`));
    expect(keys.size).toBe(total);
    // The episodes written before the kill are kept as they were.
    expect(after.slice(0, before.length).map((t) => t.id)).toEqual(before.map((t) => t.id));
    expect(summary.success_rate).toBe(1);
  });
});

/** Runs the CLI; never throws. */
async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await exec(process.execPath, [CLI, ...args], { cwd: ROOT });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('mcp-gym rollout: runs cannot be mixed, failures explain themselves', () => {
  it('records what a run is made with, and --resume refuses another policy, group, suite, task file or reward, naming it', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-mixed-'));
    const base = ['rollout', '--suite', 'calculator', '--limit', '3', '--group', '2', '--policy', 'expert', '--out', out];
    expect((await cli(base)).code).toBe(0);
    const run = JSON.parse(readFileSync(join(out, 'run.json'), 'utf8'));
    expect(run).toMatchObject({ policy: 'expert', group: 2, suite: 'calculator', tasks: null, split: 'eval', limit: 3, reward: 'art' });
    const refused: [string[], string][] = [
      [['--policy', 'random:3'], `--resume: the run in ${out} used --policy expert, not random:3`],
      [['--group', '3'], `--resume: the run in ${out} used --group 2, not 3`],
      [['--suite', 'kv'], `--resume: the run in ${out} used --suite calculator, not kv`],
      [['--reward', 'rlvr'], `--resume: the run in ${out} used --reward art, not rlvr`],
      [['--limit', '5'], `--resume: the run in ${out} used --limit 3, not 5`],
    ];
    const swap = (over: string[]) => {
      const args = [...base, '--resume'];
      for (let i = 0; i < over.length; i += 2) {
        const at = args.indexOf(over[i]!);
        if (at < 0) args.push(over[i]!, over[i + 1]!);
        else args.splice(at, 2, over[i]!, over[i + 1]!);
      }
      return args;
    };
    const answers = await Promise.all(refused.map(([over]) => cli(swap(over))));
    for (const [i, [over, message]] of refused.entries()) {
      expect(answers[i]!.code, over.join(' ')).toBe(2);
      expect(answers[i]!.stderr).toContain(message);
    }
    const lines = readFileSync(join(out, 'trajectories.jsonl'), 'utf8').split('\n').filter(Boolean);
    expect(lines).toHaveLength(6);
    expect(new Set(lines.map((l) => JSON.parse(l).policy.id))).toEqual(new Set(['expert']));
    // The same settings resume.
    const same = await cli([...base, '--resume', '--json']);
    expect(same.code, same.stderr).toBe(0);
    expect(JSON.parse(same.stdout.trim().split('\n').at(-1)!)).toMatchObject({ episodes: 6, resumed: 6 });

    // A task file: its path and content are part of the run.
    const tasks = join(out, 'tasks.jsonl');
    const task = {
      id: 't1',
      split: 'eval',
      difficulty: 1,
      prompt: 'Compute 6 * 7.',
      servers: { calculator: 'calculator' },
      checks: [{ kind: 'answer', expect: { kind: 'number', value: '42' } }],
      solution: { calls: [{ server: 'calculator', tool: 'evaluate', arguments: { expression: '6 * 7' } }], answer: '42' },
    };
    writeFileSync(tasks, JSON.stringify(task) + '\n');
    const out2 = mkdtempSync(join(tmpdir(), 'mcp-gym-mixed-'));
    expect((await cli(['rollout', '--tasks', tasks, '--out', out2])).code).toBe(0);
    const suite = await cli(['rollout', '--suite', 'calculator', '--out', out2, '--resume']);
    expect(suite.stderr).toContain(`--resume: the run in ${out2} used no --suite, not calculator`);
    writeFileSync(tasks, JSON.stringify({ ...task, prompt: 'Compute 7 * 6.' }) + '\n');
    const changed = await cli(['rollout', '--tasks', tasks, '--out', out2, '--resume']);
    expect(changed.code).toBe(2);
    expect(changed.stderr).toMatch(/--resume: the task file .*tasks\.jsonl changed since the run in .* started/);
  });

  it('a damaged middle line: the reader says to run mcp-gym repair, which moves it out, and the run resumes', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-repair-'));
    const file = join(out, 'trajectories.jsonl');
    const args = ['rollout', '--suite', 'calculator', '--limit', '4', '--out', out];
    expect((await cli(args)).code).toBe(0);
    const lines = readFileSync(file, 'utf8').split('\n');
    lines[2] = lines[2]!.slice(0, 60);
    writeFileSync(file, lines.join('\n'));
    const stuck = await cli([...args, '--resume']);
    expect(stuck.code).toBe(1);
    expect(stuck.stderr).toMatch(new RegExp(`${file}:3: invalid JSON: .* \\(run: mcp-gym repair ${file}\\)`));
    const repaired = await cli(['repair', file]);
    expect(repaired.code, repaired.stderr).toBe(0);
    expect(repaired.stdout).toContain(`${file}: 1 of 4 lines were not whole trajectories (line 3): moved to ${file}.bad; 3 kept`);
    expect(readFileSync(`${file}.bad`, 'utf8')).toBe(`${lines[2]}\n`);
    const resumed = await cli([...args, '--resume', '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout.trim().split('\n').at(-1)!)).toMatchObject({ episodes: 4, resumed: 3, success_rate: 1 });
    expect((await cli(['repair', file])).stdout).toContain('all 4 lines are whole trajectories; nothing to repair');
    const usage = await cli(['repair']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('repair needs one file');
  });

  it('--concurrency 0 is refused, naming the flag', async () => {
    const r = await cli(['rollout', '--suite', 'calculator', '--limit', '1', '--concurrency', '0', '--out', mkdtempSync(join(tmpdir(), 'mcp-gym-c0-'))]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--concurrency must be at least 1, got '0'");
  });

  it('the summary groups failed episodes by cause, task errors apart, and leaves them out of the mean reward', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mcp-gym-fail-'));
    const tasks = join(out, 'tasks.jsonl');
    const ok = {
      id: 'ok',
      split: 'eval',
      difficulty: 1,
      prompt: 'Compute 6 * 7.',
      servers: { calculator: 'calculator' },
      checks: [{ kind: 'answer', expect: { kind: 'number', value: '42' } }],
      solution: { calls: [{ server: 'calculator', tool: 'evaluate', arguments: { expression: '6 * 7' } }], answer: '42' },
    };
    const broken = {
      ...ok,
      id: 'broken',
      checks: [{ kind: 'state', call: { server: 'calculator', tool: 'evaluat', arguments: {} }, expect: { kind: 'equals', value: 42 } }],
    };
    const noServer = { ...ok, id: 'no-server', servers: { calculator: { transport: 'stdio', command: '/nonexistent/mcp-server' } } };
    writeFileSync(tasks, [ok, broken, noServer].map((t) => JSON.stringify(t)).join('\n') + '\n');
    const r = await cli(['rollout', '--tasks', tasks, '--group', '2', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(s).toMatchObject({ episodes: 6, scored_episodes: 2, failed_episodes: 2, task_errors: 2 });
    expect(s.mean_reward).toBeGreaterThan(1.3); // the two solved episodes; the failed ones are not counted as 0.3 or 0
    expect(s.failures).toHaveLength(2);
    expect(s.failures[0]).toMatchObject({ kind: 'error', episodes: 2 });
    expect(s.failures[0].cause).toMatch(/^a tool server failed: Cannot connect to stdio server '\/nonexistent\/mcp-server'/);
    expect(s.failures[1]).toMatchObject({
      kind: 'task_error',
      episodes: 2,
      cause: "checks[0] (state calculator.evaluat): unknown tool 'evaluat' on server 'calculator' (its tools: evaluate, add, subtract, multiply, divide)",
    });
    expect(r.stdout).toMatch(/task errors\s+2/);
    expect(r.stdout).toContain('Failed episodes by cause');
    expect(r.stdout).toContain("task error: checks[0] (state calculator.evaluat): unknown tool 'evaluat'");
  });
});
