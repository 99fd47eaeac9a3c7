/**
 * The fetch that the client gives the SDK's streamable HTTP client transport. It does two things.
 *
 * It does not pile listeners on the transport's long-lived AbortSignal. The transport hands that
 * one signal to every request, and Node's fetch removes its abort listener from it only when the
 * request object is garbage collected: thousands of calls leave thousands of listeners (and a
 * MaxListenersExceededWarning). Here each request gets its own signal, linked to the transport's
 * for exactly as long as the request and its response body are in flight.
 *
 * It bounds what a response may hold (`maxMessageBytes`, see limits.ts): a JSON body, or one
 * event of an SSE stream, over the limit is never read whole. A JSON body over it fails the
 * request with a `ResultTooLargeError` (before any of it is read when its Content-Length says
 * so); an SSE event over it is cut off, and the stream ends with an error response for the
 * request it answers, so that the SDK fails that request at once instead of waiting for its
 * timeout. The connection is dropped either way: the rest of the body is never downloaded.
 */
import { setMaxListeners } from 'node:events';
import { DEFAULT_MAX_RESULT_BYTES, ResultTooLargeError, tooLargeResponse, type TooLarge } from './limits.ts';

/** Concurrent requests each hold one listener on the transport's signal while in flight. */
const raised = new WeakSet<AbortSignal>();
const MAX_IN_FLIGHT = 4096;
let linked = 0;

/** Listeners this module holds on transports' signals right now (one per request in flight). */
export function linkedListeners(): number {
  return linked;
}

export interface LinkedFetchOptions {
  /** The largest JSON body, or SSE event, read from a response, bytes. Default 10 MiB. */
  maxMessageBytes?: number;
}

export type FetchFn = (url: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * Counts the bytes of the current event of an SSE stream (its lines' content, line ends left
 * out); a blank line ends an event. Lines may end in \n, \r\n or \r, split anywhere across chunks.
 */
class SseEventSize {
  private event = 0;
  private lineEmpty = true;
  private lastCR = false;

  /** Feeds a chunk; returns the offset in it of the first byte over `max`, or -1. */
  feed(chunk: Uint8Array, max: number): number {
    const b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let lf = -2;
    let cr = -2;
    for (let i = 0; i < b.length; ) {
      if (lf !== -1 && lf < i) lf = b.indexOf(0x0a, i);
      if (cr !== -1 && cr < i) cr = b.indexOf(0x0d, i);
      const j = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
      const content = (j === -1 ? b.length : j) - i;
      if (content > 0) {
        if (this.event + content > max) return i + (max - this.event);
        this.event += content;
        this.lineEmpty = false;
        this.lastCR = false;
      }
      if (j === -1) return -1;
      i = j + 1;
      if (b[j] === 0x0a && this.lastCR) {
        this.lastCR = false; // the \n of a \r\n
        continue;
      }
      this.lastCR = b[j] === 0x0d;
      if (this.lineEmpty) this.event = 0; // a blank line: the event is over
      this.lineEmpty = true;
    }
    return -1;
  }
}

/** The id of the JSON-RPC request a fetch sends (one request, not a batch or a notification), if any. */
function requestIdOf(init: RequestInit | undefined): string | number | undefined {
  if (typeof init?.body !== 'string') return undefined;
  try {
    const msg = JSON.parse(init.body) as { id?: unknown; method?: unknown };
    if (msg && typeof msg === 'object' && !Array.isArray(msg) && typeof msg.method === 'string' && (typeof msg.id === 'number' || typeof msg.id === 'string'))
      return msg.id;
  } catch {
    // not JSON
  }
  return undefined;
}

const encoder = new TextEncoder();

/** A fetch for the SDK's streamable HTTP client transport (see the top of this file). */
export function createLinkedFetch(options: LinkedFetchOptions = {}): FetchFn {
  const max = options.maxMessageBytes ?? DEFAULT_MAX_RESULT_BYTES;
  return async function linkedFetch(url: string | URL, init?: RequestInit): Promise<Response> {
    const outer = init?.signal ?? undefined;
    if (outer) {
      outer.throwIfAborted();
      if (!raised.has(outer)) {
        setMaxListeners(MAX_IN_FLIGHT, outer);
        raised.add(outer);
      }
    }
    const ac = new AbortController();
    const onAbort = () => {
      unlink();
      ac.abort(outer!.reason);
    };
    let unlinked = !outer;
    if (outer) {
      outer.addEventListener('abort', onAbort, { once: true });
      linked++;
    }
    function unlink() {
      if (unlinked) return;
      unlinked = true;
      linked--;
      outer!.removeEventListener('abort', onAbort);
    }
    let res: Response;
    try {
      res = await fetch(url, outer ? { ...init, signal: ac.signal } : init);
    } catch (err) {
      unlink();
      throw err;
    }
    // Nothing to wait for: no body, or an empty one (202 Accepted for notifications) that the
    // transport may never read.
    if (!res.body || res.status === 202 || res.status === 204 || res.headers.get('content-length') === '0') {
      unlink();
      return res;
    }
    const sse = /^\s*text\/event-stream\s*(;|$)/i.test(res.headers.get('content-type') ?? '');
    const declared = Number(res.headers.get('content-length') ?? NaN);
    if (!sse && declared > max) {
      unlink();
      await res.body.cancel().catch(() => {});
      ac.abort();
      throw new ResultTooLargeError({ size: declared, exact: true, limit: max });
    }
    const events = sse ? new SseEventSize() : undefined;
    let total = 0;
    const reader = res.body.getReader();
    let over = false;
    const stop = (controller: ReadableStreamDefaultController<Uint8Array>, t: TooLarge, kept: Uint8Array | undefined) => {
      over = true;
      unlink();
      // Drop the connection: the rest of the body is never downloaded.
      void reader.cancel().catch(() => {});
      ac.abort();
      const id = sse ? requestIdOf(init) : undefined;
      if (id === undefined) return controller.error(new ResultTooLargeError(t));
      if (kept && kept.length > 0) controller.enqueue(kept);
      // End the cut event (whatever it held is not JSON, and is dropped), then answer the request.
      controller.enqueue(encoder.encode(`\n\nevent: message\ndata: ${JSON.stringify(tooLargeResponse(id, t))}\n\n`));
      controller.close();
    };
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (over) return;
        try {
          const { done, value } = await reader.read();
          if (done) {
            unlink();
            controller.close();
            return;
          }
          if (events) {
            const at = events.feed(value, max);
            if (at >= 0) return stop(controller, { size: max, exact: false, limit: max }, value.subarray(0, at));
          } else {
            total += value.length;
            if (total > max) return stop(controller, { size: total, exact: false, limit: max }, undefined);
          }
          controller.enqueue(value);
        } catch (err) {
          unlink();
          controller.error(err);
        }
      },
      cancel(reason) {
        unlink();
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/** A linked fetch with the default limit. */
export const linkedFetch: FetchFn = createLinkedFetch();
