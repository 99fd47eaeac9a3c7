/**
 * Are episodes through `mcp-gym serve-policy` the in-process ones? Through the CLI, as a user runs
 * it: the same tasks, seed and temperature, once with `--policy onnx:<model>` (in process) and once
 * with `--policy openai:<name> --base-url <serve-policy>`; an episode is identical when its turns'
 * text, tool calls and answer are equal. Greedy (temperature 0) and sampled (temperature 1).
 *
 *   npx tsx bench/serve-identity.ts [--model models/calc-tiny] [--limit 160] [--group 4] [--seed 5]
 *
 * Last line: {"greedy": {"identical", "episodes", "rate"}, "sampled": {...}}
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { BUNDLED_MODEL_DIR, PACKAGE_ROOT } from '../src/paths.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: BUNDLED_MODEL_DIR },
    limit: { type: 'string', default: '160' },
    group: { type: 'string', default: '4' },
    seed: { type: 'string', default: '5' },
  },
});
const CLI = join(PACKAGE_ROOT, 'bin', 'mcp-gym.js');
const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-serve-identity-'));

const server = spawn(process.execPath, [CLI, 'serve-policy', '--port', '0', '--model', values.model!], { stdio: ['ignore', 'ignore', 'pipe'] });
let modelName = '';
const url = await new Promise<string>((resolve, reject) => {
  const lines = createInterface({ input: server.stderr });
  lines.on('line', (l) => {
    const m = /model '([^']+)'.* at (http:\/\/\S+)/.exec(l);
    if (m) {
      modelName = m[1]!;
      resolve(m[2]!);
    }
  });
  server.once('exit', (c) => reject(new Error(`serve-policy exited with ${c}`)));
});

type Episode = {
  task_id: string;
  group_id: string;
  id: string;
  answer: string | null;
  turns: { action: { content: string; tool_calls: { name: string; arguments: unknown }[] } }[];
};
const key = (t: Episode) => `${t.task_id}#${t.id.split(':').slice(-2, -1)[0]}`; // task and sample index
const shape = (t: Episode) => JSON.stringify([t.turns.map((u) => [u.action.content, u.action.tool_calls.map((c) => [c.name, c.arguments])]), t.answer]);

function rollout(name: string, policy: string[], temperature: string): Map<string, string> {
  const out = join(dir, name);
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      'rollout',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--limit',
      values.limit!,
      '--group',
      values.group!,
      '--seed',
      values.seed!,
      '--eval-tasks',
      '200',
      '--temperature',
      temperature,
      '--out',
      out,
      ...policy,
    ],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`${name}: exit ${r.status}: ${r.stderr.slice(-800)}`);
  const eps = readFileSync(join(out, 'trajectories.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Episode);
  return new Map(eps.map((t) => [key(t), shape(t)]));
}

const result: Record<string, { identical: number; episodes: number; rate: number }> = {};
try {
  for (const [label, temperature] of [
    ['greedy', '0'],
    ['sampled', '1'],
  ] as const) {
    const a = rollout(`${label}-in-process`, ['--policy', `onnx:${values.model}`], temperature);
    const b = rollout(`${label}-served`, ['--policy', `openai:${modelName}`, '--base-url', url], temperature);
    let same = 0;
    for (const [k, v] of a) if (b.get(k) === v) same++;
    result[label] = { identical: same, episodes: a.size, rate: a.size ? same / a.size : 0 };
    console.log(
      `${label} (temperature ${temperature}): ${same} of ${a.size} episodes identical in process and through serve-policy (${((100 * same) / Math.max(1, a.size)).toFixed(1)}%)`,
    );
  }
} finally {
  server.kill();
}
console.log(JSON.stringify(result));
