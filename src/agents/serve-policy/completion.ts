/**
 * A chat completion being answered: the turn (its request, prompt and row), the parts of a response
 * (logprob entries, tool call ids, usage, finish reason), and a completion answered whole.
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { RandomFn } from '../../../lib/index.ts';
import type { Generation, OnnxModel } from '../onnx/index.ts';
import type { Dialect } from '../serve-dialect.ts';
import { sendJson } from './http.ts';
import type { ChatRequest } from './request.ts';
import type { ServeState } from './state.ts';

/** A request accepted: the model that samples it (the batcher's when it came) and its dialect, its prompt, and its row's settings. */
export interface Turn {
  r: ChatRequest;
  model: OnnxModel;
  dialect: Dialect;
  prompt: number[];
  maxNew: number;
  rng: RandomFn;
  /** The completion's id and creation time. */
  id: string;
  now: number;
  /** Aborted when the client goes away. */
  abort: AbortController;
}

/** A sampled token's `logprobs.content` entry. */
export function logprobEntry(t: Turn, token: number, logprob: number) {
  return {
    token: t.r.tokensAsIds ? `token_id:${token}` : t.dialect.tokenText(token),
    logprob,
    bytes: t.dialect.tokenBytes(token),
    top_logprobs: [],
  };
}

export const callId = () => `call_${randomBytes(12).toString('hex')}`;

export function usage(t: Turn, g: Generation) {
  return { prompt_tokens: t.prompt.length, completion_tokens: g.tokens.length, total_tokens: t.prompt.length + g.tokens.length };
}

export function finishReason(g: Generation, calls: number): 'tool_calls' | 'stop' | 'length' {
  if (!g.stopped) return 'length';
  return calls ? 'tool_calls' : 'stop';
}

/** The completion in one response, once its turn has ended. */
export async function answerWhole(s: ServeState, res: ServerResponse, t: Turn): Promise<void> {
  const { r, dialect, prompt, abort } = t;
  const g = await s.batcher.submit({ prompt, maxNewTokens: t.maxNew, sampling: r.sampling, rng: t.rng, signal: abort.signal });
  if (abort.signal.aborted) return;
  const { content, toolCalls, rendersBack } = dialect.parse(r, g.tokens);
  if (!rendersBack) s.inexact++;
  sendJson(res, 200, {
    id: t.id,
    object: 'chat.completion',
    created: t.now,
    model: s.modelName,
    system_fingerprint: `v${g.version}`,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: toolCalls.length && !content ? null : content,
          ...(toolCalls.length
            ? { tool_calls: toolCalls.map((c) => ({ id: callId(), type: 'function', function: { name: c.name, arguments: c.arguments } })) }
            : {}),
        },
        logprobs: r.logprobs ? { content: g.tokens.map((tok, i) => logprobEntry(t, tok, g.logprobs[i]!)) } : null,
        finish_reason: finishReason(g, toolCalls.length),
        stop_reason: null,
        ...(r.returnTokenIds ? { token_ids: g.tokens } : {}),
      },
    ],
    usage: usage(t, g),
    ...(r.returnTokenIds ? { prompt_token_ids: prompt } : {}),
  });
}
