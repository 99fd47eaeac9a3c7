/**
 * The training loop under faults, with the real parts: the committed cold-start model, the
 * PyTorch learner as a child process, the bundled calculator server (as a stdio process where a
 * test kills it). Small steps (4 tasks x 4 rollouts), so each run takes seconds.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  Curriculum,
  drawDistinct,
  ReplayBuffer,
  resolveConfig,
  TaskSampler,
  train,
  trainingTasks,
  type KeptGroup,
  type LearnerClient,
  type TrainConfigInput,
} from '../../src/trainers/index.ts';
import type { Trajectory } from '../../src/env/index.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const MODEL = join(ROOT, 'models', 'calc-tiny');
const small = (o: Partial<TrainConfigInput> = {}) =>
  resolveConfig({
    preset: 'art',
    suite: 'calculator',
    max_difficulty: 1,
    model: MODEL,
    steps: 3,
    tasks_per_step: 4,
    group: 4,
    eval_limit: 8,
    eval_samples: 1,
    eval_every: 0,
    lr: 1e-4,
    ...o,
  });
const tmp = (name: string) => join(mkdtempSync(join(tmpdir(), `mcp-gym-loop-${name}-`)), 'run');
const rows = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, number>);
const checkpointStep = (runDir: string) => {
  const state = JSON.parse(readFileSync(join(runDir, 'state.json'), 'utf8')) as { step: number; checkpoint: string };
  const meta = JSON.parse(readFileSync(join(state.checkpoint, 'meta.json'), 'utf8')) as { step: number };
  return { state: state.step, learner: meta.step };
};

/**
 * Runs the CLI in its own process group and, once `steps` lines of metrics are written, signals the
 * group as a terminal's Ctrl-C signals the foreground group; resolves with its exit code and output.
 */
async function interruptAfter(
  args: string[],
  metricsFile: string,
  steps: number,
  signal: NodeJS.Signals = 'SIGINT',
): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((res) => child.on('exit', (c) => res(c)));
  await new Promise<void>((res, rej) => {
    const t = setInterval(() => {
      if (
        existsSync(metricsFile) &&
        readFileSync(metricsFile, 'utf8')
          .split('\n')
          .filter((l) => l.trim()).length >= steps
      ) {
        clearInterval(t);
        process.kill(-child.pid!, signal);
        res();
      }
    }, 100);
    child.on('exit', () => {
      clearInterval(t);
      rej(new Error(`exited before step ${steps}:\n${out}`));
    });
  });
  return { code: await exited, out };
}

describe('the training loop under faults', () => {
  it('a learner killed mid-step is restarted from the last checkpoint and the run goes on', async () => {
    const runDir = tmp('learner');
    let killed = 0;
    let step2 = 0;
    const result = await train({
      config: small(),
      runDir,
      beforeLearnerStep: (step, learner) => {
        // Once, at step 2, while the train request is being worked on.
        if (step === 2 && step2++ === 0) {
          setTimeout(() => (learner as LearnerClient).kill('SIGKILL'), 50);
          killed++;
        }
      },
    });
    expect(killed).toBe(1);
    expect(step2).toBe(2); // step 2 ran again after the restart
    expect(result.steps).toBe(3);
    const metrics = rows(join(runDir, 'metrics.jsonl'));
    expect(metrics.at(-1)!.learner_restarts).toBe(1);
    // The learner's own step count matches the loop's: nothing was skipped or applied twice.
    expect(checkpointStep(runDir)).toEqual({ state: 3, learner: 3 });
    // Every write of a step is persistStep's, after the learner's step: the rollouts of the step that was
    // rolled back are not in trajectories.jsonl, only those of the three steps the run kept.
    const episodes = metrics.reduce((n, m) => n + Number(m.episodes), 0);
    expect(episodes).toBeGreaterThan(0);
    expect(rows(join(runDir, 'trajectories.jsonl')).length).toBe(episodes);
    // The report holds each step once.
    const html = readFileSync(result.report, 'utf8');
    expect(html).toContain('held-out');
  }, 240_000);

  it('a learner killed while it saves a checkpoint: the step is rolled back and done again, and written once', async () => {
    const runDir = tmp('checkpoint');
    let killedAt = 0;
    const result = await train({
      config: small(),
      runDir,
      beforeLearnerStep: (step, learner) => {
        if (step !== 2 || killedAt) return;
        // The learner process itself, killed as step 2's checkpoint_save reaches it (after its train and export).
        const client = learner as LearnerClient;
        const request = client.request.bind(client) as typeof client.request;
        client.request = ((op: string, args: unknown) => {
          if (op === 'checkpoint_save' && !killedAt) {
            killedAt = step;
            client.kill('SIGKILL');
          }
          return request(op as never, args as never);
        }) as typeof client.request;
      },
    });
    expect(killedAt).toBe(2);
    expect(result.steps).toBe(3);
    const metrics = rows(join(runDir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(metrics.at(-1)!.learner_restarts).toBe(1);
    expect(checkpointStep(runDir)).toEqual({ state: 3, learner: 3 });
    const episodes = metrics.reduce((n, m) => n + Number(m.episodes), 0);
    expect(rows(join(runDir, 'trajectories.jsonl')).length).toBe(episodes);
    expect(rows(join(runDir, 'eval.jsonl')).map((e) => e.step)).toEqual([0, 3]);
  }, 240_000);

  it("a step's checkpoint is written while the next step's rollouts run, and the rows wait for it", async () => {
    const runDir = tmp('overlap');
    const seen: string[] = [];
    let rollout2Started: () => void = () => {};
    const rollout2 = new Promise<void>((res) => (rollout2Started = res));
    let wrapped = false;
    const result = await train({
      // The synchronous loop (the real-model job's): step 2's rollouts wait for step 1's weights.
      config: small({ max_staleness: 0 }),
      runDir,
      beforeRollout: (step) => {
        seen.push(`rollout ${step}`);
        if (step === 2) rollout2Started();
      },
      beforeLearnerStep: (step, learner) => {
        if (step !== 1 || wrapped) return;
        wrapped = true;
        const client = learner as LearnerClient;
        const request = client.request.bind(client) as typeof client.request;
        client.request = (async (op: string, args: unknown) => {
          if (op !== 'checkpoint_save' || !String((args as { dir: string }).dir).endsWith('step-00001')) return request(op as never, args as never);
          seen.push('checkpoint 1 sent');
          // Step 1's checkpoint is held until step 2's rollouts start; a loop that waits for the checkpoint
          // before it lets them start gets it after 30 s instead, and the order below fails.
          await Promise.race([rollout2, new Promise((res) => setTimeout(res, 30_000))]);
          const answer = await request(op as never, args as never);
          const metrics = join(runDir, 'metrics.jsonl');
          seen.push(`checkpoint 1 answered (${existsSync(metrics) ? rows(metrics).length : 0} metrics rows)`);
          return answer;
        }) as typeof client.request;
      },
    });
    expect(result.steps).toBe(3);
    expect(seen.slice(0, 4)).toEqual(['rollout 1', 'checkpoint 1 sent', 'rollout 2', 'checkpoint 1 answered (0 metrics rows)']);
    // Each step written once, after its checkpoint, which the state describes.
    expect(rows(join(runDir, 'metrics.jsonl')).map((m) => m.step)).toEqual([1, 2, 3]);
    expect(checkpointStep(runDir)).toEqual({ state: 3, learner: 3 });
  }, 240_000);

  it('a tool server killed mid-run costs only the episodes in flight, counted as errors', async () => {
    const runDir = tmp('server');
    let killedPid = 0;
    const result = await train({
      // 16 episodes, 8 at a time; the pipeline (max_staleness 1) starts step 2's rollouts while the learner trains step 1.
      config: small({ bundled_servers: 'stdio', concurrency: 8 }),
      runDir,
      // Every tool call takes 1.5 s, so that the kill (0.75 s into step 2's rollouts) lands while the first 8 episodes' calls are in flight.
      environment: { serverOptions: { delayMs: 1500 } },
      beforeRollout: (step) => {
        if (step !== 2) return;
        setTimeout(() => {
          const ps = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
          const line = ps.split('\n').find((l) => l.includes('serve calculator'));
          if (!line) throw new Error(`no calculator server among the children:\n${ps}`);
          killedPid = Number(line.trim().split(/\s+/)[0]);
          process.kill(killedPid, 'SIGKILL');
        }, 750);
      },
    });
    expect(killedPid).toBeGreaterThan(0);
    expect(result.steps).toBe(3);
    const m = rows(join(runDir, 'metrics.jsonl'));
    expect(m.map((r) => r.step)).toEqual([1, 2, 3]);
    // Step 2's episodes with a call in flight failed as errors; the others, and step 3, did not.
    expect(m[1]!.failed_episodes).toBeGreaterThan(0);
    expect(m[1]!.failed_episodes).toBeLessThanOrEqual(8); // at most the 8 in flight
    expect(m[1]!.episodes).toBe(16);
    expect(m[0]!.failed_episodes).toBe(0);
    expect(m[2]!.failed_episodes).toBe(0);
    const traj = rows(join(runDir, 'trajectories.jsonl')) as unknown as { finish: string; error?: string }[];
    const errors = traj.filter((t) => t.finish === 'error');
    expect(errors.length).toBe(m[1]!.failed_episodes);
    expect(errors.every((t) => /tool server failed/.test(t.error ?? ''))).toBe(true);
  }, 240_000);

  it('max_staleness 0 is the synchronous loop: a seeded run is repeated exactly, every turn sampled by the weights of the step before', async () => {
    const once = async (name: string) => {
      const runDir = tmp(name);
      await train({ config: small({ max_staleness: 0 }), runDir });
      return {
        traj: rows(join(runDir, 'trajectories.jsonl')) as unknown as { group_id: string; turns: { tokens: number[]; policy_version: number }[] }[],
        metrics: rows(join(runDir, 'metrics.jsonl')),
        evals: rows(join(runDir, 'eval.jsonl')),
      };
    };
    const a = await once('sync-a');
    const b = await once('sync-b');
    expect(a.traj.length).toBe(3 * 16);
    expect(b.traj.map((t) => t.turns.map((u) => u.tokens))).toEqual(a.traj.map((t) => t.turns.map((u) => u.tokens)));
    const learned = (m: Record<string, number>) => [m.loss, m.pg_loss, m.grad_norm, m.reward_mean, m.policy_version];
    expect(b.metrics.map(learned)).toEqual(a.metrics.map(learned));
    expect(b.evals.map((e) => e.success)).toEqual(a.evals.map((e) => e.success));
    // Step k samples with the weights exported after step k - 1 (policy_version counts the exports).
    const v0 = a.metrics[0]!.policy_version! - 1;
    for (const t of a.traj) {
      const step = Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
      for (const u of t.turns) expect(u.policy_version).toBe(v0 + step - 1);
    }
    for (const m of a.metrics) {
      expect(m.staleness_max).toBe(0);
      expect(m.staleness_hist).toEqual({ 0: 16 });
    }
  }, 240_000);

  it("eval_temperature 0: the held-out evaluations are greedy (a task's samples the same) while the rollouts sample at temperature", async () => {
    const runDir = tmp('eval-greedy');
    await train({ config: small({ steps: 1, max_staleness: 0, eval_samples: 2, eval_temperature: 0 }), runDir });
    const byTask = (file: string) => {
      const m = new Map<string, string[]>();
      for (const t of rows(file) as unknown as { task_id: string; turns: { tokens: number[] }[] }[])
        m.set(t.task_id, [...(m.get(t.task_id) ?? []), JSON.stringify(t.turns.map((u) => u.tokens))]);
      return [...m.values()];
    };
    for (const f of ['step-00000.jsonl', 'step-00001.jsonl']) {
      const evals = byTask(join(runDir, 'evals', f));
      expect(evals.length).toBe(8);
      for (const samples of evals) expect(new Set(samples).size, f).toBe(1);
    }
    expect(byTask(join(runDir, 'trajectories.jsonl')).some((samples) => new Set(samples).size > 1)).toBe(true);
    // a served policy samples its evaluations as its rollouts: the field is refused there
    expect(() => small({ eval_temperature: 0, policy: 'openai:calc-tiny', base_url: 'http://127.0.0.1:9/v1' })).toThrow(
      /eval_temperature: for the in-process onnx policy .* with policy 'openai:calc-tiny'/,
    );
  }, 240_000);

  it('max_staleness 1: the next batch is collected while the learner trains; turns at most one step stale, the metrics say so', async () => {
    const runDir = tmp('async');
    const r = await train({ config: small({ max_staleness: 1, steps: 4 }), runDir });
    expect(r.steps).toBe(4);
    const m = rows(join(runDir, 'metrics.jsonl')) as unknown as { staleness_hist: Record<string, number>; [k: string]: number | Record<string, number> }[];
    const n = (x: (typeof m)[number], k: string) => x[k] as number;
    expect(m.map((x) => x.step)).toEqual([1, 2, 3, 4]);
    for (const x of m) {
      expect(n(x, 'max_staleness')).toBe(1);
      expect(n(x, 'staleness_max')).toBeLessThanOrEqual(1);
      expect(n(x, 'stale_groups_dropped')).toBe(0);
      expect(n(x, 'learner_idle_fraction')).toBeGreaterThanOrEqual(0);
      expect(n(x, 'learner_idle_fraction')).toBeLessThanOrEqual(1);
      expect(Object.values(x.staleness_hist).reduce((a, b) => a + b, 0)).toBe(16);
    }
    expect(n(m[0]!, 'staleness_max')).toBe(0); // the first batch: the cold-start weights, nothing trained yet
    // Batches after the first started while the learner trained: some of their turns come from the older weights.
    expect(m.slice(1).reduce((n, x) => n + (x.staleness_hist[1] ?? 0), 0)).toBeGreaterThan(0);
    const v0 = n(m[0]!, 'policy_version') - 1;
    const traj = rows(join(runDir, 'trajectories.jsonl')) as unknown as { group_id: string; turns: { policy_version: number }[] }[];
    for (const t of traj) {
      const step = Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
      for (const u of t.turns) expect([v0 + step - 2, v0 + step - 1]).toContain(u.policy_version);
    }
  }, 240_000);

  it('Ctrl-C ends the step in flight, checkpoints, exits 130 with no "after" figure, and --resume continues to the end', async () => {
    const runDir = tmp('sigint');
    const args = [
      join(ROOT, 'bin', 'mcp-gym.js'),
      'train',
      '--preset',
      'art',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--model',
      MODEL,
      '--steps',
      '4',
      '--tasks-per-step',
      '4',
      '--group',
      '4',
      '--eval-limit',
      '8',
      '--eval-samples',
      '1',
      '--eval-every',
      '0',
      '--run',
      runDir,
      '--json',
    ];
    const metricsFile = join(runDir, 'metrics.jsonl');
    const { code, out } = await interruptAfter(args, metricsFile, 1);
    expect(code, out).toBe(130);
    expect(out).toContain('continue it with: mcp-gym train --resume --run');
    // No final evaluation ran: "after" is absent, not a copy of "before".
    expect(out).toContain('held-out success after:  none: the run stopped at step');
    const jsonLine = out
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .pop()!;
    expect((JSON.parse(jsonLine) as { after: unknown }).after).toBeNull();
    const stoppedAt = JSON.parse(jsonLine) as { stopped_at_step: number };
    expect(stoppedAt.stopped_at_step).toBeGreaterThanOrEqual(1);
    expect(stoppedAt.stopped_at_step).toBeLessThan(4);
    expect(checkpointStep(runDir)).toEqual({ state: stoppedAt.stopped_at_step, learner: stoppedAt.stopped_at_step });

    const second = execFileSync(process.execPath, [...args, '--resume'], { cwd: ROOT, encoding: 'utf8' });
    expect(second).toContain(`resuming ${runDir} at step ${stoppedAt.stopped_at_step}`);
    const final = JSON.parse(second.trim().split('\n').pop()!) as { before: { success: number }; after: { success: number } };
    expect(final.after).toBeDefined();
    expect(checkpointStep(runDir)).toEqual({ state: 4, learner: 4 });
    // Each step's metrics once, in order, across the two processes.
    expect(rows(metricsFile).map((r) => r.step)).toEqual([1, 2, 3, 4]);
    // The pipeline (max_staleness 1 by default) had drawn the next step's tasks when it stopped; the
    // checkpoint recorded the draws of the steps trained, so every step trained the tasks an
    // uninterrupted run draws: the sampler's sequence, 4 per step.
    const c = small({ steps: 4 });
    const sampler = new TaskSampler(trainingTasks(c).train, c.seed + 7);
    const trained = rows(join(runDir, 'trajectories.jsonl')) as unknown as { task_id: string; group_id: string }[];
    for (let step = 1; step <= 4; step++) {
      const expected = new Set(drawDistinct(4, () => sampler.draw()).map((t) => t.id));
      const got = new Set(trained.filter((t) => t.group_id.includes(`@train.${step}.`)).map((t) => t.task_id));
      expect(got, `step ${step}`).toEqual(expected);
    }
  }, 300_000);
  it('Ctrl-C and --resume with the adaptive curriculum and replay on: every step draws the tasks and replays the groups an uninterrupted run would', async () => {
    const runDir = tmp('sigint-curriculum');
    const flags = {
      max_difficulty: 3,
      steps: 5,
      tasks_per_step: 4,
      group: 4,
      curriculum: 'adaptive',
      curriculum_window: 1,
      curriculum_low: 0.1,
      curriculum_high: 0.2,
      replay_fraction: 0.5,
    } as const;
    const args = [
      join(ROOT, 'bin', 'mcp-gym.js'),
      'train',
      '--preset',
      'art',
      '--suite',
      'calculator',
      '--model',
      MODEL,
      '--eval-limit',
      '4',
      '--eval-samples',
      '1',
      '--eval-every',
      '0',
      '--run',
      runDir,
      '--json',
      ...Object.entries(flags).flatMap(([k, v]) => [`--${k.replace(/_/g, '-')}`, String(v)]),
    ];
    const metricsFile = join(runDir, 'metrics.jsonl');
    // Stopped (SIGTERM, as a scheduler stops a job) after step 2, so that the state stored holds levels, windows and replayed groups.
    const { code, out } = await interruptAfter(args, metricsFile, 2, 'SIGTERM');
    expect(code, out).toBe(130);
    const jsonLine = out
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .pop()!;
    const stoppedAt = (JSON.parse(jsonLine) as { stopped_at_step: number }).stopped_at_step;
    expect(stoppedAt).toBeGreaterThanOrEqual(2);
    expect(stoppedAt).toBeLessThan(5);
    const second = execFileSync(process.execPath, [...args, '--resume'], { cwd: ROOT, encoding: 'utf8' });
    expect(second).toContain(`resuming ${runDir} at step ${stoppedAt}`);
    const metrics = rows(metricsFile) as unknown as { step: number; replayed_group_ids: string[]; curriculum_levels: Record<string, number> }[];
    expect(metrics.map((r) => r.step)).toEqual([1, 2, 3, 4, 5]);

    // An uninterrupted run, replayed from the run's own episodes: the same sampler, curriculum and
    // buffer, fed in batch order. The pipeline (max_staleness 1) had drawn step stoppedAt + 1 and
    // updated both when Ctrl-C came; the checkpoint stored their state after step stoppedAt.
    const c = small(flags);
    const tasks = trainingTasks(c).train;
    const sampler = new TaskSampler(tasks, c.seed + 7);
    const cur = new Curriculum(tasks, {
      mode: 'adaptive',
      share: c.curriculum_share,
      low: c.curriculum_low,
      high: c.curriculum_high,
      window: c.curriculum_window,
      start: c.curriculum_start,
      schedule: c.curriculum_schedule,
    });
    const buf = new ReplayBuffer({
      fraction: c.replay_fraction,
      capacity: c.replay_capacity,
      maxAge: c.replay_max_age,
      priority: c.replay_priority,
      seed: c.seed + 13,
      advantage: 'grpo',
    });
    const trained = rows(join(runDir, 'trajectories.jsonl')) as unknown as Trajectory[];
    for (let step = 1; step <= 5; step++) {
      expect(metrics[step - 1]!.curriculum_levels, `step ${step}`).toEqual(cur.levels(step));
      const replayed = buf.draw(step, buf.target(4)).groups.map((g) => g.group_id);
      expect(metrics[step - 1]!.replayed_group_ids, `step ${step}`).toEqual(replayed);
      const drawn = drawDistinct(4 - replayed.length, () => cur.draw(sampler, step));
      const ofStep = trained.filter((t) => t.group_id.includes(`@train.${step}.`));
      expect(new Set(ofStep.map((t) => t.task_id)), `step ${step}`).toEqual(new Set(drawn.map((t) => t.id)));
      cur.update(step, ofStep);
      const groups: KeptGroup[] = [...new Map(drawn.map((t) => [t.id, t])).keys()]
        .map((id) => ({
          group_id: `${id}@train.${step}.0`,
          trajectories: ofStep.filter((t) => t.group_id === `${id}@train.${step}.0` && t.finish !== 'error'),
        }))
        .filter((g) => g.trajectories.length >= 2);
      buf.add(step, groups);
    }
    // The band (0.1, 0.2) moved the level: the state stored at the stop mattered.
    expect(new Set(metrics.map((m) => m.curriculum_levels.calculator)).size).toBeGreaterThan(1);
    expect(metrics.slice(1).some((m) => m.replayed_group_ids.length > 0)).toBe(true);
  }, 300_000);
});
