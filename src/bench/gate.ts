/**
 * Evaluations as a CI gate: `--fail-under X` fails the command (exit 6, BelowThreshold) when the
 * success rate is below X, and `--junit FILE` writes JUnit XML with one test case per task, so a
 * CI system shows which tasks regressed. A task's case fails when its own success rate is below
 * the same threshold (1 without --fail-under: every episode of the task must succeed), and is an
 * error when every one of its episodes failed to run (a server, the policy: not the agent's answer).
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { BelowThreshold } from '../../lib/index.ts';
import type { Trajectory } from '../env/index.ts';

/** One task's outcome, as a test case. */
export interface GateTask {
  task: string;
  suite: string;
  runs: number;
  successes: number;
  /** Episodes that failed to run (finish `error`). */
  errors: number;
  /** Seconds of its episodes, summed. */
  seconds: number;
  /** The first failed episode's error, or its checks' details: why it did not succeed. */
  why?: string;
}

/** The gate's per-task outcomes from an evaluation's trajectories (tasks in order of first sight). */
export function gateTasks(trajectories: Trajectory[], suiteOf: (taskId: string) => string): GateTask[] {
  const by = new Map<string, GateTask>();
  for (const t of trajectories) {
    const g = by.get(t.task_id) ?? { task: t.task_id, suite: suiteOf(t.task_id), runs: 0, successes: 0, errors: 0, seconds: 0 };
    g.runs++;
    if (t.success) g.successes++;
    if (t.finish === 'error') g.errors++;
    g.seconds += t.timings.total_ms / 1000;
    if (!t.success && g.why === undefined) g.why = t.finish === 'error' ? (t.error ?? 'the episode failed') : failedChecks(t);
    by.set(t.task_id, g);
  }
  return [...by.values()];
}

function failedChecks(t: Trajectory): string {
  const failed = t.checks.filter((c) => c.score < 1).map((c) => `${c.kind}: ${c.detail ?? `score ${c.score}`}`);
  return `${t.finish === 'max_turns' ? 'ran out of turns; ' : ''}failed checks: ${failed.join('; ') || 'none (the reward said no)'}`;
}

/** The gate's per-task outcomes from `bench --tasks`' per-task statistics. */
export function gateFromStats(
  perTask: { task: string; runs: number; successes: number; failed_episodes: number; task_errors?: number; mean_episode_ms: number }[],
): GateTask[] {
  return perTask.map((s) => {
    const errors = s.failed_episodes + (s.task_errors ?? 0);
    return {
      task: s.task,
      suite: s.task.split('-')[0]!,
      runs: s.runs,
      successes: s.successes,
      errors,
      seconds: (s.mean_episode_ms * s.runs) / 1000,
      ...(s.successes < s.runs
        ? { why: `${s.runs - s.successes} of ${s.runs} episodes did not succeed (${errors} failed to run); bench.json's agent.failures has the causes` }
        : {}),
    };
  });
}

const xml = (s: string) =>
  s
    .replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!)
    .replace(/[^\t\n\r\u{20}-\u{D7FF}\u{E000}-\u{FFFD}\u{10000}-\u{10FFFF}]/gu, ''); // characters XML 1.0 cannot hold
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** JUnit XML (the common Surefire/Jenkins shape): a testsuite per suite, a testcase per task. */
export function junitXml(name: string, tasks: GateTask[], threshold = 1): string {
  const suites = new Map<string, GateTask[]>();
  for (const t of tasks) suites.set(t.suite, [...(suites.get(t.suite) ?? []), t]);
  const outcome = (t: GateTask) => (t.errors === t.runs ? 'error' : t.successes / t.runs < threshold ? 'failure' : 'pass');
  const count = (ts: GateTask[], o: string) => ts.filter((t) => outcome(t) === o).length;
  const secs = (ts: GateTask[]) => ts.reduce((s, t) => s + t.seconds, 0).toFixed(3);
  const lines = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="${xml(name)}" tests="${tasks.length}" failures="${count(tasks, 'failure')}" errors="${count(tasks, 'error')}" time="${secs(tasks)}">`,
  ];
  for (const [suite, ts] of suites) {
    lines.push(`  <testsuite name="${xml(suite)}" tests="${ts.length}" failures="${count(ts, 'failure')}" errors="${count(ts, 'error')}" time="${secs(ts)}">`);
    for (const t of ts) {
      const head = `  <testcase classname="${xml(`mcp-gym.${suite}`)}" name="${xml(t.task)}" time="${t.seconds.toFixed(3)}"`;
      const o = outcome(t);
      const summary = `${t.successes} of ${t.runs} episodes succeeded (${pct(t.successes / t.runs)}; threshold ${pct(threshold)})`;
      if (o === 'pass') lines.push(`  ${head}/>`);
      else {
        const tag = o === 'error' ? 'error' : 'failure';
        lines.push(
          `  ${head}>`,
          `      <${tag} message="${xml(summary)}" type="${o === 'error' ? 'episode_error' : 'below_threshold'}">${xml(t.why ?? '')}</${tag}>`,
          '    </testcase>',
        );
      }
    }
    lines.push('  </testsuite>');
  }
  lines.push('</testsuites>', '');
  return lines.join('\n');
}

/** Writes the JUnit file (its directory made). */
export function writeJunit(file: string, name: string, tasks: GateTask[], threshold = 1): void {
  mkdirSync(dirname(file) || '.', { recursive: true });
  writeFileSync(file, junitXml(name, tasks, threshold));
}

/** Throws BelowThreshold (exit 6) when `success` is below `threshold`. */
export function checkThreshold(what: string, success: number, ci95: [number, number], threshold: number | undefined): void {
  if (threshold === undefined || success >= threshold) return;
  throw new BelowThreshold(`${what}: success ${pct(success)} [${pct(ci95[0])}, ${pct(ci95[1])}] is below --fail-under ${threshold} (${pct(threshold)})`);
}
