/** `mcp-gym view`: a local web viewer over run, eval, rollout and bench directories. */
export { discover, describe, resolveId, readJsonl, stepOf, LIVE_WINDOW_MS, type Entry, type EntryKind, type EntryStatus, type Interval } from './discover.ts';
export { handler, startViewer, tokenMatches, type Viewer, type ViewOptions } from './server.ts';
