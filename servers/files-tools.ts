/** The `files` server's tools (read_file, write_file, list_dir, move, delete, search) and their limits. */
import { appendFileSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, sep } from 'node:path';
import { z } from 'zod';
import { defineTool, ToolError } from './common.ts';
import { attempt, fmt, forget, makeParents, resolveIn, show, shown, statOrNull, usageOf, walk, type FilesState } from './files-sandbox.ts';
import { SEARCH_BUDGET_MS, SEARCH_TIMEOUT_MS, type SearchJob } from './files-search.ts';

const MAX_PATH = 1024;
const MAX_READ_CHARS = 100_000;
const MAX_READ_BYTES = 10_000_000;
const MAX_FILE_BYTES = 1_000_000;
const MAX_FILES = 10_000;
const MAX_EPISODE_BYTES = 50_000_000;
const MAX_ENTRIES = 1000;
const MAX_MATCHES = 200;
const MAX_MATCH_TEXT = 400;
/** A search's listing of the sandbox yields to the event loop after this many entries. */
const WALK_SLICE = 256;

const Path = z.string().max(MAX_PATH, `path must be at most ${MAX_PATH} characters`);
const FileType = z.enum(['file', 'dir']);

export const tools = [
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
      content: z
        .string()
        .max(MAX_FILE_BYTES, `content must be at most ${fmt(MAX_FILE_BYTES)} characters`)
        .describe('The text to write'),
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
      if (state.bytes - oldSize + size > MAX_EPISODE_BYTES)
        throw new ToolError(`Cannot write ${show(path)}: the sandbox would hold more than ${fmt(MAX_EPISODE_BYTES)} bytes`);
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
    description:
      'Move or rename a file or directory. `to` is the full new path (its parent directories are created); an existing file there is replaced only with overwrite=true, and an existing directory never.',
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
        if (d.isDirectory())
          throw new ToolError(`${show(to)} is an existing directory; give the full new path, e.g. '${to.replace(/\/+$/, '')}/${basename(src.rel)}'`);
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
      query: z
        .string()
        .min(1, 'query must not be empty')
        .max(1000, 'query must be at most 1000 characters')
        .describe('The text (or regular expression) to look for'),
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
        {
          files,
          query,
          regex,
          maxMatches: MAX_MATCHES,
          maxMatchText: MAX_MATCH_TEXT,
          maxReadBytes: MAX_READ_BYTES,
          budgetMs: Math.max(0, SEARCH_BUDGET_MS - spent),
        },
        Math.max(SEARCH_TIMEOUT_MS - SEARCH_BUDGET_MS, SEARCH_TIMEOUT_MS - spent),
        signal,
      );
      if (!reply.ok) throw new ToolError(`search failed: ${reply.message}`);
      return { matches: reply.matches, truncated: reply.truncated || cut };
    },
  }),
];
