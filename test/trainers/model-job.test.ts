/**
 * The real-model job's plumbing (src/trainers/model-job.ts) on a tiny random Qwen3 checkpoint: every stage
 * runs (the base's evaluation, SFT, GRPO with the SFT and RL checkpoints' evaluations), the held-out
 * questions in the held-out wording are evaluated beside the usual ones and reported apart, progress comes
 * stage by stage in the job's order, and a caller that takes turns (bench/model-job.ts) gets every unit of
 * work inside a turn, one at a time. The whole job's ETA (JobEta) is checked on its own. (What the job
 * learns on the real model: bench/RESULTS.md, "A real model".)
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { JOB_STAGES, JobEta, jobPlan, jobTasks, runModelJob, type ModelJobConfig, type ModelJobProgress } from '../../src/trainers/index.ts';
import { readTrajectories } from '../../src/env/index.ts';
import { modelJobCommand } from '../../src/cli/model-job.ts';
import { HAVE_HF_PY, makeTinyCheckpoints } from '../helpers/hf-fixtures.ts';

const TIMEOUT = 600_000;

const config = (model: string): ModelJobConfig => ({
  model,
  model_name: 'tiny',
  suite: 'sql',
  min_difficulty: 1,
  max_difficulty: 2,
  eval_tasks: 3,
  k: 2,
  seed: 0,
  tool_format: 'auto',
  reworded: true,
  // SFT and GRPO on the learner's bf16 compute copy (float32 master weights), as `--compute-dtype bfloat16`
  compute_dtype: 'bfloat16',
  sft: { demos: 4, epochs: 1, batch: 4, lr: 1e-4, lora_rank: 0 },
  rl: { preset: 'art', steps: 2, tasks_per_step: 2, group: 2, lr: 1e-5, beta: 0, eval_every: 0, max_staleness: 0, max_new_tokens: 16, max_difficulty: 1 },
});

describe('the job ETA', () => {
  const plan = { base: 100, sft: 100, 'sft-eval': 50, rl: 200, 'rl-eval': 50 };

  it('starts from the plan and follows the pace of the work done', () => {
    const eta = new JobEta(plan);
    expect(eta.update({ stage: 'base', done: 0, total: 10 }, 0)).toBeCloseTo(500, 6);
    // Half the base's episodes in 100 s where 50 were planned: pace (100 + 60) / (50 + 60).
    const pace = 160 / 110;
    expect(eta.update({ stage: 'base', done: 5, total: 10 }, 100)).toBeCloseTo(50 * pace + 400 * pace, 6);
    // A stage without progress (an evaluation inside training) counts its own elapsed seconds as done.
    expect(eta.update({ stage: 'sft-eval', done: 0, total: 1 }, 300)).toBeCloseTo((50 * 360) / 260 + 250 * (360 / 260), 6);
    expect(eta.update({ stage: 'rl-eval', done: 0, total: 1 }, 1000)).toBeGreaterThanOrEqual(0);
    expect(eta.update({ stage: 'done', done: 1, total: 1 }, 1100)).toBe(0);
  });

  it('leaves out the stages a resumed job had finished', () => {
    const eta = new JobEta(plan);
    expect(eta.update({ stage: 'rl', done: 0, total: 4 }, 0)).toBeCloseTo(250, 6);
    expect(eta.update({ stage: 'rl', done: 2, total: 4 }, 200)).toBeCloseTo((100 + 50) * (260 / 160), 6);
  });

  it("refuses a GRPO difficulty outside the job's, before it resolves the model", async () => {
    await expect(modelJobCommand(['--model', 'no-such-model', '--rl-max-difficulty', '4'])).rejects.toThrow(
      "--rl-max-difficulty 4: GRPO's tasks are within the job's difficulties, 1 to 3",
    );
    await expect(modelJobCommand(['--model', 'no-such-model', '--rl-max-difficulty', 'two'])).rejects.toThrow(/--rl-max-difficulty/);
    await expect(modelJobCommand(['--model', 'no-such-model', '--compute-dtype', 'float16'])).rejects.toThrow(
      "--compute-dtype: float32 or bfloat16, got 'float16'",
    );
  });

  it('refuses the held-out wording on a suite that has none, naming it', () => {
    expect(() => jobTasks({ ...config('m'), suite: 'kv' })).toThrow("reworded: the held-out wording is the sql suite's, not kv's");
  });

  it('plans each stage from its units', () => {
    const c = config('m');
    const p = jobPlan(c, 3, 2);
    expect(Object.keys(p)).toEqual([...JOB_STAGES]);
    expect(p['sft-eval']).toBe(p['rl-eval']);
    expect(p['sft-eval']).toBeGreaterThan(jobPlan(c, 3, 0)['sft-eval']);
    expect(p.rl).toBe(jobPlan({ ...c, rl: { ...c.rl, steps: 1 } }, 3, 2).rl * 2);
  });
});

describe.runIf(HAVE_HF_PY)('the real-model job on a tiny model', () => {
  it('runs every stage, reports the held-out wording apart, in order and in turns', { timeout: TIMEOUT }, async () => {
    const model = makeTinyCheckpoints([{ name: 'q', family: 'qwen3', seed: 3 }]).q!;
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-model-job-'));
    const c = config(model);
    const { held, reworded } = jobTasks(c);
    expect(held.length).toBe(3);
    expect(reworded!.length).toBeGreaterThan(0);
    expect(reworded!.every((t) => t.id.endsWith('-w3') && t.params!.phrasing === 3)).toBe(true);

    const stages: ModelJobProgress['stage'][] = [];
    const log: string[] = [];
    let held_ = false;
    let turns = 0;
    const r = await runModelJob({
      config: c,
      dir,
      turn: async () => {
        expect(held_).toBe(false); // one unit at a time
        held_ = true;
        turns++;
        return () => {
          held_ = false;
        };
      },
      onProgress: (p) => {
        if (stages[stages.length - 1] !== p.stage) stages.push(p.stage);
      },
      onLog: (l) => log.push(l),
    });
    expect(held_).toBe(false);
    // base, SFT, (SFT eval + step 1), step 2 (with the last evaluation)
    expect(turns).toBe(4);
    expect(stages).toEqual(['base', 'sft', 'sft-eval', 'rl', 'rl-eval']);
    expect(log[0]).toMatch(/3 held-out tasks x 2 samples \(and \d+ questions in the held-out wording for SFT and RL\)/);

    expect(r.base.tasks).toBe(3);
    expect(r.sft.tasks).toBe(3);
    expect(r.rl.tasks).toBe(3);
    expect(r.rl_minus_sft.tasks).toBe(3);
    expect(r.reworded!.sft.tasks).toBe(reworded!.length);
    expect(r.reworded!.rl.episodes).toBe(2 * reworded!.length);
    expect(r.reworded!.rl_minus_sft.tasks).toBe(reworded!.length);
    // the RL run's evaluations hold both sets; the usual figures count the usual tasks only
    const after = readTrajectories(join(dir, r.rl.trajectories));
    expect(after.length).toBe(2 * (3 + reworded!.length));
    expect(after.filter((t) => t.task_id.endsWith('-w3')).length).toBe(2 * reworded!.length);
    const job = JSON.parse(readFileSync(join(dir, 'job.json'), 'utf8')) as { result: { reworded: unknown } };
    expect(job.result.reworded).toBeDefined();
    expect(existsSync(join(dir, 'rl', 'model', 'config.json'))).toBe(true);
    // GRPO trains on its own difficulties (rl.max_difficulty 1), SFT on the job's (1-2)
    const rolled = readTrajectories(join(dir, 'rl', 'trajectories.jsonl'));
    expect(rolled.length).toBe(2 * 2 * 2);
    expect(rolled.every((t) => t.difficulty === 1)).toBe(true);
    // Each step's sampler profile: graph seconds, prefill calls, decode steps and the rows they ran
    const steps = readFileSync(join(dir, 'rl', 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(steps.length).toBe(2);
    for (const m of steps) {
      expect(m.prefill_calls).toBeGreaterThan(0);
      expect(m.decode_steps).toBeGreaterThan(0);
      expect(m.decode_rows_mean).toBeGreaterThanOrEqual(1);
      expect(m.decode_rows_mean).toBeLessThanOrEqual(4); // 2 tasks x 2 samples
      expect(m.decode_seconds).toBeGreaterThan(0);
    }
  });
});
