/**
 * `mcp-gym view` (src/view/), against fixture directories made by real short runs of the CLI (the
 * built dist/: run `node scripts/build.mjs` first): two training runs (art and grpo, 2 steps of 4x4
 * on calculator), one that fails (its learner cannot be reached), an eval and a bench with --out.
 *
 * The API: discovery, each status (finished, failed, running, then stopped by Ctrl-C, then a run
 * killed outright), metrics since N, ids that try to leave the roots, the token. The page: driven
 * in Debian's Chromium by playwright-core (skipped, saying so, when /usr/bin/chromium is absent):
 * the list, two runs' curves overlaid (their points read back through the axes and compared with
 * metrics.jsonl), the config differences, a trajectory with its tool calls (two of a group side by
 * side), the eval and bench views, and a step appended to metrics.jsonl appearing without a reload.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handler, startViewer, type Entry, type Viewer } from '../../src/view/index.ts';
import { describe as describeEntry } from '../../src/view/discover.ts';
import { readTrajectories } from '../../src/env/index.ts';
import { stageEval } from '../../src/trainers/model-job.ts';
import { CLI, ROOT, runCli, sleep } from '../helpers.ts';
const FRAGILE = join(ROOT, 'test', 'bench', 'fragile-server.ts');

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = process.env.MCP_GYM_VIEW_SHOTS ?? join(tmpdir(), 'mcp-gym-view-shots');
const SMALL = ['--suite', 'calculator', '--max-difficulty', '1', '--steps', '2', '--tasks-per-step', '4', '--group', '4', '--eval-limit', '8'];

let dir: string;
let viewer: Viewer;
const children: ChildProcess[] = [];

function rows(file: string): Record<string, unknown>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** GET with the path sent byte for byte (fetch would normalise `..` away). */
function rawGet(base: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, headers }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function getJson<T = Record<string, unknown>>(path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: T }> {
  const res = await fetch(new URL(path, viewer.url), { headers });
  return { status: res.status, body: (await res.json()) as T };
}

async function entries(): Promise<Entry[]> {
  return (await getJson<{ entries: Entry[] }>('/api/list')).body.entries;
}
const byName = async (name: string) => (await entries()).find((e) => e.name === name);

async function waitFor<T>(what: string, f: () => Promise<T | undefined> | T | undefined, ms = 60_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mcp-gym-view-'));
  mkdirSync(join(dir, 'nested'), { recursive: true });
  const made = await Promise.all([
    runCli(['train', '--preset', 'art', ...SMALL, '--run', join(dir, 'run-art')]),
    runCli(['train', '--preset', 'grpo', ...SMALL, '--lr', '0.0002', '--run', join(dir, 'nested', 'run-grpo')]),
    runCli(['train', '--preset', 'art', ...SMALL, '--learner', 'http://127.0.0.1:1', '--run', join(dir, 'run-fail')]),
    runCli(['eval', '--suite', 'calculator,kv', '-k', '2', '--limit', '3', '--policy', 'random:3', '--out', join(dir, 'eval-random')]),
    runCli([
      'bench',
      '--stdio',
      `${process.execPath} ${CLI} serve kv`,
      '--calls',
      '10',
      '--concurrency',
      '1,4',
      '--duration-ms',
      '300',
      '--fuzz',
      '--fuzz-cases',
      '10',
      '--out',
      join(dir, 'bench-kv'),
    ]),
    // A server that crashes on one input: a fuzz finding with the input that triggered it.
    runCli([
      'bench',
      '--stdio',
      `${process.execPath} --import tsx ${FRAGILE}`,
      '--calls',
      '0',
      '--exclude',
      'blocky,hangy',
      '--fuzz',
      '--fuzz-cases',
      '10',
      '--timeout-ms',
      '800',
      '--out',
      join(dir, 'bench-fragile'),
    ]),
  ]);
  for (const [i, r] of made.entries()) if (i !== 2 && r.code !== 0) throw new Error(`fixture ${i} failed (${r.code}): ${r.stderr.slice(-2000)}`);
  expect(made[2]!.code).not.toBe(0);
  // Off a terminal, train's progress is plain lines: the step, success, reward, the last step's seconds and the time left.
  const progress = made[0]!.stderr.split('\n').filter((l) => l.startsWith('train '));
  expect(progress.length).toBeGreaterThan(0);
  for (const l of progress) expect(l).toMatch(/^train \d+\/\d+ \(\d+%\) success \d+% reward -?[\d.]+ last step [\d.]+ s ETA \d+m\d\ds$/);
  expect(progress.at(-1)).toMatch(/ ETA 0m00s$/);
  viewer = await startViewer({ roots: [dir] });
}, 300_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await viewer?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('mcp-gym view: the API', () => {
  it('finds every run, eval and bench directory under the roots, with its kind, settings and status', async () => {
    const list = await entries();
    const named = Object.fromEntries(list.map((e) => [e.name, e]));
    expect(Object.keys(named).sort()).toEqual(['bench-fragile', 'bench-kv', 'eval-random', 'run-art', 'run-fail', 'run-grpo']);
    const art = named['run-art']!;
    expect(art).toMatchObject({ kind: 'run', preset: 'art', suite: 'calculator', status: 'finished', steps: 2, steps_total: 2 });
    expect(art.before?.ci95).toHaveLength(2);
    expect(art.after?.success).toBeTypeOf('number');
    expect(named['run-grpo']).toMatchObject({ kind: 'run', preset: 'grpo', status: 'finished', id: '0/nested/run-grpo' });
    expect(named['run-fail']).toMatchObject({ kind: 'run', status: 'failed' });
    expect(named['run-fail']!.status_note).toMatch(/learner/);
    expect(named['eval-random']).toMatchObject({ kind: 'eval', policy: 'random', status: 'finished', steps: 12 });
    expect(named['bench-kv']).toMatchObject({ kind: 'bench', status: 'finished', preset: 'mcp-gym-kv' });
    const bench = (await getJson(`/api/run/${encodeURIComponent(named['bench-kv']!.id)}/bench`)).body as { fuzz: { failures: unknown[] }; skipped: unknown[] };
    expect(bench.skipped.length).toBeGreaterThan(0);
  });

  it('labels a run trained on a task file with that file, not the default suite its config keeps beside it', () => {
    const copy = mkdtempSync(join(tmpdir(), 'mcp-gym-view-tasks-'));
    try {
      cpSync(join(dir, 'run-art'), join(copy, 'run-tasks'), { recursive: true });
      const cfgFile = join(copy, 'run-tasks', 'config.json');
      writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(readFileSync(cfgFile, 'utf8')), suite: 'calculator', tasks: '/data/my-tasks.jsonl' }));
      expect(describeEntry(join(copy, 'run-tasks'), '0/run-tasks')).toMatchObject({ kind: 'run', suite: '/data/my-tasks.jsonl' });
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it('serves a run metrics from row N, its evaluations and its config', async () => {
    const id = encodeURIComponent('0/run-art');
    const all = rows(join(dir, 'run-art', 'metrics.jsonl'));
    const m = (await getJson<{ rows: unknown[]; next: number; evals: unknown[] }>(`/api/run/${id}/metrics?since=1`)).body;
    expect(m.next).toBe(all.length);
    expect(m.rows).toEqual(all.slice(1));
    expect(m.evals).toHaveLength(2);
    expect((await getJson<{ rows: unknown[] }>(`/api/run/${id}/metrics?since=99`)).body.rows).toEqual([]);
    const config = (await getJson(`/api/run/${id}/config`)).body;
    expect(config).toMatchObject({ preset: 'art', steps: 2, group: 4 });
    const t = (
      await getJson<{ total: number; matched: number; items: { success: boolean; step: number; reward: number }[] }>(
        `/api/run/${id}/trajectories?outcome=failure&step=2&max=10`,
      )
    ).body;
    expect(t.total).toBe(32);
    expect(t.items.every((x) => !x.success && x.step === 2)).toBe(true);
    const one = (await getJson<{ trajectory: { turns: Record<string, unknown>[] } }>(`/api/run/${id}/trajectory/0`)).body;
    expect(one.trajectory.turns[0]).not.toHaveProperty('tokens');
    expect((await getJson(`/api/run/${id}/trajectory/32`)).status).toBe(404);
  });

  it('tells a running run, one stopped with Ctrl-C and one whose process died', async () => {
    const live = join(dir, 'run-live');
    const start = () => {
      const child = spawn(
        process.execPath,
        [
          CLI,
          'train',
          '--preset',
          'art',
          ...SMALL,
          '--steps',
          '40',
          '--eval-limit',
          '2',
          '--run',
          live,
          ...(existsSync(join(live, 'state.json')) ? ['--resume'] : []),
        ],
        { cwd: ROOT, stdio: 'ignore' },
      );
      children.push(child);
      return child;
    };
    let child = start();
    await waitFor('the run to write a step', () => existsSync(join(live, 'metrics.jsonl')) && readFileSync(join(live, 'metrics.jsonl'), 'utf8').includes('\n'));
    expect(await byName('run-live')).toMatchObject({ status: 'running', steps_total: 40 });
    child.kill('SIGINT');
    await new Promise((r) => child.once('exit', r));
    const stopped = await byName('run-live');
    expect(stopped).toMatchObject({ status: 'stopped' });
    expect(stopped!.steps).toBeGreaterThanOrEqual(1);
    // Killed outright: status.json still says running, but its process is gone.
    child = start();
    await waitFor('the resumed run to say it runs', async () => (await byName('run-live'))?.status === 'running');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const dead = await byName('run-live');
    expect(dead).toMatchObject({ status: 'failed' });
    expect(dead!.status_note).toMatch(/process .* is gone/);
    rmSync(live, { recursive: true, force: true });
  }, 120_000);

  it('infers the status of a run without status.json from its files', async () => {
    const old = join(dir, 'run-old');
    mkdirSync(old);
    writeFileSync(join(old, 'config.json'), JSON.stringify({ preset: 'art', steps: 5 }));
    writeFileSync(join(old, 'metrics.jsonl'), JSON.stringify({ step: 1, reward_mean: 0.5 }) + '\n');
    expect(await byName('run-old')).toMatchObject({ status: 'running', steps: 1 });
    const then = new Date(Date.now() - 3_600_000);
    for (const f of ['config.json', 'metrics.jsonl']) utimesSync(join(old, f), then, then);
    expect(await byName('run-old')).toMatchObject({ status: 'stopped' });
    rmSync(old, { recursive: true, force: true });
  });

  it('refuses ids that lead outside the roots', async () => {
    const outside = mkdtempSync(join(tmpdir(), 'mcp-gym-view-outside-'));
    writeFileSync(join(outside, 'config.json'), JSON.stringify({ secret: 'outside' }));
    writeFileSync(join(outside, 'metrics.jsonl'), '{"step":1}\n');
    symlinkSync(outside, join(dir, 'link-out'));
    try {
      const rel = join('..', outside.split('/').at(-1)!);
      for (const id of [
        `0/${rel}`,
        '0/..',
        '0/../..',
        `0/nested/../../${outside.split('/').at(-1)}`,
        '1/run-art',
        '-1/run-art',
        `/${outside}`,
        `0/${outside}`,
        '0/link-out',
        '0/run-art/../../etc',
        'x',
        '0/run-art%00',
      ]) {
        const res = await rawGet(viewer.url, `/api/run/${encodeURIComponent(id)}/config`);
        expect(res.status, id).toBe(404);
        expect(res.body).not.toContain('outside"');
      }
      for (const path of [
        '/api/run/0/../../etc/passwd',
        '/../../etc/passwd',
        '/api/run/0%2F..%2F..%2Fetc/config',
        '/api/run/%2e%2e/config',
        '/app.js/../../../etc/passwd',
      ]) {
        const res = await rawGet(viewer.url, path);
        expect([400, 404], path).toContain(res.status);
        expect(res.body).not.toContain('root:');
      }
      expect((await entries()).map((e) => e.name)).not.toContain('link-out');
      expect((await rawGet(viewer.url, '/api/list', { host: 'evil.example:80' })).status).toBe(403);
    } finally {
      rmSync(join(dir, 'link-out'), { force: true });
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it('reads no file of an entry that is a link out of the roots; serves no secret of a config', async () => {
    const outside = mkdtempSync(join(tmpdir(), 'mcp-gym-view-outside-'));
    writeFileSync(join(outside, 's.jsonl'), '{"secret":"outside-root"}\n');
    const run = join(dir, 'run-linked');
    mkdirSync(run);
    writeFileSync(join(run, 'config.json'), JSON.stringify({ preset: 'art', steps: 2, learner_token: 'TOKEN-123', api_key_env: 'MY_KEY' }));
    writeFileSync(join(run, 'metrics.jsonl'), '{"step":1,"reward_mean":0.5}\n');
    symlinkSync(join(outside, 's.jsonl'), join(run, 'eval.jsonl'));
    symlinkSync(join(outside, 's.jsonl'), join(run, 'trajectories.jsonl'));
    try {
      const id = encodeURIComponent((await entries()).find((e) => e.name === 'run-linked')!.id);
      for (const what of ['metrics', 'trajectories']) expect((await rawGet(viewer.url, `/api/run/${id}/${what}`)).body).not.toContain('outside-root');
      const config = JSON.parse((await rawGet(viewer.url, `/api/run/${id}/config`)).body) as Record<string, unknown>;
      expect(config).toMatchObject({ preset: 'art', learner_token: '(hidden)', api_key_env: 'MY_KEY' });
    } finally {
      rmSync(run, { recursive: true, force: true });
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("bound to 0.0.0.0, accepts only this machine's names in the Host header (no DNS rebinding), and --allowed-host ones", async () => {
    const wide = await startViewer({ roots: [dir], host: '0.0.0.0', allowedHosts: ['runs.lab.example'] });
    try {
      const local = `http://127.0.0.1:${wide.port}/`;
      expect((await rawGet(local, '/api/list', { host: 'attacker.example:80' })).status).toBe(403);
      expect((await rawGet(local, '/api/list', { host: `127.0.0.1:${wide.port}` })).status).toBe(200);
      expect((await rawGet(local, '/api/list', { host: `${hostname()}:${wide.port}` })).status).toBe(200);
      expect((await rawGet(local, '/api/list', { host: `runs.lab.example:${wide.port}` })).status).toBe(200);
    } finally {
      await wide.close();
    }
  });

  it('with a token, answers only requests that carry it; refuses an empty token', async () => {
    const guarded = await startViewer({ roots: [dir], token: 's3cret token' });
    try {
      expect(guarded.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=s3cret%20token$/);
      const base = guarded.url.split('?')[0]!;
      expect((await fetch(`${base}api/list`)).status).toBe(401);
      expect((await fetch(`${base}`)).status).toBe(401);
      expect((await fetch(`${base}api/list`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
      expect((await fetch(`${base}api/list`, { headers: { authorization: 'Bearer s3cret token' } })).status).toBe(200);
      expect((await fetch(`${base}api/list?token=s3cret%20token`)).status).toBe(200);
      const page = await (await fetch(guarded.url)).text();
      expect(page).toContain('app.js?token=s3cret%20token');
    } finally {
      await guarded.close();
    }
    expect(() => handler({ roots: [dir], token: '', host: '127.0.0.1' })).toThrow(/empty/);
    const r = await runCli(['view', dir, '--token', '']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--token is empty/);
  });

  it('the CLI prints the URL it serves on', async () => {
    const child = spawn(process.execPath, [CLI, 'view', dir, '--port', '0'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (c) => (out += c));
    const url = await waitFor('the URL', () => /mcp-gym view: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out)?.[1], 20_000);
    const list = (await (await fetch(`${url}api/list`)).json()) as { entries: Entry[] };
    expect(list.entries.length).toBe(6);
    child.kill('SIGINT');
    await new Promise((r) => child.once('exit', r));
  });
});

describe('mcp-gym view: a real-model job (mcp-gym start --model)', () => {
  it("lists the job with its three evaluations and its RL run; serves each stage's trajectories, tagged and filtered by stage", async () => {
    // A job directory in the layout runModelJob writes, from the fixtures' real episodes: the eval's as
    // the base evaluation, the art run as the RL stage (its first and last evaluations: SFT and RL).
    const root = mkdtempSync(join(tmpdir(), 'mcp-gym-view-job-'));
    const job = join(root, 'job');
    mkdirSync(join(job, 'base'), { recursive: true });
    cpSync(join(dir, 'run-art'), join(job, 'rl'), { recursive: true });
    cpSync(join(dir, 'eval-random', 'trajectories.jsonl'), join(job, 'base', 'trajectories.jsonl'));
    const evalFiles = readdirSync(join(job, 'rl', 'evals')).sort();
    const read = (f: string) => readTrajectories(join(job, f));
    const stage = (f: string) => stageEval(read(f), 2, f);
    const files = { base: 'base/trajectories.jsonl', sft: `rl/evals/${evalFiles[0]}`, rl: `rl/evals/${evalFiles.at(-1)}` };
    const result = {
      model: 'smollm2-135m',
      suite: 'calculator (difficulty 1-1)',
      base: stage(files.base),
      sft: stage(files.sft),
      rl: stage(files.rl),
      rl_minus_sft: { points: 1, ci95: [-2, 4], tasks: 8 },
      seconds: { sft: 1, rl: 2, eval: 3, total: 6 },
    };
    writeFileSync(join(job, 'base', 'eval.json'), JSON.stringify(result.base));
    writeFileSync(
      join(job, 'job.json'),
      JSON.stringify({
        config: { model_name: 'smollm2-135m', suite: 'calculator', min_difficulty: 1, max_difficulty: 1, eval_tasks: 8, k: 2, rl: { preset: 'art' } },
        seconds: result.seconds,
        result,
      }),
    );
    const v = await startViewer({ roots: [root] });
    try {
      const list = ((await (await fetch(new URL('/api/list', v.url))).json()) as { entries: Entry[] }).entries;
      expect(list.map((e) => [e.id, e.kind]).sort()).toEqual([
        ['0/job', 'job'],
        ['0/job/rl', 'run'],
      ]);
      const e = list.find((x) => x.kind === 'job')!;
      expect(e).toMatchObject({ model: 'smollm2-135m', preset: 'art', status: 'finished', suite: 'calculator (difficulty 1-1)' });
      expect(e.stages).toEqual({
        base: { success: result.base.success, ci95: result.base.ci95 },
        sft: { success: result.sft.success, ci95: result.sft.ci95 },
        rl: { success: result.rl.success, ci95: result.rl.ci95 },
      });
      const api = async (path: string) =>
        (await fetch(new URL(`/api/run/${encodeURIComponent('0/job')}/${path}`, v.url))).json() as Promise<Record<string, unknown>>;
      const all = (await api('trajectories?limit=1000')) as { total: number; items: { stage: string; index: number }[] };
      expect(all.total).toBe(read(files.base).length + read(files.sft).length + read(files.rl).length);
      for (const s of ['base', 'sft', 'rl'] as const) {
        const got = (await api(`trajectories?step=${s}&limit=1000`)) as { matched: number; items: { stage: string; index: number }[] };
        expect(got.matched, s).toBe(read(files[s]).length);
        expect(got.items.every((t) => t.stage === s)).toBe(true);
        const one = (await api(`trajectory/${got.items[0]!.index}`)) as { trajectory: { stage: string; id: string } };
        expect(one.trajectory).toMatchObject({ stage: s, id: read(files[s])[0]!.id });
      }
      const ev = await api('eval');
      expect(ev).toMatchObject({ stage_files: files, result: { rl_minus_sft: { points: 1 } } });
    } finally {
      await v.close();
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('mcp-gym view: the page in Chromium', () => {
  it('lists the runs, overlays two runs curves, opens trajectories, shows evals and benches, and follows a running run', async (ctx) => {
    if (!existsSync(CHROMIUM)) {
      console.warn(`skipped: ${CHROMIUM} is absent (apt-get install chromium; scripts/ensure.mjs installs it)`);
      ctx.skip();
      return;
    }
    const { chromium } = await import('playwright-core');
    mkdirSync(SHOTS, { recursive: true });
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const requests: string[] = [];
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      page.on('request', (r) => requests.push(r.url()));
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(viewer.url);

      // The list.
      await page.waitForSelector('#entries tbody tr[data-id="0/run-art"]');
      const names = await page.$$eval('#entries tbody tr .name', (tds) => tds.map((t) => t.textContent));
      expect(names.sort()).toEqual(['bench-fragile', 'bench-kv', 'eval-random', 'run-art', 'run-fail', 'run-grpo']);
      expect(await page.textContent('#entries tr[data-id="0/run-fail"] .status')).toBe('failed');
      expect(await page.textContent('#entries tr[data-id="0/run-art"] .status')).toBe('finished');

      // Two runs overlaid: the points drawn match metrics.jsonl.
      await page.click('#entries tr[data-id="0/run-art"] input.sel');
      await page.click('#entries tr[data-id="0/nested/run-grpo"] input.sel');
      const lines = '#charts .chart[data-metric="reward_mean"] polyline.series';
      await waitFor('two curves', async () => (await page.$$eval(lines, (els) => els.length)) === 2, 15_000);
      // Each point mapped back through the axes (the svg's data- attributes: the ranges and the plot area).
      const drawn = (await page.evaluate(`[...document.querySelectorAll(${JSON.stringify(lines)})].map((el) => {
        const svg = el.ownerSVGElement;
        const a = (k) => Number(svg.getAttribute('data-' + k));
        const pts = el.getAttribute('points').trim().split(/\\s+/).map((p) => p.split(',').map(Number));
        return {
          run: el.getAttribute('data-run'),
          n: Number(el.getAttribute('data-n')),
          ys: JSON.parse(el.getAttribute('data-ys')),
          back: pts.map(([x, y]) => [a('x0') + ((x - a('left')) / a('width')) * (a('x1') - a('x0')), a('y0') + ((a('top') + a('height') - y) / a('height')) * (a('y1') - a('y0'))]),
        };
      })`)) as { run: string; n: number; ys: number[]; back: [number, number][] }[];
      expect(drawn.map((d) => d.run).sort()).toEqual(['0/nested/run-grpo', '0/run-art']);
      for (const d of drawn) {
        const file = rows(join(dir, d.run.slice(2), 'metrics.jsonl'));
        expect(d.n).toBe(file.length);
        expect(d.ys).toEqual(file.map((r) => r.reward_mean));
        d.back.forEach(([x, y], i) => {
          expect(x).toBeCloseTo(Number(file[i]!.step), 1);
          expect(y).toBeCloseTo(Number(file[i]!.reward_mean), 2);
        });
      }
      expect(await page.$$eval('#legend .item', (els) => els.length)).toBe(2);
      expect(await page.$$eval('#charts .chart[data-metric="eval:success"] polygon.band', (els) => els.length)).toBe(2);
      // Each selected run's progress, as train shows it on a terminal: its last step of the steps it was started for.
      const lastArt = rows(join(dir, 'run-art', 'metrics.jsonl')).at(-1)!;
      expect(await page.textContent('#progress .progress-row[data-run="0/run-art"] .text')).toBe(
        `step ${lastArt.step}/${lastArt.step} (100%) · success ${(100 * Number(lastArt.success_rate)).toFixed(0)}% · reward ${Number(lastArt.reward_mean).toFixed(3)} · last step ${Number(lastArt.step_seconds).toFixed(1)} s · finished`,
      );
      expect(await page.getAttribute('#progress .progress-row[data-run="0/run-art"] .bar', 'aria-valuenow')).toBe('100');
      // Smoothing changes what is drawn, never the values; wall-clock x is the steps' seconds added up.
      await page.fill('#smoothing', '0.6');
      const smoothed = await page.$eval(`${lines}[data-run="0/run-art"]`, (el) => ({
        ys: JSON.parse(el.getAttribute('data-ys')!),
        drawn: JSON.parse(el.getAttribute('data-drawn')!),
      }));
      const artRows = rows(join(dir, 'run-art', 'metrics.jsonl'));
      expect(smoothed.ys).toEqual(artRows.map((r) => r.reward_mean));
      expect(smoothed.drawn[0]).toBeCloseTo(smoothed.ys[0], 9);
      expect(smoothed.drawn[1]).not.toBeCloseTo(smoothed.ys[1], 9);
      await page.selectOption('#x-axis', 'wall');
      const xs = await page.$eval(`${lines}[data-run="0/run-art"]`, (el) => JSON.parse(el.getAttribute('data-xs')!) as number[]);
      let wall = 0;
      expect(xs).toEqual(artRows.map((r) => (wall += Number(r.step_seconds))));
      await page.selectOption('#x-axis', 'step');
      await page.fill('#smoothing', '0');
      await page.screenshot({ path: join(SHOTS, '1-curves.png'), fullPage: true });

      // Live: a step appended to metrics.jsonl appears without a reload.
      const extra = { ...artRows.at(-1)!, step: artRows.length + 1, reward_mean: 0.123 };
      appendFileSync(join(dir, 'run-art', 'metrics.jsonl'), JSON.stringify(extra) + '\n');
      await waitFor(
        'the appended step',
        async () => (await page.$eval(`${lines}[data-run="0/run-art"]`, (el) => el.getAttribute('data-n')).catch(() => null)) === '3',
        15_000,
      );
      expect(await page.$eval(`${lines}[data-run="0/run-art"]`, (el) => JSON.parse(el.getAttribute('data-ys')!).at(-1))).toBe(0.123);

      // The configs side by side, their differences highlighted.
      await page.click('#tabs button[data-tab="config"]');
      await page.waitForSelector('#config-table tr.diff');
      const diffs = await page.$$eval('#config-table tr.diff', (trs) => trs.map((t) => t.getAttribute('data-field')));
      expect(diffs).toEqual(expect.arrayContaining(['preset', 'lr']));
      expect(diffs).not.toContain('suite');

      // Trajectories: filter, open one with its tool calls, a second of its group beside it.
      await page.click('#tabs button[data-tab="trajectories"]');
      await page.waitForSelector('#traj-table tbody tr');
      await page.selectOption('#f-outcome', 'success');
      await page.click('#traj-filters button[type="submit"]');
      await waitFor(
        'the successes only',
        () => page.$$eval('#traj-table tbody tr td:nth-child(6)', (tds) => tds.length > 0 && tds.every((td) => td.textContent === 'success')),
        15_000,
      );
      const withCalls = await page.$$eval('#traj-table tbody tr', (trs) =>
        trs.filter((tr) => Number(tr.children[8]!.textContent) > 0).map((tr) => Number(tr.getAttribute('data-index'))),
      );
      expect(withCalls.length).toBeGreaterThan(0);
      await page.click(`#traj-table tbody tr[data-index="${withCalls[0]}"] button.open-a`);
      await page.waitForSelector('#traj-a .traj .tool-call');
      const call = await page.$eval('#traj-a .tool-call', (el) => ({ tool: el.getAttribute('data-tool'), args: el.querySelector('pre.args')!.textContent! }));
      expect(call.tool).toBeTruthy();
      expect(() => JSON.parse(call.args)).not.toThrow();
      expect(await page.$$eval('#traj-a .checks tbody tr', (trs) => trs.length)).toBeGreaterThan(0);
      expect(await page.$$eval('#traj-a .reward-parts tbody tr', (trs) => trs.length)).toBeGreaterThan(0);
      // the same group, side by side
      await page.click(`#traj-table tbody tr[data-index="${withCalls[0]}"] td:nth-child(4) button`);
      await page.selectOption('#f-outcome', '');
      await page.click('#traj-filters button[type="submit"]');
      await waitFor('the group', async () => (await page.$$eval('#traj-table tbody tr', (trs) => trs.length)) === 4, 15_000);
      const other = await page.$$eval(
        '#traj-table tbody tr',
        (trs, first) => trs.map((tr) => Number(tr.getAttribute('data-index'))).find((i) => i !== first)!,
        withCalls[0]!,
      );
      await page.click(`#traj-table tbody tr[data-index="${other}"] button.open-b`);
      await page.waitForSelector('#traj-b .traj');
      const groups = await page.$$eval('.traj .muted', (els) => els.map((e) => /group (\S+)/.exec(e.textContent!)?.[1]));
      expect(groups).toHaveLength(2);
      expect(groups[0]).toBe(groups[1]);
      await page.screenshot({ path: join(SHOTS, '2-trajectories.png'), fullPage: true });

      // Deep links: this page (two runs, the trajectories tab, the group filter, both trajectories open)
      // has its own URL, which opens the same page in a new tab; the back button undoes the last step.
      const link = page.url();
      expect(link).toContain(`traj=${withCalls[0]}`);
      expect(link).toContain(`beside=${other}`);
      expect(link).toContain('tab=trajectories');
      const fresh = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      fresh.on('pageerror', (e) => errors.push(e.message));
      await fresh.goto(link);
      await fresh.waitForSelector('#traj-b .traj');
      expect(await fresh.$eval('#traj-a .traj', (el) => el.textContent)).toBe(await page.$eval('#traj-a .traj', (el) => el.textContent));
      expect(await fresh.$eval('#traj-b .traj', (el) => el.textContent)).toBe(await page.$eval('#traj-b .traj', (el) => el.textContent));
      expect(await fresh.$eval('#f-group', (el) => (el as unknown as { value: string }).value)).toBe(groups[0]);
      expect(await fresh.$$eval('#entries tbody tr.selected', (trs) => trs.map((t) => t.getAttribute('data-id')).sort())).toEqual([
        '0/nested/run-grpo',
        '0/run-art',
      ]);
      await fresh.close();
      await page.goBack();
      await waitFor('the page before the second trajectory', async () => (await page.$$eval('#traj-b .traj', (els) => els.length)) === 0, 15_000);
      expect(await page.$$eval('#traj-a .traj', (els) => els.length)).toBe(1);
      await page.goForward();
      await page.waitForSelector('#traj-b .traj');

      // Evaluations: pass@k and pass^k per task, failures by cause.
      await page.click('#entries tr[data-id="0/eval-random"] input.sel');
      await page.click('#tabs button[data-tab="evals"]');
      await page.waitForSelector('.eval-card table.per-task tbody tr');
      expect(await page.$$eval('.eval-card table.per-task tbody tr', (trs) => trs.length)).toBe(6);
      expect(await page.$$eval('.eval-card table.per-task thead th', (ths) => ths.map((t) => t.textContent))).toEqual(
        expect.arrayContaining(['pass@2', 'pass^2']),
      );
      expect(await page.$$eval('.eval-card table.failures tbody tr', (trs) => trs.length)).toBeGreaterThan(0);
      await page.screenshot({ path: join(SHOTS, '3-eval.png'), fullPage: true });
      // a trajectory of the eval opens too
      await page.click('#tabs button[data-tab="trajectories"]');
      await page.selectOption('#traj-source', '0/eval-random');
      await waitFor(
        "the eval's trajectories",
        async () => (await page.$eval('#traj-list p', (p) => p.textContent).catch(() => ''))?.includes('of 12 trajectories'),
        15_000,
      );

      // Benchmarks: latency histograms, throughput against concurrency, fuzz, skipped tools.
      await page.click('#entries tr[data-id="0/bench-kv"] input.sel');
      await page.click('#tabs button[data-tab="bench"]');
      await page.waitForSelector('.bench-card svg.histogram');
      const bench = JSON.parse(readFileSync(join(dir, 'bench-kv', 'bench.json'), 'utf8')) as {
        tools: Record<string, { histogram: { counts: number[] } }>;
        skipped: { tool: string }[];
      };
      const hist = await page.$$eval('.bench-card .chart[data-tool] ', (els) =>
        els.map((e) => ({ tool: e.getAttribute('data-tool')!, counts: JSON.parse(e.querySelector('svg')!.getAttribute('data-counts')!) })),
      );
      expect(hist.length).toBe(Object.keys(bench.tools).length);
      for (const x of hist) expect(x.counts).toEqual(bench.tools[x.tool]!.histogram.counts);
      expect(await page.$$eval('.bench-card polyline.series', (els) => els.length)).toBe(Object.keys(bench.tools).length);
      expect(await page.$$eval('.bench-card table.skipped tbody tr td:first-child', (tds) => tds.map((t) => t.textContent))).toEqual(
        bench.skipped.map((s) => s.tool),
      );
      await page.screenshot({ path: join(SHOTS, '4-bench.png'), fullPage: true });
      // The fragile server's finding, with the input that crashed it.
      await page.click('#entries tr[data-id="0/bench-kv"] input.sel');
      await page.click('#entries tr[data-id="0/bench-fragile"] input.sel');
      await page.click('#tabs button[data-tab="bench"]');
      await page.waitForSelector('.bench-card table.findings');
      const findings = await page.$$eval('.bench-card table.findings tbody tr', (trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent!.trim())),
      );
      expect(findings).toContainEqual(expect.arrayContaining(['crash', 'crashy']));
      expect(JSON.parse(findings.find((f) => f[1] === 'crashy')![4]!)).toEqual({ text: '' });

      expect(errors).toEqual([]);
      // Nothing but the viewer was asked for anything.
      const origin = new URL(viewer.url).origin;
      expect(requests.filter((u) => !u.startsWith(origin))).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 180_000);
});
