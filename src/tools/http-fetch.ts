/**
 * A fetch for the SDK's streamable HTTP client transport that does not pile listeners on the
 * transport's long-lived AbortSignal. The transport hands that one signal to every request, and
 * Node's fetch removes its abort listener from it only when the request object is garbage
 * collected: thousands of calls leave thousands of listeners (and a MaxListenersExceededWarning).
 * Here each request gets its own signal, linked to the transport's for exactly as long as the
 * request and its response body are in flight.
 */
import { setMaxListeners } from 'node:events';

/** Concurrent requests each hold one listener on the transport's signal while in flight. */
const raised = new WeakSet<AbortSignal>();
const MAX_IN_FLIGHT = 4096;
let linked = 0;

/** Listeners this module holds on transports' signals right now (one per request in flight). */
export function linkedListeners(): number {
  return linked;
}

export async function linkedFetch(url: string | URL, init?: RequestInit): Promise<Response> {
  const outer = init?.signal;
  if (!outer) return fetch(url, init);
  outer.throwIfAborted();
  if (!raised.has(outer)) {
    setMaxListeners(MAX_IN_FLIGHT, outer);
    raised.add(outer);
  }
  const ac = new AbortController();
  const onAbort = () => {
    unlink();
    ac.abort(outer.reason);
  };
  outer.addEventListener('abort', onAbort, { once: true });
  linked++;
  let unlinked = false;
  function unlink() {
    if (unlinked) return;
    unlinked = true;
    linked--;
    outer!.removeEventListener('abort', onAbort);
  }
  let res: Response;
  try {
    res = await fetch(url, { ...init, signal: ac.signal });
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
  const reader = res.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          unlink();
          controller.close();
        } else {
          controller.enqueue(value);
        }
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
}
