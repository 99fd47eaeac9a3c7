/**
 * The HTTP plumbing of the policy server: errors in OpenAI's shape `{error: {message, type, param,
 * code}}`, JSON request bodies read (within a size limit) and checked, and JSON responses sent.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** An error answered in OpenAI's shape. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = 'invalid_request_error',
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/** A 400: a request malformed or asking what is not supported (`param` names the parameter). */
export const bad = (message: string, param: string | null = null) => new ApiError(400, message, 'invalid_request_error', null, param);

const MAX_BODY_BYTES = 32 * 2 ** 20;

export const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
export const given = (x: unknown) => x !== undefined && x !== null;

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, `The request body is over ${MAX_BODY_BYTES} bytes`, 'invalid_request_error', 'request_too_large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function readJson(req: IncomingMessage, emptyIs?: Record<string, unknown>): Promise<Record<string, unknown>> {
  const text = await readBody(req);
  if (text.trim() === '' && emptyIs) return emptyIs;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw bad(`The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(body)) throw bad('The request body must be a JSON object');
  return body;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

export function errorBody(e: ApiError) {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

export function sendError(res: ServerResponse, e: ApiError, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  sendJson(res, e.status, errorBody(e), headers);
}
