/**
 * The bundled task suites: generated, seeded task sets over the bundled servers, each with a
 * train and an eval split that share no parameters (see `common.ts`), difficulties 1-5 in equal
 * shares, and a reference solution per task that the expert policy replays.
 */
import type { Task } from '../task.ts';
import { bfclSuite, isBfclSuite } from '../bfcl/tasks.ts';
import { BFCL_GROUPS } from '../bfcl/data.ts';
import { calculatorSuite } from './calculator.ts';
import { drawTasks, type Sampler } from './common.ts';
import { filesSuite } from './files.ts';
import { kvSuite } from './kv.ts';
import { manyToolsSuite } from './many-tools.ts';
import { mixedSuite } from './mixed.ts';
import { searchSuite } from './search.ts';
import { sqlSuite } from './sql.ts';

export { paramsKey, splitOfKey, EVAL_PERCENT } from './common.ts';
export { rephraseSqlTask, SQL_HELDOUT_PHRASING } from './sql.ts';
export { manyToolsServers, manyToolsName, MANY_TOOLS_TOOLS, MANY_TOOLS_BFCL_ENTRY } from './many-tools.ts';

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

/** The suites `all` stands for. */
const ALL_SUITES: readonly Suite[] = [calculatorSuite, kvSuite, filesSuite, sqlSuite, searchSuite, mixedSuite];
/** Every bundled suite: `many-tools` too, which `all` leaves out (it starts reference servers and BFCL's backends for every episode). */
const SUITES: readonly Suite[] = [...ALL_SUITES, manyToolsSuite];

export const SUITE_NAMES: readonly string[] = SUITES.map((s) => s.name);
/** The suites `all` stands for (every bundled suite but many-tools). */
export const ALL_SUITE_NAMES: readonly string[] = ALL_SUITES.map((s) => s.name);

/** The names that stand for BFCL's categories (docs/bfcl.md): `bfcl` (every category), `bfcl:<group>`, `bfcl:<category>`. */
export const BFCL_SUITE_HELP = `bfcl, bfcl:${Object.keys(BFCL_GROUPS)
  .filter((g) => g !== 'all')
  .join(', bfcl:')}, bfcl:<category>`;

/** Whether a name is a suite (bundled, 'all', or BFCL's; BFCL's category is checked when its tasks are made). */
export function isSuiteName(name: string): boolean {
  return name === 'all' || SUITE_NAMES.includes(name) || isBfclSuite(name);
}

function count(value: number | undefined, fallback: number, what: string): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 0) throw new Error(`${what} must be a non-negative integer, got ${n}`);
  return n;
}

/**
 * The tasks of a suite (eval first, then train), or of every suite with 'all'. Unknown names
 * throw, listing the suites. BFCL's suites (`bfcl`, `bfcl:<group>`, `bfcl:<category>`) are BFCL's
 * entries (src/env/bfcl/tasks.ts): every entry by default, `eval`/`train` capping each category.
 */
export function generateSuite(name: string, options: SuiteOptions = {}): Task[] {
  if (isBfclSuite(name)) return bfclSuite(name, { train: options.train, eval: options.eval });
  const seed = options.seed ?? DEFAULT_SEED;
  const train = count(options.train, DEFAULT_TRAIN, 'train');
  const evalCount = count(options.eval, DEFAULT_EVAL, 'eval');
  if (name === 'all') return ALL_SUITES.flatMap((s) => generateSuite(s.name, options));
  const suite = SUITES.find((s) => s.name === name);
  if (!suite) throw new Error(`Unknown suite '${name}'. Suites: ${SUITE_NAMES.join(', ')}, all, or BFCL's (${BFCL_SUITE_HELP})`);
  return [...drawTasks(suite.name, 'eval', evalCount, seed, suite.sampler), ...drawTasks(suite.name, 'train', train, seed, suite.sampler)];
}

export function describeSuites(): { name: string; description: string; families: string[]; servers: string[] }[] {
  return SUITES.map(({ name, description, families, servers }) => ({ name, description, families: [...families], servers: [...servers] }));
}
