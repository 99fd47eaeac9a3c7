/**
 * The bundled task suites: generated, seeded task sets over the bundled servers, each with a
 * train and an eval split that share no parameters (see `common.ts`), difficulties 1-5 in equal
 * shares, and a reference solution per task that the expert policy replays.
 */
import type { Task } from '../task.ts';
import { calculatorSuite } from './calculator.ts';
import { drawTasks, type Sampler } from './common.ts';
import { filesSuite } from './files.ts';
import { kvSuite } from './kv.ts';
import { mixedSuite } from './mixed.ts';
import { searchSuite } from './search.ts';
import { sqlSuite } from './sql.ts';

export { paramsKey, splitOfKey, EVAL_PERCENT } from './common.ts';

export interface SuiteOptions {
  /** Seed of the draw (default 1234); the same options always give the same tasks. */
  seed?: number;
  /** Train tasks per suite (default 200). */
  train?: number;
  /** Eval tasks per suite (default 40). */
  eval?: number;
}

export const DEFAULT_SEED = 1234;
export const DEFAULT_TRAIN = 200;
export const DEFAULT_EVAL = 40;

interface Suite {
  name: string;
  description: string;
  families: string[];
  servers: string[];
  sampler: Sampler;
}

const SUITES: readonly Suite[] = [calculatorSuite, kvSuite, filesSuite, sqlSuite, searchSuite, mixedSuite];

export const SUITE_NAMES: readonly string[] = SUITES.map((s) => s.name);

function count(value: number | undefined, fallback: number, what: string): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 0) throw new Error(`${what} must be a non-negative integer, got ${n}`);
  return n;
}

/**
 * The tasks of a suite (eval first, then train), or of every suite with 'all'. Unknown names
 * throw, listing the suites.
 */
export function generateSuite(name: string, options: SuiteOptions = {}): Task[] {
  const seed = options.seed ?? DEFAULT_SEED;
  const train = count(options.train, DEFAULT_TRAIN, 'train');
  const evalCount = count(options.eval, DEFAULT_EVAL, 'eval');
  if (name === 'all') return SUITES.flatMap((s) => generateSuite(s.name, options));
  const suite = SUITES.find((s) => s.name === name);
  if (!suite) throw new Error(`Unknown suite '${name}'. Suites: ${SUITE_NAMES.join(', ')}, or all`);
  return [...drawTasks(suite.name, 'eval', evalCount, seed, suite.sampler), ...drawTasks(suite.name, 'train', train, seed, suite.sampler)];
}

export function describeSuites(): { name: string; description: string; families: string[]; servers: string[] }[] {
  return SUITES.map(({ name, description, families, servers }) => ({ name, description, families: [...families], servers: [...servers] }));
}
