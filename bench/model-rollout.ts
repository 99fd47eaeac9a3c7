/**
 * The model job's rollouts, the sampler and tool servers of this checkout against those of another
 * commit (issue 49): the job's first 8 training tasks x 8 (sql, difficulty 1-3, seed 0), sampled at
 * temperature 1 by a SmolLM2 checkpoint's ONNX export, as one RL step's rollout runs them
 * (continuous batching, 64 episodes at once, 2 onnxruntime threads, the in-process sql server).
 *
 *   npx tsx bench/model-rollout.ts --model runs/<job>/sft [--baseline 9ff4408] [--rounds 2] [--tasks 8] [--group 8]
 *
 * The baseline is the code of --baseline (default: the commit before the rollout changes of issue 49),
 * checked out as a git worktree in .tmp/bench-rollout/<commit> (node_modules linked from this checkout);
 * each run is its own process, and the two sides take turns, the order flipping every round, so that
 * both meet the machine in the same minutes. Both sample the same draws: a side that samples other
 * tokens or solves other tasks is reported (the changes measured here change no number).
 *
 * Last line: {"baseline": {median figures}, "current": {...}, "speedup"} (speedup: baseline wall / current wall).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { median } from './lib/onnx-decode.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    baseline: { type: 'string', default: '9ff4408' },
    rounds: { type: 'string', default: '2' },
    tasks: { type: 'string', default: '8' },
    group: { type: 'string', default: '8' },
  },
});
if (!values.model) throw new Error('--model: a Hugging Face checkpoint directory with its ONNX export (e.g. runs/<job>/sft)');
const model = resolve(values.model);
if (!existsSync(join(model, 'onnx', 'config.json'))) throw new Error(`--model: ${model} has no ONNX export (onnx/config.json); any model job's sft/ has one`);
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds: a positive integer, got ${values.rounds}`);

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const git = (...args: string[]) => execFileSync('git', args, { cwd: repo, encoding: 'utf8' }).trim();
const commit = git('rev-parse', '--short', `${values.baseline}^{commit}`);
const base = join(repo, '.tmp', 'bench-rollout', commit);
if (!existsSync(join(base, 'package.json'))) {
  mkdirSync(dirname(base), { recursive: true });
  git('worktree', 'add', '--detach', '--force', base, commit);
}
if (!existsSync(join(base, 'node_modules'))) symlinkSync(join(repo, 'node_modules'), join(base, 'node_modules'), 'dir');

type Figures = Record<string, number>;
function once(root: string): Figures {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(repo, 'bench/lib/model-rollout-once.ts'), root, model, values.tasks!, values.group!], {
    cwd: repo,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`the rollout with the code of ${root} failed (${r.status ?? r.signal}): ${r.stderr.slice(-2000)}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Figures;
}

console.log(`the job's rollout: ${values.tasks} tasks x ${values.group} of ${model}; baseline ${commit} (${base}) against this checkout, ${rounds} rounds`);
const sides = { baseline: [] as Figures[], current: [] as Figures[] };
for (let round = 0; round < rounds; round++) {
  const order: (keyof typeof sides)[] = round % 2 === 0 ? ['baseline', 'current'] : ['current', 'baseline'];
  for (const side of order) {
    const f = once(side === 'baseline' ? base : repo);
    sides[side].push(f);
    console.log(
      `round ${round + 1} ${side.padEnd(8)} ${JSON.stringify(f, (_, v: unknown) => (typeof v === 'number' && !Number.isInteger(v) ? Math.round(v * 100) / 100 : v))}`,
    );
  }
}
const summary = (runs: Figures[]): Figures => Object.fromEntries(Object.keys(runs[0]!).map((k) => [k, median(runs.map((r) => r[k]!))]));
const b = summary(sides.baseline);
const c = summary(sides.current);
const same = sides.baseline.every((r, i) => r.sampled === sides.current[i]!.sampled && r.success === sides.current[i]!.success);
if (!same) console.log('note: the two sides sampled different tokens or solved different tasks (see the rounds above)');
console.log('');
console.log(`${'median'.padEnd(22)} ${'baseline'.padStart(10)} ${'current'.padStart(10)}`);
for (const k of Object.keys(c)) console.log(`${k.padEnd(22)} ${b[k]!.toFixed(2).padStart(10)} ${c[k]!.toFixed(2).padStart(10)}`);
const speedup = b.wall! / c.wall!;
console.log(`speedup (baseline wall / current wall): ${speedup.toFixed(2)}x`);
console.log(JSON.stringify({ model, baseline_commit: commit, rounds, same_draws: same, baseline: b, current: c, speedup }));
