/**
 * The OpenAI-compatible policy against `serve-policy`, the official `openai` client on both sides
 * of the wire: the same episodes as the in-process policy (tokens and logprobs to 1e-4 under
 * greedy decoding), trainable token sequences, retries that honour Retry-After (a proxy in front
 * of the server answers 429 / 503 first), a failure that ends only its episode and never shows
 * the key, re-tokenisation drift detected, and a few training steps through the server.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxPolicy, OpenAIPolicy, processedLogprobs } from '../../src/agents/index.ts';
import { startPolicyServer, type PolicyServer } from '../../src/agents/serve-policy/index.ts';
import { Environment, type Trajectory } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import { train } from '../../src/trainers/index.ts';

const KEY = 'sk-test-4c1e9f0b7d2a-secret';
const tasks = generateSuite('calculator', { eval: 12 })
  .filter((t) => t.split === 'eval' && t.difficulty <= 2)
  .slice(0, 6);

/** A proxy in front of `target` that answers the first requests from `faults` itself (429, 503, ...), or edits a response. */
async function proxy(
  target: string,
  o: { faults?: { status: number; headers?: Record<string, string> }[]; edit?: (body: Record<string, unknown>, n: number) => void },
) {
  const faults = [...(o.faults ?? [])];
  const arrivals: number[] = [];
  let completions = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const isCompletion = req.url?.endsWith('/chat/completions') ?? false;
      if (isCompletion) arrivals.push(performance.now());
      const fault = isCompletion ? faults.shift() : undefined;
      if (fault) {
        res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
        res.end(
          JSON.stringify({
            error: {
              message: `injected ${fault.status}; key ${KEY} must not leak`,
              type: fault.status === 429 ? 'rate_limit_exceeded' : 'server_error',
              param: null,
              code: null,
            },
          }),
        );
        return;
      }
      const n = isCompletion ? completions++ : -1;
      const url = new URL(req.url!, target);
      const up = httpRequest(url, { method: req.method, headers: { ...req.headers, host: url.host } }, (r) => {
        const body: Buffer[] = [];
        r.on('data', (c: Buffer) => body.push(c));
        r.on('end', () => {
          let text = Buffer.concat(body).toString('utf8');
          if (isCompletion && o.edit && r.statusCode === 200) {
            const json = JSON.parse(text) as Record<string, unknown>;
            o.edit(json, n);
            text = JSON.stringify(json);
          }
          res.writeHead(r.statusCode ?? 500, { 'content-type': r.headers['content-type'] ?? 'application/json' });
          res.end(text);
        });
      });
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/v1`, arrivals, close: () => new Promise<void>((r) => server.close(() => r())) };
}

describe('OpenAIPolicy through serve-policy', () => {
  let server: PolicyServer;
  const saved = process.env.OPENAI_API_KEY;
  beforeAll(async () => {
    process.env.OPENAI_API_KEY = KEY;
    server = await startPolicyServer({ modelDir: BUNDLED_MODEL_DIR, token: KEY });
  });
  afterAll(async () => {
    await server.close();
    if (saved === undefined) delete process.env.OPENAI_API_KEY;
    else process.env.OPENAI_API_KEY = saved;
  });

  it('reproduces the in-process policy: same episodes, tokens and logprobs to 1e-4 (greedy)', async () => {
    const env = new Environment();
    const api = new OpenAIPolicy('calc-tiny', { baseURL: server.url, temperature: 0, maxTokens: 160 });
    const local = await OnnxPolicy.load(BUNDLED_MODEL_DIR, { temperature: 0, maxNewTokens: 160 });
    try {
      const viaApi = await Promise.all(tasks.map((t) => env.runEpisode(t, api, { groupId: 'api', sample: 0 })));
      const inProcess = await Promise.all(tasks.map((t) => env.runEpisode(t, local, { groupId: 'local', sample: 0 })));
      let compared = 0;
      viaApi.forEach((a, i) => {
        const b = inProcess[i]!;
        expect(a.finish).toBe(b.finish);
        expect(a.answer).toBe(b.answer);
        expect(a.turns.length).toBe(b.turns.length);
        a.turns.forEach((ta, j) => {
          const tb = b.turns[j]!;
          expect(ta.token_drift).toBeUndefined();
          expect(ta.env_tokens).toEqual(tb.env_tokens);
          expect(ta.tokens).toEqual(tb.tokens);
          ta.logprobs!.forEach((lp, k) => expect(Math.abs(lp - tb.logprobs![k]!)).toBeLessThan(1e-4));
          compared += ta.tokens!.length;
          expect(ta.usage!.completion_tokens).toBe(ta.tokens!.length);
        });
        // The whole sequence a learner would get is the in-process one.
        expect(sequenceOf(a)!.ids).toEqual(sequenceOf(b)!.ids);
      });
      expect(compared).toBeGreaterThan(50);
      expect(viaApi.some((t) => t.metrics.tool_calls > 0)).toBe(true);
      const u = api.usage();
      expect(u.requests).toBe(viaApi.reduce((n, t) => n + t.turns.length, 0));
      expect(u.failed_requests).toBe(0);
      expect(u.completion_tokens).toBe(viaApi.reduce((n, t) => n + t.metrics.policy_tokens, 0));
      expect(await api.contextLength()).toBe(local.model.maxLen);
    } finally {
      await env.close();
      await local.close();
    }
  });

  it('sampled turns (temperature 1): the in-process model, teacher-forced, gives the same logprobs to 1e-4', async () => {
    const env = new Environment();
    const api = new OpenAIPolicy('calc-tiny', { baseURL: server.url, temperature: 1, maxTokens: 96, seed: 11 });
    const t = await env.runEpisode(tasks[0]!, api, { groupId: 'g', sample: 0 });
    await env.close();
    const s = sequenceOf(t)!;
    const local = await OnnxPolicy.load(BUNDLED_MODEL_DIR);
    const m = local.model;
    try {
      const none = Array.from({ length: m.L }, () => new Float32Array(0));
      const out = new Float64Array(m.V);
      let checked = 0;
      for (let i = 1; i < s.ids.length && checked < 40; i++) {
        if (!s.mask[i]) continue;
        const ids = BigInt64Array.from(s.ids.slice(0, i), (x) => BigInt(x));
        const pos = BigInt64Array.from({ length: i }, (_, k) => BigInt(k));
        const r = await m.forward(ids, pos, new Float32Array(i).fill(1), 1, i, 0, none, none);
        processedLogprobs(r.logits, 0, m.V, { temperature: 1, topK: 0, topP: 1 }, out);
        expect(Math.abs(out[s.ids[i]!]! - s.logprobs[i]!)).toBeLessThan(1e-4);
        checked++;
      }
      expect(checked).toBeGreaterThan(10);
    } finally {
      await local.close();
    }
  });

  it('retries 429 (after Retry-After) and 503, then succeeds; a failure after the retries ends only its episode, without the key', async () => {
    const p = await proxy(server.url, { faults: [{ status: 429, headers: { 'retry-after': '1' } }, { status: 503 }] });
    try {
      const env = new Environment();
      const api = new OpenAIPolicy('calc-tiny', { baseURL: p.url, temperature: 0, maxRetries: 2 });
      const t = await env.runEpisode(tasks[0]!, api, { groupId: 'g', sample: 0 });
      expect(t.finish).not.toBe('error');
      expect(p.arrivals[1]! - p.arrivals[0]!).toBeGreaterThan(900); // waited for Retry-After: 1
      expect(api.usage().failed_requests).toBe(0);
      await env.close();
    } finally {
      await p.close();
    }
    const q = await proxy(server.url, { faults: [{ status: 500 }, { status: 500 }] });
    try {
      const env = new Environment();
      const api = new OpenAIPolicy('calc-tiny', { baseURL: q.url, temperature: 0, maxRetries: 1 });
      const [bad, good] = [
        await env.runEpisode(tasks[0]!, api, { groupId: 'g', sample: 0 }),
        await env.runEpisode(tasks[1]!, api, { groupId: 'g', sample: 1 }),
      ];
      expect(bad.finish).toBe('error');
      expect(bad.error).toMatch(/the policy failed: openai calc-tiny: HTTP 500/);
      expect(JSON.stringify(bad)).not.toContain(KEY);
      expect(bad.error).toContain('[key]');
      expect(good.finish).not.toBe('error'); // only that episode
      expect(api.usage().failed_requests).toBe(1);
      await env.close();
    } finally {
      await q.close();
    }
  });

  it('a prompt that does not extend the episode’s tokens is marked as drift and not trained on', async () => {
    // The proxy changes the second request's prompt ids, as a server whose template re-renders differently would.
    const p = await proxy(server.url, {
      edit: (body, n) => {
        if (n === 1) (body.prompt_token_ids as number[])[3] = 42;
      },
    });
    try {
      const env = new Environment();
      const api = new OpenAIPolicy('calc-tiny', { baseURL: p.url, temperature: 0 });
      const multi = tasks.find((t) => (t.solution?.calls.length ?? 0) >= 1)!;
      const t: Trajectory = await env.runEpisode(multi, api, { groupId: 'g', sample: 0 });
      await env.close();
      expect(t.turns.length).toBeGreaterThanOrEqual(2);
      expect(t.turns[0]!.token_drift).toBeUndefined();
      expect(t.turns[1]!.token_drift).toMatch(/differs from the episode's tokens at position 3/);
      expect(sequenceOf(t)).toBeUndefined();
    } finally {
      await p.close();
    }
  });

  it('a conversation over the context ends the episode as an unsolved answer, as in-process (not a failed episode)', async () => {
    const api = new OpenAIPolicy('calc-tiny', { baseURL: server.url, temperature: 0 });
    const task = { ...tasks[0]!, prompt: `${'Add these numbers carefully. '.repeat(20)}${tasks[0]!.prompt}`, messages: undefined };
    const env = new Environment();
    const t = await env.runEpisode(task, api, { groupId: 'g', sample: 0 });
    await env.close();
    expect(t.finish).toBe('answer');
    expect(t.success).toBe(false);
    expect(t.answer).toBe('The conversation no longer fits my context.');
    expect(t.turns[0]!.stop_reason).toBe('context_length');
  });

  it('a missing key for OpenAI itself is a clear error; a local server needs none', () => {
    const was = process.env.OPENAI_API_KEY;
    delete process.env.OPENAI_API_KEY;
    try {
      expect(() => new OpenAIPolicy('gpt-x')).toThrow(/no API key: set the environment variable OPENAI_API_KEY \(or name another with --api-key-env\)/);
      expect(() => new OpenAIPolicy('m', { baseURL: server.url })).not.toThrow();
    } finally {
      process.env.OPENAI_API_KEY = was;
    }
  });
});

describe('training through serve-policy', () => {
  let server: PolicyServer;
  let tmp: string;
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-served-'));
    const model = join(tmp, 'served-model');
    cpSync(BUNDLED_MODEL_DIR, model, { recursive: true });
    server = await startPolicyServer({ modelDir: model });
  });
  afterAll(async () => {
    await server.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('train --policy openai:<model> --base-url: rollouts sampled by the server, which loads each step’s weights', async () => {
    const suite = generateSuite('calculator').filter((t) => t.difficulty === 1);
    const runDir = join(tmp, 'run');
    const r = await train({
      config: {
        preset: 'grpo',
        policy: 'openai:calc-tiny',
        base_url: server.url,
        steps: 2,
        tasks_per_step: 3,
        group: 4,
        eval_every: 0,
        eval_samples: 1,
        max_new_tokens: 48,
        lr: 1e-3,
        epochs: 1,
      },
      runDir,
      trainTasks: suite.filter((t) => t.split === 'train').slice(0, 8),
      evalTasks: suite.filter((t) => t.split === 'eval').slice(0, 3),
    });
    expect(r.steps).toBe(2);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(rows.some((m) => typeof m.loss === 'number')).toBe(true);
    for (const m of rows) expect(m.api_completion_tokens).toBeGreaterThan(0); // the server's usage, summed per step
    // The server now serves the run's model directory, at the version the learner's last export wrote.
    const stats = server.stats();
    expect(stats.modelDir).toBe(join(runDir, 'model'));
    const version = JSON.parse(readFileSync(join(runDir, 'model', 'config.json'), 'utf8')).version as number;
    expect(stats.version).toBe(version);
    expect(rows.at(-1)!.policy_version).toBe(version);
    // Every training episode was sampled through the server with its tokens (trainable).
    const trajs = readFileSync(join(runDir, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory);
    expect(trajs.length % 4).toBe(0); // groups of 4 (a step's tasks are drawn with repeats, run once each)
    expect(trajs.length).toBeGreaterThanOrEqual(2 * 4);
    expect(trajs.every((t) => t.policy.id === 'openai:calc-tiny')).toBe(true);
    expect(trajs.filter((t) => t.finish !== 'error').every((t) => sequenceOf(t) !== undefined)).toBe(true);
  }, 240_000);

  it('RULER with serve-policy as the judge endpoint: the judge requests reach the server, and what it cannot judge is dropped, counted', async () => {
    // The plumbing, not the judgement: the 1M-parameter model cannot judge (its context is 384
    // bytes), so each group's judge request is refused or answered with no JSON; the group is
    // dropped and counted, and nothing is trained on a made-up score.
    const suite = generateSuite('calculator').filter((t) => t.difficulty === 1);
    const runDir = join(tmp, 'ruler');
    const before = server.stats().requests;
    const logs: string[] = [];
    const r = await train({
      config: {
        preset: 'ruler',
        judge: 'openai:calc-tiny',
        judge_base_url: server.url,
        steps: 2,
        tasks_per_step: 2,
        group: 4,
        eval_every: 0,
        eval_samples: 1,
        max_new_tokens: 48,
      },
      runDir,
      trainTasks: suite.filter((t) => t.split === 'train').slice(0, 6),
      evalTasks: suite.filter((t) => t.split === 'eval').slice(0, 2),
      onLog: (l) => logs.push(l),
    });
    expect(r.steps).toBe(2);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    for (const m of rows) {
      expect(m.judge_failures).toBeGreaterThan(0);
      expect(m.judge_calls).toBeGreaterThanOrEqual(m.judge_failures!);
      expect(m.groups_kept).toBe(0);
      expect(m.loss).toBeUndefined();
    }
    expect(logs.some((l) => /the judge failed on \d+ group\(s\), dropped; first: /.test(l))).toBe(true);
    // The server answered each judge request: here with its 400 for a prompt longer than the model's context.
    expect(
      logs.some((l) => /judge openai:calc-tiny: the request failed: openai calc-tiny: HTTP 400: This model's maximum context length is 384 tokens/.test(l)),
    ).toBe(true);
    expect(server.stats().requests).toBe(before); // refused before sampling
  }, 240_000);
});

describe('a base URL carrying credentials or a key in its query', () => {
  it('never shows them in an endpoint error (they would reach logs and metrics)', async () => {
    // A real listener that closes every connection: the request fails after the URL was used.
    const closer: Server = createServer((req) => req.socket.destroy());
    await new Promise<void>((r) => closer.listen(0, '127.0.0.1', r));
    const port = (closer.address() as AddressInfo).port;
    try {
      for (const base of [`http://alice:s3cret-pw@127.0.0.1:${port}/v1`, `http://127.0.0.1:${port}/v1?api-key=s3cret-key`]) {
        const p = new OpenAIPolicy('m', { baseURL: base, maxRetries: 0, timeoutMs: 5_000 });
        const err = await p.loadLoraAdapter('a', '/tmp/a').then(
          () => undefined,
          (e: Error) => e,
        );
        expect(err).toBeInstanceOf(Error);
        expect(err!.message).toMatch(new RegExp(`^POST http://127\\.0\\.0\\.1:${port}/v1/load_lora_adapter`));
        expect(err!.message).not.toMatch(/s3cret|alice/);
      }
    } finally {
      closer.close();
    }
  });
});
