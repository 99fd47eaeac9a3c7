/**
 * Rewards. Every part is computed and logged beside the total (`reward_parts`); the config says
 * which total is the reward: ART's trajectory reward, RLVR's shaped reward, the composer's
 * weighted sum, or the plain verifier score.
 *
 * ART (seed `ARTTrainer`):  step reward = 0.1·success + 0.1·relevant tool + 0.1·useful result
 *                           efficiency  = max(0, 1 − (steps − 3)/10), capped at 1 (see below)
 *                           reward      = base + 0.3·efficiency + 0.2·Σ step rewards
 * RLVR (seed `RLVRTrainer`): 0.1·format + 0.3·(fraction of correct steps) + 0.6·final answer correct
 * Composer: Σ weight_i · part_i over named parts: the built-in correctness, think_format, reasoning,
 *           safety, and the parts registered with registerRewardPart (weights by name; unnamed
 *           parts weigh 0 but correctness, which weighs 1).
 *
 * steps = the agent's turns (each assistant message, the final answer included). The seed's
 * efficiency exceeds 1 below 3 steps; we cap it at 1 so that skipping the tools is never paid.
 */
import { z } from 'zod';
import type { Task } from './task.ts';
import type { CheckResult, ToolStep, Turn } from './types.ts';
import { checkScore, hasAnswerFormat, solved } from './checks.ts';
import { sabotaged } from './faults.ts';

// ---------------------------------------------------------------------------------------------
// The composer's parts: four built in, and the user's (registerRewardPart), weighted by name.

/** A reward part: a number from the episode (the argument a RewardFn gets), logged in reward_parts under its name. */
export type RewardPartFn = (episode: Episode) => number;

/** The composer's built-in parts, by the names they are logged under. */
export const COMPOSER_PARTS = ['correctness', 'think_format', 'reasoning', 'safety'] as const;
/** Names of the composer's weights that mean another part (the first config's `format` is think_format). */
const PART_ALIASES: Record<string, string> = { format: 'think_format' };
/** Names the built-in rewards and the loop log in reward_parts: a registered part may not take them. */
const RESERVED_PARTS = new Set([
  'base',
  'efficiency',
  'tools',
  'art',
  'format',
  'steps_fraction',
  'final',
  'rlvr',
  'composer',
  'verifier',
  'ruler',
  'overlong',
  ...COMPOSER_PARTS,
]);
const partRegistry = new Map<string, RewardPartFn>();

/**
 * Registers a reward part: `fn(episode)` is computed for every episode (whatever the reward),
 * logged in its reward_parts under `name`, and weighs in the composer's total with the weight its
 * name has in the config (`composer_weights`; 0 when not named).
 */
export function registerRewardPart(name: string, fn: RewardPartFn, options: { replace?: boolean } = {}): void {
  if (!/^[A-Za-z][\w.-]{0,63}$/.test(name)) throw new Error(`reward part name '${name}': 1-64 letters, digits, '_', '.', '-', starting with a letter`);
  if (typeof fn !== 'function') throw new Error(`reward part '${name}': expected a function (episode) => number`);
  if (RESERVED_PARTS.has(name))
    throw new Error(`reward part '${name}': the name of a built-in part (${[...RESERVED_PARTS].join(', ')}); register yours under another name`);
  if (partRegistry.has(name) && !options.replace) throw new Error(`reward part '${name}' is already registered (pass {replace: true} to replace it)`);
  partRegistry.set(name, fn);
}

/** The composer's parts: the built-ins, then the registered ones. */
export function rewardPartNames(): string[] {
  return [...COMPOSER_PARTS, ...partRegistry.keys()];
}

/** The problem with a composer weight's name, or undefined when it names a part. */
function unknownPart(name: string): string | undefined {
  if ((COMPOSER_PARTS as readonly string[]).includes(name) || name in PART_ALIASES || partRegistry.has(name)) return undefined;
  return `unknown reward part '${name}'; registered: ${rewardPartNames().join(', ')} (register yours with registerRewardPart(name, fn))`;
}

/**
 * The composer's weights: a record part name → weight, or (from a command line) the text
 * `name=w,name=w`. Every name must be a part (a built-in or a registered one) when the config is
 * read: register parts before making the config. Parts not named weigh 0, except correctness (1).
 */
export function composerWeightsSchema() {
  return z
    .preprocess(
      (v, ctx) => {
        if (typeof v !== 'string') return v;
        const parsed = parseWeights(v);
        if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
        return typeof parsed === 'string' ? v : parsed;
      },
      z.record(z.string(), z.number()),
    )
    .superRefine((w, ctx) => {
      for (const name of Object.keys(w)) {
        const problem = unknownPart(name);
        if (problem) ctx.addIssue({ code: 'custom', message: problem, path: [name] });
      }
    })
    .default({ correctness: 1 });
}

/** `correctness=1,reasoning=0.2` → {correctness: 1, reasoning: 0.2}; else what is wrong. */
function parseWeights(text: string): Record<string, number> | string {
  const out: Record<string, number> = {};
  for (const item of text
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    const m = /^([^=\s]+)\s*=\s*(\S+)$/.exec(item);
    const w = m ? Number(m[2]) : Number.NaN;
    if (!m || !Number.isFinite(w)) return `'${item}' is not name=weight (e.g. correctness=1,reasoning=0.2)`;
    out[m[1]!] = w;
  }
  return out;
}

/** A part's weight: its name's (or its alias's), else 1 for correctness and 0 for the others. */
export function partWeight(weights: Record<string, number>, part: string): number {
  const alias = Object.keys(PART_ALIASES).find((a) => PART_ALIASES[a] === part);
  return weights[part] ?? (alias !== undefined ? weights[alias] : undefined) ?? (part === 'correctness' ? 1 : 0);
}

/** The registered parts of an episode (each a finite number, or an error naming the part). */
function registeredParts(e: Episode): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, fn] of partRegistry) {
    const v = fn(e);
    if (typeof v !== 'number' || !Number.isFinite(v))
      throw new Error(
        `reward part '${name}' returned ${typeof (v as unknown as Promise<unknown>)?.then === 'function' ? 'a promise' : String(v)} (a finite number is needed)`,
      );
    out[name] = v;
  }
  return out;
}

/** The mean of each reward part over trajectories (those that have it): a step's `reward_parts_mean`. */
export function meanRewardParts(trajectories: { reward_parts: Record<string, number> }[]): Record<string, number> {
  const sum: Record<string, { s: number; n: number }> = {};
  for (const t of trajectories) {
    for (const [k, v] of Object.entries(t.reward_parts)) {
      if (!Number.isFinite(v)) continue;
      const a = (sum[k] ??= { s: 0, n: 0 });
      a.s += v;
      a.n++;
    }
  }
  return Object.fromEntries(Object.entries(sum).map(([k, a]) => [k, a.s / a.n]));
}

export const RewardConfigSchema = z.object({
  /** Which reward is the total: a registered reward's name (the four built-ins, or one of registerReward). */
  total: z.string().min(1).default('art'),
  art: z
    .object({
      base: z.number().default(1),
      step_success: z.number().default(0.1),
      step_relevant: z.number().default(0.1),
      step_useful: z.number().default(0.1),
      efficiency_weight: z.number().default(0.3),
      steps_weight: z.number().default(0.2),
      free_steps: z.number().default(3),
      steps_scale: z.number().positive().default(10),
    })
    .prefault({}),
  rlvr: z.object({ format: z.number().default(0.1), steps: z.number().default(0.3), final: z.number().default(0.6) }).prefault({}),
  /** The composer's weights by part name (composerWeightsSchema); the training config's composer_weights. */
  composer: composerWeightsSchema(),
});
export type RewardConfig = z.output<typeof RewardConfigSchema>;
export type RewardConfigInput = z.input<typeof RewardConfigSchema>;

export const DEFAULT_REWARDS: RewardConfig = RewardConfigSchema.parse({});

/** The tools that matter for a task: those of its solution and of its `call` checks ("server.tool"). */
export function relevantTools(task: Task): Set<string> {
  const out = new Set<string>();
  for (const c of [...(task.solution?.calls ?? []), ...(task.solution?.turns ?? []).flatMap((t) => t.calls)]) out.add(`${c.server}.${c.tool}`);
  for (const c of task.checks) if (c.kind === 'call') out.add(`${c.server}.${c.tool}`);
  return out;
}

/** A result that carries information: not an error, and not an empty answer (nothing found). */
export function isUseful(step: Pick<ToolStep, 'isError' | 'structured' | 'text'>): boolean {
  if (step.isError) return false;
  const s = step.structured as Record<string, unknown> | undefined;
  if (s && typeof s === 'object') {
    if (s.found === false || s.deleted === false) return false;
    for (const key of ['hits', 'rows', 'entries', 'matches', 'tables']) {
      if (Array.isArray(s[key]) && (s[key] as unknown[]).length === 0) return false;
    }
    return true;
  }
  return step.text.trim().length > 0;
}

/**
 * A step with an injected timeout, error or malformed result (src/env/faults.ts) is scored as a
 * useful success: the fault is not the agent's. A call to a distractor tool is the agent's choice,
 * scored as a call to a tool that does not help: its result is never useful.
 */
export function stepReward(step: ToolStep, relevant: Set<string>, cfg: RewardConfig['art']): number {
  let r = 0;
  const forgiven = sabotaged(step);
  if (!step.isError || forgiven) r += cfg.step_success;
  if (relevant.size === 0 || relevant.has(`${step.server}.${step.tool}`)) r += cfg.step_relevant;
  if ((isUseful(step) && step.fault !== 'distractor') || forgiven) r += cfg.step_useful;
  return r;
}

export function efficiency(steps: number, cfg: RewardConfig['art']): number {
  return Math.min(1, Math.max(0, 1 - (steps - cfg.free_steps) / cfg.steps_scale));
}

/** How much of the answer is reasoning in <think>…</think> (0 to 1, full at 200 characters). */
function reasoningScore(answer: string | null): number {
  const m = answer ? /<think>([\s\S]*?)<\/think>/.exec(answer) : null;
  return m ? Math.min(1, m[1]!.trim().length / 200) : 0;
}

/** `<think>…</think>` followed by `<answer>…</answer>`: 1; one of them: 0.5; neither: 0. */
function thinkAnswerFormat(answer: string | null): number {
  if (!answer) return 0;
  const think = /<think>[\s\S]*?<\/think>/.test(answer);
  const ans = /<answer>[\s\S]*?<\/answer>/.test(answer);
  return think && ans ? 1 : think || ans ? 0.5 : 0;
}

const UNSAFE = /outside the sandbox|only read-only queries|refused|permission denied/i;

/** 1 minus the fraction of tool calls the servers refused as unsafe (sandbox escapes, writes to read-only data). */
function safetyScore(steps: ToolStep[]): number {
  if (steps.length === 0) return 1;
  return 1 - steps.filter((s) => s.isError && UNSAFE.test(s.text)).length / steps.length;
}

export interface ScoredEpisode {
  reward: number;
  parts: Record<string, number>;
  success: boolean;
  /** The step rewards (one per turn) of the reward named by `cfg.total`. */
  stepRewards: number[];
}

/** Every built-in part of an episode, and the step rewards of ART and of RLVR. */
export function scoreParts(task: Task, turns: Pick<Turn, 'tool_results'>[], answer: string | null, checks: CheckResult[], cfg: RewardConfig = DEFAULT_REWARDS) {
  const relevant = relevantTools(task);
  const steps = turns.flatMap((t) => t.tool_results);
  const artSteps = turns.map((t) => t.tool_results.reduce((s, step) => s + stepReward(step, relevant, cfg.art), 0));
  const success = solved(checks);
  const correctness = checkScore(checks);

  // ART
  const base = success ? cfg.art.base : 0;
  // A turn whose every call was sabotaged (an injected fault) is not counted against efficiency: the retry it asks for is not the agent's fault.
  const eff = efficiency(turns.length - turns.filter((t) => t.tool_results.length > 0 && t.tool_results.every(sabotaged)).length, cfg.art);
  const tools = artSteps.reduce((a, b) => a + b, 0);
  const art = base + cfg.art.efficiency_weight * eff + cfg.art.steps_weight * tools;

  // RLVR shaping: correct steps = tool calls that succeeded on a relevant tool; each correct step
  // earns its share of the steps weight (so the step rewards sum to steps · fraction).
  const format = answer !== null && hasAnswerFormat(answer) ? 1 : 0;
  const correct = (s: ToolStep) => (!s.isError || sabotaged(s)) && (relevant.size === 0 || relevant.has(`${s.server}.${s.tool}`));
  const correctSteps = steps.filter(correct).length;
  const stepsFraction = steps.length ? correctSteps / steps.length : 0;
  const rlvr = cfg.rlvr.format * format + cfg.rlvr.steps * stepsFraction + cfg.rlvr.final * (success ? 1 : 0);
  const rlvrSteps = turns.map((t) => (steps.length ? (cfg.rlvr.steps * t.tool_results.filter(correct).length) / steps.length : 0));

  // Composer
  const think = thinkAnswerFormat(answer);
  const reasoning = reasoningScore(answer);
  const safety = safetyScore(steps);
  const builtin: Record<string, number> = { correctness, think_format: think, reasoning, safety };
  const composer = COMPOSER_PARTS.reduce((sum, p) => sum + partWeight(cfg.composer, p) * builtin[p]!, 0);

  const parts: Record<string, number> = {
    base,
    efficiency: eff,
    tools,
    art,
    format,
    steps_fraction: stepsFraction,
    final: success ? 1 : 0,
    rlvr,
    correctness,
    think_format: think,
    reasoning,
    safety,
    composer,
  };
  return { parts, success, artSteps, rlvrSteps };
}

// ---------------------------------------------------------------------------------------------
// The reward registry: a reward is a function of the episode; the four built-ins are registered
// under their names, and a user registers their own (or passes the function itself).

/** What a reward function sees of a finished episode. */
export interface Episode {
  task: Task;
  /** The agent's turns, each with its tool results. */
  turns: Pick<Turn, 'tool_results' | 'action'>[];
  /** The final answer (the last assistant message without tool calls), or null. */
  answer: string | null;
  /** The task's checks, scored. */
  checks: CheckResult[];
  /** Every check scored 1. */
  solved: boolean;
  /** The weights of the built-in rewards (RewardConfigSchema). */
  weights: RewardConfig;
}

export interface RewardResult {
  /** The trajectory's reward: what the advantages are computed from. */
  reward: number;
  /** Named parts, logged in the trajectory's reward_parts. */
  parts?: Record<string, number>;
  /** One reward per turn, part of `reward` (per-turn advantages subtract them from it). Default: zeros. */
  stepRewards?: number[];
}

/** A reward: `(episode) => {reward, parts, stepRewards?}`, synchronous or not. */
export type RewardFn = (episode: Episode) => RewardResult | Promise<RewardResult>;

const zeros = (n: number) => new Array<number>(n).fill(0);

/**
 * Every part of an episode: the built-ins (scoreParts) and the registered ones; the composer's
 * total counts the registered parts with their weights.
 */
function allParts(e: Episode) {
  const s = scoreParts(e.task, e.turns, e.answer, e.checks, e.weights);
  const mine = registeredParts(e);
  const composer = s.parts.composer! + Object.entries(mine).reduce((sum, [k, v]) => sum + partWeight(e.weights.composer, k) * v, 0);
  const parts: Record<string, number> = { ...s.parts, ...mine, composer };
  return { ...s, parts };
}

/** ART (seed `ARTTrainer`): base + 0.3·efficiency + 0.2·Σ step rewards; its step rewards are ART's. */
export const artReward: RewardFn = (e) => {
  const s = allParts(e);
  return { reward: s.parts.art!, parts: s.parts, stepRewards: s.artSteps };
};
/** RLVR (seed `RLVRTrainer`): 0.1·format + 0.3·fraction of correct steps + 0.6·solved. */
export const rlvrReward: RewardFn = (e) => {
  const s = allParts(e);
  return { reward: s.parts.rlvr!, parts: s.parts, stepRewards: s.rlvrSteps };
};
/** The reward composer: Σ weight · part over the built-in parts and the registered ones (registerRewardPart). */
export const composerReward: RewardFn = (e) => {
  const s = allParts(e);
  return { reward: s.parts.composer!, parts: s.parts, stepRewards: zeros(e.turns.length) };
};
/** The checks' weighted score alone. */
export const verifierReward: RewardFn = (e) => {
  const s = allParts(e);
  return { reward: s.parts.correctness!, parts: s.parts, stepRewards: zeros(e.turns.length) };
};

const BUILTIN_REWARDS: Record<string, RewardFn> = { art: artReward, rlvr: rlvrReward, composer: composerReward, verifier: verifierReward };
const registry = new Map<string, RewardFn>(Object.entries(BUILTIN_REWARDS));

/** Registers a reward under a name (then `--reward NAME`, `reward: 'NAME'` in a config). A built-in's name cannot be taken. */
export function registerReward(name: string, fn: RewardFn, options: { replace?: boolean } = {}): void {
  if (!/^[A-Za-z][\w.-]{0,63}$/.test(name)) throw new Error(`reward name '${name}': 1-64 letters, digits, '_', '.', '-', starting with a letter`);
  if (typeof fn !== 'function') throw new Error(`reward '${name}': expected a function (episode) => {reward, parts}`);
  if (name in BUILTIN_REWARDS) throw new Error(`reward '${name}' is built in; register yours under another name`);
  if (registry.has(name) && !options.replace) throw new Error(`reward '${name}' is already registered (pass {replace: true} to replace it)`);
  registry.set(name, fn);
}

/** The names of the registered rewards, built-ins first. */
export function rewardNames(): string[] {
  return [...registry.keys()];
}

/** A reward by name, or the function itself; an unknown name is an error that lists the registered ones. */
export function resolveReward(reward: string | RewardFn): { name: string; fn: RewardFn } {
  if (typeof reward === 'function') return { name: reward.name || 'custom', fn: reward };
  const fn = registry.get(reward);
  if (!fn) throw new Error(`reward: unknown reward '${reward}'; registered: ${rewardNames().join(', ')} (register yours with registerReward(name, fn))`);
  return { name: reward, fn };
}

/** Scores an episode with a built-in reward (`cfg.total`): every part, the total and its step rewards. */
export function scoreEpisode(
  task: Task,
  turns: Pick<Turn, 'tool_results'>[],
  answer: string | null,
  checks: CheckResult[],
  cfg: RewardConfig = DEFAULT_REWARDS,
): ScoredEpisode {
  const fn = BUILTIN_REWARDS[cfg.total];
  if (!fn) throw new Error(`scoreEpisode: '${cfg.total}' is not a built-in reward (${Object.keys(BUILTIN_REWARDS).join(', ')})`);
  const r = fn({ task, turns: turns as Episode['turns'], answer, checks, solved: solved(checks), weights: cfg }) as RewardResult;
  return { reward: r.reward, parts: r.parts ?? {}, success: solved(checks), stepRewards: r.stepRewards ?? zeros(turns.length) };
}
