/**
 * `serve-env` against OpenEnv's own Python client: openenv-core (learner/requirements-openenv.lock,
 * installed into the learner's venv when missing) runs examples/openenv_client.py against a real
 * server: its WebSocket EnvClient plays 50 episodes of the expert's solutions (100% success, the
 * reward of each episode in-process) and 50 of a random policy (about 0%), 16 sessions at once with
 * its async client (each ends with its own task), and the HTTP routes, every answer validated by
 * openenv-core's own pydantic models (ResetResponse, StepResponse, SchemaResponse, ...).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { Environment } from '../../src/env/index.ts';
import { startEnvServer, type EnvServer } from '../../src/env/openenv/server.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { ensureOpenEnvPackages } from '../../src/trainers/venv-packages.ts';
import { kvCounterTask, ROOT } from '../helpers.ts';

const venv = existsSync(join(ROOT, '.venv', 'bin', 'python'));
const env = new Environment();
const counter = kvCounterTask('counter-shared');
const tasks = [...generateSuite('kv'), ...generateSuite('calculator')].filter((t) => t.split === 'train' && t.difficulty <= 2).concat([counter]);
let server: EnvServer;
let python = '';

beforeAll(async () => {
  if (!venv) return;
  python = ensureOpenEnvPackages();
  server = await startEnvServer({ env, tasks, name: 'mcp-gym:kv+calculator', version: '0.1.0', maxSessions: 32 });
}, 600_000);
afterAll(async () => {
  await server?.close();
  await env.close();
});

/** Runs the client (asynchronously: the server answers from this process). */
async function client(args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await promisify(execFile)(python, [join(ROOT, 'examples', 'openenv_client.py'), '--url', server.url, ...args], {
    encoding: 'utf8',
    timeout: 300_000,
    maxBuffer: 16 * 2 ** 20,
  });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

describe.skipIf(!venv)("serve-env with openenv-core's client", () => {
  it("the expert's solutions: 50 episodes at 100% over the WebSocket client, 16 sessions at once, the HTTP routes", async () => {
    // 50 tasks, a mix of kv (server state) and calculator; the reward each gets in-process
    const chosen = [...tasks.filter((t) => t.id.startsWith('kv')).slice(0, 25), ...tasks.filter((t) => !t.id.startsWith('kv')).slice(0, 25)];
    expect(chosen).toHaveLength(50);
    const solutions = Object.fromEntries(
      [...chosen, counter].map((t) => [t.id, { calls: t.solution!.calls.map((c) => ({ tool: c.tool, arguments: c.arguments })), answer: t.solution!.answer }]),
    );
    const file = join(mkdtempSync(join(tmpdir(), 'mcp-gym-openenv-')), 'solutions.json');
    writeFileSync(file, JSON.stringify(solutions));
    const out = await client([
      '--policy',
      'expert',
      '--episodes',
      '50',
      '--solutions',
      file,
      '--concurrent',
      '16',
      '--concurrent-task',
      counter.id,
      '--check-http',
    ]);
    console.log(
      `openenv-core client, expert: ${out.episodes} episodes, success ${out.success_rate}, mean reward ${out.mean_reward}; concurrent ${JSON.stringify(out.concurrent)}`,
    );
    expect(out).toMatchObject({ episodes: 50, success_rate: 1, finishes: ['answer'] });
    const expected = await Promise.all(chosen.map((t) => env.runEpisode(t, new ExpertPolicy()).then((r) => r.reward)));
    const got = out.rewards as number[];
    got.forEach((r, i) => expect(r).toBeCloseTo(expected[i]!, 12));
    expect(out.concurrent).toEqual({ sessions: 16, success: 16, own_task: 16 });
    expect(out.http).toMatchObject({
      metadata_name: 'mcp-gym:kv+calculator',
      schema_keys: ['action', 'observation', 'state'],
      done: true,
      success: true,
      bad_status: 422,
    });
  }, 600_000);

  it('a random policy: about 0%', async () => {
    const out = await client(['--policy', 'random', '--episodes', '50']);
    console.log(`openenv-core client, random: ${out.episodes} episodes, success ${out.success_rate}, mean reward ${out.mean_reward}`);
    expect(out.episodes).toBe(50);
    expect(out.success_rate as number).toBeLessThanOrEqual(0.06);
  }, 600_000);
});
