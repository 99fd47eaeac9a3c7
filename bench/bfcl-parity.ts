/**
 * Are mcp-gym's BFCL scores BFCL's? A policy runs over a sample of every category through the CLI
 * (`mcp-gym eval --suite bfcl --eval-tasks N -k 1 --bfcl-results DIR`), as a user runs it; each
 * entry's verdict as mcp-gym gave it (the task's `bfcl` check) is compared with the verdict of
 * BFCL's own evaluation command (`bfcl_eval evaluate`, unmodified) on the result files mcp-gym
 * wrote. Several policies, so that both passing and failing outputs are compared: the expert
 * (BFCL's ground truth replayed), the random policy, and a model if --model is given.
 *
 *   npx tsx bench/bfcl-parity.ts [--per-category 8] [--policies expert,random:3] [--model smollm2-135m] [--categories bfcl]
 *
 * Prints per policy and category {policy, category, entries, ours, bfcl, equal}; last line JSON
 * {"rows": [...], "entries", "equal_entries", "all_equal"}.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { bfclCategories, bfclCategoryOf } from '../src/env/bfcl/data.ts';
import { bfclEnv, bfclPython } from '../src/env/bfcl/python.ts';
import { PACKAGE_ROOT } from '../src/paths.ts';

const { values } = parseArgs({
  options: {
    'per-category': { type: 'string', default: '8' },
    policies: { type: 'string', default: 'expert,random:3' },
    model: { type: 'string' },
    categories: { type: 'string', default: 'bfcl' },
    concurrency: { type: 'string', default: '4' },
  },
});
const CLI = join(PACKAGE_ROOT, 'bin', 'mcp-gym.js');
const cats = bfclCategories(values.categories!);
const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-bfcl-parity-'));
const runs: { name: string; args: string[] }[] = values.policies!.split(',').map((p) => ({ name: p, args: ['--policy', p] }));
if (values.model) runs.push({ name: `model:${values.model}`, args: ['--model', values.model] });

interface Row {
  policy: string;
  category: string;
  entries: number;
  ours: number;
  bfcl: number;
  equal: boolean;
  differing: string[];
}
const rows: Row[] = [];
for (const [i, run] of runs.entries()) {
  const out = join(dir, `run-${i}`);
  const results = join(out, 'bfcl-results');
  const t0 = Date.now();
  const suite = values.categories === 'bfcl' ? 'bfcl' : `bfcl:${cats.join('+')}`;
  const ev = spawnSync(
    process.execPath,
    [
      CLI,
      'eval',
      '--suite',
      suite,
      '--eval-tasks',
      values['per-category']!,
      '-k',
      '1',
      ...run.args,
      '--out',
      out,
      '--bfcl-results',
      results,
      '--concurrency',
      values.concurrency!,
      '--json',
    ],
    { encoding: 'utf8', maxBuffer: 1 << 28 },
  );
  if (ev.status !== 0 && ev.status !== 4) throw new Error(`eval (${run.name}) exited ${ev.status}: ${ev.stderr.slice(-2000)}`);
  const trajectories = readFileSync(join(out, 'trajectories.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { task_id: string; sample: number; success: boolean; checks: { kind: string; score: number }[] });
  const ours = new Map(trajectories.filter((t) => t.sample === 0).map((t) => [t.task_id, t.checks.find((c) => c.kind === 'bfcl')?.score === 1]));
  const bf = spawnSync(
    bfclPython(),
    ['-m', 'mcp_gym_bfcl', 'evaluate', '--result-dir', results, '--score-dir', join(out, 'bfcl-score'), '--category', ...cats],
    {
      env: bfclEnv(),
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    },
  );
  if (bf.status !== 0) throw new Error(`bfcl_eval evaluate failed: ${bf.stderr.slice(-2000)}`);
  const scored = JSON.parse(bf.stdout.trim().split('\n').pop()!) as Record<string, { accuracy: number; total_count: number; failed: string[] }>;
  process.stderr.write(`${run.name}: ${trajectories.length} episodes in ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  for (const category of cats) {
    const ids = [...ours.keys()].filter((id) => bfclCategoryOf(id) === category);
    const s = scored[category];
    const failed = new Set(s?.failed ?? []);
    const differing = ids.filter((id) => ours.get(id) !== !failed.has(id));
    const passOurs = ids.filter((id) => ours.get(id)).length;
    rows.push({
      policy: run.name,
      category,
      entries: ids.length,
      ours: ids.length ? passOurs / ids.length : 0,
      bfcl: s?.accuracy ?? NaN,
      equal: differing.length === 0 && s?.total_count === ids.length,
      differing,
    });
  }
}
const pct = (x: number) => (Number.isNaN(x) ? 'n/a' : `${(100 * x).toFixed(1)}%`);
console.log(['policy', 'category', 'entries', 'ours', 'bfcl', 'equal'].join('\t'));
for (const r of rows)
  console.log([r.policy, r.category, r.entries, pct(r.ours), pct(r.bfcl), r.equal ? 'yes' : `NO (${r.differing.slice(0, 5).join(', ')})`].join('\t'));
const entries = rows.reduce((s, r) => s + r.entries, 0);
const equalEntries = rows.reduce((s, r) => s + r.entries - r.differing.length, 0);
console.log(
  JSON.stringify({
    rows: rows.map(({ differing, ...r }) => ({ ...r, differing: differing.length })),
    entries,
    equal_entries: equalEntries,
    all_equal: rows.every((r) => r.equal),
  }),
);
