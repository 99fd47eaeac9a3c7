/**
 * One episode, stage by stage (Environment.runEpisode composes them): open the task's servers and
 * list their tools -> run the task's setup calls -> turns (the policy acts; its tool calls are
 * executed over MCP; each answer ends a user turn: its checks run, the next follow-up is delivered,
 * user-turns.ts; a server whose tools changed is listed again before the next turn,
 * episode-tools.ts) -> the checks -> the reward -> release the servers -> the trajectory.
 * Nothing a policy or a server does escapes as an exception: every failure becomes a message the
 * agent reads, or marks the episode failed (`fail`), with its cause and kind.
 */
import { randomUUID } from 'node:crypto';
import type { Backend } from '../../servers/index.ts';
import { FixtureError, resultText, type ServerSurface, type ToolClient, type ToolInfo, type ToolResult } from '../tools/index.ts';
import { solved, stateCallFault, taskProblem } from './checks.ts';
import { EpisodeTools, parseCallArguments } from './episode-tools.ts';
import { EpisodeFaults, type FaultMark, type FaultOptions } from './faults.ts';
import { LIVE_TAPE, type ToolTape } from './recording.ts';
import { META_SERVER, META_TURNS, type ToolModeOptions } from './tool-modes.ts';
import type { RewardConfig, RewardFn, RewardResult } from './rewards.ts';
import { openingMessages, type ServerRef, type Task, type TaskCall } from './task.ts';
import type { ChatMessage, CheckResult, ErrorKind, Policy, PolicyAction, ToolStep, Trajectory, Turn } from './types.ts';
import { UserTurns, type TurnCall } from './user-turns.ts';

export interface EpisodeOptions {
  groupId?: string;
  sample?: number;
  runId?: string;
  signal?: AbortSignal;
}

/** A connected server, as the environment holds it. */
export interface Connected {
  client: ToolClient;
  /** For bundled in-process servers: releases an episode's state. */
  backend?: Backend<unknown>;
  /** A server connected for one episode only (closed after it). */
  perEpisode: boolean;
  /** A shared HTTP server that does not declare per-episode state: its episodes in flight, and whether it was warned about. */
  unisolated?: { url: string; inFlight: number; warned: boolean };
}

/** What an episode needs of its environment. */
export interface EpisodeHost {
  /** Timeout of each tool call (ms), characters of a result shown to the agent, and the faults injected. */
  timeoutMs: number;
  maxChars: number;
  faults?: FaultOptions;
  /** How the agent is shown its tools (tool-modes.ts); default all. */
  toolMode?: ToolModeOptions;
  tape?: ToolTape;
  reward: { name: string; fn: RewardFn };
  rewards: RewardConfig;
  /** The connected server of a reference (shared, or started for this episode). */
  server(ref: ServerRef): Promise<Connected>;
  /** An episode starts on a server (the environment warns about shared servers without per-episode state). */
  enter(s: Connected): void;
  surfaceOf(tools: ToolInfo[]): ServerSurface;
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

export class Episode {
  private readonly startedAt = new Date();
  private readonly t0 = performance.now();
  readonly id: string;
  /** The same in every run (no random part): what a seeded policy may derive its randomness from. */
  readonly key: string;
  private readonly messages: ChatMessage[];
  private readonly turns: Turn[] = [];
  private readonly calls: TurnCall[] = [];
  private readonly userTurns: UserTurns;
  private answer: string | null = null;
  private finish: Trajectory['finish'] = 'max_turns';
  private error?: string;
  private taskError = false;
  private errorKind?: ErrorKind;
  private policyMs = 0;
  private toolMs = 0;
  /** The checks' and the reward's milliseconds (their state calls included). */
  private scoreMs = 0;
  /** The agent's tools, each server's lists, and what the agent was shown (episode-tools.ts). */
  private readonly tools: EpisodeTools;
  private surface?: Record<string, string>;
  private readonly servers = new Map<string, Connected>();
  private readonly entered = new Set<Connected>();
  /** Faults sit between the agent and its servers only: setup calls and state checks go through callOn directly. */
  private readonly faults?: EpisodeFaults;
  private readonly tape: ReturnType<ToolTape['episode']>;
  private checks: CheckResult[] = [];
  private scored: RewardResult = { reward: 0, parts: {} };
  /** The messages the policy has not seen yet (its last turn's tool results, a follow-up). */
  private newMessages: ChatMessage[];

  constructor(
    private readonly host: EpisodeHost,
    private readonly task: Task,
    private readonly policy: Policy,
    private readonly options: EpisodeOptions,
  ) {
    this.id = `${options.runId ?? 'run'}:${task.id}:${options.sample ?? 0}:${randomUUID().slice(0, 8)}`;
    this.key = `${options.groupId ?? task.id}#${options.sample ?? 0}`;
    this.messages = openingMessages(task).map((m) => ({ ...m }));
    this.newMessages = [...this.messages];
    this.faults = host.faults ? new EpisodeFaults(host.faults, this.key) : undefined;
    this.tools = new EpisodeTools(this.faults, host.toolMode);
    this.userTurns = new UserTurns(task, host.toolMode && host.toolMode.mode !== 'all' ? META_TURNS : 0);
    // Recorded, or replayed without any server (src/env/recording.ts).
    // An episode with faults is recorded apart from the same episode without (eval --faults runs both):
    // its sabotaged calls never reached the server, so its tape cannot serve the other.
    this.tape = host.tape?.episode(this.faults ? `${this.key}+faults` : this.key, this.id) ?? LIVE_TAPE;
  }

  private callOn(alias: string, tool: string, args: Record<string, unknown>): Promise<ToolResult> {
    const s = this.servers.get(alias);
    if (!s && !(this.tape.replaying && Object.hasOwn(this.task.servers, alias)))
      return Promise.resolve({ content: [{ type: 'text', text: `No server '${alias}' in this task` }], isError: true, ms: 0, errorKind: 'unknown_tool' });
    return this.tape.call(alias, tool, args, () =>
      s!.client.call({ name: tool, arguments: args }, { timeoutMs: this.host.timeoutMs, episode: this.id, signal: this.options.signal }),
    );
  }

  private stateCall = (c: TaskCall): Promise<ToolResult> => this.callOn(c.server, c.tool, c.arguments as Record<string, unknown>);

  /** Stage 1: the task's servers, connected (or replayed), and the tools the agent sees; a task naming tools its servers lack is broken. */
  async openServers(): Promise<void> {
    /** Servers whose tools may change during the episode (they declare tools.listChanged; all, replaying). */
    const mayChange = new Set<string>();
    for (const [alias, ref] of Object.entries(this.task.servers)) {
      if (this.tape.replaying) {
        this.tools.set(alias, await this.tape.listTools(alias, () => Promise.reject(new Error('replaying'))));
        mayChange.add(alias);
        continue;
      }
      try {
        const s = await this.host.server(ref);
        this.servers.set(alias, s);
        if (!this.entered.has(s)) {
          this.entered.add(s);
          this.host.enter(s);
        }
        const version = s.client.toolsVersion;
        this.tools.set(alias, await this.tape.listTools(alias, () => s.client.listTools()), version);
        if ((s.client.serverCapabilities?.tools as { listChanged?: boolean } | undefined)?.listChanged) mayChange.add(alias);
      } catch (err) {
        // A fixture that cannot be made (its copy gone since the task was read) is the task's fault.
        if (err instanceof FixtureError) throw new TaskError(`servers.${alias}.${err.field}: ${err.reason}`);
        throw new StartError(`a tool server failed: ${(err as Error).message}`);
      }
    }
    this.tools.update();
    this.surface = Object.fromEntries([...this.tools.listed].map(([server, tools]) => [server, this.host.surfaceOf(tools).hash]));
    // A task that names tools its servers do not have, or paths their results cannot have, is broken.
    const problem = taskProblem(this.task, this.tools.listed, { mayChange });
    if (problem) throw new TaskError(problem);
  }

  /** Stage 2: the starting state, by the task's setup calls. */
  async setUp(): Promise<void> {
    await this.setupCalls(this.task.setup, 'setup');
  }

  /** Setup calls of the task's own (`label`: `setup`, `followups[k].setup`); one that fails fails the episode. */
  private async setupCalls(calls: readonly TaskCall[], label: string): Promise<void> {
    for (const [i, c] of calls.entries()) {
      const r = await this.stateCall(c);
      if (r.isError) {
        const message = `${label} call ${i} (${c.server}.${c.tool}) failed: ${resultText(r).slice(0, 300)}`;
        // The setup is the task's own: a call its server refuses is the task's fault, a server that fails is not.
        throw stateCallFault(r.errorKind) === 'server' ? new ServerError(message) : new TaskError(message);
      }
    }
  }

  /**
   * Stage 3: the turns, until the policy answers the last user turn, or max_turns (or a user turn's
   * max_turns_per_user_turn); a server that crashed during them fails the episode.
   */
  async runTurns(): Promise<void> {
    // The toolbelt and search modes' meta-calls get turns of their own: META_TURNS more than the task's.
    const maxTurns = this.task.max_turns + (this.tools.belt ? META_TURNS : 0);
    for (let turn = 0; turn < maxTurns; turn++) {
      await this.refreshTools(turn);
      const answer = await this.turn(turn);
      if (answer !== undefined) {
        if (await this.endUserTurn(answer, turn + 1 < maxTurns)) break;
      } else if (this.userTurns.exhausted) break;
    }
    const crashed = this.turns.flatMap((t) => t.tool_results).find((s) => s.errorKind === 'crashed' || s.errorKind === 'closed');
    if (crashed) {
      this.finish = 'error';
      this.errorKind = 'server';
      this.error = `a tool server failed during the episode: ${crashed.text.slice(0, 200)}`;
    }
  }

  /** A server announced a change of its tools: listed again before the policy's next turn (the change goes on that turn's record). */
  private async refreshTools(turn: number): Promise<void> {
    try {
      await this.tools.refresh(this.servers, this.tape, turn);
    } catch (err) {
      throw new ServerError(`a tool server failed: listing its tools again after it announced a change: ${(err as Error).message}`);
    }
  }

  /**
   * The agent answered: its user turn ends (that turn's checks run). After the last user turn the
   * episode is answered (true); otherwise, while turns remain, the next follow-up's setup calls
   * run and its message is told (false). True when the episode ends.
   */
  private async endUserTurn(answer: string, turnsLeft: boolean): Promise<boolean> {
    const t0 = performance.now();
    try {
      await this.userTurns.end(answer, this.calls, this.stateCall);
    } finally {
      this.scoreMs += performance.now() - t0;
    }
    if (this.userTurns.last) {
      this.answer = answer;
      this.finish = 'answer';
      return true;
    }
    if (!turnsLeft) return true; // finish: max_turns, the follow-up not delivered
    const k = this.userTurns.current;
    const followup = this.userTurns.next();
    await this.setupCalls(followup.setup, `followups[${k}].setup`);
    this.tell({ role: 'user', content: followup.content });
    return false;
  }

  /** One turn: the policy acts, then its tool calls run. The answer when the policy answered (no tool call, no parse error). */
  private async turn(turn: number): Promise<string | undefined> {
    const { policy, options } = this;
    if (options.signal?.aborted) throw new Error('the episode was cancelled');
    const p0 = performance.now();
    const versionBefore = policy.version; // the weights this turn is sampled with, unless the action says
    const change = this.tools.show(); // the tools this turn is shown, and their change since the last turn
    let action: PolicyAction;
    try {
      action = await policy.act(
        {
          task: this.task,
          messages: [...this.messages],
          tools: this.tools.tools,
          turn,
          userTurn: this.userTurns.current,
          newMessages: this.newMessages,
          episodeId: this.id,
          episodeKey: this.key,
        },
        options.signal,
      );
    } catch (err) {
      throw new PolicyError(`the policy failed: ${(err as Error).message}`);
    }
    const pms = performance.now() - p0;
    this.policyMs += pms;
    this.newMessages = [];
    const proposed = action.toolCalls ?? [];
    const record = turnRecord(action, pms, versionBefore);
    if (this.userTurns.multi) record.user_turn = this.userTurns.current;
    if (change?.added.length) record.tools_added = change.added;
    if (change?.removed.length) record.tools_removed = change.removed;
    if (this.tools.belt) record.tools_in_context = this.tools.tools.map((t) => t.name);
    if (action.toolTokens !== undefined) record.tool_tokens = action.toolTokens;
    this.turns.push(record);
    this.userTurns.turnsInCurrent++;

    if (proposed.length === 0 && !action.parseError) {
      this.messages.push({ role: 'assistant', content: action.content });
      return action.content;
    }

    const withIds = proposed.map((c, i) => ({ ...c, id: c.id ?? `call_${turn}_${i}` }));
    this.messages.push({
      role: 'assistant',
      content: action.content,
      ...(withIds.length
        ? {
            tool_calls: withIds.map((c) => ({
              id: c.id,
              type: 'function' as const,
              function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) },
            })),
          }
        : {}),
    });
    if (action.parseError) this.tell({ role: 'tool', tool_call_id: `invalid_${turn}`, name: 'error', content: `Error: ${action.parseError}` });
    for (const c of withIds) await this.toolCall(c, record);
    return undefined;
  }

  /** A message the agent reads next turn. */
  private tell(m: ChatMessage): void {
    this.messages.push(m);
    this.newMessages.push(m);
  }

  /** One of the agent's tool calls: its arguments parsed, the tool found, the call made (through the faults, if any), its result recorded and told. */
  private async toolCall(c: { id: string; name: string; arguments: string | Record<string, unknown> }, record: Turn): Promise<void> {
    // Control tools are not the agent's: not among its tools, a call to one is a call to an unknown tool.
    const target = this.tools.byName.get(c.name);
    const parsed = parseCallArguments(c.name, c.arguments);
    const args = parsed.args;
    let result = parsed.result;
    let fault: FaultMark | undefined;
    if (!target) {
      const names = this.tools.tools.map((t) => t.name).join(', ');
      const belt = this.tools.belt ? ` (${this.tools.belt.options.mode === 'search' ? 'search_tools finds' : 'add_tool adds'} others)` : '';
      result = {
        content: [{ type: 'text', text: `Unknown tool '${c.name}'. Available tools: ${names}${belt}` }],
        isError: true,
        ms: 0,
        errorKind: 'unknown_tool',
      };
    } else if (target.meta) {
      // A meta-tool of the toolbelt or search mode: answered here, never faulted, not one of the task's calls.
      if (args !== undefined) {
        result = this.tools.belt!.call(target.name, args);
        this.tools.beltChanged();
      }
    } else if (args !== undefined) {
      const a = args;
      if (this.faults)
        ({ result, fault } = await this.faults.call(target, a, () => this.callOn(target.server, target.tool, a), {
          timeoutMs: this.host.timeoutMs,
          signal: this.options.signal,
        }));
      else result = await this.callOn(target.server, target.tool, args);
    }
    const r = result!;
    this.toolMs += r.ms;
    const text = resultText(r);
    const maxChars = this.host.maxChars;
    const step: ToolStep = {
      id: c.id,
      name: c.name,
      server: target?.server,
      tool: target?.tool,
      arguments: args ?? c.arguments,
      isError: r.isError,
      ...(r.errorKind ? { errorKind: r.errorKind } : {}),
      ms: r.ms,
      text: text.length > maxChars ? text.slice(0, maxChars) + ` ...[${text.length - maxChars} more characters]` : text,
      ...(r.structured !== undefined ? { structured: r.structured } : {}),
      ...(fault ? { fault } : {}),
      ...(target?.meta ? { meta: true, server: META_SERVER } : {}),
    };
    record.action.tool_calls.push({ id: c.id, name: c.name, arguments: step.arguments });
    record.tool_results.push(step);
    // A meta-call is not one of the task's calls (the checks never see it).
    if (!target?.meta)
      this.calls.push({ server: target?.server, tool: target?.tool, arguments: args, isError: step.isError, userTurn: this.userTurns.current });
    this.tell({ role: 'tool', tool_call_id: c.id, name: c.name, content: step.text, ...(step.isError ? { is_error: true } : {}) });
  }

  /** The episode failed (anything thrown by stages 1-3): its kind and cause. */
  fail(err: unknown): void {
    this.finish = 'error';
    this.taskError = err instanceof TaskError;
    this.errorKind =
      err instanceof StartError
        ? 'server_start'
        : err instanceof TaskError
          ? 'task'
          : err instanceof PolicyError
            ? 'policy'
            : err instanceof ServerError
              ? 'server'
              : 'other';
    this.error = err instanceof EpisodeError ? err.message : `the episode failed: ${(err as Error).message}`;
  }

  /** Stage 4: the task's checks (none run for a failed episode); a check that cannot run fails the episode; so does a replay that lacked a call. */
  async check(): Promise<void> {
    const t0 = performance.now();
    try {
      await this.runCheck();
    } finally {
      this.scoreMs += performance.now() - t0;
    }
  }

  private async runCheck(): Promise<void> {
    const task = this.task;
    if (this.finish === 'error') {
      this.checks = task.checks.map((c) => ({ kind: c.kind, weight: c.weight, score: 0, detail: 'not checked: the episode failed' }));
    } else {
      // The per-turn checks ran as their user turns ended (user-turns.ts); the others run now.
      this.checks = await this.userTurns.final({ answer: this.answer, calls: this.calls, turns: this.turns }, this.stateCall);
      // A check that could not run says nothing about the agent: the episode failed (the task's fault, or its server's).
      const taskFault = this.checks.findIndex((c) => c.error === 'task');
      const broken = taskFault >= 0 ? taskFault : this.checks.findIndex((c) => c.error === 'server');
      if (broken >= 0) {
        const c = this.checks[broken]!;
        this.finish = 'error';
        this.taskError = c.error === 'task';
        this.errorKind = this.taskError ? 'task' : 'server';
        this.error = this.taskError
          ? `checks[${broken}] (${c.kind}) cannot run: ${c.detail}`
          : `a tool server failed during the checks: checks[${broken}] (${c.kind}): ${c.detail}`;
      }
    }
    // A replay that lacks a call fails the episode with that call, wherever it was made (setup, turn, check).
    if (this.tape.miss) {
      this.finish = 'error';
      this.taskError = false;
      this.errorKind = 'replay';
      this.error = this.tape.miss;
    }
  }

  /** Stage 5: the reward (a failed episode is scored 0, with no parts: none of them was earned or lost by the agent); a reward that throws or gives no finite number fails the episode. */
  async score(): Promise<void> {
    const t0 = performance.now();
    if (this.finish !== 'error') {
      try {
        this.scored = await this.host.reward.fn({
          task: this.task,
          turns: this.turns,
          answer: this.answer,
          checks: this.checks,
          solved: solved(this.checks),
          weights: this.host.rewards,
        });
        if (!Number.isFinite(this.scored?.reward)) throw new Error(`it returned the reward ${String(this.scored?.reward)} (a finite number is needed)`);
      } catch (err) {
        this.finish = 'error';
        this.errorKind = 'reward';
        this.error = `the reward '${this.host.reward.name}' failed: ${(err as Error).message}`;
        this.scored = { reward: 0, parts: {} };
      }
    }
    this.turns.forEach((t, i) => (t.step_reward = this.scored.stepRewards?.[i] ?? 0));
    this.scoreMs += performance.now() - t0;
  }

  /** Stage 6: the servers let go: one started for this episode is closed, a bundled one releases the episode's state. */
  async release(): Promise<void> {
    for (const s of this.entered) if (s.unisolated) s.unisolated.inFlight--;
    for (const s of this.servers.values()) {
      if (s.perEpisode) await s.client.close();
      else s.backend?.release(this.id);
    }
    this.policy.endEpisode?.(this.id);
  }

  /** Stage 7: the trajectory. */
  trajectory(): Trajectory {
    const { task, options, policy, turns, finish, checks, scored, error, taskError, errorKind } = this;
    const steps = turns.flatMap((t) => t.tool_results);
    return {
      id: this.id,
      ...(options.runId ? { run_id: options.runId } : {}),
      task_id: task.id,
      group_id: options.groupId ?? task.id,
      sample: options.sample ?? 0,
      split: task.split,
      difficulty: task.difficulty,
      ...(task.family ? { family: task.family } : {}),
      policy: { id: policy.id, ...(policy.version !== undefined ? { version: policy.version } : {}) },
      tools: this.tools.trajectoryTools(),
      ...(this.surface ? { tool_surface: this.surface } : {}),
      messages: this.messages,
      turns,
      answer: this.answer,
      success: finish !== 'error' && solved(checks),
      reward: scored.reward,
      reward_parts: scored.parts ?? {},
      reward_name: this.host.reward.name,
      checks,
      metrics: {
        turns: turns.length,
        tool_calls: steps.length,
        tool_errors: steps.filter((s) => s.isError).length,
        policy_tokens: turns.reduce((s, t) => s + (t.tokens?.length ?? 0), 0),
        ...(this.faults ? { injected_faults: steps.filter((s) => s.fault !== undefined).length } : {}),
        ...(this.tools.belt ? { meta_calls: steps.filter((s) => s.meta).length } : {}),
        ...(turns.at(-1)?.tool_tokens !== undefined ? { tool_tokens: turns.at(-1)!.tool_tokens } : {}),
      },
      timings: {
        started_at: this.startedAt.toISOString(),
        total_ms: performance.now() - this.t0,
        policy_ms: this.policyMs,
        tool_ms: this.toolMs,
        score_ms: this.scoreMs,
      },
      finish,
      ...(error ? { error } : {}),
      ...(finish === 'error' && taskError ? { task_error: true } : {}),
      ...(finish === 'error' && errorKind ? { error_kind: errorKind } : {}),
    };
  }
}

/** A turn's record of the policy's action: its text, tokens, logprobs and what the sampler said of it. */
function turnRecord(action: PolicyAction, pms: number, versionBefore: string | number | undefined): Turn {
  return {
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
    ...(action.policyServer !== undefined ? { policy_server: action.policyServer } : {}),
  };
}
