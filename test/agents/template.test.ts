import { describe, expect, it } from 'vitest';
import { ChatTemplate, decode, bytes, parseAssistantTokens, TOKENS as T } from '../../src/agents/index.ts';

const tpl = new ChatTemplate({ maxToolResultBytes: 16, systemTools: true });

describe('tokenizer and chat template', () => {
  it('is byte-level UTF-8 with special tokens', () => {
    expect(bytes('aé')).toEqual([97, 195, 169]);
    expect(decode([T.user, 104, 105, T.end])).toBe('<|user|>hi<|end|>');
    expect(decode([T.user, 104, 105, T.end], true)).toBe('hi');
    expect(decode(bytes('答案是 42'))).toBe('答案是 42');
  });

  it('renders a conversation with the loss mask on the assistant tokens only', () => {
    const msgs = [
      { role: 'user' as const, content: 'add' },
      { role: 'assistant' as const, content: '', tool_calls: [{ function: { name: 'evaluate', arguments: '{"expression":"1+2"}' } }] },
      { role: 'tool' as const, content: '3' },
      { role: 'assistant' as const, content: '3' },
    ];
    const { ids, mask } = tpl.conversation(msgs, ['evaluate']);
    expect(decode(ids)).toBe(
      '<|system|>tools: evaluate<|end|><|user|>add<|end|><|assistant|><|tool_call|>evaluate {"expression":"1+2"}<|/tool_call|><|end|><|tool|>3<|end|><|assistant|>3<|end|>',
    );
    const masked = decode(ids.filter((_, i) => mask[i]));
    expect(masked).toBe('<|tool_call|>evaluate {"expression":"1+2"}<|/tool_call|><|end|>3<|end|>');
    // The same pieces the policy appends turn by turn.
    const incremental = [
      ...tpl.prompt(msgs.slice(0, 1), ['evaluate']),
      ...tpl.assistantBody('', [{ name: 'evaluate', arguments: '{"expression":"1+2"}' }]),
      ...tpl.continuation(['3']),
      ...tpl.assistantBody('3', []),
    ];
    expect(incremental).toEqual(ids);
  });

  it('clips long tool results on a character boundary', () => {
    const r = tpl.toolResult('ééééééééééééééé');
    expect(r[0]).toBe(T.tool);
    expect(r.at(-1)).toBe(T.end);
    expect(r.length - 2).toBeLessThanOrEqual(16);
    expect(decode(r.slice(1, -1))).toBe('éééééé...');
  });

  it('parses tool calls, and reports malformed ones instead of throwing', () => {
    const ok = parseAssistantTokens([...bytes('thinking'), T.callOpen, ...bytes('evaluate {"expression":"2*3"}'), T.callClose, T.end]);
    expect(ok).toEqual({ content: 'thinking', calls: [{ name: 'evaluate', arguments: { expression: '2*3' } }] });
    expect(parseAssistantTokens([...bytes('42'), T.end])).toEqual({ content: '42', calls: [] });
    const two = parseAssistantTokens([
      T.callOpen,
      ...bytes('get {"key":"a"}'),
      T.callClose,
      T.callOpen,
      ...bytes('set {"key":"b","value":"1"}'),
      T.callClose,
      T.end,
    ]);
    expect(two.calls.map((c) => c.name)).toEqual(['get', 'set']);
    const badJson = parseAssistantTokens([T.callOpen, ...bytes('evaluate {"expression": 2*3}'), T.callClose, T.end]);
    expect(badJson.calls).toEqual([]);
    expect(badJson.error).toMatch(/the arguments of tool call 'evaluate' are not a JSON object/);
    const unclosed = parseAssistantTokens([T.callOpen, ...bytes('evaluate {}'), T.end]);
    expect(unclosed.error).toMatch(/tool call not closed/);
    const cut = parseAssistantTokens(bytes('no end'));
    expect(cut.error).toMatch(/did not end with <\|end\|>/);
    const noName = parseAssistantTokens([T.callOpen, ...bytes('{"a":1}'), T.callClose, T.end]);
    expect(noName.error).toMatch(/without a tool name/);
  });
});
