/**
 * The Anthropic policy through the real SDK, against a local replay server of the Messages API
 * (test/helpers/anthropic-replay.ts): episodes through the real Environment on bundled calculator
 * tasks, what each request carried (thinking blocks passed back unchanged, tool results as one
 * user message, tools, auth), usage, retries (retry-after, 529), failures that end only their
 * episode without leaking the key, the stop reasons, the judge call and a missing key.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AnthropicPolicy, toAnthropicMessages } from '../../src/agents/anthropic.ts';
import { Environment, openingMessages, type AgentTool, type ChatMessage, type Observation, type Task } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import {
  apiError,
  messageResponse,
  ok,
  redactedThinkingBlock,
  startAnthropicReplay,
  textBlock,
  thinkingBlock,
  toolUseBlock,
  type AnthropicReplay,
  type ReplayStep,
} from '../helpers/anthropic-replay.ts';

const KEY = 'sk-ant-api03-replay-test-key-0123456789abcdef';
const MODEL = 'claude-haiku-4-5';

let savedKey: string | undefined;
const servers: AnthropicReplay[] = [];

async function replay(script: ReplayStep[]): Promise<AnthropicReplay> {
  const r = await startAnthropicReplay(script);
  servers.push(r);
  return r;
}

beforeEach(() => {
  savedKey = process.env.ANTHROPIC_API_KEY;
  process.env.ANTHROPIC_API_KEY = KEY;
});

afterEach(async () => {
  if (savedKey === undefined) delete process.env.ANTHROPIC_API_KEY;
  else process.env.ANTHROPIC_API_KEY = savedKey;
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

const tasks: Task[] = generateSuite('calculator', { eval: 4, train: 0 });
let env: Environment;

beforeAll(() => {
  env = new Environment({ bundled: 'inprocess' });
});

afterAll(async () => {
  await env.close();
});

/** The calculator's tool as the agent sees it in a single-server task (for direct `act` calls). */
const evaluateTool: AgentTool = {
  name: 'evaluate',
  description: 'Evaluate an arithmetic expression',
  inputSchema: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
  server: 'calculator',
  tool: 'evaluate',
};

function observation(task: Task, o: { messages?: ChatMessage[]; turn?: number; episodeId?: string } = {}): Observation {
  const messages = o.messages ?? openingMessages(task).map((m) => ({ ...m }));
  return { task, messages, tools: [evaluateTool], turn: o.turn ?? 0, newMessages: messages, episodeId: o.episodeId ?? 'run:ep:0' };
}

function solution(task: Task) {
  const call = task.solution!.calls[0]!;
  return { tool: call.tool, args: call.arguments as Record<string, unknown>, answer: task.solution!.answer };
}

describe('a tool episode through the environment', () => {
  it('passes the thinking block back unchanged, returns the result as a tool_result, and sums usage', async () => {
    const task = tasks[0]!;
    const { tool, args, answer } = solution(task);
    const thinking = thinkingBlock(`The user wants ${String(args.expression)}; I will call ${tool}.\n`);
    const use = toolUseBlock(tool, args);
    const r = await replay([
      ok(
        messageResponse([thinking, textBlock('Let me compute that.'), use], {
          stop_reason: 'tool_use',
          usage: { input_tokens: 500, output_tokens: 80, cache_creation_input_tokens: 40, cache_read_input_tokens: 10 },
        }),
      ),
      ok(messageResponse([textBlock(answer)], { stop_reason: 'end_turn', usage: { input_tokens: 620, output_tokens: 5 } })),
    ]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, thinking: { type: 'enabled', budgetTokens: 2048 } });
    expect(policy.id).toBe(`anthropic:${MODEL}`);

    const traj = await env.runEpisode(task, policy, { groupId: 'g', sample: 0 });
    expect(traj.error).toBeUndefined();
    expect(traj.finish).toBe('answer');
    expect(traj.success).toBe(true);
    expect(traj.answer).toBe(answer);
    expect(traj.policy.id).toBe(`anthropic:${MODEL}`);
    expect(r.requests).toHaveLength(2);

    const [first, second] = r.requests;
    // The SDK's headers: the key as a bearer token, the API version whose rules the policy follows.
    expect(first!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(first!.headers['anthropic-version']).toBe('2026-10-21');
    expect(first!.path).toBe('/v1/messages');
    expect(first!.body.model).toBe(MODEL);
    expect(first!.body.thinking).toEqual({ type: 'enabled', budget_tokens: 2048 });
    expect(first!.body.max_tokens).toBe(2048 + 1024);
    // Every tool of the task's server, in the API's shape: name, description, input_schema.
    const sent = first!.body.tools as { name: string; description: string; input_schema: { type: string; properties: object } }[];
    expect(sent.length).toBeGreaterThan(1);
    for (const t of sent) expect(Object.keys(t).sort()).toEqual(['description', 'input_schema', 'name']);
    for (const t of sent) expect(t.input_schema.type).toBe('object');
    const evaluate = sent.find((t) => t.name === tool)!;
    expect(Object.keys(evaluate.input_schema.properties)).toEqual(Object.keys(args));
    expect(first!.body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: openingMessages(task)[0]!.content }] }]);
    expect(first!.body).not.toHaveProperty('system');

    const messages = second!.body.messages;
    expect(messages.map((m: { role: string }) => m.role)).toEqual(['user', 'assistant', 'user']);
    const assistant = messages[1].content;
    expect(assistant.map((b: { type: string }) => b.type)).toEqual(['thinking', 'text', 'tool_use']);
    // Byte-identical: the same thinking text and signature, nothing added.
    expect(JSON.stringify(assistant[0])).toBe(JSON.stringify(thinking));
    expect(assistant[2]).toEqual({ type: 'tool_use', id: use.id, name: tool, input: args });
    expect(messages[2].content).toHaveLength(1);
    expect(messages[2].content[0]).toEqual({ type: 'tool_result', tool_use_id: use.id, content: traj.turns[0]!.tool_results[0]!.text });
    expect(messages[2].content[0].content).toContain(answer);

    // The API's tool id is the one the environment used; stop reasons and usage per turn.
    expect(traj.turns[0]!.action.tool_calls[0]!.id).toBe(use.id);
    expect(traj.turns[0]!.stop_reason).toBe('tool_use');
    expect(traj.turns[1]!.stop_reason).toBe('end_turn');
    expect(traj.turns[0]!.usage).toEqual({ prompt_tokens: 550, completion_tokens: 80 });
    expect(traj.turns[1]!.usage).toEqual({ prompt_tokens: 620, completion_tokens: 5 });
    expect(policy.usage()).toEqual({ requests: 2, failed_requests: 0, prompt_tokens: 1170, completion_tokens: 85 });
    // The episode's raw content was released by endEpisode.
    expect(policy.heldEpisodes).toBe(0);
  });

  it('sends parallel tool calls back as one user message of tool_results, ids matched, in order', async () => {
    const task = tasks[1]!;
    const { tool, args, answer } = solution(task);
    const a = toolUseBlock(tool, { expression: '558 - 906' });
    const b = toolUseBlock(tool, args);
    const r = await replay([
      ok(messageResponse([textBlock('Two steps at once.'), a, b], { stop_reason: 'tool_use' })),
      ok(messageResponse([textBlock(answer)], { stop_reason: 'end_turn' })),
    ]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const traj = await env.runEpisode(task, policy, { groupId: 'g', sample: 1 });
    expect(traj.finish).toBe('answer');
    expect(traj.success).toBe(true);
    expect(traj.turns[0]!.tool_results.map((s) => s.id)).toEqual([a.id, b.id]);

    const body = r.requests[1]!.body;
    expect(body).not.toHaveProperty('thinking');
    expect(body.messages).toHaveLength(3);
    expect(body.messages[1].content.filter((x: { type: string }) => x.type === 'tool_use').map((x: { id: string }) => x.id)).toEqual([a.id, b.id]);
    const results = body.messages[2];
    expect(results.role).toBe('user');
    expect(results.content.map((x: { type: string; tool_use_id: string }) => [x.type, x.tool_use_id])).toEqual([
      ['tool_result', a.id],
      ['tool_result', b.id],
    ]);
    expect(results.content[0].content).toContain('-348');
    expect(results.content[1].content).toContain(answer);
  });
});

describe('converting the conversation', () => {
  it('puts system messages in system, tool_results first and unmatched tool messages as text after them', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Compute 2+3.' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_a', type: 'function', function: { name: 'evaluate', arguments: '{"expression":"2+3"}' } }] },
      { role: 'tool', tool_call_id: 'invalid_0', name: 'error', content: 'Error: a call did not parse' },
      { role: 'tool', tool_call_id: 'toolu_a', name: 'evaluate', content: '5' },
      { role: 'tool', tool_call_id: 'toolu_b', name: 'evaluate', content: '' },
    ];
    const out = toAnthropicMessages(messages);
    expect(out.system).toBe('Be brief.');
    expect(out.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Compute 2+3.' }] },
      // No empty text block for the empty content.
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_a', name: 'evaluate', input: { expression: '2+3' } }] },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_a', content: '5' },
          { type: 'text', text: 'Error: a call did not parse' },
        ],
      },
    ]);
  });

  it('uses a stored turn only for its own episode and calls', async () => {
    const task = tasks[0]!;
    const { tool, args, answer } = solution(task);
    const thinking = thinkingBlock('Thinking of episode A.');
    const use = toolUseBlock(tool, args);
    const r = await replay([
      ok(messageResponse([thinking, use], { stop_reason: 'tool_use' })),
      ok(messageResponse([textBlock(answer)], { stop_reason: 'end_turn' })),
      ok(messageResponse([textBlock(answer)], { stop_reason: 'end_turn' })),
    ]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, thinking: { type: 'enabled', budgetTokens: 1024 } });
    const first = await policy.act(observation(task, { episodeId: 'A' }));
    const id = first.toolCalls![0]!.id!;
    const later: ChatMessage[] = [
      ...openingMessages(task),
      { role: 'assistant', content: '', tool_calls: [{ id, type: 'function', function: { name: tool, arguments: JSON.stringify(args) } }] },
      { role: 'tool', tool_call_id: id, name: tool, content: answer },
    ];
    await policy.act(observation(task, { messages: later, turn: 1, episodeId: 'B' }));
    await policy.act(observation(task, { messages: later, turn: 1, episodeId: 'A' }));
    expect(r.requests[1]!.body.messages[1].content.map((x: { type: string }) => x.type)).toEqual(['tool_use']);
    expect(r.requests[2]!.body.messages[1].content[0]).toEqual(thinking);
    expect(policy.heldEpisodes).toBe(2);
    policy.endEpisode('A');
    policy.endEpisode('B');
    expect(policy.heldEpisodes).toBe(0);
  });
});

describe('retries and failures', () => {
  it('waits for retry-after on a 429, then succeeds', async () => {
    const task = tasks[0]!;
    const r = await replay([
      apiError(429, 'Number of request tokens has exceeded your per-minute rate limit', { headers: { 'retry-after': '1' } }),
      ok(messageResponse([textBlock('94')], { stop_reason: 'end_turn' })),
    ]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const action = await policy.act(observation(task));
    expect(action.content).toBe('94');
    expect(action.toolCalls).toBeUndefined();
    expect(r.requests).toHaveLength(2);
    expect(r.requests[1]!.at - r.requests[0]!.at).toBeGreaterThanOrEqual(900);
    expect(r.requests[1]!.headers['x-stainless-retry-count']).toBe('1');
    expect(policy.usage()).toMatchObject({ requests: 1, failed_requests: 0 });
  });

  it('retries a 529 overloaded error', async () => {
    const r = await replay([apiError(529, 'Overloaded'), ok(messageResponse([textBlock('94')], { stop_reason: 'end_turn' }))]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const action = await policy.act(observation(tasks[0]!));
    expect(action.content).toBe('94');
    expect(r.requests.map((q) => q.step)).toEqual([0, 1]);
  });

  it('ends only the episode when the retries run out, naming the status and model, never the key', async () => {
    const r = await replay([apiError(529, `Overloaded (request with key ${KEY})`), apiError(529, `Overloaded (request with key ${KEY})`)]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, maxRetries: 1 });
    const traj = await env.runEpisode(tasks[0]!, policy, { groupId: 'g', sample: 2 });
    expect(traj.finish).toBe('error');
    expect(traj.success).toBe(false);
    expect(traj.error).toMatch(/HTTP 529/);
    expect(traj.error).toContain(`anthropic ${MODEL}`);
    expect(traj.error).toContain('overloaded_error');
    expect(traj.error).toContain('[key]');
    expect(traj.error).not.toContain(KEY);
    expect(JSON.stringify(traj)).not.toContain(KEY);
    // One try and one retry: no third request.
    expect(r.requests).toHaveLength(2);
    expect(policy.usage()).toEqual({ requests: 1, failed_requests: 1, prompt_tokens: 0, completion_tokens: 0 });
    expect(policy.heldEpisodes).toBe(0);
  });

  it('fails an act at once on a 400, as an error naming the model', async () => {
    const r = await replay([apiError(400, 'messages.1.content.0: Invalid `signature` in `thinking` block')]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    await expect(policy.act(observation(tasks[0]!))).rejects.toThrow(/^anthropic claude-haiku-4-5: HTTP 400: .*invalid_request_error/);
    expect(r.requests).toHaveLength(1);
    expect(policy.usage().failed_requests).toBe(1);
  });

  it('stops a request when the signal aborts', async () => {
    const r = await replay([{ ...ok(messageResponse([textBlock('late')], { stop_reason: 'end_turn' })), delayMs: 3000 }]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const t0 = performance.now();
    await expect(policy.act(observation(tasks[0]!), AbortSignal.timeout(100))).rejects.toThrow(/^anthropic claude-haiku-4-5: /);
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe('stop reasons and thinking', () => {
  it('records max_tokens and ends the episode with the text, dropping a cut-off tool_use', async () => {
    const task = tasks[0]!;
    const { tool } = solution(task);
    const r = await replay([ok(messageResponse([textBlock('The result is'), toolUseBlock(tool, {})], { stop_reason: 'max_tokens' }))]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, maxTokens: 16 });
    const traj = await env.runEpisode(task, policy, { groupId: 'g', sample: 3 });
    expect(r.requests[0]!.body.max_tokens).toBe(16);
    expect(traj.finish).toBe('answer');
    expect(traj.answer).toBe('The result is');
    expect(traj.turns).toHaveLength(1);
    expect(traj.turns[0]!.stop_reason).toBe('max_tokens');
    expect(traj.turns[0]!.action.tool_calls).toEqual([]);
    expect(r.requests).toHaveLength(1);
  });

  it('records a refusal and ends the episode with its (empty) text', async () => {
    const r = await replay([ok(messageResponse([], { stop_reason: 'refusal' }))]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const traj = await env.runEpisode(tasks[0]!, policy, { groupId: 'g', sample: 4 });
    expect(traj.finish).toBe('answer');
    expect(traj.answer).toBe('');
    expect(traj.success).toBe(false);
    expect(traj.turns[0]!.stop_reason).toBe('refusal');
  });

  it('ends the turn on pause_turn with its text', async () => {
    const r = await replay([ok(messageResponse([textBlock('Still working'), toolUseBlock('evaluate', { expression: '1+1' })], { stop_reason: 'pause_turn' }))]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const action = await policy.act(observation(tasks[0]!));
    expect(action).toMatchObject({ content: 'Still working', stopReason: 'pause_turn' });
    expect(action.toolCalls).toBeUndefined();
  });

  it('sends adaptive thinking as such, with the effort, for claude-opus-4-6', async () => {
    const r = await replay([ok(messageResponse([thinkingBlock('Easy.'), textBlock('94')], { stop_reason: 'end_turn', model: 'claude-opus-4-6' }))]);
    const policy = new AnthropicPolicy('claude-opus-4-6', { baseURL: r.url, thinking: { type: 'adaptive' }, effort: 'high' });
    const action = await policy.act(observation(tasks[0]!));
    expect(action.content).toBe('94');
    const body = r.requests[0]!.body;
    expect(body.model).toBe('claude-opus-4-6');
    expect(body.thinking).toEqual({ type: 'adaptive' });
    expect(body.output_config).toEqual({ effort: 'high' });
    expect(body.max_tokens).toBe(1024);
  });

  it('passes redacted_thinking blocks back unchanged, in their order', async () => {
    const task = tasks[0]!;
    const { tool, args, answer } = solution(task);
    const redacted = redactedThinkingBlock();
    const thinking = thinkingBlock('Part that was not redacted.');
    const use = toolUseBlock(tool, args);
    const r = await replay([
      ok(messageResponse([redacted, thinking, use], { stop_reason: 'tool_use' })),
      ok(messageResponse([textBlock(answer)], { stop_reason: 'end_turn' })),
    ]);
    const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, thinking: { type: 'enabled', budgetTokens: 4096 }, maxTokens: 8000 });
    const traj = await env.runEpisode(task, policy, { groupId: 'g', sample: 5 });
    expect(traj.success).toBe(true);
    expect(r.requests[0]!.body.max_tokens).toBe(8000);
    const content = r.requests[1]!.body.messages[1].content;
    expect(content).toHaveLength(3);
    expect(JSON.stringify(content[0])).toBe(JSON.stringify(redacted));
    expect(JSON.stringify(content[1])).toBe(JSON.stringify(thinking));
    expect(content[2].id).toBe(use.id);
  });

  it('never sends temperature or top_p (API version 2026-10-21 refuses them), and warns once', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const r = await replay([ok(messageResponse([textBlock('94')], { stop_reason: 'end_turn' }))]);
      const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, temperature: 0.7, topP: 0.9 });
      await policy.act(observation(tasks[0]!));
      const body = r.requests[0]!.body;
      expect(body).not.toHaveProperty('temperature');
      expect(body).not.toHaveProperty('top_p');
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.some((w) => /temperature and top_p are not sent/.test(w))).toBe(true);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('refuses a thinking budget under 1024', () => {
    expect(() => new AnthropicPolicy(MODEL, { thinking: { type: 'enabled', budgetTokens: 500 } })).toThrow(/at least 1024/);
  });
});

describe('complete (a judge)', () => {
  it('returns the text and usage of a plain call with a system prompt and no tools', async () => {
    const r = await replay([
      ok(
        messageResponse([textBlock('Score: '), textBlock('0.8')], {
          stop_reason: 'end_turn',
          usage: { input_tokens: 300, output_tokens: 7, cache_read_input_tokens: 200 },
        }),
      ),
      ok(messageResponse([thinkingBlock('Weighing it.'), textBlock('0.5')], { stop_reason: 'end_turn' })),
    ]);
    const judge = new AnthropicPolicy(MODEL, { baseURL: r.url });
    const result = await judge.complete({
      system: 'You are a strict judge.',
      messages: [{ role: 'user', content: 'Rate: 2+2=4' }],
      maxTokens: 300,
      temperature: 0,
    });
    expect(result).toEqual({ text: 'Score: 0.8', usage: { prompt_tokens: 500, completion_tokens: 7 } });
    const body = r.requests[0]!.body;
    expect(body.system).toBe('You are a strict judge.');
    expect(body.messages).toEqual([{ role: 'user', content: 'Rate: 2+2=4' }]);
    expect(body.max_tokens).toBe(300);
    expect(body).not.toHaveProperty('tools');
    expect(body).not.toHaveProperty('temperature');
    expect(body).not.toHaveProperty('thinking');
    expect(judge.usage()).toEqual({ requests: 1, failed_requests: 0, prompt_tokens: 500, completion_tokens: 7 });

    // With thinking configured, the judge call thinks too (max_tokens raised above the budget).
    const thinker = new AnthropicPolicy(MODEL, { baseURL: r.url, thinking: { type: 'enabled', budgetTokens: 2000 } });
    expect((await thinker.complete({ messages: [{ role: 'user', content: 'Rate it' }], maxTokens: 300 })).text).toBe('0.5');
    expect(r.requests[1]!.body.thinking).toEqual({ type: 'enabled', budget_tokens: 2000 });
    expect(r.requests[1]!.body.max_tokens).toBe(3024);
    expect(r.requests[1]!.body).not.toHaveProperty('system');
  });
});

describe('the API key', () => {
  it('is required: a clear error names the variable and the flag, and nothing is sent', async () => {
    const r = await replay([]);
    delete process.env.ANTHROPIC_API_KEY;
    expect(() => new AnthropicPolicy(MODEL, { baseURL: r.url })).toThrow(/ANTHROPIC_API_KEY/);
    expect(() => new AnthropicPolicy(MODEL, { baseURL: r.url })).toThrow(/--api-key-env/);
    expect(r.requests).toHaveLength(0);
  });

  it('comes from the variable apiKeyEnv names', async () => {
    const r = await replay([ok(messageResponse([textBlock('ok')], { stop_reason: 'end_turn' }))]);
    delete process.env.ANTHROPIC_API_KEY;
    process.env.MCP_GYM_TEST_CLAUDE_KEY = 'sk-ant-other-key';
    try {
      const policy = new AnthropicPolicy(MODEL, { baseURL: r.url, apiKeyEnv: 'MCP_GYM_TEST_CLAUDE_KEY' });
      await policy.complete({ messages: [{ role: 'user', content: 'hi' }] });
      expect(r.requests[0]!.headers.authorization).toBe('Bearer sk-ant-other-key');
      expect(r.requests[0]!.headers['x-api-key']).toBeUndefined();
    } finally {
      delete process.env.MCP_GYM_TEST_CLAUDE_KEY;
    }
  });
});
