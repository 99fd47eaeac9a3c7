/**
 * The tools an episode's agent sees: each server's tools/list with its control tools left out
 * (`_meta: {"mcp-gym/control": true}`: for the task's own calls only), names qualified where two
 * servers share one, the injected distractors after them. A server that announces a change of its
 * tools (`notifications/tools/list_changed`, counted by its client's `toolsVersion`) is listed again
 * before the agent's next turn; the change is what the agent sees (added and removed names). The
 * trajectory's tools are every tool the agent was shown, in the order first shown.
 *
 * In the toolbelt and search modes (tool-modes.ts) the servers' tools are the belt's catalog: the
 * agent is shown the meta-tools and the tools on its belt, and a meta-tool's call that changes the
 * belt changes the agent's tools as a server's change would (the change shown at its next turn).
 */
import { isControlTool, type ToolClient, type ToolInfo, type ToolResult } from '../tools/index.ts';
import type { EpisodeFaults } from './faults.ts';
import type { EpisodeTape } from './recording.ts';
import { ToolBelt, type ToolModeOptions } from './tool-modes.ts';
import type { AgentTool, Trajectory } from './types.ts';

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

/** What changed in the agent's tool list: the names it sees now and did not, and those it no longer sees. */
export interface ToolChange {
  added: string[];
  removed: string[];
}

export class EpisodeTools {
  /** Each server's whole list (control tools included), by alias, as last listed. */
  readonly listed = new Map<string, ToolInfo[]>();
  /** Each server's client's toolsVersion when it was last listed. */
  private readonly versions = new Map<string, number>();
  /** The agent's tools now, and by name. */
  tools: AgentTool[] = [];
  byName = new Map<string, AgentTool>();
  /** Every tool the agent was shown, by name, in the order first shown (the last definition of each). */
  private readonly shown = new Map<string, AgentTool>();
  /** The names the agent was shown at its last turn (none before its first). */
  private lastShown?: Set<string>;

  /** The toolbelt or search mode's belt; none in the `all` mode. */
  readonly belt?: ToolBelt;

  constructor(
    private readonly faults?: EpisodeFaults,
    mode?: ToolModeOptions,
  ) {
    if (mode && mode.mode !== 'all') this.belt = new ToolBelt(mode);
  }

  /** A server's list; `version`: its client's toolsVersion as the list was asked for. */
  set(alias: string, tools: ToolInfo[], version?: number): void {
    this.listed.set(alias, tools);
    if (version !== undefined) this.versions.set(alias, version);
  }

  /** The agent's tools made again from the lists (control tools left out). */
  update(): void {
    const visible = [...this.listed].map(([server, tools]) => ({ server, tools: tools.filter((t) => !isControlTool(t)) }));
    let tools = agentTools(visible);
    if (this.faults) tools = this.faults.withDistractors(tools, visible);
    if (!this.belt) return this.use(tools);
    // A server tool named as a meta-tool is called by its qualified name (`server_tool`).
    this.belt.setCatalog(tools.map((t) => (this.belt!.isMeta(t.name) ? { ...t, name: `${t.server}_${t.tool}` } : t)));
    this.use(this.belt.visible());
  }

  private use(tools: AgentTool[]): void {
    this.tools = tools;
    this.byName = new Map(tools.map((t) => [t.name, t]));
  }

  /** A meta-tool's call made the belt change: the agent's tools now (shown from its next turn). */
  beltChanged(): void {
    if (this.belt) this.use(this.belt.visible());
  }

  /**
   * Lists again every server whose client announced a change since it was last listed (recorded as
   * listed before `turn`), or, replaying, the lists the recording made again before `turn`.
   */
  async refresh(clients: ReadonlyMap<string, { client: ToolClient }>, tape: EpisodeTape, turn: number): Promise<void> {
    let changed = false;
    if (tape.replaying) {
      for (const alias of this.listed.keys()) {
        const tools = tape.relisted?.(alias, turn);
        if (tools) {
          this.listed.set(alias, tools);
          changed = true;
        }
      }
    } else {
      for (const [alias, s] of clients) {
        const version = s.client.toolsVersion;
        if (version === this.versions.get(alias)) continue;
        this.versions.set(alias, version);
        this.listed.set(alias, await tape.listTools(alias, () => s.client.listTools(), turn));
        changed = true;
      }
    }
    if (changed) this.update();
  }

  /**
   * A turn begins: the agent is shown its tools (they join the trajectory's). What changed since
   * its last turn (none at its first: a change before it, by the task's setup, is not one the agent saw).
   */
  show(): ToolChange | undefined {
    for (const t of this.tools) this.shown.set(t.name, t); // a Map keeps the order first set: the last definition, in the order first shown
    const before = this.lastShown;
    const now = new Set(this.tools.map((t) => t.name));
    this.lastShown = now;
    if (!before) return undefined;
    const added = [...now].filter((n) => !before.has(n));
    const removed = [...before].filter((n) => !now.has(n));
    return added.length || removed.length ? { added, removed } : undefined;
  }

  /** The trajectory's tools: every tool the agent was shown (the tools it would have been shown, when no turn began). */
  trajectoryTools(): NonNullable<Trajectory['tools']> {
    return [...(this.shown.size ? this.shown.values() : this.tools)].map((t) => ({
      name: t.name,
      description: t.description,
      parameters: t.inputSchema,
      server: t.server,
      tool: t.tool,
      ...(t.distractor ? { distractor: true } : {}),
      ...(t.meta ? { meta: true } : {}),
    }));
  }
}

/** An agent's call's arguments: the object, or (text that is not a JSON object) the result the agent reads. */
export function parseCallArguments(name: string, raw: string | Record<string, unknown>): { args?: Record<string, unknown>; result?: ToolResult } {
  if (typeof raw !== 'string') return { args: raw };
  try {
    const parsed: unknown = raw.trim() === '' ? {} : JSON.parse(raw);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('expected a JSON object');
    return { args: parsed as Record<string, unknown> };
  } catch (err) {
    return {
      result: {
        content: [{ type: 'text', text: `Invalid arguments for tool '${name}': not a JSON object (${(err as Error).message})` }],
        isError: true,
        ms: 0,
        errorKind: 'invalid_arguments',
      },
    };
  }
}
