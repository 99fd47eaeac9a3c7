/** Policies: scripted (expert, random) and the embedded ONNX model. */
export { ExpertPolicy, RandomPolicy } from './scripted.ts';
export { OnnxModel, OnnxPolicy, GenerationBatcher } from './onnx/index.ts';
export type { OnnxPolicyOptions, Generation, GenerateOptions, BatchRequest, BatcherStats, BatchedGeneration, RowOptions } from './onnx/index.ts';
export { startPolicyServer, parseCompletion } from './serve-policy/index.ts';
export type { PolicyServer, PolicyServerOptions, PolicyServerStats, ParsedCall } from './serve-policy/index.ts';
export { ChatTemplate, parseAssistantTokens, decode, bytes, T as TOKENS } from './template.ts';
export { readModelConfig, ModelConfigSchema, SPECIAL_TOKENS, isHfModelDir } from './model-config.ts';
export type { ModelConfig } from './model-config.ts';
export { processedLogprobs, sampleToken } from './sampling.ts';
export type { SamplingOptions } from './sampling.ts';

export { OpenAIPolicy, ServerEndpointError, completionTokens, toOpenAIMessages } from './openai.ts';
export type { OpenAIPolicyOptions, ServedModel } from './openai.ts';
export { PolicyFleet, FleetServer, isServerFailure, shownUrl } from './fleet.ts';
export type { PolicyFleetOptions, FleetServerState, FleetServerStats } from './fleet.ts';
export { AnthropicPolicy, toAnthropicMessages } from './anthropic.ts';
export type { AnthropicPolicyOptions, AnthropicThinking } from './anthropic.ts';
export { apiKeyFrom, UsageMeter, addUsage, describeApiError } from './api.ts';
export type { ApiOptions } from './api.ts';

import type { ChatModel, Policy } from '../env/index.ts';
import { ExpertPolicy, RandomPolicy } from './scripted.ts';
import { OnnxPolicy, type OnnxPolicyOptions } from './onnx/index.ts';
import { OpenAIPolicy, type OpenAIPolicyOptions } from './openai.ts';
import { PolicyFleet } from './fleet.ts';
import { AnthropicPolicy, type AnthropicPolicyOptions } from './anthropic.ts';

/**
 * Options of the API policies: the OpenAI-compatible one's and Anthropic's (each ignores the
 * other's). `baseURLs`: several OpenAI-compatible servers of the same model, sampled as a fleet
 * (src/agents/fleet.ts: the least-loaded healthy one, failover).
 */
export type ApiPolicyOptions = OpenAIPolicyOptions &
  Omit<AnthropicPolicyOptions, keyof OpenAIPolicyOptions> & { baseURLs?: string[]; log?: (line: string) => void };

export const POLICY_KINDS = ['expert', 'random[:seed]', 'onnx:<model dir>', 'openai:<model>', 'anthropic:<model>'];

/** Options of makePolicy: the embedded model's (onnx:), and the API policies' (openai:, anthropic:). */
export interface MakePolicyOptions extends OnnxPolicyOptions {
  api?: ApiPolicyOptions;
}

/**
 * A policy from its command-line name: `expert`, `random[:seed]`, `onnx:<model dir>`,
 * `openai:<model>` (an OpenAI-compatible server: `api.baseURL`) or `anthropic:<model>`.
 * Sampling settings given at the top (temperature, topP) apply to the API policies too.
 */
export async function makePolicy(spec: string, options: MakePolicyOptions = {}): Promise<Policy & { close?(): Promise<void> }> {
  const [kind, arg] = spec.split(/:(.*)/s);
  if (kind === 'expert' && arg === undefined) return new ExpertPolicy();
  if (kind === 'random') {
    const seed = arg === undefined ? 7 : Number(arg);
    if (!Number.isInteger(seed)) throw new Error(`--policy random:<seed> needs an integer seed, got '${arg}'`);
    return new RandomPolicy(seed);
  }
  const { api, ...onnx } = options;
  if (kind === 'onnx' && arg) return OnnxPolicy.load(arg, onnx);
  // The seed reaches an OpenAI-compatible server as each turn's own (as in process: serve-policy then samples the in-process episodes).
  if (kind === 'openai' || kind === 'anthropic')
    return makeChatModel(spec, {
      ...(onnx.temperature !== undefined ? { temperature: onnx.temperature } : {}),
      ...(onnx.topP !== undefined ? { topP: onnx.topP } : {}),
      ...(kind === 'openai' && onnx.seed !== undefined ? { seed: onnx.seed } : {}),
      ...api,
    });
  throw new Error(`Unknown policy '${spec}'. Policies: ${POLICY_KINDS.join(', ')}`);
}

/** An API model from its name (`openai:<model>`, `anthropic:<model>`): a policy and a ChatModel (a judge, a task generator). */
export async function makeChatModel(spec: string, options: ApiPolicyOptions = {}): Promise<Policy & ChatModel & { close?(): Promise<void> }> {
  const [kind, model] = spec.split(/:(.*)/s);
  if (!model) throw new Error(`'${spec}' names no model: use openai:<model> or anthropic:<model>`);
  if (kind === 'openai') {
    const { thinking: _t, effort: _e, baseURLs, log, ...o } = options;
    // Several servers: a fleet, whose failover is the retry (the SDK's own retries only when asked for).
    if (baseURLs && baseURLs.length > 1) {
      const { baseURL: _b, ...rest } = o;
      return new PolicyFleet(model, baseURLs, { ...rest, tokenIds: rest.tokenIds ?? true, ...(log ? { log } : {}) });
    }
    return new OpenAIPolicy(model, baseURLs?.length === 1 ? { ...o, baseURL: baseURLs[0] } : o);
  }
  if (kind === 'anthropic') {
    const { tokenIds: _i, logprobs: _l, baseURLs, log: _g, ...o } = options;
    if (baseURLs && baseURLs.length > 1) throw new Error(`${spec}: several base URLs (--base-url) are for openai:<model> servers only`);
    if (baseURLs?.length === 1) o.baseURL = baseURLs[0];
    return new AnthropicPolicy(model, o);
  }
  throw new Error(`Unknown model provider in '${spec}': use openai:<model> or anthropic:<model>`);
}
/** Hugging Face checkpoints on the rollout side: tokenizer, the model's own chat template, tool calls, append-only sequences. */
export {
  HfTokenizer,
  ChatTemplateRenderer,
  detectFamily,
  parseToolCalls,
  HfSequence,
  resolveToolFormat,
  writeChatTemplate,
  TOOL_FORMAT_CHOICES,
} from './hf/index.ts';
export { HfTurns, hfDemoExample, toChatMessages, toToolSpecs } from './hf-turns.ts';
export type { HfTurnsOptions, TurnPrompt } from './hf-turns.ts';
export type { ContinueResult, TemplateFamily, ParsedToolCalls, ToolFormat, ToolFormatChoice } from './hf/index.ts';
