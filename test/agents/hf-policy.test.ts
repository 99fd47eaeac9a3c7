/**
 * A Hugging Face checkpoint as a policy (src/agents/hf-turns.ts, OnnxPolicy's actHf):
 *
 * (a) HfTurns without a model, on Qwen3's and a Llama-3.1-shaped tokenizer: an episode's turns
 *     (prompt, tool calls in the family's format, one with non-canonical JSON spacing, a malformed
 *     one, tool results, a final answer) parse into actions, never drift, and the env tokens +
 *     sampled tokens of the turns are HfTurns' sequence, whose text holds the template's own
 *     system/tools block and tool-result pieces; a turn cut before its end token gets the end
 *     token at the head of the next env tokens.
 * (b) OnnxPolicy on tiny exported Qwen3 and Llama checkpoints through rollout: every turn carries
 *     tokens, logprobs, env tokens and its version; the trajectory's tokens are the policy's and
 *     HfTurns' sequence; the same seed gives the same tokens, another seed others.
 * (c) Real multi-turn tool use without a trained model: a policy that writes the expert's calls in
 *     the family's format through HfTurns, run by the environment: solved episodes whose tokens
 *     decode to the template's rendering of the conversation, trainable (sequenceOf).
 *
 * (b) needs the learner's venv (.venv/bin/python or $MCP_GYM_HF_PYTHON); without it, it is skipped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HfTurns, toChatMessages, toToolSpecs } from '../../src/agents/hf-turns.ts';
import { OnnxPolicy } from '../../src/agents/onnx/index.ts';
import {
  Environment,
  rollout,
  type AgentTool,
  type ChatMessage,
  type Observation,
  type Policy,
  type PolicyAction,
  type Task,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import {
  buildLlama31TokenizerDir,
  callText,
  END_TOKEN,
  HAVE_HF_PY,
  HF_PY,
  makeTinyCheckpoints,
  QWEN_TOK,
  type CallFamily,
  ExpertTurns,
} from '../helpers/hf-fixtures.ts';

const FAMILIES: CallFamily[] = ['qwen', 'llama3'];
let llamaTokDir = '';
const tokDir = (f: CallFamily) => (f === 'qwen' ? QWEN_TOK : llamaTokDir);

beforeAll(() => {
  llamaTokDir = buildLlama31TokenizerDir();
});

/** The template pieces to compare: the system/tools block (up to the first assistant header) and the tool results. */
function templateParts(family: CallFamily, text: string): { head: string; results: string[] } {
  const assistant = family === 'qwen' ? '<|im_start|>assistant\n' : '<|start_header_id|>assistant<|end_header_id|>\n\n';
  const at = text.indexOf(assistant);
  const results =
    family === 'qwen'
      ? [...text.matchAll(/<\|im_start\|>user\n<tool_response>\n[\s\S]*?\n<\/tool_response><\|im_end\|>/g)].map((m) => m[0])
      : [...text.matchAll(/<\|start_header_id\|>ipython<\|end_header_id\|>\n\n[\s\S]*?<\|eot_id\|>/g)].map((m) => m[0]);
  return { head: at < 0 ? text : text.slice(0, at + assistant.length), results };
}

// --- (a) HfTurns on its own -------------------------------------------------------------------

const TOOLS: AgentTool[] = [
  {
    name: 'add',
    description: 'Adds two numbers.',
    inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    server: 'calc',
    tool: 'add',
  },
  {
    name: 'kv_set',
    description: 'Stores a value under a key.',
    inputSchema: { type: 'object', properties: { key: { type: 'string' }, value: { type: 'string' } }, required: ['key', 'value'] },
    server: 'kv',
    tool: 'set',
  },
];
const TASK = generateSuite('calculator')[0]!; // HfTurns does not read the task; the observation needs one
const OPENING: ChatMessage[] = [
  { role: 'system', content: 'You are a careful assistant. Use the tools.' },
  { role: 'user', content: 'Add 2 and 3, then store the sum under "sum". Café ✓' },
];

describe('(a) HfTurns: an episode as token sequences through the model’s own template (no model)', () => {
  for (const family of FAMILIES) {
    it(`${family}: calls parse (one with odd JSON spacing), a malformed one is a parseError, no drift; env + sampled tokens are the sequence, with the template's own parts`, () => {
      const turns = HfTurns.load(tokDir(family));
      expect(turns.family).toBe(family);
      const tok = turns.tokenizer;
      const END = END_TOKEN[family];
      const specs = toToolSpecs(TOOLS);
      const ep = `ep-a-${family}`;
      const messages: ChatMessage[] = [...OPENING];
      const obs = (turn: number, newMessages: ChatMessage[]): Observation => ({
        task: TASK,
        messages: [...messages],
        tools: TOOLS,
        turn,
        newMessages,
        episodeId: ep,
      });
      const pieces: number[] = [];
      const sampledTexts: string[] = [];
      const sample = (o: Observation, text: string) => {
        const p = turns.prompt(o);
        expect(p.drift).toBeUndefined();
        const ids = tok.encode(text);
        sampledTexts.push(text);
        pieces.push(...p.env, ...ids);
        return { env: p.env, action: turns.sampled(o, ids) };
      };

      // Turn 0: the prompt is the template's rendering of the opening messages with the tools.
      const t0 = sample(obs(0, [...OPENING]), callText(family, 'add', { a: 2, b: 3 }, 'loose') + END);
      expect(t0.env).toEqual(tok.encode(turns.renderer.render(toChatMessages(OPENING), { tools: specs, addGenerationPrompt: true })));
      expect(t0.action.toolCalls).toEqual([{ name: 'add', arguments: { a: 2, b: 3 } }]);
      expect(t0.action.parseError).toBeUndefined();
      messages.push({
        role: 'assistant',
        content: t0.action.content,
        tool_calls: [{ id: 'call_0_0', type: 'function', function: { name: 'add', arguments: JSON.stringify({ a: 2, b: 3 }) } }],
      });
      const r0: ChatMessage = { role: 'tool', tool_call_id: 'call_0_0', name: 'add', content: '5' };
      messages.push(r0);

      // Turn 1: a canonical call, after the tool result.
      const t1 = sample(obs(1, [r0]), callText(family, 'kv_set', { key: 'sum', value: '5' }) + END);
      expect(t1.env.length).toBeGreaterThan(0);
      expect(t1.action.toolCalls).toEqual([{ name: 'kv_set', arguments: { key: 'sum', value: '5' } }]);
      messages.push({
        role: 'assistant',
        content: t1.action.content,
        tool_calls: [{ id: 'call_1_0', type: 'function', function: { name: 'kv_set', arguments: JSON.stringify({ key: 'sum', value: '5' }) } }],
      });
      const r1: ChatMessage = { role: 'tool', tool_call_id: 'call_1_0', name: 'kv_set', content: '{"ok": true, "key": "sum"}\nstored ✓' };
      messages.push(r1);

      // Turn 2: malformed JSON (a trailing comma): reported, not thrown, no calls.
      const bad =
        family === 'qwen' ? '<tool_call>\n{"name": "kv_set", "arguments": {"key": "sum",}}\n</tool_call>' : '{"name": "kv_set", "parameters": {"key": "sum",}}';
      let t2!: ReturnType<typeof sample>;
      expect(() => (t2 = sample(obs(2, [r1]), bad + END))).not.toThrow();
      expect(t2.action.toolCalls).toBeUndefined();
      expect(t2.action.parseError).toMatch(/not valid JSON/);
      messages.push({ role: 'assistant', content: t2.action.content });
      const r2: ChatMessage = { role: 'tool', tool_call_id: 'invalid_2', name: 'error', content: `Error: ${t2.action.parseError}` };
      messages.push(r2);

      // Turn 3: the final answer.
      const t3 = sample(obs(3, [r2]), 'The sum is 5; stored under "sum".' + END);
      // The turn as the model wrote it (end token kept) is recorded beside what was read from it.
      expect(t3.action).toEqual({ content: 'The sum is 5; stored under "sum".', text: 'The sum is 5; stored under "sum".' + END });
      messages.push({ role: 'assistant', content: t3.action.content });

      // The turns' tokens, concatenated, are HfTurns' sequence (nothing decoded and encoded again).
      expect([...turns.ids(ep)!]).toEqual(pieces);
      const text = tok.decode(pieces);
      // Every sampled text is in it, as sampled, in order.
      let at = 0;
      for (const s of sampledTexts) {
        const i = text.indexOf(s, at);
        expect(i).toBeGreaterThanOrEqual(at);
        at = i + s.length;
      }
      // The template would have written the odd-spacing call otherwise: the sequence kept it as sampled.
      const rendered = turns.renderer.render(toChatMessages(messages), { tools: specs, addGenerationPrompt: false });
      expect(rendered).not.toContain(sampledTexts[0]!.slice(0, -END.length));
      // The template's parts: the system/tools block and the three tool results, as the template renders them.
      const mine = templateParts(family, text);
      const theirs = templateParts(family, rendered);
      expect(mine.head).toBe(theirs.head);
      expect(mine.head).toContain('add');
      expect(mine.head).toContain('kv_set');
      if (family === 'qwen') expect(mine.head).toContain('<tools>');
      else expect(mine.head).toContain('Environment: ipython');
      expect(mine.results).toHaveLength(3);
      expect(mine.results).toEqual(theirs.results);
      expect(mine.results[2]).toContain('not valid JSON');
      turns.end(ep);
      expect(turns.ids(ep)).toBeUndefined();
    });

    it(`${family}: a turn cut before its end token: the end token leads the next env tokens, and the sequence equals the uncut one`, () => {
      const turns = HfTurns.load(tokDir(family));
      const tok = turns.tokenizer;
      const endId = tok.tokenId(END_TOKEN[family])!;
      expect(turns.stopIds).toContain(endId);
      const call = callText(family, 'add', { a: 2, b: 3 });
      const result: ChatMessage = { role: 'tool', tool_call_id: 'call_0_0', name: 'add', content: '5' };
      const run = (ep: string, cut: boolean) => {
        const o0: Observation = { task: TASK, messages: [...OPENING], tools: TOOLS, turn: 0, newMessages: [...OPENING], episodeId: ep };
        const p0 = turns.prompt(o0);
        const s0 = tok.encode(cut ? call : call + END_TOKEN[family]);
        const a0 = turns.sampled(o0, s0);
        const o1: Observation = { ...o0, turn: 1, newMessages: [result] };
        const p1 = turns.prompt(o1);
        expect(p1.drift).toBeUndefined();
        const s1 = tok.encode('Five.'); // cut too: the end token is appended to the sequence at once
        turns.sampled(o1, s1);
        return { p0, s0, a0, p1, s1, ids: [...turns.ids(ep)!] };
      };
      const whole = run(`ep-whole-${family}`, false);
      const cut = run(`ep-cut-${family}`, true);
      expect(cut.a0.toolCalls).toEqual([{ name: 'add', arguments: { a: 2, b: 3 } }]);
      expect(cut.s0).toEqual(whole.s0.slice(0, -1));
      expect(cut.p1.env[0]).toBe(endId);
      expect(cut.p1.env).toEqual([endId, ...whole.p1.env]);
      expect(cut.ids).toEqual(whole.ids);
      // The cut last turn: its end token is in the sequence (mask 0), after the sampled tokens.
      expect(cut.ids.at(-1)).toBe(endId);
      expect(cut.ids).toEqual([...cut.p0.env, ...cut.s0, ...cut.p1.env, ...cut.s1, endId]);
    });
  }
});

// --- (b) OnnxPolicy on tiny exported checkpoints -----------------------------------------------

/** Delegates to an OnnxPolicy and records its and HfTurns' sequences as each episode ends (they are released then). */
class Recording implements Policy {
  readonly sequences = new Map<string, { policy: number[] | undefined; hf: number[] | undefined }>();
  constructor(readonly inner: OnnxPolicy) {}
  get id() {
    return this.inner.id;
  }
  get version() {
    return this.inner.version;
  }
  act(obs: Observation): Promise<PolicyAction> {
    return this.inner.act(obs);
  }
  endEpisode(episodeId: string): void {
    this.sequences.set(episodeId, { policy: this.inner.sequence(episodeId)?.slice(), hf: this.inner.hf?.ids(episodeId)?.slice() });
    this.inner.endEpisode(episodeId);
  }
}

const MAX_NEW = 24;
const calcTasks = generateSuite('calculator')
  .filter((t) => t.split === 'eval')
  .slice(0, 4);
const byKey = (ts: Trajectory[]) => new Map(ts.map((t) => [`${t.task_id}#${t.sample}`, t.turns.map((u) => u.tokens)]));
const dirs: Record<string, string> = {};

describe.skipIf(!HAVE_HF_PY)(`(b) OnnxPolicy on tiny exported checkpoints through rollout (learner Python: ${HF_PY})`, () => {
  beforeAll(() => {
    Object.assign(
      dirs,
      makeTinyCheckpoints([
        { name: 'qwen3', family: 'qwen3', export: true },
        { name: 'llama', family: 'llama', export: true },
      ]),
    );
  }, 170_000);

  const policies: OnnxPolicy[] = [];
  afterAll(async () => {
    for (const p of policies) await p.close();
  });

  for (const [name, family] of [
    ['qwen3', 'qwen'],
    ['llama', 'llama3'],
  ] as const) {
    it(`${name}: turns carry tokens, logprobs, env tokens and the version; the trajectory is the policy's and HfTurns' sequence; seeded`, async () => {
      const load = async (seed: number) => {
        const p = await OnnxPolicy.load(dirs[name]!, { seed, maxNewTokens: MAX_NEW, chatTemplate: { now: new Date(2026, 0, 15) } });
        policies.push(p);
        return p;
      };
      const policy = await load(5);
      expect(policy.hf?.family).toBe(family);
      expect(policy.version).toBe(1);
      const rec = new Recording(policy);
      const env = new Environment();
      const t0 = performance.now();
      const a = await rollout(env, rec, calcTasks, { group: 2, concurrency: 1 });
      const seconds = (performance.now() - t0) / 1000;
      expect(a.trajectories).toHaveLength(8);
      const hf = policy.hf!;
      const stops = new Set(hf.stopIds);
      let turns = 0;
      let tokens = 0;
      let cutLast = 0;
      for (const t of a.trajectories) {
        expect(t.finish, t.error).not.toBe('error');
        expect(t.policy.id).toBe(policy.id);
        for (const u of t.turns) {
          turns++;
          expect(u.tokens!.length).toBeGreaterThan(0);
          expect(u.tokens!.length).toBeLessThanOrEqual(MAX_NEW);
          tokens += u.tokens!.length;
          expect(u.logprobs).toHaveLength(u.tokens!.length);
          for (const lp of u.logprobs!) expect(Number.isFinite(lp) && lp <= 0).toBe(true);
          expect(u.env_tokens).toBeDefined();
          expect(u.policy_version).toBe(1);
          expect(u.token_drift).toBeUndefined();
          // A turn that did not stop on an end token ran to the limit.
          if (!stops.has(u.tokens!.at(-1)!)) expect(u.tokens!.length).toBe(MAX_NEW);
        }
        // The first env tokens: the template's prompt of the task's opening messages with its tools.
        const specs = toToolSpecs(t.tools ?? []);
        const opening = t.messages.slice(
          0,
          t.messages.findIndex((m) => m.role === 'assistant'),
        );
        expect(t.turns[0]!.env_tokens).toEqual(hf.tokenizer.encode(hf.renderer.render(toChatMessages(opening), { tools: specs, addGenerationPrompt: true })));
        // The trajectory's tokens are what the policy sampled from, and HfTurns' sequence (plus the
        // end token it appends to a cut last turn).
        const flat = t.turns.flatMap((u) => [...u.env_tokens!, ...u.tokens!]);
        const seq = rec.sequences.get(t.id)!;
        expect(seq.policy).toEqual(flat);
        const last = t.turns.at(-1)!.tokens!;
        const cut = !stops.has(last.at(-1)!);
        if (cut) cutLast++;
        expect(seq.hf).toEqual(cut ? [...flat, hf.tokenizer.tokenId(END_TOKEN[family])!] : flat);
        expect(sequenceOf(t)?.ids).toEqual(flat);
      }
      console.log(
        `${name}: ${a.trajectories.length} episodes, ${turns} turns, ${tokens} sampled tokens in ${seconds.toFixed(1)} s; ${cutLast} last turns cut at ${MAX_NEW} tokens`,
      );

      // The same seed: the same tokens; another seed: others.
      const b = await rollout(env, new Recording(policy), calcTasks, { group: 2, concurrency: 1 });
      const other = await load(6);
      const c = await rollout(env, other, calcTasks, { group: 2, concurrency: 1 });
      await env.close();
      const [ka, kb, kc] = [byKey(a.trajectories), byKey(b.trajectories), byKey(c.trajectories)];
      expect(kb).toEqual(ka);
      let differ = 0;
      for (const [k, v] of ka) if (JSON.stringify(kc.get(k)) !== JSON.stringify(v)) differ++;
      expect(differ).toBeGreaterThan(0);
      console.log(`${name}: seed 5 twice: identical; seed 6: ${differ} of ${ka.size} trajectories differ`);
    }, 60_000);
  }
});

// --- (c) the expert's calls written in the family's format, through HfTurns --------------------

describe('(c) multi-turn tool use through HfTurns: the expert’s calls in the family’s format, run by the environment', () => {
  const tasks: Task[] = [
    ...generateSuite('calculator')
      .filter((t) => t.split === 'eval')
      .slice(0, 3),
    ...generateSuite('kv')
      .filter((t) => t.split === 'eval' && (t.solution?.calls.length ?? 0) >= 3)
      .slice(0, 2),
  ];

  for (const family of FAMILIES) {
    it(`${family}: solved episodes; the tokens decode to the template's rendering of the conversation; no drift; trainable`, async () => {
      const turns = HfTurns.load(tokDir(family));
      const policy = new ExpertTurns(turns, family);
      const env = new Environment();
      const r = await rollout(env, policy, tasks, { group: 1 });
      await env.close();
      expect(r.trajectories).toHaveLength(tasks.length);
      let multi = 0;
      for (const t of r.trajectories) {
        const calls = t.turns.flatMap((u) => u.action.tool_calls);
        expect(t.success, `${t.task_id}: ${t.error ?? t.answer}`).toBe(true);
        expect(t.turns).toHaveLength(calls.length + 1);
        if (calls.length >= 3) multi++;
        for (const u of t.turns) {
          expect(u.token_drift).toBeUndefined();
          expect(u.parse_error).toBeUndefined();
        }
        const s = sequenceOf(t);
        expect(s).toBeDefined();
        expect(s!.ids).toEqual(policy.finals.get(t.id));
        const text = turns.tokenizer.decode(s!.ids);
        const rendered = turns.renderer.render(toChatMessages(t.messages), { tools: toToolSpecs(t.tools ?? []), addGenerationPrompt: false });
        // The assistant turns: each tool call well-formed in the family's format, naming the call the environment made.
        const blocks =
          family === 'qwen'
            ? [...text.matchAll(/<\|im_start\|>assistant\n([\s\S]*?)<\|im_end\|>/g)].map((m) => m[1]!)
            : [...text.matchAll(/<\|start_header_id\|>assistant<\|end_header_id\|>\n\n([\s\S]*?)<\|eot_id\|>/g)].map((m) => m[1]!);
        expect(blocks).toHaveLength(t.turns.length);
        calls.forEach((c, i) => {
          const json = family === 'qwen' ? /^<tool_call>\n(\{.*\})\n<\/tool_call>$/.exec(blocks[i]!)?.[1] : blocks[i];
          expect(json, blocks[i]).toBeDefined();
          const parsed = JSON.parse(json!) as Record<string, unknown>;
          expect(parsed).toEqual({ name: c.name, [family === 'qwen' ? 'arguments' : 'parameters']: c.arguments });
        });
        expect(blocks.at(-1)).toBe(t.answer);
        // The tool results as the template renders them.
        const mine = templateParts(family, text);
        const theirs = templateParts(family, rendered);
        expect(mine.head).toBe(theirs.head);
        expect(mine.results).toHaveLength(calls.length);
        expect(mine.results).toEqual(theirs.results);
        // The whole text is the template's rendering of the conversation, except that Qwen3 writes an
        // empty think block into the last assistant turn (and a newline after it), which was not sampled.
        const expected =
          family === 'qwen'
            ? rendered
                .replace(/<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n(?![\s\S]*<\|im_start\|>assistant)/, '<|im_start|>assistant\n')
                .replace(/\n$/, '')
            : rendered;
        expect(text).toBe(expected);
      }
      expect(multi).toBe(2);
    });
  }
});
