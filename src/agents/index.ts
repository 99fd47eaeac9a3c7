/** Policies: scripted (expert, random) and the embedded ONNX model. */
export { ExpertPolicy, RandomPolicy } from './scripted.ts';
export { OnnxModel, OnnxPolicy } from './onnx.ts';
export type { OnnxPolicyOptions, Generation, GenerateOptions } from './onnx.ts';
export { ChatTemplate, parseAssistantTokens, decode, bytes, T as TOKENS } from './template.ts';
export { readModelConfig, ModelConfigSchema, SPECIAL_TOKENS } from './model-config.ts';
export type { ModelConfig } from './model-config.ts';
export { processedLogprobs, sampleToken } from './sampling.ts';
export type { SamplingOptions } from './sampling.ts';

import type { Policy } from '../env/index.ts';
import { ExpertPolicy, RandomPolicy } from './scripted.ts';
import { OnnxPolicy, type OnnxPolicyOptions } from './onnx.ts';

export const POLICY_KINDS = ['expert', 'random[:seed]', 'onnx:<model dir>'];

/** A policy from its command-line name: `expert`, `random[:seed]` or `onnx:<model dir>`. */
export async function makePolicy(spec: string, onnx: OnnxPolicyOptions = {}): Promise<Policy & { close?(): Promise<void> }> {
  const [kind, arg] = spec.split(/:(.*)/s);
  if (kind === 'expert' && arg === undefined) return new ExpertPolicy();
  if (kind === 'random') {
    const seed = arg === undefined ? 7 : Number(arg);
    if (!Number.isInteger(seed)) throw new Error(`--policy random:<seed> needs an integer seed, got '${arg}'`);
    return new RandomPolicy(seed);
  }
  if (kind === 'onnx' && arg) return OnnxPolicy.load(arg, onnx);
  throw new Error(`Unknown policy '${spec}'. Policies: ${POLICY_KINDS.join(', ')}`);
}
