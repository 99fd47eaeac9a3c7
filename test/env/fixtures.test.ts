/**
 * Fixtures give a third-party stdio server a fresh copy of its state in every episode: with the
 * official filesystem and memory servers from npm (real processes over stdio), 16 episodes at once
 * each write the same file / entity with different content, and each episode's state checks see
 * only its own write; the per-episode directories are gone afterwards, also after a failed or a
 * cancelled episode, and the fixture's source is unchanged. Bad fixture specs are refused with
 * the file, line and field.
 */
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import {
  defineTask,
  Environment,
  loadTasks,
  parseTasks,
  rollout,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type TaskInput,
} from '../../src/env/index.ts';
import { FixtureError, ToolClient } from '../../src/tools/index.ts';
import { ROOT } from '../helpers.ts';

const FILESYSTEM = join(ROOT, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
const MEMORY = join(ROOT, 'node_modules/@modelcontextprotocol/server-memory/dist/index.js');
const N = 16;

/** Everything under `path`, itself included: type, size, mtime (ns) and the bytes of each file. */
function snapshot(path: string): Map<string, string> {
  const out = new Map<string, string>();
  const visit = (rel: string) => {
    const abs = join(path, rel);
    const st = lstatSync(abs, { bigint: true });
    out.set(
      rel || '.',
      JSON.stringify({
        dir: st.isDirectory(),
        size: String(st.size),
        mtimeNs: String(st.mtimeNs),
        bytes: st.isFile() ? readFileSync(abs).toString('base64') : undefined,
      }),
    );
    if (st.isDirectory()) for (const name of readdirSync(abs).sort()) visit(join(rel, name));
  };
  visit('');
  return out;
}

/** Resolves once `n` callers have arrived; `onFull` runs when the last one arrives. */
function barrier(n: number, onFull: () => void = () => {}): () => Promise<void> {
  let arrived = 0;
  let open!: () => void;
  const full = new Promise<void>((r) => (open = r));
  return () => {
    if (++arrived === n) {
      onFull();
      open();
    }
    return full;
  };
}

/**
 * The expert (it replays each task's solution), held back so that the episodes overlap as much as
 * they can: no episode makes its first call before all `n` have their servers up, and none answers
 * (which starts its state checks) before all `n` have made every call.
 */
class TogetherPolicy implements Policy {
  readonly id = 'expert-together';
  private readonly expert = new ExpertPolicy();
  private readonly started: () => Promise<void>;
  private readonly written: () => Promise<void>;

  constructor(n: number, onStarted: () => void) {
    this.started = barrier(n, onStarted);
    this.written = barrier(n);
  }

  async act(obs: Observation): Promise<PolicyAction> {
    const action = await this.expert.act(obs);
    if (obs.turn === 0) await this.started();
    if (!action.toolCalls?.length) await this.written();
    return action;
  }
}

let work: string;
let fixtureRoot: string;
let savedTmp: string | undefined;
/** The per-episode fixture directories that exist now (they are made under `fixtureRoot`). */
const fixtureDirs = () => readdirSync(fixtureRoot).filter((n) => n.startsWith('mcp-gym-fixture-'));

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'mcp-gym-fixtures-test-'));
  fixtureRoot = join(work, 'tmp');
  mkdirSync(fixtureRoot);
  // The fixture directories are made under os.tmpdir(): here, where the test can count them.
  savedTmp = process.env.TMPDIR;
  process.env.TMPDIR = fixtureRoot;
  expect(tmpdir()).toBe(fixtureRoot);
});

afterAll(() => {
  if (savedTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = savedTmp;
  rmSync(work, { recursive: true, force: true });
});

/** Writes `tasks` as a JSONL task file in `dir` and loads it back (relative fixture paths are the file's). */
function taskFile(dir: string, name: string, tasks: TaskInput[]): Task[] {
  const file = join(dir, name);
  writeFileSync(file, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
  return loadTasks(file);
}

/**
 * Runs the N tasks' episodes all at once (TogetherPolicy holds each until all have started), checks
 * that each passed its `checks` checks, and says how many fixture directories existed at once.
 */
async function runTogether(tasks: Task[], checks: number): Promise<{ atOnce: number; seconds: number }> {
  let atOnce = -1;
  const policy = new TogetherPolicy(N, () => (atOnce = fixtureDirs().length));
  const env = new Environment({ callTimeoutMs: 30_000, connect: { connectTimeoutMs: 60_000 } });
  const t0 = performance.now();
  const r = await rollout(env, policy, tasks, { concurrency: N });
  await env.close();
  const seconds = (performance.now() - t0) / 1000;
  expect(r.trajectories).toHaveLength(N);
  for (const t of r.trajectories) {
    expect(t.error, t.task_id).toBeUndefined();
    expect(
      t.checks.map((c) => c.score),
      `${t.task_id}: ${JSON.stringify(t.checks)}`,
    ).toEqual(new Array(checks).fill(1));
    expect(t.success).toBe(true);
  }
  return { atOnce, seconds };
}

describe('fixtures: a fresh copy of a third-party server state in every episode', () => {
  it('the official filesystem server: 16 episodes at once write the same files, each sees only its own', async () => {
    const dir = join(work, 'fs-suite');
    const source = join(dir, 'fixtures', 'docs');
    mkdirSync(join(source, 'notes'), { recursive: true });
    writeFileSync(join(source, 'readme.txt'), 'the fixture');
    writeFileSync(join(source, 'notes', 'keep.md'), '# keep me\n');
    const before = snapshot(source);

    const fsServer = { transport: 'stdio' as const, command: process.execPath, args: [FILESYSTEM], fixtures: { copy: 'fixtures/docs', args: ['{fixture}'] } };
    const tasks = taskFile(
      dir,
      'tasks.jsonl',
      Array.from(
        { length: N },
        (_, i): TaskInput => ({
          id: `fs-${i}`,
          split: 'eval' as const,
          difficulty: 1,
          prompt: `Write "episode ${i}" into answer.txt and readme.txt.`,
          servers: { fs: fsServer },
          checks: [
            {
              kind: 'state' as const,
              call: { server: 'fs', tool: 'read_text_file', arguments: { path: 'answer.txt' } },
              path: 'content',
              expect: { kind: 'equals' as const, value: `episode ${i}` },
            },
            {
              kind: 'state' as const,
              call: { server: 'fs', tool: 'read_text_file', arguments: { path: 'readme.txt' } },
              path: 'content',
              expect: { kind: 'equals' as const, value: `episode ${i} was here` },
            },
            // Its own copy of the fixture, and nothing another episode wrote.
            {
              kind: 'state' as const,
              call: { server: 'fs', tool: 'list_directory', arguments: { path: '.' } },
              path: 'content',
              expect: { kind: 'equals' as const, value: `[FILE] answer.txt\n[FILE] mine-${i}.txt\n[DIR] notes\n[FILE] readme.txt` },
            },
            {
              kind: 'state' as const,
              call: { server: 'fs', tool: 'read_text_file', arguments: { path: 'notes/keep.md' } },
              path: 'content',
              expect: { kind: 'equals' as const, value: '# keep me\n' },
            },
          ],
          solution: {
            calls: [
              { server: 'fs', tool: 'write_file', arguments: { path: 'answer.txt', content: `episode ${i}` } },
              { server: 'fs', tool: 'write_file', arguments: { path: 'readme.txt', content: `episode ${i} was here` } },
              { server: 'fs', tool: 'write_file', arguments: { path: `mine-${i}.txt`, content: String(i) } },
            ],
            answer: 'done',
          },
        }),
      ),
    );
    // The relative path was resolved against the task file's directory.
    const spec = tasks[0]!.servers.fs as { fixtures: { copy: string } };
    expect(spec.fixtures.copy).toBe(source);

    const { atOnce, seconds } = await runTogether(tasks, 4);
    // All 16 ran at once, each in a directory of its own...
    expect(atOnce).toBe(N);
    // ...which is gone, and the source is untouched.
    expect(fixtureDirs()).toEqual([]);
    expect(snapshot(source)).toEqual(before);
    console.log(`filesystem: ${N} episodes at once in ${seconds.toFixed(1)} s`);
  });

  it('the official memory server: 16 episodes at once create the same entity, each sees only its own', async () => {
    const dir = join(work, 'memory-suite');
    mkdirSync(dir);
    const source = join(dir, 'memory.jsonl');
    writeFileSync(source, JSON.stringify({ type: 'entity', name: 'seed', entityType: 'thing', observations: ['from the fixture'] }) + '\n');
    const before = snapshot(source);

    const memory = {
      transport: 'stdio' as const,
      command: process.execPath,
      args: [MEMORY],
      fixtures: { copy: 'memory.jsonl', env: { MEMORY_FILE_PATH: '{fixture}/memory.jsonl' } },
    };
    const tasks = taskFile(
      dir,
      'tasks.jsonl',
      Array.from(
        { length: N },
        (_, i): TaskInput => ({
          id: `memory-${i}`,
          split: 'eval' as const,
          difficulty: 1,
          prompt: `Remember that the shared note says "episode ${i}".`,
          servers: { memory },
          checks: [
            {
              kind: 'state' as const,
              call: { server: 'memory', tool: 'open_nodes', arguments: { names: ['shared'] } },
              path: 'entities',
              expect: { kind: 'equals' as const, value: [{ name: 'shared', entityType: 'note', observations: [`episode ${i}`] }] },
            },
            {
              kind: 'state' as const,
              call: { server: 'memory', tool: 'open_nodes', arguments: { names: ['seed'] } },
              path: 'entities.0.observations',
              expect: { kind: 'equals' as const, value: ['from the fixture', `seen by episode ${i}`] },
            },
            // The whole graph: the fixture's entity and this episode's writes, nothing of another episode.
            {
              kind: 'state' as const,
              call: { server: 'memory', tool: 'read_graph', arguments: {} },
              expect: {
                kind: 'equals' as const,
                value: {
                  entities: [
                    { name: 'seed', entityType: 'thing', observations: ['from the fixture', `seen by episode ${i}`] },
                    { name: 'shared', entityType: 'note', observations: [`episode ${i}`] },
                  ],
                  relations: [],
                },
              },
            },
          ],
          solution: {
            calls: [
              { server: 'memory', tool: 'create_entities', arguments: { entities: [{ name: 'shared', entityType: 'note', observations: [`episode ${i}`] }] } },
              { server: 'memory', tool: 'add_observations', arguments: { observations: [{ entityName: 'seed', contents: [`seen by episode ${i}`] }] } },
            ],
            answer: 'done',
          },
        }),
      ),
    );

    const { atOnce, seconds } = await runTogether(tasks, 3);
    expect(atOnce).toBe(N);
    expect(fixtureDirs()).toEqual([]);
    expect(snapshot(source)).toEqual(before);
    console.log(`memory: ${N} episodes at once in ${seconds.toFixed(1)} s`);
  });

  it('removes the directory after a failed, a cancelled and a never-started episode', async () => {
    const source = join(work, 'small');
    mkdirSync(source);
    writeFileSync(join(source, 'a.txt'), 'a');
    const base = {
      split: 'eval' as const,
      difficulty: 1,
      prompt: 'Write a file.',
      checks: [{ kind: 'answer' as const, expect: { kind: 'equals' as const, value: 'done' } }],
      solution: { calls: [{ server: 'fs', tool: 'write_file', arguments: { path: 'b.txt', content: 'b' } }], answer: 'done' },
    };
    const fs = { transport: 'stdio' as const, command: process.execPath, args: [FILESYSTEM], fixtures: { copy: source, args: ['{fixture}'] } };
    const env = new Environment({ callTimeoutMs: 30_000 });
    let during = 0;

    // The policy throws once the server is up.
    const failing: Policy = {
      id: 'failing',
      async act() {
        during = fixtureDirs().length;
        throw new Error('out of ideas');
      },
    };
    const failed = await env.runEpisode(defineTask({ ...base, id: 'fails', servers: { fs } }), failing);
    expect(failed.finish).toBe('error');
    expect(failed.error).toMatch(/^the policy failed: out of ideas/);
    expect(during).toBe(1);
    expect(fixtureDirs()).toEqual([]);

    // Cancelled after its first call.
    const controller = new AbortController();
    const expert = new ExpertPolicy();
    const cancelling: Policy = {
      id: 'cancelling',
      async act(obs) {
        if (obs.turn === 0) controller.abort(); // its call is cancelled, then the episode
        return expert.act(obs);
      },
    };
    const cancelled = await env.runEpisode(defineTask({ ...base, id: 'cancelled', servers: { fs } }), cancelling, { signal: controller.signal });
    expect(cancelled.finish).toBe('error');
    expect(cancelled.error).toMatch(/cancelled/);
    expect(fixtureDirs()).toEqual([]);

    // The server cannot start: it is pointed at a folder the fixture does not have.
    const broken = { ...fs, fixtures: { copy: source, args: ['{fixture}/missing'] } };
    const never = await env.runEpisode(defineTask({ ...base, id: 'never', servers: { fs: broken } }), expert);
    expect(never.finish).toBe('error');
    expect(never.error).toMatch(/^a tool server failed: Cannot connect to stdio server/);
    expect(fixtureDirs()).toEqual([]);

    // An empty directory when nothing is copied.
    const empty = { ...fs, fixtures: { args: ['{fixture}'] } };
    const listing = {
      kind: 'state' as const,
      call: { server: 'fs', tool: 'list_directory', arguments: { path: '.' } },
      path: 'content',
      expect: { kind: 'equals' as const, value: '[FILE] b.txt' },
    };
    const fresh = await env.runEpisode(defineTask({ ...base, id: 'empty', servers: { fs: empty }, checks: [listing] }), expert);
    expect(fresh.error).toBeUndefined();
    expect(fresh.success).toBe(true);
    expect(fixtureDirs()).toEqual([]);
    await env.close();
    expect(snapshot(source).size).toBe(2);
  });
});

describe('fixtures: bad specs', () => {
  const task = (servers: Record<string, unknown>, id = 't1') => ({
    id,
    split: 'eval',
    difficulty: 1,
    prompt: 'p',
    servers,
    checks: [{ kind: 'answer', expect: { kind: 'equals', value: '1' } }],
  });
  const stdio = (extra: Record<string, unknown>) => ({ transport: 'stdio', command: process.execPath, args: [MEMORY], ...extra });

  it('names the file, line and field', () => {
    const dir = join(work, 'bad');
    mkdirSync(dir);
    writeFileSync(join(dir, 'seed.jsonl'), '');
    const file = (name: string, lines: unknown[]) => {
      const f = join(dir, name);
      writeFileSync(f, '// tasks\n' + lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
      return f;
    };
    // A copy that does not exist: its absolute path, resolved against the task file's folder.
    const missing = file('missing.jsonl', [
      task({ mem: stdio({ fixtures: { copy: 'seed.jsonl' } }) }, 't0'),
      task({ mem: stdio({ fixtures: { copy: 'nope/seed.jsonl' } }) }),
    ]);
    expect(() => loadTasks(missing)).toThrow(`${missing}:3: servers.mem.fixtures.copy: ${join(dir, 'nope/seed.jsonl')} does not exist`);
    // {fixture} without fixtures.
    const unused = file('unused.jsonl', [task({ mem: stdio({ env: { MEMORY_FILE_PATH: '{fixture}/m.jsonl' } }) })]);
    expect(() => loadTasks(unused)).toThrow(
      `${unused}:2: servers.mem.env.MEMORY_FILE_PATH: uses {fixture}, but the spec has no fixtures (add "fixtures": {} for an empty directory per episode)`,
    );
    const inArgs = file('args.jsonl', [task({ fs: { transport: 'stdio', command: process.execPath, args: [FILESYSTEM, '{fixture}'] } })]);
    expect(() => loadTasks(inArgs)).toThrow(`${inArgs}:2: servers.fs.args[1]: uses {fixture}`);
    // Fixtures on an HTTP server cannot be applied.
    const http = file('http.jsonl', [task({ web: { transport: 'http', url: 'http://127.0.0.1:1/mcp', fixtures: { copy: 'seed.jsonl' } } })]);
    expect(() => loadTasks(http)).toThrow(
      `${http}:2: servers.web.fixtures: fixtures apply only to stdio servers (a process per episode); an HTTP server is shared by all episodes`,
    );
    // A misspelt field, and a wrong type.
    const typo = file('typo.jsonl', [task({ mem: stdio({ fixtures: { cpy: 'seed.jsonl' } }) })]);
    expect(() => loadTasks(typo)).toThrow(new RegExp(`typo\\.jsonl:2: servers\\.mem\\.fixtures: Unrecognized key: "cpy"`));
    const typed = file('typed.jsonl', [task({ mem: stdio({ fixtures: { env: { A: 1 } } }) })]);
    expect(() => loadTasks(typed)).toThrow(/typed\.jsonl:2: servers\.mem\.fixtures\.env\.A: Invalid input: expected string/);
    // In a JSON array, the element's index too.
    expect(() =>
      parseTasks(JSON.stringify([task({ mem: stdio({}) }, 'a'), task({ mem: stdio({ fixtures: { copy: '/no/such/dir' } }) }, 'b')]), join(dir, 'tasks.json')),
    ).toThrow(/tasks\.json:\d+: \[1\]\.servers\.mem\.fixtures\.copy: \/no\/such\/dir does not exist/);
    // In TypeScript: relative to the working directory.
    expect(() => defineTask(task({ mem: stdio({ fixtures: { copy: 'no-such-fixture' } }) }) as TaskInput)).toThrow(
      `Invalid task 't1': servers.mem.fixtures.copy: ${join(process.cwd(), 'no-such-fixture')} does not exist`,
    );
    // A good one loads, its copy made absolute.
    const good = loadTasks(file('good.jsonl', [task({ mem: stdio({ fixtures: { copy: './seed.jsonl' } }) })]));
    expect((good[0]!.servers.mem as { fixtures: { copy: string } }).fixtures.copy).toBe(join(dir, 'seed.jsonl'));
  });

  it('a copy gone since the task was read fails the episode as a task error, naming the field', async () => {
    const dir = join(work, 'gone');
    mkdirSync(dir);
    writeFileSync(join(dir, 'memory.jsonl'), '');
    const [t] = taskFile(dir, 'tasks.jsonl', [
      task({ mem: stdio({ fixtures: { copy: 'memory.jsonl', env: { MEMORY_FILE_PATH: '{fixture}/memory.jsonl' } } }) }) as TaskInput,
    ]);
    renameSync(join(dir, 'memory.jsonl'), join(dir, 'moved.jsonl'));
    const env = new Environment();
    const traj = await env.runEpisode(t!, new ExpertPolicy());
    await env.close();
    expect(traj.finish).toBe('error');
    expect(traj.task_error).toBe(true);
    expect(traj.error).toBe(`servers.mem.fixtures.copy: ${join(dir, 'memory.jsonl')} does not exist`);
    expect(fixtureDirs()).toEqual([]);
  });

  it('ToolClient refuses them before starting anything', async () => {
    await expect(
      ToolClient.connect({ transport: 'stdio', command: process.execPath, args: [MEMORY], fixtures: { copy: join(work, 'nothing-here') } }),
    ).rejects.toThrow(new FixtureError('fixtures.copy', `${join(work, 'nothing-here')} does not exist`).message);
    await expect(ToolClient.connect({ transport: 'stdio', command: process.execPath, args: [FILESYSTEM], cwd: '{fixture}' })).rejects.toThrow(
      'Invalid server spec: cwd: uses {fixture}, but the spec has no fixtures',
    );
    await expect(ToolClient.connect({ transport: 'http', url: 'http://127.0.0.1:1/mcp', fixtures: {} } as never)).rejects.toThrow(
      'Invalid server spec: fixtures: fixtures apply only to stdio servers',
    );
    expect(fixtureDirs()).toEqual([]);
  });
});
