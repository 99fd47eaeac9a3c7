/**
 * A user's own MCP server, for the worked example (examples/train-notes.ts): a notebook with three
 * tools. It is written with the official MCP TypeScript SDK only; nothing of mcp-gym. It keeps its
 * notes in memory, so each process is one notebook: mcp-gym starts a fresh process for every
 * episode of a stdio server, and every episode starts from an empty notebook.
 *
 *   node --import tsx examples/notes-server.ts      (speaks MCP on stdin/stdout)
 */
import { McpServer } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const notes: string[] = [];
const server = new McpServer({ name: 'notes', version: '1.0.0' });

server.registerTool(
  'add_note',
  { description: 'Add a note to the notebook', inputSchema: z.object({ text: z.string().min(1).max(200) }), outputSchema: z.object({ count: z.number() }) },
  async ({ text }) => {
    notes.push(text);
    return { content: [{ type: 'text', text: `added; ${notes.length} notes` }], structuredContent: { count: notes.length } };
  },
);

server.registerTool(
  'list_notes',
  { description: 'List the notes, oldest first', inputSchema: z.object({}), outputSchema: z.object({ notes: z.array(z.string()) }) },
  async () => ({
    content: [{ type: 'text', text: notes.length ? notes.map((n, i) => `${i + 1}. ${n}`).join('\n') : '(no notes)' }],
    structuredContent: { notes: [...notes] },
  }),
);

server.registerTool(
  'count_notes',
  { description: 'How many notes there are', inputSchema: z.object({}), outputSchema: z.object({ count: z.number() }) },
  async () => ({ content: [{ type: 'text', text: String(notes.length) }], structuredContent: { count: notes.length } }),
);

await server.connect(new StdioServerTransport());
