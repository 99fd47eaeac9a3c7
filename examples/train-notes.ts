/**
 * A worked example, through mcp-gym's public API only (`import ... from 'mcp-gym'`): a user's own
 * MCP server (examples/notes-server.ts), tasks against it checked by the server's state, a custom
 * reward, an evaluation of two policies, and a short training run of the embedded model.
 *
 *   npm run build && npx tsx examples/train-notes.ts          (STEPS=N for a longer run)
 *
 * The embedded model (models/calc-tiny) was trained on calculator tasks, so it starts near 0% on
 * notes: the run shows the plumbing (rollouts against your server, your reward, the learner's
 * steps, a report), not a jump in success. See docs/architecture.md, "The public API".
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUNDLED_MODEL_DIR, Environment, ExpertPolicy, OnnxPolicy, registerReward, rollout, summarize, train, type RewardFn } from 'mcp-gym';
import { notesTasks } from './notes-tasks.ts';

// 1-2. The server (examples/notes-server.ts, started afresh for every episode) and tasks against
// it, checked by the server's state after the episode and by the answer (examples/notes-tasks.ts).
const tasks = notesTasks(8, 4);
const trainTasks = tasks.filter((t) => t.split === 'train');
const evalTasks = tasks.filter((t) => t.split === 'eval');

// 3. A reward of our own: the checks' score, a bonus for solving, a small cost per wasted call.
const notesReward: RewardFn = (e) => {
  const calls = e.turns.flatMap((t) => t.tool_results);
  const wasted = calls.filter((c) => c.isError || c.tool !== 'add_note').length;
  const weight = e.checks.reduce((s, c) => s + c.weight, 0);
  const checks = weight ? e.checks.reduce((s, c) => s + c.score * c.weight, 0) / weight : 0;
  return { reward: checks + (e.solved ? 0.5 : 0) - 0.05 * wasted, parts: { checks, solved: e.solved ? 1 : 0, wasted } };
};
registerReward('notes', notesReward);

// 4. Evaluate: the expert (replays each task's solution) and the embedded model, 2 samples a task.
const env = new Environment({ reward: 'notes' });
const expert = await rollout(env, new ExpertPolicy(), evalTasks, { group: 2 });
const model = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { maxNewTokens: 64 });
const before = await rollout(env, model, evalTasks, { group: 2 });
await model.close();
await env.close();
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
console.log(
  `expert: success ${pct(summarize(expert.trajectories, expert.seconds).success_rate)}; embedded model: ${pct(summarize(before.trajectories, before.seconds).success_rate)}`,
);

// 5. Train the embedded model on our tasks with our reward (the art preset's loss and settings).
const runDir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-notes-')), 'run');
const result = await train({
  config: {
    preset: 'art',
    steps: Number(process.env.STEPS ?? 2),
    tasks_per_step: 4,
    group: 4,
    eval_samples: 2,
    eval_every: 0,
    max_new_tokens: 64,
    concurrency: 16,
  },
  reward: 'notes',
  trainTasks,
  evalTasks,
  runDir,
  onLog: (line) => console.log(line),
  onStep: (m) =>
    console.log(`step ${m.step}: reward ${Number(m.reward_mean).toFixed(3)}, success ${pct(Number(m.success_rate))}, groups kept ${m.groups_kept}`),
});
console.log(JSON.stringify({ before: result.before.success, after: result.after?.success ?? null, steps: result.steps, report: result.report }));
