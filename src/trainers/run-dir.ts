/**
 * A training run's directory: config.json, the model copy being trained (model/), state.json
 * (the step, the evaluations, the checkpoint it describes, the task sampler's draws), and the
 * append-only logs metrics.jsonl, trajectories.jsonl, eval.jsonl, plus report.html. state.json is
 * written atomically and only together with its checkpoint, so it always describes one.
 * status.json says whether the run is running (with the process's pid), finished, stopped or failed
 * (`mcp-gym view` reads it; a "running" run whose process is gone died without saying so).
 */
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { JsonlWriter, type Trajectory } from '../env/index.ts';
import { driftWarning, readToolSurfaces, writeToolSurfaces, type ToolSurfaces } from '../tools/index.ts';
import type { CurriculumState } from './curriculum.ts';
import type { ReplaySnapshot } from './replay.ts';
import { writeReport } from './report.ts';
import { hfOnnxStale } from './hf-onnx.ts';
import { isHfModelDir } from './learner-client.ts';

export interface EvalResult {
  step: number;
  /** Mean over the held-out tasks of each task's success rate. */
  success: number;
  /** Its 95% interval, cluster-robust (a task's episodes are one cluster: lib/evaluator.ts). */
  ci95: [number, number];
  episodes: number;
  mean_reward: number;
  /** pass@k and pass^k for k = 1..eval_samples (keys "1".."K"), averaged over the held-out tasks. */
  pass_at_k?: Record<string, number>;
  pass_hat_k?: Record<string, number>;
  /** Held-out tasks evaluated. */
  tasks?: number;
  /** The effective sample size behind ci95 (lib/evaluator.ts). */
  n_eff?: number;
  /** The episodes' trajectories, in the run directory (evals/step-NNNNN.jsonl). */
  trajectories?: string;
}

export interface RunState {
  step: number;
  evals: EvalResult[];
  checkpoint?: string;
  train_seconds: number;
  /** Draws of the task sampler so far. */
  rng_draws: number;
  /** The curriculum's state after the batch of `step` (curriculum.ts; adaptive only). */
  curriculum?: CurriculumState;
  /** The replay buffer after the batch of `step`: a file of the run directory (replay/step-NNNNN.json). */
  replay_file?: string;
  /** With replay: the step each recent policy version came from (the replayed groups' staleness after a resume). */
  versions?: Record<string, number>;
}

/** status.json: what `mcp-gym view` shows as the run's status. */
export interface RunStatus {
  status: 'running' | 'finished' | 'stopped' | 'failed';
  pid: number;
  started_at: string;
  updated_at: string;
  error?: string;
}

export function writeJsonAtomic(file: string, value: unknown): void {
  writeFileSync(file + '.tmp', JSON.stringify(value, null, 2) + '\n');
  renameSync(file + '.tmp', file);
}

function readRows(file: string): Record<string, unknown>[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return [];
      }
    });
}

/** What makes a run the run it is: resuming with any of these changed would mix two runs in one directory. */
export const RUN_IDENTITY = [
  'preset',
  'model',
  'suite',
  'tasks',
  'eval_tasks',
  'max_difficulty',
  'min_difficulty',
  'tool_format',
  'reward',
  'group',
  'tasks_per_step',
  'loss',
  'advantage',
  'per_turn',
  'seed',
  'temperature',
  'eval_temperature',
  'top_k',
  'top_p',
  'max_new_tokens',
  'ruler',
  'judge',
  'ruler_weight',
  'ruler_verifier_weight',
  'ruler_rubric',
  'policy',
  'lora_rank',
  'lora_alpha',
  'lora_dropout',
  'lora_targets',
  'dtype',
  'curriculum',
  'curriculum_schedule',
  'replay_fraction',
  'composer_weights',
  'gae_level',
  'faults',
] as const;

/** The differences between a run's recorded config and the one it is resumed with, as `field: was X, now Y`. */
export function identityChanges(was: Record<string, unknown>, now: Record<string, unknown>): string[] {
  // A field the recorded config lacks came after the run was made (it ran with that field's default).
  return RUN_IDENTITY.filter((k) => k in was && JSON.stringify(was[k]) !== JSON.stringify(now[k])).map(
    (k) => `${k}: the run has ${JSON.stringify(was[k]) ?? '(none)'}, not ${JSON.stringify(now[k]) ?? '(none)'}`,
  );
}

/** The config a run was made with (its config.json), or undefined. */
export function recordedConfig(dir: string): Record<string, unknown> | undefined {
  const file = join(resolve(dir), 'config.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>) : undefined;
}

export class RunDir {
  readonly dir: string;
  readonly modelDir: string;
  readonly stateFile: string;
  state: RunState = { step: 0, evals: [], train_seconds: 0, rng_draws: 0 };
  /** The metrics rows of the steps done (the report draws them). */
  readonly metrics: Record<string, unknown>[] = [];
  /** A few trajectories of the last evaluation, for the report. */
  samples: { label: string; trajectory: Trajectory }[] = [];
  private readonly metricsOut: JsonlWriter<Record<string, unknown>>;
  private readonly trajOut: JsonlWriter<Trajectory>;
  private readonly evalOut: JsonlWriter<EvalResult>;

  /**
   * A new run (copies the model and writes config.json) or, with `resume`, the run already there
   * (reads state.json). Refuses a new run over an existing one, and a resume of nothing.
   */
  constructor(dir: string, o: { resume: boolean; model: string; config: unknown }) {
    this.dir = resolve(dir);
    this.modelDir = join(this.dir, 'model');
    this.stateFile = join(this.dir, 'state.json');
    mkdirSync(this.dir, { recursive: true });
    if (o.resume) {
      if (!existsSync(this.stateFile)) throw new Error(`${this.dir}: nothing to resume (no state.json)`);
      const was = recordedConfig(this.dir);
      const changes = was ? identityChanges(was, o.config as Record<string, unknown>) : [];
      if (changes.length)
        throw new Error(`resume: ${this.dir} holds another run (${changes.join('; ')}); resume it with its own settings, or start a new run directory`);
      this.state = JSON.parse(readFileSync(this.stateFile, 'utf8')) as RunState;
      this.metrics.push(...readRows(join(this.dir, 'metrics.jsonl')).filter((m) => Number(m.step) <= this.state.step));
    } else {
      if (existsSync(this.stateFile)) throw new Error(`${this.dir} already holds a run: pass --resume to continue it, or choose another run directory`);
      if (!existsSync(join(o.model, 'config.json'))) throw new Error(`model: no model directory at ${o.model} (make one with: mcp-gym sft --out ${o.model})`);
      rmSync(this.modelDir, { recursive: true, force: true });
      // A Hugging Face checkpoint's ONNX export is copied with it when it is current (newer than its
      // weights, with the shared-prefix inputs: the same weights, exported); otherwise it is left out and
      // made again from the copy (ensureHfOnnx).
      const hf = isHfModelDir(o.model);
      const current = hf && hfOnnxStale(o.model) === undefined;
      const hfExport = hf && !current ? join(o.model, 'onnx') : undefined;
      cpSync(o.model, this.modelDir, {
        recursive: true,
        filter: (src) => !src.endsWith('sft-data.jsonl') && !(hfExport && (src === hfExport || src.startsWith(hfExport + sep))),
      });
      // The copies' times are the copy's: the export's stamp is set after the weights', so that it stays current.
      if (current) {
        const now = new Date();
        utimesSync(join(this.modelDir, 'onnx', 'config.json'), now, now);
      }
      writeJsonAtomic(join(this.dir, 'config.json'), o.config);
    }
    this.startedAt = new Date().toISOString();
    this.markStatus('running');
    this.metricsOut = new JsonlWriter(join(this.dir, 'metrics.jsonl'), { sync: false });
    this.trajOut = new JsonlWriter(join(this.dir, 'trajectories.jsonl'), { sync: false });
    this.evalOut = new JsonlWriter(join(this.dir, 'eval.jsonl'), { sync: true });
  }

  private readonly startedAt: string;

  /** Writes status.json (running, then finished, stopped or failed with its error). */
  markStatus(status: RunStatus['status'], error?: string): void {
    const value: RunStatus = {
      status,
      pid: process.pid,
      started_at: this.startedAt,
      updated_at: new Date().toISOString(),
      ...(error !== undefined ? { error } : {}),
    };
    try {
      writeJsonAtomic(join(this.dir, 'status.json'), value);
    } catch {
      // status.json is for the viewer only: never a reason for a run to fail
    }
  }

  get report(): string {
    return join(this.dir, 'report.html');
  }

  /** The replay buffer to store with the next commit (the one after the batch of `state.step`). */
  private pendingReplay?: { step: number; snapshot: ReplaySnapshot };

  /** Notes the replay buffer after the batch of `step`; the next commit writes it (then state.json names it). */
  setReplay(step: number, snapshot: ReplaySnapshot): void {
    this.pendingReplay = { step, snapshot };
  }

  /** The replay buffer state.json names (undefined: none stored). */
  readReplay(): ReplaySnapshot | undefined {
    if (!this.state.replay_file) return undefined;
    const file = join(this.dir, this.state.replay_file);
    try {
      return JSON.parse(readFileSync(file, 'utf8')) as ReplaySnapshot;
    } catch (err) {
      throw new Error(`${file}: cannot read the replay buffer that state.json names: ${(err as Error).message}`);
    }
  }

  /**
   * Writes state.json (call only when it describes a saved checkpoint), after the replay buffer
   * noted for its step (a file per step, written first and atomically; the ones state.json no
   * longer names are removed after it).
   */
  commit(): void {
    const pending = this.pendingReplay;
    if (pending && pending.step === this.state.step) {
      const name = join('replay', `step-${String(pending.step).padStart(5, '0')}.json`);
      mkdirSync(join(this.dir, 'replay'), { recursive: true });
      const file = join(this.dir, name);
      writeFileSync(file + '.tmp', JSON.stringify(pending.snapshot));
      renameSync(file + '.tmp', file);
      this.state.replay_file = name;
      this.pendingReplay = undefined;
    }
    writeJsonAtomic(this.stateFile, this.state);
    const dir = join(this.dir, 'replay');
    if (existsSync(dir)) {
      for (const f of readdirSync(dir)) if (join('replay', f) !== this.state.replay_file) rmSync(join(dir, f), { force: true });
    }
  }

  /** Back to the state of the last commit (after the learner died): later metrics rows are dropped. */
  rollback(): void {
    this.state = JSON.parse(readFileSync(this.stateFile, 'utf8')) as RunState;
    this.pendingReplay = undefined;
    this.metrics.splice(0, this.metrics.length, ...this.metrics.filter((m) => Number(m.step) <= this.state.step));
  }

  /**
   * Records the tool surface of the run's servers (src/tools/surface.ts) as tool-surface.json in
   * the run directory and in its model directory (the model the run trains). On a resume, first
   * compares it with the recorded one: the warning it returns names the tools that changed. A
   * server not reached now keeps its recorded surface.
   */
  recordToolSurfaces(surfaces: ToolSurfaces, resume: boolean): string | undefined {
    let warning: string | undefined;
    let recorded: ToolSurfaces = {};
    if (resume) {
      warning = driftWarning(this.dir, surfaces, 'this run was trained with');
      try {
        recorded = readToolSurfaces(this.dir)?.servers ?? {};
      } catch {
        recorded = {};
      }
    }
    const all = { ...recorded, ...surfaces };
    if (Object.keys(all).length === 0) return warning;
    writeToolSurfaces(this.dir, all);
    if (existsSync(this.modelDir)) writeToolSurfaces(this.modelDir, all);
    return warning;
  }

  /**
   * An evaluation's episodes in evals/step-<step>.jsonl (named in `e.trajectories`: the viewer shows
   * them, and two evaluations compare task by task), and `e` in the run's state (state.json holds it
   * from the next commit on); its row is appended by appendRows.
   */
  addEval(e: EvalResult, trajectories: Trajectory[]): void {
    const file = join('evals', `step-${String(e.step).padStart(5, '0')}.jsonl`);
    mkdirSync(join(this.dir, 'evals'), { recursive: true });
    writeFileSync(join(this.dir, file), trajectories.map((t) => JSON.stringify(t)).join('\n') + '\n');
    e.trajectories = file;
    this.state.evals.push(e);
    this.samples = [...trajectories.filter((t) => t.success).slice(0, 2), ...trajectories.filter((t) => !t.success).slice(0, 2)].map((t) => ({
      label: `eval @ step ${e.step}`,
      trajectory: t,
    }));
  }

  /** The rows of a step (or of an evaluation before or after the run), appended: trajectories.jsonl, eval.jsonl, metrics.jsonl. */
  appendRows(rows: { trajectories?: Trajectory[]; eval?: EvalResult; metrics?: Record<string, unknown> }): void {
    for (const t of rows.trajectories ?? []) this.trajOut.write(t);
    if (rows.eval) this.evalOut.write(rows.eval);
    if (rows.metrics) {
      this.metricsOut.write(rows.metrics);
      this.metrics.push(rows.metrics);
    }
  }

  refreshReport(title: string, summary: Record<string, unknown>): void {
    writeReport(this.report, { title, metrics: this.metrics, evals: this.state.evals, samples: this.samples, summary });
  }

  close(): void {
    this.metricsOut.close();
    this.trajOut.close();
    this.evalOut.close();
  }
}
