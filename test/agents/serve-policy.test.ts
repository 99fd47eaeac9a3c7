/**
 * serve-policy: the bundled model behind an OpenAI-compatible server, read with the official
 * openai SDK. Its prompts are the in-process rendering, its tokens and logprobs those of
 * OnnxModel.generate, its messages render back to the tokens they came from (parseCompletion,
 * with the cases where they cannot), streaming gives the same turn, concurrent requests share
 * decode steps, and weights reload while requests finish on the weights they started with. The
 * continuous batcher under it (shared with OnnxPolicy) samples rows that join and leave a running
 * batch exactly as it samples them alone.
 */
import { cpSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { AuthenticationError, BadRequestError, NotFoundError } from 'openai';
import type { ChatCompletion, ChatCompletionCreateParamsNonStreaming, ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxModel, TOKENS, bytes } from '../../src/agents/index.ts';
import { GenerationBatcher } from '../../src/agents/onnx/index.ts';
import { parseCompletion, startPolicyServer, type PolicyServer } from '../../src/agents/serve-policy/index.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';
import { bundledServers } from '../../servers/index.ts';
import { seededRandom } from '../../lib/index.ts';

/** vLLM's extensions of the request and the response. */
type Params = ChatCompletionCreateParamsNonStreaming & { top_k?: number; return_token_ids?: boolean; return_tokens_as_token_ids?: boolean };
type Completion = ChatCompletion & { prompt_token_ids?: number[]; choices: (ChatCompletion.Choice & { token_ids?: number[] })[] };

/** A streamed chunk as vLLM sends it (token ids per chunk). */
interface Chunk {
  usage?: unknown;
  choices: {
    delta: { role?: string; content?: string; tool_calls?: { index: number; function: { name: string; arguments: string } }[] };
    token_ids?: number[];
    logprobs: { content: { logprob: number }[] } | null;
    finish_reason: string | null;
  }[];
}

const tools: ChatCompletionTool[] = bundledServers.calculator!.tools.map((t) => ({
  type: 'function',
  function: { name: t.name, description: t.description, parameters: z.toJSONSchema(t.input) as Record<string, unknown> },
}));
const toolNames = tools.map((t) => (t as { function: { name: string } }).function.name);
const USER = 'Use the calculator tool evaluate to compute 98 - 4. Answer with the exact result only.';
const opening: ChatCompletionMessageParam[] = [{ role: 'user', content: USER }];
const withSystem: ChatCompletionMessageParam[] = [{ role: 'system', content: 'You are a careful calculator agent.' }, ...opening];

let server: PolicyServer;
let client: OpenAI;
let model: OnnxModel;

async function complete(params: Partial<Params>): Promise<Completion> {
  return (await client.chat.completions.create({ model: server.modelName, messages: opening, tools, ...params } as Params)) as Completion;
}

beforeAll(async () => {
  server = await startPolicyServer({ modelDir: BUNDLED_MODEL_DIR, seed: 3 });
  client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  model = await OnnxModel.load(BUNDLED_MODEL_DIR);
});
const tempDirs: string[] = [];
afterAll(async () => {
  await server?.close();
  await model?.close();
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

/** Writes a file by renaming a new one over it (a loaded model keeps reading the old file). */
function writeAtomic(file: string, data: string | Buffer): void {
  writeFileSync(`${file}.tmp`, data);
  renameSync(`${file}.tmp`, file);
}

/**
 * A copy of the bundled model whose tied embedding is zero: every logit is 0, every token has
 * logprob -ln(vocab) (at temperature 1), and it rarely ends a turn. Its version is 5.
 */
function flatCopy() {
  const base = mkdtempSync(join(tmpdir(), 'mcp-gym-serve-'));
  tempDirs.push(base);
  const copy = join(base, 'flat');
  cpSync(BUNDLED_MODEL_DIR, copy, { recursive: true });
  const cfgFile = join(copy, 'config.json');
  const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
  const emb = cfg.onnx.initializers.find((i: { param: string }) => i.param === 'tok_emb.weight');
  const data = readFileSync(join(copy, cfg.onnx.data));
  data.fill(0, emb.offset, emb.offset + emb.length);
  writeAtomic(join(copy, cfg.onnx.data), data);
  writeAtomic(cfgFile, JSON.stringify({ ...cfg, version: 5 }));
  return { base, copy, cfg, cfgFile, uniform: -Math.log(cfg.architecture.vocab_size) };
}

/**
 * Waits until a row is decoding, looking at every turn of the event loop: the batcher awaits each
 * decode step, so a look between two steps sees it. (A look every 5 ms could miss a short
 * generation on a fast machine, and then wait for ever.)
 */
async function untilRunning(running: () => number): Promise<void> {
  const until = Date.now() + 10_000;
  while (running() === 0) {
    if (Date.now() > until) throw new Error('no row was decoding within 10 s');
    await new Promise((r) => setImmediate(r));
  }
}
describe('serve-policy', () => {
  it('lists the model with its context length (vLLM max_model_len) and version', async () => {
    const list = await client.models.list();
    expect(list.data).toHaveLength(1);
    const card = list.data[0] as unknown as Record<string, unknown>;
    expect(card).toMatchObject({ id: 'calc-tiny', object: 'model', owned_by: 'mcp-gym', max_model_len: model.maxLen, version: model.version });
    expect((await client.models.retrieve('calc-tiny')).id).toBe('calc-tiny');
  });

  it('renders the prompt as the in-process policy does, and samples as OnnxModel.generate does', async () => {
    const prompt = model.template.prompt(withSystem as never, toolNames);
    // Greedy (temperature 0): the same tokens; logprobs are 0 under greedy decoding.
    const greedy = await complete({ messages: withSystem, temperature: 0, max_tokens: 48, logprobs: true, return_token_ids: true });
    expect(greedy.prompt_token_ids).toEqual(prompt);
    const choice = greedy.choices[0]!;
    const [inProcess] = await model.generate([prompt], { temperature: 0, topK: 0, topP: 1, maxNewTokens: 48, rng: seededRandom(1) });
    expect(choice.token_ids).toEqual(inProcess!.tokens);
    expect(choice.logprobs!.content).toHaveLength(choice.token_ids!.length);
    expect(choice.logprobs!.content!.map((e) => e.logprob)).toEqual(inProcess!.logprobs);
    expect(choice.finish_reason).toBe(!inProcess!.stopped ? 'length' : choice.message.tool_calls?.length ? 'tool_calls' : 'stop');
    expect(greedy.usage).toEqual({
      prompt_tokens: prompt.length,
      completion_tokens: inProcess!.tokens.length,
      total_tokens: prompt.length + inProcess!.tokens.length,
    });

    // Seeded sampling at temperature 1 (and with top-k / top-p): the same tokens, logprobs to 1e-4.
    for (const s of [
      { temperature: 1, top_p: 1, top_k: 0 },
      { temperature: 0.8, top_p: 0.9, top_k: 40 },
    ]) {
      const r = await complete({
        messages: withSystem,
        ...s,
        seed: 42,
        max_tokens: 40,
        logprobs: true,
        return_token_ids: true,
        return_tokens_as_token_ids: true,
      });
      const [g] = await model.generate([prompt], { temperature: s.temperature, topK: s.top_k, topP: s.top_p, maxNewTokens: 40, rng: seededRandom(42) });
      const c = r.choices[0]!;
      expect(c.token_ids).toEqual(g!.tokens);
      expect(c.logprobs!.content!.map((e) => e.token)).toEqual(g!.tokens.map((t) => `token_id:${t}`));
      c.logprobs!.content!.forEach((e, i) => expect(Math.abs(e.logprob - g!.logprobs[i]!)).toBeLessThan(1e-4));
      expect(c.logprobs!.content!.every((e) => e.logprob <= 0 && e.top_logprobs.length === 0)).toBe(true);
    }
    // Without return_tokens_as_token_ids, a token is its text; a byte's bytes are that byte.
    const text = await complete({ temperature: 0, max_tokens: 8, logprobs: true, return_token_ids: true });
    const e = text.choices[0]!.logprobs!.content!;
    text.choices[0]!.token_ids!.forEach((t, i) => {
      if (t === TOKENS.callOpen) expect(e[i]).toMatchObject({ token: '<|tool_call|>', bytes: null });
      if (t >= 32 && t < 127) expect(e[i]).toMatchObject({ token: String.fromCharCode(t), bytes: [t] });
    });
  });

  it('returns a message that renders back to its tokens: the next prompt extends prompt + completion', async () => {
    const inexact = server.stats().inexact;
    const first = await complete({ temperature: 0, max_tokens: 64, return_token_ids: true });
    const c = first.choices[0]!;
    expect(c.finish_reason).toBe('tool_calls');
    const call = c.message.tool_calls![0] as { id: string; type: string; function: { name: string; arguments: string } };
    expect(call).toMatchObject({ type: 'function', function: { name: 'evaluate' } });
    expect(call.id).toMatch(/^call_/);
    expect(JSON.parse(call.function.arguments)).toHaveProperty('expression');
    expect(c.token_ids!.at(-1)).toBe(TOKENS.end);
    const second = await complete({
      temperature: 0,
      max_tokens: 32,
      return_token_ids: true,
      messages: [...opening, c.message as ChatCompletionMessageParam, { role: 'tool', tool_call_id: call.id, content: '94' }],
    });
    const held = [...first.prompt_token_ids!, ...c.token_ids!];
    expect(second.prompt_token_ids!.slice(0, held.length)).toEqual(held);
    expect(second.prompt_token_ids).toEqual([...held, ...model.template.continuation(['94'])]);
    expect(server.stats().inexact).toBe(inexact);
  });

  it('streams the same turn (chunks, the SDK stream helper, token ids and usage)', async () => {
    const plain = await complete({ temperature: 0, max_tokens: 64, logprobs: true, return_token_ids: true });
    const stream = await client.chat.completions.create({
      model: server.modelName,
      messages: opening,
      tools,
      temperature: 0,
      max_tokens: 64,
      logprobs: true,
      stream: true,
      stream_options: { include_usage: true },
      return_token_ids: true,
    } as never);
    let content = '';
    const calls: { name: string; arguments: string }[] = [];
    const ids: number[] = [];
    const lps: number[] = [];
    let finish: string | null = null;
    let usage: unknown;
    let role: string | undefined;
    for await (const chunk of stream as unknown as AsyncIterable<Chunk>) {
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        role ??= ch.delta.role;
        content += ch.delta.content ?? '';
        for (const t of ch.delta.tool_calls ?? []) calls[t.index] = { name: t.function.name, arguments: t.function.arguments };
        ids.push(...(ch.token_ids ?? []));
        lps.push(...(ch.logprobs?.content ?? []).map((e) => e.logprob));
        finish = ch.finish_reason ?? finish;
      }
    }
    const c = plain.choices[0]!;
    expect(role).toBe('assistant');
    expect(content).toBe(c.message.content ?? '');
    expect(calls).toEqual(
      (c.message.tool_calls ?? []).map((t) => ({
        name: (t as { function: { name: string } }).function.name,
        arguments: (t as { function: { arguments: string } }).function.arguments,
      })),
    );
    expect(ids).toEqual(c.token_ids);
    expect(lps).toEqual(c.logprobs!.content!.map((e) => e.logprob));
    expect(finish).toBe(c.finish_reason);
    expect(usage).toEqual(plain.usage);

    // The SDK's stream helper assembles the same message.
    const helper = client.chat.completions.stream({ model: server.modelName, messages: opening, tools, temperature: 0, max_tokens: 64 });
    const final = await helper.finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe(c.finish_reason);
    expect(final.choices[0]!.message.content ?? '').toBe(c.message.content ?? '');
    expect(final.choices[0]!.message.tool_calls?.map((t) => (t as { function: unknown }).function)).toEqual(
      c.message.tool_calls?.map((t) => (t as { function: unknown }).function),
    );
  });

  it('refuses requests without the bearer token (any case of the scheme) and foreign Host headers', async () => {
    const secured = await startPolicyServer({ modelDir: BUNDLED_MODEL_DIR, token: 'sekrit-42' });
    try {
      const wrong = new OpenAI({ baseURL: secured.url, apiKey: 'nope', maxRetries: 0 });
      await expect(wrong.models.list()).rejects.toBeInstanceOf(AuthenticationError);
      const right = new OpenAI({ baseURL: secured.url, apiKey: 'sekrit-42', maxRetries: 0 });
      expect((await right.models.list()).data[0]!.id).toBe('calc-tiny');
      const r = await right.chat.completions.create({ model: 'calc-tiny', messages: opening, max_tokens: 4 });
      expect(r.choices).toHaveLength(1);

      const none = await fetch(`${secured.url}/models`);
      expect(none.status).toBe(401);
      expect(none.headers.get('www-authenticate')).toBe('Bearer');
      expect(await none.json()).toMatchObject({ error: { type: 'authentication_error', code: 'invalid_api_key', message: expect.any(String) } });
      expect((await fetch(`${secured.url}/models`, { headers: { authorization: 'bearer sekrit-42' } })).status).toBe(200);
      expect((await fetch(`${secured.url}/reload`, { method: 'POST', body: '{}' })).status).toBe(401);

      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          { host: '127.0.0.1', port: secured.port, path: '/v1/models', headers: { host: 'evil.example', authorization: 'Bearer sekrit-42' } },
          (res) => {
            res.resume();
            resolve(res.statusCode!);
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(status).toBe(403);
      // a sandboxed page's `Origin: null` is refused too (it could otherwise post a /v1/reload)
      const nullOrigin = await fetch(`http://127.0.0.1:${secured.port}/v1/models`, { headers: { origin: 'null', authorization: 'Bearer sekrit-42' } });
      expect(nullOrigin.status).toBe(403);
    } finally {
      await secured.close();
    }
    await expect(startPolicyServer({ modelDir: BUNDLED_MODEL_DIR, token: '' })).rejects.toThrow(/empty/);
  });

  it('samples concurrent requests together (continuous batching), each as it would be alone', async () => {
    const before = server.stats();
    const rs = await Promise.all(
      Array.from({ length: 16 }, (_, i) => client.chat.completions.create({ model: 'calc-tiny', messages: opening, max_tokens: 24, seed: i })),
    );
    expect(rs.every((r) => r.choices.length === 1 && r.usage!.completion_tokens > 0)).toBe(true);
    const s = server.stats();
    expect(s.requests - before.requests).toBe(16);
    expect(s.rows - before.rows).toBe(16);
    expect(s).toMatchObject({ running: 0, queued: 0 });
    expect(s.largestBatch).toBeGreaterThanOrEqual(2);
    expect(s.rowSteps - before.rowSteps).toBeGreaterThan(s.steps - before.steps); // rows shared decode steps
    // A seed gives the same sample whatever else is in the batch.
    const alone = await client.chat.completions.create({ model: 'calc-tiny', messages: opening, max_tokens: 24, seed: 5 });
    const turn = (r: ChatCompletion) => ({
      content: r.choices[0]!.message.content,
      calls: r.choices[0]!.message.tool_calls?.map((t) => (t as { function: unknown }).function),
    });
    expect(turn(alone)).toEqual(turn(rs[5]!));
    expect(alone.usage).toEqual(rs[5]!.usage);
  });

  it('reloads weights: requests in flight finish on the old ones; a bad directory is a 400', async () => {
    const { base, copy, cfg, cfgFile, uniform } = flatCopy();

    const s = await startPolicyServer({ modelDir: copy, modelName: 'policy' });
    const c = new OpenAI({ baseURL: s.url, apiKey: 'x', maxRetries: 0 });
    const post = async (body: unknown) => {
      const r = await fetch(`${s.url}/reload`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> & { error?: { message: string } } };
    };
    try {
      expect((await c.models.list()).data[0]).toMatchObject({ id: 'policy', version: 5 });
      const inFlight = c.chat.completions.create({ model: 'policy', messages: opening, max_tokens: 300, seed: 1, logprobs: true });
      await untilRunning(() => s.stats().running);
      expect(await post({ model_dir: BUNDLED_MODEL_DIR })).toEqual({
        status: 200,
        body: { version: model.version, model_dir: BUNDLED_MODEL_DIR, reloaded: true },
      });
      const old = await inFlight;
      expect(old.system_fingerprint).toBe('v5');
      expect(old.choices[0]!.logprobs!.content!.every((e) => Math.abs(e.logprob - uniform) < 1e-4)).toBe(true);
      const fresh = await c.chat.completions.create({ model: 'policy', messages: opening, max_tokens: 20, seed: 1, logprobs: true });
      expect(fresh.system_fingerprint).toBe(`v${model.version}`);
      expect(fresh.choices[0]!.logprobs!.content!.some((e) => Math.abs(e.logprob - uniform) > 0.1)).toBe(true);
      expect((await c.models.list()).data[0]).toMatchObject({ id: 'policy', version: model.version });
      expect(await post({})).toMatchObject({ status: 200, body: { reloaded: false, version: model.version } });

      // Back to the copy, then `{}` picks up a version bump there.
      expect(await post({ model_dir: copy })).toMatchObject({ status: 200, body: { reloaded: true, version: 5, model_dir: copy } });
      expect(await post({})).toMatchObject({ status: 200, body: { reloaded: false, version: 5 } });
      writeAtomic(cfgFile, JSON.stringify({ ...cfg, version: 6 }));
      expect(await post({})).toMatchObject({ status: 200, body: { reloaded: true, version: 6 } });
      expect(s.stats().version).toBe(6);

      // Directories that cannot be served.
      const missing = await post({ model_dir: join(base, 'nothing') });
      expect(missing.status).toBe(400);
      expect(missing.body.error!.message).toMatch(/No model at .*nothing/);
      const shorter = join(base, 'shorter');
      cpSync(copy, shorter, { recursive: true });
      writeFileSync(join(shorter, 'config.json'), JSON.stringify({ ...cfg, architecture: { ...cfg.architecture, max_seq_len: 256 } }));
      const other = await post({ model_dir: shorter });
      expect(other.status).toBe(400);
      expect(other.body.error!.message).toMatch(/max_seq_len \(the context\) 256 \(served: 384\)/);
      expect((await post({ model_dir: 7 })).status).toBe(400);
      expect(s.stats().version).toBe(6);
    } finally {
      await s.close();
    }
  });

  it('answers bad requests with 400/404 and a clear message', async () => {
    const expectBad = async (params: Partial<Params>, pattern: RegExp) => {
      const err = await complete(params).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(BadRequestError);
      expect((err as BadRequestError).message).toMatch(pattern);
    };
    await expectBad({ n: 2 }, /n must be 1/);
    await expectBad({ logprobs: true, top_logprobs: 5 }, /top_logprobs 5 is not supported/);
    await expectBad({ stop: ['\n'] }, /'stop' is not supported/);
    await expectBad({ temperature: -1 }, /'temperature' must be a number >= 0/);
    await expectBad({ min_p: 1.5 } as Partial<Params>, /'min_p' must be a number in \[0, 1\]/);
    await expectBad({ messages: [{ role: 'user', content: 'x'.repeat(500) }] }, /maximum context length is 384 tokens, but the messages take 50\d tokens/);
    await expectBad({ messages: [] }, /'messages' must be a non-empty array/);

    const wrongModel = await complete({ model: 'gpt-4o' }).catch((e: unknown) => e);
    expect(wrongModel).toBeInstanceOf(NotFoundError);
    expect((wrongModel as NotFoundError).code).toBe('model_not_found');

    const post = (path: string, body: string) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const badJson = await post('/chat/completions', '{"model": "calc-tiny", "messages": [');
    expect(badJson.status).toBe(400);
    expect(await badJson.json()).toMatchObject({ error: { type: 'invalid_request_error', message: expect.stringMatching(/not valid JSON/) } });
    const unknown = await post('/completions', '{}');
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { message: string } }).error.message).toMatch(/Not found: POST \/v1\/completions/);
    expect((await fetch(`${server.url}/chat/completions`)).status).toBe(405);
  });
});

describe('GenerationBatcher (continuous batching)', () => {
  it('rows joining and leaving a running batch sample exactly as they would alone', async () => {
    const batcher = new GenerationBatcher(model, { sampling: { temperature: 1, topK: 0, topP: 1 }, rng: seededRandom(1) });
    const user = (text: string) => model.template.prompt([{ role: 'user', content: text }], []);
    const jobs = [
      { prompt: user('Use the calculator tool evaluate to compute 2 + 3.'), maxNewTokens: 30, seed: 11, sampling: { temperature: 1, topK: 0, topP: 1 } },
      {
        prompt: user('Use the calculator tool evaluate to compute 98 - 4. Answer with the exact result only.'),
        maxNewTokens: 90,
        seed: 12,
        sampling: { temperature: 1.2, topK: 0, topP: 1 },
      },
      { prompt: user(`${'A longer question. '.repeat(8)}What is 7 * 6?`), maxNewTokens: 120, seed: 13, sampling: { temperature: 0.9, topK: 50, topP: 0.95 } },
      { prompt: user('Divide 144 by 12, then add 7.'), maxNewTokens: 8, seed: 14, sampling: { temperature: 1, topK: 0, topP: 1 } },
    ];
    try {
      // The first row runs alone; each next one joins once the row before it has sampled 3 tokens
      // (or ended sooner): the cache grows for the longer ones, short rows leave while others go on.
      const results: Promise<{ tokens: number[]; logprobs: number[] }>[] = [];
      const start = (i: number) => {
        const j = jobs[i]!;
        let n = 0;
        const next = () => {
          if (i + 1 < jobs.length && results.length === i + 1) start(i + 1);
        };
        results[i] = batcher.submit({
          prompt: j.prompt,
          maxNewTokens: j.maxNewTokens,
          sampling: j.sampling,
          rng: seededRandom(j.seed),
          onToken: () => {
            if (++n === 3) next();
          },
        });
        results[i]!.then(next, next);
      };
      start(0);
      for (let t = 0; results.length < jobs.length; t++) {
        expect(t).toBeLessThan(1000);
        await new Promise((r) => setTimeout(r, 5));
      }
      const got = await Promise.all(results);
      for (const [i, j] of jobs.entries()) {
        const [alone] = await model.generate([j.prompt], { ...j.sampling, maxNewTokens: j.maxNewTokens, rng: seededRandom(j.seed) });
        expect(got[i]!.tokens, `row ${i}`).toEqual(alone!.tokens);
        got[i]!.logprobs.forEach((lp, k) => expect(Math.abs(lp - alone!.logprobs[k]!)).toBeLessThan(1e-4));
      }
      expect(batcher.stats()).toMatchObject({ rows: 4, running: 0, queued: 0 });
      expect(batcher.stats().largestBatch).toBeGreaterThanOrEqual(2);
    } finally {
      await batcher.close();
    }
  });

  it('OnnxModel.reload during a run: running rows finish on the old weights, new rows start on the new', async () => {
    const { copy, cfg, cfgFile, uniform } = flatCopy();
    const m = await OnnxModel.load(copy);
    const batcher = new GenerationBatcher(m, { sampling: { temperature: 1, topK: 0, topP: 1 }, rng: seededRandom(1) });
    try {
      const prompt = m.template.prompt([{ role: 'user', content: USER }], []);
      const old = batcher.submit({ prompt, maxNewTokens: 200, rng: seededRandom(1) });
      await untilRunning(() => batcher.stats().running);
      writeAtomic(join(copy, cfg.onnx.data), readFileSync(join(BUNDLED_MODEL_DIR, cfg.onnx.data)));
      writeAtomic(cfgFile, JSON.stringify({ ...cfg, version: 6 }));
      expect(await m.reload()).toBe(true);
      const fresh = await batcher.submit({ prompt, maxNewTokens: 20, rng: seededRandom(1) });
      const g = await old;
      expect(g.version).toBe(5);
      expect(g.logprobs.every((lp) => Math.abs(lp - uniform) < 1e-4)).toBe(true);
      expect(fresh.version).toBe(6);
      const [alone] = await model.generate([prompt], { temperature: 1, topK: 0, topP: 1, maxNewTokens: 20, rng: seededRandom(1) });
      expect(fresh.tokens).toEqual(alone!.tokens);
    } finally {
      await batcher.close();
      await m.close();
    }
  });
});

describe('parseCompletion (the message a completion becomes)', () => {
  const { callOpen, callClose, end, user } = TOKENS;
  const call = (text: string) => [callOpen, ...bytes(text), callClose];
  const cases: { name: string; tokens: number[]; content: string; calls: { name: string; arguments: string }[]; rendersBack: boolean }[] = [
    {
      name: 'a tool call',
      tokens: [...call('evaluate {"expression":"2 + 3"}'), end],
      content: '',
      calls: [{ name: 'evaluate', arguments: '{"expression":"2 + 3"}' }],
      rendersBack: true,
    },
    {
      name: 'text and two calls',
      tokens: [...bytes('Let me see.'), ...call('add {"a":"1","b":"2"}'), ...call('multiply {"a":"3","b":"4"}'), end],
      content: 'Let me see.',
      calls: [
        { name: 'add', arguments: '{"a":"1","b":"2"}' },
        { name: 'multiply', arguments: '{"a":"3","b":"4"}' },
      ],
      rendersBack: true,
    },
    { name: 'an answer, untrimmed', tokens: [...bytes(' 5 '), end], content: ' 5 ', calls: [], rendersBack: true },
    {
      name: 'arguments that are not JSON, as sampled',
      tokens: [...call('evaluate {"expression":'), end],
      content: '',
      calls: [{ name: 'evaluate', arguments: '{"expression":' }],
      rendersBack: true,
    },
    { name: 'a name and one space only', tokens: [...call('evaluate '), end], content: '', calls: [{ name: 'evaluate', arguments: '' }], rendersBack: true },
    { name: 'UTF-8 characters across tokens', tokens: [...bytes('é = ½'), end], content: 'é = ½', calls: [], rendersBack: true },
    { name: 'cut off in the text (the rendering adds <|end|>)', tokens: bytes('12'), content: '12', calls: [], rendersBack: true },
    // The drift cases (the header of serve-policy.ts lists them).
    { name: 'cut off inside a tool call', tokens: [callOpen, ...bytes('evaluate {"ex')], content: '', calls: [], rendersBack: false },
    { name: 'cut off inside a character', tokens: [...bytes('x'), 0xc3], content: 'x\ufffd', calls: [], rendersBack: false },
    { name: 'a call never closed', tokens: [callOpen, ...bytes('evaluate {}'), end], content: '', calls: [], rendersBack: false },
    { name: 'a call without a tool name', tokens: [...call('{"a":1}'), end], content: '', calls: [], rendersBack: false },
    {
      name: 'text after a call',
      tokens: [...call('evaluate {}'), ...bytes('done'), end],
      content: '',
      calls: [{ name: 'evaluate', arguments: '{}' }],
      rendersBack: false,
    },
    {
      name: 'no space between name and arguments',
      tokens: [...call('evaluate{}'), end],
      content: '',
      calls: [{ name: 'evaluate', arguments: '{}' }],
      rendersBack: false,
    },
    { name: 'a byte that is not UTF-8', tokens: [0xff, end], content: '\ufffd', calls: [], rendersBack: false },
    { name: 'a special token inside the text', tokens: [...bytes('a'), user, ...bytes('b'), end], content: 'ab', calls: [], rendersBack: false },
    { name: 'a closing marker without an opening one', tokens: [...bytes('7'), callClose, end], content: '7', calls: [], rendersBack: false },
  ];
  it.each(cases)('$name', ({ tokens, content, calls, rendersBack }) => {
    const r = parseCompletion(tokens, model.template);
    expect(r).toEqual({ content, toolCalls: calls, rendersBack });
  });
});
