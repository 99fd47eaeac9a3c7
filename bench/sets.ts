import { MAIN_JOB } from '../src/cli/train.ts';
import type { TrainConfigInput } from '../src/trainers/index.ts';

/**
 * The benches' `--set field=value` options: training-config fields applied to every run of a bench.
 * Values: true/false, numbers, else strings.
 */
export function parseSets(sets: string[]): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  for (const kv of sets) {
    const i = kv.indexOf('=');
    if (i < 1) throw new Error(`--set ${kv}: expected field=value`);
    const v = kv.slice(i + 1);
    extra[kv.slice(0, i)] = v === 'true' ? true : v === 'false' ? false : Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return extra;
}

/**
 * A bench's training config: the main job's (src/cli/train.ts MAIN_JOB) with the bench's steps,
 * tasks per step, group, seed and threads, no periodic evaluation (the bench evaluates itself; the
 * run's own evaluations cut to 5 tasks), then `over`, then the `--set` fields.
 */
export function benchConfig(
  values: { steps?: string; tasks?: string; group?: string; seed?: string; threads?: string; set?: string[] },
  over: Partial<TrainConfigInput> = {},
): Partial<TrainConfigInput> {
  return {
    ...MAIN_JOB,
    steps: Number(values.steps),
    tasks_per_step: Number(values.tasks),
    group: Number(values.group),
    eval_every: 0,
    eval_limit: 5,
    eval_samples: 1,
    seed: Number(values.seed),
    ...(values.threads ? { threads: Number(values.threads) } : {}),
    ...over,
    ...parseSets(values.set ?? []),
  };
}
