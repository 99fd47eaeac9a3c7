/**
 * The multi-turn environment: it connects the servers a task needs, gives each episode its own
 * fresh server state, lets a policy act until it answers or runs out of turns, executes its tool
 * calls over MCP, checks the outcome and scores it. Nothing a policy or a server does can crash
 * an episode batch: every failure becomes a message the agent reads, or an episode marked error.
 * A failed episode scores 0 with no reward parts, and its `error` says why (first line: the cause);
 * one that failed because the task itself is broken (a check or setup call that cannot run) is
 * marked `task_error`, so that a task author's bug is not counted as the agent's failure.
 */
import { randomUUID } from 'node:crypto';
import { bundledServer, EPISODE_META_KEY, serverFactory, type Backend } from '../../servers/index.ts';
import { CLI_PATH } from '../paths.ts';
import { resultText, ToolClient, type ConnectOptions, type ResourceInfo, type ServerSpec, type ToolInfo, type ToolResult } from '../tools/index.ts';
import { toolSurface, type ServerSurface, type ToolSurfaces } from '../tools/index.ts';
import { FixtureError } from '../tools/index.ts';
import { runChecks, solved, stateCallFault, taskProblem } from './checks.ts';
import { RewardConfigSchema, resolveReward, type RewardConfig, type RewardConfigInput, type RewardFn, type RewardResult } from './rewards.ts';
import { openingMessages, type ServerRef, type Task, type TaskCall } from './task.ts';
import { EpisodeFaults, type FaultMark, type FaultOptions } from './faults.ts';
import { LIVE_TAPE, openTape, type ToolRecording, type ToolTape } from './recording.ts';
import type { AgentTool, ChatMessage, CheckResult, ErrorKind, Policy, PolicyAction, ToolStep, Trajectory, Turn } from './types.ts';

export interface EnvironmentOptions {
  /** Timeout of each tool call, ms. Default 10,000. */
  callTimeoutMs?: number;
  /** How bundled servers run: in this process (default, fastest) or as stdio processes. */
  bundled?: 'inprocess' | 'stdio';
  /** Options for bundled servers' backends (e.g. `delayMs` to slow every call, `dataDir`). */
  serverOptions?: { delayMs?: number; dataDir?: string };
  connect?: ConnectOptions;
  /** The weights of the built-in rewards; `total` names the reward when `reward` is not given. */
  rewards?: RewardConfigInput;
  /** The reward: a registered name (art, rlvr, composer, verifier, or registerReward's) or a function. Default: `rewards.total`, else art. */
  reward?: string | RewardFn;
  /** Characters of a tool result shown to the agent. Default 4,000. */
  maxResultChars?: number;
  /**
   * Told once per server about a setup that can give wrong results: episodes running at once
   * against a shared HTTP server that does not declare per-episode state (the `mcp-gym/episode`
   * capability). Default: `process.emitWarning`.
   */
  onWarning?: (message: string) => void;
  /** Faults injected into the agent's tool calls (src/env/faults.ts), never into setup calls or state checks. */
  faults?: FaultOptions;
  /** Appends every tool list and call (with its result and latency) of every episode to this JSONL file (src/env/recording.ts). */
  record?: string;
  /** Serves tool lists and results from this recording (a file, or one loaded), starting no server; a call it lacks fails the episode. */
  replay?: string | ToolRecording;
}

export interface EpisodeOptions {
  groupId?: string;
  sample?: number;
  runId?: string;
  signal?: AbortSignal;
}

interface Connected {
  client: ToolClient;
  /** For bundled in-process servers: releases an episode's state. */
  backend?: Backend<unknown>;
  /** A server connected for one episode only (closed after it). */
  perEpisode: boolean;
  /** A shared HTTP server that does not declare per-episode state: its episodes in flight, and whether it was warned about. */
  unisolated?: { url: string; inFlight: number; warned: boolean };
}

/** Whether a server declares that it gives each episode its own state (`experimental: {"mcp-gym/episode": {}}`). */
export function declaresEpisodeIsolation(client: ToolClient): boolean {
  const experimental = client.serverCapabilities?.experimental;
  return experimental !== undefined && experimental !== null && typeof experimental === 'object' && experimental[EPISODE_META_KEY] !== undefined;
}

/** The names the agent sees: a tool's own name, or `server_tool` where two servers share a name. */
export function agentTools(listed: { server: string; tools: { name: string; description?: string; inputSchema: Record<string, unknown> }[] }[]): AgentTool[] {
  const count = new Map<string, number>();
  for (const s of listed) for (const t of s.tools) count.set(t.name, (count.get(t.name) ?? 0) + 1);
  return listed.flatMap((s) =>
    s.tools.map((t) => ({
      name: (count.get(t.name) ?? 0) > 1 ? `${s.server}_${t.name}` : t.name,
      description: t.description ?? '',
      inputSchema: t.inputSchema,
      server: s.server,
      tool: t.name,
    })),
  );
}

function refKey(ref: ServerRef): string {
  return typeof ref === 'string' ? `bundled:${ref}` : JSON.stringify(ref);
}

export class Environment {
  readonly rewards: RewardConfig;
  /** The reward every episode is scored with, and its name (recorded in each trajectory). */
  readonly reward: { name: string; fn: RewardFn };
  private readonly shared = new Map<string, Promise<Connected>>();
  /** Each tools/list's surface (a client caches its list: computed once per list). */
  private readonly surfaces = new WeakMap<ToolInfo[], ServerSurface>();
  private readonly options: EnvironmentOptions;
  private closed = false;
  /** Records or replays the tool traffic (`record`, `replay`). */
  private readonly tape?: ToolTape;

  constructor(options: EnvironmentOptions = {}) {
    this.options = options;
    this.rewards = RewardConfigSchema.parse(options.rewards ?? {});
    this.reward = resolveReward(options.reward ?? this.rewards.total);
    this.tape = openTape(options);
  }

  private async connect(ref: ServerRef): Promise<Connected> {
    const connectOptions = { callTimeoutMs: this.options.callTimeoutMs ?? 10_000, ...this.options.connect };
    if (typeof ref === 'string') {
      const def = bundledServer(ref);
      if ((this.options.bundled ?? 'inprocess') === 'inprocess') {
        const { factory, backend } = serverFactory(def, this.options.serverOptions ?? {});
        const client = await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() }, connectOptions);
        return { client, backend: backend as Backend<unknown>, perEpisode: false };
      }
      const extra: string[] = [];
      if (this.options.serverOptions?.delayMs) extra.push('--delay-ms', String(this.options.serverOptions.delayMs));
      if (this.options.serverOptions?.dataDir) extra.push('--data-dir', this.options.serverOptions.dataDir);
      const client = await ToolClient.connect({ transport: 'stdio', command: process.execPath, args: [CLI_PATH, 'serve', ref, ...extra] }, connectOptions);
      return { client, perEpisode: false };
    }
    // A third-party stdio server gets a process per episode: a fresh state whatever it keeps.
    const client = await ToolClient.connect(ref as ServerSpec, connectOptions);
    if (ref.transport === 'http' && !declaresEpisodeIsolation(client)) {
      return { client, perEpisode: false, unisolated: { url: ref.url, inFlight: 0, warned: false } };
    }
    return { client, perEpisode: ref.transport === 'stdio' };
  }

  private async server(ref: ServerRef): Promise<Connected> {
    if (this.closed) throw new Error('The environment is closed');
    if (typeof ref !== 'string' && ref.transport === 'stdio') return this.connect(ref);
    const key = refKey(ref);
    let p = this.shared.get(key);
    if (!p) {
      p = this.connect(ref);
      this.shared.set(key, p);
      p.catch(() => this.shared.delete(key));
    }
    return p;
  }

  /** Runs one episode of `task` with `policy`; never throws for what the policy or servers do. */
  async runEpisode(task: Task, policy: Policy, options: EpisodeOptions = {}): Promise<Trajectory> {
    const startedAt = new Date();
    const t0 = performance.now();
    const episodeId = `${options.runId ?? 'run'}:${task.id}:${options.sample ?? 0}:${randomUUID().slice(0, 8)}`;
    // The same in every run (no random part): what a seeded policy may derive its randomness from.
    const episodeKey = `${options.groupId ?? task.id}#${options.sample ?? 0}`;
    const messages: ChatMessage[] = openingMessages(task).map((m) => ({ ...m }));
    const turns: Turn[] = [];
    const calls: { server?: string; tool?: string; arguments: unknown; isError: boolean }[] = [];
    let answer: string | null = null;
    let finish: Trajectory['finish'] = 'max_turns';
    let error: string | undefined;
    let taskError = false;
    let errorKind: ErrorKind | undefined;
    let policyMs = 0;
    let toolMs = 0;
    let tools: AgentTool[] = [];
    let surface: Record<string, string> | undefined;
    const servers = new Map<string, Connected>();
    const entered = new Set<Connected>();
    const timeout = this.options.callTimeoutMs ?? 10_000;
    const maxChars = this.options.maxResultChars ?? 4000;
    // Faults sit between the agent and its servers only: setup calls and state checks go through callOn directly.
    const faults = this.options.faults ? new EpisodeFaults(this.options.faults, episodeKey) : undefined;

    // Recorded, or replayed without any server (src/env/recording.ts).
    // An episode with faults is recorded apart from the same episode without (eval --faults runs both):
    // its sabotaged calls never reached the server, so its tape cannot serve the other.
    const tape = this.tape?.episode(faults ? `${episodeKey}+faults` : episodeKey, episodeId) ?? LIVE_TAPE;

    const callOn = async (alias: string, tool: string, args: Record<string, unknown>): Promise<ToolResult> => {
      const s = servers.get(alias);
      if (!s && !(tape.replaying && Object.hasOwn(task.servers, alias))) return { content: [{ type: 'text', text: `No server '${alias}' in this task` }], isError: true, ms: 0, errorKind: 'unknown_tool' };
      return tape.call(alias, tool, args, () => s!.client.call({ name: tool, arguments: args }, { timeoutMs: timeout, episode: episodeId, signal: options.signal }));
    };
    const stateCall = (c: TaskCall) => callOn(c.server, c.tool, c.arguments as Record<string, unknown>);

    try {
      // Servers and their tools.
      const listed: { server: string; tools: ToolInfo[] }[] = [];
      for (const [alias, ref] of Object.entries(task.servers)) {
        if (tape.replaying) {
          listed.push({ server: alias, tools: await tape.listTools(alias, () => Promise.reject(new Error('replaying'))) });
          continue;
        }
        try {
          const s = await this.server(ref);
          servers.set(alias, s);
          if (!entered.has(s)) {
            entered.add(s);
            this.enter(s);
          }
          listed.push({ server: alias, tools: await tape.listTools(alias, () => s.client.listTools()) });
        } catch (err) {
          // A fixture that cannot be made (its copy gone since the task was read) is the task's fault.
          if (err instanceof FixtureError) throw new TaskError(`servers.${alias}.${err.field}: ${err.reason}`);
          throw new StartError(`a tool server failed: ${(err as Error).message}`);
        }
      }
      tools = agentTools(listed);
      if (faults) tools = faults.withDistractors(tools, listed);
      surface = Object.fromEntries(listed.map((l) => [l.server, this.surfaceOf(l.tools).hash]));
      const byName = new Map(tools.map((t) => [t.name, t]));

      // A task that names tools its servers do not have, or paths their results cannot have, is broken.
      const problem = taskProblem(task, new Map(listed.map((l) => [l.server, l.tools])));
      if (problem) throw new TaskError(problem);

      // The starting state.
      for (const [i, c] of task.setup.entries()) {
        const r = await stateCall(c);
        if (r.isError) {
          const message = `setup call ${i} (${c.server}.${c.tool}) failed: ${resultText(r).slice(0, 300)}`;
          // The setup is the task's own: a call its server refuses is the task's fault, a server that fails is not.
          throw stateCallFault(r.errorKind) === 'server' ? new ServerError(message) : new TaskError(message);
        }
      }

      let newMessages: ChatMessage[] = [...messages];
      for (let turn = 0; turn < task.max_turns; turn++) {
        if (options.signal?.aborted) throw new Error('the episode was cancelled');
        const p0 = performance.now();
        const versionBefore = policy.version; // the weights this turn is sampled with, unless the action says
        let action: PolicyAction;
        try {
          action = await policy.act({ task, messages: [...messages], tools, turn, newMessages, episodeId, episodeKey }, options.signal);
        } catch (err) {
          throw new PolicyError(`the policy failed: ${(err as Error).message}`);
        }
        const pms = performance.now() - p0;
        policyMs += pms;
        newMessages = [];
        const proposed = action.toolCalls ?? [];
        const record: Turn = {
          action: { content: action.content, tool_calls: [] },
          tool_results: [],
          step_reward: 0,
          policy_ms: pms,
          ...(action.tokens ? { tokens: action.tokens } : {}),
          ...(action.logprobs ? { logprobs: action.logprobs } : {}),
          ...(action.envTokens ? { env_tokens: action.envTokens } : {}),
          ...(action.parseError ? { parse_error: action.parseError } : {}),
          ...(action.callParse ? { call_parse: action.callParse } : {}),
          ...(action.text !== undefined ? { text: action.text } : {}),
          ...(action.usage ? { usage: action.usage } : {}),
          ...(action.stopReason ? { stop_reason: action.stopReason } : {}),
          ...(action.tokenDrift ? { token_drift: action.tokenDrift } : {}),
          ...((action.policyVersion ?? versionBefore) !== undefined ? { policy_version: action.policyVersion ?? versionBefore } : {}),
        };
        turns.push(record);

        if (proposed.length === 0 && !action.parseError) {
          messages.push({ role: 'assistant', content: action.content });
          answer = action.content;
          finish = 'answer';
          break;
        }

        const withIds = proposed.map((c, i) => ({ ...c, id: c.id ?? `call_${turn}_${i}` }));
        messages.push({
          role: 'assistant',
          content: action.content,
          ...(withIds.length
            ? { tool_calls: withIds.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) } })) }
            : {}),
        });
        if (action.parseError) {
          const m: ChatMessage = { role: 'tool', tool_call_id: `invalid_${turn}`, name: 'error', content: `Error: ${action.parseError}` };
          messages.push(m);
          newMessages.push(m);
        }
        for (const c of withIds) {
          const target = byName.get(c.name);
          let args: Record<string, unknown> | undefined;
          let result: ToolResult;
          let fault: FaultMark | undefined;
          if (typeof c.arguments === 'string') {
            try {
              const parsed: unknown = c.arguments.trim() === '' ? {} : JSON.parse(c.arguments);
              if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('expected a JSON object');
              args = parsed as Record<string, unknown>;
            } catch (err) {
              args = undefined;
              result = { content: [{ type: 'text', text: `Invalid arguments for tool '${c.name}': not a JSON object (${(err as Error).message})` }], isError: true, ms: 0, errorKind: 'invalid_arguments' };
            }
          } else {
            args = c.arguments;
          }
          if (!target) {
            result = { content: [{ type: 'text', text: `Unknown tool '${c.name}'. Available tools: ${tools.map((t) => t.name).join(', ')}` }], isError: true, ms: 0, errorKind: 'unknown_tool' };
          } else if (args !== undefined) {
            const a = args;
            if (faults) ({ result, fault } = await faults.call(target, a, () => callOn(target.server, target.tool, a), { timeoutMs: timeout, signal: options.signal }));
            else result = await callOn(target.server, target.tool, args);
          }
          toolMs += result!.ms;
          const text = resultText(result!);
          const step: ToolStep = {
            id: c.id,
            name: c.name,
            server: target?.server,
            tool: target?.tool,
            arguments: args ?? c.arguments,
            isError: result!.isError,
            ...(result!.errorKind ? { errorKind: result!.errorKind } : {}),
            ms: result!.ms,
            text: text.length > maxChars ? text.slice(0, maxChars) + ` ...[${text.length - maxChars} more characters]` : text,
            ...(result!.structured !== undefined ? { structured: result!.structured } : {}),
            ...(fault ? { fault } : {}),
          };
          record.action.tool_calls.push({ id: c.id, name: c.name, arguments: step.arguments });
          record.tool_results.push(step);
          calls.push({ server: target?.server, tool: target?.tool, arguments: args, isError: step.isError });
          const m: ChatMessage = { role: 'tool', tool_call_id: c.id, name: c.name, content: step.text, ...(step.isError ? { is_error: true } : {}) };
          messages.push(m);
          newMessages.push(m);
        }
      }
      const crashed = turns.flatMap((t) => t.tool_results).find((s) => s.errorKind === 'crashed' || s.errorKind === 'closed');
      if (crashed) {
        finish = 'error';
        errorKind = 'server';
        error = `a tool server failed during the episode: ${crashed.text.slice(0, 200)}`;
      }
    } catch (err) {
      finish = 'error';
      taskError = err instanceof TaskError;
      errorKind = err instanceof StartError ? 'server_start' : err instanceof TaskError ? 'task' : err instanceof PolicyError ? 'policy' : err instanceof ServerError ? 'server' : 'other';
      error = err instanceof EpisodeError ? err.message : `the episode failed: ${(err as Error).message}`;
    }

    let checks: CheckResult[];
    if (finish === 'error') {
      checks = task.checks.map((c) => ({ kind: c.kind, weight: c.weight, score: 0, detail: 'not checked: the episode failed' }));
    } else {
      checks = await runChecks(task, { answer, calls }, stateCall);
      // A check that could not run says nothing about the agent: the episode failed (the task's fault, or its server's).
      const taskFault = checks.findIndex((c) => c.error === 'task');
      const broken = taskFault >= 0 ? taskFault : checks.findIndex((c) => c.error === 'server');
      if (broken >= 0) {
        const c = checks[broken]!;
        finish = 'error';
        taskError = c.error === 'task';
        errorKind = taskError ? 'task' : 'server';
        error = taskError ? `checks[${broken}] (${c.kind}) cannot run: ${c.detail}` : `a tool server failed during the checks: checks[${broken}] (${c.kind}): ${c.detail}`;
      }
    }
    // A replay that lacks a call fails the episode with that call, wherever it was made (setup, turn, check).
    if (tape.miss) {
      finish = 'error';
      taskError = false;
      errorKind = 'replay';
      error = tape.miss;
    }
    // A failed episode is scored 0, with no parts: none of them was earned or lost by the agent.
    let scored: RewardResult = { reward: 0, parts: {} };
    if (finish !== 'error') {
      try {
        scored = await this.reward.fn({ task, turns, answer, checks, solved: solved(checks), weights: this.rewards });
        if (!Number.isFinite(scored?.reward)) throw new Error(`it returned the reward ${String(scored?.reward)} (a finite number is needed)`);
      } catch (err) {
        finish = 'error';
        errorKind = 'reward';
        error = `the reward '${this.reward.name}' failed: ${(err as Error).message}`;
        scored = { reward: 0, parts: {} };
      }
    }
    turns.forEach((t, i) => (t.step_reward = scored.stepRewards?.[i] ?? 0));
    for (const s of entered) if (s.unisolated) s.unisolated.inFlight--;
    for (const s of servers.values()) {
      if (s.perEpisode) await s.client.close();
      else s.backend?.release(episodeId);
    }
    policy.endEpisode?.(episodeId);

    const steps = turns.flatMap((t) => t.tool_results);
    return {
      id: episodeId,
      ...(options.runId ? { run_id: options.runId } : {}),
      task_id: task.id,
      group_id: options.groupId ?? task.id,
      sample: options.sample ?? 0,
      split: task.split,
      difficulty: task.difficulty,
      ...(task.family ? { family: task.family } : {}),
      policy: { id: policy.id, ...(policy.version !== undefined ? { version: policy.version } : {}) },
      tools: tools.map((t) => ({ name: t.name, description: t.description, parameters: t.inputSchema, server: t.server, tool: t.tool, ...(t.distractor ? { distractor: true } : {}) })),
      ...(surface ? { tool_surface: surface } : {}),
      messages,
      turns,
      answer,
      success: finish !== 'error' && solved(checks),
      reward: scored.reward,
      reward_parts: scored.parts ?? {},
      reward_name: this.reward.name,
      checks,
      metrics: {
        turns: turns.length,
        tool_calls: steps.length,
        tool_errors: steps.filter((s) => s.isError).length,
        policy_tokens: turns.reduce((s, t) => s + (t.tokens?.length ?? 0), 0),
        ...(faults ? { injected_faults: steps.filter((s) => s.fault !== undefined).length } : {}),
      },
      timings: { started_at: startedAt.toISOString(), total_ms: performance.now() - t0, policy_ms: policyMs, tool_ms: toolMs },
      finish,
      ...(error ? { error } : {}),
      ...(finish === 'error' && taskError ? { task_error: true } : {}),
      ...(finish === 'error' && errorKind ? { error_kind: errorKind } : {}),
    };
  }

  private surfaceOf(tools: ToolInfo[]): ServerSurface {
    let s = this.surfaces.get(tools);
    if (!s) {
      s = toolSurface(tools);
      this.surfaces.set(tools, s);
    }
    return s;
  }

  /**
   * The tool surface (src/tools/surface.ts) of every server `tasks` use, by the alias they give
   * it: each distinct server listed once (a third-party stdio server is started for it, then
   * stopped). A server that cannot be reached is left out (its episodes will say why). Replaying
   * a recording starts no server: none is listed (the episodes' `tool_surface` comes from the recording).
   */
  async toolSurfaces(tasks: readonly Task[]): Promise<ToolSurfaces> {
    if (this.options.replay !== undefined) return {};
    const byRef = new Map<string, ServerSurface | undefined>();
    const out: ToolSurfaces = {};
    for (const task of tasks) {
      for (const [alias, ref] of Object.entries(task.servers)) {
        const key = refKey(ref);
        if (!byRef.has(key)) {
          let s: ServerSurface | undefined;
          try {
            s = this.surfaceOf(await this.toolsOf(ref));
          } catch {
            s = undefined;
          }
          byRef.set(key, s);
        }
        const s = byRef.get(key);
        if (!s) continue;
        // One alias for two different servers (in different tasks): the later ones as `alias#2`, ...
        let name = alias;
        for (let i = 2; out[name] && out[name]!.hash !== s.hash; i++) name = `${alias}#${i}`;
        out[name] = s;
      }
    }
    return out;
  }

  /** An episode starts on a server: warns (once) when episodes overlap on a shared HTTP server without per-episode state. */
  private enter(s: Connected): void {
    const u = s.unisolated;
    if (!u) return;
    u.inFlight++;
    if (u.inFlight < 2 || u.warned) return;
    u.warned = true;
    const message =
      `the HTTP server ${u.url} is shared by episodes running at once, and it does not declare per-episode state ` +
      `(the '${EPISODE_META_KEY}' capability): if it keeps state, each episode sees the others' changes (and those of the episodes before it), ` +
      `so correct answers can fail their checks. Make the server keep one state per '${EPISODE_META_KEY}' _meta key and declare ` +
      `capabilities.experimental['${EPISODE_META_KEY}'] (README: "A fresh state for every episode"), or give the task a stdio server (a process per episode).`;
    if (this.options.onWarning) this.options.onWarning(message);
    else process.emitWarning(message, { code: 'MCP_GYM_SHARED_SERVER' });
  }

  /** The tools a server offers (a server started for one episode is started for this and stopped). */
  toolsOf(ref: ServerRef): Promise<ToolInfo[]> {
    return this.withServer(ref, (c) => c.listTools());
  }

  /** The resources a server lists (none when it has no resources capability). */
  resourcesOf(ref: ServerRef): Promise<ResourceInfo[]> {
    return this.withServer(ref, (c) => c.listResources());
  }

  private async withServer<T>(ref: ServerRef, fn: (client: ToolClient) => Promise<T>): Promise<T> {
    const s = await this.server(ref);
    try {
      return await fn(s.client);
    } finally {
      if (s.perEpisode) await s.client.close();
    }
  }

  /**
   * This environment with other faults (src/env/faults.ts), or none: the same servers, recording
   * and reward, shared (e.g. training rollouts with faults, held-out evaluations without). Close
   * the environment it came from, not the view.
   */
  withFaults(faults: FaultOptions | undefined): Environment {
    const view = Object.create(this) as Environment;
    Object.defineProperty(view, 'options', { value: { ...this.options, faults }, enumerable: false });
    return view;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.tape?.close();
    const all = [...this.shared.values()];
    this.shared.clear();
    for (const p of all) {
      const s = await p.catch(() => undefined);
      await s?.client.close();
    }
  }
}

/** An episode's failure whose message is already its whole story. */
class EpisodeError extends Error {}
class PolicyError extends EpisodeError {}
/** A tool server could not be reached, or failed during the setup or the checks. */
class ServerError extends EpisodeError {}
/** A tool server could not be started or connected to at the episode's start. */
class StartError extends ServerError {}
/** The task itself is broken: a setup call or a check that cannot run. */
class TaskError extends EpisodeError {}
