/**
 * `lib/`: the little code that `servers/` and `src/` share, and the bottom layer of the project
 * (it imports nothing outside itself but Node built-ins): exact rationals and arithmetic
 * expressions, the seeded PRNG, hashing, HTML escaping, servers' URL lists, and the one evaluator (success, pass@k, pass^k, cluster-robust intervals). `src/` imports it only through this file.
 */
export { MathError, Rational, toDecimal, gcd, bitLength, DECIMAL_DIGITS } from './rational.ts';
export {
  evaluateExpression,
  parseExpression,
  parseNumber,
  checkedSize,
  MAX_EXPRESSION_LENGTH,
  MAX_DEPTH,
  MAX_EXPONENT,
  MAX_DIGITS,
} from './expression.ts';
export type { ExprNode, BinaryOp, FunctionName } from './expression.ts';
export { mulberry32, seededRandom, SeededRandom, CountedRandom } from './random.ts';
export type { RandomFn } from './random.ts';
export { fnv1a, sha256Hex, stableJson } from './hash.ts';
export { esc } from './html.ts';
export { LOCAL_NAMES, tokenProblem, invalidOption, hostName, acceptedHostNames, tokenMatches, hostAllowed } from './http-guard.ts';
export {
  passAtK,
  passHatK,
  overTasks,
  rateOverTasks,
  taskRates,
  taskCounts,
  pairedDifference,
  summarizeEpisodes,
  wilson,
  wilsonInterval,
  t975,
} from './evaluator.ts';
export type { Estimate, RateEstimate, EpisodeSummary } from './evaluator.ts';
export { EXIT, EXIT_MEANINGS, RunFailure, StartFailure, AllEpisodesFailed, NoLearningSignal, BelowThreshold, Interrupted } from './failures.ts';
export { splitCommandLine, parseThreshold } from './command-line.ts';
export { httpUrlProblem, parseUrlList } from './url-list.ts';
export { HttpError, MAX_BODY_BYTES, isJsonObject, readJsonObject, sendJson } from './http-json.ts';
