/**
 * The embedded policy behind an OpenAI-compatible HTTP server, in vLLM's formats, so that any
 * OpenAI client (and code written against vLLM) can sample from it:
 *
 *   GET  /v1/models             the served model, with `max_model_len` (its context) and `version`
 *   GET  /v1/models/<id>        the same, one model
 *   POST /v1/chat/completions   chat completions, tools, logprobs, token ids, streaming (SSE)
 *   POST /v1/reload             new weights: `{}` reloads the served directory when its version
 *                               changed; `{"model_dir": "..."}` switches to another directory
 *                               (same vocabulary and context); replies {version, model_dir, reloaded}
 *   GET  /health                200 while the server runs
 *
 * Every route checks the Host (and Origin, when sent) header against localhost names, the bound
 * host and `allowedHosts`, and, with a `token`, the `Authorization: Bearer <token>` header (the
 * scheme in any case); errors have OpenAI's shape `{error: {message, type, param, code}}`.
 *
 * Prompts are the model's own chat template (template.ts), rendered from the request's messages
 * exactly as the in-process OnnxPolicy renders the same conversation: system text (and the tool
 * names, when the model's template lists them), user turns, earlier assistant turns through
 * `assistantBody` (their content, then each tool call as `name arguments`), tool results through
 * `toolResult`, then `<|assistant|>`. Concurrent requests are sampled together with continuous
 * batching (GenerationBatcher and OnnxModel.serve, as OnnxPolicy samples episodes): a request
 * joins the running batch at the next decode step and is answered as soon as its own turn ends;
 * each row keeps its own temperature/top_p/top_k, token limit and random source (a request's
 * `seed` makes it reproducible whatever else is in the batch). Logprobs are those of the
 * distribution each token was sampled from (after temperature, top-k, top-p; 0 under greedy
 * decoding, temperature 0), as the learner recomputes them.
 *
 * Token ids: with `return_token_ids` (vLLM >= 0.10.2) the response carries the prompt's ids
 * (`prompt_token_ids`, top level) and the completion's (`choices[0].token_ids`): exactly the
 * sampled tokens, with the final `<|end|>` when the turn ended (as OnnxPolicy records turns), so
 * that a client can rebuild the episode's token sequence. `logprobs.content` has one entry per
 * token id; with `return_tokens_as_token_ids` each entry's `token` is `token_id:<id>`. Streamed,
 * each chunk carries its tokens' ids and logprobs, and the first chunk the prompt's ids.
 *
 * The assistant message is read from the tokens so that it renders back to them
 * (`parseCompletion`): `content` is the text before the first tool call, untrimmed; each closed
 * `<|tool_call|>name args<|/tool_call|>` is a tool call whose `arguments` are the text after the
 * name's one separating space, as sampled (not re-serialised, possibly not valid JSON). Sent back
 * in the next request, it renders to the same tokens, so the next `prompt_token_ids` extend this
 * prompt + completion. When it cannot (a client sees it by comparing `prompt_token_ids` with the
 * ids it holds; `stats().inexact` counts such completions):
 *   - a turn cut off by max_tokens or the context has no `<|end|>`, and the rendering adds one
 *     (so does OnnxPolicy, before the tool results): the next prompt then extends prompt +
 *     completion + `<|end|>`; it differs otherwise only when the cut falls inside a tool call or
 *     inside a UTF-8 character;
 *   - a malformed tool call (never closed, or without a tool name) is left out of the message;
 *     text after a tool call, a `<|/tool_call|>` without its opening, and a separator other
 *     than one space between a call's name and arguments do not render back as sampled;
 *   - bytes that are not valid UTF-8 become U+FFFD in the text (3 other bytes when rendered), a
 *     leading byte-order mark is dropped by the decoder, and special tokens sampled inside the
 *     text (other than the tool-call markers) are dropped.
 *
 * Not supported (400): `n` > 1, `top_logprobs` > 0, `stop` / `stop_token_ids`, penalties,
 * `logit_bias`, `tool_choice` other than `auto`, structured output. `max_tokens` (default: the
 * rest of the context, as vLLM) is clamped to what the context leaves (the turn then ends with
 * finish_reason `length`); a prompt that fills the context is a 400 naming both lengths.
 *
 * Reloading: rows already sampling finish on the weights they started with (new requests wait
 * for them, then start on the new weights); the old model is closed after them. The served
 * model's name (`modelName`, default the config's) stays the same across reloads;
 * `system_fingerprint` is `v<version>` of the weights that sampled the response.
 *
 * The folder, by job: server.ts (the HTTP server and its routes), http.ts (JSON bodies and errors in
 * OpenAI's shape), request.ts (reading and checking a chat request), chat.ts (a chat completion's
 * prompt and row), completion.ts (a completion answered whole), stream.ts (a completion streamed),
 * reload.ts (POST /v1/reload), state.ts (what the routes share), types.ts (the public types); this
 * file is its face.
 */
export { startPolicyServer } from './server.ts';
export type { PolicyServer, PolicyServerOptions, PolicyServerStats } from './types.ts';
export { parseCompletion, type ParsedCall } from '../serve-dialect.ts';
