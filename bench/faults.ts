/**
 * Robustness training with fault injection (src/env/faults.ts): two policies trained from the
 * bundled cold start (models/calc-tiny) with the main job's recipe (src/cli/train.ts MAIN_JOB),
 * the same seed, steps, tasks per step and group, one with `faults` on in its training rollouts
 * (the subject) and one without (the baseline), one after the other in one process. Then the
 * cold start and both trained models are evaluated on the same held-out tasks, each twice: on the
 * true servers and with the faults injected (the same seed, so the same faults hit the same
 * episodes' calls); for each, held-out success with a 95% interval over tasks (lib/evaluator.ts), and the retention
 * (success with faults / success without).
 *
 *   npx tsx bench/faults.ts [--steps 15] [--tasks 12] [--group 8] [--seed 0] [--eval-limit 60]
 *                           [--eval-samples 2] [--faults SPEC] [--threads N] [--set field=value ...] [--keep]
 *
 * Default faults: timeout=0.1,error=0.1,malformed=0.05,slow=100ms@0.1,distractors=3. The config is the
 * main job's with eval_every 0 and the runs' own evaluations cut to 5 tasks (the bench evaluates
 * itself). Last line: one JSON object with every figure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxPolicy } from '../src/agents/index.ts';
import { Environment, faultCounts, formatFaults, parseFaults, rollout, type Task } from '../src/env/index.ts';
import { resolveConfig, train, trainingTasks } from '../src/trainers/index.ts';
import { summarizeEpisodes } from '../lib/index.ts';
import { benchConfig, parseSets } from './sets.ts';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '15' },
    tasks: { type: 'string', default: '12' },
    group: { type: 'string', default: '8' },
    seed: { type: 'string', default: '0' },
    'eval-limit': { type: 'string', default: '60' },
    'eval-samples': { type: 'string', default: '2' },
    faults: { type: 'string', default: 'timeout=0.1,error=0.1,malformed=0.05,slow=100ms@0.1,distractors=3' },
    threads: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
    keep: { type: 'boolean', default: false },
  },
});

const faults = formatFaults(parseFaults(values.faults!));
const extra = parseSets(values.set as string[]);
const base = benchConfig(values);
const cfg = resolveConfig(base);
const samples = Number(values['eval-samples']);
const evalTasks: Task[] = trainingTasks(resolveConfig({ ...base, eval_limit: 0 })).held.slice(0, Number(values['eval-limit']));

interface Figure {
  success: number;
  ci95: [number, number];
  episodes: number;
  injected?: Record<string, number>;
}
interface Row {
  policy: string;
  train_seconds: number | null;
  without: Figure;
  with: Figure;
  retention: number | null;
}

/** Held-out success of the model in `modelDir` (the run's sampling settings, a fixed seed), without and with the faults. */
async function heldOut(modelDir: string): Promise<{ without: Figure; with: Figure }> {
  const env = new Environment({ bundled: 'inprocess', reward: cfg.reward });
  const policy = await OnnxPolicy.load(modelDir, {
    temperature: cfg.temperature,
    topK: cfg.top_k,
    topP: cfg.top_p,
    maxNewTokens: cfg.max_new_tokens,
    seed: 4242,
  });
  try {
    const figure = async (e: Environment): Promise<Figure> => {
      const r = await rollout(e, policy, evalTasks, { group: samples, concurrency: cfg.concurrency, iteration: 'bench' });
      const est = summarizeEpisodes(r.trajectories, samples);
      return { success: est.success, ci95: est.ci95, episodes: est.episodes, injected: faultCounts(r.trajectories) };
    };
    const without = await figure(env);
    const withFaults = await figure(env.withFaults({ spec: faults, seed: cfg.seed }));
    return { without, with: withFaults };
  } finally {
    await policy.close();
    await env.close();
  }
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const cell = (f: Figure) => `${pct(f.success).padStart(6)} [${pct(f.ci95[0])}, ${pct(f.ci95[1])}]`.padEnd(24);
const row = (policy: string, train_seconds: number | null, h: { without: Figure; with: Figure }): Row => ({
  policy,
  train_seconds,
  ...h,
  retention: h.without.success > 0 ? h.with.success / h.without.success : null,
});

console.log(
  `fault-injection bench: ${base.preset} on ${base.suite} (difficulty <= ${base.max_difficulty}), ${base.steps} steps of ${base.tasks_per_step} tasks x ${base.group}, seed ${base.seed}; faults ${faults}; held-out: ${evalTasks.length} tasks x ${samples} samples${Object.keys(extra).length ? `; ${JSON.stringify(extra)}` : ''}`,
);
const t0 = performance.now();
const root = mkdtempSync(join(tmpdir(), 'mcp-gym-bench-faults-'));
const rows: Row[] = [row('cold start', null, await heldOut(String(base.model)))];
for (const mode of ['with faults', 'without faults'] as const) {
  const runDir = join(root, mode === 'with faults' ? 'faults' : 'clean');
  const r = await train({ config: { ...base, faults: mode === 'with faults' ? faults : '' }, runDir });
  console.log(`trained ${mode}: ${r.train_seconds.toFixed(0)} s`);
  rows.push(row(`trained ${mode}`, r.train_seconds, await heldOut(join(runDir, 'model'))));
}
console.log('');
console.log(`held-out success (${evalTasks.length} tasks x ${samples} samples; 95% intervals over tasks); retention = with faults / without:`);
console.log(`${'policy'.padEnd(22)} | ${'without faults'.padEnd(24)} | ${'with faults'.padEnd(24)} | retention`);
for (const r of rows) console.log(`${r.policy.padEnd(22)} | ${cell(r.without)} | ${cell(r.with)} | ${r.retention === null ? '-' : r.retention.toFixed(3)}`);
const injected = rows[0]!.with.injected!;
console.log(
  `faults injected into the cold start's held-out calls: ${
    Object.entries(injected)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none'
  }`,
);
const [, subject, baseline] = rows as [Row, Row, Row];
console.log(
  `with faults, trained with faults - trained without: ${((subject.with.success - baseline.with.success) * 100).toFixed(1)} points; without faults: ${((subject.without.success - baseline.without.success) * 100).toFixed(1)} points`,
);
console.log(`total ${((performance.now() - t0) / 1000).toFixed(0)} s`);
if (values.keep) console.log(`runs kept in ${root}`);
else rmSync(root, { recursive: true, force: true });
console.log(
  JSON.stringify({
    bench: 'faults',
    faults,
    config: { steps: base.steps, tasks_per_step: base.tasks_per_step, group: base.group, seed: base.seed },
    eval: { tasks: evalTasks.length, samples },
    rows,
  }),
);
