/**
 * Verified task synthesis: a generator model (any ChatModel: an API model, a served policy) sees a
 * server's tools (and resources) and proposes tasks with a reference solution and checks; a candidate is kept only
 * when
 *   1. it is a valid task (the task schema, with the given servers),
 *   2. it is not a near-duplicate of a task already kept (the same reference solution, or prompts
 *      whose character trigrams overlap by `duplicateSimilarity` or more),
 *   3. replaying its reference solution on a fresh episode passes every check, and
 *   4. a do-nothing episode (no tool call, an empty answer) fails every check: a check that holds
 *      when the agent does nothing checks nothing the agent did.
 * Every rejection is counted by reason, with the detail that decided it. The kept tasks are
 * ordinary tasks: they train and evaluate like any task file.
 */
import { sha256Hex, stableJson } from '../../lib/index.ts';
import type { ResourceInfo, ToolInfo } from '../tools/index.ts';
import type { Environment } from './environment.ts';
import { defineTask, type ServerRef, type Task } from './task.ts';
import type { ChatModel, Policy, Trajectory } from './types.ts';

export const REJECTION_REASONS = ['unparseable', 'invalid', 'duplicate', 'unverifiable', 'reference_fails', 'trivial'] as const;
export type RejectionReason = (typeof REJECTION_REASONS)[number];

export interface Rejection {
  reason: RejectionReason;
  /** What decided it: the schema's field and message, the check that failed, the task it duplicates. */
  detail: string;
  /** The candidate as the generator wrote it (or its text when it did not parse). */
  candidate: unknown;
}

export interface SynthesisOptions {
  /** The model that proposes tasks. */
  generator: ChatModel;
  /** The servers the tasks use, by alias (the alias is what the tasks' calls and checks name). */
  servers: Record<string, ServerRef>;
  /** The environment the verification episodes run in. */
  env: Environment;
  /** Replays a task's reference solution (the expert policy: its calls in order, then its answer). */
  reference: Policy;
  /** Tasks to keep. */
  n: number;
  /** Candidates asked for in one request (default 5). */
  perRequest?: number;
  /** Requests at most (default: enough for three candidates per task wanted, at least 3). */
  maxRequests?: number;
  /** Prompts at or above this trigram similarity (Jaccard) to a kept one are duplicates (default 0.9). */
  duplicateSimilarity?: number;
  /** The share of kept tasks that go to the eval split (default 0.2: every fifth). */
  evalFraction?: number;
  /** Task ids are `<idPrefix>-0001`, ... (default 'gen'). */
  idPrefix?: string;
  /** Generator tokens per request (default 4096). */
  maxTokens?: number;
  /** Each kept task as it is kept. */
  onTask?: (task: Task) => void;
  onLog?: (line: string) => void;
  signal?: AbortSignal;
}

export interface SynthesisResult {
  tasks: Task[];
  /** Candidates rejected, by reason (every reason present, 0 when none). */
  rejected: Record<RejectionReason, number>;
  rejections: Rejection[];
  /** Candidates the generator proposed (kept + rejected). */
  candidates: number;
  requests: number;
  /** The tools each server offered the generator. */
  tools: Record<string, { name: string; description?: string }[]>;
  /** The resources each server listed (shown to the generator, the first 50). */
  resources: Record<string, ResourceInfo[]>;
}

/** The instructions the generator gets (the tools follow in the user message). */
export const SYNTHESIS_SYSTEM = `You write tasks for training and evaluating tool-using AI agents on MCP servers.
A task is a JSON object:
{
  "prompt": "what the user asks the agent (self-contained: every name, value and path it needs)",
  "difficulty": 1-5,
  "setup": [{"server": "<alias>", "tool": "<tool>", "arguments": {...}}],   // optional: calls that put the server into the task's starting state
  "solution": {"calls": [{"server": "<alias>", "tool": "<tool>", "arguments": {...}}], "answer": "the final answer the agent gives"},
  "checks": [ ... ]
}
Checks (prefer state checks: they read the server's state after the episode):
  {"kind": "state", "call": {"server": "<alias>", "tool": "<a read-only tool>", "arguments": {...}}, "path": "dotted.path.in.structured.result (optional)", "expect": <matcher>}
  {"kind": "answer", "expect": <matcher>}                       // the agent's final answer
  {"kind": "call", "server": "<alias>", "tool": "<tool>", "arguments": {...}}   // the agent made this call
Matchers: {"kind": "equals", "value": <json>}, {"kind": "contains", "value": "text"}, {"kind": "number", "value": 42},
  {"kind": "exact", "value": "text"}, {"kind": "subset", "value": <json>}, {"kind": "regex", "value": "pattern"}.
Rules: replaying the solution's calls on a fresh server, then answering solution.answer, must pass every check;
an agent that does nothing (no calls, an empty answer) must fail every check; tasks must differ from each other.
Answer with a JSON array of tasks in one \`\`\`json block and nothing else.`;

/** The generator's request: the servers' tools and resources, the number of tasks, what to avoid. */
export function synthesisPrompt(
  tools: Record<string, ToolInfo[]>,
  count: number,
  kept: string[],
  feedback: string[],
  resources: Record<string, ResourceInfo[]> = {},
): string {
  const servers = Object.entries(tools).map(([alias, list]) => ({
    alias,
    tools: list.map((t) => ({
      name: t.name,
      description: t.description ?? '',
      inputSchema: t.inputSchema,
      ...(t.outputSchema ? { outputSchema: t.outputSchema } : {}),
    })),
    ...(resources[alias]?.length ? { resources: resources[alias]!.slice(0, 50) } : {}),
  }));
  const parts = [`The servers (by alias), their tools and resources:\n${JSON.stringify(servers, null, 1)}`, `Write ${count} new tasks.`];
  if (kept.length)
    parts.push(
      `Tasks already written (do not repeat them):\n${kept
        .slice(-20)
        .map((p) => `- ${p}`)
        .join('\n')}`,
    );
  if (feedback.length)
    parts.push(
      `Candidates rejected last time, and why:\n${feedback
        .slice(-10)
        .map((f) => `- ${f}`)
        .join('\n')}`,
    );
  return parts.join('\n\n');
}

/**
 * The candidates in a generator's text: the first ```json block (else the whole text), as a JSON
 * array, one object, or JSON lines. Undefined when nothing parses.
 */
export function parseCandidates(text: string): unknown[] | undefined {
  const fenced = /```(?:json|jsonl)?\s*\n([\s\S]*?)```/.exec(text);
  const body = (fenced ? fenced[1]! : text).trim();
  try {
    const v = JSON.parse(body) as unknown;
    return Array.isArray(v) ? v : [v];
  } catch {
    // JSON lines, or an array surrounded by prose.
  }
  const start = body.indexOf('[');
  const end = body.lastIndexOf(']');
  if (start >= 0 && end > start) {
    try {
      const v = JSON.parse(body.slice(start, end + 1)) as unknown;
      if (Array.isArray(v)) return v;
    } catch {
      // fall through
    }
  }
  const lines = body
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('{'));
  const out: unknown[] = [];
  for (const l of lines) {
    try {
      out.push(JSON.parse(l));
    } catch {
      // a line that does not parse is skipped
    }
  }
  return out.length ? out : undefined;
}

/** Character trigrams of a prompt, lower-cased with runs of white space as one. */
function trigrams(text: string): Set<string> {
  const s = ` ${text.toLowerCase().replace(/\s+/g, ' ').trim()} `;
  const out = new Set<string>();
  for (let i = 0; i + 3 <= s.length; i++) out.add(s.slice(i, i + 3));
  return out;
}

/** Jaccard similarity of two sets. */
function jaccard(a: Set<string>, b: Set<string>): number {
  let inter = 0;
  for (const x of a) if (b.has(x)) inter++;
  const union = a.size + b.size - inter;
  return union === 0 ? 1 : inter / union;
}

const solutionKey = (t: Task) => sha256Hex(stableJson({ setup: t.setup, solution: t.solution }));

/** The policy that does nothing: no tool call, an empty answer. */
const doNothing: Policy = { id: 'do-nothing', act: async () => ({ content: '' }) };

const failedChecks = (t: Trajectory) => t.checks.filter((c) => c.score < 1);
const describeCheck = (t: Trajectory, i: number) => `checks[${i}] (${t.checks[i]!.kind}): ${t.checks[i]!.detail}`;

/** Lists each server's tools and resources (a server that fails to list resources has none). */
async function listServers(
  env: Environment,
  servers: Record<string, ServerRef>,
): Promise<{ tools: Record<string, ToolInfo[]>; resources: Record<string, ResourceInfo[]> }> {
  const tools: Record<string, ToolInfo[]> = {};
  const resources: Record<string, ResourceInfo[]> = {};
  for (const [alias, ref] of Object.entries(servers)) {
    tools[alias] = await env.toolsOf(ref);
    resources[alias] = await env.resourcesOf(ref).catch(() => []);
  }
  return { tools, resources };
}

/**
 * Asks the generator for tasks until `n` are kept or the requests run out; verifies each
 * candidate (see the file's comment). Never throws for what the generator writes.
 */
export async function synthesizeTasks(o: SynthesisOptions): Promise<SynthesisResult> {
  const perRequest = o.perRequest ?? 5;
  const maxRequests = o.maxRequests ?? Math.max(3, Math.ceil((3 * o.n) / perRequest));
  const similarity = o.duplicateSimilarity ?? 0.9;
  const evalEvery = (o.evalFraction ?? 0.2) > 0 ? Math.max(1, Math.round(1 / (o.evalFraction ?? 0.2))) : 0;
  const prefix = o.idPrefix ?? 'gen';
  const log = o.onLog ?? (() => {});
  const { tools, resources } = await listServers(o.env, o.servers);
  const kept: Task[] = [];
  const keptGrams: Set<string>[] = [];
  const keptSolutions = new Map<string, string>();
  const rejections: Rejection[] = [];
  const rejected = Object.fromEntries(REJECTION_REASONS.map((r) => [r, 0])) as Record<RejectionReason, number>;
  let requests = 0;
  const reject = (reason: RejectionReason, detail: string, candidate: unknown) => {
    rejected[reason]++;
    rejections.push({ reason, detail, candidate });
    log(`rejected (${reason}): ${detail}`);
  };
  const promptOf = (t: Task) => t.prompt ?? t.messages!.map((m) => m.content).join('\n');

  while (kept.length < o.n && requests < maxRequests) {
    if (o.signal?.aborted) break;
    const want = Math.min(perRequest, o.n - kept.length);
    const feedback = rejections.slice(-10).map((r) => `${r.reason}: ${r.detail}`);
    requests++;
    let text: string;
    try {
      const r = await o.generator.complete(
        {
          system: SYNTHESIS_SYSTEM,
          messages: [{ role: 'user', content: synthesisPrompt(tools, want, kept.map(promptOf), feedback, resources) }],
          maxTokens: o.maxTokens ?? 4096,
        },
        o.signal,
      );
      text = r.text;
    } catch (err) {
      log(`request ${requests}: the generator failed: ${(err as Error).message.split('\n')[0]}`);
      continue;
    }
    const parsed = parseCandidates(text);
    if (!parsed) {
      reject('unparseable', `request ${requests}: no JSON task in the generator's answer (${text.length} characters)`, text.slice(0, 2000));
      continue;
    }
    for (const raw of parsed) {
      // Stopped (Ctrl-C): what was kept stays kept; the rest is neither kept nor counted.
      if (kept.length >= o.n || o.signal?.aborted) break;
      const index = kept.length + 1;
      const id = `${prefix}-${String(index).padStart(4, '0')}`;
      // 1. The schema, with the servers given (a candidate's own id, split or servers are replaced).
      let task: Task;
      try {
        if (!raw || typeof raw !== 'object' || Array.isArray(raw))
          throw new Error(`Invalid task: (task): expected a JSON object, got ${Array.isArray(raw) ? 'an array' : typeof raw}`);
        const split = evalEvery > 0 && index % evalEvery === 0 ? 'eval' : 'train';
        task = defineTask({ difficulty: 1, ...(raw as Record<string, unknown>), id, split, servers: o.servers } as never);
      } catch (err) {
        reject('invalid', (err as Error).message.replace(/^Invalid task '[^']*': /, '').replace(/^Invalid task: /, ''), raw);
        continue;
      }
      // 2. Near-duplicates of a kept task.
      const key = solutionKey(task);
      const same = keptSolutions.get(key);
      if (same) {
        reject('duplicate', `the same setup and reference solution as ${same}`, raw);
        continue;
      }
      const grams = trigrams(promptOf(task));
      const near = keptGrams.findIndex((g) => jaccard(g, grams) >= similarity);
      if (near >= 0) {
        reject('duplicate', `its prompt is ${(100 * jaccard(keptGrams[near]!, grams)).toFixed(0)}% the same as ${kept[near]!.id}'s`, raw);
        continue;
      }
      if (!task.solution) {
        reject('unverifiable', 'no reference solution (solution.calls and solution.answer)', raw);
        continue;
      }
      // 3. The reference solution passes every check on a fresh episode.
      const ref = await o.env.runEpisode(task, o.reference, { runId: 'synthesis', signal: o.signal });
      if (o.signal?.aborted) break;
      if (ref.finish === 'error') {
        reject(ref.task_error ? 'unverifiable' : 'reference_fails', `replaying the reference solution: ${(ref.error ?? 'failed').split('\n')[0]}`, raw);
        continue;
      }
      const bad = failedChecks(ref);
      if (bad.length) {
        reject('reference_fails', `the reference solution fails ${bad.map((c) => describeCheck(ref, ref.checks.indexOf(c))).join('; ')}`, raw);
        continue;
      }
      // 4. Doing nothing fails every check.
      const idle = await o.env.runEpisode(task, doNothing, { runId: 'synthesis', signal: o.signal });
      if (o.signal?.aborted) break;
      // Its checks must have run: a do-nothing episode that failed (a broken check, a server error) proves nothing.
      if (idle.finish === 'error') {
        reject('unverifiable', `the do-nothing episode: ${(idle.error ?? 'failed').split('\n')[0]}`, raw);
        continue;
      }
      const passed = idle.checks.map((c, i) => (c.score >= 1 ? i : -1)).filter((i) => i >= 0);
      if (passed.length) {
        reject('trivial', `an agent that does nothing passes ${passed.map((i) => describeCheck(idle, i)).join('; ')}`, raw);
        continue;
      }
      kept.push(task);
      keptGrams.push(grams);
      keptSolutions.set(key, task.id);
      log(`kept ${task.id}: ${promptOf(task).slice(0, 100)}`);
      o.onTask?.(task);
    }
  }
  const toolNames = Object.fromEntries(
    Object.entries(tools).map(([a, list]) => [a, list.map((t) => ({ name: t.name, ...(t.description ? { description: t.description } : {}) }))]),
  );
  return { tasks: kept, rejected, rejections, candidates: kept.length + rejections.length, requests, tools: toolNames, resources };
}
