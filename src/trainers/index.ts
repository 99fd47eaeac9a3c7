/**
 * Training: the config and its presets, the three pieces of a step (collectGroups,
 * buildTrainBatch, LearnerSession), the loop that composes them (train), the learner contract
 * and connections, SFT, and the run report.
 */
export { TrainConfigSchema, PRESET_NAMES, CONFIG_GROUPS, GROUP_OF, flattenConfig } from './config.ts';
export { PRESETS } from './presets.ts';
export { resolveConfig, learnerConfig, policyTokenBudget, samplerThreads, hfLoadOptions } from './resolve-config.ts';
export type { TrainConfig, TrainConfigInput, ConfigGroup, GroupedConfigInput, ConfigInput } from './config.ts';
export {
  LearnerConfigSchema,
  TrainBatchSchema,
  TrainMetricsSchema,
  LEARNER_COMMANDS,
  PROTOCOL_VERSION,
  protocolJsonSchema,
  protocolJsonText,
} from './protocol.ts';
export type { LearnerConfig, LearnerConfigInput, LearnerCommand, LearnerArgs, LearnerResult, TrainMetrics } from './protocol.ts';
export { LearnerClient, HttpLearnerClient, LearnerError, learnerPython, isHfModelDir, LEARNER_DIR } from './learner-client.ts';
export { ensureHfOnnx, hfOnnxStale } from './hf-onnx.ts';
export { resolveModel, getModel, convertGguf, registeredModels, modelsRoot, isModelName } from './models.ts';
export type { RegisteredModel } from './models.ts';
export { runModelJob, stageEval, jobTasks, evaluateCheckpoint, JOB_STAGES, JOB_UNIT_SECONDS, JobEta, jobPlan } from './model-job.ts';
export type { JobStage, ModelJobConfig, ModelJobResult, ModelJobProgress, ModelJobOptions, StageEval } from './model-job.ts';
export type { LearnerOptions, LearnerConnection } from './learner-client.ts';
export { LearnerSession } from './session.ts';
export type { LearnerSessionOptions } from './session.ts';
export { groupAdvantages, turnAdvantages, isZeroVariance, sampleStd } from './advantages.ts';
export type { AdvantageEstimator } from './advantages.ts';
export { buildBatch, buildTrainBatch, sequenceOf, overlongPenalty } from './batch.ts';
export type { TrainBatch, BatchItem, KeptGroup, BatchOptions, BuiltBatch } from './batch.ts';
export { TaskSampler, drawDistinct } from './sampler.ts';
export { collectGroups, shapeOverlong, withoutSignal } from './collect.ts';
export type { CollectOptions, Collected } from './collect.ts';
export { RunDir, RUN_IDENTITY, identityChanges, recordedConfig } from './run-dir.ts';
export type { RunState } from './run-dir.ts';
export { train, finalEval } from './loop.ts';
export { trainingTasks } from './run-context.ts';
export { evalFigures } from './step-evaluate.ts';
export { noSignalReason } from './step-record.ts';
export { StepPipeline, VersionSteps, stalenessOf, splitStale } from './pipeline.ts';
export { CURRICULUM_MODES, parseSchedule, REPLAY_PRIORITIES, TRACKERS, parseReportTo } from './options.ts';
export type { CurriculumMode, ReplayPriority, TrackerName } from './options.ts';
export { Curriculum, suiteOf, difficultyMix } from './curriculum.ts';
export type { CurriculumOptions, CurriculumState, LevelMove } from './curriculum.ts';
export { ReplayBuffer, groupPriority } from './replay.ts';
export type { ReplayOptions, ReplayEntry, ReplaySnapshot, ReplayDraw } from './replay.ts';
export type { StalenessSplit } from './pipeline.ts';
export type { TrainOptions, TrainResult } from './run-context.ts';
export type { EvalResult } from './run-dir.ts';
export { renderReport, writeReport, lineChart } from './report.ts';
export { hideSecrets, isSecretField } from './chart.ts';
export { runSft, continueSft, expertDemos } from './sft.ts';
export type { SftOptions, SftResult, ContinueSftOptions, ContinueSftResult } from './sft.ts';
export { runR1Pipeline } from './r1.ts';
export type { R1Options, R1Result } from './r1.ts';
export { R1ConfigSchema, R1ConfigError, parseR1Config, pipelineChanges } from './r1-config.ts';
export type { R1Config, R1ConfigInput } from './r1-config.ts';
export { R1_STAGES } from './r1-record.ts';
export type { R1Record, R1Stage, R1StageName, HeldOut } from './r1-record.ts';
export { selectVerified, trajectorySignature, rejectionExamples } from './r1-rejection.ts';
export type { RejectionCounts } from './r1-rejection.ts';
export { r1Table, writeR1Report } from './r1-report.ts';
