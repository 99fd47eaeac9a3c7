/**
 * One rollout of the model job's kind, timed, for bench/model-rollout.ts: the job's first training
 * tasks (sql, difficulty 1-3, seed 0) x a group, sampled at temperature 1 by a Hugging Face checkpoint's
 * ONNX export, with the code of the source tree ROOT (this checkout, or a worktree of another commit:
 * the modules are imported from ROOT, so the same script times both sides).
 *
 *   npx tsx bench/lib/model-rollout-once.ts ROOT MODEL_DIR TASKS GROUP
 *
 * Prints one JSON line: wall seconds, episodes, sampled tokens, successes, and the sampler's graph
 * time (prefill and decode calls and seconds, rows per decode step), the tool calls' seconds summed over
 * episodes, and the processes the sql server started.
 */
import cp from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, model, nTasks, nGroup] = process.argv.slice(2);
if (!root || !model) throw new Error('usage: model-rollout-once.ts ROOT MODEL_DIR TASKS GROUP');

// The sql server's query processes, counted as they are forked (before its module binds `fork`).
let forks = 0;
const fork = cp.fork;
(cp as { fork: typeof cp.fork }).fork = ((...a: Parameters<typeof cp.fork>) => {
  forks++;
  return fork(...a);
}) as typeof cp.fork;
syncBuiltinESMExports();

const at = (p: string) => pathToFileURL(join(resolve(root), p)).href;
const { OnnxPolicy } = (await import(at('src/agents/index.ts'))) as typeof import('../../src/agents/index.ts');
const { Environment, rollout } = (await import(at('src/env/index.ts'))) as typeof import('../../src/env/index.ts');
const { jobTasks } = (await import(at('src/trainers/index.ts'))) as typeof import('../../src/trainers/index.ts');
const { MODEL_JOB } = (await import(at('src/cli/model-job.ts'))) as typeof import('../../src/cli/model-job.ts');

const config = { ...MODEL_JOB, model: resolve(model), seed: 0, reworded: false };
const tasks = jobTasks(config as never).train.slice(0, Number(nTasks ?? 8));
const policy = await OnnxPolicy.load(resolve(model), { seed: 7, maxNewTokens: 160, temperature: 1, threads: 2, chatTemplate: { toolFormat: 'auto' } });
const env = new Environment({ reward: 'art' });
const t0 = performance.now();
const r = await rollout(env, policy, tasks, { group: Number(nGroup ?? 8), concurrency: 64, iteration: 'bench' });
const wall = (performance.now() - t0) / 1000;
const tm = policy.model.timing;
console.log(
  JSON.stringify({
    wall,
    episodes: r.trajectories.length,
    sampled: r.trajectories.reduce((s, t) => s + t.turns.reduce((a, x) => a + (x.tokens?.length ?? 0), 0), 0),
    success: r.trajectories.filter((t) => t.success).length,
    prefill_calls: tm.prefill.calls,
    prefill_seconds: tm.prefill.seconds,
    decode_calls: tm.decode.calls,
    decode_seconds: tm.decode.seconds,
    decode_rows_mean: tm.decode.rows / Math.max(1, tm.decode.calls),
    tool_seconds: r.trajectories.reduce((s, t) => s + t.timings.tool_ms, 0) / 1000,
    sql_processes: forks,
  }),
);
await env.close();
await policy.close();
