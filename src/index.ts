/**
 * mcp-gym's public API: `import { ... } from 'mcp-gym'`.
 *
 * A handful of nouns cover it (docs/architecture.md, "The public API"): a **Task** (what the agent
 * is asked, which MCP servers it gets, how success is checked), an **Environment** that runs
 * episodes of tasks against real MCP servers, a **Policy** (anything with `act(observation)`),
 * a **Trajectory** per episode and a **TrajectoryGroup** per task, a **reward** (a function of the
 * episode, registered by name or passed), and **training**, composed of three pieces: collecting
 * groups, building the batch, and a learner session. The user owns the rollout and the reward;
 * the library owns the loss.
 */

// ---- Tasks --------------------------------------------------------------------------------
/** Validates a task written in code; throws naming the field. */
export { defineTask } from './env/index.ts';
/** Loads tasks from a .json or .jsonl file; errors name the file, line and field (TaskFileError). */
export { loadTasks, parseTasks, TaskFileError, TaskSchema } from './env/index.ts';
/** The bundled task suites (calculator, kv, files, sql, search, mixed), generated from a seed. */
export { generateSuite, SUITE_NAMES } from './env/suites/index.ts';
export type { Task, TaskInput, Check, Matcher, ServerRef } from './env/index.ts';

// ---- MCP servers ----------------------------------------------------------------------------
/** One client for any MCP server (stdio, streamable HTTP, in-process): a call never throws. */
export { ToolClient } from './tools/index.ts';
export type { ServerSpec, ToolResult, ToolInfo, CallOptions } from './tools/index.ts';
/** Tool-surface drift: a hash of a server's tools (names, descriptions, schemas), and what changed between two. */
export { toolSurface, compareSurfaces, compareSurfaceSets, describeDrift, readToolSurfaces } from './tools/index.ts';
export type { ServerSurface, SurfaceDiff, SurfacesDrift } from './tools/index.ts';
/** The bundled MCP servers (calculator, kv, files, search, sql), by name. */
export { bundledServers } from '../servers/index.ts';

// ---- Episodes, rollouts, policies -------------------------------------------------------------
/** Runs episodes of tasks against their servers, with a fresh server state per episode. */
export { Environment } from './env/index.ts';
/** G rollouts per task, concurrently, written to JSONL as they finish (resumable). */
export { rollout, gatherGroup, summarize } from './env/index.ts';
/** Reads a trajectories.jsonl file. */
export { readTrajectories } from './env/index.ts';
/** An evaluation's figures from its trajectories: pass@1, pass@k, pass^k, reward parts, tool errors, tokens, 95% intervals over tasks. */
export { evalReport, passAtK, passHatK } from './bench/index.ts';
export type { EvalReport } from './bench/index.ts';
/** The one evaluator (docs/evaluation.md): success with its cluster-robust 95% interval, pass@k, pass^k; two checkpoints compared paired by task. */
export { summarizeEpisodes, pairedDifference, taskRates } from '../lib/index.ts';
export type { EpisodeSummary } from '../lib/index.ts';
export type { Policy, Observation, PolicyAction, ProposedCall, Trajectory, TrajectoryGroup, RolloutOptions, RolloutResult, EnvironmentOptions, ChatMessage, AgentTool } from './env/index.ts';
/** Scripted policies: the expert replays a task's reference solution; random calls random tools. */
export { ExpertPolicy, RandomPolicy } from './agents/index.ts';
/** The embedded model (ONNX, sampled in Node with token ids and logprobs): what training trains. */
export { OnnxPolicy } from './agents/index.ts';
/** A Hugging Face checkpoint's turns on the rollout side: its tokenizer and chat template, append-only token sequences, tool calls per family. */
export { HfTurns, HfTokenizer, ChatTemplateRenderer, HfSequence } from './agents/index.ts';
/** A policy from its command-line name: `expert`, `random[:seed]`, `onnx:<model dir>`, `openai:<model>`, `anthropic:<model>`. */
export { makePolicy } from './agents/index.ts';
/** Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, serve-policy, OpenAI): tools, token ids and logprobs when served, retries, usage. */
export { OpenAIPolicy } from './agents/index.ts';
/** Anthropic's Messages API: tool use across turns, extended or adaptive thinking, retries, usage. */
export { AnthropicPolicy } from './agents/index.ts';
/** An API model from its name (`openai:<model>`, `anthropic:<model>`), as a policy and a ChatModel (a judge). */
export { makeChatModel } from './agents/index.ts';
/** The embedded model behind an OpenAI-compatible server (`mcp-gym serve-policy`). */
export { startPolicyServer } from './agents/index.ts';
export type { OpenAIPolicyOptions, AnthropicPolicyOptions, ApiOptions } from './agents/index.ts';
export type { PolicyServer, PolicyServerOptions } from './agents/index.ts';
export type { ChatModel, ChatRequest, ChatResult, ApiUsage, TokenUsage } from './env/index.ts';

// ---- Rewards ---------------------------------------------------------------------------------
/** Registers a reward `(episode) => {reward, parts, stepRewards?}` under a name. */
export { registerReward, rewardNames, resolveReward } from './env/index.ts';
/** Registers a reward part `(episode) => number` under a name: logged in every trajectory's reward_parts, weighted in the composer by `composer_weights`. */
export { registerRewardPart, rewardPartNames, COMPOSER_PARTS } from './env/index.ts';
export type { RewardPartFn } from './env/index.ts';
/** The four built-in rewards (registered as art, rlvr, composer, verifier). */
export { artReward, rlvrReward, composerReward, verifierReward, RewardConfigSchema } from './env/index.ts';
export type { RewardFn, RewardResult, Episode, RewardConfig } from './env/index.ts';
/** Verified task synthesis: a generator (any ChatModel) proposes tasks for servers; kept only when verified on real episodes. */
export { synthesizeTasks, REJECTION_REASONS } from './env/index.ts';
export type { SynthesisOptions, SynthesisResult, Rejection, RejectionReason } from './env/index.ts';
/** RULER: a judge (any ChatModel) scores a group's trajectories, listwise or pairwise; applyRuler writes the combined reward. */
export { rulerScore, applyRuler, JudgeError } from './env/index.ts';
export type { RulerOptions, RulerScores } from './env/index.ts';

// ---- Training --------------------------------------------------------------------------------
/** The training loop: evaluate, then steps of collect → batch → learner, checkpoints, a report. */
export { train } from './trainers/index.ts';
/** Piece 1: a step's groups: rollouts, reward shaping, DAPO's dynamic sampling. */
export { collectGroups, TaskSampler } from './trainers/index.ts';
/** Asynchronous training: the pipeline that collects the next steps' batches while the learner trains, and staleness. */
export { StepPipeline, splitStale } from './trainers/index.ts';
/** A curriculum on task difficulty (adaptive or scheduled) and a replay buffer of past groups with signal. */
export { Curriculum, ReplayBuffer } from './trainers/index.ts';
/** Piece 2: advantages (GRPO, Dr. GRPO, per turn) and the TrainBatch, a pure function. */
export { buildTrainBatch, groupAdvantages } from './trainers/index.ts';
/** Piece 3: the learner (local process or remote URL): train, export weights, checkpoints, restarts. */
export { LearnerSession, LearnerError } from './trainers/index.ts';
/** The training config (one zod schema), its presets, and the learner contract. */
export { TrainConfigSchema, PRESETS, resolveConfig, LEARNER_COMMANDS } from './trainers/index.ts';
/** The SFT cold start: expert demonstrations → a model trained from scratch → ONNX. */
export { runSft } from './trainers/index.ts';
/** The DeepSeek-R1 pipeline as one run: SFT cold start → GRPO → rejection sampling + SFT → GRPO, resumable, one report. */
export { runR1Pipeline, R1ConfigSchema, selectVerified, trajectorySignature } from './trainers/index.ts';
export type { R1Config, R1ConfigInput, R1Options, R1Result, R1Record, R1Stage } from './trainers/index.ts';
/** Hugging Face checkpoints: whether a directory is one, and its ONNX export for in-process sampling (made with the learner's venv). */
export { isHfModelDir, ensureHfOnnx } from './trainers/index.ts';
export type { TrainOptions, TrainResult, EvalResult, TrainConfig, TrainConfigInput, TrainBatch, KeptGroup, Collected, CollectOptions, BuiltBatch, LearnerSessionOptions } from './trainers/index.ts';

// ---- Files of the package ---------------------------------------------------------------------
/** The small model shipped with the package (models/calc-tiny): the default cold start. */
export { BUNDLED_MODEL_DIR } from './paths.ts';
