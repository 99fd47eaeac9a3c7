/**
 * The multi-turn environment: it connects the servers a task needs, gives each episode its own
 * fresh server state, lets a policy act until it answers or runs out of turns, executes its tool
 * calls over MCP, checks the outcome and scores it. Nothing a policy or a server does can crash
 * an episode batch: every failure becomes a message the agent reads, or an episode marked error.
 * A failed episode scores 0 with no reward parts, and its `error` says why (first line: the cause);
 * one that failed because the task itself is broken (a check or setup call that cannot run) is
 * marked `task_error`, so that a task author's bug is not counted as the agent's failure.
 */
import { bundledServer, EPISODE_META_KEY, serverFactory, type Backend } from '../../servers/index.ts';
import { CLI_PATH } from '../paths.ts';
import {
  ToolClient,
  toolSurface,
  type ConnectOptions,
  type ResourceInfo,
  type ServerSpec,
  type ServerSurface,
  type ToolInfo,
  type ToolSurfaces,
} from '../tools/index.ts';
import { bfclListedTools, bfclServerEntry, isBfclServerRef, multiTurnServerSpec, singleTurnServerFactory } from './bfcl/server.ts';
import { Episode, type Connected, type EpisodeHost, type EpisodeOptions } from './episode.ts';
import type { FaultOptions } from './faults.ts';
import type { ToolModeOptions } from './tool-modes.ts';
import { openTape, type ToolRecording, type ToolTape } from './recording.ts';
import { RewardConfigSchema, resolveReward, type RewardConfig, type RewardConfigInput, type RewardFn } from './rewards.ts';
import type { ServerRef, Task } from './task.ts';
import type { Policy, Trajectory } from './types.ts';

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
  /** How the agent is shown its tools (src/env/tool-modes.ts): all (default), toolbelt or search. */
  tools?: ToolModeOptions;
  /** Appends every tool list and call (with its result and latency) of every episode to this JSONL file (src/env/recording.ts). */
  record?: string;
  /** Serves tool lists and results from this recording (a file, or one loaded), starting no server; a call it lacks fails the episode. */
  replay?: string | ToolRecording;
}

/** Whether a server declares that it gives each episode its own state (`experimental: {"mcp-gym/episode": {}}`). */
export function declaresEpisodeIsolation(client: ToolClient): boolean {
  const experimental = client.serverCapabilities?.experimental;
  return experimental !== undefined && experimental !== null && typeof experimental === 'object' && experimental[EPISODE_META_KEY] !== undefined;
}

/** An id per in-process server factory: two factories are two servers (JSON drops functions). */
const factoryIds = new WeakMap<object, number>();
let nextFactoryId = 1;

function refKey(ref: ServerRef): string {
  if (typeof ref === 'string') return `bundled:${ref}`;
  if (ref.transport === 'inprocess') {
    const f = ref.factory as object;
    if (!factoryIds.has(f)) factoryIds.set(f, nextFactoryId++);
    return `inprocess:${factoryIds.get(f)}`;
  }
  return JSON.stringify(ref);
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
    if (isBfclServerRef(ref)) {
      // A BFCL entry's functions (src/env/bfcl/server.ts): a single-turn entry's in this process
      // (no state: shared by its episodes); a multi-turn entry's backends in a Python process per episode.
      const entry = bfclServerEntry(ref);
      if (entry.multi_turn) return { client: await ToolClient.connect(multiTurnServerSpec(entry), connectOptions), perEpisode: true };
      return { client: await ToolClient.connect({ transport: 'inprocess', factory: singleTurnServerFactory(entry) }, connectOptions), perEpisode: false };
    }
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
    // A third-party stdio server gets a process per episode: a fresh state whatever it keeps; an OpenEnv
    // environment, a session per episode (reset at its start).
    const client = await ToolClient.connect(ref as ServerSpec, connectOptions);
    if (ref.transport === 'http' && !declaresEpisodeIsolation(client)) {
      return { client, perEpisode: false, unisolated: { url: ref.url, inFlight: 0, warned: false } };
    }
    return { client, perEpisode: ref.transport === 'stdio' || ref.transport === 'openenv' };
  }

  private async server(ref: ServerRef): Promise<Connected> {
    if (this.closed) throw new Error('The environment is closed');
    if (typeof ref !== 'string' && (ref.transport === 'stdio' || ref.transport === 'openenv')) return this.connect(ref);
    if (isBfclServerRef(ref) && bfclServerEntry(ref).multi_turn) return this.connect(ref);
    const key = refKey(ref);
    let p = this.shared.get(key);
    if (!p) {
      p = this.connect(ref);
      this.shared.set(key, p);
      p.catch(() => this.shared.delete(key));
    }
    return p;
  }

  /** Runs one episode of `task` with `policy`, stage by stage (episode.ts); never throws for what the policy or servers do. */
  async runEpisode(task: Task, policy: Policy, options: EpisodeOptions = {}): Promise<Trajectory> {
    const episode = new Episode(this.episodeHost(), task, policy, options);
    try {
      await episode.openServers();
      await episode.setUp();
      await episode.runTurns();
    } catch (err) {
      episode.fail(err);
    }
    await episode.check();
    await episode.score();
    await episode.release();
    return episode.trajectory();
  }

  /** What an episode needs of this environment (or of its view with other faults: `this` is the view). */
  private episodeHost(): EpisodeHost {
    return {
      timeoutMs: this.options.callTimeoutMs ?? 10_000,
      maxChars: this.options.maxResultChars ?? 4000,
      faults: this.options.faults,
      ...(this.options.tools ? { toolMode: this.options.tools } : {}),
      tape: this.tape,
      reward: this.reward,
      rewards: this.rewards,
      server: (ref) => this.server(ref),
      enter: (s) => this.enter(s),
      surfaceOf: (tools) => this.surfaceOf(tools),
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
            // A BFCL entry's tools are known without starting its server (a Python process for a multi-turn entry).
            s = this.surfaceOf(isBfclServerRef(ref) ? bfclListedTools(bfclServerEntry(ref)) : await this.toolsOf(ref));
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
      `capabilities.experimental['${EPISODE_META_KEY}'] (docs/servers.md, "A fresh state for every episode"), or give the task a stdio server (a process per episode).`;
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
