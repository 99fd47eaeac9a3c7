/**
 * POST /v1/chat/completions: the request read and checked, its prompt rendered in the served
 * model's dialect and fitted to the context, and its completion answered whole or streamed.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { seededRandom, type RandomFn } from '../../../lib/index.ts';
import { answerWhole } from './completion.ts';
import { ApiError, given, readJson } from './http.ts';
import { readChatRequest } from './request.ts';
import type { ServeState } from './state.ts';
import { answerStream } from './stream.ts';

export async function chat(s: ServeState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readJson(req);
  if (given(body.model) && body.model !== s.modelName) {
    throw new ApiError(
      404,
      `The model \`${String(body.model)}\` does not exist: this server serves \`${s.modelName}\``,
      'invalid_request_error',
      'model_not_found',
      'model',
    );
  }
  const r = readChatRequest(body);
  const model = s.batcher.model;
  const dialect = s.models.dialectOf(model);
  const prompt = dialect.prompt(r);
  if (prompt.length >= model.maxLen) {
    // OpenAI's code for it, so that clients can tell it from other bad requests.
    throw new ApiError(
      400,
      `This model's maximum context length is ${model.maxLen} tokens, but the messages take ${prompt.length} tokens (at least one must be left for the completion). Shorten the messages.`,
      'invalid_request_error',
      'context_length_exceeded',
      'messages',
    );
  }
  const maxNew = Math.min(r.maxTokens ?? Infinity, model.maxLen - prompt.length);
  const rng: RandomFn = seededRandom(r.seed ?? Math.floor(s.serverRng() * 2 ** 32));
  const id = `chatcmpl-${randomUUID().replaceAll('-', '')}`;
  const now = Math.floor(Date.now() / 1000);
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('the client went away'));
  });
  s.requests++;
  const turn = { r, model, dialect, prompt, maxNew, rng, id, now, abort };
  if (!r.stream) return answerWhole(s, res, turn);
  return answerStream(s, res, turn);
}
