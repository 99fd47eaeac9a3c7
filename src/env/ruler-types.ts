/** What RULER's files share: its modes and options, the error of a judge that cannot score, and the default rubric. */
export type RulerMode = 'listwise' | 'pairwise';

export interface RulerOptions {
  /** Default listwise. */
  mode?: RulerMode;
  /** The grading standards (default DEFAULT_RUBRIC). */
  rubric?: string;
  /** Pairwise: judge requests per pair (default 3). */
  votes?: number;
  /** The combined reward's weights (applyRuler): default ruler 1, verifier 0. */
  weights?: { ruler?: number; verifier?: number };
  /** A directory where the judge's answers are cached by content hash. */
  cacheDir?: string;
  /** Pairwise: judge requests of a group at once (default 4). */
  concurrency?: number;
  /** Tokens of a judge answer at most (default: listwise 256 + 192·G, pairwise 512). */
  maxTokens?: number;
  temperature?: number;
  /** A message's text (and a tool call's arguments) longer than this is cut in its middle (default 1500). */
  maxMessageChars?: number;
  signal?: AbortSignal;
}

/** The judge could not give a valid score: its request failed, or it answered invalidly twice. */
export class JudgeError extends Error {
  override name = 'JudgeError';
  /** Judge requests the failed scoring made (retries included), and answers it took from the cache. */
  calls = 0;
  cached = 0;
}

export const DEFAULT_RUBRIC = [
  '- A trajectory that achieves its goal should always get a significantly higher score than a trajectory that does not.',
  '- A trajectory that achieves its goal more efficiently (fewer turns and tool calls, no unproductive detours) should score higher than one that achieves it less efficiently.',
  '- Tool calls that fail (errors, invalid arguments, unknown tools) count against a trajectory.',
  '- Give partial credit to a trajectory that makes real progress towards its goal without reaching it.',
  '- If one trajectory is only slightly better than another, the difference in their scores should be small; if it is much better, large.',
  '- Scores are between 0 and 1.',
].join('\n');
