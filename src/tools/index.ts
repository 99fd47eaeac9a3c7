/** The MCP client side: reaching servers over any transport, discovering and calling tools. */
export { ToolClient, EPISODE_META_KEY } from './client.ts';
export type { CallOptions, CallRequest, ConnectOptions } from './client.ts';
export {
  ToolCallSchema,
  ToolResultSchema,
  ToolInfoSchema,
  ToolErrorKindSchema,
  ServerSpecSchema,
  StdioSpecSchema,
  HttpSpecSchema,
  InProcessSpecSchema,
  errorResult,
  resultText,
} from './contracts.ts';
export type { ToolCall, ToolResult, ToolInfo, ToolErrorKind, ServerSpec, StdioSpec, HttpSpec, InProcessSpec, ContentBlock } from './contracts.ts';
export { ProcessStdioTransport } from './stdio.ts';
export { descendants, isAlive, killTree } from './process-tree.ts';
export { sampleFromSchema } from './schema-sample.ts';
export { createLinkedFetch, linkedFetch, linkedListeners } from './http-fetch.ts';
export type { FetchFn, LinkedFetchOptions } from './http-fetch.ts';
export { DEFAULT_MAX_RESULT_BYTES, ResultTooLargeError, tooLargeMessage } from './limits.ts';
export type { TooLarge } from './limits.ts';
