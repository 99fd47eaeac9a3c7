/**
 * The client's limit on the size of one message from a server (a tool result, a notification):
 * what the transports do when a server sends more, and how it reaches the caller. Over stdio the
 * limit applies to one line, over streamable HTTP to one JSON body or one SSE event, in-process to
 * the JSON of a result. A message over it never crashes the client nor is held whole in memory:
 * the call it answers becomes an `isError` result of kind `too_large`.
 *
 * To fail exactly the call whose answer was too large, a transport that can tell which request it
 * answered hands the client a JSON-RPC error response for that request id, marked in its `data`;
 * the SDK's client then rejects that one request with a `ProtocolError` carrying the mark.
 */
import type { JSONRPCMessage } from '@modelcontextprotocol/client';

/** The default limit: 10 MiB. */
export const DEFAULT_MAX_RESULT_BYTES = 10 * 1024 * 1024;

/** The key, in a synthesized error response's `data`, that marks it as ours. */
export const TOO_LARGE_MARK = 'mcp-gym/too_large';
/** The JSON-RPC error code of a synthesized "too large" response (implementation-defined range). */
export const TOO_LARGE_CODE = -32_097;

export interface TooLarge {
  /** Bytes of the message: exact when `exact`, otherwise how many were read before giving up. */
  size: number;
  exact: boolean;
  limit: number;
}

const fmt = (n: number) => n.toLocaleString('en-US');

/** `result too large: N bytes, the limit is L bytes` (or `over N bytes ...` when the rest was not read). */
export function tooLargeMessage(t: TooLarge): string {
  return t.exact
    ? `result too large: ${fmt(t.size)} bytes, the limit is ${fmt(t.limit)} bytes`
    : `result too large: over ${fmt(t.size)} bytes (the rest was not read), the limit is ${fmt(t.limit)} bytes`;
}

/** Thrown into a response body stream (HTTP) when a message goes over the limit. */
export class ResultTooLargeError extends Error implements TooLarge {
  override name = 'ResultTooLargeError';
  readonly size: number;
  readonly exact: boolean;
  readonly limit: number;
  constructor(t: TooLarge) {
    super(tooLargeMessage(t));
    this.size = t.size;
    this.exact = t.exact;
    this.limit = t.limit;
  }
}

/** A JSON-RPC error response for request `id` saying its answer was too large. */
export function tooLargeResponse(id: string | number, t: TooLarge): JSONRPCMessage {
  return {
    jsonrpc: '2.0',
    id,
    error: { code: TOO_LARGE_CODE, message: tooLargeMessage(t), data: { [TOO_LARGE_MARK]: { size: t.size, exact: t.exact, limit: t.limit } } },
  } as JSONRPCMessage;
}

/** The "too large" facts an error carries (our stream error, or a marked error response), if any. */
export function tooLargeOf(err: unknown): TooLarge | undefined {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof ResultTooLargeError) return { size: e.size, exact: e.exact, limit: e.limit };
    const mark = ((e as { data?: unknown }).data as Record<string, unknown> | undefined)?.[TOO_LARGE_MARK] as TooLarge | undefined;
    if (mark && typeof mark.size === 'number' && typeof mark.limit === 'number') return { size: mark.size, exact: mark.exact === true, limit: mark.limit };
  }
  return undefined;
}

/**
 * The id of the JSON-RPC response that an oversized message is, guessed from its first and last
 * bytes (it is never parsed whole): undefined unless the first top-level member named is `result`
 * or `error` (a request or notification from the server names `method` first and its id, if any,
 * is the server's own) and the id is a plain number or string in the head or at the very end.
 */
export function responseIdOf(head: string, tail: string): string | number | undefined {
  const first = /"(result|error|method)"\s*:/.exec(head);
  if (!first || first[1] === 'method') return undefined;
  const idPattern = /"id"\s*:\s*(-?\d{1,15}|"(?:[^"\\]|\\.){0,200}")/;
  // `{"jsonrpc":"2.0","id":3,"result":...}`: the id before the result.
  const before = idPattern.exec(head.slice(0, first.index));
  const raw = before?.[1] ?? new RegExp(`${idPattern.source}\\s*\\}\\s*$`).exec(tail)?.[1];
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw) as string | number;
  } catch {
    return undefined;
  }
}
