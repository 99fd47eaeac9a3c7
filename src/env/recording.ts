/**
 * Record and replay of tool traffic (`EnvironmentOptions.record` / `replay`, `--record F` and
 * `--replay F` on rollout, eval and train). A recording is a JSON Lines file: a header, then for
 * every episode each server's tool list (`tools/list`) and every tool call with its result and
 * latency, the task's setup calls and the state checks made after the episode included. Lines are
 * appended whole as they happen (a killed run leaves at most a partial last line, which a replay
 * ignores with a warning).
 *
 * A replay serves them back without starting or contacting any server. A call is found by the
 * episode key (`<group>#<sample>`, the same in every run), the server's alias in the task, the
 * tool, the canonical JSON of its arguments (object keys sorted) and its occurrence: the n-th call
 * of the same tool with the same arguments in that episode gets the n-th recorded result (the
 * state may have changed in between). A call the recording lacks is never guessed: it is an error
 * naming the episode, the server, the tool and the arguments, and it fails the episode.
 *
 * Lines (version 1):
 *   {"type":"header","format":"mcp-gym/tool-recording","version":1,"started_at":"..."}
 *   {"type":"tools","episode":"kv-3@eval#0","id":"<episode id>","server":"kv","hash":"<sha256/16>","tools":[...]}
 *   {"type":"call","episode":"kv-3@eval#0","id":"<episode id>","seq":0,"server":"kv","tool":"set",
 *    "arguments":{...},"n":0,"result":{"content":[...],"structuredContent":{...},"isError":false},"ms":0.41}
 * A tool list is written whole the first time its hash appears in a writer, by its hash after that.
 * A server that announced a change of its tools (`notifications/tools/list_changed`) is listed again
 * before the agent's next turn: that list is a `tools` line with `"turn": <the policy turn>`, and a
 * replay serves it before the same turn.
 * When one episode key was recorded more than once (a killed run resumed), its last recording wins.
 */
import { existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { sha256Hex, stableJson } from '../../lib/index.ts';
import { ToolErrorKindSchema, type ToolInfo, type ToolResult } from '../tools/index.ts';
import { JsonlWriter } from './store.ts';

export const RECORDING_FORMAT = 'mcp-gym/tool-recording';
export const RECORDING_VERSION = 1;

const HeaderLineSchema = z.object({
  type: z.literal('header'),
  format: z.literal(RECORDING_FORMAT),
  version: z.literal(RECORDING_VERSION),
  started_at: z.string().optional(),
});

const ToolsLineSchema = z.object({
  type: z.literal('tools'),
  episode: z.string(),
  id: z.string(),
  server: z.string(),
  hash: z.string().min(1),
  tools: z.array(z.looseObject({ name: z.string(), inputSchema: z.record(z.string(), z.unknown()) })).optional(),
  /** A list made again after the server's tools changed, before this policy turn; absent: the episode's first list. */
  turn: z.number().int().min(0).optional(),
});

const RecordedResultSchema = z.object({
  content: z.array(z.looseObject({ type: z.string() })),
  structuredContent: z.unknown().optional(),
  isError: z.boolean(),
  errorKind: ToolErrorKindSchema.optional(),
});

const CallLineSchema = z.object({
  type: z.literal('call'),
  episode: z.string(),
  id: z.string(),
  seq: z.number().int().min(0),
  server: z.string(),
  tool: z.string(),
  arguments: z.record(z.string(), z.unknown()),
  n: z.number().int().min(0),
  result: RecordedResultSchema,
  ms: z.number().min(0),
});

export const RecordingLineSchema = z.discriminatedUnion('type', [HeaderLineSchema, ToolsLineSchema, CallLineSchema]);
export type RecordingLine = z.infer<typeof RecordingLineSchema>;
type CallLine = z.infer<typeof CallLineSchema>;

/** One episode's view of the tool traffic: live (recorded, or not), or replayed from a recording. */
export interface EpisodeTape {
  /** True when nothing reaches a server: every tool list and result comes from the recording. */
  readonly replaying: boolean;
  /** The first call (or tool list) the recording lacked, as the episode's error; undefined when none. */
  readonly miss?: string;
  /** A server's tools: `live()`'s (and recorded; `turn`: listed again before that policy turn, after a change), or the recording's first list. */
  listTools(server: string, live: () => Promise<ToolInfo[]>, turn?: number): Promise<ToolInfo[]>;
  /** Replaying: the list of `server` recorded as listed again before policy turn `turn`, if one was. */
  relisted?(server: string, turn: number): ToolInfo[] | undefined;
  /** A call's result: `live()`'s (and recorded), or the recording's; throws ReplayMissError when the recording lacks it. */
  call(server: string, tool: string, args: Record<string, unknown>, live: () => Promise<ToolResult>): Promise<ToolResult>;
}

/** Where an environment's episodes get their tapes: a recorder or a loaded recording. */
export interface ToolTape {
  episode(key: string, id: string): EpisodeTape;
  close(): void;
}

/** The tape of an environment that neither records nor replays. */
export const LIVE_TAPE: EpisodeTape = {
  replaying: false,
  listTools: (_server, live) => live(),
  call: (_server, _tool, _args, live) => live(),
};

/** A call (or a tool list) that the recording does not hold: the episode fails with this message. */
export class ReplayMissError extends Error {}

/** A recording that cannot be replayed: missing, unreadable, or a line that is not a recording's. */
export class RecordingFileError extends Error {}

const callKey = (server: string, tool: string, argsJson: string) => `${server}\u0000${tool}\u0000${argsJson}`;
const toolsHash = (tools: unknown) => sha256Hex(stableJson(tools)).slice(0, 16);

function ordinal(n: number): string {
  const s = n % 100 >= 11 && n % 100 <= 13 ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th');
  return `${n}${s}`;
}

function shorten(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

/** Appends every tool interaction of the environment's episodes to a JSONL file. */
export class ToolRecorder implements ToolTape {
  private readonly writer: JsonlWriter<RecordingLine>;
  private readonly written = new Set<string>();
  private closed = false;

  /** Opens `file` for appending (a partial last line, as a killed run leaves it, is cut off first). */
  constructor(readonly file: string) {
    // Not flushed to the disk after each line (a tool call's cost): a killed process loses nothing written.
    this.writer = new JsonlWriter<RecordingLine>(file, { sync: false });
    this.write({ type: 'header', format: RECORDING_FORMAT, version: RECORDING_VERSION, started_at: new Date().toISOString() });
  }

  private write(line: RecordingLine): void {
    if (!this.closed) this.writer.write(line);
  }

  episode(key: string, id: string): EpisodeTape {
    const seen = new Map<string, number>();
    let seq = 0;
    return {
      replaying: false,
      listTools: async (server, live, turn) => {
        const tools = await live();
        const hash = toolsHash(tools);
        const first = !this.written.has(hash);
        this.written.add(hash);
        this.write({ type: 'tools', episode: key, id, server, hash, ...(first ? { tools } : {}), ...(turn !== undefined ? { turn } : {}) });
        return tools;
      },
      call: async (server, tool, args, live) => {
        // Numbered as the call starts: identical calls made at once keep the order they were made in.
        const k = callKey(server, tool, stableJson(args));
        const n = seen.get(k) ?? 0;
        seen.set(k, n + 1);
        const s = seq++;
        const r = await live();
        const result = {
          content: r.content,
          ...(r.structured !== undefined ? { structuredContent: r.structured } : {}),
          isError: r.isError,
          ...(r.errorKind ? { errorKind: r.errorKind } : {}),
        };
        this.write({ type: 'call', episode: key, id, seq: s, server, tool, arguments: args, n, result, ms: r.ms });
        return r;
      },
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.writer.close();
  }
}

interface RecordedEpisode {
  id: string;
  tools: Map<string, ToolInfo[]>;
  /** Lists made again after a change: by server, by the policy turn they came before. */
  relists: Map<string, Map<number, ToolInfo[]>>;
  /** By call key, by occurrence. */
  calls: Map<string, Map<number, CallLine>>;
}

/** A recording loaded for replay (`ToolRecording.load`): every episode's tool lists and calls. */
export class ToolRecording implements ToolTape {
  private readonly episodes = new Map<string, RecordedEpisode>();

  private constructor(readonly file: string) {}

  /** The number of episodes recorded. */
  get size(): number {
    return this.episodes.size;
  }

  /** The recorded episode keys, in the order of their first line. */
  episodeKeys(): string[] {
    return [...this.episodes.keys()];
  }

  /**
   * Reads a recording. Throws RecordingFileError for a file that is missing or unreadable, and for
   * a line that is not JSON or not a recording's (naming the line); a partial last line (a killed
   * run's) is ignored, and said so to `onWarning`.
   */
  static load(file: string, options: { onWarning?: (message: string) => void } = {}): ToolRecording {
    if (!existsSync(file)) throw new RecordingFileError(`replay: ${file}: no such file (make one with --record ${file})`);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new RecordingFileError(`replay: cannot read ${file}: ${(err as Error).message}`);
    }
    const rec = new ToolRecording(file);
    const lines = text.split('\n');
    const definitions = new Map<string, ToolInfo[]>();
    const pending: { line: number; episode: RecordedEpisode; server: string; hash: string; turn?: number }[] = [];
    /** Episode ids superseded by a later recording of their key: their late lines are ignored. */
    const superseded = new Set<string>();
    let header = false;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      if (line.trim() === '') continue;
      const where = `${file}:${i + 1}`;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch (err) {
        if (i === lines.length - 1) {
          // No newline after it: the run was killed while writing it.
          (options.onWarning ?? ((m: string) => process.emitWarning(m, { code: 'MCP_GYM_RECORDING' })))(
            `replay: ${where}: the last line is partial (a run killed while writing it): ignored`,
          );
          continue;
        }
        throw new RecordingFileError(`replay: ${where}: invalid JSON: ${(err as Error).message}`);
      }
      const parsed = RecordingLineSchema.safeParse(value);
      if (!parsed.success) {
        if (!header && (value as { type?: unknown } | null)?.type !== 'header')
          throw new RecordingFileError(
            `replay: ${where}: not an mcp-gym tool recording (no header line {"type":"header","format":"${RECORDING_FORMAT}",...} before it)`,
          );
        const issue = parsed.error.issues[0]!;
        throw new RecordingFileError(`replay: ${where}: invalid line: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
      }
      const l = parsed.data;
      if (l.type === 'header') {
        header = true;
        continue;
      }
      if (!header) throw new RecordingFileError(`replay: ${where}: not an mcp-gym tool recording (no header line before it)`);
      if (superseded.has(`${l.episode}\u0000${l.id}`)) continue;
      let ep = rec.episodes.get(l.episode);
      if (!ep || ep.id !== l.id) {
        if (ep) superseded.add(`${l.episode}\u0000${ep.id}`);
        ep = { id: l.id, tools: new Map(), relists: new Map(), calls: new Map() };
        rec.episodes.delete(l.episode); // keeps the keys in the order of their last recording
        rec.episodes.set(l.episode, ep);
      }
      if (l.type === 'tools') {
        if (l.tools) definitions.set(l.hash, l.tools as ToolInfo[]);
        pending.push({ line: i + 1, episode: ep, server: l.server, hash: l.hash, ...(l.turn !== undefined ? { turn: l.turn } : {}) });
      } else {
        const k = callKey(l.server, l.tool, stableJson(l.arguments));
        let byN = ep.calls.get(k);
        if (!byN) ep.calls.set(k, (byN = new Map()));
        byN.set(l.n, l);
      }
    }
    if (!header) throw new RecordingFileError(`replay: ${file}: ${text.trim() === '' ? 'empty' : 'no header line'}: not an mcp-gym tool recording`);
    for (const p of pending) {
      const tools = definitions.get(p.hash);
      if (!tools) throw new RecordingFileError(`replay: ${file}:${p.line}: the tool list ${p.hash} is not written out in any line`);
      if (p.turn === undefined) p.episode.tools.set(p.server, tools);
      else {
        let byTurn = p.episode.relists.get(p.server);
        if (!byTurn) p.episode.relists.set(p.server, (byTurn = new Map()));
        byTurn.set(p.turn, tools);
      }
    }
    return rec;
  }

  episode(key: string): EpisodeTape {
    const ep = this.episodes.get(key);
    const seen = new Map<string, number>();
    const file = this.file;
    const episodes = this.episodes;
    let miss: string | undefined;
    const fail = (message: string): never => {
      miss ??= message;
      throw new ReplayMissError(message);
    };
    return {
      replaying: true,
      get miss() {
        return miss;
      },
      listTools: async (server) => {
        if (!ep)
          return fail(
            `replay: episode ${key} is not in the recording ${file} (it holds ${episodes.size} episode${episodes.size === 1 ? '' : 's'}): its tools/list of server '${server}' cannot be served`,
          );
        const tools = ep.tools.get(server);
        if (!tools)
          return fail(
            `replay: the recording ${file} has no tools/list of server '${server}' in episode ${key} (recorded servers: ${[...ep.tools.keys()].join(', ') || 'none'})`,
          );
        return tools;
      },
      relisted: (server, turn) => ep?.relists.get(server)?.get(turn),
      call: async (server, tool, args) => {
        const json = stableJson(args);
        const k = callKey(server, tool, json);
        const n = seen.get(k) ?? 0;
        seen.set(k, n + 1);
        const what = `server '${server}', tool '${tool}', arguments ${shorten(json)}`;
        if (!ep) return fail(`replay: episode ${key} is not in the recording ${file}: no result for ${what}`);
        const byN = ep.calls.get(k);
        const hit = byN?.get(n);
        if (!hit) {
          let why: string;
          if (byN && byN.size > 0) why = `the recording holds this call ${byN.size} time${byN.size === 1 ? '' : 's'}, and this is the ${ordinal(n + 1)}`;
          else {
            const prefix = callKey(server, tool, '');
            const others = [...ep.calls.entries()].filter(([c]) => c.startsWith(prefix)).map(([c]) => c.slice(prefix.length));
            why =
              others.length > 0
                ? `${server}.${tool} was recorded with other arguments: ${others
                    .slice(0, 3)
                    .map((a) => shorten(a, 120))
                    .join(', ')}${others.length > 3 ? `, ... (${others.length} in all)` : ''}`
                : `${server}.${tool} was not called in this episode of the recording`;
          }
          return fail(`replay: no recorded call in episode ${key}: ${what} (${why}; ${file})`);
        }
        const r = structuredClone(hit.result);
        return {
          content: r.content,
          ...(r.structuredContent !== undefined ? { structured: r.structuredContent } : {}),
          isError: r.isError,
          ms: hit.ms,
          ...(r.errorKind ? { errorKind: r.errorKind } : {}),
        };
      },
    };
  }

  close(): void {}
}

/**
 * The tape of an environment: a recorder for `record`, the loaded recording for `replay` (a file
 * is loaded here), none for neither. Both at once is an error.
 */
export function openTape(options: { record?: string; replay?: string | ToolRecording; onWarning?: (message: string) => void }): ToolTape | undefined {
  if (options.record !== undefined && options.replay !== undefined) throw new Error('record or replay the tool traffic, not both at once');
  if (options.replay !== undefined)
    return typeof options.replay === 'string' ? ToolRecording.load(options.replay, { onWarning: options.onWarning }) : options.replay;
  if (options.record !== undefined) return new ToolRecorder(options.record);
  return undefined;
}
