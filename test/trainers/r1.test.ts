/**
 * The DeepSeek-R1 pipeline with the real parts: the committed cold-start model (or a new one made
 * by the SFT cold start), the PyTorch learner, the bundled calculator server in-process. Every
 * stage is a few steps, so that a whole pipeline takes a minute or two.
 */
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTrajectories, type Trajectory } from '../../src/env/index.ts';
import {
  R1_STAGES,
  R1ConfigError,
  r1Table,
  runR1Pipeline,
  selectVerified,
  sequenceOf,
  trajectorySignature,
  type R1ConfigInput,
  type RejectionCounts,
} from '../../src/trainers/index.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const MODEL = join(ROOT, 'models', 'calc-tiny');
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `mcp-gym-r1-${name}-`));
const trainConfig = (dir: string) => {
  const f = join(dir, 'train.json');
  writeFileSync(f, JSON.stringify({ beta: 0, max_staleness: 0 }));
  return f;
};
const small = (dir: string, o: Partial<R1ConfigInput> = {}): R1ConfigInput => ({
  grpo_steps: 1,
  grpo2_steps: 1,
  tasks_per_step: 3,
  group: 2,
  lr: 1e-4,
  rs_tasks: 6,
  rs_k: 4,
  rs_max_per_task: 1,
  rs_sft_steps: 3,
  rs_sft_batch: 4,
  eval_limit: 4,
  eval_samples: 1,
  concurrency: 8,
  train_config: trainConfig(dir),
  ...o,
});

describe('the R1 pipeline', () => {
  it('runs the four stages in order, each from the one before; stage 3 keeps only verified, distinct samples, at most M per task, and trains on their policy tokens', async () => {
    const dir = tmp('order');
    const out = join(dir, 'p');
    const lines: string[] = [];
    const r = await runR1Pipeline({ config: small(dir, { model: MODEL }), out, onLog: (l) => lines.push(l) });
    expect(r.stopped).toBe(false);
    const rec = JSON.parse(readFileSync(join(out, 'pipeline.json'), 'utf8')) as typeof r.record;
    expect(rec.stages.map((s) => s.name)).toEqual([...R1_STAGES]);
    // In order: each stage's first log line comes after the previous stage's.
    const first = R1_STAGES.map((s) => lines.findIndex((l) => l.startsWith(`stage ${s}:`)));
    expect(first.every((i, k) => i >= 0 && (k === 0 || i > first[k - 1]!))).toBe(true);
    // Each stage starts from the model the one before ended with.
    const [s1, s2, s3, s4] = rec.stages;
    expect(s1!.detail.as_is).toBe(true);
    expect(s2!.detail.from).toBe(s1!.model);
    expect(s3!.detail.from).toBe(s2!.model);
    expect(s4!.detail.from).toBe(s3!.model);
    // The same held-out tasks for every stage, with a Wilson interval around each figure.
    for (const s of rec.stages) {
      expect(s.eval.episodes).toBe(4);
      expect(s.eval.ci95[0]).toBeLessThanOrEqual(s.eval.success);
      expect(s.eval.ci95[1]).toBeGreaterThanOrEqual(s.eval.success);
      expect(s.seconds).toBeGreaterThan(0);
    }
    // Stage 4's "before" is stage 3's model on the same tasks (the same figure, sampled again).
    expect(s4!.detail.before).toBeDefined();

    // Stage 3's accounting against its samples, every one kept or rejected for one reason.
    const samples = readTrajectories(join(out, '3-rs-sft', 'samples.jsonl'));
    const kept = readTrajectories(join(out, '3-rs-sft', 'kept.jsonl'));
    const d = s3!.detail as unknown as RejectionCounts & { k: number };
    expect(samples.length).toBe(6 * 4);
    expect(d.samples).toBe(samples.length);
    expect(d.kept + d.rejected.incorrect + d.rejected.duplicate + d.rejected.over_max + d.rejected.untrainable).toBe(d.samples);
    expect(d.rejected.incorrect).toBe(samples.filter((t) => !t.success || t.finish === 'error').length);
    expect(kept.length).toBe(d.kept);
    expect(kept.every((t) => t.success)).toBe(true);
    const perTask = new Map<string, Set<string>>();
    for (const t of kept) perTask.set(t.task_id, new Set([...(perTask.get(t.task_id) ?? []), trajectorySignature(t)]));
    for (const [task, sigs] of perTask) {
      expect(kept.filter((t) => t.task_id === task).length).toBe(sigs.size); // no duplicates
      expect(sigs.size).toBeLessThanOrEqual(1); // M = 1
    }
    // Every solved task left out of the kept ones had no solved sample.
    if (d.rejected.untrainable === 0) for (const t of samples.filter((x) => x.success)) expect(perTask.has(t.task_id)).toBe(true);
    expect(d.rejected.over_max + d.rejected.duplicate).toBe(samples.filter((t) => t.success).length - kept.length - d.rejected.untrainable);

    if (kept.length > 0) {
      // The SFT data: each kept sample's token sequence as sampled, the loss on the policy's tokens only.
      const data = readFileSync(join(out, '3-rs-sft', 'model', 'sft-data.jsonl'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { ids: number[]; mask: number[] });
      expect(data.length).toBe(kept.length);
      data.forEach((ex, i) => {
        const t = kept[i]!;
        expect(ex.ids).toEqual(sequenceOf(t)!.ids);
        expect(ex.mask.reduce((a, b) => a + b, 0)).toBe(t.turns.reduce((n, turn) => n + (turn.tokens?.length ?? 0), 0));
        // The environment's tokens (prompt, tool results) carry no loss.
        const envTokens = t.turns.reduce((n, turn) => n + (turn.env_tokens?.length ?? 0), 0);
        expect(ex.mask.filter((m) => m === 0).length).toBe(envTokens);
      });
      // The SFT changed the weights of the stage-2 model.
      const w2 = readFileSync(join(s2!.model, 'weights.pt'));
      const w3 = readFileSync(join(s3!.model, 'weights.pt'));
      expect(Buffer.compare(w2, w3)).not.toBe(0);
      expect((d as unknown as { sft: { examples: number } }).sft.examples).toBe(kept.length);
    }
    // The report: the table and report.md, a row per stage.
    const table = r1Table(rec);
    for (const s of R1_STAGES) expect(table).toContain(s);
    const md = readFileSync(r.report, 'utf8');
    expect(md).toContain('| 3-rs-sft |');
    expect(md).toContain('## Stage 3: rejection sampling');
  }, 600_000);

  it('deduplicates on the tool calls and the answer, not on the wording; rejects the incorrect; caps each task at M', () => {
    // Two real trajectories of the expert-like shape, edited: the same calls and answer with other
    // words are duplicates; another answer is distinct.
    const base = (over: Partial<Trajectory>, sample: number): Trajectory =>
      ({
        id: `t${sample}`,
        task_id: over.task_id ?? 'a',
        group_id: 'a@rs',
        sample,
        split: 'train',
        difficulty: 1,
        policy: { id: 'p' },
        messages: [],
        answer: '4',
        success: true,
        reward: 1,
        reward_parts: {},
        finish: 'answer',
        turns: [
          {
            tokens: [1, 2],
            env_tokens: [5, 6],
            action: { content: 'let me add', tool_calls: [{ id: 'c1', name: 'calculator.add', arguments: { a: 2, b: 2 } }] },
            tool_results: [],
            step_reward: 0,
            policy_ms: 1,
          },
          { tokens: [3], env_tokens: [7], action: { content: '4', tool_calls: [] }, tool_results: [], step_reward: 0, policy_ms: 1 },
        ],
        metrics: {},
        ...over,
      }) as unknown as Trajectory;
    const reworded = base({}, 1);
    reworded.turns[0]!.action = { content: 'adding now', tool_calls: [{ id: 'x9', name: 'calculator.add', arguments: { b: 2, a: 2 } }] };
    const ts = [
      base({}, 0),
      reworded,
      base({ answer: ' 4 ' }, 2),
      base({ answer: '4.0' }, 3),
      base({ success: false }, 4),
      base({ answer: '5' }, 5),
      base({ task_id: 'b' }, 0),
    ];
    const { kept, counts } = selectVerified(ts, { maxPerTask: 2, maxLen: 100 });
    expect(kept.map((t) => `${t.task_id}${t.sample}`)).toEqual(['a0', 'a3', 'b0']);
    expect(counts.rejected).toEqual({ incorrect: 1, duplicate: 2, over_max: 1, untrainable: 0 });
    // A sequence longer than the context cannot be trained on.
    expect(selectVerified([base({}, 0)], { maxPerTask: 1, maxLen: 4 }).counts.rejected.untrainable).toBe(1);
  });

  it('--model with --sft fine-tunes a copy in <out>/1-sft/model: the given directory is left as it was', async () => {
    const dir = tmp('given');
    const given = join(dir, 'given');
    cpSync(MODEL, given, { recursive: true });
    const digest = (d: string) =>
      Object.fromEntries(
        readdirSync(d)
          .sort()
          .map((f) => [
            f,
            createHash('sha256')
              .update(readFileSync(join(d, f)))
              .digest('hex'),
          ]),
      );
    const before = digest(given);
    const out = join(dir, 'p');
    const ac = new AbortController();
    // Stage 1 only: the signal stops the pipeline as stage 2 starts.
    const r = await runR1Pipeline({
      config: small(dir, { model: given, sft: true, sft_demos: 16, sft_steps: 2, sft_batch: 4, sft_lr: 1e-4 }),
      out,
      signal: ac.signal,
      onLog: (l) => l.startsWith('stage 2-grpo') && ac.abort(),
    });
    expect(r.record.stages.map((s) => s.name)).toEqual(['1-sft']);
    expect(r.record.stages[0]!.model).toBe(join(out, '1-sft', 'model'));
    expect(digest(given)).toEqual(before);
    expect(digest(join(out, '1-sft', 'model'))['weights.pt']).not.toBe(before['weights.pt']);
    expect(existsSync(join(out, '1-sft', 'model', 'tool-surface.json'))).toBe(true);
  }, 180_000);

  it('resumes: finished stages are skipped, an interrupted GRPO stage continues from its checkpoint, other settings are refused naming the field', async () => {
    const dir = tmp('resume');
    const out = join(dir, 'p');
    // Stage 1 trains a new (tiny) model on expert demonstrations; stage 2 is stopped after its first step.
    const config = small(dir, { grpo_steps: 2, sft_demos: 16, sft_steps: 4, sft_batch: 4, sft_d_model: 32, sft_layers: 1, sft_heads: 2 });
    const ac = new AbortController();
    const first = await runR1Pipeline({ config, out, signal: ac.signal, onTrainStep: (stage, m) => stage === '2-grpo' && m.step === 1 && ac.abort() });
    expect(first.stopped).toBe(true);
    expect(first.record.stages.map((s) => s.name)).toEqual(['1-sft']);
    expect(first.record.stages[0]!.detail.demos).toBe(16);
    // The SFT'd model records the tool surface it was trained on (eval warns when a server drifts from it).
    expect((JSON.parse(readFileSync(join(out, '1-sft', 'model', 'tool-surface.json'), 'utf8')) as { servers: Record<string, unknown> }).servers).toHaveProperty(
      'calculator',
    );
    expect(first.record.partial['2-grpo']).toBeGreaterThan(0);
    const state = JSON.parse(readFileSync(join(out, '2-grpo', 'state.json'), 'utf8')) as { step: number };
    expect(state.step).toBe(1);

    // Other settings: refused, naming the field.
    await expect(runR1Pipeline({ config: { ...config, rs_k: 3 }, out })).rejects.toThrow(R1ConfigError);
    await expect(runR1Pipeline({ config: { ...config, rs_k: 3 }, out })).rejects.toThrow(/rs_k: the pipeline has 4, not 3/);

    const lines: string[] = [];
    const second = await runR1Pipeline({ config, out, onLog: (l) => lines.push(l) });
    expect(second.stopped).toBe(false);
    expect(second.record.stages.map((s) => s.name)).toEqual([...R1_STAGES]);
    // Stage 1 was not run again: its record is the first run's.
    expect(second.record.stages[0]).toEqual(first.record.stages[0]);
    expect(lines.some((l) => l.startsWith('stage 1-sft:') && /demonstrations/.test(l))).toBe(false);
    // Stage 2 resumed at step 1: its steps are 1 and 2, each once.
    expect(lines.some((l) => /stage 2-grpo: resuming .* at step 1/.test(l))).toBe(true);
    const steps = readFileSync(join(out, '2-grpo', 'metrics.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { step: number }).step);
    expect(steps).toEqual([1, 2]);
    expect(second.record.stages[1]!.detail.steps).toBe(2);
    // The wall time of stage 2 counts both attempts.
    expect(second.record.stages[1]!.seconds).toBeGreaterThan(first.record.partial['2-grpo']!);
    expect(second.record.partial).toEqual({});
    // A finished pipeline run again does nothing but report.
    const third = await runR1Pipeline({ config, out });
    expect(third.record.stages).toEqual(second.record.stages);
  }, 600_000);
});
