/** Policies: scripted (expert, random); the embedded ONNX model and remote APIs come next. */
export { ExpertPolicy, RandomPolicy } from './scripted.ts';

import type { Policy } from '../env/index.ts';
import { ExpertPolicy, RandomPolicy } from './scripted.ts';

export const POLICY_KINDS = ['expert', 'random[:seed]'];

/** A policy from its command-line name: `expert`, `random` or `random:<seed>`. */
export function makePolicy(spec: string): Policy {
  const [kind, arg] = spec.split(/:(.*)/s);
  if (kind === 'expert' && arg === undefined) return new ExpertPolicy();
  if (kind === 'random') {
    const seed = arg === undefined ? 7 : Number(arg);
    if (!Number.isInteger(seed)) throw new Error(`--policy random:<seed> needs an integer seed, got '${arg}'`);
    return new RandomPolicy(seed);
  }
  throw new Error(`Unknown policy '${spec}'. Policies: ${POLICY_KINDS.join(', ')}`);
}
