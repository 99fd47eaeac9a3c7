/**
 * The HTTP plumbing of the policy server: errors in OpenAI's shape `{error: {message, type, param,
 * code}}`, JSON request bodies read (lib/http-json.ts: within a size limit) and checked, and JSON
 * responses sent.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError, isJsonObject, readJsonObject, sendJson } from '../../../lib/index.ts';

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

export const isObject = isJsonObject;
export const given = (x: unknown) => x !== undefined && x !== null;

/** The body as a JSON object; a body too large or not a JSON object is an ApiError in OpenAI's shape. */
export async function readJson(req: IncomingMessage, emptyIs?: Record<string, unknown>): Promise<Record<string, unknown>> {
  try {
    return await readJsonObject(req, emptyIs);
  } catch (err) {
    if (err instanceof HttpError) throw new ApiError(err.status, err.message, 'invalid_request_error', err.code);
    throw err;
  }
}

export { sendJson };

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
