/**
 * Advantages from a group of G rewards (docs/algorithms.md, "Advantages"):
 *   GRPO:     A_i = (r_i − mean(r)) / (std(r) + ε), std the sample standard deviation
 *             (Bessel-corrected, divisor G − 1), as TRL's GRPOTrainer (`rewards.view(-1, G).std(dim=1)`:
 *             torch.std is unbiased by default; ε = 1e-4 there) and verl's GRPO estimator
 *             (`torch.std` of the group's scores; ε = 1e-6, ours) compute it. The std is floored
 *             so a near-constant group cannot blow up; a group whose rewards are all equal gets 0.
 *   Dr. GRPO: A_i = r_i − mean(r) (no std; the loss divides by a constant instead).
 * Per turn (optional): each turn's advantage is the group-normalised return from that turn on
 * (its step rewards onwards plus the final reward), so earlier useful steps get credit.
 */
export type AdvantageEstimator = 'grpo' | 'dr_grpo';

/**
 * The advantage of the run: a group estimator (computed here), or PPO with GAE (`gae`: the learner
 * computes the advantages from its value head; the batch carries per-token rewards, `turnRewards`).
 */
export type AdvantageMode = AdvantageEstimator | 'gae';

export const STD_FLOOR = 1e-6;
export const EPS = 1e-6;

export function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
}

/** Population standard deviation (divisor n): the spread of a step's rewards, for the metrics. */
export function std(xs: number[]): number {
  const m = mean(xs);
  return Math.sqrt(mean(xs.map((x) => (x - m) ** 2)));
}

/** Sample standard deviation (Bessel-corrected, divisor n − 1): GRPO's normaliser, as in TRL and verl. */
export function sampleStd(xs: number[]): number {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((s, x) => s + (x - m) ** 2, 0) / (xs.length - 1));
}

/** True when all rewards of the group are equal (up to 1e-12): no learning signal. */
export function isZeroVariance(rewards: number[]): boolean {
  return rewards.length < 2 || Math.max(...rewards) - Math.min(...rewards) <= 1e-12;
}

export function groupAdvantages(rewards: number[], estimator: AdvantageEstimator): number[] {
  if (isZeroVariance(rewards)) return rewards.map(() => 0);
  const m = mean(rewards);
  if (estimator === 'dr_grpo') return rewards.map((r) => r - m);
  const s = Math.max(sampleStd(rewards), STD_FLOOR);
  return rewards.map((r) => (r - m) / (s + EPS));
}

/**
 * Per-turn advantages: for each trajectory, the return from turn t on is
 * Σ_{u ≥ t} step_u + final; returns are normalised across the group at equal turn index.
 */
export function turnAdvantages(trajectories: { stepRewards: number[]; final: number }[], estimator: AdvantageEstimator): number[][] {
  const returns = trajectories.map((t) => {
    const out = new Array<number>(t.stepRewards.length);
    let acc = t.final;
    for (let i = t.stepRewards.length - 1; i >= 0; i--) {
      acc += t.stepRewards[i]!;
      out[i] = acc;
    }
    return out;
  });
  const maxTurns = Math.max(0, ...returns.map((r) => r.length));
  const adv = returns.map((r) => r.map(() => 0));
  for (let t = 0; t < maxTurns; t++) {
    const idx = returns.map((r, i) => (t < r.length ? i : -1)).filter((i) => i >= 0);
    const a = groupAdvantages(
      idx.map((i) => returns[i]![t]!),
      estimator,
    );
    idx.forEach((i, j) => (adv[i]![t] = a[j]!));
  }
  return adv;
}

/**
 * PPO with GAE: the reward each turn ends with. Turn t gets its step reward; the last turn also gets the
 * final reward, the trajectory's reward minus the step rewards, so that the rewards add up to the reward
 * (as the per-turn returns above do). The learner discounts them (docs/algorithms.md, "PPO with GAE").
 */
export function turnRewards(stepRewards: number[], reward: number): number[] {
  const out = [...stepRewards];
  if (out.length) out[out.length - 1]! += reward - stepRewards.reduce((a, b) => a + b, 0);
  return out;
}
