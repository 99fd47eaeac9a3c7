/**
 * What samples a run's rollouts (a stage's tool, not a stage): the run's model in-process (ONNX),
 * or an OpenAI-compatible server kept on the run's weights after each step (serve-policy's
 * /v1/reload, or vLLM's LoRA adapter endpoints).
 */
import { cpSync, existsSync, rmSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { isHfModelDir, OnnxPolicy, OpenAIPolicy, ServerEndpointError, writeChatTemplate } from '../agents/index.ts';
import type { Policy } from '../env/index.ts';
import type { TrainConfig } from './config.ts';
import { samplerThreads } from './resolve-config.ts';

/** What samples a run's rollouts: the model in-process, or a server that loads the run's weights. */
export interface RolloutPolicy {
  policy: Policy;
  /** The model's context, in tokens. */
  maxLen: number;
  version: () => string | number | undefined;
  /**
   * Picks up the weights the learner just exported to the run's model directory, those of `step`
   * (`changed` false: the step trained nothing, the weights are the ones already served).
   */
  reload: (step: number, changed: boolean) => Promise<unknown>;
  close: () => Promise<void>;
  /** The in-process model's sampling seconds so far (graph runs that prefill, and decode steps); absent for a served policy. */
  samplerSeconds?: () => { prefill: number; decode: number };
}

/** A served policy's failure, with what to do for the cases that have a known cause. */
function servedPolicyError(c: TrainConfig, what: string, err: unknown): Error {
  const e = err as Error;
  let hint = '';
  if (e instanceof ServerEndpointError && e.status === 404 && /_lora_adapter/.test(e.endpoint) && /Not Found/i.test(e.message)) {
    hint =
      ' (vLLM has these endpoints only when started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora; docs/training.md, "Training through vLLM")';
  } else if (e instanceof Error && /\/reload/.test(what) && /\b404\b/.test(e.message)) {
    hint =
      ' (the server has no POST /v1/reload: full fine-tuning needs a server that loads a model directory, e.g. mcp-gym serve-policy; with vLLM train a LoRA adapter (--lora-rank R) or restart it on the new weights)';
  }
  return new Error(`policy ${c.policy}: ${what} at ${c.base_url}: ${e.message}${hint}`, { cause: err });
}

/**
 * The rollout policy of a run. `onnx`: the run's model directory loaded in-process. `openai:<model>`:
 * a server sampling with the run's settings and returning token ids and logprobs (a turn the
 * server re-tokenised is not trained on), kept on the run's weights:
 * - the embedded GPT model, or a Hugging Face model trained in full: the server is told to serve
 *   the run's model directory (`POST <base>/reload {model_dir}`: mcp-gym serve-policy) now and
 *   after each step;
 * - a Hugging Face model with LoRA (lora_rank > 0, or an adapter in the model directory): after each step the adapter the learner wrote
 *   (`<model>/adapter/`) is copied to `<run>/adapters/<run>-v<step>/` (the server may read it again
 *   later, and the learner rewrites its own) and loaded into the server under that name (vLLM's
 *   `POST <base>/load_lora_adapter`); the requests name it as their model, and the adapter before
 *   it is unloaded and its copy removed. Before the first step the adapter already in the model
 *   directory samples (the cold-start model's, or a resumed run's), else the base model (a fresh
 *   adapter is the identity).
 * Every sampled turn records the version it was sampled with (`policy_version`).
 */
export async function rolloutPolicy(
  c: TrainConfig,
  modelDir: string,
  o: { step: number; runDir: string; log: (line: string) => void },
): Promise<RolloutPolicy> {
  const hf = isHfModelDir(modelDir);
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
      maxLen: p.model.maxLen,
      version: () => p.version,
      reload: () => p.reload(),
      close: () => p.close(),
      samplerSeconds: () => ({ prefill: t.prefill.seconds, decode: t.decode.seconds }),
    };
  }
  const base = c.policy.slice('openai:'.length);
  const p = new OpenAIPolicy(base, {
    baseURL: c.base_url,
    apiKeyEnv: c.api_key_env,
    temperature: c.temperature,
    topP: c.top_p,
    maxTokens: c.max_new_tokens,
    tokenIds: true,
    concurrency: c.concurrency,
    seed: c.seed + 1 + o.step,
    ...(c.top_k > 0 ? { extraBody: { top_k: c.top_k } } : {}),
  });
  const maxLenOf = async () => {
    const maxLen = await p.contextLength().catch((err: unknown) => {
      throw servedPolicyError(c, 'GET /v1/models', err);
    });
    if (!maxLen) throw new Error(`policy ${c.policy}: the server at ${c.base_url} does not say its context length (max_model_len in /v1/models)`);
    return maxLen;
  };

  // LoRA: asked for, or the model directory holds an adapter (which the learner continues).
  if (hf && (c.lora_rank > 0 || existsSync(join(modelDir, 'adapter', 'adapter_config.json')))) {
    const maxLen = await maxLenOf();
    const runName = basename(o.runDir).replace(/[^A-Za-z0-9._-]/g, '_');
    const ours = new RegExp(`^${runName.replace(/[.]/g, '\\.')}-v(\\d+)$`);
    const adapterDir = resolve(modelDir, 'adapter');
    const copies = resolve(o.runDir, 'adapters');
    // The adapters loaded, oldest first: the newest samples; with asynchronous training the
    // max_staleness before it stay loaded for the requests still in flight that name them.
    const loaded: string[] = [];
    const unload = async (name: string) => {
      await p.unloadLoraAdapter(name).catch((err: unknown) => {
        throw servedPolicyError(c, `unloading the LoRA adapter ${name} (POST /v1/unload_lora_adapter)`, err);
      });
    };
    const push = async (version: number) => {
      const missing = ['adapter_config.json', 'adapter_model.safetensors'].filter((f) => !existsSync(join(adapterDir, f)));
      if (missing.length)
        throw new Error(`policy ${c.policy}: the learner wrote no LoRA adapter to push to the server: ${adapterDir} lacks ${missing.join(', ')}`);
      const name = `${runName}-v${version}`;
      if (loaded.includes(name)) {
        // The same step's weights again (the run rolled back to it): vLLM refuses a name twice.
        await unload(name);
        loaded.splice(loaded.indexOf(name), 1);
        p.useModel(base, 0);
      }
      const copy = join(copies, name);
      rmSync(copy, { recursive: true, force: true });
      cpSync(adapterDir, copy, { recursive: true });
      await p.loadLoraAdapter(name, copy).catch((err: unknown) => {
        throw servedPolicyError(c, `loading the LoRA adapter ${name} from ${copy} (POST /v1/load_lora_adapter)`, err);
      });
      p.useModel(name, version);
      loaded.push(name);
      const retired: string[] = [];
      while (loaded.length > c.max_staleness + 1) {
        const old = loaded.shift()!;
        await unload(old);
        rmSync(join(copies, old), { recursive: true, force: true });
        retired.push(old);
      }
      o.log(`policy: the server samples from the LoRA adapter ${name}${retired.length ? ` (${retired.join(', ')} unloaded)` : ''}`);
    };
    // Adapters of this run that an earlier process left loaded (a kill, then --resume).
    const listed = await p.models().catch((err: unknown) => {
      throw servedPolicyError(c, 'GET /v1/models', err);
    });
    for (const m of listed) {
      if (!ours.test(m.id)) continue;
      o.log(`policy: unloading the LoRA adapter ${m.id}, left loaded on the server by an earlier process of this run (or a run of the same name)`);
      await unload(m.id);
    }
    rmSync(copies, { recursive: true, force: true });
    // An adapter there already (a resumed run's, or the cold-start model's, which the learner continues) samples from the start.
    if (existsSync(join(adapterDir, 'adapter_config.json'))) await push(o.step);
    else p.useModel(base, o.step);
    return {
      policy: p,
      maxLen,
      version: () => p.version,
      reload: async (step, changed) => {
        if (changed) await push(step);
      },
      close: async () => {
        // The last adapter stays loaded: the trained policy, served as <run>-v<last step>.
        await p.close();
      },
    };
  }

  // The run's model directory, whole: serve-policy's /v1/reload (the embedded model, or a Hugging Face checkpoint trained in full).
  const reload = async (step: number) => {
    const v = await p.reload(modelDir).catch((err: unknown) => {
      throw servedPolicyError(c, `loading the run's model ${modelDir} (POST /v1/reload)`, err);
    });
    if (v === undefined) p.useModel(base, step); // a server that does not say its weights' version: the step's
  };
  await reload(o.step);
  const maxLen = await maxLenOf();
  return { policy: p, maxLen, version: () => p.version, reload: (step) => reload(step), close: () => p.close() };
}
