/**
 * A run's rollouts sampled by OpenAI-compatible servers (`policy: openai:<model>`, one `base_url` or
 * several): a fleet (src/agents/fleet.ts) whose every server is kept on the run's weights.
 *
 * - Full weights (the embedded GPT model, or a Hugging Face model trained in full): every server is
 *   told to load the run's model directory, `POST <base>/reload {model_dir}` (mcp-gym serve-policy),
 *   at the start and after each step. The directory must be on a filesystem every server reads
 *   (a shared filesystem when they run on other machines); each server answers the version it
 *   loaded, and the servers of one reload must agree on it.
 * - LoRA (lora_rank > 0, or an adapter in the model directory): after each step the adapter the
 *   learner wrote (`<model>/adapter/`) is copied to `<run>/adapters/<run>-v<step>/` and loaded into
 *   every server under that name (vLLM's `POST <base>/load_lora_adapter`); each server's requests
 *   name it once its load answered, and the adapters before it (beyond max_staleness) are unloaded;
 *   a copy is removed once no server has it loaded.
 *
 * The servers are pushed to in parallel; a step's sampling on a server starts only once its push
 * answered. A server that fails its push is taken out (and brought to the weights when it comes
 * back); when every server fails, the run ends naming each one's error.
 */
import { cpSync, existsSync, rmSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { isHfModelDir, PolicyFleet, ServerEndpointError, type FleetServer, type FleetServerStats, type ServedModel } from '../agents/index.ts';
import type { TrainConfig } from './config.ts';

/** The served rollout policy (a RolloutPolicy of rollout-policy.ts): the fleet, kept on the run's weights. */
export interface ServedRolloutPolicy {
  policy: PolicyFleet;
  /** The served model's context, in tokens (the smallest the servers said). */
  maxLen: number;
  version: () => string | number | undefined;
  /** Pushes the weights of `step` to every server (`changed` false: the step trained nothing). */
  reload: (step: number, changed: boolean) => Promise<unknown>;
  close: () => Promise<void>;
  servers: () => FleetServerStats[];
}

/** The run's policy servers: `base_url`, one or a list. */
export function baseUrls(c: Pick<TrainConfig, 'base_url'>): string[] {
  return c.base_url === undefined ? [] : Array.isArray(c.base_url) ? c.base_url : [c.base_url];
}

/** A served policy's failure at one server, with what to do for the cases that have a known cause. */
export function servedPolicyError(c: TrainConfig, what: string, err: unknown, url: string): Error {
  const e = err as Error;
  let hint = '';
  if (e instanceof ServerEndpointError && e.status === 404 && /_lora_adapter/.test(e.endpoint) && /Not Found/i.test(e.message)) {
    hint =
      ' (vLLM has these endpoints only when started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora; docs/training.md, "Training through vLLM")';
  } else if (e instanceof Error && /\/reload/.test(what) && /\b404\b/.test(e.message)) {
    hint =
      ' (the server has no POST /v1/reload: full fine-tuning needs a server that loads a model directory, e.g. mcp-gym serve-policy; with vLLM train a LoRA adapter (--lora-rank R) or restart it on the new weights)';
  }
  return new Error(`policy ${c.policy}: ${what} at ${url}: ${e.message}${hint}`, { cause: err });
}

/** The served model's context (`max_model_len`) in a server's /v1/models list; throws when the model is not served. */
function contextOf(c: TrainConfig, listed: ServedModel[], base: string, url: string): number {
  const m = listed.find((x) => x.id === base);
  if (!m)
    throw new Error(
      `policy ${c.policy}: the server at ${url} serves no model '${base}' (GET /v1/models lists ${listed.map((x) => x.id).join(', ') || 'none'})`,
    );
  if (!m.max_model_len) throw new Error(`policy ${c.policy}: the server at ${url} does not say its context length (max_model_len in /v1/models)`);
  return m.max_model_len;
}

/**
 * Runs `push` on every server that is not out (in parallel, each after its earlier pushes; when
 * every one is out, on all of them: a push is a probe too, and one that answers is back); those
 * that fail are taken out. Throws when none succeeded: the one error, or every server's.
 */
async function pushAll<T>(
  c: TrainConfig,
  fleet: PolicyFleet,
  what: string,
  push: (s: FleetServer) => Promise<T>,
  o: { bringBack?: boolean } = {},
): Promise<Map<FleetServer, T>> {
  const up = fleet.servers.filter((s) => s.state !== 'out');
  const targets = up.length ? up : fleet.servers;
  const results = await Promise.allSettled(targets.map((s) => s.exclusive(() => push(s))));
  const done = new Map<FleetServer, T>();
  const failed: string[] = [];
  results.forEach((r, i) => {
    const s = targets[i]!;
    if (r.status === 'fulfilled') {
      done.set(s, r.value);
      if (s.state === 'out' && o.bringBack !== false) fleet.bringBack(s);
    } else {
      failed.push((r.reason as Error).message);
      if (fleet.servers.length > 1) fleet.takeOut(s, (r.reason as Error).message);
    }
  });
  if (done.size === 0) {
    if (failed.length === 1 && fleet.servers.length === 1) throw results.map((r) => (r as PromiseRejectedResult).reason)[0];
    const out = fleet.servers.filter((s) => !targets.includes(s)).map((s) => `${s.url}: out since: ${s.lastError ?? 'unknown'}`);
    throw new Error(`policy ${c.policy}: no server took ${what}: ${[...failed, ...out].join('; ')}`);
  }
  return done;
}

export async function servedRolloutPolicy(
  c: TrainConfig,
  modelDir: string,
  o: { step: number; runDir: string; log: (line: string) => void },
): Promise<ServedRolloutPolicy> {
  const base = c.policy.slice('openai:'.length);
  const urls = baseUrls(c);
  const many = urls.length > 1;
  let sync: (s: FleetServer) => Promise<void> = async () => {};
  const fleet = new PolicyFleet(base, urls, {
    apiKeyEnv: c.api_key_env,
    temperature: c.temperature,
    topP: c.top_p,
    maxTokens: c.max_new_tokens,
    tokenIds: true,
    concurrency: c.concurrency,
    seed: c.seed + 1 + o.step,
    timeoutMs: c.request_timeout_ms,
    // One server: the SDK's retries on it (4), as before fleets. Several: failover is the retry (none).
    maxRetries: many ? 0 : 4,
    ...(c.top_k > 0 ? { extraBody: { top_k: c.top_k } } : {}),
    log: o.log,
    sync: (s) => sync(s),
  });
  const contexts = new Map<FleetServer, number>();
  const models = async (s: FleetServer) => {
    const listed = await s.policy.models().catch((err: unknown) => {
      throw servedPolicyError(c, 'GET /v1/models', err, s.url);
    });
    contexts.set(s, contextOf(c, listed, base, s.url));
    return listed;
  };
  const maxLen = () => Math.min(...[...contexts.values()]);
  const servers = () => fleet.stats();
  const close = () => fleet.close();
  // A start that fails closes the fleet (its probes stop) and says why.
  const closing = async (err: unknown): Promise<never> => {
    await fleet.close();
    throw err;
  };
  const hf = isHfModelDir(modelDir);

  // LoRA: asked for, or the model directory holds an adapter (which the learner continues).
  if (hf && (c.lora_rank > 0 || existsSync(join(modelDir, 'adapter', 'adapter_config.json')))) {
    const runName = basename(o.runDir).replace(/[^A-Za-z0-9._-]/g, '_');
    const ours = new RegExp(`^${runName.replace(/[.]/g, '\\.')}-v(\\d+)$`);
    const adapterDir = resolve(modelDir, 'adapter');
    const copies = resolve(o.runDir, 'adapters');
    // What each server has loaded, oldest first: the newest samples; with asynchronous training the
    // max_staleness before it stay loaded for the requests still in flight that name them.
    const loaded = new Map<FleetServer, string[]>(fleet.servers.map((s) => [s, []]));
    // The weights every server is to sample from: an adapter of this run, or the base model (a fresh adapter is the identity).
    let target = { name: base, version: o.step };
    const unload = (s: FleetServer, name: string) =>
      s.policy.unloadLoraAdapter(name).catch((err: unknown) => {
        throw servedPolicyError(c, `unloading the LoRA adapter ${name} (POST /v1/unload_lora_adapter)`, err, s.url);
      });
    const load = async (s: FleetServer, name: string, version: number) => {
      const l = loaded.get(s)!;
      if (l.includes(name)) {
        // The same step's weights again (the run rolled back to it): vLLM refuses a name twice.
        await unload(s, name);
        l.splice(l.indexOf(name), 1);
        s.policy.useModel(base, 0);
      }
      const copy = join(copies, name);
      await s.policy.loadLoraAdapter(name, copy).catch((err: unknown) => {
        throw servedPolicyError(c, `loading the LoRA adapter ${name} from ${copy} (POST /v1/load_lora_adapter)`, err, s.url);
      });
      s.policy.useModel(name, version);
      s.pushes++;
      l.push(name);
      const retired: string[] = [];
      while (l.length > c.max_staleness + 1) {
        const old = l.shift()!;
        await unload(s, old);
        retired.push(old);
      }
      return retired;
    };
    // The adapters' copies made, each removed once no server that is not out has it loaded and it is not the target.
    const made = new Set<string>();
    const pruneCopies = () => {
      const keep = new Set([target.name, ...fleet.servers.filter((s) => s.state !== 'out').flatMap((s) => loaded.get(s)!)]);
      for (const name of made) {
        if (keep.has(name)) continue;
        rmSync(join(copies, name), { recursive: true, force: true });
        made.delete(name);
      }
    };
    // Brings a server to the target: its adapters of this run unloaded, then the target loaded. At a
    // comeback too: a server that was out when a rolled-back run pushed the same step's name again
    // may hold that name with the discarded weights.
    const bring = async (s: FleetServer, atStart: boolean) => {
      const listed = await models(s);
      const l: string[] = [];
      loaded.set(s, l);
      for (const m of listed) {
        if (!ours.test(m.id)) continue;
        if (atStart) o.log(`policy: unloading the LoRA adapter ${m.id}, left loaded on ${s.url} by an earlier process of this run (or a run of the same name)`);
        await unload(s, m.id);
      }
      if (target.name === base) s.policy.useModel(base, target.version);
      else if (l.includes(target.name)) s.policy.useModel(target.name, target.version);
      else await load(s, target.name, target.version);
    };
    const push = async (version: number) => {
      const missing = ['adapter_config.json', 'adapter_model.safetensors'].filter((f) => !existsSync(join(adapterDir, f)));
      if (missing.length)
        throw new Error(`policy ${c.policy}: the learner wrote no LoRA adapter to push to the server: ${adapterDir} lacks ${missing.join(', ')}`);
      const name = `${runName}-v${version}`;
      const copy = join(copies, name);
      rmSync(copy, { recursive: true, force: true });
      cpSync(adapterDir, copy, { recursive: true });
      made.add(name);
      target = { name, version };
      const done = await pushAll(c, fleet, `the LoRA adapter ${name}`, (s) => load(s, name, version));
      const retired = [...new Set([...done.values()].flat())];
      pruneCopies();
      fleet.setVersion(version);
      const where = many ? `${done.size} of ${fleet.servers.length} servers sample` : 'the server samples';
      o.log(`policy: ${where} from the LoRA adapter ${name}${retired.length ? ` (${retired.join(', ')} unloaded)` : ''}`);
    };
    rmSync(copies, { recursive: true, force: true });
    // An adapter there already (a resumed run's, or the cold-start model's, which the learner continues) samples from the start.
    const startWith = existsSync(join(adapterDir, 'adapter_config.json'));
    if (startWith) {
      target = { name: `${runName}-v${o.step}`, version: o.step };
      cpSync(adapterDir, join(copies, target.name), { recursive: true });
      made.add(target.name);
    }
    await pushAll(c, fleet, startWith ? `the LoRA adapter ${target.name}` : 'the start', (s) => bring(s, true)).catch(closing);
    fleet.setVersion(target.version);
    if (startWith) o.log(`policy: ${many ? 'the servers sample' : 'the server samples'} from the LoRA adapter ${target.name}`);
    sync = (s) => bring(s, false);
    return {
      policy: fleet,
      maxLen: maxLen(),
      version: () => fleet.version,
      reload: async (step, changed) => {
        if (changed) await push(step);
      },
      // The last adapter stays loaded: the trained policy, served as <run>-v<last step>.
      close,
      servers,
    };
  }

  // The run's model directory, whole: serve-policy's /v1/reload (the embedded model, or a Hugging Face checkpoint trained in full).
  let step = o.step;
  let current: string | number | undefined;
  const reloadOn = async (s: FleetServer) => {
    const v = await s.policy.reload(modelDir).catch((err: unknown) => {
      throw servedPolicyError(c, `loading the run's model ${modelDir} (POST /v1/reload)`, err, s.url);
    });
    if (v === undefined) s.policy.useModel(base, step); // a server that does not say its weights' version: the step's
    s.pushes++;
    await models(s);
    return s.version;
  };
  const shared = (s: FleetServer, v: unknown, want: unknown) =>
    `policy ${c.policy}: the server at ${s.url} loaded ${modelDir} as version ${String(v)}, the other servers as version ${String(want)}: every server must read the run's model directory (a filesystem they all share)`;
  const reloadAll = async (at: number) => {
    step = at;
    // A server that was out is given requests only after the vote below, if it loaded the fleet's version.
    const done = await pushAll(c, fleet, `the run's model ${modelDir}`, reloadOn, { bringBack: false });
    // The servers of one reload agree on the version: the one most of them answered (on a tie the
    // newest); one that read another copy of the directory is taken out.
    const votes = new Map<string | number | undefined, number>();
    for (const v of done.values()) votes.set(v, (votes.get(v) ?? 0) + 1);
    current = [...votes].sort((a, b) => b[1] - a[1] || (typeof a[0] === 'number' && typeof b[0] === 'number' ? b[0] - a[0] : 0))[0]![0];
    for (const [s, v] of done) {
      if (v !== current) fleet.takeOut(s, shared(s, v, current));
      else if (s.state === 'out') fleet.bringBack(s);
    }
    fleet.setVersion(current);
  };
  sync = async (s) => {
    const v = await reloadOn(s);
    if (current !== undefined && v !== current) throw new Error(shared(s, v, current));
  };
  await reloadAll(o.step).catch(closing);
  return { policy: fleet, maxLen: maxLen(), version: () => fleet.version, reload: (at) => reloadAll(at), close, servers };
}
