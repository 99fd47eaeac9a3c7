/**
 * Exit codes that mean something (docs/exit-codes.md, "Exit codes"; lib/failures.ts), each through the real
 * CLI (bin/mcp-gym.js, the built dist/): 2 bad input, 3 a tool server that cannot start (its
 * command and the end of its stderr on ours), 4 every episode failed, 5 training without a
 * learning signal, 6 below --fail-under (with JUnit XML read back by Python's XML parser).
 * 130 (interrupted) is tested with real signals in test/trainers/loop.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateSuite } from '../../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';
import { ROOT, runCli } from '../helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-exit-'));
const calc = generateSuite('calculator', { train: 12, eval: 6 }).filter((t) => t.difficulty === 1);
const write = (name: string, tasks: unknown[]) => {
  const f = join(dir, name);
  writeFileSync(f, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
  return f;
};
// A server command that cannot start: it says why on stderr and exits 3.
const dead = write(
  'dead.jsonl',
  calc.map((t) => ({
    ...t,
    servers: { calculator: { transport: 'stdio', command: process.execPath, args: ['-e', 'console.error("boom: DATABASE_URL is not set"); process.exit(3)'] } },
  })),
);
// A server that starts, then dies on the call every episode makes (test/bench/fragile-server.ts's crashy with '').
const fragile = {
  transport: 'stdio',
  command: process.execPath,
  args: ['--import', 'tsx', join(ROOT, 'test', 'bench', 'fragile-server.ts')],
  cwd: ROOT,
  restart: true,
};
const crashing = write(
  'crashing.jsonl',
  [0, 1].map((i) => ({
    id: `crash-${i}`,
    split: 'eval',
    difficulty: 1,
    prompt: 'Echo nothing.',
    servers: { fragile },
    max_turns: 2,
    checks: [{ kind: 'answer', expect: { kind: 'equals', value: 'done' } }],
    solution: { calls: [{ server: 'fragile', tool: 'crashy', arguments: { text: '' } }], answer: 'done' },
  })),
);
const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

describe('exit codes', () => {
  it('3: a tool server that cannot start, with its command and the end of its stderr (train, rollout, eval)', async () => {
    const train = await runCli([
      'train',
      '--tasks',
      dead,
      '--steps',
      '2',
      '--tasks-per-step',
      '2',
      '--group',
      '2',
      '--run',
      join(dir, 'train-dead'),
      '--model',
      BUNDLED_MODEL_DIR,
    ]);
    expect(train.code, train.stderr).toBe(3);
    expect(train.stderr).toContain('the held-out evaluation before training: every one of the');
    expect(train.stderr).toContain('a tool server could not be started');
    expect(train.stderr).toContain('exited with code 3');
    expect(train.stderr).toContain('boom: DATABASE_URL is not set');
    expect(train.stderr).toContain(process.execPath); // the command
    const rollout = await runCli(['rollout', '--tasks', dead, '--out', join(dir, 'rollout-dead')]);
    expect(rollout.code, rollout.stderr).toBe(3);
    expect(rollout.stderr).toContain('boom: DATABASE_URL is not set');
    // The JUnit file is written before the exit: every task an error.
    const junit = join(dir, 'dead.xml');
    const ev = await runCli(['eval', '--tasks', dead, '-k', '1', '--out', join(dir, 'eval-dead'), '--junit', junit]);
    expect(ev.code, ev.stderr).toBe(3);
    const parsed = spawnSync(
      python,
      [
        '-c',
        'import sys,xml.etree.ElementTree as E; r=E.parse(sys.argv[1]).getroot(); print(r.get("tests"), r.get("errors"), len(r.iter("testcase").__next__().findall("error")))',
        junit,
      ],
      { encoding: 'utf8' },
    );
    expect(parsed.stdout.trim()).toBe(`${calc.filter((t) => t.split === 'eval').length} ${calc.filter((t) => t.split === 'eval').length} 1`);
  }, 120_000);

  it('3: a model whose files are there but whose graph onnxruntime cannot load; a missing model is bad input (2)', async () => {
    const broken = join(dir, 'broken-model');
    cpSync(BUNDLED_MODEL_DIR, broken, { recursive: true });
    const graph = (JSON.parse(readFileSync(join(broken, 'config.json'), 'utf8')) as { onnx: { graph: string } }).onnx.graph;
    writeFileSync(join(broken, graph), 'not an onnx graph');
    const r = await runCli(['rollout', '--suite', 'calculator', '--limit', '2', '--policy', `onnx:${broken}`, '--out', join(dir, 'rollout-broken')]);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain(`could not start the model ${broken}: onnxruntime cannot load`);
    const missing = await runCli([
      'rollout',
      '--suite',
      'calculator',
      '--limit',
      '2',
      '--policy',
      `onnx:${join(dir, 'no-such-model')}`,
      '--out',
      join(dir, 'rollout-missing'),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no-such-model/config.json');
  }, 60_000);

  it('4: every episode failed (a server that dies on each call), with the causes', async () => {
    const r = await runCli(['rollout', '--tasks', crashing, '--out', join(dir, 'rollout-crash')]);
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr).toContain('rollout: every one of the 2 episodes failed');
    expect(r.stderr).toMatch(/2 x a tool server failed during the episode/);
    // The trajectories say what failed.
    const t = readFileSync(join(dir, 'rollout-crash', 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { error_kind?: string });
    expect(t.map((x) => x.error_kind)).toEqual(['server', 'server']);
  }, 60_000);

  it('2: bad input, named: a task file line, a flag value, --steps 0 and negative values', async () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"id": "x"}\n');
    const r = await runCli(['rollout', '--tasks', bad]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('bad.jsonl:1');
    for (const [flags, message] of [
      [['--steps', '-1'], "--steps must be a positive integer, got '-1'"],
      [['--steps', '0'], "--steps must be a positive integer, got '0'"],
      [['--lr', '-0.5'], "--lr must be a number from 0 to 10, got '-0.5'"],
      [['--tasks-per-step', '2.5'], "--tasks-per-step must be a positive integer, got '2.5'"],
    ] as const) {
      const t = await runCli(['train', ...flags, '--run', join(dir, 'never')]);
      expect(t.code, flags.join(' ')).toBe(2);
      expect(t.stderr).toContain(message);
      expect(t.stderr).not.toContain('ambiguous');
    }
    const e = await runCli(['eval', '--suite', 'calculator', '--fail-under', '80']);
    expect(e.code).toBe(2);
    expect(e.stderr).toContain("--fail-under must be a success rate from 0 to 1 (0.8 is 80%), got '80'");
    const tt = await runCli(['bench', '--stdio', 'node -e 0', '--fuzz', '--tool-timeout', 'slow=soon']);
    expect(tt.code).toBe(2);
    expect(tt.stderr).toContain("--tool-timeout takes TOOL=MS (a positive number of ms), got 'slow=soon'");
    const rt = await runCli(['train', '--report-to', 'wandb,comet', '--run', join(dir, 'never')]);
    expect(rt.code).toBe(2);
    expect(rt.stderr).toContain("report_to: unknown tracker 'comet'");
    // train and sft take a registered name or a .gguf for --model; one that is not there is named, once.
    for (const command of [
      ['train', '--run', join(dir, 'never')],
      ['sft', '--out', join(dir, 'never-sft')],
    ]) {
      const g = await runCli([command[0]!, '--model', join(dir, 'missing.gguf'), ...command.slice(1)]);
      expect(g.code, command[0]).toBe(2);
      expect(g.stderr).toContain(`mcp-gym: --model: no .gguf file at ${join(dir, 'missing.gguf')}`);
      expect(g.stderr).not.toContain('--model: --model');
    }
  }, 120_000);

  it('6: below --fail-under, with a JUnit case per task that names the failed ones; 0 at or above it', async () => {
    const junit = join(dir, 'random.xml');
    const low = await runCli([
      'eval',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--limit',
      '5',
      '-k',
      '2',
      '--policy',
      'random:1',
      '--out',
      join(dir, 'eval-random'),
      '--fail-under',
      '0.8',
      '--junit',
      junit,
    ]);
    expect(low.code, low.stderr).toBe(6);
    expect(low.stderr).toMatch(/eval: success \d+\.\d% \[\d+\.\d%, \d+\.\d%\] is below --fail-under 0\.8 \(80\.0%\)/);
    const cases = spawnSync(
      python,
      [
        '-c',
        'import sys,xml.etree.ElementTree as E; r=E.parse(sys.argv[1]).getroot(); print(r.get("tests")); [print(c.get("name"), "fail" if c.find("failure") is not None else "pass") for c in r.iter("testcase")]',
        junit,
      ],
      { encoding: 'utf8' },
    );
    const lines = cases.stdout.trim().split('\n');
    expect(lines[0]).toBe('5');
    expect(lines.slice(1).filter((l) => l.endsWith(' fail')).length).toBeGreaterThan(0);
    const ok = await runCli([
      'eval',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--limit',
      '5',
      '-k',
      '1',
      '--out',
      join(dir, 'eval-expert'),
      '--fail-under',
      '0.8',
      '--junit',
      join(dir, 'expert.xml'),
    ]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(readFileSync(join(dir, 'expert.xml'), 'utf8')).not.toContain('<failure');
    const bench = await runCli([
      'bench',
      '--tasks',
      'calculator',
      '--limit',
      '3',
      '-k',
      '1',
      '--policy',
      'random:2',
      '--fail-under',
      '0.9',
      '--junit',
      join(dir, 'bench.xml'),
    ]);
    expect(bench.code, bench.stderr).toBe(6);
    expect(bench.stderr).toContain('bench --tasks: success');
    expect(readFileSync(join(dir, 'bench.xml'), 'utf8')).toContain('<testsuites name="mcp-gym bench random');
  }, 180_000);

  it('5: training whose learner steps leave the weights unchanged (lr 0 in a constant schedule) stops, naming why', async () => {
    const run = join(dir, 'train-lr0');
    const r = await runCli([
      'train',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--steps',
      '6',
      '--tasks-per-step',
      '4',
      '--group',
      '4',
      '--eval-limit',
      '4',
      '--eval-samples',
      '1',
      '--eval-every',
      '0',
      '--warmup-steps',
      '0',
      '--lr',
      '1e-30',
      '--no-signal-patience',
      '2',
      '--run',
      run,
      '--model',
      BUNDLED_MODEL_DIR,
    ]);
    expect(r.code, r.stdout + r.stderr).toBe(5);
    expect(r.stdout).toContain("no learning signal: the learner's step left the weights bit-identical");
    expect(r.stderr).toContain('training stopped at step 2: 2 steps in a row without a learning signal');
    const rows = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { no_signal: boolean; weights_changed: boolean });
    expect(rows.map((m) => [m.no_signal, m.weights_changed])).toEqual([
      [true, false],
      [true, false],
    ]);
    expect(JSON.parse(readFileSync(join(run, 'status.json'), 'utf8')).status).toBe('failed');
  }, 180_000);
});
