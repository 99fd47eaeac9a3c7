/** A chat completion streamed (server-sent events): one chunk per sampled token as it is sampled, read by the dialect's streaming parser. */
import type { ServerResponse } from 'node:http';
import type { BatchedGeneration } from '../onnx/index.ts';
import type { Delta } from '../serve-dialect.ts';
import { callId, finishReason, logprobEntry, usage, type Turn } from './completion.ts';
import { ApiError, errorBody } from './http.ts';
import type { ServeState } from './state.ts';

/** Streams the turn's completion: the first chunk (with the prompt's ids), a chunk per token, the calls read at the end, the finish. */
export async function answerStream(s: ServeState, res: ServerResponse, t: Turn): Promise<void> {
  const { r, dialect, prompt, abort, id, now } = t;
  // Streaming: one chunk per sampled token, as it is sampled (the same parser, token by token).
  const parser = dialect.streamer();
  const callIds: string[] = [];
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  let fingerprint = `v${t.model.version}`;
  const send = (choices: unknown[], extra: Record<string, unknown> = {}) => {
    if (!res.writableEnded && !res.destroyed)
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: now, model: s.modelName, system_fingerprint: fingerprint, choices, ...extra })}\n\n`,
      );
  };
  const deltaOf = (d: Delta) => ({
    ...(d.content ? { content: d.content } : {}),
    ...(d.call
      ? {
          tool_calls: [
            { index: callIds.length - 1, id: callIds[callIds.length - 1], type: 'function', function: { name: d.call.name, arguments: d.call.arguments } },
          ],
        }
      : {}),
  });
  send([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], r.returnTokenIds ? { prompt_token_ids: prompt } : {});
  let g: BatchedGeneration;
  try {
    g = await s.batcher.submit({
      prompt,
      maxNewTokens: t.maxNew,
      sampling: r.sampling,
      rng: t.rng,
      signal: abort.signal,
      onToken: (token, logprob) => {
        const d = parser.push(token);
        if (d.call) callIds.push(callId());
        send([
          {
            index: 0,
            delta: deltaOf(d),
            logprobs: r.logprobs ? { content: [logprobEntry(t, token, logprob)] } : null,
            finish_reason: null,
            ...(r.returnTokenIds ? { token_ids: [token] } : {}),
          },
        ]);
      },
    });
  } catch (err) {
    if (!res.writableEnded && !res.destroyed) {
      res.write(`data: ${JSON.stringify(errorBody(new ApiError(500, (err as Error).message, 'internal_server_error')))}\n\n`);
      res.end('data: [DONE]\n\n');
    }
    return;
  }
  if (abort.signal.aborted) return;
  fingerprint = `v${g.version}`;
  const tail = parser.finish();
  if (!dialect.parse(r, g.tokens).rendersBack) s.inexact++;
  if (tail.call) callIds.push(callId());
  if (tail.content || tail.call) send([{ index: 0, delta: deltaOf(tail), logprobs: null, finish_reason: null }]);
  // Calls read only once the turn ended (a Hugging Face model's, from the whole text) go out now, one chunk each.
  while (callIds.length < parser.calls.length) {
    callIds.push(callId());
    send([{ index: 0, delta: deltaOf({ call: parser.calls[callIds.length - 1]! }), logprobs: null, finish_reason: null }]);
  }
  send([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReason(g, parser.calls.length), stop_reason: null }]);
  if (r.includeUsage) send([], { usage: usage(t, g) });
  res.end('data: [DONE]\n\n');
}
