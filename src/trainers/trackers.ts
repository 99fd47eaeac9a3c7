/**
 * Experiment trackers (`--report-to wandb,tensorboard,mlflow`, as TRL and ART users know it):
 * a run's config, its step metrics, its held-out evaluations and sample trajectories as tables,
 * written by the trackers' official Python clients (learner/mcp_gym_learner/trackers.py: wandb in
 * offline mode, TensorBoard's event writer, MLflow's file store) into the run directory. The
 * clients live in the learner's venv; the first run that asks installs them there
 * (learner/requirements-trackers.lock). A tracker that fails mid-run costs a warning, not the run.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { StartFailure } from '../../lib/index.ts';
import { LEARNER_DIR } from '../paths.ts';
import type { Trajectory } from '../env/index.ts';
import { ensureVenvPackages } from './venv-packages.ts';
import type { TrackerName } from './options.ts';

/** The module each tracker needs in the venv. */
const MODULES: Record<TrackerName, string> = { wandb: 'wandb', tensorboard: 'tensorboard', mlflow: 'mlflow' };
export const TRACKERS_LOCK = join(LEARNER_DIR, 'requirements-trackers.lock');

/** Installs the trackers' packages into the learner's venv when one is missing; returns the venv's Python. */
export function ensureTrackerPackages(names: TrackerName[], log: (line: string) => void = () => {}): string {
  return ensureVenvPackages(
    names.map((n) => MODULES[n]),
    TRACKERS_LOCK,
    "the trackers' packages",
    log,
  );
}

export type TrackerMessage =
  | { type: 'config'; config: Record<string, unknown> }
  | { type: 'metrics'; step: number; values: Record<string, unknown> }
  | { type: 'eval'; step: number; values: Record<string, unknown> }
  | { type: 'table'; step: number; name: string; columns: string[]; rows: unknown[][] };

export class Trackers {
  private queue: Promise<void> = Promise.resolve();
  private readonly answers: ((line: string) => void)[] = [];
  private failed?: string;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    readonly names: TrackerName[],
    /** Where each tracker writes. */
    readonly dirs: Record<string, string>,
    private readonly warn: (message: string) => void,
  ) {}

  /** Starts the trackers for a run (installing their packages when needed); a StartFailure when one cannot start. */
  static async start(o: {
    runDir: string;
    names: TrackerName[];
    name?: string;
    log?: (line: string) => void;
    warn?: (message: string) => void;
  }): Promise<Trackers> {
    const python = ensureTrackerPackages(o.names, o.log);
    const child = spawn(
      python,
      ['-m', 'mcp_gym_learner.trackers', '--run-dir', o.runDir, '--report-to', o.names.join(','), ...(o.name ? ['--name', o.name] : [])],
      {
        cwd: LEARNER_DIR,
        env: { ...process.env, PYTHONPATH: LEARNER_DIR, PYTHONUNBUFFERED: '1' },
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (c: string) => (stderr = (stderr + c).slice(-4000)));
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve) => {
      lines.once('line', resolve);
      child.once('exit', (code) =>
        resolve(
          JSON.stringify({
            ready: false,
            error: `the trackers' process exited with code ${code}${stderr ? `; its stderr ends with: ${stderr.trim().slice(-800)}` : ''}`,
          }),
        ),
      );
    });
    const ready = JSON.parse(first) as { ready: boolean; error?: string; dirs?: Record<string, string> };
    if (!ready.ready) {
      child.kill();
      throw new StartFailure(`--report-to ${o.names.join(',')}: ${ready.error}`);
    }
    const t = new Trackers(child, o.names, ready.dirs ?? {}, o.warn ?? (() => {}));
    lines.on('line', (l) => t.answers.shift()?.(l));
    child.once('exit', () => {
      t.failed ??= `the trackers' process exited${stderr ? `: ${stderr.trim().slice(-400)}` : ''}`;
      for (const a of t.answers.splice(0)) a(JSON.stringify({ ok: false, error: t.failed }));
    });
    return t;
  }

  /** Sends one message (in order); a tracker's error is a warning. */
  send(msg: TrackerMessage): Promise<void> {
    this.queue = this.queue.then(async () => {
      if (this.failed) return;
      const answer = new Promise<string>((resolve) => this.answers.push(resolve));
      this.child.stdin.write(JSON.stringify(msg) + '\n');
      const r = JSON.parse(await answer) as { ok: boolean; error?: string };
      if (!r.ok) this.warn(`--report-to: ${msg.type}${'step' in msg ? ` at step ${msg.step}` : ''}: ${r.error}`);
    });
    return this.queue;
  }

  /** Finishes every tracker's run (wandb.finish, the event files flushed, the MLflow run ended). */
  async close(): Promise<void> {
    await this.queue.catch(() => {});
    if (this.child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin.end(JSON.stringify({ type: 'close' }) + '\n');
    const timer = setTimeout(() => this.child.kill(), 60_000);
    await exited;
    clearTimeout(timer);
  }
}

/** A table of sample trajectories (the first `n`): what the tracker shows of an evaluation's episodes. */
export function trajectoryTable(trajectories: Trajectory[], n = 8): { columns: string[]; rows: unknown[][] } {
  const columns = ['task', 'success', 'reward', 'turns', 'tool_calls', 'finish', 'answer', 'calls'];
  const rows = trajectories.slice(0, n).map((t) => [
    t.task_id,
    t.success,
    Math.round(t.reward * 1000) / 1000,
    t.metrics.turns,
    t.metrics.tool_calls,
    t.finish,
    (t.answer ?? t.error ?? '').slice(0, 200),
    t.turns
      .flatMap((u) => u.tool_results.map((r) => `${r.tool ?? r.name}(${JSON.stringify(r.arguments).slice(0, 80)})${r.isError ? ' !' : ''}`))
      .join('; ')
      .slice(0, 400),
  ]);
  return { columns, rows };
}
