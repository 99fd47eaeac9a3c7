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
  OpenEnvSpecSchema,
  InProcessSpecSchema,
  errorResult,
  resultText,
  CONTROL_META_KEY,
  isControlTool,
} from './contracts.ts';
export type {
  ToolCall,
  ToolResult,
  ToolInfo,
  ResourceInfo,
  ToolErrorKind,
  ServerSpec,
  StdioSpec,
  HttpSpec,
  OpenEnvSpec,
  InProcessSpec,
  ContentBlock,
} from './contracts.ts';
export { ProcessStdioTransport } from './stdio.ts';
export { descendants, isAlive, killTree } from './process-tree.ts';
export { sampleFromSchema } from './schema-sample.ts';
export { createLinkedFetch, linkedFetch, linkedListeners } from './http-fetch.ts';
export type { FetchFn, LinkedFetchOptions } from './http-fetch.ts';
export { DEFAULT_MAX_RESULT_BYTES, ResultTooLargeError, tooLargeMessage } from './limits.ts';
export type { TooLarge } from './limits.ts';
export { FixturesSchema } from './contracts.ts';
export type { Fixtures } from './contracts.ts';
export { FIXTURE_PLACEHOLDER, FixtureError, checkFixtures, prepareFixture } from './fixtures.ts';
export type { Fixture, Launch } from './fixtures.ts';
export {
  TOOL_SURFACE_FILE,
  canonicalJson,
  canonicalHash,
  toolFingerprint,
  toolSurface,
  surfacesHash,
  compareSurfaces,
  compareSurfaceSets,
  isEmptyDiff,
  hasDrift,
  describeDrift,
  driftWarning,
  readToolSurfaces,
  writeToolSurfaces,
  ToolFingerprintSchema,
  ServerSurfaceSchema,
  ToolSurfaceFileSchema,
} from './surface.ts';
export type { ToolFingerprint, ServerSurface, ToolSurfaces, ToolSurfaceFile, SurfacePart, SurfaceDiff, SurfacesDrift } from './surface.ts';
