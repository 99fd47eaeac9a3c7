/** The bundled MCP servers, by name. */
import type { ServerDefinition } from './common.ts';
import { calculatorServer } from './calculator.ts';
import { kvServer } from './kv.ts';
import { filesServer } from './files.ts';
import { searchServer } from './search.ts';
import { sqlServer } from './sql.ts';

export { EPISODE_META_KEY, DEFAULT_EPISODE, ToolError, EpisodeStore, defineServer, defineTool, buildMcpServer, serverFactory } from './common.ts';
export type { ServerDefinition, ToolDef, Backend, BackendOptions } from './common.ts';
export { serveOverStdio, serveOverHttp } from './serve.ts';
export type { HttpOptions, HttpServing, StdioServing } from './serve.ts';

// The servers' published data, not internals: the `search` server's corpus and its index, and the
// `sql` server's shop data set, which the task suites (src/env/suites) read to write questions and
// compute their answers. Exported here so that src/ never reaches into a server's own files.
export { CORPUS } from './corpus.ts';
export type { Doc, DocKind } from './corpus.ts';
export { corpusIndex } from './search.ts';
export { buildShopDatabase, generateShop, SHOP_DB_FILE } from './shop-data.ts';
export type { ShopData } from './shop-data.ts';

export const bundledServers: Record<string, ServerDefinition<never>> = {
  calculator: calculatorServer as ServerDefinition<never>,
  kv: kvServer as ServerDefinition<never>,
  files: filesServer as ServerDefinition<never>,
  search: searchServer as ServerDefinition<never>,
  sql: sqlServer as ServerDefinition<never>,
};

export function bundledServer(name: string): ServerDefinition<never> {
  const def = bundledServers[name];
  if (!def) throw new Error(`Unknown bundled server '${name}'. Bundled servers: ${Object.keys(bundledServers).join(', ')}`);
  return def;
}
