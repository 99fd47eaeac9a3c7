/**
 * How an episode shows its tools to the agent (`--tools all|toolbelt|search`):
 * - `all` (the default): every tool of every task server, with its schema, from the first turn.
 * - `toolbelt`: four meta-tools, `list_tools` (servers, and each tool's name with a one-line
 *   description), `inspect_tool` (a tool's whole schema), `add_tool` and `remove_tool`; only the
 *   tools on the belt are callable, and only their schemas are in the agent's context.
 * - `search`: one meta-tool, `search_tools(query)`, which ranks the tools by BM25 over their names,
 *   descriptions and parameters and puts the best `k` on the belt.
 *
 * A tool added to the belt reaches the agent the way a server's changed tool list does
 * (`notifications/tools/list_changed`, episode-tools.ts): the environment lists it among the
 * agent's tools from its next turn, and a Hugging Face or embedded model reads its schema at the
 * start of the next message the environment adds (hf/tool-format.ts `toolChangeNotice`), in the
 * same format as the prompt's tool list. The sequence stays append-only: no turn before is
 * rewritten, so the tokens sampled are the tokens trained on. A removed tool is named as no longer
 * available (its schema stays in an append-only context; an API model is no longer sent it).
 *
 * An episode in these modes gets META_TURNS (2) turns beyond its task's `max_turns`, for the
 * meta-calls: the expert lists and adds (toolbelt) or searches (search) in one turn each.
 *
 * The meta-tools run in the environment (no MCP server): their calls are recorded in the turn's
 * tool results with `meta: true`, and are not among the task's calls that checks look at.
 */
import type { ToolResult } from '../tools/index.ts';
import type { AgentTool } from './types.ts';

export const TOOL_MODES = ['all', 'toolbelt', 'search'] as const;
export type ToolMode = (typeof TOOL_MODES)[number];

export interface ToolModeOptions {
  mode: ToolMode;
  /** search: tools a search puts on the belt (default 3). */
  k?: number;
  /** toolbelt and search: the most tools on the belt at once (default 12); search drops the oldest beyond it. */
  maxBelt?: number;
}

export const DEFAULT_SEARCH_K = 3;
/** Turns an episode gets beyond its task's max_turns in the toolbelt and search modes, for the meta-calls (a list and an add). */
export const META_TURNS = 2;
export const DEFAULT_MAX_BELT = 12;

/** The `server` of the meta-tools (they are the environment's, not a task server's). */
export const META_SERVER = 'mcp-gym';

export const TOOL_MODE_HELP = `all (every schema from the first turn), toolbelt (list_tools, inspect_tool, add_tool, remove_tool), search (search_tools; search:K for K results a search, default ${DEFAULT_SEARCH_K})`;

/** `all`, `toolbelt`, `search` or `search:K`; throws an error naming the value and the choices. */
export function parseToolMode(value: string, flag = '--tools'): ToolModeOptions {
  const m = /^(all|toolbelt|search)(?::(\d+))?$/.exec(value.trim());
  if (!m || (m[2] !== undefined && m[1] !== 'search')) throw new Error(`${flag}: '${value}' is not a tool mode; use one of: all, toolbelt, search, search:K`);
  const mode = m[1] as ToolMode;
  if (m[2] === undefined) return { mode };
  const k = Number(m[2]);
  if (k < 1 || k > 50) throw new Error(`${flag}: search:${m[2]}: K must be 1 to 50`);
  return { mode, k };
}

/** The mode as a flag's value writes it back (`search:5`; `search` at the default k). */
export function toolModeSetting(o: ToolModeOptions | undefined): string {
  if (!o) return 'all';
  return o.mode === 'search' && o.k !== undefined && o.k !== DEFAULT_SEARCH_K ? `search:${o.k}` : o.mode;
}

function meta(name: string, description: string, properties: Record<string, unknown>, required: string[]): AgentTool {
  return { name, description, inputSchema: { type: 'object', properties, required }, server: META_SERVER, tool: name, meta: true };
}

const NAME = { type: 'string', description: "the tool's name, as list_tools shows it" };

export const TOOLBELT_TOOLS: readonly AgentTool[] = [
  meta(
    'list_tools',
    "List the tool servers and their tools, each tool's name with a one-line description. Give server to list one server's tools.",
    { server: { type: 'string', description: 'list only this server' } },
    [],
  ),
  meta('inspect_tool', "Show a tool's full description and the schema of its arguments.", { name: NAME }, ['name']),
  meta('add_tool', 'Put a tool on your toolbelt: you can call it from your next turn.', { name: NAME }, ['name']),
  meta('remove_tool', 'Take a tool off your toolbelt.', { name: NAME }, ['name']),
];

export const SEARCH_TOOLS: readonly AgentTool[] = [
  meta(
    'search_tools',
    'Search the available tools by what you need to do. The best matches become callable from your next turn.',
    { query: { type: 'string', description: 'what the tool should do, in a few words' } },
    ['query'],
  ),
];

/**
 * A tool's description cut to its first line or sentence (at most 100 characters); for BFCL's
 * functions, whose descriptions open with the API they belong to, the sentence after "Tool description:".
 */
export function oneLine(description: string): string {
  const own = /Tool description:\s*([^]*)$/.exec(description)?.[1] ?? description;
  const line = own.trim().split('\n')[0]!.trim();
  const sentence = /^(.+?[.!?])(\s|$)/.exec(line)?.[1] ?? line;
  return sentence.length > 100 ? `${sentence.slice(0, 97)}...` : sentence;
}

const STOP = new Set('a an and are as at be by for from in is it its of on or that the this to with you your'.split(' '));

/** Words for BM25: camelCase and snake_case split, lower case, stop words out, a plural `s` dropped. */
export function searchTerms(text: string): string[] {
  return text
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w.length > 0 && !STOP.has(w))
    .map((w) => (w.length > 3 && w.endsWith('s') && !w.endsWith('ss') ? w.slice(0, -1) : w));
}

function toolText(t: AgentTool): string {
  const props = (t.inputSchema.properties ?? {}) as Record<string, { description?: unknown }>;
  const params = Object.entries(props).map(([k, v]) => `${k} ${typeof v?.description === 'string' ? v.description : ''}`);
  // The name twice: a tool's name says most of what it does.
  return [t.name, t.name, t.tool !== t.name ? t.tool : '', t.server, t.description, ...params].join(' ');
}

/** Okapi BM25 over tools (k1 1.2, b 0.75); ties keep the catalog's order. */
export class ToolIndex {
  private readonly docs: Map<string, number>[];
  private readonly lengths: number[];
  private readonly avg: number;
  private readonly df = new Map<string, number>();

  constructor(readonly tools: readonly AgentTool[]) {
    this.docs = tools.map((t) => {
      const tf = new Map<string, number>();
      for (const w of searchTerms(toolText(t))) tf.set(w, (tf.get(w) ?? 0) + 1);
      return tf;
    });
    this.lengths = this.docs.map((d) => [...d.values()].reduce((s, n) => s + n, 0));
    this.avg = this.lengths.reduce((s, n) => s + n, 0) / Math.max(1, this.lengths.length);
    for (const d of this.docs) for (const w of d.keys()) this.df.set(w, (this.df.get(w) ?? 0) + 1);
  }

  /** The best `k` tools for the query, with their scores (only those sharing a word with it). */
  search(query: string, k: number): { tool: AgentTool; score: number }[] {
    const terms = [...new Set(searchTerms(query))];
    const n = this.tools.length;
    const scored = this.docs.map((d, i) => {
      let score = 0;
      for (const w of terms) {
        const tf = d.get(w);
        if (!tf) continue;
        const df = this.df.get(w)!;
        const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
        score += (idf * tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * this.lengths[i]!) / (this.avg || 1)));
      }
      return { i, score };
    });
    return scored
      .filter((s) => s.score > 0)
      .sort((a, b) => b.score - a.score || a.i - b.i)
      .slice(0, k)
      .map((s) => ({ tool: this.tools[s.i]!, score: s.score }));
  }
}

function text(t: string, isError = false, errorKind?: ToolResult['errorKind']): ToolResult {
  return { content: [{ type: 'text', text: t }], isError, ms: 0, ...(errorKind ? { errorKind } : {}) };
}

/**
 * An episode's belt: which of the catalog's tools (every tool the servers list, named as the agent
 * sees them) are callable now, and the meta-tools' calls. `all` mode has no belt.
 */
export class ToolBelt {
  private readonly belt: string[] = [];
  private index?: ToolIndex;
  private catalog: readonly AgentTool[] = [];
  private byName = new Map<string, AgentTool>();
  readonly k: number;
  readonly maxBelt: number;

  constructor(readonly options: ToolModeOptions) {
    this.k = options.k ?? DEFAULT_SEARCH_K;
    this.maxBelt = options.maxBelt ?? DEFAULT_MAX_BELT;
  }

  get metaTools(): readonly AgentTool[] {
    return this.options.mode === 'toolbelt' ? TOOLBELT_TOOLS : this.options.mode === 'search' ? SEARCH_TOOLS : [];
  }

  /** The servers' tools changed (or were first listed): the belt keeps the tools that still exist. */
  setCatalog(tools: readonly AgentTool[]): void {
    this.catalog = tools;
    this.byName = new Map(tools.map((t) => [t.name, t]));
    this.index = undefined;
    for (let i = this.belt.length - 1; i >= 0; i--) if (!this.byName.has(this.belt[i]!)) this.belt.splice(i, 1);
  }

  /** The agent's tools now: the meta-tools, then the belt's in the order added. */
  visible(): AgentTool[] {
    return [...this.metaTools, ...this.belt.map((n) => this.byName.get(n)!)];
  }

  /** A catalog tool by the agent's name for it, or by `server_tool` / `server.tool`. */
  private find(name: string): AgentTool | undefined {
    const exact = this.byName.get(name);
    if (exact) return exact;
    return this.catalog.find((t) => `${t.server}_${t.tool}` === name || `${t.server}.${t.tool}` === name);
  }

  private unknown(name: string): ToolResult {
    const close = (this.index ??= new ToolIndex(this.catalog)).search(name, 3).map((r) => r.tool.name);
    const hint = close.length ? ` Close matches: ${close.join(', ')}.` : '';
    return text(`No tool '${name}'.${hint} Call ${this.options.mode === 'search' ? 'search_tools' : 'list_tools'} to see the tools.`, true, 'unknown_tool');
  }

  /** A meta-tool's call: its result (the belt changed where it says so). */
  call(name: string, args: Record<string, unknown>): ToolResult {
    const str = (field: string, required: boolean): string | ToolResult | undefined => {
      const v = args[field];
      if (v === undefined && !required) return undefined;
      if (typeof v !== 'string' || v.trim() === '')
        return text(`Invalid arguments for tool '${name}': ${field} must be a non-empty string`, true, 'invalid_arguments');
      return v.trim();
    };
    switch (name) {
      case 'list_tools': {
        const server = str('server', false);
        if (typeof server === 'object') return server;
        const servers = [...new Set(this.catalog.map((t) => t.server))];
        if (server !== undefined && !servers.includes(server))
          return text(`No server '${server}'. The servers: ${servers.join(', ')}.`, true, 'invalid_arguments');
        const lines: string[] = [];
        for (const s of server ? [server] : servers) {
          const tools = this.catalog.filter((t) => t.server === s);
          lines.push(`${s} (${tools.length} tool${tools.length === 1 ? '' : 's'}):`);
          for (const t of tools) lines.push(`- ${t.name}: ${oneLine(t.description)}`);
        }
        return text(lines.join('\n'));
      }
      case 'inspect_tool': {
        const n = str('name', true);
        if (typeof n !== 'string') return n!;
        const t = this.find(n);
        if (!t) return this.unknown(n);
        return text(JSON.stringify({ name: t.name, server: t.server, description: t.description, parameters: t.inputSchema }));
      }
      case 'add_tool': {
        const n = str('name', true);
        if (typeof n !== 'string') return n!;
        const t = this.find(n);
        if (!t) return this.unknown(n);
        if (this.belt.includes(t.name)) return text(`${t.name} is already on your toolbelt.`);
        if (this.belt.length >= this.maxBelt)
          return text(
            `Your toolbelt holds ${this.maxBelt} tools at most: take one off first (remove_tool). On it: ${this.belt.join(', ')}.`,
            true,
            'invalid_arguments',
          );
        this.belt.push(t.name);
        return text(`Added ${t.name} to your toolbelt.`);
      }
      case 'remove_tool': {
        const n = str('name', true);
        if (typeof n !== 'string') return n!;
        const t = this.find(n);
        const at = t ? this.belt.indexOf(t.name) : -1;
        if (at < 0) return text(`${n} is not on your toolbelt. On it: ${this.belt.join(', ') || 'nothing'}.`, true, 'invalid_arguments');
        this.belt.splice(at, 1);
        return text(`Removed ${t!.name} from your toolbelt.`);
      }
      case 'search_tools': {
        const q = str('query', true);
        if (typeof q !== 'string') return q!;
        const found = (this.index ??= new ToolIndex(this.catalog)).search(q, this.k);
        if (found.length === 0) return text(`No tool matches '${q}'. Try other words.`);
        for (const { tool } of found) {
          const at = this.belt.indexOf(tool.name);
          if (at >= 0) this.belt.splice(at, 1);
          this.belt.push(tool.name); // the most recently found last; the oldest go first beyond maxBelt
        }
        while (this.belt.length > this.maxBelt) this.belt.shift();
        return text(
          `Found ${found.length} tool${found.length === 1 ? '' : 's'}, callable from your next turn:\n${found.map(({ tool: t }) => `- ${t.name} (${t.server}): ${oneLine(t.description)}`).join('\n')}`,
        );
      }
      default:
        return text(`Unknown tool '${name}'`, true, 'unknown_tool');
    }
  }

  /** Whether a name is one of this mode's meta-tools. */
  isMeta(name: string): boolean {
    return this.metaTools.some((t) => t.name === name);
  }
}
