import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  extractCode,
  jsonEqual,
  LOCKDOWN_FILE,
  networkNamespaceLauncher,
  runCode,
  sandboxFlags,
  sandboxLaunch,
  stripExports,
  type CodeRunResult,
  type CodeTest,
} from '../../src/env/code-runner.ts';

const ADD_TESTS: CodeTest[] = [
  { input: [1, 2], output: 3 },
  { input: [2, 2], output: 4 },
  { input: [-1, 1], output: 0 },
];
const PASSWD = existsSync('/etc/passwd') ? readFileSync('/etc/passwd', 'utf8') : '';
const HAS_PROC = existsSync('/proc/self/status');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Every run's child must be gone by the time its result is returned. */
const pids: number[] = [];
async function run(source: string, functionName: string, tests: CodeTest[], extra: { timeoutMs?: number; memoryMb?: number } = {}): Promise<CodeRunResult> {
  const result = await runCode(source, { functionName, tests, ...extra });
  expect(result.pid).toBeTypeOf('number');
  pids.push(result.pid!);
  return result;
}

afterEach(() => {
  for (const pid of pids.splice(0)) expect(alive(pid), `child ${pid} is still running`).toBe(false);
});

/** A run's results and error as one string, to check that secrets do not appear anywhere in it. */
function everything(result: CodeRunResult): string {
  return JSON.stringify(result);
}

describe('extractCode', () => {
  it('takes the last js/javascript/unmarked fenced block, else the whole text', () => {
    expect(extractCode('Here:\n```js\nfunction add(a, b) { return a + b; }\n```\nDone.')).toBe('function add(a, b) { return a + b; }');
    expect(extractCode('```javascript\nconst x = 1;\n```')).toBe('const x = 1;');
    expect(extractCode('```\nfirst\n```\ntext\n```JS\nsecond\nline\n```\n')).toBe('second\nline');
    expect(extractCode('```js\nthe code\n```\nand an example:\n```python\nprint(1)\n```')).toBe('the code');
    expect(extractCode('~~~~js\ntilde\n```\nstill in\n~~~~')).toBe('tilde\n```\nstill in');
    expect(extractCode('```js\nunclosed\nto the end')).toBe('unclosed\nto the end');
    expect(extractCode('function add(a, b) { return a + b; }')).toBe('function add(a, b) { return a + b; }');
    expect(extractCode('```python\nprint(1)\n```')).toBe('```python\nprint(1)\n```');
  });

  it('stripExports turns ES-module exports into script declarations', () => {
    expect(stripExports('export function add() {}\nexport default async function b() {}\nexport const c = 1;\nexport { add };\nexport default add;')).toBe(
      'function add() {}\nasync function b() {}\nconst c = 1;\n\n',
    );
  });

  it('jsonEqual compares JSON values deeply, with -0 equal to 0', () => {
    expect(jsonEqual({ a: [1, { b: null }], c: 'x' }, { c: 'x', a: [1, { b: null }] })).toBe(true);
    expect(jsonEqual(-0, 0)).toBe(true);
    expect(jsonEqual([1, 2], [2, 1])).toBe(false);
    expect(jsonEqual({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(jsonEqual({ a: 1, b: undefined }, { a: 1 })).toBe(true);
    expect(jsonEqual([1], { 0: 1 })).toBe(false);
    expect(jsonEqual('1', 1)).toBe(false);
    expect(jsonEqual(NaN, NaN)).toBe(false);
  });
});

describe('runCode', () => {
  it('a correct function passes every test', async () => {
    const r = await run('function add(a, b) { return a + b; }', 'add', ADD_TESTS);
    expect(r).toMatchObject({ passed: 3, total: 3, fraction: 1 });
    expect(r.error).toBeUndefined();
    expect(r.results).toEqual([
      { ok: true, got: 3 },
      { ok: true, got: 4 },
      { ok: true, got: 0 },
    ]);
  });

  it('a wrong function scores 0 and shows what it returned', async () => {
    const r = await run('function add(a, b) { return a - b; }', 'add', ADD_TESTS);
    expect(r).toMatchObject({ passed: 0, total: 3, fraction: 0 });
    expect(r.results.map((x) => x.got)).toEqual([-1, 0, -2]);
    expect(r.results.every((x) => !x.ok)).toBe(true);
  });

  it('a partly correct function scores the fraction passed; a thrown error fails one test', async () => {
    const tests: CodeTest[] = [
      { input: [[3, 1, 2]], output: [1, 2, 3] },
      { input: [[]], output: [] },
      { input: [[10, 9]], output: [9, 10] },
      { input: [null], output: [] },
    ];
    const r = await run('function sortNums(xs) { return xs.length > 2 ? [...xs].sort((a, b) => a - b) : [...xs]; }', 'sortNums', tests);
    expect(r).toMatchObject({ passed: 2, total: 4, fraction: 0.5 });
    expect(r.results[2]).toEqual({ ok: false, got: [10, 9] });
    expect(r.results[3]!.ok).toBe(false);
    expect(r.results[3]!.error).toMatch(/^threw TypeError: .*null/);
  });

  it('runs the code of a fenced answer; also with `export`, module.exports, const and async functions', async () => {
    const answer = 'Sure! Here it is:\n\n```js\nexport function add(a, b) {\n  return a + b;\n}\n```\n\nIt adds the numbers.';
    expect((await run(extractCode(answer), 'add', ADD_TESTS)).fraction).toBe(1);
    expect((await run('module.exports = { add: (a, b) => a + b };', 'add', ADD_TESTS)).fraction).toBe(1);
    expect((await run('const module = null;\nconst add = (a, b) => a + b;', 'add', ADD_TESTS)).fraction).toBe(1);
    expect((await run('async function add(a, b) { await null; return a + b; }', 'add', ADD_TESTS)).fraction).toBe(1);
  });

  it('compares JSON values: -0 equals 0; NaN, undefined, Maps, cycles and huge results fail with a message', async () => {
    const source = `function f(kind) {
      switch (kind) {
        case 'zero': return -0;
        case 'obj': return { b: [1, 'two', null, true], a: { c: undefined } };
        case 'nan': return NaN;
        case 'undef': return undefined;
        case 'map': return new Map();
        case 'cycle': { const o = {}; o.self = o; return o; }
        case 'huge': return 'x'.repeat(200000);
        case 'reject': return Promise.reject(new RangeError('nope'));
        case 'never': return new Promise(() => {});
      }
    }`;
    const tests: CodeTest[] = ['zero', 'obj', 'nan', 'undef', 'map', 'cycle', 'huge', 'reject', 'never'].map((kind) => ({
      input: [kind],
      output: kind === 'zero' ? 0 : kind === 'obj' ? { a: {}, b: [1, 'two', null, true] } : null,
    }));
    const r = await run(source, 'f', tests);
    expect(r.passed).toBe(2);
    expect(r.results.slice(0, 2).map((x) => x.ok)).toEqual([true, true]);
    const errors = r.results.slice(2).map((x) => x.error);
    expect(errors).toEqual([
      'the result is not JSON: it holds NaN',
      'the result is not JSON: it is or holds undefined',
      'the result is not JSON: it holds a Map, not a plain object',
      'the result is not JSON: it holds a circular reference',
      'the result is larger than 100000 characters of JSON',
      'threw RangeError: nope',
      'returned a promise that did not settle',
    ]);
    expect(r.error).toBeUndefined();
  });

  it('a syntax error scores 0 with a clear error', async () => {
    const r = await run('function add(a, b) {\n  return a +;\n}', 'add', ADD_TESTS);
    expect(r).toMatchObject({ passed: 0, total: 3, fraction: 0 });
    expect(r.error).toMatch(/^syntax error: Unexpected token ';' \(line 2\)$/);
    expect(r.results.every((x) => x.error === 'not run')).toBe(true);
  });

  it('a missing function, or one that is not a function, scores 0 with a clear error', async () => {
    expect((await run('function plus(a, b) { return a + b; }', 'add', ADD_TESTS)).error).toBe('function add is not defined');
    const r = await run('var add = 42;', 'add', ADD_TESTS);
    expect(r.error).toBe('add is not a function (it is number)');
    expect(r.fraction).toBe(0);
  });

  it('an endless loop at top level is stopped at the timeout', async () => {
    const started = Date.now();
    const r = await run('while (true) {}\nfunction add(a, b) { return a + b; }', 'add', ADD_TESTS, { timeoutMs: 1000 });
    expect(Date.now() - started).toBeLessThan(2000);
    expect(r).toMatchObject({ passed: 0, fraction: 0, error: 'timed out after 1000 ms' });
    expect(r.results.every((x) => !x.ok && x.error === 'timed out')).toBe(true);
  });

  it('an endless loop in the function is stopped at the timeout; tests done before it count', async () => {
    const started = Date.now();
    const r = await run('function add(a, b) { if (a !== 1) while (true) {} return a + b; }', 'add', ADD_TESTS, { timeoutMs: 1000 });
    expect(Date.now() - started).toBeLessThan(2000);
    expect(r.error).toBe('timed out after 1000 ms');
    expect(r.results).toEqual([
      { ok: true, got: 3 },
      { ok: false, error: 'timed out' },
      { ok: false, error: 'timed out' },
    ]);
    expect(r.fraction).toBeCloseTo(1 / 3);

    const all = await run('function add() { for (;;) {} }', 'add', ADD_TESTS, { timeoutMs: 1000 });
    expect(all).toMatchObject({ passed: 0, fraction: 0, error: 'timed out after 1000 ms' });
  });

  it('a looping getter on a thrown value, or a thrown proxy, cannot hang the runner', async () => {
    // A thrown object whose `message` getter loops: the child describes it under the vm timeout.
    const started = Date.now();
    const r = await run('function add() { throw { get message() { for (;;) {} } }; }', 'add', ADD_TESTS, { timeoutMs: 800 });
    expect(Date.now() - started).toBeLessThan(1800);
    expect(r).toMatchObject({ fraction: 0, error: 'timed out after 800 ms' });
    // A proxy thrown at top level: described without running its traps.
    const p = await run(
      'throw new Proxy({}, { get() { for (;;) {} }, getPrototypeOf() { for (;;) {} }, getOwnPropertyDescriptor() { for (;;) {} } });',
      'add',
      ADD_TESTS,
    );
    expect(p.error).toBe('the code threw at top level: a value that is not an Error');
  });

  it('a memory bomb fails cleanly at the heap cap, and the next run works', async () => {
    const before = process.memoryUsage().rss;
    const r = await run('const a = []; for (;;) a.push(new Array(1e6).fill(1));\nfunction add(a, b) { return a + b; }', 'add', ADD_TESTS);
    expect(r).toMatchObject({ passed: 0, fraction: 0, error: 'out of memory (heap limit 64 MB)' });
    expect(process.memoryUsage().rss - before).toBeLessThan(100 * 1024 * 1024);
    expect((await run('function add(a, b) { return a + b; }', 'add', ADD_TESTS)).fraction).toBe(1);
  });

  it.skipIf(!HAS_PROC)('buffers, which the heap cap does not count, are capped by resident memory', async () => {
    const r = await run('const a = []; for (;;) a.push(new Uint8Array(5e7).fill(1));', 'add', ADD_TESTS, { timeoutMs: 10_000 });
    expect(r).toMatchObject({ fraction: 0, error: 'out of memory (over 256 MB resident)' });
  });

  it('require, process and import() are not there', async () => {
    const req = await run("const fs = require('fs');\nfunction add() { return fs.readFileSync('/etc/passwd', 'utf8'); }", 'add', ADD_TESTS);
    expect(req.error).toBe('the code threw at top level: ReferenceError: require is not defined');
    const exit = await run('process.exit(0);\nfunction add(a, b) { return a + b; }', 'add', ADD_TESTS);
    expect(exit.error).toBe('the code threw at top level: ReferenceError: process is not defined');
    const imp = await run(
      "async function add() { try { const fs = await import('fs'); return fs.readFileSync('/etc/passwd', 'utf8'); } catch (e) { return 'failed: ' + e; } }",
      'add',
      ADD_TESTS,
    );
    expect(imp.results[0]).toEqual({ ok: false, got: 'failed: import() is not allowed' });
    const globals = await run(
      "function f() { return ['process', 'require', 'Buffer', 'setTimeout', 'fetch', 'globalThis'].filter((n) => n in globalThis); }",
      'f',
      [{ input: [], output: ['globalThis'] }],
    );
    expect(globals.fraction).toBe(1);
    for (const r of [req, exit, imp]) expect(r.fraction).toBe(0);
  });

  it('the classic vm escapes find no process and cannot read files', async () => {
    const attempts = {
      // this.constructor.constructor is the sandbox's own Function, and it may not compile strings
      ctor: "return this.constructor.constructor('return process')().mainModule.require('fs').readFileSync('/etc/passwd', 'utf8');",
      binding: "const p = this.constructor.constructor('return process')(); return String(p.binding('fs').readFileUtf8('/etc/passwd', 0));",
      arrayCtor: "return [].constructor.constructor('return process')().mainModule.require('child_process').execSync('cat /etc/passwd').toString();",
      // the functions on the stack: those of the child's own realm are strict, so frames do not give them away
      frames:
        "Error.prepareStackTrace = (e, s) => s; const s = new Error().stack; Error.prepareStackTrace = undefined; return s.map((f) => f.getFunction()).filter(Boolean).map((fn) => fn.constructor('return process')().pid);",
      // import() is refused with a plain string (an Error from the child's realm would carry its constructors)
      importError: "return import('fs').then(null, (e) => e.constructor.constructor('return process')().pid);",
      caller: 'return String(f.caller) + String(arguments.callee.caller);',
      // the global object has no prototype from outside: its constructor chain ends at the sandbox's own Function
      ownFunction: 'return this.constructor.constructor === Function && [].constructor.constructor === Function;',
    };
    const source = `function f(which) { try { ${Object.entries(attempts)
      .map(([k, v]) => `if (which === '${k}') { ${v} }`)
      .join('\n')} } catch (e) { return 'failed: ' + e.message; } }`;
    const names = Object.keys(attempts);
    const r = await run(
      source,
      'f',
      names.map((n) => ({ input: [n], output: 'escaped' })),
    );
    expect(r.passed).toBe(0);
    const outcome = Object.fromEntries(names.map((n, i) => [n, r.results[i]!.got ?? r.results[i]!.error]));
    expect(outcome).toEqual({
      ctor: 'failed: Code generation from strings disallowed for this context',
      binding: 'failed: Code generation from strings disallowed for this context',
      arrayCtor: 'failed: Code generation from strings disallowed for this context',
      frames: 'failed: Code generation from strings disallowed for this context',
      importError: 'threw EvalError: Code generation from strings disallowed for this context',
      caller: 'nullnull',
      ownFunction: true,
    });
    if (PASSWD) expect(everything(r)).not.toContain(PASSWD.split('\n')[0]);
  });

  it('refuses bad options', async () => {
    await expect(runCode('', { functionName: 'not a name', tests: ADD_TESTS })).rejects.toThrow(/identifier/);
    await expect(runCode('', { functionName: 'delete', tests: ADD_TESTS })).rejects.toThrow(/identifier/);
    await expect(runCode('', { functionName: 'add', tests: [] })).rejects.toThrow(/1 to 100/);
    await expect(runCode('', { functionName: 'add', tests: Array.from({ length: 101 }, () => ADD_TESTS[0]!) })).rejects.toThrow(/1 to 100/);
    await expect(runCode('', { functionName: 'add', tests: [{ input: 1 as never, output: 1 }] })).rejects.toThrow(/array/);
    expect(await runCode('   ', { functionName: 'add', tests: ADD_TESTS })).toMatchObject({ fraction: 0, error: 'there is no code' });
  });
});

describe('the sandbox flags (Node permission model)', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('let the child read its own script and nothing else: no writes, no processes, no workers, no code from strings', async () => {
    dir = mkdtempSync(join(tmpdir(), 'mcp-gym-code-probe-'));
    const probe = join(dir, 'probe.mjs');
    const written = join(dir, 'written.txt');
    writeFileSync(
      probe,
      `import fs from 'node:fs';
       import cp from 'node:child_process';
       import { Worker } from 'node:worker_threads';
       const attempt = (f) => { try { const v = f(); return 'allowed: ' + String(v).slice(0, 200); } catch (e) { return e.code ?? e.message; } };
       const out = {
         readSelf: attempt(() => fs.readFileSync(${JSON.stringify(probe)}, 'utf8').length > 0),
         readPasswd: attempt(() => fs.readFileSync('/etc/passwd', 'utf8')),
         readDir: attempt(() => fs.readdirSync('/')),
         write: attempt(() => fs.writeFileSync(${JSON.stringify(written)}, 'x')),
         spawn: attempt(() => cp.execSync('echo hi')),
         spawnSync: attempt(() => cp.spawnSync('/bin/sh', ['-c', 'echo hi']).stdout),
         worker: attempt(() => new Worker('1', { eval: true })),
         binding: attempt(() => process.binding('fs')),
         codeFromStrings: attempt(() => Function('return 1')()),
         env: Object.keys(process.env).join(','),
       };
       process.stdout.write(JSON.stringify(out));`,
    );
    const child = spawn(process.execPath, [...sandboxFlags(probe, 64), probe], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect(code, stderr).toBe(0);
    expect(stderr).toMatch(/ExperimentalWarning: Permission/);
    expect(JSON.parse(stdout)).toEqual({
      readSelf: 'allowed: true',
      readPasswd: 'ERR_ACCESS_DENIED',
      readDir: 'ERR_ACCESS_DENIED',
      write: 'ERR_ACCESS_DENIED',
      spawn: 'ERR_ACCESS_DENIED',
      spawnSync: 'ERR_ACCESS_DENIED',
      worker: 'ERR_ACCESS_DENIED',
      binding: 'ERR_ACCESS_DENIED',
      codeFromStrings: 'Code generation from strings disallowed for this context',
      env: 'PATH',
    });
    expect(existsSync(written)).toBe(false);
  });
});

/** Runs `command args` and returns its stdout, stderr and exit code. */
async function runProcess(command: string, args: string[], cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd, env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { code, stdout, stderr };
}

describe('the sandbox has no network', () => {
  let dir: string | undefined;
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    socket.end('hello');
  });
  let port = 0;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });
  const listen = async () => {
    if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    port = (server.address() as AddressInfo).port;
  };

  /** A script that tries every way to reach 127.0.0.1 from the child's own realm (as code that escaped the vm would). */
  const probeSource = (lockdown: boolean) => `
    import net from 'node:net';
    import http from 'node:http';
    import dgram from 'node:dgram';
    import dns from 'node:dns';
    ${lockdown ? `import { lockDownNetwork } from ${JSON.stringify(LOCKDOWN_FILE)}; lockDownNetwork();` : ''}
    const attempt = (f) => new Promise((resolve) => {
      try {
        f(resolve);
      } catch (e) {
        resolve(e.code ?? e.message);
      }
      setTimeout(() => resolve('no answer'), 3000);
    });
    const socket = (s, resolve) => { s.on('data', (d) => resolve('connected: ' + d)); s.on('error', (e) => resolve(e.code ?? e.message)); };
    const out = {
      connect: await attempt((resolve) => socket(net.connect(${'${PORT}'}, '127.0.0.1'), resolve)),
      stdoutSocket: await attempt((resolve) => { const S = process.stdout.constructor; socket(new S().connect(${'${PORT}'}, '127.0.0.1'), resolve); }),
      http: await attempt((resolve) => http.get('http://127.0.0.1:${'${PORT}'}/', () => resolve('connected')).on('error', (e) => resolve(e.code ?? e.message))),
      fetch: await attempt((resolve) => fetch('http://127.0.0.1:${'${PORT}'}/').then(() => resolve('connected'), (e) => resolve(e.cause?.code ?? e.code ?? e.message))),
      listen: await attempt((resolve) => net.createServer().listen(0, '127.0.0.1', () => resolve('listening')).on('error', (e) => resolve(e.code ?? e.message))),
      udp: await attempt((resolve) => { const u = dgram.createSocket('udp4'); u.send('x', ${'${PORT}'}, '127.0.0.1', (e) => resolve(e ? e.code ?? e.message : 'sent')); }),
      dns: await attempt((resolve) => dns.lookup('localhost', (e, a) => resolve(e ? e.code ?? e.message : 'resolved ' + a))),
      restore: await attempt((resolve) => { delete net.Socket.prototype.connect; net.Socket.prototype.connect = () => 'mine'; resolve(String(new net.Socket().connect === net.Socket.prototype.connect && net.Socket.prototype.connect() === 'mine')); }),
    };
    process.stdout.write(JSON.stringify(out));
    process.exit(0);`;

  it('the lockdown the child runs first refuses every way to connect, listen or resolve, for good', async () => {
    await listen();
    dir = mkdtempSync(join(tmpdir(), 'mcp-gym-net-probe-'));
    const probe = join(dir, 'probe.mjs');
    writeFileSync(probe, probeSource(true).replaceAll('${PORT}', String(port)));
    // node itself, without a network namespace: the lockdown alone.
    const r = await runProcess(process.execPath, [...sandboxFlags([probe, LOCKDOWN_FILE], 64), probe], dir);
    expect(r.code, r.stderr).toBe(0);
    const denied = 'ERR_ACCESS_DENIED';
    expect(JSON.parse(r.stdout)).toEqual({
      connect: denied,
      stdoutSocket: denied,
      http: denied,
      fetch: denied,
      listen: denied,
      udp: denied,
      dns: denied,
      restore: expect.stringMatching(/Cannot (delete|assign)/),
    });
    expect(connections).toBe(0);
  });

  it.skipIf(networkNamespaceLauncher() === null)(
    'where user namespaces are allowed, the child runs in a network namespace of its own: 127.0.0.1 is unreachable',
    async () => {
      await listen();
      dir = mkdtempSync(join(tmpdir(), 'mcp-gym-net-probe-'));
      const probe = join(dir, 'probe.mjs');
      writeFileSync(probe, probeSource(false).replaceAll('${PORT}', String(port)));
      const launch = sandboxLaunch([probe], 64);
      expect(launch.network).toBe('namespace');
      const r = await runProcess(launch.command, [...launch.args, probe], dir);
      expect(r.code, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout) as Record<string, string>;
      expect(out.connect).toBe('ENETUNREACH');
      expect(out.stdoutSocket).toBe('ENETUNREACH');
      expect(out.http).toBe('ENETUNREACH');
      expect(out.fetch).toBe('ENETUNREACH');
      expect(connections).toBe(0);
    },
  );

  it('the code under test reaches no network, and a run still works under it all', async () => {
    await listen();
    const r = await run(
      `function f() { const out = [];
         for (const name of ['require', 'process', 'fetch', 'WebSocket', 'XMLHttpRequest']) out.push(name in globalThis);
         try { this.constructor.constructor('return process')(); out.push('escaped'); } catch (e) { out.push(e.message); }
         return out; }
       function add(a, b) { return a + b; }`,
      'f',
      [{ input: [], output: [false, false, false, false, false, 'Code generation from strings disallowed for this context'] }],
    );
    expect(r.fraction).toBe(1);
    expect((await run('function add(a, b) { return a + b; }', 'add', ADD_TESTS)).fraction).toBe(1);
    expect(connections).toBe(0);
    server.close();
  });
});
