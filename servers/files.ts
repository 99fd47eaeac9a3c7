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
 *
 * This file wires the server together: the sandbox is files-sandbox.ts, the search workers
 * files-search.ts, the tools and their limits files-tools.ts.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256Hex } from '../lib/index.ts';
import { defineServer, EpisodeStore, type Backend } from './common.ts';
import type { FilesState } from './files-sandbox.ts';
import { SearchWorkers } from './files-search.ts';
import { tools } from './files-tools.ts';

/** The directory name of an episode's sandbox: a hash of its id, never the id itself. */
function episodeDirName(id: string): string {
  return `ep-${sha256Hex(id).slice(0, 32)}`;
}

export const filesServer = defineServer<FilesState>({
  name: 'files',
  version: '0.1.0',
  description: 'A file system sandboxed in one directory; paths are relative to its root. Tools: read_file, write_file, list_dir, move, delete, search.',
  isolation: "each episode (the `mcp-gym/episode` key of a request's _meta) gets its own empty sandbox directory; a released episode's directory is deleted",
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
