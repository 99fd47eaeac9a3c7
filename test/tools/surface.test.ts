/**
 * Tool-surface drift (src/tools/surface.ts): the hash of a server's tools, stable under key and
 * tool order, changed by a description, an input or an output schema; the comparison that names
 * the changed tools; the hash in trajectories, run and model directories, `mcp-gym eval`,
 * `mcp-gym train --resume` and `mcp-gym bench`. Real servers over real transports: the bundled
 * calculator, and test/tools/fixtures/surface-server.mjs, whose tool description is set from outside.
 * The CLI tests run dist/ (node scripts/build.mjs first).
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { defineTask, Environment, TrajectorySchema, type Task } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import {
  canonicalJson,
  compareSurfaces,
  compareSurfaceSets,
  describeDrift,
  readToolSurfaces,
  ToolClient,
  toolSurface,
  writeToolSurfaces,
  type StdioSpec,
  type ToolInfo,
} from '../../src/tools/index.ts';
import { CLI, cliStdioSpec, ROOT, runCli } from '../helpers.ts';

const FIXTURE = join(import.meta.dirname, 'fixtures', 'surface-server.mjs');
const MODEL = join(ROOT, 'models', 'calc-tiny');
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `mcp-gym-surface-${name}-`));

/** The fixture server's stdio spec, with its description and extra tool set through the environment. */
const fixture = (env: Record<string, string> = {}): StdioSpec => ({
  transport: 'stdio',
  command: process.execPath,
  args: [FIXTURE],
  env,
  restart: true,
  maxRestartsPerMinute: 5,
});

const evaluate: ToolInfo = {
  name: 'evaluate',
  description: 'Evaluate an expression.',
  inputSchema: {
    type: 'object',
    properties: { expression: { type: 'string', minLength: 1 }, precision: { type: 'integer' } },
    required: ['expression', 'precision'],
  },
  outputSchema: { type: 'object', properties: { value: { type: 'string' } } },
};
const echo: ToolInfo = { name: 'echo', description: 'Echo.', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } };

/** A copy of `v` with every object's keys in reverse order. */
function reverseKeys<T>(v: T): T {
  if (Array.isArray(v)) return v.map(reverseKeys) as T;
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.entries(v)
        .reverse()
        .map(([k, x]) => [k, reverseKeys(x)]),
    ) as T;
  return v;
}

/** Tasks of the fixture server (two train, two held out), for the CLI. */
function fixtureTasks(env: Record<string, string> = {}): Task[] {
  return [
    ['train', '2 + 3', '5'],
    ['train', '7 - 4', '3'],
    ['eval', '6 + 1', '7'],
    ['eval', '9 - 2', '7'],
  ].map(([split, expression, answer], i) =>
    defineTask({
      id: `surface-${i}`,
      split,
      difficulty: 1,
      prompt: `Use the calculator tool evaluate to compute ${expression}. Answer with the exact result only.`,
      servers: { calc: fixture(env) },
      max_turns: 3,
      checks: [{ kind: 'answer', expect: { kind: 'number', value: answer } }],
      solution: { calls: [{ server: 'calc', tool: 'evaluate', arguments: { expression } }], answer },
    } as never),
  );
}
const writeTasks = (file: string, tasks: Task[]) => writeFileSync(file, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');

describe('the tool-surface hash', () => {
  it('is the same whatever the order of keys and tools, and changes with a description, an input or an output schema', () => {
    const base = toolSurface([evaluate, echo]);
    expect(base.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(Object.keys(base.tools)).toEqual(['echo', 'evaluate']);
    // Keys reversed at every depth, tools in the other order, `required` (a set) in the other order.
    const reordered = reverseKeys({ ...evaluate, inputSchema: { ...evaluate.inputSchema, required: ['precision', 'expression'] } });
    expect(canonicalJson(reordered.inputSchema)).not.toBe(JSON.stringify(reordered.inputSchema));
    expect(toolSurface([echo, reordered]).hash).toBe(base.hash);
    expect(toolSurface([echo, reordered]).tools).toEqual(base.tools);

    const changes: [string, ToolInfo, string][] = [
      ['description', { ...evaluate, description: 'Evaluate an arithmetic expression.' }, 'description'],
      [
        'input schema',
        { ...evaluate, inputSchema: { ...evaluate.inputSchema, properties: { expression: { type: 'string', minLength: 2 }, precision: { type: 'integer' } } } },
        'input_schema',
      ],
      ['output schema', { ...evaluate, outputSchema: { type: 'object', properties: { value: { type: 'number' } } } }, 'output_schema'],
      ['no output schema', { ...evaluate, outputSchema: undefined }, 'output_schema'],
    ];
    for (const [what, changed, part] of changes) {
      const s = toolSurface([changed, echo]);
      expect(s.hash, what).not.toBe(base.hash);
      expect(s.tools.echo, what).toEqual(base.tools.echo);
      expect(compareSurfaces(base, s), what).toEqual({ added: [], removed: [], changed: [{ tool: 'evaluate', parts: [part] }] });
    }
    // An array whose order means something (enum) is kept in order.
    const e1 = toolSurface([{ ...echo, inputSchema: { type: 'object', properties: { mode: { enum: ['a', 'b'] } } } }]);
    const e2 = toolSurface([{ ...echo, inputSchema: { type: 'object', properties: { mode: { enum: ['b', 'a'] } } } }]);
    expect(e1.hash).not.toBe(e2.hash);
  });

  it('the comparison names exactly the tools added, removed and changed, and what changed in each', () => {
    const tool = (name: string, description = `${name}.`, input: Record<string, unknown> = { type: 'object' }): ToolInfo => ({
      name,
      description,
      inputSchema: input,
    });
    const was = toolSurface([tool('a'), tool('b'), tool('c'), tool('d'), tool('e')]);
    const now = toolSurface([
      tool('e'),
      tool('a', 'A, reworded.'),
      tool('c', 'c.', { type: 'object', properties: { x: { type: 'number' } } }),
      tool('d', 'D!', { type: 'object', properties: {} }),
      tool('f'),
    ]);
    expect(compareSurfaces(was, now)).toEqual({
      added: ['f'],
      removed: ['b'],
      changed: [
        { tool: 'a', parts: ['description'] },
        { tool: 'c', parts: ['input_schema'] },
        { tool: 'd', parts: ['description', 'input_schema'] },
      ],
    });
    expect(compareSurfaces(was, was)).toEqual({ added: [], removed: [], changed: [] });
    const drift = compareSurfaceSets({ calc: was, gone: was }, { calc: now, kv: was });
    expect(drift).toEqual({ new_servers: ['kv'], missing_servers: ['gone'], servers: { calc: compareSurfaces(was, now) } });
    expect(describeDrift(drift)).toEqual([
      'kv: a server not in the recorded surface (its tools were never seen)',
      'calc: changed a (description), c (input schema), d (description, input schema); added f; removed b',
    ]);
  });
});

describe('the tool surface recorded', () => {
  it('a trajectory from the bundled calculator server carries its hash; the environment lists each server once', async () => {
    const client = await ToolClient.connect(cliStdioSpec('calculator'));
    const listed = toolSurface(await client.listTools());
    await client.close();
    const task = generateSuite('calculator', { eval: 4 }).find((t) => t.split === 'eval')!;
    const env = new Environment();
    try {
      const t = await env.runEpisode(task, new ExpertPolicy());
      expect(t.success).toBe(true);
      expect(t.tool_surface).toEqual({ calculator: listed.hash });
      expect(TrajectorySchema.parse(JSON.parse(JSON.stringify(t))).tool_surface).toEqual({ calculator: listed.hash });
      expect(await env.toolSurfaces([task])).toEqual({ calculator: listed });
    } finally {
      await env.close();
    }
  }, 60_000);

  it('a stdio server whose tools changed: the environment sees it, and the comparison names the tools', async () => {
    const env = new Environment();
    try {
      const v1 = await env.toolSurfaces(fixtureTasks());
      const v2 = await env.toolSurfaces(fixtureTasks({ SURFACE_DESCRIPTION: 'Compute an arithmetic expression exactly.', SURFACE_EXTRA_TOOL: '1' }));
      expect(Object.keys(v1)).toEqual(['calc']);
      expect(v2.calc!.hash).not.toBe(v1.calc!.hash);
      expect(compareSurfaces(v1.calc!, v2.calc!)).toEqual({ added: ['sqrt'], removed: [], changed: [{ tool: 'evaluate', parts: ['description'] }] });
      // The episode's own listing gives the same hash.
      const t = await env.runEpisode(fixtureTasks()[2]!, new ExpertPolicy());
      expect(t.success).toBe(true);
      expect(t.tool_surface).toEqual({ calc: v1.calc!.hash });
      const dir = tmp('file');
      writeToolSurfaces(dir, v1);
      expect(readToolSurfaces(dir)!.servers).toEqual(v1);
    } finally {
      await env.close();
    }
  }, 60_000);
});

describe('drift warnings and hashes in the CLI', () => {
  it('mcp-gym eval warns, naming the tools, when the servers differ from those the model was trained with', async () => {
    const dir = tmp('eval');
    const model = join(dir, 'model');
    cpSync(MODEL, model, { recursive: true });
    const env = new Environment();
    try {
      writeToolSurfaces(model, await env.toolSurfaces(fixtureTasks()));
    } finally {
      await env.close();
    }
    const same = join(dir, 'same.jsonl');
    const drifted = join(dir, 'drifted.jsonl');
    writeTasks(same, fixtureTasks());
    writeTasks(drifted, fixtureTasks({ SURFACE_DESCRIPTION: 'Compute an arithmetic expression exactly.', SURFACE_EXTRA_TOOL: '1' }));

    const ok = await runCli(['eval', '--tasks', same, '--model', model, '-k', '1', '--out', join(dir, 'out-same'), '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).not.toMatch(/warning/);
    const r = await runCli(['eval', '--tasks', drifted, '--model', model, '-k', '1', '--out', join(dir, 'out-drifted'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`mcp-gym: warning: the tools differ from those the model ${model} was trained with`);
    expect(r.stderr).toContain('calc: changed evaluate (description); added sqrt');
    const out = JSON.parse(readFileSync(join(dir, 'out-drifted', 'eval.json'), 'utf8')) as {
      tool_surface: Record<string, string[]>;
      tool_surfaces: { hash: string; servers: Record<string, { hash: string }>; drift: unknown };
    };
    expect(out.tool_surfaces.drift).toEqual({
      new_servers: [],
      missing_servers: [],
      servers: { calc: { added: ['sqrt'], removed: [], changed: [{ tool: 'evaluate', parts: ['description'] }] } },
    });
    expect(out.tool_surface).toEqual({ calc: [out.tool_surfaces.servers.calc!.hash] });
    expect(r.stdout).toContain(`tool surface`);

    // A model trained on one server, evaluated on another: the new server is named.
    const kv = await runCli(['eval', '--suite', 'kv', '--limit', '1', '--model', model, '-k', '1', '--out', join(dir, 'out-kv')]);
    expect(kv.code, kv.stderr).toBe(0);
    expect(kv.stderr).toContain('kv: a server not in the recorded surface');
  }, 180_000);

  it('mcp-gym train records the surface in the run and its model, and --resume warns when a tool changed', async () => {
    const dir = tmp('train');
    const tasks = join(dir, 'tasks.jsonl');
    writeTasks(tasks, fixtureTasks());
    const runDir = join(dir, 'run');
    const args = [
      CLI,
      'train',
      '--preset',
      'art',
      '--tasks',
      tasks,
      '--model',
      MODEL,
      '--steps',
      '1',
      '--tasks-per-step',
      '2',
      '--group',
      '2',
      '--eval-limit',
      '2',
      '--eval-samples',
      '1',
      '--eval-every',
      '0',
      '--max-staleness',
      '0',
      '--run',
      runDir,
    ];
    const run = (extra: string[], env: Record<string, string> = {}) =>
      promisify(execFile)(process.execPath, [...args, ...extra], { cwd: ROOT, env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
    const first = await run([]);
    expect(first.stderr).not.toMatch(/warning/);
    const recorded = readToolSurfaces(runDir)!;
    expect(Object.keys(recorded.servers)).toEqual(['calc']);
    expect(readToolSurfaces(join(runDir, 'model'))!.hash).toBe(recorded.hash);
    const trajectories = readFileSync(join(runDir, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { tool_surface?: Record<string, string> });
    expect(trajectories.length).toBeGreaterThan(0);
    for (const t of trajectories) expect(t.tool_surface).toEqual({ calc: recorded.servers.calc!.hash });

    const second = await run(['--resume', '--steps', '2'], { SURFACE_DESCRIPTION: 'Compute an arithmetic expression exactly.' });
    expect(second.stderr).toContain(`mcp-gym: warning: the tools differ from those this run was trained with (${join(runDir, 'tool-surface.json')})`);
    expect(second.stderr).toContain('calc: changed evaluate (description)');
    expect(second.stdout).toContain(`resuming ${runDir} at step 1`);
    // From now on the run (and its model) is trained with the new surface.
    expect(readToolSurfaces(runDir)!.hash).not.toBe(recorded.hash);
    expect(existsSync(join(runDir, 'model', 'tool-surface.json'))).toBe(true);
  }, 300_000);

  it("mcp-gym bench prints the surface hash of the server, and each tool's in --json and --html", async () => {
    const env = new Environment();
    let expected;
    try {
      expected = (await env.toolSurfaces(fixtureTasks())).calc!;
    } finally {
      await env.close();
    }
    const html = join(tmp('bench'), 'report.html');
    const r = await runCli(['bench', '--stdio', `"${process.execPath}" ${FIXTURE}`, '--calls', '5', '--concurrency', '1', '--json', '--html', html]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`tool surface: ${expected.hash}`);
    const lines = r.stdout.trim().split('\n');
    const report = JSON.parse(lines[lines.length - 1]!) as { tool_surface: unknown };
    expect(report.tool_surface).toEqual(expected);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain(expected.hash);
    expect(page).toContain(expected.tools.evaluate!.hash.slice(0, 16));
  }, 120_000);
});
