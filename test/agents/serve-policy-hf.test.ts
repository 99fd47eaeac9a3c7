/**
 * serve-policy with a Hugging Face checkpoint (serve-dialect.ts's hfDialect):
 *
 * (a) Without a model, on Qwen3's and a Llama-3.1-shaped tokenizer: a sampled assistant turn
 *     (text, then tool calls in the family's format) is read as OpenAI's message: the content
 *     before the first call, the calls with their arguments as written; sent back in the next
 *     request, it renders to the same tokens (the next prompt extends prompt + completion). A call
 *     with other JSON spacing than the template's reads the same but does not render back. Streamed token by token, the content deltas add up to the
 *     same content and the calls come out when the turn ends; a turn without calls streams its
 *     whole text, without the end token.
 * (b) A tiny exported Qwen3 checkpoint served over HTTP, read with the official openai SDK: the
 *     prompt's ids are the chat template's rendering of the request's messages and tools (as
 *     HfTurns renders an episode), greedy tokens and logprobs are OnnxModel.generate's, a streamed
 *     request with a seed gives the non-streamed one's tokens, /v1/reload of the same directory
 *     reloads nothing, and reloading the embedded GPT in its place is refused.
 *
 * (b) needs the learner's venv (.venv/bin/python or $MCP_GYM_HF_PYTHON); without it, it is skipped.
 */
import OpenAI, { BadRequestError } from 'openai';
import type { ChatCompletion, ChatCompletionCreateParamsNonStreaming, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HfTurns } from '../../src/agents/hf-turns.ts';
import { OnnxModel } from '../../src/agents/onnx/index.ts';
import { hfDialect, type Conversation } from '../../src/agents/serve-dialect.ts';
import { startPolicyServer, type PolicyServer } from '../../src/agents/serve-policy/index.ts';
import type { TemplateMessage } from '../../src/agents/template.ts';
import { BUNDLED_MODEL_DIR } from '../../src/paths.ts';
import { seededRandom } from '../../lib/index.ts';
import { buildLlama31TokenizerDir, callText, END_TOKEN, HAVE_HF_PY, HF_PY, makeTinyCheckpoints, QWEN_TOK, type CallFamily } from '../helpers/hf-fixtures.ts';

const TOOLS: ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Adds two numbers.',
      parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'kv_set',
      description: 'Stores a value.',
      parameters: { type: 'object', properties: { key: { type: 'string' }, value: { type: 'string' } }, required: ['key', 'value'] },
    },
  },
];
const conversation = (messages: TemplateMessage[]): Conversation => ({
  messages,
  tools: TOOLS.map((t) => t as Conversation['tools'][number]),
  toolNames: TOOLS.map((t) => (t as { function: { name: string } }).function.name),
});
const OPENING: TemplateMessage[] = [
  { role: 'system', content: 'You are a careful assistant. Use the tools.' },
  { role: 'user', content: 'Add 2 and 3, then store the sum under "sum". Café ✓' },
];

let llamaTokDir = '';
beforeAll(() => {
  llamaTokDir = buildLlama31TokenizerDir();
});

describe('(a) hfDialect: completions read as messages that render back, streamed alike (no model)', () => {
  for (const family of ['qwen', 'llama3'] as CallFamily[]) {
    it(`${family}: content and calls read as written (one with odd spacing, which cannot render back); sent back, the next prompt extends prompt + completion`, () => {
      const turns = HfTurns.load(family === 'qwen' ? QWEN_TOK : llamaTokDir);
      const dialect = hfDialect(turns);
      const tok = turns.tokenizer;
      const c = conversation(OPENING);
      const prompt = dialect.prompt(c);
      expect(tok.decode(prompt)).toBe(
        turns.renderer.render(
          OPENING.map((m) => ({ role: m.role, content: m.content })),
          { tools: c.tools, addGenerationPrompt: true },
        ),
      );

      // Llama 3.1's template writes one call per turn; Qwen's several.
      const calls =
        family === 'qwen'
          ? [callText(family, 'add', { a: 2, b: 3 }), callText(family, 'kv_set', { key: 'sum', value: '5' })]
          : [callText(family, 'add', { a: 2, b: 3 })];
      const text = family === 'qwen' ? `I will add first.\n${calls.join('\n')}${END_TOKEN[family]}` : `${calls[0]}${END_TOKEN[family]}`;
      const tokens = tok.encode(text);
      const turn = dialect.parse(c, tokens);
      expect(turn.toolCalls.map((t) => t.name)).toEqual(family === 'qwen' ? ['add', 'kv_set'] : ['add']);
      expect(turn.toolCalls.map((t) => JSON.parse(t.arguments))).toEqual(
        family === 'qwen'
          ? [
              { a: 2, b: 3 },
              { key: 'sum', value: '5' },
            ]
          : [{ a: 2, b: 3 }],
      );
      if (family === 'qwen') expect(turn.content).toBe('I will add first.');
      expect(turn.rendersBack).toBe(true);

      // The client sends the message back with the tool results: the next prompt starts with prompt + completion.
      const next: TemplateMessage[] = [
        ...OPENING,
        { role: 'assistant', content: turn.content, tool_calls: turn.toolCalls.map((t, i) => ({ id: `call_${i}`, function: t })) },
        ...turn.toolCalls.map((t, i): TemplateMessage => ({ role: 'tool', content: t.name === 'add' ? '5' : 'ok', tool_call_id: `call_${i}`, name: t.name })),
      ];
      const nextPrompt = dialect.prompt(conversation(next));
      expect(nextPrompt.slice(0, prompt.length + tokens.length)).toEqual([...prompt, ...tokens]);

      // Streamed: content deltas add up to the content; the calls come out at the end of the turn.
      const s = dialect.streamer();
      let streamed = '';
      for (const t of tokens) {
        const d = s.push(t);
        expect(d.call).toBeUndefined();
        streamed += d.content ?? '';
      }
      streamed += s.finish().content ?? '';
      expect(streamed).toBe(turn.content);
      expect(s.calls).toEqual(turn.toolCalls);

      // A call written with other spacing than the template's reads the same, but cannot render back as sampled.
      const loose = tok.encode(`${callText(family, 'add', { a: 2, b: 3 }, 'loose')}${END_TOKEN[family]}`);
      const odd = dialect.parse(c, loose);
      expect(odd.toolCalls.map((t) => [t.name, JSON.parse(t.arguments)])).toEqual([['add', { a: 2, b: 3 }]]);
      expect(odd.rendersBack).toBe(false);
    });
  }

  it('a turn without calls streams its whole text, without the end token; a turn cut before its end token reads the same', () => {
    const turns = HfTurns.load(QWEN_TOK);
    const dialect = hfDialect(turns);
    const c = conversation(OPENING);
    const answer = 'The sum is 5 < 6, stored. Café ✓';
    for (const text of [`${answer}<|im_end|>`, answer]) {
      const tokens = turns.tokenizer.encode(text);
      const s = dialect.streamer();
      const deltas = tokens.map((t) => s.push(t).content ?? '');
      deltas.push(s.finish().content ?? '');
      expect(deltas.join('')).toBe(answer);
      expect(deltas.every((d) => !d.includes('\ufffd'))).toBe(true);
      const turn = dialect.parse(c, tokens);
      expect(turn).toEqual({ content: answer, toolCalls: [], rendersBack: true });
    }
  });
});

type Params = ChatCompletionCreateParamsNonStreaming & { return_token_ids?: boolean };
type Completion = ChatCompletion & { prompt_token_ids?: number[]; choices: (ChatCompletion.Choice & { token_ids?: number[] })[] };

describe.skipIf(!HAVE_HF_PY)(`(b) a tiny Qwen3 checkpoint served (learner Python: ${HF_PY})`, () => {
  let dir = '';
  let server: PolicyServer;
  let client: OpenAI;
  let model: OnnxModel;
  const prepared: string[] = [];

  beforeAll(async () => {
    dir = makeTinyCheckpoints([{ name: 'qwen3', family: 'qwen3', export: true }]).qwen3!;
    server = await startPolicyServer({ modelDir: dir, seed: 5, prepare: (d) => void prepared.push(d) });
    client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
    model = await OnnxModel.load(dir);
  }, 240_000);

  afterAll(async () => {
    await server?.close();
    await model?.close();
  });

  it('prompt ids are the template rendering of messages and tools; greedy tokens and logprobs are OnnxModel.generate’s', async () => {
    expect(prepared).toEqual([dir]);
    expect(server.modelName).toBe('qwen3');
    const r = (await client.chat.completions.create({
      model: server.modelName,
      messages: OPENING,
      tools: TOOLS,
      temperature: 0,
      max_tokens: 24,
      logprobs: true,
      return_token_ids: true,
    } as Params)) as Completion;
    const turns = HfTurns.load(dir);
    const expected = hfDialect(turns).prompt(conversation(OPENING));
    expect(r.prompt_token_ids).toEqual(expected);
    const [g] = await model.generate([expected], { temperature: 0, topK: 0, topP: 1, maxNewTokens: 24, rng: seededRandom(1) });
    const choice = r.choices[0]!;
    expect(choice.token_ids).toEqual(g!.tokens);
    choice.logprobs!.content!.forEach((e, i) => expect(e.logprob).toBeCloseTo(g!.logprobs[i]!, 4));
    expect(choice.logprobs!.content!.map((e) => e.token).join('')).toBe(turns.tokenizer.decode(g!.tokens));
    expect(r.usage).toMatchObject({ prompt_tokens: expected.length, completion_tokens: g!.tokens.length });
  });

  it('a streamed request with a seed gives the tokens and text of the same request unstreamed', async () => {
    const params = { model: server.modelName, messages: OPENING, tools: TOOLS, temperature: 1, max_tokens: 20, seed: 11, return_token_ids: true };
    const whole = (await client.chat.completions.create(params as Params)) as Completion;
    const stream = await client.chat.completions.create({ ...params, stream: true } as never);
    const ids: number[] = [];
    let content = '';
    for await (const chunk of stream as unknown as AsyncIterable<{ choices: { delta: { content?: string }; token_ids?: number[] }[] }>) {
      const c = chunk.choices[0];
      if (!c) continue;
      ids.push(...(c.token_ids ?? []));
      content += c.delta.content ?? '';
    }
    expect(ids).toEqual(whole.choices[0]!.token_ids);
    expect(content).toBe(whole.choices[0]!.message.content ?? '');
  });

  it('/v1/reload: the same directory reloads nothing; the embedded GPT in its place is refused', async () => {
    const same = await fetch(`${server.url}/reload`, { method: 'POST', body: '{}' });
    expect(await same.json()).toMatchObject({ reloaded: false, model_dir: dir });
    await expect(client.post('/reload', { body: { model_dir: BUNDLED_MODEL_DIR } })).rejects.toThrow(BadRequestError);
    await expect(client.post('/reload', { body: { model_dir: BUNDLED_MODEL_DIR } })).rejects.toThrow(
      /embedded GPT; the served one is a Hugging Face checkpoint/,
    );
  });
});
