/**
 * What every bundled task suite is made of: a seeded PRNG, the train/eval partition (a hash of
 * each candidate's split keys, independent of the seed, so no parameter is ever in both splits),
 * and the loop that draws a suite's tasks from its sampler.
 */
import type { z } from 'zod';
import { fnv1a, SeededRandom, stableJson } from '../../../lib/index.ts';
import { bundledServers } from '../../../servers/index.ts';
import { defineTask, type MatcherSchema, type ServerRef, type Task, type TaskCall, type TaskInput } from '../task.ts';

export type Split = 'train' | 'eval';
export type MatcherInput = z.input<typeof MatcherSchema>;
export type CheckInput = TaskInput['checks'][number];
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** Percent of the hash buckets that belong to the eval split. */
export const EVAL_PERCENT = 25;

/** The split a key belongs to, whatever the seed. */
export function splitOfKey(key: string): Split {
  return fnv1a(`mcp-gym-split/${key}`) % 100 < EVAL_PERCENT ? 'eval' : 'train';
}

/** The split of a candidate: every one of its keys must agree, else undefined (the candidate is dropped). */
export function splitOf(keys: readonly string[]): Split | undefined {
  const splits = new Set(keys.map(splitOfKey));
  return splits.size === 1 ? [...splits][0] : undefined;
}

/** The canonical key of a task (what the split disjointness is about). */
export function paramsKey(task: Pick<Task, 'family' | 'params'>): string {
  return stableJson({ family: task.family ?? null, params: task.params ?? null });
}

/** A task a sampler proposes, before it gets its id and split. */
export interface Candidate {
  family: string;
  /** The generator's parameters: the task's identity for the split partition. */
  params: Record<string, Json>;
  /**
   * What decides the split (hashed): entity ids ("entity:city-017", "sql:product:7") where a task
   * is about named entities (so eval entities never appear in train prompts), else the params.
   * Defaults to the canonical params key.
   */
  splitKeys?: string[];
  prompt: string;
  /** The task's servers by alias: a bundled server's name, or any server reference (the many-tools suite's). */
  servers: Record<string, ServerRef>;
  setup?: TaskCall[];
  checks: TaskInput['checks'];
  solution: { calls: TaskCall[]; answer: string };
  /** Default: solution calls + 2. */
  max_turns?: number;
  /** The task's difficulty, where it is not the level the draw asked for (the many-tools suite's levels 4 and 5). */
  difficulty?: number;
  /**
   * The question itself, where params also name a variant of it (the sql suite's wording): a split's
   * draw asks every question once before it asks one again in another variant. Default: the params key.
   */
  question?: string;
}

/** Proposes a task of a difficulty (1-5) for a split; undefined when it could not. */
export type Sampler = (rng: SeededRandom, difficulty: number, split: Split) => Candidate | undefined;

const MAX_ATTEMPTS = 3000;
const SPENT_ATTEMPTS = 64;

/** The seed of one suite's split, mixed from the user's seed. */
function splitSeed(seed: number, suite: string, split: Split): number {
  return fnv1a(`${seed}/${suite}/${split}`);
}

/**
 * Draws `count` tasks of a split: difficulties 1..5 in turn, candidates in the other split
 * dropped; a question asked again (another variant of it) only once the sampler cannot find a new
 * one, and a params key used twice only once it cannot find a new variant either.
 */
export function drawTasks(suite: string, split: Split, count: number, seed: number, sampler: Sampler): Task[] {
  const rng = new SeededRandom(splitSeed(seed, suite, split));
  const seen = new Set<string>();
  const asked = new Set<string>();
  // Difficulties whose questions have all been asked: a few attempts for a new one, not MAX_ATTEMPTS each time.
  const spent = new Set<number>();
  const tasks: Task[] = [];
  for (let i = 0; i < count; i++) {
    const difficulty = 1 + (i % 5);
    let chosen: Candidate | undefined;
    let variant: Candidate | undefined;
    let fallback: Candidate | undefined;
    const attempts = spent.has(difficulty) ? SPENT_ATTEMPTS : MAX_ATTEMPTS;
    for (let attempt = 0; attempt < attempts && !chosen; attempt++) {
      const c = sampler(rng, difficulty, split);
      if (!c) continue;
      const keys = c.splitKeys ?? [stableJson({ family: c.family, params: c.params })];
      if (splitOf(keys) !== split) continue;
      const key = paramsKey(c);
      if (seen.has(key)) fallback ??= c;
      else if (asked.has(c.question ?? key)) variant ??= c;
      else chosen = c;
    }
    if (!chosen && (variant ?? fallback)) spent.add(difficulty);
    chosen ??= variant ?? fallback;
    if (!chosen) throw new Error(`suite '${suite}': found no ${split} task of difficulty ${difficulty}`);
    seen.add(paramsKey(chosen));
    asked.add(chosen.question ?? paramsKey(chosen));
    tasks.push(
      defineTask({
        id: `${suite}-${split}-${String(i + 1).padStart(4, '0')}`,
        split,
        difficulty: chosen.difficulty ?? difficulty,
        family: chosen.family,
        prompt: chosen.prompt,
        servers: chosen.servers,
        setup: chosen.setup ?? [],
        max_turns: chosen.max_turns ?? chosen.solution.calls.length + 2,
        checks: chosen.checks,
        solution: chosen.solution,
        params: chosen.params,
      }),
    );
  }
  return tasks;
}

/** The bundled servers' tool names. */
function toolNames(server: string): string[] {
  const def = bundledServers[server];
  if (!def) throw new Error(`no bundled server '${server}'`);
  return def.tools.map((t) => t.name);
}

/**
 * The name the agent sees for a tool of a task's server: qualified as `alias_tool` when another of
 * the task's servers has a tool of the same name (as the environment does), else the plain name.
 */
export function agentTool(servers: Record<string, string>, alias: string, tool: string): string {
  const clash = Object.entries(servers).some(([other, name]) => other !== alias && toolNames(name).includes(tool));
  return clash ? `${alias}_${tool}` : tool;
}

export function call(server: string, tool: string, args: Record<string, Json> = {}): TaskCall {
  return { server, tool, arguments: args };
}

/** An answer check on a number, compared exactly (a string keeps big integers and fractions exact). */
export function answerNumber(value: string | number): CheckInput {
  return { kind: 'answer', expect: { kind: 'number', value: String(value) } };
}

/** An answer check on a name or a text, ignoring case and spacing. */
export function answerText(value: string): CheckInput {
  return { kind: 'answer', expect: { kind: 'exact', value, ignore_case: true } };
}

/** Hash bucket helper for entity keys. */
export const entityKey = (id: string) => `entity:${id}`;

export function quote(s: string): string {
  return `"${s}"`;
}
