/**
 * Training on your own tasks: `train --tasks F [--eval-tasks F2]` (a config file's `tasks` too),
 * the clear errors when a file lacks a split, and a resumed run that refuses other settings.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateSuite } from '../../src/env/suites/index.ts';
import { resolveConfig, RunDir, trainingTasks } from '../../src/trainers/index.ts';
import { CLI, ROOT } from '../helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-own-tasks-'));
const calc = generateSuite('calculator', { train: 30, eval: 10 }).filter((t) => t.difficulty === 1);
const write = (name: string, tasks: unknown[]) => {
  const f = join(dir, name);
  writeFileSync(f, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
  return f;
};
const both = write('both.jsonl', calc);
const trainOnly = write(
  'train.jsonl',
  calc.filter((t) => t.split === 'train'),
);
const evalOnly = write('eval.jsonl', calc.filter((t) => t.split === 'eval').slice(0, 3));

describe('train on a task file', () => {
  it('takes the train split of --tasks and its eval split, or the --eval-tasks file, as held-out', () => {
    const a = trainingTasks(resolveConfig({ tasks: both }));
    expect(a.train.length).toBe(calc.filter((t) => t.split === 'train').length);
    expect(a.held.length).toBe(calc.filter((t) => t.split === 'eval').length);
    expect(a.source).toBe(both);
    const b = trainingTasks(resolveConfig({ tasks: trainOnly, eval_tasks: evalOnly }));
    expect(b.held.map((t) => t.id)).toEqual(
      calc
        .filter((t) => t.split === 'eval')
        .slice(0, 3)
        .map((t) => t.id),
    );
    expect(trainingTasks(resolveConfig({ tasks: both, eval_limit: 2 })).held).toHaveLength(2);
    // Train tasks given in code, held-out ones from the suite (and the other way round).
    const c = trainingTasks(resolveConfig({ suite: 'calculator', max_difficulty: 1 }), { trainTasks: calc.filter((t) => t.split === 'train') });
    expect(c.held.length).toBeGreaterThan(0);
    expect(c.held.every((t) => t.split === 'eval' && t.difficulty === 1)).toBe(true);
  });

  it('a suite: the seed draws the training tasks; the held-out tasks are the same for every seed', () => {
    const of = (seed: number) => trainingTasks(resolveConfig({ suite: 'calculator', max_difficulty: 1, seed }));
    const [s0, s1, s2] = [of(0), of(1), of(2)];
    expect(s0.held.length).toBe(100);
    expect(s1.held).toEqual(s0.held);
    expect(s2.held).toEqual(s0.held);
    const prompts = (ts: { prompt?: string }[]) => new Set(ts.map((t) => t.prompt));
    expect(prompts(s1.train)).not.toEqual(prompts(s0.train));
    // No seed's training task is a held-out one.
    const held = prompts(s0.held);
    for (const s of [s0, s1, s2]) expect(s.train.filter((t) => held.has(t.prompt))).toEqual([]);
  });

  it('says what is missing: no eval split, no train split, a bad file', () => {
    expect(() => trainingTasks(resolveConfig({ tasks: trainOnly }))).toThrow(
      `tasks: ${trainOnly} has no eval tasks: give held-out tasks with --eval-tasks FILE`,
    );
    expect(() => trainingTasks(resolveConfig({ tasks: evalOnly }))).toThrow(`tasks: ${evalOnly} has no train tasks`);
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"id": "x"}\n');
    expect(() => trainingTasks(resolveConfig({ tasks: bad }))).toThrow(/bad\.jsonl:1: /);
  });

  it('mcp-gym train --tasks runs on the file (a config file can name it too)', () => {
    const run = join(dir, 'run-cli');
    const cfg = join(dir, 'cfg.json');
    writeFileSync(cfg, JSON.stringify({ tasks: trainOnly }));
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        'train',
        '--config',
        cfg,
        '--eval-tasks',
        evalOnly,
        '--steps',
        '1',
        '--tasks-per-step',
        '2',
        '--group',
        '2',
        '--eval-samples',
        '1',
        '--run',
        run,
        '--json',
      ],
      { cwd: ROOT, encoding: 'utf8', timeout: 120_000 },
    );
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toContain(`tasks ${trainOnly} (held out: ${evalOnly})`);
    expect(r.stdout).toContain(
      `${calc.filter((t) => t.split === 'train').length} train tasks and ${calc.filter((t) => t.split === 'eval').slice(0, 3).length} held-out tasks from ${trainOnly}`,
    );
    const last = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { after: { success: number } };
    expect(last.after.success).toBeGreaterThanOrEqual(0);
    expect(JSON.parse(readFileSync(join(run, 'config.json'), 'utf8'))).toMatchObject({ tasks: trainOnly, eval_tasks: evalOnly });
  }, 120_000);
});

describe('a resumed run cannot be mixed with another', () => {
  it('refuses other settings, naming each difference', () => {
    const run = join(dir, 'run-mixed');
    mkdirSync(run, { recursive: true });
    const made = resolveConfig({ preset: 'art', group: 8, suite: 'calculator' });
    writeFileSync(join(run, 'config.json'), JSON.stringify(made));
    writeFileSync(join(run, 'state.json'), JSON.stringify({ step: 1, evals: [], train_seconds: 1, rng_draws: 0 }));
    expect(
      () => new RunDir(run, { resume: true, model: made.model, config: resolveConfig({ preset: 'art', group: 4, suite: 'calculator', reward: 'rlvr' }) }),
    ).toThrow(/holds another run \(reward: the run has "art", not "rlvr"; group: the run has 8, not 4\)/);
    // The composer's weights and the curriculum change what is trained on: refused too.
    expect(
      () =>
        new RunDir(run, {
          resume: true,
          model: made.model,
          config: resolveConfig({ preset: 'art', group: 8, suite: 'calculator', composer_weights: { correctness: 1, reasoning: 0.5 }, curriculum: 'adaptive' }),
        }),
    ).toThrow(/curriculum: the run has "off", not "adaptive"; composer_weights: the run has \{"correctness":1\}, not \{"correctness":1,"reasoning":0.5\}/);
    // The same settings (more steps is fine) resume.
    const same = new RunDir(run, { resume: true, model: made.model, config: { ...made, steps: 99 } });
    expect(same.state.step).toBe(1);
    same.close();
    expect(existsSync(join(run, 'metrics.jsonl'))).toBe(true);
  });
});
