/**
 * The `files` server's sandbox: an agent's path mapped into the episode's directory (absolute paths,
 * `..` and symbolic links that lead outside refused), file system errors as ToolErrors, listings,
 * usage counts, and how paths and numbers are shown in messages.
 */
import { lstatSync, mkdirSync, readdirSync, realpathSync, statSync, type Stats } from 'node:fs';
import { dirname, join, posix, sep } from 'node:path';
import { ToolError } from './common.ts';
import type { SearchWorkers } from './files-search.ts';

export interface FilesState {
  /** The episode's sandbox directory, realpath'd. */
  root: string;
  /** Regular files and their bytes in the sandbox (kept up to date by the tools). */
  files: number;
  bytes: number;
  /** The backend's search workers (shared by all its episodes). */
  searches: SearchWorkers;
}

export const fmt = (n: number) => n.toLocaleString('en-US');

/** A path as shown in messages: quoted, cut short, NUL bytes made visible. */
export function show(path: string): string {
  const s = path.length > 200 ? `${path.slice(0, 200)}…` : path;
  return `'${s.replace(/\0/g, '\\0')}'`;
}

/** A sandbox-relative path as returned to the agent ('.' for the root). */
export const shown = (rel: string) => (rel === '' ? '.' : rel);

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
export function attempt<T>(path: string, op: () => T): T {
  try {
    return op();
  } catch (err) {
    fsFail(err, path);
  }
}

/** stat (following links) or lstat, with undefined for a missing entry. */
export function statOrNull(abs: string, follow = true): Stats | undefined {
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

export interface Target {
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
export function resolveIn(state: FilesState, path: string): Target {
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

export interface Entry {
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
export function* walk(state: FilesState, abs: string, rel: string, recursive: boolean): Generator<Entry> {
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
export function usageOf(abs: string): { files: number; bytes: number } {
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

export function forget(state: FilesState, files: number, bytes: number): void {
  state.files = Math.max(0, state.files - files);
  state.bytes = Math.max(0, state.bytes - bytes);
}

/** Creates the parent directories of a target (all inside the sandbox: resolveIn checked the existing part). */
export function makeParents(target: Target, path: string): void {
  try {
    mkdirSync(dirname(target.abs), { recursive: true });
  } catch (err) {
    // mkdir -p reports a file in the way as EEXIST (or ENOTDIR further down).
    const code = errCode(err);
    if (code === 'EEXIST' || code === 'ENOTDIR') throw new ToolError(`Not a directory: a parent of ${show(path)} is a file`);
    fsFail(err, path);
  }
}
