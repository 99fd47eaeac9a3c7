/**
 * Many inference servers, end to end: three `mcp-gym serve-policy` processes on loopback serving
 * the bundled model, `mcp-gym eval` and `mcp-gym train --policy openai:calc-tiny` with them as
 * `--base-url`s. The train run's first server is killed (SIGKILL) once the first step is recorded,
 * while the next step samples: the run completes, no episode is lost or duplicated, every turn
 * says which server and which weights sampled it, and the metrics count each server's turns (the
 * killed one's stop, the others carry on) and report the killed one out. The flags' usage errors
 * name the flag, the file and the line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../../src/env/index.ts';
import { resolveConfig } from '../../src/trainers/index.ts';
import { CLI, ROOT, runCli, sleep } from '../helpers.ts';

const STEPS = 3;
const TASKS = 3;
const GROUP = 4;

/** `mcp-gym serve-policy --port 0` in its own process, and the URL it says it serves at. */
async function servePolicy(): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [CLI, 'serve-policy', '--port', '0'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  const url = await new Promise<string>((resolve, reject) => {
    let err = '';
    proc.stderr!.on('data', (c: Buffer) => {
      err += c.toString();
      const m = /at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(err);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`serve-policy exited (${code}): ${err}`)));
  });
  return { proc, url };
}

const jsonl = <T>(file: string): T[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as T);

interface ServerRow {
  turns: number;
  healthy: boolean;
  state: string;
  version?: number;
  failures: number;
  pushes: number;
  last_error?: string;
}

describe('train and eval through three serve-policy processes, one killed mid-run', () => {
  let tmp: string;
  const servers: { proc: ChildProcess; url: string }[] = [];
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-fleet-'));
    servers.push(...(await Promise.all([servePolicy(), servePolicy(), servePolicy()])));
  });
  afterAll(() => {
    for (const s of servers) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGTERM');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('usage errors name the flag, the file and its line; a config file may list the servers', async () => {
    const urls = join(tmp, 'urls.txt');
    writeFileSync(urls, `# the fleet\n${servers[0]!.url}\n\n${servers[1]!.url}  # second\nnot-a-url\n`);
    const bad = await runCli(['train', '--policy', 'openai:calc-tiny', '--base-urls-file', urls, '--run', join(tmp, 'never')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`--base-urls-file ${urls}:5: 'not-a-url' is not a URL such as http://127.0.0.1:8000/v1`);
    const badFlag = await runCli(['train', '--policy', 'openai:calc-tiny', '--base-url', servers[0]!.url, '--base-url', 'ftp://x/v1']);
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toContain("--base-url: 'ftp://x/v1' is not an http or https URL");
    const twice = await runCli(['eval', '--suite', 'calculator', '--policy', 'openai:calc-tiny', '--base-url', servers[0]!.url, '--base-url', servers[0]!.url]);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain(`${servers[0]!.url} is given twice`);
    const none = await runCli(['train', '--policy', 'openai:calc-tiny']);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/policy: 'openai:calc-tiny' needs base_url \(--base-url URL, repeated for several servers, or --base-urls-file FILE\)/);
    // A config file lists them; a bad entry is named by its index.
    const file = join(tmp, 'config.json');
    writeFileSync(file, JSON.stringify({ rollout: { policy: 'openai:calc-tiny', base_url: servers.map((s) => s.url) } }));
    expect(resolveConfig({}, file).base_url).toEqual(servers.map((s) => s.url));
    writeFileSync(file, JSON.stringify({ policy: 'openai:calc-tiny', base_url: [servers[0]!.url, 'nope'] }));
    expect(() => resolveConfig({}, file)).toThrow(`${file}: base_url.1: 'nope' is not a URL such as http://127.0.0.1:8000/v1`);
  });

  it('eval with two --base-url: the episodes are spread over both, each turn names its server', async () => {
    const out = join(tmp, 'eval');
    const [a, b] = [servers[1]!.url, servers[2]!.url];
    const r = await runCli(
      ['eval', '--suite', 'calculator', '--limit', '4', '--max-difficulty', '1', '-k', '2', '--concurrency', '8'].concat([
        '--policy',
        'openai:calc-tiny',
        '--base-url',
        a,
        '--base-url',
        b,
        '--out',
        out,
        '--json',
      ]),
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(report.episodes).toBe(8);
    expect(report.failed_episodes).toBe(0);
    const turns = jsonl<Trajectory>(join(out, 'trajectories.jsonl')).flatMap((t) => t.turns);
    expect(turns.every((u) => u.policy_server === a || u.policy_server === b)).toBe(true);
    expect(turns.some((u) => u.policy_server === a)).toBe(true); // the first request goes to the first server
    expect(JSON.parse(readFileSync(join(out, 'run.json'), 'utf8')).api.base_url).toEqual([a, b]);
  });

  it('train: the first server killed after step 1; the run completes, nothing lost or duplicated, per-server counts in the metrics', async () => {
    const runDir = join(tmp, 'run');
    const urls = servers.map((s) => s.url);
    const args = ['train', '--preset', 'grpo', '--policy', 'openai:calc-tiny', ...urls.flatMap((u) => ['--base-url', u])];
    args.push('--suite', 'calculator', '--max-difficulty', '1', '--steps', String(STEPS), '--tasks-per-step', String(TASKS), '--group', String(GROUP));
    args.push('--eval-every', '0', '--eval-samples', '1', '--eval-limit', '3', '--max-new-tokens', '48', '--max-staleness', '0');
    args.push('--request-timeout-ms', '30000', '--run', runDir);
    const trainer = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    trainer.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    trainer.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => trainer.once('exit', (code) => resolve(code)));
    // Step 1 recorded: the next step's sampling starts now; the first server dies under it.
    const metricsFile = join(runDir, 'metrics.jsonl');
    let done = false;
    void exited.then(() => (done = true));
    while (!done && !(existsSync(metricsFile) && readFileSync(metricsFile, 'utf8').trim().split('\n').filter(Boolean).length >= 1)) await sleep(25);
    expect(done, `the run ended before its first step was recorded: ${stderr}`).toBe(false);
    servers[0]!.proc.kill('SIGKILL');
    expect(await exited, stderr).toBe(0);

    // Every episode of every step once: steps x tasks x group, unique ids and (group, sample), none failed.
    const trajs = jsonl<Trajectory>(join(runDir, 'trajectories.jsonl'));
    expect(trajs).toHaveLength(STEPS * TASKS * GROUP);
    expect(new Set(trajs.map((t) => t.id)).size).toBe(trajs.length);
    expect(new Set(trajs.map((t) => `${t.group_id}#${t.sample}`)).size).toBe(trajs.length);
    expect(trajs.filter((t) => t.finish === 'error').map((t) => t.error)).toEqual([]);
    const stepOf = (t: Trajectory) => Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
    for (let s = 1; s <= STEPS; s++) expect(trajs.filter((t) => stepOf(t) === s)).toHaveLength(TASKS * GROUP);

    // Every turn names its server and its weights: step s samples with the weights after step s - 1.
    const rows = jsonl<Record<string, unknown>>(join(runDir, 'metrics.jsonl'));
    expect(rows.map((m) => m.step)).toEqual([1, 2, 3]);
    const versionAfter = rows.map((m) => m.policy_version as number);
    const firstVersions = new Set(trajs.filter((t) => stepOf(t) === 1).flatMap((t) => t.turns.map((u) => u.policy_version)));
    expect(firstVersions.size).toBe(1);
    expect([...firstVersions][0]).toBeLessThan(versionAfter[0]!);
    for (const t of trajs) {
      for (const u of t.turns) {
        expect(urls).toContain(u.policy_server);
        if (stepOf(t) > 1) expect(u.policy_version).toBe(versionAfter[stepOf(t) - 2]);
      }
    }

    // Per server and step: the turns the trajectories say it sampled; the killed one's stop once it is out.
    const perServer = rows.map((m) => m.policy_servers as Record<string, ServerRow>);
    for (const [i, servers_] of perServer.entries()) {
      expect(Object.keys(servers_).sort()).toEqual([...urls].sort());
      for (const u of urls) {
        const counted = trajs.filter((t) => stepOf(t) === i + 1).flatMap((t) => t.turns.filter((x) => x.policy_server === u)).length;
        expect(servers_[u]!.turns).toBe(counted);
      }
    }
    const [killed, second, third] = urls as [string, string, string];
    expect(perServer[0]![killed]!.turns).toBeGreaterThan(0); // it sampled step 1 (the first request goes to the first server)
    const out = perServer.findIndex((x) => !x[killed]!.healthy);
    expect(out).toBeGreaterThanOrEqual(0);
    for (const x of perServer.slice(out + 1)) expect(x[killed]!.turns).toBe(0);
    const last = perServer.at(-1)!;
    expect(last[killed]!.healthy).toBe(false);
    expect(['out', 'syncing']).toContain(last[killed]!.state); // syncing: a probe in flight as the row was written
    expect(last[killed]!.last_error).toBeTruthy();
    expect(perServer.reduce((n, x) => n + x[killed]!.failures, 0)).toBe(1);
    for (const u of [second, third]) {
      expect(last[u]).toMatchObject({ healthy: true, state: 'healthy', version: versionAfter.at(-1) });
      expect(last[u]!.turns).toBeGreaterThan(0); // the others carry the last step between them
      // Each step's weights reached it (the first row counts the load at the start too).
      expect(perServer.map((x) => x[u]!.pushes)).toEqual([2, 1, 1]);
    }
    expect(rows.at(-1)!.policy_servers_healthy).toBe(2);
    console.log(
      `fleet: ${trajs.length} episodes, ${new Set(trajs.map((t) => t.id)).size} distinct; turns per step by server (killed first): ` +
        perServer.map((x, i) => `step ${i + 1} ${urls.map((u) => x[u]!.turns).join('/')}`).join(', '),
    );

    // Said as it happened: the server taken out, named with its error; each step's servers in one line.
    expect(stdout).toMatch(new RegExp(`policy: the server ${killed.replace(/[.]/g, '\\.')} is taken out: .+; probed again in 2 s`));
    expect(stdout).toMatch(new RegExp(`step 3: servers: ${killed.replace(/[.]/g, '\\.')} 0 turns \\((out|syncing): `));
  }, 180_000);
});
