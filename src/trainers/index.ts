/** Training: the learner client (the loop and the presets come next). */
export { LearnerClient, LearnerError, learnerPython, LEARNER_DIR } from './learner-client.ts';
export type { LearnerOptions } from './learner-client.ts';
export { HttpLearner } from './learner-client.ts';
export type { Learner } from './learner-client.ts';
export { TrainConfigSchema, LossConfigSchema, PRESETS, resolveConfig, learnerConfig } from './config.ts';
export type { TrainConfig, TrainConfigInput } from './config.ts';
export { groupAdvantages, turnAdvantages, isZeroVariance } from './advantages.ts';
export type { AdvantageEstimator } from './advantages.ts';
export { buildBatch, sequenceOf, overlongPenalty } from './batch.ts';
export type { TrainBatch, BatchItem } from './batch.ts';
export { train, wilson } from './loop.ts';
export type { TrainOptions, TrainResult, EvalResult } from './loop.ts';
export { renderReport, writeReport, lineChart } from './report.ts';
export { runSft } from './sft.ts';
