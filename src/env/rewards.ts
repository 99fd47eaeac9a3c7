/**
 * Rewards. Every part is computed and logged beside the total (`reward_parts`); the config says
 * which total is the reward: ART's trajectory reward, RLVR's shaped reward, the composer's
 * weighted sum, or the plain verifier score.
 *
 * ART (seed `ARTTrainer`):  step reward = 0.1·success + 0.1·relevant tool + 0.1·useful result
 *                           efficiency  = max(0, 1 − (steps − 3)/10), capped at 1 (see below)
 *                           reward      = base + 0.3·efficiency + 0.2·Σ step rewards
 * RLVR (seed `RLVRTrainer`): 0.1·format + 0.3·(fraction of correct steps) + 0.6·final answer correct
 * Composer: Σ weight_i · part_i over named parts (correctness, format, reasoning, safety).
 *
 * steps = the agent's turns (each assistant message, the final answer included). The seed's
 * efficiency exceeds 1 below 3 steps; we cap it at 1 so that skipping the tools is never paid.
 */
import { z } from 'zod';
import type { Task } from './task.ts';
import type { CheckResult, ToolStep, Turn } from './types.ts';
import { checkScore, hasAnswerFormat, solved } from './checks.ts';

export const RewardConfigSchema = z.object({
  /** Which total is the reward. */
  total: z.enum(['art', 'rlvr', 'composer', 'verifier']).default('art'),
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
  composer: z
    .object({
      correctness: z.number().default(1),
      format: z.number().default(0),
      reasoning: z.number().default(0),
      safety: z.number().default(0),
    })
    .prefault({}),
});
export type RewardConfig = z.output<typeof RewardConfigSchema>;
export type RewardConfigInput = z.input<typeof RewardConfigSchema>;

export const DEFAULT_REWARDS: RewardConfig = RewardConfigSchema.parse({});

/** The tools that matter for a task: those of its solution and of its `call` checks ("server.tool"). */
export function relevantTools(task: Task): Set<string> {
  const out = new Set<string>();
  for (const c of task.solution?.calls ?? []) out.add(`${c.server}.${c.tool}`);
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

export function stepReward(step: ToolStep, relevant: Set<string>, cfg: RewardConfig['art']): number {
  let r = 0;
  if (!step.isError) r += cfg.step_success;
  if (relevant.size === 0 || relevant.has(`${step.server}.${step.tool}`)) r += cfg.step_relevant;
  if (isUseful(step)) r += cfg.step_useful;
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
  stepRewards: number[];
}

/** Scores an episode: every part, and the total the config names. */
export function scoreEpisode(task: Task, turns: Pick<Turn, 'tool_results'>[], answer: string | null, checks: CheckResult[], cfg: RewardConfig = DEFAULT_REWARDS): ScoredEpisode {
  const relevant = relevantTools(task);
  const steps = turns.flatMap((t) => t.tool_results);
  const stepRewards = turns.map((t) => t.tool_results.reduce((s, step) => s + stepReward(step, relevant, cfg.art), 0));
  const success = solved(checks);
  const correctness = checkScore(checks);

  // ART
  const base = success ? cfg.art.base : 0;
  const eff = efficiency(turns.length, cfg.art);
  const tools = stepRewards.reduce((a, b) => a + b, 0);
  const art = base + cfg.art.efficiency_weight * eff + cfg.art.steps_weight * tools;

  // RLVR shaping: correct steps = tool calls that succeeded on a relevant tool.
  const format = answer !== null && hasAnswerFormat(answer) ? 1 : 0;
  const correctSteps = steps.filter((s) => !s.isError && (relevant.size === 0 || relevant.has(`${s.server}.${s.tool}`))).length;
  const stepsFraction = steps.length ? correctSteps / steps.length : 0;
  const rlvr = cfg.rlvr.format * format + cfg.rlvr.steps * stepsFraction + cfg.rlvr.final * (success ? 1 : 0);

  // Composer
  const think = thinkAnswerFormat(answer);
  const reasoning = reasoningScore(answer);
  const safety = safetyScore(steps);
  const c = cfg.composer;
  const composer = c.correctness * correctness + c.format * think + c.reasoning * reasoning + c.safety * safety;

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
  const reward = cfg.total === 'art' ? art : cfg.total === 'rlvr' ? rlvr : cfg.total === 'composer' ? composer : correctness;
  return { reward, parts, success, stepRewards };
}
