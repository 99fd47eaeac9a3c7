/**
 * What `mcp-gym view` shows: the run, eval, rollout and bench directories under the roots it is
 * given, and their files read for the page. A directory is
 *   - a training run: config.json with metrics.jsonl, state.json or status.json (src/trainers/run-dir.ts);
 *   - an evaluation: eval.json, or run.json with kind "eval" (`mcp-gym eval --out`);
 *   - a rollout: run.json with summary.json or trajectories.jsonl (`mcp-gym rollout --out`);
 *   - a benchmark: bench.json (`mcp-gym bench --out`);
 *   - a real-model job: job.json (`mcp-gym start --model`, src/trainers/model-job.ts): its three
 *     held-out evaluations (base, SFT, RL) side by side; its RL run (rl/) is listed as a run too.
 * A recognised directory is not searched further (a run's model/ and checkpoints/ are its own),
 * except a job's rl/.
 *
 * An entry's id is `<root index>/<path under that root>`. Ids from the page are resolved against
 * their root and must stay inside it, after symbolic links too (`resolveId`): nothing outside the
 * roots is ever read.
 */
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';

export type EntryKind = 'run' | 'eval' | 'rollout' | 'bench' | 'job';
export type EntryStatus = 'running' | 'finished' | 'stopped' | 'failed';

export interface Interval {
  success: number;
  ci95?: [number, number];
}

export interface Entry {
  id: string;
  kind: EntryKind;
  /** The directory's name. */
  name: string;
  /** Its absolute path. */
  path: string;
  /** A training run's preset, an evaluation's or rollout's policy, a benchmark's server. */
  preset?: string;
  policy?: string;
  model?: string;
  suite?: string;
  status: EntryStatus;
  /** Why this status, when it was inferred (a run whose process is gone). */
  status_note?: string;
  /** Steps done (runs), episodes (evals and rollouts), tools (bench). */
  steps?: number;
  /** The steps a run was asked for. */
  steps_total?: number;
  before?: Interval;
  after?: Interval;
  /** A job's held-out evaluations (base, sft, rl) as far as it got. */
  stages?: Partial<Record<JobStage, Interval>>;
  started_at?: string;
  updated_at?: string;
}

export type JobStage = 'base' | 'sft' | 'rl';
export const JOB_STAGES: readonly JobStage[] = ['base', 'sft', 'rl'];

/** How long a directory with no status marker counts as running after its last write. */
export const LIVE_WINDOW_MS = 120_000;
const SKIP = new Set(['node_modules', 'model', 'checkpoints', 'replay', 'onnx', '.git']);
const MAX_DEPTH = 6;

/**
 * A file of an entry directory, read only when it is a plain file: a symbolic link (which could
 * point out of the roots) is treated as absent. Runs never write links.
 */
export function readEntryFile(file: string): string {
  if (!lstatSync(file).isFile()) throw new Error(`${file} is not a plain file`);
  return readFileSync(file, 'utf8');
}

function readJson(file: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(readEntryFile(file));
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The rows of a JSONL file (a line that does not parse, e.g. one being written, is left out). */
export function readJsonl(file: string): Record<string, unknown>[] {
  let text: string;
  try {
    text = readEntryFile(file);
  } catch {
    return [];
  }
  const out: Record<string, unknown>[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // a torn last line: read again on the next poll
    }
  }
  return out;
}

function mtime(file: string): number | undefined {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/** The latest write among a directory's files (its log files are appended to as it runs). */
function lastWrite(dir: string, files: string[]): number | undefined {
  const times = files.map((f) => mtime(join(dir, f))).filter((t): t is number => t !== undefined);
  return times.length ? Math.max(...times) : undefined;
}

function isAlive(pid: unknown): boolean {
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v ? v : typeof v === 'number' ? String(v) : undefined;
}

function kindOf(dir: string, files: Set<string>): EntryKind | undefined {
  if (files.has('job.json')) return 'job';
  if (files.has('bench.json')) return 'bench';
  if (files.has('config.json') && (files.has('metrics.jsonl') || files.has('state.json') || files.has('status.json'))) return 'run';
  if (files.has('eval.json')) return 'eval';
  if (files.has('run.json')) {
    const run = readJson(join(dir, 'run.json'));
    if (run?.kind === 'eval') return 'eval';
    if (files.has('summary.json') || files.has('trajectories.jsonl')) return 'rollout';
  }
  return undefined;
}

function interval(v: unknown): Interval | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.success === 'number') return { success: o.success, ...(Array.isArray(o.ci95) ? { ci95: o.ci95 as [number, number] } : {}) };
  if (typeof o.mean === 'number') return { success: o.mean, ...(Array.isArray(o.ci95) ? { ci95: o.ci95 as [number, number] } : {}) };
  return undefined;
}

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString();
}

/** A training run's row: status from status.json (its process checked), else from its files. */
function describeRun(dir: string, base: Pick<Entry, 'id' | 'name' | 'path'>, now: number): Entry {
  const config = readJson(join(dir, 'config.json')) ?? {};
  const state = readJson(join(dir, 'state.json'));
  const marker = readJson(join(dir, 'status.json'));
  const evals = readJsonl(join(dir, 'eval.jsonl'));
  const metrics = readJsonl(join(dir, 'metrics.jsonl'));
  const stepsTotal = typeof config.steps === 'number' ? config.steps : undefined;
  const step =
    typeof state?.step === 'number'
      ? Math.max(state.step, metrics.length ? Number(metrics.at(-1)!.step) || 0 : 0)
      : metrics.length
        ? Number(metrics.at(-1)!.step) || metrics.length
        : 0;
  const written = lastWrite(dir, ['metrics.jsonl', 'trajectories.jsonl', 'state.json', 'eval.jsonl', 'status.json']);
  let status: EntryStatus;
  let note: string | undefined;
  const said = marker?.status;
  if (said === 'finished' || said === 'stopped' || said === 'failed') {
    status = said;
    if (said === 'failed' && typeof marker?.error === 'string') note = marker.error;
  } else if (said === 'running') {
    if (isAlive(marker?.pid)) status = 'running';
    else {
      status = 'failed';
      note = `its process (pid ${String(marker?.pid)}) is gone without saying how the run ended`;
    }
  } else if (stepsTotal !== undefined && step >= stepsTotal && evals.length > 1 && Number(evals.at(-1)!.step) >= stepsTotal) status = 'finished';
  else if (written !== undefined && now - written < LIVE_WINDOW_MS) status = 'running';
  else status = 'stopped';
  const first = evals[0];
  const last = evals.length > 1 ? evals.at(-1) : undefined;
  return {
    ...base,
    kind: 'run',
    preset: str(config.preset),
    policy: str(config.policy),
    model: str(config.model),
    suite: str(config.tasks) ?? str(config.suite), // a task file wins: the config keeps the default suite beside it
    status,
    ...(note ? { status_note: note } : {}),
    steps: step,
    steps_total: stepsTotal,
    before: interval(first),
    after: interval(last),
    started_at: str(marker?.started_at) ?? iso(mtime(join(dir, 'config.json'))),
    updated_at: iso(written),
  };
}

function describeEval(dir: string, base: Pick<Entry, 'id' | 'name' | 'path'>, kind: 'eval' | 'rollout', now: number): Entry {
  const run = readJson(join(dir, 'run.json')) ?? {};
  const result = kind === 'eval' ? readJson(join(dir, 'eval.json')) : readJson(join(dir, 'summary.json'));
  const written = lastWrite(dir, ['trajectories.jsonl', 'eval.json', 'summary.json', 'run.json']);
  let status: EntryStatus;
  if (result) status = result.interrupted === true ? 'stopped' : 'finished';
  else status = written !== undefined && now - written < LIVE_WINDOW_MS ? 'running' : 'stopped';
  const episodes = typeof result?.episodes === 'number' ? result.episodes : readJsonl(join(dir, 'trajectories.jsonl')).length;
  const success =
    kind === 'eval'
      ? interval(result?.pass_at_1)
      : typeof result?.success_rate === 'number'
        ? { success: result.success_rate, ...(Array.isArray(result.success_ci95) ? { ci95: result.success_ci95 as [number, number] } : {}) }
        : undefined;
  return {
    ...base,
    kind,
    policy: str(result?.policy) ?? str(run.policy),
    model: str(run.model),
    suite: str(run.tasks) ?? str(run.suite),
    status,
    steps: episodes,
    after: success,
    started_at: str(run.started_at) ?? iso(mtime(join(dir, 'run.json'))),
    updated_at: iso(written),
  };
}

function describeBench(dir: string, base: Pick<Entry, 'id' | 'name' | 'path'>): Entry {
  const b = readJson(join(dir, 'bench.json')) ?? {};
  const server = (b.server ?? {}) as Record<string, unknown>;
  return {
    ...base,
    kind: 'bench',
    preset: str(server.name) ?? str(server.target),
    suite: str(server.target),
    status: b.interrupted === true ? 'stopped' : 'finished',
    steps: typeof b.tool_count === 'number' ? b.tool_count : undefined,
    started_at: str(b.started_at) ?? iso(mtime(join(dir, 'bench.json'))),
    updated_at: str(b.finished_at) ?? iso(mtime(join(dir, 'bench.json'))),
  };
}

/**
 * A job's evaluation files by stage (paths under the job directory): from job.json's result when it
 * finished, else as far as it got (base/, then the RL run's first evaluation, the SFT checkpoint's).
 */
export function jobStageFiles(dir: string): Partial<Record<JobStage, string>> {
  const job = readJson(join(dir, 'job.json')) ?? {};
  const result = (job.result ?? {}) as Record<string, { trajectories?: string } | undefined>;
  const out: Partial<Record<JobStage, string>> = {};
  for (const s of JOB_STAGES) if (typeof result[s]?.trajectories === 'string') out[s] = result[s]!.trajectories;
  if (!out.base && existsSync(join(dir, 'base', 'trajectories.jsonl'))) out.base = 'base/trajectories.jsonl';
  if (!out.sft && existsSync(join(dir, 'rl', 'evals', 'step-00000.jsonl'))) out.sft = 'rl/evals/step-00000.jsonl';
  return out;
}

function describeJob(dir: string, base: Pick<Entry, 'id' | 'name' | 'path'>, now: number): Entry {
  const job = readJson(join(dir, 'job.json')) ?? {};
  const config = (job.config ?? {}) as Record<string, unknown>;
  const result = job.result as Record<string, unknown> | undefined;
  const stages: Partial<Record<JobStage, Interval>> = {};
  for (const s of JOB_STAGES) {
    const v = interval(result?.[s] ?? (s === 'base' ? readJson(join(dir, 'base', 'eval.json')) : undefined));
    if (v) stages[s] = v;
  }
  const written = lastWrite(dir, ['job.json', 'base/trajectories.jsonl', 'rl/metrics.jsonl', 'rl/trajectories.jsonl', 'sft/sft-data.jsonl']);
  const status: EntryStatus = result ? 'finished' : written !== undefined && now - written < LIVE_WINDOW_MS ? 'running' : 'stopped';
  const rl = (config.rl ?? {}) as Record<string, unknown>;
  return {
    ...base,
    kind: 'job',
    preset: str(rl.preset),
    model: str(config.model_name) ?? str(config.model),
    suite: typeof config.suite === 'string' ? `${config.suite} (difficulty ${String(config.min_difficulty)}-${String(config.max_difficulty)})` : undefined,
    status,
    stages,
    ...(stages.sft ? { before: stages.sft } : {}),
    ...(stages.rl ? { after: stages.rl } : {}),
    started_at: iso(mtime(join(dir, 'base', 'eval.json')) ?? mtime(join(dir, 'job.json'))),
    updated_at: iso(written),
  };
}

/** The entry of one directory, or undefined when it is none of the kinds. */
export function describe(dir: string, id: string, now = Date.now()): Entry | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  const kind = kindOf(dir, new Set(names));
  if (!kind) return undefined;
  const base = { id, name: dir.split(sep).at(-1) ?? dir, path: dir };
  if (kind === 'run') return describeRun(dir, base, now);
  if (kind === 'job') return describeJob(dir, base, now);
  if (kind === 'bench') return describeBench(dir, base);
  return describeEval(dir, base, kind, now);
}

/** Every entry under the roots (a root may itself be one), newest first. */
export function discover(roots: readonly string[], now = Date.now()): Entry[] {
  const out: Entry[] = [];
  const walk = (rootIndex: number, root: string, dir: string, depth: number) => {
    const rel = relative(root, dir).split(sep).join('/');
    const entry = describe(dir, rel ? `${rootIndex}/${rel}` : `${rootIndex}`, now);
    if (entry) {
      out.push(entry);
      // A job's RL run is a run of its own (curves, checkpoints); the job shows its evaluations.
      if (entry.kind === 'job' && depth < MAX_DEPTH) walk(rootIndex, root, join(dir, 'rl'), depth + 1);
      return;
    }
    if (depth >= MAX_DEPTH) return;
    let children: import('node:fs').Dirent[];
    try {
      children = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const c of children) {
      if (c.isDirectory() && !c.name.startsWith('.') && !SKIP.has(c.name)) walk(rootIndex, root, join(dir, c.name), depth + 1);
    }
  };
  roots.forEach((root, i) => walk(i, resolve(root), resolve(root), 0));
  return out.sort((a, b) => (b.started_at ?? '').localeCompare(a.started_at ?? ''));
}

/**
 * The directory of an id, or undefined when the id is malformed, names no root, leads outside its
 * root (`..`, an absolute path, a symbolic link out) or is not an entry's directory.
 */
export function resolveId(roots: readonly string[], id: string): { dir: string; entry: Entry } | undefined {
  const m = /^(\d+)(?:\/(.*))?$/.exec(id);
  if (!m) return undefined;
  const rootArg = roots[Number(m[1])];
  if (rootArg === undefined) return undefined;
  const rel = m[2] ?? '';
  if (rel.includes('\0') || rel.startsWith('/') || /^[a-zA-Z]:/.test(rel) || rel.includes('\\')) return undefined;
  let root: string;
  let dir: string;
  try {
    root = realpathSync(resolve(rootArg));
    const wanted = resolve(root, rel);
    if (wanted !== root && !wanted.startsWith(root + sep)) return undefined;
    if (!existsSync(wanted)) return undefined;
    dir = realpathSync(wanted);
  } catch {
    return undefined;
  }
  if (dir !== root && !dir.startsWith(root + sep)) return undefined;
  const entry = describe(dir, id);
  return entry ? { dir, entry } : undefined;
}

/** A trajectory's training step, from its group id `<task>@train.<step>.<round>`, else its policy version. */
export function stepOf(t: Record<string, unknown>): number | undefined {
  const g = typeof t.group_id === 'string' ? /@train\.(\d+)\.\d+$/.exec(t.group_id) : null;
  if (g) return Number(g[1]);
  return undefined;
}
