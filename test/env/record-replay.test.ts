/**
 * Record and replay of tool traffic (src/env/recording.ts): a recorded rollout replayed with no
 * server reachable gives the same trajectories; a call the recording lacks fails its episode,
 * naming it; identical calls get their results in order; a killed run's recording still replays.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import {
  Environment,
  parseFaults,
  RecordingFileError,
  rollout,
  ToolRecording,
  TrajectorySchema,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { CLI, ROOT, kvCounterTask } from '../helpers.ts';

const tmp = () => mkdtempSync(join(tmpdir(), 'mcp-gym-tape-'));

/** Every task's servers replaced by a stdio command that does not exist: a replay must not need them. */
function unreachable(tasks: Task[]): Task[] {
  return tasks.map((t) => ({
    ...t,
    servers: Object.fromEntries(
      Object.keys(t.servers).map((alias) => [
        alias,
        { transport: 'stdio' as const, command: '/nonexistent/mcp-gym-no-such-server', args: [], restart: false, maxRestartsPerMinute: 0 },
      ]),
    ),
  }));
}

/** A trajectory without what differs from run to run: its random id and its timings. */
function comparable(t: Trajectory): unknown {
  const { id: _id, timings: _timings, ...rest } = t;
  return { ...rest, turns: t.turns.map(({ policy_ms: _p, ...turn }) => turn) };
}

/** A policy that plays fixed tool calls, one per turn, then answers. */
class Calls implements Policy {
  readonly id = 'calls';
  constructor(
    private readonly calls: { name: string; arguments: Record<string, unknown> }[],
    private readonly answer = 'done',
  ) {}
  async act(o: Observation): Promise<PolicyAction> {
    const c = this.calls[o.turn];
    return c ? { content: '', toolCalls: [c] } : { content: this.answer };
  }
}

const counterTask = kvCounterTask('counter', 6);

describe('record and replay', () => {
  it('a seeded rollout of the calculator and kv suites replays to the same trajectories with no server reachable', async () => {
    const file = join(tmp(), 'tape.jsonl');
    const tasks = [...generateSuite('calculator'), ...generateSuite('kv')].filter((t) => t.split === 'eval');
    const recording = new Environment({ record: file });
    const expert = await rollout(recording, new ExpertPolicy(), tasks, { group: 2, concurrency: 8 });
    // A seeded policy, one episode at a time (its draws follow the order of its turns), on kv.
    const kvTasks = tasks.filter((t) => t.servers.kv !== undefined).slice(0, 15);
    const random = await rollout(recording, new RandomPolicy(5, 0.2), kvTasks, { group: 2, concurrency: 1, iteration: 'random' });
    await recording.close();
    expect(expert.trajectories.filter((t) => t.success)).toHaveLength(tasks.length * 2);
    expect(random.trajectories.flatMap((t) => t.turns).flatMap((x) => x.tool_results).length).toBeGreaterThan(20);

    const lines = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ type: 'header', format: 'mcp-gym/tool-recording', version: 1 });
    const setupLine = lines.find((l) => l.type === 'call' && l.episode === `${kvTasks[0]!.id}@0#0` && l.seq === 0);
    expect(setupLine).toMatchObject({ server: 'kv', tool: kvTasks[0]!.setup[0]!.tool, n: 0, result: { isError: false } });
    expect(setupLine.ms).toBeGreaterThanOrEqual(0);
    // Each tool list is written out once, and by its hash after that.
    expect(lines.filter((l) => l.type === 'tools' && l.tools).length).toBe(2);

    const replaying = new Environment({ replay: file });
    const offline = unreachable(tasks);
    const expert2 = await rollout(replaying, new ExpertPolicy(), offline, { group: 2, concurrency: 8 });
    const random2 = await rollout(replaying, new RandomPolicy(5, 0.2), unreachable(kvTasks), { group: 2, concurrency: 1, iteration: 'random' });
    await replaying.close();
    // Episodes run at once finish in any order: compared by episode.
    const byEpisode = (ts: Trajectory[]) => [...ts].sort((a, b) => `${a.group_id}#${a.sample}`.localeCompare(`${b.group_id}#${b.sample}`)).map(comparable);
    expect(byEpisode(expert2.trajectories)).toEqual(byEpisode(expert.trajectories));
    expect(random2.trajectories.map(comparable)).toEqual(random.trajectories.map(comparable));
    for (const t of random2.trajectories) expect(TrajectorySchema.parse(t)).toBeTruthy();
    // Answers, tool results, rewards and checks, one by one (what a regression evaluation compares).
    for (const [i, t] of random2.trajectories.entries()) {
      const r = random.trajectories[i]!;
      expect([t.answer, t.reward, t.checks, t.turns.map((x) => x.tool_results)]).toEqual([r.answer, r.reward, r.checks, r.turns.map((x) => x.tool_results)]);
    }
  });

  it('the same episodes with and without faults (eval --faults) are recorded apart, and both replay', async () => {
    const file = join(tmp(), 'tape.jsonl');
    const tasks = generateSuite('kv')
      .filter((t) => t.split === 'eval')
      .slice(0, 6);
    const faults = { spec: parseFaults('timeout=0.4'), seed: 1 };
    const recording = new Environment({ record: file });
    const clean = await rollout(recording, new ExpertPolicy(), tasks, { concurrency: 4 });
    const faulted = await rollout(recording.withFaults(faults), new ExpertPolicy(), tasks, { concurrency: 4 });
    await recording.close();
    expect(faulted.trajectories.some((t) => t.turns.some((x) => x.tool_results.some((r) => r.fault === 'timeout')))).toBe(true);
    const replaying = new Environment({ replay: file });
    const clean2 = await rollout(replaying, new ExpertPolicy(), unreachable(tasks), { concurrency: 4 });
    const faulted2 = await rollout(replaying.withFaults(faults), new ExpertPolicy(), unreachable(tasks), { concurrency: 4 });
    await replaying.close();
    const outcome = (ts: Trajectory[]) => [...ts].sort((a, b) => a.task_id.localeCompare(b.task_id)).map((t) => [t.task_id, t.success, t.error]);
    expect(outcome(clean2.trajectories)).toEqual(outcome(clean.trajectories));
    expect(outcome(faulted2.trajectories)).toEqual(outcome(faulted.trajectories));
    expect(clean2.trajectories.every((t) => t.success)).toBe(true);
  });

  it('a call the recording lacks fails its episode, naming the episode, server, tool and arguments', async () => {
    const file = join(tmp(), 'tape.jsonl');
    const rec = new Environment({ record: file });
    const recorded = await rec.runEpisode(
      counterTask,
      new Calls(
        [
          { name: 'get', arguments: { key: 'c' } },
          { name: 'incr', arguments: { key: 'c', by: 5 } },
        ],
        '15',
      ),
      { groupId: 'g', sample: 0 },
    );
    await rec.close();
    expect(recorded.success).toBe(true);

    const replay = new Environment({ replay: file });
    const other = await replay.runEpisode(counterTask, new Calls([{ name: 'get', arguments: { key: 'zzz' } }]), { groupId: 'g', sample: 0 });
    expect(other.finish).toBe('error');
    expect(other.task_error).toBeUndefined();
    expect(other.error).toBe(
      `replay: no recorded call in episode g#0: server 'kv', tool 'get', arguments {"key":"zzz"} (kv.get was recorded with other arguments: {"key":"c"}; ${file})`,
    );
    expect(other.turns).toHaveLength(1); // the episode stopped at the call

    const never = await replay.runEpisode(counterTask, new Calls([{ name: 'delete', arguments: { key: 'c' } }]), { groupId: 'g', sample: 0 });
    expect(never.error).toMatch(
      /^replay: no recorded call in episode g#0: server 'kv', tool 'delete', arguments \{"key":"c"\} \(kv\.delete was not called in this episode of the recording/,
    );

    const elsewhere = await replay.runEpisode(counterTask, new ExpertPolicy(), { groupId: 'g', sample: 1 });
    expect(elsewhere).toMatchObject({ finish: 'error', success: false, reward: 0 });
    expect(elsewhere.error).toBe(`replay: episode g#1 is not in the recording ${file} (it holds 1 episode): its tools/list of server 'kv' cannot be served`);
    await replay.close();
  });

  it('the 2nd of two identical calls gets the 2nd result; a 4th of three is an error', async () => {
    const file = join(tmp(), 'tape.jsonl');
    const script = () =>
      new Calls(
        [
          { name: 'get', arguments: { key: 'c' } },
          { name: 'incr', arguments: { by: 5, key: 'c' } },
          { name: 'get', arguments: { key: 'c' } },
        ],
        '15',
      );
    const rec = new Environment({ record: file });
    const recorded = await rec.runEpisode(counterTask, script(), { groupId: 'g' });
    await rec.close();
    const calls = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((l) => l.type === 'call');
    expect(calls.map((c) => [c.seq, c.tool, c.n])).toEqual([
      [0, 'set', 0],
      [1, 'get', 0],
      [2, 'incr', 0],
      [3, 'get', 1],
      [4, 'get', 2],
    ]); // the last: the state check

    const replay = new Environment({ replay: file });
    const t = await replay.runEpisode(unreachable([counterTask])[0]!, script(), { groupId: 'g' });
    const values = t.turns.flatMap((x) => x.tool_results).map((s) => (s.structured as { value: string }).value);
    expect(values).toEqual(['10', '15', '15']);
    expect(comparable(t)).toEqual(comparable(recorded));
    expect(t.checks.map((c) => c.score)).toEqual([1, 1]);

    // Three gets were recorded (two by the agent, one by the check): the check's is the 4th here.
    const t4 = await replay.runEpisode(
      counterTask,
      new Calls(
        [0, 1, 2].map(() => ({ name: 'get', arguments: { key: 'c' } })),
        '15',
      ),
      { groupId: 'g' },
    );
    expect(t4.turns.flatMap((x) => x.tool_results).map((s) => (s.structured as { value: string }).value)).toEqual(['10', '15', '15']);
    expect(t4.finish).toBe('error');
    expect(t4.task_error).toBeUndefined();
    expect(t4.error).toMatch(
      /^replay: no recorded call in episode g#0: server 'kv', tool 'get', arguments \{"key":"c"\} \(the recording holds this call 3 times, and this is the 4th;/,
    );
    await replay.close();
  });

  it('a killed run leaves a recording that replays (its partial last line ignored, with a warning); bad files are clear errors', async () => {
    const dir = tmp();
    const file = join(dir, 'tape.jsonl');
    const rec = new Environment({ record: file });
    const recorded = await rec.runEpisode(counterTask, new ExpertPolicy(), { groupId: 'g' });
    await rec.close();
    appendFileSync(file, '{"type":"call","episode":"g#0","id":"x","se'); // as a kill mid-write leaves it
    const warnings: string[] = [];
    const loaded = ToolRecording.load(file, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual([
      `replay: ${file}:${readFileSync(file, 'utf8').split('\n').length}: the last line is partial (a run killed while writing it): ignored`,
    ]);
    const t = await new Environment({ replay: loaded }).runEpisode(counterTask, new ExpertPolicy(), { groupId: 'g' });
    expect(comparable(t)).toEqual(comparable(recorded));

    // Recording again into the same file appends: the cut line is removed first, and the later recording of an episode wins.
    const again = new Environment({ record: file });
    await again.runEpisode(counterTask, new Calls([{ name: 'incr', arguments: { key: 'c', by: 5 } }], '15'), { groupId: 'g' });
    await again.close();
    expect(readFileSync(file, 'utf8').includes('"se{')).toBe(false);
    const t2 = await new Environment({ replay: file }).runEpisode(counterTask, new Calls([{ name: 'incr', arguments: { key: 'c', by: 5 } }], '15'), {
      groupId: 'g',
    });
    expect(t2.success).toBe(true);

    expect(() => ToolRecording.load(join(dir, 'missing.jsonl'))).toThrow(
      new RecordingFileError(`replay: ${join(dir, 'missing.jsonl')}: no such file (make one with --record ${join(dir, 'missing.jsonl')})`),
    );
    expect(() => ToolRecording.load(dir)).toThrow(/^replay: cannot read .*EISDIR/);
    const lines = readFileSync(file, 'utf8').split('\n');
    writeFileSync(join(dir, 'bad.jsonl'), [lines[0], lines[1], '{not json', lines[2], ''].join('\n'));
    expect(() => ToolRecording.load(join(dir, 'bad.jsonl'))).toThrow(`replay: ${join(dir, 'bad.jsonl')}:3: invalid JSON`);
    writeFileSync(join(dir, 'bad.jsonl'), [lines[0], '{"type":"call","episode":"g#0"}', ''].join('\n'));
    expect(() => ToolRecording.load(join(dir, 'bad.jsonl'))).toThrow(`replay: ${join(dir, 'bad.jsonl')}:2: invalid line: id:`);
    writeFileSync(join(dir, 'traj.jsonl'), JSON.stringify({ id: 'x', task_id: 'y' }) + '\n');
    expect(() => ToolRecording.load(join(dir, 'traj.jsonl'))).toThrow(`replay: ${join(dir, 'traj.jsonl')}:1: not an mcp-gym tool recording`);
    expect(() => new Environment({ record: file, replay: file })).toThrow(/not both/);
  });
});

describe('mcp-gym rollout --record / --replay', () => {
  const exec = promisify(execFile);
  const cli = (args: string[]) =>
    exec(process.execPath, [CLI, 'rollout', ...args], { cwd: ROOT }).then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
    );
  const successes = (dir: string) =>
    readFileSync(join(dir, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory)
      .map((t) => `${t.group_id}#${t.sample}:${t.success}:${t.reward}`)
      .sort();

  it('a recorded rollout replays with the same successes and rewards; bad replays are reported', async () => {
    const dir = tmp();
    const tape = join(dir, 'tape.jsonl');
    const common = ['--suite', 'kv', '--limit', '6', '--group', '2', '--policy', 'expert', '--concurrency', '4', '--json'];
    const a = await cli([...common, '--record', tape, '--out', join(dir, 'a')]);
    expect(a.code).toBe(0);
    const b = await cli([...common, '--replay', tape, '--stdio', '--out', join(dir, 'b')]);
    expect(b.code).toBe(0);
    expect(successes(join(dir, 'b'))).toEqual(successes(join(dir, 'a')));
    const [sa, sb] = [a, b].map((r) => JSON.parse(r.stdout.trim().split('\n').at(-1)!));
    expect(sa).toMatchObject({ episodes: 12, success_rate: 1 });
    expect(sb).toMatchObject({ episodes: 12, failed_episodes: 0, success_rate: 1, mean_reward: sa.mean_reward, reward_parts: sa.reward_parts });

    // Another suite's episodes are not in the recording: each fails, and the run says why (exit 4: every episode failed).
    const c = await cli(['--suite', 'calculator', '--limit', '2', '--replay', tape, '--out', join(dir, 'c'), '--json']);
    expect(c.code).toBe(4);
    expect(JSON.parse(c.stdout.trim().split('\n').at(-1)!)).toMatchObject({ episodes: 2, failed_episodes: 2, success_rate: 0 });
    expect(c.stdout).toMatch(/replay: episode calculator-\S+ is not in the recording/);

    const missing = await cli(['--suite', 'kv', '--replay', join(dir, 'nope.jsonl'), '--out', join(dir, 'd')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`replay: ${join(dir, 'nope.jsonl')}: no such file`);
    const again = await cli(['--suite', 'kv', '--limit', '1', '--record', tape, '--out', join(dir, 'e')]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already holds a recording: pass --resume/);
  });
});
