/** Tasks, the multi-turn environment, rollouts, trajectories and rewards. */
export { TaskSchema, CheckSchema, MatcherSchema, ServerRefSchema, TaskCallSchema, TaskFileError, defineTask, parseTasks, loadTasks, openingMessages } from './task.ts';
export type { Task, TaskInput, Check, Matcher, ServerRef, TaskCall } from './task.ts';
export { ChatMessageSchema, TrajectorySchema, TurnSchema, ToolStepSchema } from './types.ts';
export type { ChatMessage, Observation, Policy, PolicyAction, ProposedCall, AgentTool, Trajectory, Turn, ToolStep, CheckResult, TokenUsage, ApiUsage, ChatModel, ChatRequest, ChatResult } from './types.ts';
export { runChecks, extractAnswer, hasAnswerFormat, match, checkScore, solved, parseExact, isSubset, valueAt, codeOf, schemaAllowsPath, taskProblem, stateCallFault } from './checks.ts';
export type { EpisodeRecord } from './checks.ts';
export { RewardConfigSchema, DEFAULT_REWARDS, scoreEpisode, scoreParts, stepReward, efficiency, relevantTools, isUseful, registerReward, rewardNames, resolveReward, artReward, rlvrReward, composerReward, verifierReward } from './rewards.ts';
export type { RewardConfig, RewardConfigInput, ScoredEpisode, Episode, RewardFn, RewardResult } from './rewards.ts';
export { Environment, agentTools, declaresEpisodeIsolation } from './environment.ts';
export type { EnvironmentOptions, EpisodeOptions } from './environment.ts';
export { rollout, gatherGroup, groupId, summarize, failureCauses, resumeMismatch } from './rollout.ts';
export type { RolloutOptions, RolloutResult, RolloutSummary, TrajectoryGroup, FailureCause } from './rollout.ts';
export { TrajectoryWriter, JsonlWriter, readTrajectories, readJsonl, repairJsonl, repairJsonlLines, episodeKey, exportOpenAI, toOpenAIFineTune } from './store.ts';
export type { JsonlRepair } from './store.ts';
export { runCode, extractCode } from './code-runner.ts';
export { rulerScore, applyRuler, rulerPrompt, parseListwise, parseVerdict, standardise, commonPrefixLength, JudgeError, DEFAULT_RUBRIC, type RulerOptions, type RulerScores, type RulerApplied, type RulerMode, type Verdict } from './ruler.ts';
