/**
 * Every bundled server, over stdio and over streamable HTTP, answers tools/list and a tools/call
 * from a client of the SDK's v1 line (@modelcontextprotocol/sdk 1.x), as most hosts run today.
 * The servers are started through the real command line (`mcp-gym serve <name> [--http]`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1Stdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as V1Http } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { bundledServers } from '../../servers/index.ts';
import { CLI, ROOT } from '../helpers.ts';

/** One representative call per server, and what its structured result must contain. */
const SAMPLE: Record<string, { name: string; arguments: Record<string, unknown>; expect: Record<string, unknown> }> = {
  calculator: { name: 'evaluate', arguments: { expression: '2^100 / 4 + 1/2' }, expect: { value: '633825300114114700748351602689/2' } },
  kv: { name: 'incr', arguments: { key: 'n', by: 41 }, expect: { value: '41' } },
  files: { name: 'write_file', arguments: { path: 'a/b.txt', content: 'hi' }, expect: { path: 'a/b.txt', created: true } },
  search: { name: 'open', arguments: { id: 'city-001' }, expect: { id: 'city-001' } },
  sql: { name: 'query', arguments: { sql: 'SELECT count(*) AS n FROM customers' }, expect: { columns: ['n'] } },
};

const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
});

/** Starts `mcp-gym serve <name> --http --port 0`-like on a free port and returns its URL. */
async function startHttp(name: string, token: string): Promise<string> {
  const child = spawn(process.execPath, [CLI, 'serve', name, '--http', '--port', '0', '--token', token], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      err += chunk;
      const m = /serving on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`serve ${name} exited with ${code}: ${err}`)));
  });
}

async function exercise(client: V1Client, name: string) {
  const { tools } = await client.listTools();
  const def = bundledServers[name]!;
  expect(tools.map((t) => t.name).sort()).toEqual(def.tools.map((t) => t.name).sort());
  for (const t of tools) {
    expect(t.inputSchema.type).toBe('object');
    expect(t.outputSchema?.type).toBe('object');
  }
  const sample = SAMPLE[name]!;
  const result = await client.callTool({ name: sample.name, arguments: sample.arguments });
  expect(result.isError ?? false).toBe(false);
  expect(result.structuredContent).toMatchObject(sample.expect);
}

describe.each(Object.keys(bundledServers))('%s server with a v1 SDK client', (name) => {
  it('over stdio', async () => {
    const client = new V1Client({ name: 'v1-host', version: '1.0.0' });
    await client.connect(new V1Stdio({ command: process.execPath, args: [CLI, 'serve', name], cwd: ROOT, stderr: 'ignore' }));
    await exercise(client, name);
    await client.close();
  });

  it('over streamable HTTP with a bearer token', async () => {
    const url = await startHttp(name, 'tok-' + name);
    const client = new V1Client({ name: 'v1-host', version: '1.0.0' });
    await client.connect(new V1Http(new URL(url), { requestInit: { headers: { Authorization: `Bearer tok-${name}` } } }));
    await exercise(client, name);
    await client.close();
    const denied = new V1Client({ name: 'v1-host', version: '1.0.0' });
    await expect(denied.connect(new V1Http(new URL(url)))).rejects.toThrow(/401|Unauthorized/);
  });
});
