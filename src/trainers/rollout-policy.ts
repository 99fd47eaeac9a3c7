/**
 * What samples a run's rollouts (a stage's tool, not a stage): the run's model in-process (ONNX),
 * or OpenAI-compatible servers kept on the run's weights after each step (serve-policy's
 * /v1/reload, or vLLM's LoRA adapter endpoints; served-policy.ts).
 */
import { OnnxPolicy, writeChatTemplate, type FleetServerStats } from '../agents/index.ts';
import type { Policy } from '../env/index.ts';
import type { TrainConfig } from './config.ts';
import { samplerThreads } from './resolve-config.ts';
import { servedRolloutPolicy } from './served-policy.ts';

/** What samples a run's rollouts: the model in-process, or a server that loads the run's weights. */
/** The in-process sampler's totals: seconds of its prefill and decode graph runs, their calls, and the rows the decode steps ran. */
export interface SamplerTotals {
  prefill: number;
  decode: number;
  prefill_calls: number;
  decode_calls: number;
  decode_rows: number;
}

export interface RolloutPolicy {
  policy: Policy;
  /** The same model sampling with other settings (eval_temperature); the in-process policy only. */
  withSampling?: (s: { temperature: number }) => Policy;
  /** The model's context, in tokens. */
  maxLen: number;
  version: () => string | number | undefined;
  /**
   * Picks up the weights the learner just exported to the run's model directory, those of `step`
   * (`changed` false: the step trained nothing, the weights are the ones already served).
   */
  reload: (step: number, changed: boolean) => Promise<unknown>;
  close: () => Promise<void>;
  /** The in-process model's sampling so far (graph runs that prefill, and decode steps: their seconds, calls and rows); absent for a served policy. */
  samplerSeconds?: () => SamplerTotals;
  /** A served policy: each server's state and counts (src/agents/fleet.ts); absent in-process. */
  servers?: () => FleetServerStats[];
}

/**
 * The rollout policy of a run. `onnx`: the run's model directory loaded in-process. `openai:<model>`:
 * one server or several (base_url, a list) sampling with the run's settings and returning token ids
 * and logprobs (a turn the server re-tokenised is not trained on), kept on the run's weights
 * (served-policy.ts):
 * - the embedded GPT model, or a Hugging Face model trained in full: every server is told to serve
 *   the run's model directory (`POST <base>/reload {model_dir}`: mcp-gym serve-policy) now and
 *   after each step;
 * - a Hugging Face model with LoRA (lora_rank > 0, or an adapter in the model directory): after each step the adapter the learner wrote
 *   (`<model>/adapter/`) is copied to `<run>/adapters/<run>-v<step>/` (the servers may read it again
 *   later, and the learner rewrites its own) and loaded into every server under that name (vLLM's
 *   `POST <base>/load_lora_adapter`); the requests name it as their model, and the adapter before
 *   it is unloaded and its copy removed. Before the first step the adapter already in the model
 *   directory samples (the cold-start model's, or a resumed run's), else the base model (a fresh
 *   adapter is the identity).
 * Every sampled turn records the version it was sampled with (`policy_version`) and, served, the
 * server that sampled it (`policy_server`).
 */
export async function rolloutPolicy(
  c: TrainConfig,
  modelDir: string,
  o: { step: number; runDir: string; log: (line: string) => void },
): Promise<RolloutPolicy> {
  if (c.policy === 'onnx') {
    const p = await OnnxPolicy.load(modelDir, {
      temperature: c.temperature,
      topK: c.top_k,
      topP: c.top_p,
      maxNewTokens: c.max_new_tokens,
      seed: c.seed + 1 + o.step,
      threads: samplerThreads(c),
      keepRows: c.sampler_keep_rows,
      chatTemplate: { toolFormat: c.tool_format },
    });
    // The weights trained here carry the chat template their episodes are rendered with (the Hermes
    // tool block when it was added): exports and checkpoints copy it, and transformers'
    // apply_chat_template(messages, tools=...) renders the prompts they learned on.
    if (p.hf) writeChatTemplate(modelDir, p.hf.template);
    const t = p.model.timing;
    return {
      policy: p,
      withSampling: (s) => p.withSampling(s),
      maxLen: p.model.maxLen,
      version: () => p.version,
      reload: () => p.reload(),
      close: () => p.close(),
      samplerSeconds: () => ({
        prefill: t.prefill.seconds,
        decode: t.decode.seconds,
        prefill_calls: t.prefill.calls,
        decode_calls: t.decode.calls,
        decode_rows: t.decode.rows,
      }),
    };
  }
  return servedRolloutPolicy(c, modelDir, o);
}
