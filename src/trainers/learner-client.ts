/**
 * Connections to the Python learner (learner/PROTOCOL.md): a local process speaking JSON lines on
 * stdin/stdout (`LearnerClient`), or a learner elsewhere over HTTP (`HttpLearnerClient`). Both
 * implement `LearnerConnection.request`, typed by the contract (src/trainers/protocol.ts): the
 * arguments are checked against it before they are sent and the answer after it arrives, so a
 * mismatch names the field on this side. A learner that dies rejects what was in flight with its
 * exit status and the end of its stderr. `LearnerSession` (session.ts) builds on these.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { LEARNER_DIR, PACKAGE_ROOT } from '../paths.ts';
import { LEARNER_COMMANDS, type LearnerArgs, type LearnerCommand, type LearnerResult } from './protocol.ts';

export { LEARNER_DIR };

/**
 * The Python the learner runs with. For the embedded model: the project's venv when it exists
 * (torch 2: a learner step of the main job's shape took 1.4x less time than with Debian's torch
 * 1.13, bench/RESULTS.md, "The main job's time"), else Debian's (python3-torch), unless
 * MCP_GYM_PYTHON says otherwise. For a Hugging Face checkpoint (`hf: true`): the project's venv
 * with torch 2, transformers and PEFT (`.venv`, made by `npm install`'s ensure step or
 * `node scripts/ensure.mjs`), unless MCP_GYM_HF_PYTHON says otherwise.
 */
export function learnerPython(o: { hf?: boolean } = {}): string {
  if (o.hf) {
    if (process.env.MCP_GYM_HF_PYTHON) return process.env.MCP_GYM_HF_PYTHON;
    const venv = join(PACKAGE_ROOT, '.venv', 'bin', 'python');
    if (!existsSync(venv)) {
      // A clone has scripts/ensure.mjs; an installed package has the lock file only.
      const ensure = join(PACKAGE_ROOT, 'scripts', 'ensure.mjs');
      const how = existsSync(ensure)
        ? `\`node ${ensure}\``
        : `\`python3 -m venv ${join(PACKAGE_ROOT, '.venv')} && ${venv} -m pip install -r ${join(LEARNER_DIR, 'requirements.lock')}\``;
      throw new LearnerError(
        `a Hugging Face model needs the learner's venv (${venv}: missing); create it with ${how} (about 2 minutes, 5.7 GB), or set MCP_GYM_HF_PYTHON to a Python with the packages of learner/requirements.lock`,
      );
    }
    return venv;
  }
  if (process.env.MCP_GYM_PYTHON) return process.env.MCP_GYM_PYTHON;
  const venv = join(PACKAGE_ROOT, '.venv', 'bin', 'python');
  if (existsSync(venv)) return venv;
  return existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
}

export { isHfModelDir } from '../agents/index.ts';

export class LearnerError extends Error {}

/** The arguments of `cmd`, checked against the contract (defaults are left to the learner). */
function checkArgs<C extends LearnerCommand>(cmd: C, args: LearnerArgs<C>): void {
  const r = LEARNER_COMMANDS[cmd].request.safeParse(args);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new LearnerError(`${cmd}: ${i.path.join('.') || '(arguments)'}: ${i.message}`);
  }
}

/** The answer of `cmd`, checked against the contract. */
function checkResult<C extends LearnerCommand>(cmd: C, result: unknown, where: string): LearnerResult<C> {
  const r = LEARNER_COMMANDS[cmd].result.safeParse(result);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new LearnerError(`${cmd}: the answer of the learner at ${where} does not match the contract: ${i.path.join('.') || '(result)'}: ${i.message}`);
  }
  return r.data as LearnerResult<C>;
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  cmd: string;
}

export interface LearnerOptions {
  /** Threads for torch (default: the cores there are). */
  threads?: number;
  /** Extra environment for the learner process. */
  env?: Record<string, string>;
  /** Copy the learner's stderr (its log) to ours. Default false. */
  forwardStderr?: boolean;
  /** Hears each line of the learner's own log (its stderr lines that start with "[learner] ", without that mark): progress of a long request. */
  onLog?: (line: string) => void;
  /** The model is a Hugging Face checkpoint: run the learner with the venv's Python (learnerPython). */
  hf?: boolean;
  /**
   * Learner processes under torchrun on this machine (one per GPU; default 1: a plain process).
   * Rank 0 speaks the protocol on stdin/stdout (learner/PROTOCOL.md, "Several processes").
   */
  procs?: number;
  /** With procs > 1: DDP replicas (default) or FSDP2 shards (`serve --fsdp`: Hugging Face models). */
  parallel?: 'ddp' | 'fsdp';
}

/** The learner's command line: `serve`, or torchrun (`--standalone`: a free rendezvous port here) of it. */
export function learnerArgs(o: Pick<LearnerOptions, 'procs' | 'parallel'> = {}): string[] {
  const procs = o.procs ?? 1;
  if (procs <= 1) return ['-m', 'mcp_gym_learner', 'serve'];
  return [
    '-m',
    'mcp_gym_learner.torchrun',
    '--standalone',
    '--nproc_per_node',
    String(procs),
    '-m',
    'mcp_gym_learner',
    'serve',
    ...(o.parallel === 'fsdp' ? ['--fsdp'] : []),
  ];
}

export class LearnerClient implements LearnerConnection {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffer = '';
  private stderr = '';
  private exited?: { code: number | null; signal: NodeJS.Signals | null };

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => this.onData(chunk));
    child.stderr.setEncoding('utf8');
    let partial = '';
    child.stderr.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-4000);
      if (this.forward) process.stderr.write(chunk);
      if (!this.onLog) return;
      const lines = (partial + chunk).split('\n');
      partial = lines.pop()!;
      for (const l of lines) if (l.startsWith('[learner] ')) this.onLog(l.slice('[learner] '.length));
    });
    child.on('exit', (code, signal) => {
      this.exited = { code, signal };
      const why = `the learner process ${signal ? `was killed by ${signal}` : `exited with code ${code}`}${this.stderr ? `; its stderr ends with: ${this.stderr.trim().slice(-600)}` : ''}`;
      for (const p of this.pending.values()) p.reject(new LearnerError(`${p.cmd}: ${why}`));
      this.pending.clear();
    });
  }

  private forward = false;
  private onLog?: (line: string) => void;

  static start(options: LearnerOptions = {}): LearnerClient {
    const python = learnerPython({ hf: options.hf });
    const procs = options.procs ?? 1;
    const child = spawn(python, learnerArgs(options), {
      cwd: LEARNER_DIR,
      env: {
        ...process.env,
        PYTHONPATH: LEARNER_DIR,
        PYTHONUNBUFFERED: '1',
        ...(options.threads ? { MCP_GYM_THREADS: String(options.threads) } : {}),
        // torchrun's ranks: one thread each until `load` sets their share of the cores
        ...(procs > 1 ? { OMP_NUM_THREADS: String(Math.max(1, Math.floor((options.threads ?? 1) / procs))) } : {}),
        ...options.env,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
      // Its own process group: a Ctrl-C in the terminal reaches the run, which then saves a
      // checkpoint through the learner and closes it (the learner exits when its stdin closes).
      detached: true,
    });
    const client = new LearnerClient(child);
    client.forward = options.forwardStderr ?? false;
    client.onLog = options.onLog;
    child.on('error', (err) => {
      for (const p of client.pending.values()) p.reject(new LearnerError(`cannot start the learner (${python}): ${err.message}`));
      client.pending.clear();
    });
    return client;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return !this.exited;
  }

  get where(): string {
    return `a local process (pid ${this.child.pid})`;
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (!line) continue;
      let msg: { id?: number; ok?: boolean; result?: unknown; error?: string };
      try {
        msg = JSON.parse(line);
      } catch {
        this.stderr = (this.stderr + `\n[stdout, not protocol] ${line}`).slice(-4000);
        continue;
      }
      const p = msg.id === undefined ? undefined : this.pending.get(msg.id);
      if (!p) continue;
      this.pending.delete(msg.id!);
      if (msg.ok) p.resolve(msg.result);
      else p.reject(new LearnerError(`${p.cmd}: ${msg.error ?? 'failed'}`));
    }
  }

  /** Sends one command and waits for its answer (both checked against the contract). */
  async request<C extends LearnerCommand>(cmd: C, args: LearnerArgs<C> = {} as LearnerArgs<C>): Promise<LearnerResult<C>> {
    if (this.exited)
      throw new LearnerError(
        `${cmd}: the learner is not running (it ${this.exited.signal ? `was killed by ${this.exited.signal}` : `exited with code ${this.exited.code}`})`,
      );
    checkArgs(cmd, args);
    const id = this.nextId++;
    const result = await new Promise<unknown>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, cmd });
      this.child.stdin.write(JSON.stringify({ id, cmd, ...args }) + '\n');
    });
    return checkResult(cmd, result, this.where);
  }

  /** Asks the learner to stop; kills it if it does not within `graceMs`. */
  async close(graceMs = 5000): Promise<void> {
    if (this.exited) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.request('shutdown').catch(() => {});
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.child.kill(signal);
  }
}

/** A connection to a learner, wherever it runs. */
export interface LearnerConnection {
  request<C extends LearnerCommand>(cmd: C, args?: LearnerArgs<C>): Promise<LearnerResult<C>>;
  close(): Promise<void>;
  readonly alive: boolean;
  /** Where it runs, for messages. */
  readonly where: string;
}

/** A learner already running elsewhere (a GPU machine), reached over HTTP: POST <url>/rpc. */
export class HttpLearnerClient implements LearnerConnection {
  private dead = false;
  constructor(
    readonly url: string,
    private readonly token?: string,
  ) {}

  get alive(): boolean {
    return !this.dead;
  }

  get where(): string {
    return this.url;
  }

  async request<C extends LearnerCommand>(cmd: C, args: LearnerArgs<C> = {} as LearnerArgs<C>): Promise<LearnerResult<C>> {
    checkArgs(cmd, args);
    let res: Response;
    try {
      res = await fetch(new URL('rpc', this.url.endsWith('/') ? this.url : this.url + '/'), {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.token ? { authorization: `Bearer ${this.token}` } : {}) },
        body: JSON.stringify({ id: 1, cmd, ...args }),
      });
    } catch (err) {
      throw new LearnerError(`${cmd}: cannot reach the learner at ${this.url}: ${(err as Error).message}`);
    }
    const text = await res.text();
    let msg: { ok?: boolean; result?: unknown; error?: string };
    try {
      msg = JSON.parse(text);
    } catch {
      throw new LearnerError(`${cmd}: the learner at ${this.url} answered ${res.status}: ${text.slice(0, 200)}`);
    }
    if (!msg.ok) throw new LearnerError(`${cmd}: ${msg.error ?? `HTTP ${res.status}`}`);
    return checkResult(cmd, msg.result, this.url);
  }

  async close(): Promise<void> {
    this.dead = true;
  }
}
