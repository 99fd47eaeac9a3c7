/**
 * The packed tarball, installed the way a user installs it: build, `npm pack`, install into an
 * empty project with no network (the npm cache only), then use it from plain JavaScript and run
 * its command.
 *
 * Everything happens in a temp dir: the repository is copied there (without node_modules, .venv, dist/ and
 * run outputs; node_modules is linked) and packed from the copy, so the build never touches the
 * repository's dist/, which other test files run the CLI from at the same time.
 *
 * Offline, two things need help (docs/install.md, "Installing offline"):
 * - npm resolves a new dependency tree from the registry's full metadata, while an `npm install`
 *   that follows a lock file caches only the abbreviated one; so the empty project starts with a
 *   package-lock.json holding mcp-gym's dependencies as this repository's lock file pins them
 *   (`seedLock`), and npm needs no metadata it has not cached.
 * - onnxruntime-node's postinstall downloads GPU add-ons (ONNXRUNTIME_NODE_INSTALL=skip), and
 *   better-sqlite3 cannot download its prebuilt binary: it compiles (a minute and a half, with the
 *   Node headers of npm_config_nodedir) unless a local prebuild is given. The test gives it this
 *   repository's own compiled binary (`localPrebuild`); MCP_GYM_TEST_COMPILE=1 compiles instead.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers.ts';

// ─────────────────────────────────────────────────────────────────────────────────────────────
// THE SCENARIO: the plain-JavaScript program (an ES module) run with `node` in the temp project,
// which sees only the installed package. Extend it here. `ctx` holds values from the test
// (interpolated as JSON); write `\${` for a template literal of the scenario's own. It must print
// `RESULT <one line of JSON>` as its last line: the test parses that and checks it below.
// ─────────────────────────────────────────────────────────────────────────────────────────────
interface ScenarioContext {
  /** The temp project's directory (the scenario's cwd). */
  projectDir: string;
}

/** The user's own MCP server, in plain JavaScript, with the MCP SDK that mcp-gym depends on: a notebook kept in memory (one process per episode). */
const NOTES_SERVER = `
import { McpServer } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';
const notes = [];
const server = new McpServer({ name: 'notes', version: '1.0.0' });
server.registerTool('add_note', { description: 'Add a note', inputSchema: z.object({ text: z.string().min(1) }) }, async ({ text }) => {
  notes.push(text);
  return { content: [{ type: 'text', text: 'added' }], structuredContent: { count: notes.length } };
});
server.registerTool('count_notes', { description: 'How many notes there are', inputSchema: z.object({}) }, async () =>
  ({ content: [{ type: 'text', text: String(notes.length) }], structuredContent: { count: notes.length } }));
await server.connect(new StdioServerTransport());
`;

const scenario = (ctx: ScenarioContext) => `
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as gym from 'mcp-gym';
import { defineTask, Environment, ExpertPolicy, gatherGroup, registerReward, train } from 'mcp-gym';
import { RandomPolicy } from 'mcp-gym/agents';
import { bundledServer } from 'mcp-gym/servers';
import { PRESET_NAMES } from 'mcp-gym/trainers';

const ctx = ${JSON.stringify(ctx)};
const keys = Object.keys(gym);
console.log('mcp-gym exports:', keys.join(', '));

// Two tasks against the user's own stdio server, checked by its state and by the answer.
const server = { transport: 'stdio', command: process.execPath, args: [join(ctx.projectDir, 'notes-server.mjs')] };
const task = (id, split, text) => defineTask({
  id, split, difficulty: 1, servers: { notes: server }, max_turns: 3,
  prompt: 'Add the note ' + JSON.stringify(text) + ', then answer with the number of notes.',
  checks: [
    { kind: 'state', call: { server: 'notes', tool: 'count_notes', arguments: {} }, path: 'count', expect: { kind: 'equals', value: 1 } },
    { kind: 'answer', expect: { kind: 'number', value: 1 } },
  ],
  solution: { calls: [{ server: 'notes', tool: 'add_note', arguments: { text } }], answer: '1' },
});
const tasks = [task('notes-milk', 'train', 'milk'), task('notes-bread', 'eval', 'bread')];

// The user's own reward, registered by name.
registerReward('mine', (e) => ({ reward: (e.solved ? 1 : 0) + 0.1 * e.turns.length, parts: { solved: e.solved ? 1 : 0, turns: e.turns.length } }));

// A group rollout with the expert.
const env = new Environment({ reward: 'mine' });
const group = await gatherGroup(env, new ExpertPolicy(), tasks[0], 4);
await env.close();

// Two training steps of the embedded model (the package's own cold start) with that reward.
const runDir = join(ctx.projectDir, 'run');
const result = await train({
  config: { steps: 2, tasks_per_step: 2, group: 4, eval_samples: 1, eval_every: 0, max_new_tokens: 48, concurrency: 8 },
  reward: 'mine', trainTasks: tasks, evalTasks: tasks, runDir,
});
const rows = (f) => readFileSync(join(runDir, f), 'utf8').trim().split('\\n').map((l) => JSON.parse(l));
const metrics = rows('metrics.jsonl');
const trajectories = rows('trajectories.jsonl');
const model = JSON.parse(readFileSync(join(runDir, 'model', 'config.json'), 'utf8'));

console.log('RESULT ' + JSON.stringify({
  cwd: process.cwd() === ctx.projectDir,
  keys,
  subpaths: { random: typeof RandomPolicy, kv: bundledServer('kv').name, presets: PRESET_NAMES },
  group: { id: group.group_id, size: group.trajectories.length, solved: group.trajectories.filter((t) => t.success).length, rewards: group.trajectories.map((t) => t.reward), names: [...new Set(group.trajectories.map((t) => t.reward_name))] },
  train: { steps: result.steps, rows: metrics.map((m) => ({ step: m.step, reward: m.reward, loss: m.loss, sequences: m.sequences })), names: [...new Set(trajectories.map((t) => t.reward_name))], rlSteps: model.training.rl_steps, version: model.version, report: result.report.startsWith(runDir) },
}));
`;
// ─────────────────────────────────────────────────────────────────────────────────────────────

const TIMEOUT = 240_000;
/** What a fresh clone would not have: never copied into the temp dir. */
const SKIP = new Set(['node_modules', 'dist', '.git', 'runs', '.tmp', '.venv', 'coverage', '__pycache__', '.pytest_cache']);

interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command; never throws (the caller checks `code`, and failures show the output). */
function run(cmd: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { cwd: opts.cwd, env: { ...process.env, ...opts.env }, timeout: opts.timeoutMs ?? TIMEOUT, maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr: err && !stderr ? String(err.message) : stderr });
      },
    );
  });
}
const npm = (args: string[], opts: Parameters<typeof run>[2]) => run(process.platform === 'win32' ? 'npm.cmd' : 'npm', args, opts);
const show = (r: RunResult) => `exit ${r.code}\n--- stdout\n${r.stdout.slice(-6000)}\n--- stderr\n${r.stderr.slice(-6000)}`;

interface LockEntry {
  dev?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

/**
 * A package-lock.json for a project that will install the tarball: mcp-gym's dependency closure,
 * resolved in this repository's lock file the way Node resolves modules (nearest node_modules up).
 * mcp-gym's own entry is left out: `npm install <tarball>` adds it.
 */
function seedLock(dependencies: Record<string, string>): object {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const resolveFrom = (from: string, name: string): string | undefined => {
    for (let base = from; ; ) {
      const key = `${base ? `${base}/` : ''}node_modules/${name}`;
      if (lock.packages[key]) return key;
      if (!base) return undefined;
      const i = base.lastIndexOf('/node_modules/');
      base = i < 0 ? '' : base.slice(0, i);
    }
  };
  const packages: Record<string, LockEntry> = { '': { dependencies } };
  const visit = (from: string, deps: Record<string, string> | undefined, required: boolean) => {
    for (const name of Object.keys(deps ?? {})) {
      const key = resolveFrom(from, name);
      if (!key) {
        if (required) throw new Error(`package-lock.json has no ${name} for ${from || 'the root'}`);
        continue;
      }
      if (packages[key]) continue;
      packages[key] = lock.packages[key]!;
      const entry = lock.packages[key]!;
      visit(key, entry.dependencies, true);
      visit(key, entry.optionalDependencies, false);
      visit(key, entry.peerDependencies, false);
    }
  };
  visit('', dependencies, true);
  delete packages['']!.dependencies;
  return { name: 'mcp-gym-package-test', lockfileVersion: 3, requires: true, packages };
}

/**
 * A folder holding better-sqlite3's prebuilt binary as prebuild-install looks for it (the
 * repository's own build, same version and Node ABI), or undefined when there is none.
 */
async function localPrebuild(dir: string): Promise<string | undefined> {
  const pkgDir = join(ROOT, 'node_modules', 'better-sqlite3');
  const binary = join(pkgDir, 'build', 'Release', 'better_sqlite3.node');
  if (process.env.MCP_GYM_TEST_COMPILE === '1' || !existsSync(binary) || process.platform !== 'linux') return undefined;
  const { version } = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { version: string };
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`);
  const r = await run('tar', ['-czf', file, '-C', pkgDir, relative(pkgDir, binary)], { cwd: dir });
  return r.code === 0 ? dir : undefined;
}

/** npm's environment for the offline install. */
function installEnv(prebuilds: string | undefined): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ONNXRUNTIME_NODE_INSTALL: 'skip' };
  if (prebuilds) env.npm_config_better_sqlite3_local_prebuilds = prebuilds;
  // node-gyp would download the Node headers; use this Node's own when it ships them.
  const prefix = dirname(dirname(process.execPath));
  if (!process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node.h'))) env.npm_config_nodedir = prefix;
  return env;
}

interface PackResult {
  filename: string;
  size: number;
  unpackedSize: number;
  entryCount: number;
  files: { path: string; size: number }[];
}

describe('the packed package', () => {
  let tmp = '';
  let project = '';
  let pack: PackResult | undefined;
  let installed: RunResult | undefined;

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-package-'));
    const src = join(tmp, 'src');
    cpSync(ROOT, src, { recursive: true, filter: (from) => !SKIP.has(from.slice(from.lastIndexOf('/') + 1)) || from === ROOT });
    symlinkSync(join(ROOT, 'node_modules'), join(src, 'node_modules'), 'dir');

    // `npm pack` runs `prepack`, the build: it fails on a type error.
    const out = join(tmp, 'pack');
    mkdirSync(out);
    const packed = await npm(['pack', '--json', '--pack-destination', out], { cwd: src });
    if (packed.code !== 0) throw new Error(`npm pack failed: ${show(packed)}`);
    pack = (JSON.parse(packed.stdout.slice(packed.stdout.search(/^\[/m))) as PackResult[])[0]!; // after prepack's output
    console.log(
      `tarball ${pack.filename}: ${(pack.size / 1e6).toFixed(2)} MB packed, ${(pack.unpackedSize / 1e6).toFixed(2)} MB unpacked, ${pack.entryCount} files`,
    );

    project = join(tmp, 'project');
    mkdirSync(project);
    const { dependencies } = JSON.parse(readFileSync(join(src, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    writeFileSync(join(project, 'package.json'), `${JSON.stringify({ name: 'mcp-gym-package-test', private: true, type: 'module' }, null, 2)}\n`);
    writeFileSync(join(project, 'package-lock.json'), `${JSON.stringify(seedLock(dependencies), null, 2)}\n`);
    const prebuilds = await localPrebuild(join(tmp, 'prebuilds'));
    const started = Date.now();
    installed = await npm(['install', '--offline', '--no-audit', '--no-fund', join(out, pack.filename)], { cwd: project, env: installEnv(prebuilds) });
    console.log(
      `offline install: exit ${installed.code} in ${((Date.now() - started) / 1000).toFixed(1)} s (better-sqlite3 ${prebuilds ? 'from the local prebuild' : 'compiled'})`,
    );
  }, TIMEOUT);

  // Removing the installed project (node_modules and the package) took over vitest's 60 s hook limit on a loaded machine.
  afterAll(() => {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }, TIMEOUT);

  it('holds the build, the learner and the model, and no tests, benchmarks or TypeScript sources', () => {
    const files = pack!.files.map((f) => f.path);
    for (const f of [
      'package.json',
      'README.md',
      'bin/mcp-gym.js',
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'dist/src/cli/main.js',
      'dist/src/env/code-runner-child.js',
      'dist/servers/sql-worker.js',
      'dist/servers/files-search-worker.js',
      'learner/mcp_gym_learner/__main__.py',
      'models/calc-tiny/model.onnx',
      'models/calc-tiny/config.json',
    ])
      expect(files, f).toContain(f);
    expect(files.filter((f) => /^(test|bench|scripts|src|servers|lib|examples)\//.test(f))).toEqual([]);
    expect(files.filter((f) => /\.[cm]?ts$/.test(f) && !/\.d\.[cm]?ts$/.test(f))).toEqual([]);
    expect(files.filter((f) => /(^|\/)(tests?\/|conftest\.py|pytest\.ini|__pycache__\/)|\.test\.|\.pyc$|\.build-stamp$|sft-data\.jsonl$/.test(f))).toEqual([]);
  });

  it('installs offline into an empty project', () => {
    expect(installed!.code, show(installed!)).toBe(0);
    expect(existsSync(join(project, 'node_modules', 'mcp-gym', 'dist', 'src', 'index.js'))).toBe(true);
    expect(existsSync(join(project, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'))).toBe(true);
  });

  it(
    'runs the scenario in plain JavaScript against the installed package',
    async () => {
      expect(installed!.code, show(installed!)).toBe(0);
      writeFileSync(join(project, 'notes-server.mjs'), NOTES_SERVER);
      writeFileSync(join(project, 'scenario.mjs'), scenario({ projectDir: project }));
      const r = await run(process.execPath, ['scenario.mjs'], { cwd: project });
      console.log(r.stdout.trim());
      expect(r.code, show(r)).toBe(0);
      const line = r.stdout.trim().split('\n').at(-1) ?? '';
      expect(line.startsWith('RESULT '), show(r)).toBe(true);
      const result = JSON.parse(line.slice('RESULT '.length)) as {
        cwd: boolean;
        keys: string[];
        subpaths: { random: string; kv: string; presets: string[] };
        group: { id: string; size: number; solved: number; rewards: number[]; names: string[] };
        train: {
          steps: number;
          rows: { step: number; reward: string; loss: number; sequences: number }[];
          names: string[];
          rlSteps: number;
          version: number;
          report: boolean;
        };
      };
      expect(result.cwd).toBe(true);
      for (const name of [
        'defineTask',
        'loadTasks',
        'Environment',
        'rollout',
        'gatherGroup',
        'registerReward',
        'train',
        'collectGroups',
        'buildTrainBatch',
        'LearnerSession',
        'OnnxPolicy',
        'ToolClient',
      ])
        expect(result.keys).toContain(name);
      // The root holds the nouns (at most 40 names); the rest is behind a subpath per folder.
      expect(result.keys.length).toBeLessThanOrEqual(40);
      expect(result.subpaths).toEqual({ random: 'function', kv: 'kv', presets: expect.arrayContaining(['grpo', 'art', 'ppo']) });
      // The group rollout: 4 expert episodes against the user's server, scored by the user's reward (1 + 0.1 x 2 turns).
      expect(result.group).toMatchObject({ id: 'notes-milk@0', size: 4, solved: 4, names: ['mine'] });
      for (const r of result.group.rewards) expect(r).toBeCloseTo(1.2, 9);
      // Two learner steps with that reward: metrics per step, the learner's loss, the trained weights written back.
      expect(result.train.steps).toBe(2);
      expect(result.train.rows.map((m) => m.step)).toEqual([1, 2]);
      for (const m of result.train.rows) {
        expect(m.reward).toBe('mine');
        expect(Number.isFinite(m.loss)).toBe(true);
        expect(m.sequences).toBeGreaterThan(0);
      }
      expect(result.train.names).toEqual(['mine']);
      expect(result.train.rlSteps).toBe(2);
      expect(result.train.version).toBeGreaterThanOrEqual(2);
      expect(result.train.report).toBe(true);
    },
    TIMEOUT,
  );

  it('`npx mcp-gym --help` runs the installed command', async () => {
    expect(installed!.code, show(installed!)).toBe(0);
    // Offline: if the local bin were missing, npx would fail instead of fetching mcp-gym.
    const r = await run(process.platform === 'win32' ? 'npx.cmd' : 'npx', ['mcp-gym', '--help'], { cwd: project, env: { npm_config_offline: 'true' } });
    expect(r.code, show(r)).toBe(0);
    expect(r.stdout).toContain('Usage: mcp-gym <command> [options]');
    for (const command of ['serve <name>', 'train', 'rollout', 'bench']) expect(r.stdout).toContain(command);
  }, 60_000);
});
