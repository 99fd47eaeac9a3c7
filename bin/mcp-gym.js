#!/usr/bin/env node
// Entry point of the `mcp-gym` command: runs the compiled CLI in dist/ (built by `npm run build`,
// by `npm start` and `npm test` when the sources changed, and before `npm pack`).
import { existsSync } from 'node:fs';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write('mcp-gym: the compiled CLI (dist/src/cli/main.js) is missing.\n' + 'In a checkout of mcp-gym, build it first: npm run build\n');
  process.exit(1);
}
const { main: run } = await import(main.href);
await run(process.argv.slice(2));
