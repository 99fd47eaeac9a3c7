/**
 * `mcp-gym eval`'s statistics and report: K episodes of each task, and over the tasks pass@1,
 * pass@k (the unbiased estimator), pass^k, the mean reward and its parts, turns, tool calls,
 * tool errors by kind and by tool, and the tokens used, each with a 95% interval.
 *
 * Intervals. Episodes of one task are not independent draws (a hard task fails all K), so every
 * interval is taken over tasks (the one evaluator, lib/evaluator.ts; docs/evaluation.md): a
 * figure is the mean of its per-task values x_1..x_T; a rate's interval is the cluster-robust
 * Wilson interval (never [0, 0] or [1, 1]), any other figure's mean ± t·s/√T (the point itself
 * with one task, marked `tasks` 1 in the JSON).
 */
import { esc, overTasks, type Estimate } from '../../lib/index.ts';
import { failureCauses, type FailureCause, type Task, type Trajectory } from '../env/index.ts';
import { fmt } from './report-format.ts';
import { renderFeedbackHtml } from './report-html.ts';
import { taskStats, type TaskAgentStats } from './agent.ts';
import { toolFeedback, type Feedback } from './feedback.ts';

export { overTasks, type Estimate };

export interface EvalTaskRow extends TaskAgentStats {
  difficulty: number;
  suite: string;
  mean_reward: number;
  tokens: { prompt: number; completion: number; policy: number };
}

export interface EvalReport {
  policy: string;
  k: number;
  tasks: number;
  episodes: number;
  pass_at_1: Estimate;
  pass_at_k: Estimate;
  pass_hat_k: Estimate;
  /** pass@j and pass^j for j = 1..K, means over tasks. */
  pass_at: Record<string, number>;
  pass_hat: Record<string, number>;
  mean_reward: Estimate;
  /** Mean of each reward part over the scored episodes, with its interval over tasks. */
  reward_parts: Record<string, Estimate>;
  turns: Estimate;
  tool_calls: Estimate;
  tool_errors: { total: number; rate: number; by_kind: Record<string, number>; by_tool: Record<string, { calls: number; errors: number }> };
  /** Tokens over the run: billed by the provider (API policies) and sampled by the policy. */
  tokens: { prompt: number; completion: number; policy: number; per_episode: Estimate };
  /** Turns whose tokens the server re-rendered differently (not trainable). */
  token_drift_turns: number;
  stop_reasons: Record<string, number>;
  /** By suite (the first part of a task's family, else of its id): tasks, pass@1, pass@k, pass^k, mean reward. */
  by_suite: Record<string, { tasks: number; pass_at_1: Estimate; pass_at_k: Estimate; pass_hat_k: Estimate; mean_reward: Estimate }>;
  failed_episodes: number;
  task_errors: number;
  failures: FailureCause[];
  /** The tool-surface hashes the episodes saw, by server alias (src/tools/surface.ts); two or more: the server changed during the evaluation. */
  tool_surface: Record<string, string[]>;
  seconds: number;
  per_task: EvalTaskRow[];
  /** Feedback for server authors: per tool of each server, calls, argument errors by field, errors, empty results, time (src/bench/feedback.ts). */
  feedback: Feedback;
}

function suiteOf(t: Task): string {
  return t.family ?? t.id.split('-')[0]!;
}

/** The suite a task belongs to, as `by_suite` groups it: its family's first part, else its id's prefix. */
export function suiteName(t: Task): string {
  return suiteOf(t).split('.')[0]!;
}

/** The report of an evaluation's trajectories (K per task, resumed ones included). */
export function evalReport(policy: string, k: number, tasks: Task[], trajectories: Trajectory[], seconds: number): EvalReport {
  const byTask = new Map<string, Trajectory[]>();
  for (const t of trajectories) {
    const list = byTask.get(t.task_id) ?? [];
    list.push(t);
    byTask.set(t.task_id, list);
  }
  const rows: EvalTaskRow[] = [];
  for (const task of tasks) {
    const ts = byTask.get(task.id);
    if (!ts?.length) continue;
    const scored = ts.filter((t) => t.finish !== 'error');
    const tokens = { prompt: 0, completion: 0, policy: 0 };
    for (const t of ts) {
      tokens.policy += t.metrics.policy_tokens;
      for (const turn of t.turns) {
        tokens.prompt += turn.usage?.prompt_tokens ?? 0;
        tokens.completion += turn.usage?.completion_tokens ?? 0;
      }
    }
    rows.push({
      ...taskStats(task.id, ts),
      difficulty: task.difficulty,
      suite: suiteOf(task),
      mean_reward: scored.length ? scored.reduce((s, t) => s + t.reward, 0) / scored.length : 0,
      tokens,
    });
  }
  const K = k;
  const serversOf = new Map(tasks.map((t) => [t.id, Object.keys(t.servers ?? {})]));
  const at = (j: number) => rows.filter((r) => r.runs >= j);
  const passAt: Record<string, number> = {};
  const passHat: Record<string, number> = {};
  for (let j = 1; j <= K; j++) {
    const ok = at(j);
    passAt[String(j)] = ok.length ? ok.reduce((s, r) => s + r.pass_at[j - 1]!, 0) / ok.length : 0;
    passHat[String(j)] = ok.length ? ok.reduce((s, r) => s + r.pass_hat[j - 1]!, 0) / ok.length : 0;
  }
  // Reward parts: per task, the mean over its scored episodes.
  const partNames = new Set<string>();
  for (const t of trajectories) if (t.finish !== 'error') for (const p of Object.keys(t.reward_parts)) partNames.add(p);
  const reward_parts: Record<string, Estimate> = {};
  for (const p of [...partNames].sort()) {
    const values: number[] = [];
    for (const r of rows) {
      const scored = (byTask.get(r.task) ?? []).filter((t) => t.finish !== 'error');
      if (scored.length) values.push(scored.reduce((s, t) => s + (t.reward_parts[p] ?? 0), 0) / scored.length);
    }
    reward_parts[p] = overTasks(values);
  }
  const by_kind: Record<string, number> = {};
  const by_tool: Record<string, { calls: number; errors: number }> = {};
  const stop_reasons: Record<string, number> = {};
  let drift = 0;
  let calls = 0;
  let errors = 0;
  for (const t of trajectories) {
    for (const turn of t.turns) {
      if (turn.stop_reason) stop_reasons[turn.stop_reason] = (stop_reasons[turn.stop_reason] ?? 0) + 1;
      if (turn.token_drift) drift++;
      for (const r of turn.tool_results) {
        const tool = r.tool ?? r.name;
        const e = (by_tool[tool] ??= { calls: 0, errors: 0 });
        e.calls++;
        calls++;
        if (r.isError) {
          e.errors++;
          errors++;
          const kind = r.errorKind ?? 'tool_error';
          by_kind[kind] = (by_kind[kind] ?? 0) + 1;
        }
      }
    }
  }
  const sum = (f: (r: EvalTaskRow) => number) => rows.reduce((s, r) => s + f(r), 0);
  const by_suite: EvalReport['by_suite'] = {};
  for (const name of [...new Set(rows.map((r) => r.suite.split('.')[0]!))].sort()) {
    const of = rows.filter((r) => r.suite.split('.')[0] === name);
    const full = of.filter((r) => r.runs >= K);
    by_suite[name] = {
      tasks: of.length,
      pass_at_1: overTasks(
        of.map((r) => r.pass_at[0] ?? 0),
        true,
        of.reduce((n, r) => n + r.runs, 0),
      ),
      pass_at_k: overTasks(
        full.map((r) => r.pass_at[K - 1]!),
        true,
      ),
      pass_hat_k: overTasks(
        full.map((r) => r.pass_hat[K - 1]!),
        true,
      ),
      mean_reward: overTasks(of.map((r) => r.mean_reward)),
    };
  }
  return {
    policy,
    k: K,
    tasks: rows.length,
    episodes: trajectories.length,
    pass_at_1: overTasks(
      rows.map((r) => r.pass_at[0] ?? 0),
      true,
      sum((r) => r.runs),
    ),
    pass_at_k: overTasks(
      rows.filter((r) => r.runs >= K).map((r) => r.pass_at[K - 1]!),
      true,
    ),
    pass_hat_k: overTasks(
      rows.filter((r) => r.runs >= K).map((r) => r.pass_hat[K - 1]!),
      true,
    ),
    pass_at: passAt,
    pass_hat: passHat,
    mean_reward: overTasks(rows.map((r) => r.mean_reward)),
    reward_parts,
    turns: overTasks(rows.map((r) => r.mean_turns)),
    tool_calls: overTasks(rows.map((r) => r.mean_tool_calls)),
    tool_errors: { total: errors, rate: calls ? errors / calls : 0, by_kind, by_tool },
    tokens: {
      prompt: sum((r) => r.tokens.prompt),
      completion: sum((r) => r.tokens.completion),
      policy: sum((r) => r.tokens.policy),
      per_episode: overTasks(rows.map((r) => (r.tokens.prompt + r.tokens.completion || r.tokens.policy) / r.runs)),
    },
    token_drift_turns: drift,
    stop_reasons,
    by_suite,
    failed_episodes: sum((r) => r.failed_episodes),
    task_errors: sum((r) => r.task_errors),
    failures: failureCauses(trajectories),
    tool_surface: surfaceHashes(trajectories),
    seconds,
    per_task: rows,
    feedback: toolFeedback(trajectories, { serversOf: (id) => serversOf.get(id) }),
  };
}

/** The distinct tool-surface hashes of each server alias over the trajectories, in order of first sight. */
function surfaceHashes(trajectories: Trajectory[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const t of trajectories) {
    for (const [alias, hash] of Object.entries(t.tool_surface ?? {})) {
      const seen = (out[alias] ??= []);
      if (!seen.includes(hash)) seen.push(hash);
    }
  }
  return Object.fromEntries(
    Object.keys(out)
      .sort()
      .map((k) => [k, out[k]!]),
  );
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const ci = (e: Estimate, rate: boolean) =>
  rate ? `${pct(e.mean)} [${pct(e.ci95[0])}, ${pct(e.ci95[1])}]` : `${fmt(e.mean)} [${fmt(e.ci95[0])}, ${fmt(e.ci95[1])}]`;

/** The headline figures as rows of a two-column table. */
export function evalRows(r: EvalReport): [string, string][] {
  const K = r.k;
  const rows: [string, string][] = [
    ['tasks x k', `${r.tasks} x ${K} = ${r.episodes} episodes`],
    ['pass@1', ci(r.pass_at_1, true)],
    [`pass@${K}`, ci(r.pass_at_k, true)],
    [`pass^${K}`, ci(r.pass_hat_k, true)],
    ['mean reward', ci(r.mean_reward, false)],
    ...Object.entries(r.reward_parts).map(([k, v]) => [`  ${k}`, ci(v, false)] as [string, string]),
    ['turns per episode', ci(r.turns, false)],
    ['tool calls per episode', ci(r.tool_calls, false)],
    [
      'tool errors',
      `${r.tool_errors.total} (${pct(r.tool_errors.rate)} of calls)${
        Object.keys(r.tool_errors.by_kind).length
          ? ': ' +
            Object.entries(r.tool_errors.by_kind)
              .map(([k, v]) => `${k} ${v}`)
              .join(', ')
          : ''
      }`,
    ],
    [
      'tokens',
      `${r.tokens.prompt} prompt + ${r.tokens.completion} completion (billed); ${r.tokens.policy} sampled; per episode ${ci(r.tokens.per_episode, false)}`,
    ],
    ['failed episodes', String(r.failed_episodes)],
    ['task errors', String(r.task_errors)],
  ];
  const surfaces = Object.entries(r.tool_surface ?? {});
  if (surfaces.length) rows.push(['tool surface', surfaces.map(([alias, hashes]) => `${alias} ${hashes.map((h) => h.slice(0, 12)).join(' / ')}`).join(', ')]);
  if (r.token_drift_turns) rows.push(['token drift', `${r.token_drift_turns} turns re-tokenised by the server (not trainable)`]);
  if (Object.keys(r.stop_reasons).length)
    rows.push([
      'stop reasons',
      Object.entries(r.stop_reasons)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
    ]);
  const suites = Object.entries(r.by_suite);
  if (suites.length > 1) {
    for (const [name, x] of suites)
      rows.push([
        `${name} (${x.tasks} tasks)`,
        `pass@1 ${ci(x.pass_at_1, true)}, pass@${K} ${ci(x.pass_at_k, true)}, pass^${K} ${ci(x.pass_hat_k, true)}, reward ${ci(x.mean_reward, false)}`,
      ]);
  }
  return rows;
}

function table(rows: (string | number)[][], head = true): string {
  const cell = (c: string | number, tag: string) => `<${tag}${typeof c === 'number' ? ' class="n"' : ''}>${esc(typeof c === 'number' ? fmt(c) : c)}</${tag}>`;
  const [h, ...body] = head ? rows : [undefined, ...rows];
  return `<table>${h ? `<thead><tr>${h.map((c) => cell(c, 'th')).join('')}</tr></thead>` : ''}<tbody>${body.map((r) => `<tr>${r!.map((c) => cell(c, 'td')).join('')}</tr>`).join('')}</tbody></table>`;
}

/** One trajectory: its messages, tool calls with their results (errors marked), checks, reward parts. */
export function trajectoryHtml(t: Trajectory): string {
  const results = new Map(t.turns.flatMap((turn) => turn.tool_results.map((r) => [r.id, r] as const)));
  const msgs = t.messages
    .map((m) => {
      if (m.role === 'assistant' && m.tool_calls?.length) {
        const calls = m.tool_calls.map((c) => `<div class="call">→ <b>${esc(c.function.name)}</b> <code>${esc(c.function.arguments)}</code></div>`).join('');
        return `<div class="msg assistant">${m.content ? `<div>${esc(m.content)}</div>` : ''}${calls}</div>`;
      }
      if (m.role === 'tool') {
        const r = results.get(m.tool_call_id ?? '');
        const bad = r?.isError ? ` err" title="${esc(r.errorKind ?? 'error')}` : '';
        return `<div class="msg tool${bad}">← ${r?.isError ? `<b>${esc(r.errorKind ?? 'error')}</b> ` : ''}<code>${esc(m.content.slice(0, 1000))}</code></div>`;
      }
      return `<div class="msg ${m.role}"><span class="role">${m.role}</span> ${esc(m.content.slice(0, 2000))}</div>`;
    })
    .join('');
  const checks = t.checks.map((c) => [c.kind, c.score, c.weight, c.detail.slice(0, 300)] as (string | number)[]);
  const parts = Object.entries(t.reward_parts)
    .map(([k, v]) => `${k} ${fmt(v)}`)
    .join(', ');
  const head = `${esc(t.id)}: ${t.finish === 'error' ? `<b>failed</b> (${esc((t.error ?? '').split('\n')[0]!.slice(0, 200))})` : t.success ? 'solved' : 'not solved'}, reward ${fmt(t.reward)}${parts ? ` (${esc(parts)})` : ''}, ${t.metrics.turns} turns, ${t.metrics.tool_calls} tool calls`;
  return `<details class="traj ${t.success ? 'ok' : 'fail'}"><summary>${head}</summary>${msgs}${checks.length ? table([['check', 'score', 'weight', 'detail'], ...checks]) : ''}${t.answer !== null ? `<p>answer: <code>${esc(t.answer.slice(0, 500))}</code></p>` : ''}</details>`;
}

/** The evaluation as one self-contained HTML page: headline figures, per-task table, failures with their trajectories. */
export function renderEvalHtml(r: EvalReport, trajectories: Trajectory[], o: { title?: string; maxFailures?: number } = {}): string {
  const K = r.k;
  const title = o.title ?? `mcp-gym eval: ${r.policy}`;
  const perTask: (string | number)[][] = [
    ['task', 'suite', 'difficulty', 'runs', 'successes', 'pass@1', `pass@${K}`, `pass^${K}`, 'mean reward', 'turns', 'tool calls', 'tool errors', 'failed'],
  ];
  for (const t of r.per_task)
    perTask.push([
      t.task,
      t.suite,
      t.difficulty,
      t.runs,
      t.successes,
      t.pass_at[0] ?? 0,
      t.pass_at[K - 1] ?? 0,
      t.pass_hat[K - 1] ?? 0,
      t.mean_reward,
      t.mean_turns,
      t.mean_tool_calls,
      t.tool_errors,
      t.failed_episodes + t.task_errors,
    ]);
  const byTool: (string | number)[][] = [
    ['tool', 'calls', 'errors'],
    ...Object.entries(r.tool_errors.by_tool).map(([k, v]) => [k, v.calls, v.errors] as (string | number)[]),
  ];
  const causes: (string | number)[][] = [
    ['episodes', 'kind', 'cause', 'example'],
    ...r.failures.map((f) => [f.episodes, f.kind, f.cause, f.example] as (string | number)[]),
  ];
  const unsolved = trajectories.filter((t) => !t.success).slice(0, o.maxFailures ?? 100);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.traj{margin:6px 0;padding:4px 8px;border-left:3px solid #c33}.traj.ok{border-color:#3a3}
.msg{margin:3px 0 3px 12px;white-space:pre-wrap}.msg .role{color:#777;font-size:12px}.msg.tool{color:#345}.msg.err{color:#b00}
.call{color:#04a}code{background:#f4f4f4;padding:1px 4px}
</style></head><body>
<h1>${esc(title)}</h1>
<p>Generated ${new Date().toISOString()}; ${r.tasks} tasks x ${K} samples; ${fmt(r.seconds)} s. Intervals are 95%, over tasks.</p>
<section><h2>Summary</h2>${table(evalRows(r), false)}</section>
<section><h2>pass@k and pass^k</h2>${table([
    ['k', ...Object.keys(r.pass_at)],
    ['pass@k', ...Object.values(r.pass_at)],
    ['pass^k', ...Object.values(r.pass_hat)],
  ])}</section>
<section><h2>Tasks</h2>${table(perTask)}</section>
<section><h2>Tool calls by tool</h2>${table(byTool)}</section>
${r.feedback ? renderFeedbackHtml(r.feedback) : ''}
${r.failures.length ? `<section><h2>Failed episodes by cause</h2>${table(causes)}</section>` : ''}
<section><h2>Episodes not solved (${unsolved.length}${unsolved.length < trajectories.filter((t) => !t.success).length ? ' shown' : ''})</h2>${unsolved.map(trajectoryHtml).join('\n') || '<p>None: every episode was solved.</p>'}</section>
</body></html>
`;
}
