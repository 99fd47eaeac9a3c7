/** `mcp-gym view [dir...]`: serve the viewer (src/view/) over the run, eval and bench directories under the given paths. */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { discover, startViewer } from '../view/index.ts';
import { checkToken, intFlag, UsageError } from './args.ts';

export const VIEW_HELP = `Usage: mcp-gym view [dir ...] [options]

A local web page over every training run, eval, rollout and bench directory under the given
paths (default: runs/): the list, the curves of each run's metrics (several runs overlaid), its
config, its trajectories, evaluations (pass@k, pass^k, failures by cause) and benchmarks.
Every asset is served by the viewer: no network is used.

Options:  --port N     the port (default 0: a free one; the URL is printed)
          --host H     the interface to bind (default 127.0.0.1)
          --token T    require the token (or env MCP_GYM_TOKEN): the printed URL carries it
          --allowed-host N  also accept N in the Host header (beyond localhost, the bound host and, on
                       0.0.0.0 or ::, this machine's name and addresses); repeatable, or N1,N2
`;

export async function viewCommand(argv: string[]): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        port: { type: 'string' },
        host: { type: 'string', default: '127.0.0.1' },
        token: { type: 'string' },
        'allowed-host': { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(VIEW_HELP);
    return;
  }
  const roots = (positionals.length ? positionals : ['runs']).map((p) => resolve(p));
  for (const r of roots) if (!existsSync(r)) throw new UsageError(`view: ${r} does not exist`);
  const port = intFlag(values.port, '--port', 0);
  if (port < 0 || port > 65535) throw new UsageError('--port must be from 0 to 65535');
  if (values.token !== undefined) checkToken(values.token, '--token');
  const envToken = process.env.MCP_GYM_TOKEN;
  if (values.token === undefined && envToken !== undefined) checkToken(envToken, 'MCP_GYM_TOKEN');
  const token = values.token ?? envToken;
  const allowedHosts = (values['allowed-host'] ?? []).flatMap((v) => v.split(',')).map((h) => h.trim());
  if (allowedHosts.includes('')) throw new UsageError('--allowed-host needs a host name: --allowed-host NAME (repeatable) or --allowed-host NAME1,NAME2');
  const viewer = await startViewer({ roots, host: values.host, port, token, allowedHosts });
  const n = discover(roots).length;
  console.log(`mcp-gym view: ${viewer.url}`);
  process.stderr.write(`${n} run, eval and bench director${n === 1 ? 'y' : 'ies'} under ${roots.join(', ')}; Ctrl-C stops\n`);
  await new Promise<void>((done) => {
    const stop = () => void viewer.close().then(done);
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
