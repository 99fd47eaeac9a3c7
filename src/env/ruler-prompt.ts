/** RULER's judge requests: a group's shared opening messages stated once, each trajectory after them (cut to size), the rubric. */
import type { ChatMessage, ChatRequest, Trajectory } from './types.ts';
import { DEFAULT_RUBRIC, type RulerOptions } from './ruler-types.ts';

/** How many leading messages all the message lists share (equal role, content, calls, ids). */
export function commonPrefixLength(lists: ChatMessage[][]): number {
  if (lists.length === 0) return 0;
  const key = (m: ChatMessage) => JSON.stringify([m.role, m.content, m.tool_calls ?? null, m.tool_call_id ?? null, m.name ?? null]);
  const shortest = Math.min(...lists.map((l) => l.length));
  let n = 0;
  while (n < shortest && lists.every((l) => key(l[n]!) === key(lists[0]![n]!))) n++;
  // Every trajectory keeps at least its last message as its own part (one list, identical lists,
  // or one list that is all a prefix of the others).
  return n === shortest ? Math.max(0, n - 1) : n;
}

/** `text` cut in its middle to at most about `max` characters, saying how much was cut. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = Math.ceil((max * 2) / 3);
  const tail = Math.max(0, max - head);
  return `${text.slice(0, head)} …[${text.length - head - tail} characters cut]… ${tail ? text.slice(-tail) : ''}`;
}

function renderMessages(messages: ChatMessage[], t: Trajectory | undefined, max: number): string {
  const errors = new Set(t?.turns.flatMap((u) => u.tool_results.filter((s) => s.isError).map((s) => s.id)) ?? []);
  const lines: string[] = [];
  for (const m of messages) {
    if (m.role === 'tool') {
      const error = m.tool_call_id !== undefined && (errors.has(m.tool_call_id) || m.tool_call_id.startsWith('invalid_'));
      lines.push(`[tool result${m.name ? ` of ${m.name}` : ''}${error ? ', an error' : ''}] ${clip(m.content, max)}`);
      continue;
    }
    if (m.content.trim() || !m.tool_calls?.length) lines.push(`[${m.role}] ${clip(m.content, max)}`);
    for (const c of m.tool_calls ?? []) lines.push(`[tool call] ${c.function.name}(${clip(c.function.arguments, max)})`);
  }
  return lines.join('\n');
}

function ending(t: Trajectory): string {
  return t.finish === 'answer'
    ? '(the episode ended with the final answer above)'
    : t.finish === 'max_turns'
      ? '(the episode ran out of turns without a final answer)'
      : '(the episode failed)';
}

/** The shared opening messages, stated once. */
function contextBlock(trajectories: Trajectory[], prefix: number, max: number): string {
  const shared = trajectories[0]!.messages.slice(0, prefix);
  return `<context>\n${shared.length ? renderMessages(shared, undefined, max) : '(no messages are shared)'}\n</context>`;
}

function trajectoryBlock(id: string, t: Trajectory, prefix: number, max: number): string {
  return `<trajectory id="${id}">\n${renderMessages(t.messages.slice(prefix), t, max)}\n${ending(t)}\n</trajectory>`;
}

/** The listwise judge request for a group (ids `1`..`G`, in the order given). */
export function rulerPrompt(trajectories: Trajectory[], o: Pick<RulerOptions, 'rubric' | 'maxMessageChars' | 'maxTokens' | 'temperature'> = {}): ChatRequest {
  const max = o.maxMessageChars ?? 1500;
  const prefix = commonPrefixLength(trajectories.map((t) => t.messages));
  const system = [
    'All of the trajectories below were given the same goal by the same opening messages (the context). Consider each of them and give it a score between 0 and 1, using your best judgement of what the agent was asked to do.',
    '',
    'Grading standards:',
    o.rubric ?? DEFAULT_RUBRIC,
    '',
    'Answer with a JSON object and nothing else, one entry per trajectory, every trajectory id exactly once:',
    '{"scores": [{"trajectory_id": "1", "explanation": "one or two sentences", "score": 0.8}, ...]}',
  ].join('\n');
  const user = [
    'The opening messages every trajectory shares:',
    contextBlock(trajectories, prefix, max),
    '',
    `The ${trajectories.length} trajectories, each from after the context on:`,
    '<trajectories>',
    ...trajectories.map((t, i) => trajectoryBlock(String(i + 1), t, prefix, max)),
    '</trajectories>',
  ].join('\n');
  return {
    system,
    messages: [{ role: 'user', content: user }],
    maxTokens: o.maxTokens ?? 256 + 192 * trajectories.length,
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
  };
}

export function pairPrompt(trajectories: Trajectory[], a: number, b: number, prefix: number, o: RulerOptions): ChatRequest {
  const max = o.maxMessageChars ?? 1500;
  const system = [
    'Two trajectories of an agent below were given the same goal by the same opening messages (the context). Decide which one is better, using your best judgement of what the agent was asked to do.',
    '',
    'Grading standards:',
    o.rubric ?? DEFAULT_RUBRIC,
    '',
    'Explain briefly, then end your answer with a last line that is exactly one of:',
    'VERDICT: A',
    'VERDICT: B',
    'VERDICT: TIE',
  ].join('\n');
  const user = [
    'The opening messages both trajectories share:',
    contextBlock(trajectories, prefix, max),
    '',
    trajectoryBlock('A', trajectories[a]!, prefix, max),
    trajectoryBlock('B', trajectories[b]!, prefix, max),
    '',
    'Which trajectory is better: A, B, or is it a TIE?',
  ].join('\n');
  return {
    system,
    messages: [{ role: 'user', content: user }],
    maxTokens: o.maxTokens ?? 512,
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
  };
}
