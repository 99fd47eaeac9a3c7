/** Tasks, the multi-turn environment, rollouts, trajectories and rewards. */
export {
  TaskSchema,
  CheckSchema,
  MatcherSchema,
  ServerRefSchema,
  TaskCallSchema,
  TaskFileError,
  defineTask,
  parseTasks,
  loadTasks,
  openingMessages,
} from './task.ts';
export type { Task, TaskInput, Check, Matcher, ServerRef, TaskCall } from './task.ts';
export { ChatMessageSchema, TrajectorySchema, TurnSchema, ToolStepSchema } from './types.ts';
export type {
  ChatMessage,
  Observation,
  Policy,
  PolicyAction,
  ProposedCall,
  AgentTool,
  Trajectory,
  Turn,
  ToolStep,
  CheckResult,
  ErrorKind,
  TokenUsage,
  ApiUsage,
  ChatModel,
  ChatRequest,
  ChatResult,
} from './types.ts';
export {
  runChecks,
  extractAnswer,
  hasAnswerFormat,
  match,
  checkScore,
  solved,
  parseExact,
  isSubset,
  valueAt,
  codeOf,
  schemaAllowsPath,
  taskProblem,
  stateCallFault,
} from './checks.ts';
export type { EpisodeRecord } from './checks.ts';
export {
  RewardConfigSchema,
  DEFAULT_REWARDS,
  meanRewardParts,
  composerWeightsSchema,
  registerRewardPart,
  rewardPartNames,
  COMPOSER_PARTS,
  scoreEpisode,
  scoreParts,
  stepReward,
  efficiency,
  relevantTools,
  isUseful,
  registerReward,
  rewardNames,
  resolveReward,
  artReward,
  rlvrReward,
  composerReward,
  verifierReward,
} from './rewards.ts';
export type { RewardConfig, RewardConfigInput, ScoredEpisode, Episode, RewardFn, RewardResult, RewardPartFn } from './rewards.ts';
export { Environment, declaresEpisodeIsolation } from './environment.ts';
export type { EnvironmentOptions } from './environment.ts';
export { agentTools } from './episode-tools.ts';
export type { EpisodeOptions } from './episode.ts';
export {
  ToolRecorder,
  ToolRecording,
  ReplayMissError,
  RecordingFileError,
  RecordingLineSchema,
  openTape,
  LIVE_TAPE,
  RECORDING_FORMAT,
  RECORDING_VERSION,
} from './recording.ts';
export type { RecordingLine, EpisodeTape, ToolTape } from './recording.ts';
export { rollout, gatherGroup, groupId, summarize, failureCauses, assertSomeEpisodeRan, allFailed, resumeMismatch } from './rollout.ts';
export type { RolloutOptions, RolloutResult, RolloutSummary, TrajectoryGroup, FailureCause } from './rollout.ts';
export {
  TrajectoryWriter,
  JsonlWriter,
  readTrajectories,
  readJsonl,
  repairJsonl,
  repairJsonlLines,
  episodeKey,
  exportOpenAI,
  toOpenAIFineTune,
} from './store.ts';
export type { JsonlRepair } from './store.ts';
export { runCode, extractCode } from './code-runner.ts';
export { rulerScore, applyRuler, standardise, type RulerScores, type RulerApplied } from './ruler.ts';
export { JudgeError, DEFAULT_RUBRIC, type RulerOptions, type RulerMode } from './ruler-types.ts';
export { rulerPrompt, commonPrefixLength } from './ruler-prompt.ts';
export { parseListwise, parseVerdict, type Verdict } from './ruler-parse.ts';
export { parseFaults, formatFaults, hasFaults, sabotaged, faultCounts, EpisodeFaults, FaultSpecError, FAULT_NAMES, SABOTAGE_MARKS } from './faults.ts';
export type { FaultSpec, FaultOptions, FaultMark, FaultedCall } from './faults.ts';
export {
  parseToolMode,
  toolModeSetting,
  ToolBelt,
  ToolIndex,
  searchTerms,
  oneLine,
  TOOL_MODES,
  TOOL_MODE_HELP,
  TOOLBELT_TOOLS,
  SEARCH_TOOLS,
  META_SERVER,
  DEFAULT_SEARCH_K,
  DEFAULT_MAX_BELT,
} from './tool-modes.ts';
export type { ToolMode, ToolModeOptions } from './tool-modes.ts';
export { synthesizeTasks, parseCandidates, synthesisPrompt, SYNTHESIS_SYSTEM, REJECTION_REASONS } from './synthesis.ts';
export type { SynthesisOptions, SynthesisResult, Rejection, RejectionReason } from './synthesis.ts';
export { startEnvServer, type EnvServer, type EnvServerOptions } from './openenv/server.ts';
export { EnvSession, SessionError, type StepResult } from './openenv/session.ts';
export {
  EnvActionSchema,
  EnvObservationSchema,
  EnvStateSchema,
  envSchemas,
  type EnvAction,
  type EnvObservation,
  type EnvState,
  type EnvTool,
} from './openenv/schema.ts';
export {
  BFCL_CATEGORIES,
  BFCL_GROUPS,
  BFCL_LEFT_OUT,
  BFCL_UNPASSABLE,
  bfclCategories,
  bfclCategoryOf,
  bfclEntries,
  UnknownBfclCategoryError,
  type BfclEntry,
  type BfclCall,
  type BfclTool,
} from './bfcl/data.ts';
export { bfclTask, bfclSuite, isBfclSuite, REVEAL_TOOL, BFCL_STEPS_PER_TURN } from './bfcl/tasks.ts';
export { bfclGrader, BfclGrader, type BfclVerdict, type BfclTables } from './bfcl/grader.ts';
export { bfclResult, bfclStep, writeBfclResults, BFCL_MODEL_NAME } from './bfcl/results.ts';
export { bfclServerRef, isBfclServerRef } from './bfcl/server.ts';
export { bfclPython, bfclEnv, BFCL_VERSION, BfclMissingError } from './bfcl/python.ts';
