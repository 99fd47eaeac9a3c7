/**
 * A deliberately fragile MCP server for the fuzz tests, run as a stdio process
 * (`node --import tsx test/bench/fragile-server.ts`). A low-level server, so each tool decides
 * exactly how it answers:
 * - `crashy`: the process exits when `text` is the empty string;
 * - `hangy`: never answers when `n` is negative;
 * - `strict`: validates its arguments and answers bad ones with a proper `isError` result;
 * - `rude`: answers bad arguments with a JSON-RPC error instead of a result;
 * - `blocky`: matches a regular expression in the server's own thread, so a pattern that
 *   backtracks catastrophically blocks the whole process (it answers nothing, not even tools/list).
 */
import { ProtocolError, Server, type Tool } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';

const server = new Server({ name: 'fragile', version: '1.0.0' }, { capabilities: { tools: {} } });
const tools: Tool[] = [
  {
    name: 'crashy',
    description: 'Echoes text; dies on the empty string',
    inputSchema: { type: 'object' as const, properties: { text: { type: 'string' } }, required: ['text'] },
  },
  {
    name: 'hangy',
    description: 'Doubles n; never answers for negative n',
    inputSchema: { type: 'object' as const, properties: { n: { type: 'number' } }, required: ['n'] },
  },
  {
    name: 'strict',
    description: 'Repeats name count times; validates its input',
    inputSchema: {
      type: 'object' as const,
      properties: { name: { type: 'string', minLength: 1, maxLength: 20 }, count: { type: 'integer', minimum: 0, maximum: 5 } },
      required: ['name'],
      additionalProperties: false,
    },
  },
  {
    name: 'rude',
    description: 'Answers bad input with a JSON-RPC error',
    inputSchema: { type: 'object' as const, properties: { flag: { type: 'boolean' } }, required: ['flag'] },
  },
  {
    name: 'blocky',
    description: 'Whether text matches pattern (a regular expression), matched in the server thread',
    inputSchema: { type: 'object' as const, properties: { pattern: { type: 'string' }, text: { type: 'string' } }, required: ['pattern'] },
  },
];

const ok = (text: string) => ({ content: [{ type: 'text' as const, text }] });
const bad = (text: string) => ({ content: [{ type: 'text' as const, text }], isError: true });

server.setRequestHandler('tools/list', async () => ({ tools }));
server.setRequestHandler('tools/call', async (request) => {
  const args = (request.params.arguments ?? {}) as Record<string, unknown>;
  switch (request.params.name) {
    case 'crashy': {
      if (args.text === '') process.exit(7);
      return typeof args.text === 'string' ? ok(args.text) : bad('text must be a string');
    }
    case 'hangy': {
      if (typeof args.n !== 'number') return bad('n must be a number');
      if (args.n < 0) await new Promise(() => {});
      return ok(String(args.n * 2));
    }
    case 'strict': {
      const extra = Object.keys(args).filter((k) => k !== 'name' && k !== 'count');
      if (extra.length) return bad(`unknown argument ${extra[0]}`);
      if (typeof args.name !== 'string' || args.name.length < 1 || args.name.length > 20) return bad('name must be a string of 1 to 20 characters');
      const count = 'count' in args ? args.count : 1;
      if (typeof count !== 'number' || !Number.isInteger(count) || count < 0 || count > 5) return bad('count must be an integer from 0 to 5');
      return ok(args.name.repeat(count));
    }
    case 'rude': {
      if (typeof args.flag !== 'boolean' || Object.keys(args).length !== 1) throw new ProtocolError(-32602, 'flag must be a boolean and alone');
      return ok(String(!args.flag));
    }
    case 'blocky': {
      if (typeof args.pattern !== 'string') return bad('pattern must be a string');
      let re: RegExp;
      try {
        re = new RegExp(args.pattern);
      } catch (err) {
        return bad(`invalid pattern: ${(err as Error).message}`);
      }
      return ok(String(re.test(typeof args.text === 'string' ? args.text : 'hello')));
    }
    default:
      throw new ProtocolError(-32602, `Tool ${request.params.name} not found`);
  }
});

await server.connect(new StdioServerTransport());
