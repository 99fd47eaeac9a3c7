/**
 * `files`: a real file system sandboxed in one directory per episode. Paths are relative to the
 * episode's sandbox root; absolute paths, paths that climb out (`..`) and symbolic links that
 * lead outside are refused. Contents are text (utf8).
 *
 * The tools that change the sandbox run synchronously (like kv's SQLite calls), so each of them
 * is atomic with respect to the others and to an episode's release, and the per-episode
 * counters stay exact. `search` lists the files to search here, in slices that give the event
 * loop a turn, and reads and matches them in a worker thread (servers/files-search-worker.js)
 * under a deadline: neither a large sandbox nor a regular expression that backtracks
 * catastrophically can block the event loop of the process the server runs in (which,
 * in-process, is the whole rollout's).
 *
 * Bounds on the work of one call: paths of at most 1,024 characters; reads and writes of at most
 * 100,000 characters / 1,000,000 bytes; at most 1,000 entries listed and 200 search matches; a
 * search over at most 50,000,000 bytes (the sandbox's limit), stopped after 4.5 s with
 * truncated=true, and its worker ended at 5 s (an isError result) when one match runs on.
 */
import { appendFileSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync, type Stats } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, dirname, join, posix, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { z } from 'zod';
import { sha256Hex } from '../lib/index.ts';
import { defineServer, defineTool, EpisodeStore, ToolError, type Backend } from './common.ts';

interface FilesState {
  /** The episode's sandbox directory, realpath'd. */
  root: string;
  /** Regular files and their bytes in the sandbox (kept up to date by the tools). */
  files: number;
  bytes: number;
  /** The backend's search workers (shared by all its episodes). */
  searches: SearchWorkers;
}

const MAX_PATH = 1024;
const MAX_READ_CHARS = 100_000;
const MAX_READ_BYTES = 10_000_000;
const MAX_FILE_BYTES = 1_000_000;
const MAX_FILES = 10_000;
const MAX_EPISODE_BYTES = 50_000_000;
const MAX_ENTRIES = 1000;
const MAX_MATCHES = 200;
const MAX_MATCH_TEXT = 400;
/** A search's worker is ended, and the call fails, after this long. */
const SEARCH_TIMEOUT_MS = 5000;
/** A search stops between lines after this long and returns what it found (truncated=true). */
const SEARCH_BUDGET_MS = 4500;
/** A search's listing of the sandbox yields to the event loop after this many entries. */
const WALK_SLICE = 256;
const WORKER_FILE = fileURLToPath(new URL('./files-search-worker.js', import.meta.url));

const fmt = (n: number) => n.toLocaleString('en-US');

/** A path as shown in messages: quoted, cut short, NUL bytes made visible. */
function show(path: string): string {
  const s = path.length > 200 ? `${path.slice(0, 200)}…` : path;
  return `'${s.replace(/\0/g, '\\0')}'`;
}

/** A sandbox-relative path as returned to the agent ('.' for the root). */
const shown = (rel: string) => (rel === '' ? '.' : rel);

function errCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Turns a file system error into a ToolError about `path` (never showing the host's absolute paths). */
function fsFail(err: unknown, path: string): never {
  if (err instanceof ToolError) throw err;
  const code = errCode(err);
  switch (code) {
    case undefined:
      throw err;
    case 'ENOENT':
      throw new ToolError(`No such file or directory: ${show(path)}`);
    case 'ENOTDIR':
      throw new ToolError(`Not a directory: a parent of ${show(path)} is a file`);
    case 'EISDIR':
      throw new ToolError(`${show(path)} is a directory`);
    case 'EEXIST':
      throw new ToolError(`${show(path)} already exists`);
    case 'ENOTEMPTY':
      throw new ToolError(`Directory ${show(path)} is not empty`);
    case 'ENAMETOOLONG':
      throw new ToolError(`Path ${show(path)} is too long`);
    case 'ELOOP':
      throw new ToolError(`Path ${show(path)} has too many levels of symbolic links`);
    case 'EACCES':
    case 'EPERM':
      throw new ToolError(`Permission denied: ${show(path)}`);
    case 'ENOSPC':
    case 'EDQUOT':
      throw new ToolError(`No space left to write ${show(path)}`);
    default:
      throw new ToolError(`Cannot access ${show(path)}: ${code}`);
  }
}

/** Runs a file system operation, reporting its errors as ToolErrors about `path`. */
function attempt<T>(path: string, op: () => T): T {
  try {
    return op();
  } catch (err) {
    fsFail(err, path);
  }
}

/** stat (following links) or lstat, with undefined for a missing entry. */
function statOrNull(abs: string, follow = true): Stats | undefined {
  try {
    return follow ? statSync(abs) : lstatSync(abs);
  } catch (err) {
    const code = errCode(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

function isInside(root: string, real: string): boolean {
  return real === root || real.startsWith(root.endsWith(sep) ? root : root + sep);
}

interface Target {
  /** Absolute path on the host (lexically under the root). */
  abs: string;
  /** Normalised path relative to the root, '/'-separated; '' for the root itself. */
  rel: string;
}

/**
 * Maps an agent's path onto the episode's sandbox, refusing NUL bytes, absolute paths, paths
 * that climb out after normalisation, and symbolic links that lead outside (the deepest existing
 * ancestor of the target, realpath'd, must still be inside the realpath'd root).
 */
function resolveIn(state: FilesState, path: string): Target {
  if (path.includes('\0')) throw new ToolError(`Path ${show(path)} contains a NUL byte`);
  const slashed = path.replace(/\\/g, '/');
  if (posix.isAbsolute(slashed) || /^[a-zA-Z]:/.test(slashed)) {
    throw new ToolError(`Path ${show(path)} is absolute; give a path relative to the sandbox root`);
  }
  const normal = posix.normalize(slashed === '' ? '.' : slashed).replace(/\/+$/, '');
  if (normal === '..' || normal.startsWith('../')) throw new ToolError(`Path ${show(path)} is outside the sandbox`);
  const rel = normal === '.' || normal === '' ? '' : normal;
  const abs = rel === '' ? state.root : join(state.root, ...rel.split('/'));
  if (!isInside(state.root, abs)) throw new ToolError(`Path ${show(path)} is outside the sandbox`);

  for (let cur = abs; ; cur = dirname(cur)) {
    let real: string;
    try {
      real = realpathSync(cur);
    } catch (err) {
      const code = errCode(err);
      if (code === 'ELOOP') throw new ToolError(`Path ${show(path)} has too many levels of symbolic links`);
      if (code !== 'ENOENT' && code !== 'ENOTDIR') fsFail(err, path);
      // A dangling link would let a write create its target wherever it points.
      if (code === 'ENOENT' && statOrNull(cur, false)?.isSymbolicLink()) {
        throw new ToolError(`Path ${show(path)} goes through a broken symbolic link`);
      }
      if (cur === state.root || !isInside(state.root, cur)) throw new ToolError(`The sandbox of this episode is gone; retry the call`);
      continue;
    }
    if (!isInside(state.root, real)) throw new ToolError(`Path ${show(path)} is outside the sandbox (through a symbolic link)`);
    return { abs, rel };
  }
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

interface Entry {
  abs: string;
  rel: string;
  type: 'file' | 'dir';
  size: number;
}

/**
 * The entries under a directory, depth-first with names sorted in each directory. Symbolic
 * links are followed only when they resolve inside the sandbox, and linked directories are
 * listed but never descended into (no cycles, no escapes); other entries (sockets, ...) are skipped.
 */
function* walk(state: FilesState, abs: string, rel: string, recursive: boolean): Generator<Entry> {
  let dirents;
  try {
    dirents = readdirSync(abs, { withFileTypes: true });
  } catch {
    return; // vanished or unreadable: nothing to list
  }
  dirents.sort((a, b) => byName(a.name, b.name));
  for (const d of dirents) {
    const childAbs = join(abs, d.name);
    const childRel = rel === '' ? d.name : `${rel}/${d.name}`;
    const linked = d.isSymbolicLink();
    if (linked) {
      let real: string;
      try {
        real = realpathSync(childAbs);
      } catch {
        continue;
      }
      if (!isInside(state.root, real)) continue;
    }
    const st = linked || (!d.isDirectory() && !d.isFile()) ? statOrNull(childAbs) : statOrNull(childAbs, false);
    if (st?.isDirectory()) {
      yield { abs: childAbs, rel: childRel, type: 'dir', size: 0 };
      if (recursive && !linked) yield* walk(state, childAbs, childRel, true);
    } else if (st?.isFile()) {
      yield { abs: childAbs, rel: childRel, type: 'file', size: st.size };
    }
  }
}

/** Regular files and their bytes under a directory (links not followed). */
function usageOf(abs: string): { files: number; bytes: number } {
  const total = { files: 0, bytes: 0 };
  const pending = [abs];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let dirents;
    try {
      dirents = readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const d of dirents) {
      const child = join(dir, d.name);
      if (d.isDirectory()) pending.push(child);
      else if (d.isFile()) {
        total.files += 1;
        total.bytes += statOrNull(child, false)?.size ?? 0;
      }
    }
  }
  return total;
}

function forget(state: FilesState, files: number, bytes: number): void {
  state.files = Math.max(0, state.files - files);
  state.bytes = Math.max(0, state.bytes - bytes);
}

/** Creates the parent directories of a target (all inside the sandbox: resolveIn checked the existing part). */
function makeParents(target: Target, path: string): void {
  try {
    mkdirSync(dirname(target.abs), { recursive: true });
  } catch (err) {
    // mkdir -p reports a file in the way as EEXIST (or ENOTDIR further down).
    const code = errCode(err);
    if (code === 'EEXIST' || code === 'ENOTDIR') throw new ToolError(`Not a directory: a parent of ${show(path)} is a file`);
    fsFail(err, path);
  }
}

interface SearchJob {
  files: { abs: string; rel: string; size: number }[];
  query: string;
  regex: boolean;
  maxMatches: number;
  maxMatchText: number;
  maxReadBytes: number;
  budgetMs: number;
}

type Match = { path: string; line: number; text: string };
type SearchReply = { ok: true; matches: Match[]; truncated: boolean } | { ok: false; message: string };

/**
 * The worker threads that run searches: one per search in flight (at most `maxRunning`, the rest
 * wait), kept for the next search when it finished in time, terminated when it did not. Idle
 * workers do not keep the process alive.
 */
class SearchWorkers {
  private readonly idle: Worker[] = [];
  private readonly all = new Set<Worker>();
  private readonly waiting: (() => void)[] = [];
  private running = 0;
  private closed = false;

  constructor(
    private readonly maxRunning = Math.max(2, Math.min(8, availableParallelism())),
    private readonly keepIdle = 2,
  ) {}

  async run(job: SearchJob, timeoutMs: number, signal: AbortSignal | undefined): Promise<SearchReply> {
    if (this.running >= this.maxRunning) {
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal?.removeEventListener('abort', cancel);
          resolve();
        };
        const cancel = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new ToolError('search: the call was cancelled'));
        };
        this.waiting.push(go);
        signal?.addEventListener('abort', cancel, { once: true });
      });
    }
    this.running++;
    try {
      return await this.exec(job, timeoutMs, signal);
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private spawn(): Worker {
    const worker = new Worker(WORKER_FILE, { resourceLimits: { maxOldGenerationSizeMb: 512 } });
    this.all.add(worker);
    worker.once('exit', () => {
      this.all.delete(worker);
      const i = this.idle.indexOf(worker);
      if (i >= 0) this.idle.splice(i, 1);
    });
    worker.on('error', () => {}); // reported to the job in flight, if any; an idle one just goes
    return worker;
  }

  private exec(job: SearchJob, timeoutMs: number, signal: AbortSignal | undefined): Promise<SearchReply> {
    if (this.closed) return Promise.reject(new ToolError('search: the server is shutting down'));
    if (signal?.aborted) return Promise.reject(new ToolError('search: the call was cancelled'));
    const worker = this.idle.pop() ?? this.spawn();
    worker.ref();
    return new Promise<SearchReply>((resolve, reject) => {
      let settled = false;
      const finish = (then: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
        then();
      };
      const end = () => void worker.terminate().catch(() => {});
      const onMessage = (reply: SearchReply) => finish(() => (this.putBack(worker), resolve(reply)));
      const onError = (err: Error) => finish(() => (end(), reject(new Error(`the search worker failed: ${err.message}`))));
      const onExit = (code: number) => finish(() => reject(new Error(`the search worker exited with code ${code}`)));
      const onAbort = () => finish(() => (end(), reject(new ToolError('search: the call was cancelled'))));
      const timer = setTimeout(
        () =>
          finish(() => {
            end();
            const why = job.regex ? ' (the pattern may backtrack catastrophically; try a simpler one, e.g. without nested quantifiers like (a+)+)' : '';
            reject(new ToolError(`search: the search took longer than ${fmt(SEARCH_TIMEOUT_MS)} ms${why}`));
          }),
        timeoutMs,
      );
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      worker.postMessage(job);
    });
  }

  private putBack(worker: Worker): void {
    if (this.closed || this.idle.length >= this.keepIdle) {
      void worker.terminate().catch(() => {});
      return;
    }
    worker.unref();
    this.idle.push(worker);
  }

  close(): void {
    this.closed = true;
    for (const w of this.all) void w.terminate().catch(() => {});
    this.all.clear();
    this.idle.length = 0;
  }
}

const Path = z.string().max(MAX_PATH, `path must be at most ${MAX_PATH} characters`);
const FileType = z.enum(['file', 'dir']);

const tools = [
  defineTool({
    name: 'read_file',
    description: `Read a text file (utf8). offset and length are in characters; at most ${fmt(MAX_READ_CHARS)} characters come back at a time, and truncated=true says there is more after them. size is the whole file's size in bytes.`,
    input: z.object({
      path: Path.describe('The file, relative to the sandbox root (e.g. "notes/a.txt")'),
      offset: z.number().int().min(0).default(0).describe('Start at this character'),
      length: z.number().int().min(1).max(MAX_READ_CHARS).default(MAX_READ_CHARS).describe('Read at most this many characters'),
    }),
    output: z.object({ path: z.string(), content: z.string(), size: z.number().int(), truncated: z.boolean() }),
    readOnly: true,
    run: ({ path, offset, length }, state: FilesState) => {
      const target = resolveIn(state, path);
      const st = attempt(path, () => statOrNull(target.abs));
      if (!st) throw new ToolError(`No such file: ${show(path)}`);
      if (st.isDirectory()) throw new ToolError(`${show(path)} is a directory, not a file (use list_dir)`);
      if (!st.isFile()) throw new ToolError(`${show(path)} is not a regular file`);
      if (st.size > MAX_READ_BYTES) throw new ToolError(`${show(path)} is too large to read (${fmt(st.size)} bytes, the limit is ${fmt(MAX_READ_BYTES)})`);
      const text = attempt(path, () => readFileSync(target.abs, 'utf8'));
      const content = text.slice(offset, offset + length);
      return { path: shown(target.rel), content, size: st.size, truncated: offset + content.length < text.length };
    },
  }),
  defineTool({
    name: 'write_file',
    description: `Write a text file (utf8), creating it and its parent directories as needed, or replacing its content (append=true adds to the end instead). A file holds at most ${fmt(MAX_FILE_BYTES)} bytes; a sandbox at most ${fmt(MAX_FILES)} files and ${fmt(MAX_EPISODE_BYTES)} bytes. created says whether the file is new.`,
    input: z.object({
      path: Path.describe('The file, relative to the sandbox root (e.g. "notes/a.txt")'),
      content: z.string().max(MAX_FILE_BYTES, `content must be at most ${fmt(MAX_FILE_BYTES)} characters`).describe('The text to write'),
      append: z.boolean().default(false).describe('Add to the end of the file instead of replacing it'),
    }),
    output: z.object({ path: z.string(), size: z.number().int(), created: z.boolean() }),
    readOnly: false,
    run: ({ path, content, append }, state: FilesState) => {
      const target = resolveIn(state, path);
      if (target.rel === '') throw new ToolError(`${show(path)} is the sandbox root, a directory; give a file path`);
      const st = attempt(path, () => statOrNull(target.abs));
      if (st?.isDirectory()) throw new ToolError(`${show(path)} is a directory, not a file`);
      if (st && !st.isFile()) throw new ToolError(`${show(path)} is not a regular file`);
      const created = st === undefined;
      const oldSize = st?.size ?? 0;
      const added = Buffer.byteLength(content, 'utf8');
      const size = append ? oldSize + added : added;
      if (size > MAX_FILE_BYTES) throw new ToolError(`${show(path)} would be ${fmt(size)} bytes; a file holds at most ${fmt(MAX_FILE_BYTES)}`);
      if (created && state.files >= MAX_FILES) throw new ToolError(`Cannot create ${show(path)}: the sandbox already holds ${fmt(MAX_FILES)} files, the limit`);
      if (state.bytes - oldSize + size > MAX_EPISODE_BYTES) throw new ToolError(`Cannot write ${show(path)}: the sandbox would hold more than ${fmt(MAX_EPISODE_BYTES)} bytes`);
      if (created) makeParents(target, path);
      attempt(path, () => (append ? appendFileSync(target.abs, content, 'utf8') : writeFileSync(target.abs, content, 'utf8')));
      if (created) state.files += 1;
      state.bytes += size - oldSize;
      return { path: shown(target.rel), size, created };
    },
  }),
  defineTool({
    name: 'list_dir',
    description: `List a directory's files and subdirectories (recursive=true: everything below it), in path order, with paths relative to the sandbox root and sizes in bytes (0 for directories). At most ${fmt(MAX_ENTRIES)} entries; truncated=true says there are more.`,
    input: z.object({
      path: Path.default('').describe('The directory, relative to the sandbox root ("" or "." for the root)'),
      recursive: z.boolean().default(false).describe('Also list everything in subdirectories'),
    }),
    output: z.object({
      path: z.string(),
      entries: z.array(z.object({ path: z.string(), type: FileType, size: z.number().int() })),
      truncated: z.boolean(),
    }),
    readOnly: true,
    run: ({ path, recursive }, state: FilesState) => {
      const target = resolveIn(state, path);
      const st = attempt(path, () => statOrNull(target.abs));
      if (!st) throw new ToolError(`No such directory: ${show(path)}`);
      if (!st.isDirectory()) throw new ToolError(`Not a directory: ${show(path)} is a file (use read_file)`);
      const entries: { path: string; type: 'file' | 'dir'; size: number }[] = [];
      let truncated = false;
      for (const e of walk(state, target.abs, target.rel, recursive)) {
        if (entries.length >= MAX_ENTRIES) {
          truncated = true;
          break;
        }
        entries.push({ path: e.rel, type: e.type, size: e.size });
      }
      return { path: shown(target.rel), entries, truncated };
    },
  }),
  defineTool({
    name: 'move',
    description: 'Move or rename a file or directory. `to` is the full new path (its parent directories are created); an existing file there is replaced only with overwrite=true, and an existing directory never.',
    input: z.object({
      from: Path.describe('The file or directory to move, relative to the sandbox root'),
      to: Path.describe('Its new path, relative to the sandbox root'),
      overwrite: z.boolean().default(false).describe('Replace an existing file at `to`'),
    }),
    output: z.object({ from: z.string(), to: z.string() }),
    readOnly: false,
    run: ({ from, to, overwrite }, state: FilesState) => {
      const src = resolveIn(state, from);
      const dst = resolveIn(state, to);
      if (src.rel === '') throw new ToolError('Cannot move the sandbox root');
      if (dst.rel === '') throw new ToolError('Cannot move onto the sandbox root');
      const s = attempt(from, () => statOrNull(src.abs, false));
      if (!s) throw new ToolError(`No such file or directory: ${show(from)}`);
      const result = { from: shown(src.rel), to: shown(dst.rel) };
      if (dst.abs === src.abs) return result;
      if (s.isDirectory() && dst.abs.startsWith(src.abs + sep)) throw new ToolError(`Cannot move ${show(from)} into itself (${show(to)})`);
      const d = attempt(to, () => statOrNull(dst.abs, false));
      // The same entry under another name (a case-only rename on a case-insensitive file system) is no clash.
      if (d && !(d.dev === s.dev && d.ino === s.ino)) {
        if (d.isDirectory()) throw new ToolError(`${show(to)} is an existing directory; give the full new path, e.g. '${to.replace(/\/+$/, '')}/${basename(src.rel)}'`);
        if (!overwrite) throw new ToolError(`${show(to)} already exists (pass overwrite: true to replace it)`);
        attempt(to, () => rmSync(dst.abs, { force: true }));
        if (d.isFile()) forget(state, 1, d.size);
      }
      makeParents(dst, to);
      attempt(from, () => renameSync(src.abs, dst.abs));
      return result;
    },
  }),
  defineTool({
    name: 'delete',
    description: 'Delete a file or directory. A directory that is not empty needs recursive=true. Returns deleted=false when nothing was there.',
    input: z.object({
      path: Path.describe('The file or directory, relative to the sandbox root'),
      recursive: z.boolean().default(false).describe('Also delete everything in a non-empty directory'),
    }),
    output: z.object({ path: z.string(), deleted: z.boolean() }),
    readOnly: false,
    run: ({ path, recursive }, state: FilesState) => {
      const target = resolveIn(state, path);
      if (target.rel === '') throw new ToolError('Cannot delete the sandbox root');
      const st = attempt(path, () => statOrNull(target.abs, false));
      if (!st) return { path: shown(target.rel), deleted: false };
      if (st.isDirectory()) {
        const count = attempt(path, () => readdirSync(target.abs).length);
        if (count > 0 && !recursive) throw new ToolError(`Directory ${show(path)} is not empty (pass recursive: true to delete it and everything in it)`);
        const usage = usageOf(target.abs);
        attempt(path, () => rmSync(target.abs, { recursive: true, force: true }));
        forget(state, usage.files, usage.bytes);
      } else {
        attempt(path, () => rmSync(target.abs, { force: true }));
        if (st.isFile()) forget(state, 1, st.size);
      }
      return { path: shown(target.rel), deleted: true };
    },
  }),
  defineTool({
    name: 'search',
    description: `Search the files under a directory (or one file): every line containing the query (regex=true: matching a JavaScript regular expression), with 1-based line numbers, and every file whose name matches, as line 0. Binary files are skipped. At most ${fmt(MAX_MATCHES)} matches; truncated=true says there may be more. A search stops after ${SEARCH_BUDGET_MS / 1000} s with what it found (truncated=true); one whose single match is still running after ${SEARCH_TIMEOUT_MS / 1000} s (a regular expression that backtracks catastrophically) fails.`,
    input: z.object({
      query: z.string().min(1, 'query must not be empty').max(1000, 'query must be at most 1000 characters').describe('The text (or regular expression) to look for'),
      path: Path.default('').describe('Search under this directory or in this file, relative to the sandbox root (default: everything)'),
      regex: z.boolean().default(false).describe('Treat the query as a JavaScript regular expression'),
    }),
    output: z.object({
      matches: z.array(z.object({ path: z.string(), line: z.number().int(), text: z.string() })),
      truncated: z.boolean(),
    }),
    readOnly: true,
    run: async ({ query, path, regex }, state: FilesState, signal) => {
      if (regex) {
        try {
          new RegExp(query);
        } catch (err) {
          throw new ToolError(`Invalid regular expression ${JSON.stringify(query)}: ${err instanceof Error ? err.message : String(err)}`);
        }
      }
      const target = resolveIn(state, path);
      const st = attempt(path, () => statOrNull(target.abs));
      if (!st) throw new ToolError(`No such file or directory: ${show(path)}`);
      const started = Date.now();
      const files: SearchJob['files'] = [];
      let cut = false;
      if (st.isFile()) files.push({ abs: target.abs, rel: target.rel, size: st.size });
      else if (st.isDirectory()) {
        // The listing runs here, in slices: however many directories the sandbox holds, the
        // event loop gets a turn every WALK_SLICE entries, and the budget covers the walk too.
        let seen = 0;
        for (const e of walk(state, target.abs, target.rel, true)) {
          if (e.type === 'file') files.push({ abs: e.abs, rel: e.rel, size: e.size });
          if (++seen % WALK_SLICE !== 0) continue;
          await new Promise((r) => setImmediate(r));
          if (signal?.aborted) throw new ToolError('search: the call was cancelled');
          if (Date.now() - started > SEARCH_BUDGET_MS) {
            cut = true;
            break;
          }
        }
      }
      // Reading and matching happen in a worker thread, under a deadline (see SearchWorkers).
      const spent = Date.now() - started;
      const reply = await state.searches.run(
        { files, query, regex, maxMatches: MAX_MATCHES, maxMatchText: MAX_MATCH_TEXT, maxReadBytes: MAX_READ_BYTES, budgetMs: Math.max(0, SEARCH_BUDGET_MS - spent) },
        Math.max(SEARCH_TIMEOUT_MS - SEARCH_BUDGET_MS, SEARCH_TIMEOUT_MS - spent),
        signal,
      );
      if (!reply.ok) throw new ToolError(`search failed: ${reply.message}`);
      return { matches: reply.matches, truncated: reply.truncated || cut };
    },
  }),
];

/** The directory name of an episode's sandbox: a hash of its id, never the id itself. */
function episodeDirName(id: string): string {
  return `ep-${sha256Hex(id).slice(0, 32)}`;
}

export const filesServer = defineServer<FilesState>({
  name: 'files',
  version: '0.1.0',
  description: 'A file system sandboxed in one directory; paths are relative to its root. Tools: read_file, write_file, list_dir, move, delete, search.',
  isolation: 'each episode (the `mcp-gym/episode` key of a request\'s _meta) gets its own empty sandbox directory; a released episode\'s directory is deleted',
  tools: tools as never,
  examples: [
    { tool: 'write_file', arguments: { path: 'notes/todo.txt', content: 'buy milk\ncall Ada\n' } },
    { tool: 'search', arguments: { query: 'Ada' } },
    { tool: 'list_dir', arguments: { path: '', recursive: true } },
  ],
  backend(options): Backend<FilesState> {
    const ownDir = options.dataDir === undefined;
    const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'mcp-gym-files-'));
    mkdirSync(dir, { recursive: true });
    const searches = new SearchWorkers();
    const store = new EpisodeStore<FilesState>(
      (id) => {
        const root = join(dir, episodeDirName(id));
        // A fresh episode starts empty, even over the leftovers of an earlier process.
        rmSync(root, { recursive: true, force: true });
        mkdirSync(root, { recursive: true });
        return { root: realpathSync(root), files: 0, bytes: 0, searches };
      },
      (_id, state) => rmSync(state.root, { recursive: true, force: true }),
      options,
    );
    return {
      episode: (id) => store.get(id),
      release: (id) => store.release(id),
      close() {
        searches.close();
        store.clear();
        if (ownDir) rmSync(dir, { recursive: true, force: true });
      },
    };
  },
});
