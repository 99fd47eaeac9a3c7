import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import {
  defineTask,
  Environment,
  exportOpenAI,
  readJsonl,
  readTrajectories,
  repairJsonl,
  repairJsonlLines,
  rollout,
  toOpenAIFineTune,
  TrajectoryWriter,
} from '../../src/env/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-store-'));
const env = new Environment();
afterAll(() => env.close());

const task = defineTask({
  id: 'calc-1',
  split: 'eval',
  difficulty: 1,
  prompt: 'Use the calculator to compute 6 * 7.',
  servers: { calculator: 'calculator' },
  checks: [{ kind: 'answer', expect: { kind: 'number', value: '42' } }],
  solution: { calls: [{ server: 'calculator', tool: 'evaluate', arguments: { expression: '6 * 7' } }], answer: '42' },
} as never);

describe('trajectory storage', () => {
  it('cuts a partial last line and keeps every whole one', () => {
    const f = join(dir, 'partial.jsonl');
    writeFileSync(f, '{"a":1}\n{"a":2}\n{"a":');
    expect(repairJsonl(f)).toBe(5);
    expect(readFileSync(f, 'utf8')).toBe('{"a":1}\n{"a":2}\n');
    expect(repairJsonl(f)).toBe(0);
    const g = join(dir, 'nonewline.jsonl');
    writeFileSync(g, '{"broken"');
    expect(repairJsonl(g)).toBe(9);
    expect(readFileSync(g, 'utf8')).toBe('');
  });

  it('appends one flushed line per trajectory, and a writer reopened after a crash continues cleanly', async () => {
    const f = join(dir, 'traj.jsonl');
    const r = await rollout(env, new ExpertPolicy(), [task], { group: 3, out: f });
    expect(r.trajectories).toHaveLength(3);
    appendFileSync(f, '{"id": "half-writ'); // as a SIGKILL mid-write would leave it
    const w = new TrajectoryWriter(f);
    w.write(r.trajectories[0]!);
    w.close();
    const lines = readFileSync(f, 'utf8').split('\n').filter(Boolean);
    expect(lines).toHaveLength(4);
    for (const l of lines) JSON.parse(l);
    expect(readTrajectories(f, true)).toHaveLength(4);
  });

  it('resuming a run on the same file runs only the missing episodes', async () => {
    const f = join(dir, 'resume.jsonl');
    const tasks = [task, defineTask({ ...task, id: 'calc-2' } as never)];
    const first = await rollout(env, new ExpertPolicy(), tasks.slice(0, 1), { group: 2, out: f });
    expect(first.trajectories).toHaveLength(2);
    const second = await rollout(env, new ExpertPolicy(), tasks, { group: 2, out: f, resume: true });
    expect(second.resumed).toBe(2);
    expect(second.trajectories).toHaveLength(4);
    const keys = readTrajectories(f).map((t) => `${t.group_id}#${t.sample}`);
    expect(keys.sort()).toEqual(['calc-1@0#0', 'calc-1@0#1', 'calc-2@0#0', 'calc-2@0#1']);
  });

  it('resuming refuses a file of another policy, another reward or a bigger group', async () => {
    const f = join(dir, 'mixed.jsonl');
    await rollout(env, new ExpertPolicy(), [task], { group: 2, out: f });
    await expect(rollout(env, new RandomPolicy(3), [task], { group: 2, out: f, resume: true })).rejects.toThrow(
      `resume: ${f} holds episodes of the policy 'expert', not 'random'`,
    );
    const rlvr = new Environment({ reward: 'rlvr' });
    await expect(rollout(rlvr, new ExpertPolicy(), [task], { group: 2, out: f, resume: true })).rejects.toThrow(
      /holds episodes scored with the reward 'art', not 'rlvr'/,
    );
    await rlvr.close();
    await expect(rollout(env, new ExpertPolicy(), [task], { group: 1, out: f, resume: true })).rejects.toThrow(
      /holds sample 1 of group calc-1@0: it was run with a group bigger than 1/,
    );
    expect(readTrajectories(f)).toHaveLength(2); // nothing was added
  });

  it('a damaged middle line stops a reader with the file, the line and the fix; repair moves it out', async () => {
    const f = join(dir, 'damaged.jsonl');
    await rollout(env, new ExpertPolicy(), [task], { group: 4, out: f });
    const lines = readFileSync(f, 'utf8').split('\n');
    lines[1] = lines[1]!.slice(0, 50); // as a disk error would leave it
    lines[2] = '{"not": "a trajectory"}';
    writeFileSync(f, lines.join('\n'));
    expect(() => readTrajectories(f)).toThrow(new RegExp(`^${f}:2: invalid JSON: .* \\(run: mcp-gym repair ${f}\\)$`));
    expect(() => readJsonl(f.replace('damaged', 'nothing-here'))).not.toThrow();
    const r = repairJsonlLines(f);
    expect(r).toEqual({ file: f, lines: 4, kept: 2, bad: [2, 3], badFile: `${f}.bad`, validated: true });
    expect(readFileSync(`${f}.bad`, 'utf8')).toBe(`${lines[1]}\n${lines[2]}\n`);
    expect(readTrajectories(f, true)).toHaveLength(2);
    // A resumed run runs the two episodes again.
    const again = await rollout(env, new ExpertPolicy(), [task], { group: 4, out: f, resume: true });
    expect(again.resumed).toBe(2);
    expect(
      readTrajectories(f, true)
        .map((t) => t.sample)
        .sort(),
    ).toEqual([0, 1, 2, 3]);
    // Nothing to repair: the file is left as it is; --drop drops.
    expect(repairJsonlLines(f)).toMatchObject({ lines: 4, kept: 4, bad: [] });
    const g = join(dir, 'records.jsonl');
    writeFileSync(g, '{"a":1}\n[1]\n{"a":2}\n{"a":');
    expect(repairJsonlLines(g, { drop: true })).toEqual({ file: g, lines: 4, kept: 2, bad: [2, 4], validated: false });
    expect(readFileSync(g, 'utf8')).toBe('{"a":1}\n{"a":2}\n');
    expect(existsSync(`${g}.bad`)).toBe(false);
  });

  it('exports the OpenAI chat fine-tuning format', async () => {
    const [t] = (await rollout(env, new ExpertPolicy(), [task])).trajectories;
    const ft = toOpenAIFineTune(t!);
    expect(ft.messages).toEqual([
      { role: 'user', content: 'Use the calculator to compute 6 * 7.' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_0_0', type: 'function', function: { name: 'evaluate', arguments: '{"expression":"6 * 7"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_0_0', content: '42' },
      { role: 'assistant', content: '42' },
    ]);
    expect(ft.tools![0]).toMatchObject({ type: 'function', function: { name: 'evaluate', parameters: { type: 'object' } } });
    const f = join(dir, 'ft.jsonl');
    expect(exportOpenAI([t!, { ...t!, success: false }], f, { onlySuccessful: true })).toBe(1);
    expect(readFileSync(f, 'utf8').trim().split('\n')).toHaveLength(1);
  });
});
