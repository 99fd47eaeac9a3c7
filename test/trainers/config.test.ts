import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  buildBatch,
  CONFIG_GROUPS,
  groupAdvantages,
  TrainConfigSchema,
  isZeroVariance,
  learnerConfig,
  overlongPenalty,
  PRESETS,
  resolveConfig,
  samplerThreads,
  turnAdvantages,
} from '../../src/trainers/index.ts';

describe('presets and config', () => {
  it('each preset fills the loop and the learner configuration', () => {
    const dapo = resolveConfig({ preset: 'dapo' });
    expect(dapo).toMatchObject({ loss: 'dapo', clip_low: 0.2, clip_high: 0.28, dynamic_sampling: true, beta: 0 });
    expect(learnerConfig(dapo, { totalSteps: 10, policyTokenBudget: 512 })).toMatchObject({ loss: 'dapo', clip_high: 0.28, total_steps: 10 });
    expect(resolveConfig({ preset: 'dr_grpo' })).toMatchObject({ advantage: 'dr_grpo', loss: 'dr_grpo' });
    expect(resolveConfig({ preset: 'gspo' })).toMatchObject({ loss: 'gspo' });
    expect(resolveConfig({ preset: 'rlvr' })).toMatchObject({ reward: 'rlvr', loss: 'grpo' });
    expect(resolveConfig({ preset: 'art' })).toMatchObject({ reward: 'art', loss: 'grpo', beta: 0.04 });
    expect(Object.keys(PRESETS).sort()).toEqual(['art', 'dapo', 'dr_grpo', 'grpo', 'gspo', 'ppo', 'prorl', 'rlvr', 'ruler']);
    // The off-policy correction follows the pipeline unless given: token-level TIS when asynchronous.
    const lc = (o: Parameters<typeof resolveConfig>[0]) => learnerConfig(resolveConfig(o), { totalSteps: 1, policyTokenBudget: 1 }).is_correction;
    expect(resolveConfig({}).max_staleness).toBe(1);
    expect(lc({})).toBe('token_truncate');
    expect(lc({ max_staleness: 0 })).toBe('none');
    expect(lc({ max_staleness: 0, is_correction: 'sequence_mask' })).toBe('sequence_mask');
    expect(lc({ max_staleness: 2, is_correction: 'none' })).toBe('none');
    expect(() => resolveConfig({ max_staleness: -1 })).toThrow(/max_staleness: /);
    expect(() => resolveConfig({ is_correction: 'tis' as never })).toThrow(/is_correction: /);
    // The sampler's threads: 2 for the synchronous loop (the learner is idle while it samples), 1 when
    // it overlaps the learner, the config's when given.
    const cores = availableParallelism();
    expect(samplerThreads(resolveConfig({ max_staleness: 0 }))).toBe(cores >= 2 ? 2 : 1);
    expect(samplerThreads(resolveConfig({ max_staleness: 1 }))).toBe(1);
    expect(samplerThreads(resolveConfig({ max_staleness: 1, sampler_threads: 3 }))).toBe(3);
    expect(() => resolveConfig({ sampler_threads: 0 })).toThrow(/sampler_threads: /);
    // The learner's processes: FSDP needs 2 or more; a remote learner's are its own; a shared file system is a remote learner's.
    const hf = { model: 'smollm2-135m' }; // a registered Hugging Face model (FSDP is for those)
    expect(resolveConfig({ ...hf, learner_procs: 2, learner_parallel: 'fsdp' }).learner_parallel).toBe('fsdp');
    expect(() => resolveConfig({ learner_procs: 2, learner_parallel: 'fsdp' })).toThrow(
      /learner_parallel: for Hugging Face models only; .* is an embedded GPT model/,
    );
    expect(() => resolveConfig({ learner_procs: 0 })).toThrow(/learner_procs: /);
    expect(() => resolveConfig({ learner_parallel: 'zero' as never })).toThrow(/learner_parallel: /);
    expect(() => resolveConfig({ ...hf, learner_parallel: 'fsdp' })).toThrow(
      /learner_parallel: fsdp shards the model over the learner's processes: set learner_procs to 2 or more/,
    );
    expect(() => resolveConfig({ learner: 'http://127.0.0.1:8765', learner_procs: 2 })).toThrow(
      /learner_procs: the processes of a remote learner \(http:\/\/127\.0\.0\.1:8765\) are the ones its torchrun started there/,
    );
    expect(() => resolveConfig({ learner_shared_fs: true })).toThrow(/learner_shared_fs: for a remote learner/);
    // Flags override the preset; errors name the field.
    expect(resolveConfig({ preset: 'dapo', clip_high: 0.3 }).clip_high).toBe(0.3);
    expect(() => resolveConfig({ preset: 'grpo', group: 1 })).toThrow(/group: Too small/);
    expect(() => resolveConfig({ preset: 'nope' as never })).toThrow(/unknown preset 'nope'/);
  });
});

describe('the config by group', () => {
  it('every field of the schema is in exactly one group', () => {
    const listed = Object.values(CONFIG_GROUPS).flat() as string[];
    expect([...listed].sort()).toEqual(Object.keys(TrainConfigSchema.shape).sort());
    expect(new Set(listed).size).toBe(listed.length);
    expect(Object.keys(CONFIG_GROUPS)).toEqual(['run', 'rollout', 'algorithm', 'learner', 'eval', 'schedule']);
  });

  it('a grouped config resolves as the same fields given flat; mistakes are named with their group', () => {
    const flat = resolveConfig({ preset: 'grpo', group: 4, lr: 1e-4, eval_every: 5, steps: 7 });
    expect(resolveConfig({ preset: 'grpo', rollout: { group: 4 }, learner: { lr: 1e-4 }, eval: { eval_every: 5 }, schedule: { steps: 7 } })).toEqual(flat);
    expect(() => resolveConfig({ rollout: { lr: 1e-4 } as never })).toThrow(/^rollout\.lr: lr belongs to the learner group$/);
    expect(() => resolveConfig({ rollout: { nope: 1 } as never })).toThrow(/^rollout\.nope: no such field in the rollout group \(its fields: tasks_per_step, /);
    expect(() => resolveConfig({ group: 4, rollout: { group: 4 } })).toThrow(/^rollout\.group: given twice/);
    expect(() => resolveConfig({ rollout: 3 as never })).toThrow(/^rollout: a group of fields \(an object\), got 3$/);
    // learner: the remote learner's URL when a string, the group when an object.
    expect(resolveConfig({ learner: 'http://127.0.0.1:9' }).learner).toBe('http://127.0.0.1:9');
    expect(resolveConfig({ learner: { learner: 'http://127.0.0.1:9', lr: 1e-4 } })).toMatchObject({ learner: 'http://127.0.0.1:9', lr: 1e-4 });
    expect(() => resolveConfig({ rollout: { group: 1 } })).toThrow(/^rollout\.group: Too small/);
    expect(() => resolveConfig({ group: 1 })).toThrow(/^group: Too small/);
    // A config file, grouped: the same, and its errors name the file.
    const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-config-'));
    try {
      const file = join(dir, 'c.json');
      writeFileSync(file, JSON.stringify({ preset: 'grpo', rollout: { group: 4 }, learner: { lr: 1e-4 }, eval: { eval_every: 5 } }));
      expect(resolveConfig({ steps: 7 }, file)).toEqual(flat);
      writeFileSync(file, JSON.stringify({ learner: { group: 4 } }));
      expect(() => resolveConfig({}, file)).toThrow(`${file}: learner.group: group belongs to the rollout group`);
      writeFileSync(file, '[1]');
      expect(() => resolveConfig({}, file)).toThrow(/the config is a JSON object of fields/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the prorl preset', () => {
  it('GRPO with the KL kept and reset, clip-higher, dynamic sampling, warm-up + cosine, curriculum, replay, periodic evaluation', () => {
    const c = resolveConfig({ preset: 'prorl' });
    expect(c).toMatchObject({
      advantage: 'grpo',
      loss: 'grpo',
      clip_low: 0.2,
      clip_high: 0.28,
      dynamic_sampling: true,
      curriculum: 'adaptive',
      replay_priority: 'advantage',
    });
    expect(c.beta).toBeGreaterThan(0);
    expect(c.ref_reset_every).toBeGreaterThan(0);
    expect(c.warmup_steps).toBeGreaterThan(0);
    expect(c.replay_fraction).toBeGreaterThan(0);
    expect(c.eval_every).toBeGreaterThan(0);
    const l = learnerConfig(c, { totalSteps: 100, policyTokenBudget: 1 });
    // The cosine schedule over the run's steps; replay (stale by design) corrected even when synchronous.
    expect(l).toMatchObject({ total_steps: 100, min_lr_ratio: 0.1, ref_reset_every: c.ref_reset_every, beta: c.beta, clip_high: 0.28 });
    expect(learnerConfig(resolveConfig({ preset: 'prorl', max_staleness: 0 }), { totalSteps: 1, policyTokenBudget: 1 }).is_correction).toBe('token_truncate');
    expect(resolveConfig({ preset: 'prorl', clip_high: 0.4 }).clip_high).toBe(0.4); // ProRL's own
  });
});

describe('advantages and the batch', () => {
  it('GRPO normalises within the group; equal rewards give exactly 0; Dr. GRPO only centres', () => {
    // The sample std (Bessel-corrected, as TRL and verl): std([1, 0, 0, 1]) = sqrt(1 / 3).
    const a = groupAdvantages([1, 0, 0, 1], 'grpo'); // (r - 0.5) / (0.57735 + 1e-6)
    [0.866025, -0.866025, -0.866025, 0.866025].forEach((want, i) => expect(a[i]).toBeCloseTo(want, 5));
    // Two rewards 1 and 0: ±1/sqrt(2) (the population std would give ±1).
    groupAdvantages([1, 0], 'grpo').forEach((x, i) => expect(x).toBeCloseTo([Math.SQRT1_2, -Math.SQRT1_2][i]!, 5));
    expect(groupAdvantages([0.3, 0.3, 0.3], 'grpo')).toEqual([0, 0, 0]);
    expect(isZeroVariance([0.3, 0.3])).toBe(true);
    expect(groupAdvantages([1, 0], 'dr_grpo')).toEqual([0.5, -0.5]);
    const tiny = groupAdvantages([1, 1 + 1e-10], 'grpo');
    expect(tiny.every((x) => Number.isFinite(x) && Math.abs(x) < 1)).toBe(true);
  });

  it('per-turn advantages normalise returns-to-go at equal turn index', () => {
    const adv = turnAdvantages(
      [
        { stepRewards: [0.3, 0], final: 1 },
        { stepRewards: [0.1, 0], final: 0 },
      ],
      'dr_grpo',
    );
    expect(adv[0]!.map((x) => Number(x.toFixed(6)))).toEqual([0.6, 0.5]);
    expect(adv[1]!.map((x) => Number(x.toFixed(6)))).toEqual([-0.6, -0.5]);
  });

  it('DAPO overlong shaping', () => {
    expect(overlongPenalty(100, 160, 48)).toBe(0);
    expect(overlongPenalty(136, 160, 48)).toBeCloseTo(-0.5, 12);
    expect(overlongPenalty(200, 160, 48)).toBe(-1);
  });

  it('builds the TrainBatch from trajectories: env tokens masked out, sampler logprobs kept, explicit group ids', () => {
    const t = {
      turns: [
        { env_tokens: [257, 65, 262, 258], tokens: [66, 262], logprobs: [-0.1, -0.2] },
        { env_tokens: [259, 67, 262, 258], tokens: [68, 262], logprobs: [-0.3, -0.4] },
      ],
    } as never;
    const b = buildBatch([{ trajectory: t, group_id: 'g@1', advantage: 0.7 }]);
    expect(b.ids).toEqual([[257, 65, 262, 258, 66, 262, 259, 67, 262, 258, 68, 262]]);
    expect(b.mask).toEqual([[0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1]]);
    expect(b.old_logprobs[0]!.filter((_, i) => b.mask[0]![i])).toEqual([-0.1, -0.2, -0.3, -0.4]);
    expect(b.advantages).toEqual([0.7]);
    expect(b.group_ids).toEqual(['g@1']);
    const perTurn = buildBatch([{ trajectory: t, group_id: 'g@1', advantage: [1, -1] }]);
    expect(perTurn.advantages).toEqual([[0, 0, 0, 0, 1, 1, 0, 0, 0, 0, -1, -1]]);
  });
});
