/**
 * `mcp-gym demo`: starts every bundled server as a real stdio process through this command line,
 * lists its tools and runs its example calls: the quickest way to see the tool layer work.
 */
import { bundledServers } from '../../servers/index.ts';
import { CLI_PATH } from '../paths.ts';
import { resultText, ToolClient } from '../tools/index.ts';

const CLI = CLI_PATH;

export async function demo(): Promise<void> {
  let failures = 0;
  for (const def of Object.values(bundledServers)) {
    const t0 = performance.now();
    const client = await ToolClient.connect({ transport: 'stdio', command: process.execPath, args: [CLI, 'serve', def.name] });
    try {
      const tools = await client.listTools();
      console.log(`\n== ${def.name} (stdio, pid ${client.pid}, connected in ${(performance.now() - t0).toFixed(0)} ms): ${def.description}`);
      console.log(`   tools: ${tools.map((t) => t.name).join(', ')}`);
      for (const ex of def.examples) {
        const r = await client.call({ name: ex.tool, arguments: ex.arguments }, { episode: 'demo' });
        if (r.isError) failures++;
        const text = resultText(r).replace(/\s+/g, ' ');
        console.log(
          `   ${ex.tool}(${JSON.stringify(ex.arguments)}) -> ${r.isError ? 'ERROR ' : ''}${text.length > 160 ? text.slice(0, 157) + '...' : text}  [${r.ms.toFixed(2)} ms]`,
        );
      }
    } finally {
      await client.close();
    }
  }
  console.log(`\n${Object.keys(bundledServers).length} servers, ${failures} failed example calls.`);
  console.log('Serve one yourself: npx mcp-gym serve <name> [--http --port 3000 --token T]; list them: npx mcp-gym servers');
  if (failures > 0) process.exitCode = 1;
}
