/**
 * mcp-gym's public API: `import { ... } from 'mcp-gym'`: the nouns a user composes (40 names).
 *
 * A handful of nouns cover it (docs/architecture.md, "The public API"): a **Task** (what the agent
 * is asked, which MCP servers it gets, how success is checked), an **Environment** that runs
 * episodes of tasks against real MCP servers, a **Policy** (anything with `act(observation)`),
 * a **Trajectory** per episode and a **TrajectoryGroup** per task, a **reward** (a function of the
 * episode, registered by name or passed), and **training** (`train`: a step is named stages over
 * collecting groups, building the batch and a learner session). The user owns the rollout and the
 * reward; the library owns the loss.
 *
 * Everything else is behind a subpath, one per folder (each folder's index.ts):
 * `mcp-gym/env` (tasks, checks, rewards, RULER, faults, recording, synthesis), `mcp-gym/tools`
 * (the MCP client, tool surfaces), `mcp-gym/agents` (every policy, tokenizers, chat templates,
 * serve-policy), `mcp-gym/trainers` (config, presets, stages, curriculum, replay, the learner
 * contract), `mcp-gym/bench` (server benchmarks), `mcp-gym/servers` (the bundled servers) and
 * `mcp-gym/lib` (the evaluator, exit codes, seeded randomness).
 */

// ---- Tasks --------------------------------------------------------------------------------
/** Validates a task written in code; throws naming the field. */
export { defineTask } from './env/index.ts';
/** Loads tasks from a .json or .jsonl file; errors name the file, line and field (TaskFileError). */
export { loadTasks, TaskFileError } from './env/index.ts';
/** The bundled task suites (calculator, kv, files, sql, search, mixed), generated from a seed. */
export { generateSuite } from './env/suites/index.ts';
export type { Task } from './env/index.ts';

// ---- MCP servers ----------------------------------------------------------------------------
/** One client for any MCP server (stdio, streamable HTTP, in-process): a call never throws. */
export { ToolClient } from './tools/index.ts';
/** The bundled MCP servers (calculator, kv, files, search, sql), by name. */
export { bundledServers } from '../servers/index.ts';

// ---- Episodes and evaluation ------------------------------------------------------------------
/** Runs episodes of tasks against their servers, with a fresh server state per episode. */
export { Environment } from './env/index.ts';
/** G rollouts per task, concurrently, written to JSONL as they finish (resumable); one task's group; a summary. */
export { rollout, gatherGroup, summarize } from './env/index.ts';
/** Reads a trajectories.jsonl file. */
export { readTrajectories } from './env/index.ts';
/** The one evaluator (docs/evaluation.md): success with its cluster-robust 95% interval, pass@k, pass^k; two checkpoints compared paired by task. */
export { summarizeEpisodes, pairedDifference } from '../lib/index.ts';
/** An evaluation's figures from its trajectories: pass@1, pass@k, pass^k, reward parts, tool errors, tokens, 95% intervals over tasks. */
export { evalReport } from './bench/index.ts';
export type { Trajectory, TrajectoryGroup } from './env/index.ts';

// ---- Policies ---------------------------------------------------------------------------------
/** The expert replays a task's reference solution (demonstrations, checks of a task set). */
export { ExpertPolicy } from './agents/index.ts';
/** The embedded model (ONNX, sampled in Node with token ids and logprobs), or a Hugging Face checkpoint's export: what training trains. */
export { OnnxPolicy } from './agents/index.ts';
/** Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, serve-policy, OpenAI), and Anthropic's Messages API. */
export { OpenAIPolicy, AnthropicPolicy } from './agents/index.ts';
/** A policy from its command-line name: `expert`, `random[:seed]`, `onnx:<model dir>`, `openai:<model>`, `anthropic:<model>`. */
export { makePolicy } from './agents/index.ts';
/** A model behind an OpenAI-compatible server (`mcp-gym serve-policy`). */
export { startPolicyServer } from './agents/index.ts';
export type { Policy, Observation, PolicyAction, ChatModel } from './env/index.ts';

// ---- Rewards ----------------------------------------------------------------------------------
/** Registers a reward `(episode) => {reward, parts, stepRewards?}` under a name, or a part `(episode) => number` weighted by the composer. */
export { registerReward, registerRewardPart } from './env/index.ts';
/** RULER: a judge (any ChatModel) scores a group's trajectories and writes the combined reward. */
export { applyRuler } from './env/index.ts';
export type { RewardFn } from './env/index.ts';

// ---- Training ---------------------------------------------------------------------------------
/** The training loop: evaluate, then steps of named stages (sample, roll out, score, filter, batch, learn, evaluate, persist), checkpoints, a report. */
export { train } from './trainers/index.ts';
/** The stages a user may call alone: a step's groups (rollouts, shaping, dynamic sampling), the TrainBatch, the learner (local or remote). */
export { collectGroups, buildTrainBatch, LearnerSession } from './trainers/index.ts';
/** The SFT cold start, and the DeepSeek-R1 pipeline as one resumable run. */
export { runSft, runR1Pipeline } from './trainers/index.ts';
export type { TrainConfigInput, TrainResult } from './trainers/index.ts';

// ---- Files of the package ---------------------------------------------------------------------
/** The small model shipped with the package (models/calc-tiny): the default cold start. */
export { BUNDLED_MODEL_DIR } from './paths.ts';
