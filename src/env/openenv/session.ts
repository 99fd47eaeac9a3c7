/**
 * One OpenEnv session (a WebSocket connection, or an HTTP session id): it plays mcp-gym episodes
 * one at a time, the client acting as the policy. `reset` starts an episode of a task in the
 * background (Environment.runEpisode: fresh server state, setup calls, faults, checks, reward, as
 * for any rollout) with a policy whose every `act` waits for the client's next `step`; a step hands
 * that action over and answers with what the episode did with it: the new messages (a tool's
 * result), or the end (answered, out of turns, or failed) with the reward and its named parts.
 * Nothing a client or a server does kills a session: a crashed tool server is an error message in
 * the observation (and a failed episode at its end), a malformed action is refused before it costs
 * a turn, and the next `reset` starts afresh.
 */
import { randomUUID } from 'node:crypto';
import type { Environment } from '../environment.ts';
import type { Task } from '../task.ts';
import type { AgentTool, ChatMessage, Observation, Policy, PolicyAction, Trajectory } from '../types.ts';
import { EnvActionSchema, type EnvAction, type EnvObservation, type EnvState, type EnvTool } from './schema.ts';

/** A client's request that cannot be served as asked (answered as a validation or session error, never a dead session). */
export class SessionError extends Error {
  constructor(
    message: string,
    readonly code: 'VALIDATION_ERROR' | 'SESSION_ERROR' | 'EXECUTION_ERROR' = 'SESSION_ERROR',
    /** zod's issues, for a VALIDATION_ERROR */
    readonly errors?: unknown[],
  ) {
    super(message);
  }
}

/** What a step or reset answers: OpenEnv's {observation, reward, done}. */
export interface StepResult {
  observation: EnvObservation;
  reward: number | null;
  done: boolean;
}

interface Pending {
  obs: Observation;
  resolve: (a: PolicyAction) => void;
  reject: (e: Error) => void;
}

/** The policy an OpenEnv client plays: each act() is answered by the client's next step. */
class ClientPolicy implements Policy {
  readonly id = 'openenv-client';
  pending?: Pending;
  /** Told when the episode asks for an action. */
  onAsk?: () => void;

  /** Whether the episode's abort signal is watched (one listener for all the turns). */
  private watching = false;

  act(obs: Observation, signal?: AbortSignal): Promise<PolicyAction> {
    return new Promise<PolicyAction>((resolve, reject) => {
      if (signal?.aborted) return reject(new Error('the session closed'));
      if (signal && !this.watching) {
        this.watching = true;
        signal.addEventListener('abort', () => this.pending?.reject(new Error('the session closed')), { once: true });
      }
      this.pending = { obs, resolve, reject };
      this.onAsk?.();
    });
  }
}

export interface SessionOptions {
  env: Environment;
  tasks: readonly Task[];
  /** Picks a task when reset names none: from the seed when given, else the session's next draw. */
  pick: (seed: number | undefined) => Task;
  /** A run id recorded in the trajectories' ids. */
  runId?: string;
  /** Told each episode's trajectory that ended by itself (answered, out of turns, failed), not one a reset or a close cut short. */
  onTrajectory?: (t: Trajectory) => void;
  /** The episode's sample number (its faults' key): distinct across the server's episodes. */
  nextSample?: () => number;
}

function toolsOf(tools: readonly AgentTool[]): EnvTool[] {
  return tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }));
}

export class EnvSession {
  readonly id = randomUUID();
  readonly createdAt = Date.now();
  lastActivityAt = Date.now();
  private task?: Task;
  private episodeId?: string;
  private stepCount = 0;
  private policy?: ClientPolicy;
  private abort?: AbortController;
  private running?: Promise<Trajectory>;
  private finished?: Trajectory;
  /** Messages of the episode the client has been shown. */
  private shown = 0;
  private tools: EnvTool[] = [];
  /** One request at a time: a session's requests queue. */
  private queue: Promise<unknown> = Promise.resolve();
  closed = false;

  constructor(private readonly o: SessionOptions) {}

  /** Runs `fn` after the session's earlier requests (a client that pipelines gets them in order). */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  reset(params: Record<string, unknown>): Promise<StepResult> {
    return this.serial(() => this.doReset(params));
  }

  step(action: unknown): Promise<StepResult> {
    return this.serial(() => this.doStep(action));
  }

  state(): EnvState {
    this.lastActivityAt = Date.now();
    return {
      episode_id: this.episodeId ?? null,
      step_count: this.stepCount,
      task_id: this.task?.id ?? null,
      session_id: this.id,
      done: this.finished !== undefined || this.running === undefined,
      max_turns: this.task?.max_turns ?? null,
    };
  }

  /** The tools of the current episode (MCP tools/list over the session). */
  listTools(): EnvTool[] {
    this.lastActivityAt = Date.now();
    return this.tools;
  }

  private async doReset(params: Record<string, unknown>): Promise<StepResult> {
    if (this.closed) throw new SessionError('the session is closed');
    this.lastActivityAt = Date.now();
    const { task_id: taskId, seed, episode_id: episodeId } = params;
    if (taskId !== undefined && taskId !== null && typeof taskId !== 'string')
      throw new SessionError(`reset: task_id must be a string, got ${JSON.stringify(taskId)}`, 'VALIDATION_ERROR');
    if (seed !== undefined && seed !== null && !(Number.isInteger(seed) && (seed as number) >= 0))
      throw new SessionError(`reset: seed must be a non-negative integer, got ${JSON.stringify(seed)}`, 'VALIDATION_ERROR');
    if (episodeId !== undefined && episodeId !== null && (typeof episodeId !== 'string' || episodeId.length > 255))
      throw new SessionError('reset: episode_id must be a string of at most 255 characters', 'VALIDATION_ERROR');
    let task: Task;
    if (typeof taskId === 'string') {
      const found = this.o.tasks.find((t) => t.id === taskId);
      if (!found) throw new SessionError(`reset: no task '${taskId}' among the ${this.o.tasks.length} tasks this server serves`, 'VALIDATION_ERROR');
      task = found;
    } else {
      task = this.o.pick(seed === undefined || seed === null ? undefined : (seed as number));
    }
    await this.endEpisode();
    if (this.closed) throw new SessionError('the session is closed'); // closed while the last episode ended
    this.task = task;
    this.stepCount = 0;
    this.shown = 0;
    this.finished = undefined;
    this.tools = [];
    const policy = new ClientPolicy();
    const abort = new AbortController();
    this.policy = policy;
    this.abort = abort;
    const asked = this.nextAsk(policy);
    const running = this.o.env.runEpisode(task, policy, {
      runId: this.o.runId ?? 'serve-env',
      groupId: (episodeId as string | undefined) ?? undefined,
      // a distinct key per episode: --faults draws each episode's own faults
      sample: this.o.nextSample?.() ?? 0,
      signal: abort.signal,
    });
    this.running = running;
    running.then(
      (t) => {
        if (this.running === running) this.finished = t;
        if (abort.signal.aborted) return; // cut short by a reset or a close: not an episode the client played out
        try {
          this.o.onTrajectory?.(t);
        } catch (err) {
          process.emitWarning(`serve-env: recording an episode failed: ${(err as Error).message}`);
        }
      },
      () => {}, // runEpisode reports failures in the trajectory; nothing else to do
    );
    const first = await Promise.race([asked, running]);
    if (first === 'asked') {
      const obs = policy.pending!.obs;
      this.episodeId = obs.episodeId;
      this.tools = toolsOf(obs.tools);
      return this.observe(obs.messages, false);
    }
    // The episode ended before its first turn: a server that failed to start, a broken setup.
    this.episodeId = first.id;
    return this.ended(first);
  }

  /** Resolves 'asked' when the episode next asks the client for an action. */
  private nextAsk(policy: ClientPolicy): Promise<'asked'> {
    return new Promise((resolve) => {
      policy.onAsk = () => resolve('asked');
    });
  }

  private async doStep(raw: unknown): Promise<StepResult> {
    if (this.closed) throw new SessionError('the session is closed');
    this.lastActivityAt = Date.now();
    const parsed = EnvActionSchema.safeParse(raw);
    if (!parsed.success) {
      const first = parsed.error.issues[0]!;
      const where = first.path.length ? `action.${first.path.join('.')}` : 'action';
      throw new SessionError(`step: ${where}: ${first.message}`, 'VALIDATION_ERROR', parsed.error.issues);
    }
    const action: EnvAction = parsed.data;
    if (!this.running) throw new SessionError('step before reset: send reset first to start an episode');
    if (this.finished) throw new SessionError('the episode is over: send reset to start another');
    const policy = this.policy!;
    const pending = policy.pending;
    if (!pending) throw new SessionError('the episode is not waiting for an action', 'EXECUTION_ERROR');
    if (action.type === 'list_tools') return this.observe([], false, undefined, false);
    this.stepCount++;
    policy.pending = undefined;
    const asked = this.nextAsk(policy);
    pending.resolve(
      action.type === 'answer'
        ? { content: action.content }
        : { content: action.content ?? '', toolCalls: [{ name: action.tool_name, arguments: action.arguments }] },
    );
    const next = await Promise.race([asked, this.running]);
    if (next === 'asked') {
      const obs = policy.pending!.obs;
      this.tools = toolsOf(obs.tools);
      return this.observe(obs.messages, false);
    }
    return this.ended(next);
  }

  /** The messages the client has not seen, and the episode's current figures. */
  private observe(messages: ChatMessage[], done: boolean, t?: Trajectory, advance = true): StepResult {
    const fresh = advance ? messages.slice(this.shown) : [];
    if (advance) this.shown = messages.length;
    const last = [...fresh].reverse().find((m) => m.role === 'tool');
    const observation: EnvObservation = {
      session_id: this.id,
      episode_id: this.episodeId ?? null,
      task_id: this.task!.id,
      turn: this.stepCount,
      max_turns: this.task!.max_turns,
      messages: fresh,
      tools: this.tools,
      tool_result: last ? { tool_name: last.name ?? '', text: typeof last.content === 'string' ? last.content : '', is_error: last.is_error === true } : null,
      ...(t
        ? {
            success: t.success,
            finish: t.finish,
            reward_parts: t.reward_parts,
            checks: t.checks.map((c) => ({ kind: c.kind, score: c.score, weight: c.weight, ...(c.detail ? { detail: c.detail } : {}) })),
            ...(t.error ? { error: t.error } : {}),
          }
        : {}),
    };
    return { observation, reward: t ? t.reward : done ? 0 : null, done };
  }

  private ended(t: Trajectory): StepResult {
    this.finished = t;
    return this.observe(t.messages, true, t);
  }

  /** Stops the episode in flight (its servers released, its state gone). */
  private async endEpisode(): Promise<void> {
    const running = this.running;
    if (!running) return;
    this.abort?.abort();
    this.running = undefined;
    await running.catch(() => undefined);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.endEpisode();
    await this.queue; // a reset in flight ends (it sees `closed`), then nothing is left running
    await this.endEpisode();
  }
}
