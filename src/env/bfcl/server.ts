/**
 * The MCP servers of BFCL tasks. A task names its server `bfcl:<category>/<entry id>`:
 * - a single-turn entry's functions are served in this process (the official TypeScript SDK's
 *   low-level Server over the in-memory transport): listed with their schemas, a call acknowledged
 *   and not run, since BFCL grades the calls themselves. No state, so one server serves every
 *   episode of the entry;
 * - a multi-turn entry's functions are BFCL's backend classes, run by the official Python SDK's
 *   server (bfcl/mcp_gym_bfcl/server.py) over stdio, a process per episode (a fresh instance
 *   loaded with the entry's initial_config).
 */
import { Server } from '@modelcontextprotocol/server';
import type { StdioSpec } from '../../tools/index.ts';
import { bfclCategories, bfclEntry, bfclExportFile, type BfclEntry, type BfclTool } from './data.ts';
import { bfclEnv, bfclPython } from './python.ts';

export const BFCL_SERVER_PREFIX = 'bfcl:';

/** Whether a task's server reference is a BFCL entry's (`bfcl:<category>/<id>`). */
export function isBfclServerRef(ref: unknown): ref is string {
  return typeof ref === 'string' && ref.startsWith(BFCL_SERVER_PREFIX) && ref.includes('/');
}

export function bfclServerRef(category: string, id: string): string {
  return `${BFCL_SERVER_PREFIX}${category}/${id}`;
}

/** The entry a server reference names; unknown categories and entries throw, naming them. */
export function bfclServerEntry(ref: string): BfclEntry {
  const [category, id] = [ref.slice(BFCL_SERVER_PREFIX.length, ref.indexOf('/')), ref.slice(ref.indexOf('/') + 1)];
  bfclCategories(`bfcl:${category}`);
  return bfclEntry(category, id);
}

/** The tools an entry's server lists first: its functions, and the multi-turn server's control tool where functions are held back (exported with the entry). */
export function bfclListedTools(entry: BfclEntry): BfclTool[] {
  return [...entry.tools, ...(entry.control_tools ?? [])];
}

/** A single-turn entry's functions as an MCP server (a fresh SDK server per connection). */
export function singleTurnServerFactory(entry: BfclEntry): () => Server {
  return () => {
    const server = new Server({ name: `bfcl-${entry.id}`, version: 'bfcl-eval 2026.3.23' }, { capabilities: { tools: {} } });
    const names = new Set(entry.tools.map((t) => t.name));
    server.setRequestHandler('tools/list', async () => ({
      tools: entry.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema as { type: 'object' } })),
    }));
    server.setRequestHandler('tools/call', async (request) => {
      const name = request.params.name;
      if (!names.has(name)) return { content: [{ type: 'text' as const, text: `Error: unknown function '${name}'` }], isError: true };
      return { content: [{ type: 'text' as const, text: `Recorded the call to ${name}.` }] };
    });
    return server;
  };
}

/** A multi-turn entry's server: BFCL's backends under the Python SDK, over stdio (a process per episode). */
export function multiTurnServerSpec(entry: BfclEntry): StdioSpec {
  const env = bfclEnv();
  return {
    transport: 'stdio',
    command: bfclPython(),
    args: ['-m', 'mcp_gym_bfcl', 'serve', '--category', entry.category, '--id', entry.id, '--tasks', bfclExportFile(entry.category)],
    env: { PYTHONPATH: env.PYTHONPATH!, BFCL_PROJECT_ROOT: env.BFCL_PROJECT_ROOT!, PYTHONUNBUFFERED: '1' },
    // A crashed backend is not restarted mid-episode: its state would be lost, and the episode is failed instead.
    restart: false,
    maxRestartsPerMinute: 0,
  };
}
