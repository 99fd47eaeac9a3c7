/** Training: the learner client (the loop and the presets come next). */
export { LearnerClient, LearnerError, learnerPython, LEARNER_DIR } from './learner-client.ts';
export type { LearnerOptions } from './learner-client.ts';
