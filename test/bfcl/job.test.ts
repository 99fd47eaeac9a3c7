/**
 * The real-model job on BFCL (src/trainers/bfcl-job.ts, `mcp-gym start --suite bfcl`): its held-out set
 * (30 entries of each of five non-live categories, eval copies), its training pool (live categories
 * only, short entries, the parallel ones repeated so that every kind of answer is in it), no entry on
 * both sides; and the command line's recipe for it. The job itself runs for tens of minutes on the
 * real model: docs/bfcl.md gives its figures.
 */
import { describe, expect, it } from 'vitest';
import { BFCL_JOB, modelJobCommand } from '../../src/cli/model-job.ts';
import { BFCL_JOB_HELD, BFCL_JOB_MAX_CHARS, BFCL_JOB_TRAIN, bfclJobTasks } from '../../src/trainers/bfcl-job.ts';
import { bfclEntries } from '../../src/env/index.ts';

const cat = (t: { params?: Record<string, unknown> }) => String(t.params?.bfcl_category);

describe('the job on BFCL', () => {
  const { train, held, multiTurn } = bfclJobTasks(150);

  it('holds out 30 entries of each of five non-live categories, as eval copies', () => {
    expect(held).toHaveLength(150);
    for (const c of BFCL_JOB_HELD) expect(held.filter((t) => cat(t) === c)).toHaveLength(30);
    expect(held.every((t) => t.split === 'eval')).toBe(true);
    expect(new Set(multiTurn.map(cat))).toEqual(new Set(['multi_turn_base', 'multi_turn_miss_func', 'multi_turn_miss_param', 'multi_turn_long_context']));
  });

  it('trains on the live categories only, short entries, the parallel ones repeated', () => {
    expect(train.every((t) => t.split === 'train' && cat(t).startsWith('live_'))).toBe(true);
    const heldIds = new Set(held.map((t) => t.id));
    expect(train.some((t) => heldIds.has(t.id))).toBe(false);
    for (const [c, { cap, repeat }] of Object.entries(BFCL_JOB_TRAIN)) {
      const short = bfclEntries(c).filter(
        (e) => JSON.stringify(e.tools).length + (e.question[0] ?? []).reduce((n, m) => n + m.content.length, 0) < BFCL_JOB_MAX_CHARS,
      );
      const n = Math.min(short.length, cap ?? Infinity) * (repeat ?? 1);
      expect(
        train.filter((t) => cat(t) === c),
        c,
      ).toHaveLength(n);
    }
    const parallel = train.filter((t) => cat(t) === 'live_parallel' || cat(t) === 'live_parallel_multiple');
    // several calls in one turn: a tenth of the pool or more (4% without the repeats)
    expect(parallel.length / train.length).toBeGreaterThan(0.1);
    expect(new Set(parallel.map((t) => t.id)).size * 4).toBe(parallel.length);
  });

  it('the command line refuses another BFCL suite and bad SFT and evaluation flags, naming them', async () => {
    await expect(modelJobCommand(['--model', 'smollm2-135m', '--suite', 'bfcl:live'])).rejects.toThrow(/--suite: the job on BFCL is --suite bfcl/);
    await expect(modelJobCommand(['--model', 'smollm2-135m', '--suite', 'bfcl', '--sft-prompt-grad', 'maybe'])).rejects.toThrow(
      /--sft-prompt-grad: on or off, got 'maybe'/,
    );
    await expect(modelJobCommand(['--model', 'smollm2-135m', '--suite', 'bfcl', '--sft-train-layers', 'x'])).rejects.toThrow(/--sft-train-layers/);
    await expect(modelJobCommand(['--model', 'smollm2-135m', '--suite', 'bfcl', '--eval-temperature', '-1'])).rejects.toThrow(/--eval-temperature/);
    await expect(modelJobCommand(['--model', 'smollm2-135m', '--temperature', '0'])).rejects.toThrow(/--temperature/);
    expect(BFCL_JOB.sft.prompt_grad).toBe(true);
    // BFCL generates at temperature 0.001: the job's evaluations are greedy
    expect(BFCL_JOB.eval_temperature).toBe(0);
  });
});
