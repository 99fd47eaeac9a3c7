/**
 * The engine behind a reward check of kind `code`: an agent's answer holds JavaScript that defines a
 * function; run it on test cases and report the fraction that return the expected JSON value.
 *
 * The code is untrusted (a model in training wrote it), so every run gets a fresh `node` process
 * (src/env/code-runner-child.js) that is killed at the run's deadline, and inside it the code runs
 * in a `node:vm` context. vm alone is no security boundary; the boundary is the process:
 *  - Node's permission model (`--experimental-permission`): the child may read its own script (and
 *    the lockdown module it imports) and nothing else; no file writes, child processes, workers or
 *    native addons, no `process.binding`;
 *  - no network: the child disables every JavaScript way to connect, listen or resolve before it
 *    reads the code (code-runner-lockdown.js; Node 20's permission model does not cover the
 *    network), and where unprivileged user namespaces are allowed (`unshare -rn` works: most Linux
 *    systems) it runs in a network namespace of its own, where even 127.0.0.1 is unreachable;
 *  - `--disallow-code-generation-from-strings` for the child's own realm, so that a constructor that
 *    leaks out of the sandbox cannot compile code there; inside the sandbox eval, `new Function`
 *    and WebAssembly compilation are off too, and `import()` is refused;
 *  - memory: a V8 heap cap (`--max-old-space-size`) and, on Linux, a cap on resident memory
 *    (ArrayBuffers are not on the V8 heap), checked every few milliseconds;
 *  - time: vm timeouts on every entry into the sandbox, ending at the run's deadline, and SIGKILL
 *    from here shortly after it, whatever the child is doing;
 *  - no environment but PATH, an empty temporary working directory, and stdin/stdout pipes
 *    (JSON in, one JSON line out) with a cap on what is read back.
 * The expected outputs never reach the child: results come back as JSON and are compared here, so
 * code that escaped the sandbox could still not report passes it did not earn without computing them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface CodeTest {
  /** The arguments: the function is called as fn(...input). JSON values. */
  input: unknown[];
  /** The expected return value (a JSON value; a returned promise is awaited first). */
  output: unknown;
}

export interface CodeRunOptions {
  /** The name of the function to call (a top-level declaration, or a property of module.exports). */
  functionName: string;
  /** At most MAX_TESTS cases. */
  tests: CodeTest[];
  /** The whole run, process start included. Default 2000 ms. */
  timeoutMs?: number;
  /** The child's V8 heap cap. Default 64 MB. Resident memory is capped at this plus RSS_HEADROOM_MB. */
  memoryMb?: number;
}

export interface CodeTestResult {
  ok: boolean;
  /** Why it failed, unless it returned a wrong value (then see `got`). */
  error?: string;
  /** What the function returned, when it was a JSON value. */
  got?: unknown;
}

export interface CodeRunResult {
  passed: number;
  total: number;
  /** passed / total. */
  fraction: number;
  /** One per test, in order. */
  results: CodeTestResult[];
  /** What stopped the run as a whole, e.g. 'timed out after 2000 ms', 'syntax error: ...', 'function add is not defined'. */
  error?: string;
  /** The child process's id (it has exited by the time the result is returned). */
  pid?: number;
}

export const DEFAULT_TIMEOUT_MS = 2000;
export const DEFAULT_MEMORY_MB = 64;
export const MAX_TESTS = 100;
/** A result whose JSON is longer than this many characters counts as a failure. */
export const MAX_RESULT_CHARS = 100_000;
/** Longer code is not run. */
export const MAX_SOURCE_CHARS = 200_000;
/** Resident memory allowed on top of the heap cap: Node itself, the young generation, code, buffers. */
export const RSS_HEADROOM_MB = 192;
/** The child is killed this long after the run's deadline if it has not answered by then. */
const KILL_GRACE_MS = 500;
const RSS_POLL_MS = 20;
const MAX_STDERR_CHARS = 8192;
const MAX_TIMEOUT_MS = 600_000;

const CHILD_FILE = realpathSync(fileURLToPath(new URL('./code-runner-child.js', import.meta.url)));
/** The module the child imports to take the network away from itself. */
export const LOCKDOWN_FILE = realpathSync(fileURLToPath(new URL('./code-runner-lockdown.js', import.meta.url)));

const RESERVED = new Set(
  (
    'await break case catch class const continue debugger default delete do else enum eval export extends false finally for function if ' +
    'implements import in instanceof interface let new null package private protected public return static super switch this throw true try ' +
    'typeof var void while with yield arguments undefined NaN Infinity'
  ).split(' '),
);

/**
 * The code in an answer: the last fenced block marked js, javascript, mjs, cjs, jsx or node, or not
 * marked at all (``` or ~~~, at least three), else the whole text. An unclosed last fence runs to
 * the end of the text.
 */
export function extractCode(answer: string): string {
  const lines = answer.split(/\r?\n/);
  const blocks: { lang: string; body: string[] }[] = [];
  let open: { fence: string; lang: string; body: string[] } | null = null;
  for (const line of lines) {
    if (!open) {
      const m = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/.exec(line);
      if (m) open = { fence: m[1]!, lang: m[2]!.toLowerCase(), body: [] };
    } else {
      const m = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(line);
      if (m && m[1]![0] === open.fence[0] && m[1]!.length >= open.fence.length) {
        blocks.push(open);
        open = null;
      } else {
        open.body.push(line);
      }
    }
  }
  if (open) blocks.push(open);
  const code = blocks.filter((b) => ['', 'js', 'javascript', 'mjs', 'cjs', 'jsx', 'node'].includes(b.lang)).at(-1);
  return code ? code.body.join('\n') : answer;
}

/**
 * Makes ES-module syntax that models often write runnable as a script: drops `export` before
 * declarations and `export { ... }` / `export default name;` lines.
 */
export function stripExports(source: string): string {
  return source
    .replace(/^([ \t]*)export[ \t]+(?:default[ \t]+)?(?=(?:async[ \t]+)?function\b|class\b|const\b|let\b|var\b)/gm, '$1')
    .replace(/^[ \t]*export[ \t]*\{[^}]*\}[ \t]*;?[ \t]*$/gm, '')
    .replace(/^[ \t]*export[ \t]+default[ \t]+[A-Za-z_$][\w$]*[ \t]*;?[ \t]*$/gm, '');
}

/**
 * The node flags of a sandboxed child that runs `script`: the permission model allowing reads of
 * `script` (and of any other files given: the modules it imports) only, no addons, no code
 * generation from strings in its own realm, vm's import() callback (so that import() in the
 * sandbox is refused with a plain string), and the heap cap.
 */
export function sandboxFlags(script: string | string[], memoryMb: number): string[] {
  const readable = typeof script === 'string' ? [script] : script;
  return [
    '--experimental-permission',
    // One flag per file: Node 20 reads no list in one flag.
    ...readable.map((file) => `--allow-fs-read=${file}`),
    '--no-addons',
    '--disallow-code-generation-from-strings',
    '--experimental-vm-modules',
    `--max-old-space-size=${memoryMb}`,
  ];
}

let netnsProbe: string | null | undefined;

/**
 * The `unshare` program when it can run a process in a network namespace of its own as this user
 * (`unshare -rn`: a user namespace mapping this user to root, and an empty network namespace), or
 * null. Probed once. `MCP_GYM_CODE_NETNS=0` turns it off.
 */
export function networkNamespaceLauncher(): string | null {
  if (netnsProbe !== undefined) return netnsProbe;
  netnsProbe = null;
  if (process.platform !== 'linux' || process.env.MCP_GYM_CODE_NETNS === '0') return netnsProbe;
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/bin', '/bin'].filter(Boolean);
  const unshare = dirs.map((d) => join(d, 'unshare')).find((f) => existsSync(f));
  if (!unshare) return netnsProbe;
  const r = spawnSync(unshare, ['-r', '-n', process.execPath, '-e', '0'], { stdio: 'ignore', timeout: 5000 });
  if (r.status === 0) netnsProbe = unshare;
  return netnsProbe;
}

/**
 * How to start a sandboxed child that runs `scripts[0]` (and may read the other files): the
 * command and its arguments up to the script, which the caller appends. Under `unshare -rn` where
 * that works (`network: 'namespace'`), else node itself (`network: 'lockdown'`: the child's own
 * lockdown alone keeps it off the network).
 */
export function sandboxLaunch(scripts: string[], memoryMb: number): { command: string; args: string[]; network: 'namespace' | 'lockdown' } {
  const flags = sandboxFlags(scripts, memoryMb);
  const unshare = networkNamespaceLauncher();
  if (unshare) return { command: unshare, args: ['-r', '-n', process.execPath, ...flags], network: 'namespace' };
  return { command: process.execPath, args: flags, network: 'lockdown' };
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Children still running when this process exits are killed with it. */
function track(child: ChildProcess): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
  live.add(child);
}

function checkOptions(options: CodeRunOptions): { timeoutMs: number; memoryMb: number; inputs: string[] } {
  const { functionName, tests } = options;
  if (typeof functionName !== 'string' || !/^[A-Za-z_$][\w$]*$/.test(functionName) || RESERVED.has(functionName)) {
    throw new TypeError(`functionName must be a JavaScript identifier; got ${JSON.stringify(functionName)}`);
  }
  if (!Array.isArray(tests) || tests.length < 1 || tests.length > MAX_TESTS) {
    throw new RangeError(`tests must hold 1 to ${MAX_TESTS} cases; got ${Array.isArray(tests) ? tests.length : typeof tests}`);
  }
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS)
    throw new RangeError(`timeoutMs must be an integer from 1 to ${MAX_TIMEOUT_MS}`);
  const memoryMb = options.memoryMb ?? DEFAULT_MEMORY_MB;
  if (!Number.isInteger(memoryMb) || memoryMb < 16 || memoryMb > 16_384) throw new RangeError('memoryMb must be an integer from 16 to 16384');
  const inputs = tests.map((t, i) => {
    if (!Array.isArray(t?.input)) throw new TypeError(`tests[${i}].input must be an array of arguments`);
    return JSON.stringify(t.input);
  });
  return { timeoutMs, memoryMb, inputs };
}

/** Deep equality of JSON values; numbers compare with === (so -0 equals 0); undefined-valued keys are absent. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => jsonEqual(x, b[i]));
  }
  const ka = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const kb = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** Resident memory of a process in MB, from /proc (Linux); undefined elsewhere or once it is gone. */
function residentMb(pid: number): number | undefined {
  try {
    const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Number(kb) / 1024;
  } catch {
    return undefined;
  }
}

type ChildReply = { results: ({ json: string } | { error: string })[]; error?: string; timedOut?: boolean };

/** The child's answer line, if it is one (it is checked: code that escaped could have written it). */
function parseReply(stdout: string, tests: number): ChildReply | undefined {
  const line = stdout.trimEnd().split('\n').at(-1);
  if (!line) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const { results, error, timedOut } = value as Record<string, unknown>;
  if (!Array.isArray(results) || results.length > tests) return undefined;
  if (error !== undefined && typeof error !== 'string') return undefined;
  if (timedOut !== undefined && typeof timedOut !== 'boolean') return undefined;
  const ok = results.every(
    (r: unknown) =>
      typeof r === 'object' && r !== null && (typeof (r as { json?: unknown }).json === 'string' || typeof (r as { error?: unknown }).error === 'string'),
  );
  return ok ? (value as ChildReply) : undefined;
}

interface ChildOutcome {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  killedFor?: 'timeout' | 'memory' | 'output';
  pid?: number;
}

function runChild(payload: string, timeoutMs: number, memoryMb: number, maxStdout: number): Promise<ChildOutcome> {
  const cwd = mkdtempSync(join(tmpdir(), 'mcp-gym-code-'));
  return new Promise<ChildOutcome>((resolve) => {
    const env: NodeJS.ProcessEnv = process.env.PATH === undefined ? {} : { PATH: process.env.PATH };
    const launch = sandboxLaunch([CHILD_FILE, LOCKDOWN_FILE], memoryMb);
    const child = spawn(launch.command, [...launch.args, CHILD_FILE], { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    track(child);
    const out: ChildOutcome = { stdout: '', stderr: '', code: null, signal: null, ...(child.pid === undefined ? {} : { pid: child.pid }) };
    let stdoutChars = 0;
    let done = false;
    const kill = (why: NonNullable<ChildOutcome['killedFor']>) => {
      out.killedFor ??= why;
      child.kill('SIGKILL');
    };
    const killTimer = setTimeout(() => kill('timeout'), timeoutMs + KILL_GRACE_MS);
    const rssLimit = memoryMb + RSS_HEADROOM_MB;
    const rssTimer = setInterval(() => {
      if (child.pid !== undefined && (residentMb(child.pid) ?? 0) > rssLimit) kill('memory');
    }, RSS_POLL_MS);
    let closeTimer: ReturnType<typeof setTimeout> | undefined;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(killTimer);
      clearInterval(rssTimer);
      clearTimeout(closeTimer);
      live.delete(child);
      rmSync(cwd, { recursive: true, force: true });
      resolve(out);
    };
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      stdoutChars += chunk.length;
      if (stdoutChars > maxStdout) kill('output');
      else out.stdout += chunk;
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      out.stderr = (out.stderr + chunk).slice(-MAX_STDERR_CHARS);
    });
    child.stdin.on('error', () => {}); // EPIPE when the child is gone before reading it all
    child.once('error', (err) => {
      out.stderr += `\n${err.message}`;
      finish();
    });
    child.once('exit', (code, signal) => {
      out.code = code;
      out.signal = signal;
      // Output is read until the pipes close; nothing else can hold them, but do not wait forever.
      closeTimer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, 1000);
    });
    child.once('close', finish);
    child.stdin.end(payload);
  });
}

/** The last line of the child's stderr that says something (not the permission model's warning). */
function stderrSummary(stderr: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !/ExperimentalWarning|--trace-warnings/.test(l));
  return (lines.find((l) => /^(\w*Error|FATAL|Fatal)/.test(l)) ?? lines.at(-1) ?? '').slice(0, 300);
}

/** Runs `source` (JavaScript) and calls `options.functionName` on each test's input in a sandboxed child process. */
export async function runCode(source: string, options: CodeRunOptions): Promise<CodeRunResult> {
  const { timeoutMs, memoryMb, inputs } = checkOptions(options);
  const { tests } = options;
  const total = tests.length;
  const failAll = (error: string, pid?: number, message = 'not run'): CodeRunResult => ({
    passed: 0,
    total,
    fraction: 0,
    results: tests.map(() => ({ ok: false, error: message })),
    error,
    ...(pid === undefined ? {} : { pid }),
  });
  if (typeof source !== 'string' || !source.trim()) return failAll('there is no code');
  if (source.length > MAX_SOURCE_CHARS) return failAll(`the code is longer than ${MAX_SOURCE_CHARS} characters`);

  const payload = JSON.stringify({
    source: stripExports(source),
    functionName: options.functionName,
    inputs,
    deadline: Date.now() + timeoutMs,
    maxResultChars: MAX_RESULT_CHARS,
  });
  // Each result's JSON travels as a JSON string (escaping can double it) with an error or two of up to 1000 characters.
  const outcome = await runChild(payload, timeoutMs, memoryMb, total * (2 * MAX_RESULT_CHARS + 4000) + 100_000);
  const { pid } = outcome;
  const timedOut = `timed out after ${timeoutMs} ms`;

  if (outcome.killedFor === 'timeout') return failAll(timedOut, pid, 'timed out');
  if (outcome.killedFor === 'memory') return failAll(`out of memory (over ${memoryMb + RSS_HEADROOM_MB} MB resident)`, pid);
  if (outcome.killedFor === 'output') return failAll('the code runner wrote too much output', pid);
  const reply = parseReply(outcome.stdout, total);
  if (!reply) {
    if (/heap out of memory|Reached heap limit|Fatal process out of memory|Fatal process OOM/i.test(outcome.stderr)) {
      return failAll(`out of memory (heap limit ${memoryMb} MB)`, pid);
    }
    const how = outcome.signal ? `signal ${outcome.signal}` : `exit code ${outcome.code}`;
    const said = stderrSummary(outcome.stderr);
    return failAll(`the code runner stopped unexpectedly (${how})${said ? `: ${said}` : ''}`, pid);
  }

  const results: CodeTestResult[] = tests.map((test, i) => {
    const r = reply.results[i];
    if (!r) return { ok: false, error: reply.timedOut ? 'timed out' : 'not run' };
    if ('error' in r && typeof r.error === 'string') return { ok: false, error: r.error };
    const json = (r as { json: string }).json;
    if (json.length > MAX_RESULT_CHARS) return { ok: false, error: `the result is larger than ${MAX_RESULT_CHARS} characters of JSON` };
    let got: unknown;
    try {
      got = JSON.parse(json);
    } catch {
      return { ok: false, error: 'the result came back malformed' };
    }
    return { ok: jsonEqual(got, test.output), got };
  });
  const passed = results.filter((r) => r.ok).length;
  const error = reply.timedOut ? timedOut : reply.error;
  return { passed, total, fraction: passed / total, results, ...(error === undefined ? {} : { error }), ...(pid === undefined ? {} : { pid }) };
}
