/** bench/scaling.ts's options (parsed at import: --help prints and exits, a bad value exits 2) and its output helpers. */
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';

export const HELP = `bench/scaling.ts: per-component costs of one RL step on this machine (issue 36; docs/scaling.md)

  npx tsx bench/scaling.ts [options]

  --models LIST        comma-separated: calc-tiny (the embedded model of npm start), a registered
                       model (smollm2-135m), a model directory or a .gguf file
                       (default calc-tiny,smollm2-135m; with --quick: calc-tiny)
  --quick              calc-tiny, fewer repeats, half the requests (about 20 s on a quiet machine)
  --reps N             sampling rounds, each: 1 server, 2 servers on the same requests, 2 servers each
                       as loaded as the one (default 3; quick 2)
  --clients N          requests in flight in all, over the servers (default: 64 calc-tiny, 16 others)
  --requests N         requests per run (default: 512 calc-tiny, 16 others (one batch); quick: half)
  --max-tokens N       max_tokens of each request (default: 64 calc-tiny, 48 others)
  --server-threads N   each serve-policy's --threads (default 1: two servers fill the 2 cores)
  --learner-threads N  the learner's CPU threads (default: the cores, ${cpus().length})
  --learner-steps N    timed train steps (after one warm-up), each followed by a push (default 3; quick 2)
  --learner-batch N    sequences per train step (default: 64 calc-tiny, 4 others; the warm-up step: 2)
  --learner-seq N      tokens per sequence (default 256; at most the model's context)
  --no-lora            skip the LoRA learner (Hugging Face models only)
  --no-learner         sampling only: no learner, no push, no LoRA
  --cli auto|dist|src  how serve-policy runs: dist (bin/mcp-gym.js, needs npm run build), src (the
                       sources under tsx), auto (default: dist when it is current, else src)
  --keep               keep the temporary model copies (their path is printed)
  -h, --help           this text

Output: JSON lines ({"bench": "scaling", "kind": "sampling" | "learner" | "push" | "lora" | "cpu_ceiling" |
"model", ...}), then a table. Feed the JSON lines to the model: npx tsx bench/scaling.ts | tee out.txt;
python3 bench/scaling_model.py --calibrate out.txt.
`;

export class BenchError extends Error {}

export const { values } = (() => {
  try {
    return parseArgs({
      options: {
        models: { type: 'string' },
        quick: { type: 'boolean', default: false },
        reps: { type: 'string' },
        clients: { type: 'string' },
        requests: { type: 'string' },
        'max-tokens': { type: 'string' },
        'server-threads': { type: 'string', default: '1' },
        'learner-threads': { type: 'string', default: String(cpus().length) },
        'learner-steps': { type: 'string' },
        'learner-batch': { type: 'string' },
        'learner-seq': { type: 'string', default: '256' },
        'no-lora': { type: 'boolean', default: false },
        'no-learner': { type: 'boolean', default: false },
        cli: { type: 'string', default: 'auto' },
        keep: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    process.stderr.write(`bench/scaling.ts: ${(err as Error).message}\n(--help lists the options)\n`);
    process.exit(2);
  }
})();
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}

/** A positive integer flag, or its default; anything else exits 2 naming the flag. */
export function intOpt(name: string, value: string | undefined, dflt: number): number {
  if (value === undefined) return dflt;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(`bench/scaling.ts: --${name} must be a positive integer, got '${value}'\n`);
    process.exit(2);
  }
  return n;
}

export const QUICK = values.quick;
export const REPS = intOpt('reps', values.reps, QUICK ? 2 : 3);
export const SERVER_THREADS = intOpt('server-threads', values['server-threads'], 1);
export const LEARNER_THREADS = intOpt('learner-threads', values['learner-threads'], cpus().length);
export const LEARNER_STEPS = intOpt('learner-steps', values['learner-steps'], QUICK ? 2 : 3);
export const LEARNER_SEQ = intOpt('learner-seq', values['learner-seq'], 256);
if (!['auto', 'dist', 'src'].includes(values.cli)) {
  process.stderr.write(`bench/scaling.ts: --cli must be auto, dist or src, got '${values.cli}'\n`);
  process.exit(2);
}
export const MODELS = (values.models ?? (QUICK ? 'calc-tiny' : 'calc-tiny,smollm2-135m'))
  .split(',')
  .map((m) => m.trim())
  .filter(Boolean);
if (!MODELS.length) {
  process.stderr.write('bench/scaling.ts: --models names no model\n');
  process.exit(2);
}

export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[n >> 1]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
};
export const round = (x: number, d = 3) => Number(x.toFixed(d));
export function emit(kind: string, row: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify({ bench: 'scaling', kind, ...row })}\n`);
}
export const log = (line: string) => process.stderr.write(`[scaling] ${line}\n`);
