/**
 * The options of `serveOverHttp` and of `mcp-gym serve --http`: the bearer token (its scheme in
 * any case; an empty one refused at start) and `--allowed-host` (more names accepted in the Host
 * and Origin headers). The CLI tests run the compiled dist/ (node scripts/build.mjs).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bundledServer, serveOverHttp, type HttpServing } from '../../servers/index.ts';
import { CLI, ROOT } from '../helpers.ts';

const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
});

/** The HTTP status of an MCP initialize request to `url` with these headers. */
function status(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end(INITIALIZE);
  });
}

describe('serveOverHttp: the bearer token', () => {
  let serving: HttpServing;
  beforeAll(async () => {
    serving = await serveOverHttp(bundledServer('calculator'), { port: 0, token: 'T0k-en' });
  });
  afterAll(async () => {
    await serving.close();
  });

  it('matches the Bearer scheme in any case (RFC 7235), and the token exactly', async () => {
    for (const authorization of ['Bearer T0k-en', 'bearer T0k-en', 'BEARER T0k-en', 'bEaReR T0k-en', 'Bearer   T0k-en', 'bearer\tT0k-en']) {
      expect(await status(serving.url, { authorization }), authorization).toBe(200);
    }
    for (const authorization of ['Bearer t0k-en', 'Bearer T0k-en2', 'BearerT0k-en', 'Basic T0k-en', 'Bearer', 'T0k-en', 'bearer ']) {
      expect(await status(serving.url, { authorization }), authorization).toBe(401);
    }
    expect(await status(serving.url)).toBe(401);
  });

  it('refuses to start with an empty token, or one no request could carry', async () => {
    for (const token of ['', ' T', 'T\n', 'a\u0000b']) {
      const err = await serveOverHttp(bundledServer('calculator'), { port: 0, token }).then(
        (s) => s.close().then(() => undefined),
        (e: unknown) => e as Error & { code?: string },
      );
      expect(err, JSON.stringify(token)).toBeInstanceOf(TypeError);
      expect(err!.code).toBe('ERR_INVALID_ARG_VALUE');
      expect(err!.message).toMatch(/^the bearer token (is empty|begins or ends with whitespace|holds a control character)/);
    }
  });
});

describe('serveOverHttp: allowedHosts', () => {
  let serving: HttpServing;
  beforeAll(async () => {
    serving = await serveOverHttp(bundledServer('calculator'), { port: 0, allowedHosts: ['gym.example', 'Box.LAN', 'fd00::7', 'bücher.example'] });
  });
  afterAll(async () => {
    await serving.close();
  });

  it('accepts the given names (any case, any port, IPv6 with or without brackets, IDN) beside localhost names', async () => {
    const port = serving.port;
    const accepted = [
      `gym.example:${port}`,
      'gym.example',
      `GYM.Example:${port}`,
      `box.lan:${port}`,
      `[fd00::7]:${port}`,
      `xn--bcher-kva.example:${port}`,
      `localhost:${port}`,
      `127.0.0.1:${port}`,
      `[::1]:${port}`,
    ];
    for (const host of accepted) expect(await status(serving.url, { host }), host).toBe(200);
    for (const host of [`evil.example:${port}`, `gym.example.evil.example:${port}`, `[fd00::8]:${port}`])
      expect(await status(serving.url, { host }), host).toBe(403);
    expect(await status(serving.url, { origin: 'http://gym.example:8080' })).toBe(200);
    expect(await status(serving.url, { origin: 'https://box.lan' })).toBe(200);
    expect(await status(serving.url, { origin: 'http://evil.example' })).toBe(403);
  });

  it('refuses names that are not host names, saying which', async () => {
    for (const [name, why] of [
      ['gym.example:3000', /allowed host 'gym\.example:3000' is not a host name: give the name without a port/],
      ['[::1]:80', /without a port/],
      ['', /allowed host '' is not a host name/],
      ['http://gym.example', /is not a host name/],
      ['a b', /is not a host name/],
      ['x/y', /is not a host name/],
    ] as const) {
      const err = await serveOverHttp(bundledServer('calculator'), { port: 0, allowedHosts: [name] }).then(
        (s) => s.close().then(() => undefined),
        (e: unknown) => e as Error & { code?: string },
      );
      expect(err, name).toBeInstanceOf(TypeError);
      expect(err!.code).toBe('ERR_INVALID_ARG_VALUE');
      expect(err!.message).toMatch(why);
    }
  });
});

describe('mcp-gym serve --http (the compiled CLI)', () => {
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const c of children.splice(0)) c.kill('SIGKILL');
  });

  /** Runs `mcp-gym serve ...`: resolves with its URL once serving, or its exit code and stderr. */
  function serve(args: string[], env: Record<string, string | undefined> = {}): Promise<{ url?: string; code?: number | null; stderr: string }> {
    const childEnv = { ...process.env, ...env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    const child = spawn(process.execPath, [CLI, 'serve', ...args], { cwd: ROOT, env: childEnv, stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(child);
    return new Promise((resolve) => {
      let stderr = '';
      child.stderr!.setEncoding('utf8');
      child.stderr!.on('data', (chunk: string) => {
        stderr += chunk;
        const m = /serving on (http:\/\/\S+)/.exec(stderr);
        if (m) resolve({ url: m[1]!, stderr });
      });
      child.once('exit', (code) => resolve({ code, stderr }));
    });
  }

  it('refuses an empty --token or MCP_GYM_TOKEN at start, with a usage error (exit 2)', async () => {
    const flag = await serve(['calculator', '--http', '--port', '0', '--token', ''], { MCP_GYM_TOKEN: undefined });
    expect(flag.url).toBeUndefined();
    expect(flag.code).toBe(2);
    expect(flag.stderr).toMatch(/^mcp-gym: --token is empty: a server with an empty token would refuse every request \(leave --token out/);
    const env = await serve(['calculator', '--http', '--port', '0'], { MCP_GYM_TOKEN: '' });
    expect(env.code).toBe(2);
    expect(env.stderr).toMatch(/^mcp-gym: MCP_GYM_TOKEN is empty: .*\(unset MCP_GYM_TOKEN to serve without a token\)/);
    // A flag given empty is refused even when the environment holds a token.
    expect((await serve(['calculator', '--http', '--port', '0', '--token', ''], { MCP_GYM_TOKEN: 'fine' })).code).toBe(2);
    expect((await serve(['calculator', '--http', '--port', '0', '--token', ' padded'], { MCP_GYM_TOKEN: undefined })).stderr).toMatch(
      /--token begins or ends with whitespace/,
    );
  });

  it('accepts the bearer scheme in any case, with the token from --token or MCP_GYM_TOKEN', async () => {
    const flag = await serve(['calculator', '--http', '--port', '0', '--token', 'T1'], { MCP_GYM_TOKEN: undefined });
    expect(flag.stderr).toMatch(/\(bearer token required\)/);
    expect(await status(flag.url!, { authorization: 'bearer T1' })).toBe(200);
    expect(await status(flag.url!, { authorization: 'BEARER T1' })).toBe(200);
    expect(await status(flag.url!, { authorization: 'bearer T2' })).toBe(401);
    const env = await serve(['calculator', '--http', '--port', '0'], { MCP_GYM_TOKEN: 'E1' });
    expect(await status(env.url!, { authorization: 'Bearer E1' })).toBe(200);
    expect(await status(env.url!)).toBe(401);
  });

  it('--allowed-host (repeatable, or comma-separated) adds names accepted in the Host header', async () => {
    const { url, stderr } = await serve(['calculator', '--http', '--port', '0', '--allowed-host', 'gym.example, box.lan', '--allowed-host', 'other.test'], {
      MCP_GYM_TOKEN: undefined,
    });
    expect(url, stderr).toBeDefined();
    expect(stderr).toMatch(/also accepting Host gym\.example, box\.lan, other\.test/);
    const port = new URL(url!).port;
    for (const host of [`gym.example:${port}`, `box.lan:${port}`, `other.test:${port}`, `localhost:${port}`])
      expect(await status(url!, { host }), host).toBe(200);
    expect(await status(url!, { host: `evil.test:${port}` })).toBe(403);
    // Without the flag, the same name is refused.
    const plain = await serve(['calculator', '--http', '--port', '0'], { MCP_GYM_TOKEN: undefined });
    expect(await status(plain.url!, { host: `gym.example:${new URL(plain.url!).port}` })).toBe(403);
  });

  it('refuses an --allowed-host that is not a host name, with a usage error', async () => {
    const port = await serve(['calculator', '--http', '--port', '0', '--allowed-host', 'gym.example:3000']);
    expect(port.code).toBe(2);
    expect(port.stderr).toMatch(/^mcp-gym: allowed host 'gym\.example:3000' is not a host name: give the name without a port/);
    const empty = await serve(['calculator', '--http', '--port', '0', '--allowed-host', 'a,,b']);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/^mcp-gym: --allowed-host needs a host name/);
  });

  it('lists --allowed-host in the help', async () => {
    const help = await new Promise<string>((resolve) => {
      const child = spawn(process.execPath, [CLI, '--help'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] });
      let out = '';
      child.stdout!.setEncoding('utf8');
      child.stdout!.on('data', (c: string) => (out += c));
      child.once('exit', () => resolve(out));
    });
    expect(help).toMatch(/--allowed-host N {2}also accept N in the Host and Origin headers/);
    expect(help).toMatch(/--token T .*MCP_GYM_TOKEN.*not empty/);
  });
});
