/**
 * BFCL tasks as task files (`mcp-gym tasks export`, read back by loadTasks and run by `mcp-gym eval
 * --tasks`), a task file naming an unknown BFCL category refused with its file, line and field; and
 * parity in small: the outputs mcp-gym writes in BFCL's result-file format (writeBfclResultDir, what
 * `eval --bfcl-results` writes), passing and failing ones of a single-turn and a multi-turn
 * category, given to BFCL's own `evaluate` (unmodified), which agrees with mcp-gym on every entry.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { writeBfclResultDir } from '../../src/bench/bfcl.ts';
import {
  BFCL_MODEL_NAME,
  bfclEntries,
  bfclGrader,
  bfclTask,
  Environment,
  loadTasks,
  rollout,
  TaskFileError,
  type Observation,
  type Policy,
  type PolicyAction,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { runCli } from '../helpers.ts';
import { bfclCheck, bfclErrorType, madeInUserTurn, PlantedPolicy, runBfclPython } from './helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'bfcl-files-'));

const env = new Environment({ reward: 'verifier' });
afterAll(async () => {
  await env.close();
  bfclGrader().close();
});

const firstCallChanged = (a: PolicyAction): PolicyAction => {
  if (!a.toolCalls) return a;
  const [c, ...rest] = a.toolCalls;
  const args = { ...(c!.arguments as Record<string, unknown>) };
  const key = Object.keys(args).find((k) => typeof args[k] === 'number' || typeof args[k] === 'string')!;
  args[key] = typeof args[key] === 'number' ? (args[key] as number) + 7 : `${String(args[key])} (changed)`;
  return { ...a, toolCalls: [{ ...c!, arguments: args }, ...rest] };
};
const swapFirstTwo =
  (calls: { name: string; arguments: Record<string, unknown> }[]) =>
  (a: PolicyAction, obs: Observation): PolicyAction => {
    const made = madeInUserTurn(obs);
    if ((obs.userTurn ?? 0) !== 0 || made > 1) return a;
    const c = calls[1 - made]!;
    return { content: '', toolCalls: [{ name: c.name, arguments: c.arguments }] };
  };
const mt = (id: string) => bfclEntries('multi_turn_base').find((e) => e.id === id)!;

/** Per entry: the policy that answers it (the expert, or a failure planted into its actions). */
const plan: [category: string, id: string, policy: Policy][] = [
  ['simple_python', 'simple_python_0', new ExpertPolicy()],
  ['simple_python', 'simple_python_1', new PlantedPolicy('wrong-value', firstCallChanged)],
  [
    'simple_python',
    'simple_python_2',
    new PlantedPolicy('unknown-function', (a) => (a.toolCalls ? { ...a, toolCalls: [{ name: 'no_such_function', arguments: {} }] } : a)),
  ],
  [
    'simple_python',
    'simple_python_3',
    new PlantedPolicy('unparsable', (a) => (a.toolCalls ? { content: '', toolCalls: [{ name: a.toolCalls[0]!.name, arguments: '{"x": ' }] } : a)),
  ],
  ['simple_python', 'simple_python_4', new PlantedPolicy('no-call', () => ({ content: 'I would rather not.' }))],
  ['simple_python', 'simple_python_5', new ExpertPolicy()],
  ['multi_turn_base', 'multi_turn_base_0', new ExpertPolicy()],
  ['multi_turn_base', 'multi_turn_base_5', new PlantedPolicy('swap', swapFirstTwo(mt('multi_turn_base_5').expert[0]!))],
  // Never answers: BFCL's 20 steps of the first user turn run out, and the entry is force-terminated.
  ['multi_turn_base', 'multi_turn_base_2', new PlantedPolicy('never-answers', () => ({ content: '', toolCalls: [{ name: 'pwd', arguments: {} }] }))],
  ['multi_turn_base', 'multi_turn_base_7', new PlantedPolicy('answers-only', () => ({ content: 'Done.' }))],
  ['multi_turn_base', 'multi_turn_base_10', new ExpertPolicy()],
];
const byId = new Map(plan.map(([, id, p]) => [id, p]));
const dispatch: Policy = { id: 'mixed', act: (obs) => byId.get(obs.task.id)!.act(obs) };
const tasks = plan.map(([c, id]) => bfclTask(bfclEntries(c).find((e) => e.id === id)!));
const categories = ['simple_python', 'multi_turn_base'];

let run: Promise<{
  trajectories: Map<string, Trajectory>;
  scored: Record<string, { accuracy: number; total_count: number; failed: string[] }>;
  files: string[];
}>;
const results = join(dir, 'bfcl-results');
const scores = join(dir, 'bfcl-score');
function parity() {
  run ??= (async () => {
    const { trajectories } = await rollout(env, dispatch, tasks, { concurrency: 6 });
    const files = writeBfclResultDir(results, tasks, trajectories);
    const out = await runBfclPython(['-m', 'mcp_gym_bfcl', 'evaluate', '--result-dir', results, '--score-dir', scores, '--category', ...categories]);
    return { trajectories: new Map(trajectories.map((t) => [t.task_id, t])), scored: JSON.parse(out.trim().split('\n').pop()!), files };
  })();
  return run;
}
// Started at once, so that it overlaps the CLI runs of the task-file tests (awaited by the parity tests).
beforeAll(() => void parity().catch(() => {}));

describe('BFCL task files', () => {
  const file = join(dir, 't.jsonl');
  const sample = generateSuite('bfcl:live_simple', { eval: 3, train: 0 });

  it('tasks export writes a category sample as tasks whose server is bfcl:<category>/<id>, and loadTasks reads them back', async () => {
    const r = await runCli(['tasks', 'export', '--suite', 'bfcl:live_simple', '--eval-tasks', '3', '--split', 'eval', '--out', file]);
    expect(r.code, r.stderr).toBe(0);
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(3);
    const raw = lines.map((l) => JSON.parse(l) as { id: string; servers: Record<string, string> });
    const all = bfclEntries('live_simple');
    expect(raw.map((t) => t.id)).toEqual([0, 1, 2].map((i) => all[Math.floor((i * all.length) / 3)]!.id));
    for (const t of raw) expect(t.servers).toEqual({ bfcl: `bfcl:live_simple/${t.id}` });
    const loaded = loadTasks(file);
    expect(loaded).toEqual(sample);
    expect(loaded.map((t) => t.checks[0])).toEqual(raw.map((t) => ({ kind: 'bfcl', category: 'live_simple', entry: t.id, weight: 1 })));
  });

  it('eval --tasks runs the file with the expert, which passes every task by BFCL', async () => {
    const out = join(dir, 'eval');
    const r = await runCli(['eval', '--tasks', file, '-k', '1', '--policy', 'expert', '--out', out, '--json', '--concurrency', '3']);
    expect(r.code, r.stderr.slice(-2000)).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
      episodes: number;
      pass_at_1: { mean: number };
      failed_episodes: number;
      bfcl: { categories: { category: string; entries: number; bfcl_accuracy: number }[] };
    };
    expect(report.episodes).toBe(3);
    expect(report.failed_episodes).toBe(0);
    expect(report.pass_at_1.mean).toBe(1);
    expect(report.bfcl.categories).toEqual([expect.objectContaining({ category: 'live_simple', entries: 3, bfcl_accuracy: 1 })]);
  }, 120_000);

  it('refuses a task whose bfcl check names an unknown category, naming the file, line and field', () => {
    const [first] = readFileSync(file, 'utf8').trim().split('\n');
    const bad = JSON.parse(first!) as { id: string; checks: { category: string }[] };
    bad.id = 'bad-category';
    bad.checks[0]!.category = 'nope';
    const badFile = join(dir, 'bad.jsonl');
    writeFileSync(badFile, `${first}\n${JSON.stringify(bad)}\n`);
    let err: unknown;
    try {
      loadTasks(badFile);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskFileError);
    const e = err as TaskFileError;
    expect({ file: e.file, line: e.line, field: e.field }).toEqual({ file: badFile, line: 2, field: 'checks[0].category' });
    expect(e.message).toContain(`${badFile}:2: checks[0].category:`);
    expect(e.reason).toMatch(/unknown BFCL category 'nope'/);
  });
});

describe("parity with BFCL's own evaluate, in small", () => {
  it("BFCL's evaluate agrees with mcp-gym's verdict on every entry, passing and failing, of a single-turn and a multi-turn category", async () => {
    const { trajectories, scored, files } = await parity();
    expect(files.sort()).toEqual(
      [
        join(results, BFCL_MODEL_NAME, 'multi_turn', 'BFCL_v4_multi_turn_base_result.json'),
        join(results, BFCL_MODEL_NAME, 'non_live', 'BFCL_v4_simple_python_result.json'),
      ].sort(),
    );
    expect(trajectories.size).toBe(plan.length);
    const ours = Object.fromEntries(plan.map(([, id]) => [id, bfclCheck(trajectories.get(id)!).score === 1]));
    const theirs = Object.fromEntries(plan.map(([c, id]) => [id, !scored[c]!.failed.includes(id)]));
    expect(theirs).toEqual(ours);
    // The mix: the expert passes, every planted failure fails.
    expect(ours).toEqual(Object.fromEntries(plan.map(([, id, p]) => [id, p instanceof ExpertPolicy])));
    for (const c of categories) {
      const ids = plan.filter(([cat]) => cat === c).map(([, id]) => id);
      expect(scored[c]!.total_count, c).toBe(ids.length);
      expect(scored[c]!.accuracy, c).toBeCloseTo(ids.filter((id) => ours[id]).length / ids.length, 10);
    }
  }, 120_000);

  it("mcp-gym's failing verdicts are BFCL's, with the error types BFCL's score files give", async () => {
    const { trajectories } = await parity();
    const theirTypes: Record<string, string> = {};
    for (const [c, group] of [
      ['simple_python', 'non_live'],
      ['multi_turn_base', 'multi_turn'],
    ] as const) {
      const rows = readFileSync(join(scores, BFCL_MODEL_NAME, group, `BFCL_v4_${c}_score.json`), 'utf8')
        .trim()
        .split('\n')
        .slice(1)
        .map((l) => JSON.parse(l) as { id: string; error_type?: string; error?: { error_type?: string } });
      for (const r of rows) theirTypes[r.id] = r.error_type ?? r.error?.error_type ?? '?';
    }
    const failed = plan.filter(([, , p]) => !(p instanceof ExpertPolicy)).map(([, id]) => id);
    const ourTypes = Object.fromEntries(
      failed.map((id) => {
        const t = trajectories.get(id)!;
        // A planted mistake is the agent's: BFCL's verdict scores it, the episode itself does not fail.
        return [id, t.finish === 'error' ? `episode error: ${t.error}` : (bfclErrorType(bfclCheck(t)) ?? bfclCheck(t).detail)];
      }),
    );
    expect(ourTypes).toEqual(Object.fromEntries(failed.map((id) => [id, theirTypes[id]])));
    expect(theirTypes.multi_turn_base_2).toBe('multi_turn:force_terminated');
    expect(theirTypes.simple_python_3).toBe('ast_decoder:decoder_failed');
  });
});
