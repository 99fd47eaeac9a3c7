/**
 * JSON over the project's HTTP servers (`serve-policy`, `serve-env`): a request body read within a
 * size limit and parsed as a JSON object, a JSON response sent; a body that is too large or not a
 * JSON object is an HttpError naming what is wrong (each server answers it in its own error shape).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** A request the server refuses: its HTTP status, and a code for servers whose error shape has one. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** A JSON object (not null, not an array). */
export const isJsonObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

export const MAX_BODY_BYTES = 32 * 2 ** 20;

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `The request body is over ${MAX_BODY_BYTES} bytes`, 'request_too_large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The request's body as a JSON object (`emptyIs` for an empty body, when given). */
export async function readJsonObject(req: IncomingMessage, emptyIs?: Record<string, unknown>): Promise<Record<string, unknown>> {
  const text = await readBody(req);
  if (text.trim() === '' && emptyIs) return emptyIs;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (!isJsonObject(body)) throw new HttpError(400, 'The request body must be a JSON object');
  return body;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}
