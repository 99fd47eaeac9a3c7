/**
 * Rollout throughput: the expert policy on the kv suite's eval tasks against the bundled kv
 * server made to sleep 20 ms per call, at concurrency 1 (the baseline) and 16, in one run.
 *
 *   npx tsx bench/rollout.ts [--group 4] [--delay-ms 20] [--concurrency 16] [--stdio]
 *
 * Last line: {"episodes_per_s_c1", "episodes_per_s_c16", "speedup", ...}
 */
import { parseArgs } from 'node:util';
import { ExpertPolicy } from '../src/agents/index.ts';
import { Environment, rollout } from '../src/env/index.ts';
import { generateSuite } from '../src/env/suites/index.ts';

const { values } = parseArgs({
  options: {
    group: { type: 'string', default: '4' },
    'delay-ms': { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '16' },
    stdio: { type: 'boolean', default: false },
  },
});
const delayMs = Number(values['delay-ms']);
const group = Number(values.group);
const C = Number(values.concurrency);
const tasks = generateSuite('kv').filter((t) => t.split === 'eval');

async function run(concurrency: number) {
  const env = new Environment({ serverOptions: { delayMs }, bundled: values.stdio ? 'stdio' : 'inprocess' });
  // Connect and list tools once before timing.
  await env.runEpisode(tasks[0]!, new ExpertPolicy());
  const r = await rollout(env, new ExpertPolicy(), tasks, { group, concurrency });
  await env.close();
  const ok = r.trajectories.filter((t) => t.success).length;
  if (ok !== r.trajectories.length) throw new Error(`${r.trajectories.length - ok} episodes failed`);
  const calls = r.trajectories.reduce((s, t) => s + t.metrics.tool_calls, 0);
  return { episodes: r.trajectories.length, seconds: r.seconds, eps: r.trajectories.length / r.seconds, calls };
}

console.log(
  `rollout throughput: expert on ${tasks.length} kv eval tasks x ${group}, kv server sleeping ${delayMs} ms per call (${values.stdio ? 'stdio' : 'in-process'})`,
);
const c1 = await run(1);
console.log(`concurrency 1  : ${c1.episodes} episodes in ${c1.seconds.toFixed(2)} s = ${c1.eps.toFixed(2)} episodes/s (baseline)`);
const cN = await run(C);
console.log(`concurrency ${String(C).padEnd(3)}: ${cN.episodes} episodes in ${cN.seconds.toFixed(2)} s = ${cN.eps.toFixed(2)} episodes/s`);
const speedup = cN.eps / c1.eps;
console.log(`speedup ${speedup.toFixed(2)}x (ideal ${C}x)`);
console.log(
  JSON.stringify({
    episodes_per_s_c1: +c1.eps.toFixed(3),
    [`episodes_per_s_c${C}`]: +cN.eps.toFixed(3),
    speedup: +speedup.toFixed(3),
    episodes: c1.episodes,
    delay_ms: delayMs,
  }),
);
