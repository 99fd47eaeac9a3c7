/** `mcp-gym pipeline r1`: the DeepSeek-R1 pipeline (SFT → GRPO → rejection sampling + SFT → GRPO) as one resumable command. */
import { Interrupted } from '../../lib/index.ts';
import { stopOnSignals } from './signals.ts';
import { parseArgs } from 'node:util';
import { R1ConfigError, R1ConfigSchema, r1Table, runR1Pipeline, type R1ConfigInput } from '../trainers/index.ts';
import { UsageError } from './args.ts';
import { flagsHelp, flagsOf, flagValues, parseArgsOptions } from './flags.ts';

/** Every field of the pipeline's config is a flag (--snake-case), its help the field's description. */
export const R1_FLAGS = flagsOf(R1ConfigSchema);

export const PIPELINE_HELP = `mcp-gym pipeline r1: the DeepSeek-R1 pipeline as one command

  stage 1-sft     SFT cold start on expert demonstrations (without --model, or with --sft); else the model as is
  stage 2-grpo    GRPO from it (train() with --preset, --grpo-steps)
  stage 3-rs-sft  rejection sampling from the stage-2 policy: --rs-k samples on each of --rs-tasks train
                  tasks, the verifier-correct ones kept, deduplicated (same tool calls and answer), at most
                  --rs-max-per-task per task; SFT of the stage-2 model on them (loss on the policy's tokens)
  stage 4-grpo    GRPO again from the stage-3 model (--grpo2-steps)

Each stage works in <out>/<stage>/; <out>/pipeline.json records the finished stages; running the same
command again resumes (finished stages skipped, an interrupted GRPO stage resumed from its checkpoint);
other settings are refused, naming the field. The report: a table printed at the end, <out>/report.md.

Usage: mcp-gym pipeline r1 --out DIR [options]

  --out DIR        the pipeline's directory (required)
  --json           print the pipeline record as one JSON line at the end

Config:
${flagsHelp(R1_FLAGS)}
`;

export async function pipelineCommand(argv: string[]): Promise<void> {
  const [kind, ...rest] = argv;
  if (kind === undefined || kind === '--help' || kind === '-h' || kind === 'help') {
    process.stdout.write(PIPELINE_HELP);
    return;
  }
  if (kind !== 'r1') throw new UsageError(`pipeline: unknown pipeline '${kind}'; pipelines: r1 (mcp-gym pipeline --help)`);
  const options = {
    out: { type: 'string' as const },
    json: { type: 'boolean' as const },
    help: { type: 'boolean' as const, short: 'h' },
    ...parseArgsOptions(R1_FLAGS),
  };
  let values: Record<string, unknown>;
  try {
    values = parseArgs({ args: rest, options, allowNegative: true }).values;
  } catch (err) {
    throw new UsageError(`${(err as Error).message} (mcp-gym pipeline --help lists the options)`);
  }
  if (values.help) {
    process.stdout.write(PIPELINE_HELP);
    return;
  }
  if (typeof values.out !== 'string' || !values.out) throw new UsageError('pipeline r1 needs --out <dir>');
  const config = flagValues(R1_FLAGS, values) as R1ConfigInput;
  const stop = stopOnSignals((name) => `${name}: stopping after the step in flight; run the same command again to resume`);
  const ac = stop.ac;
  try {
    let result;
    try {
      result = await runR1Pipeline({
        config,
        out: values.out,
        signal: ac.signal,
        onLog: (l) => console.log(l),
        onTrainStep: (stage, m) =>
          console.log(`${stage}: step ${String(m.step)}: reward ${Number(m.reward_mean).toFixed(3)}, success ${(100 * Number(m.success_rate)).toFixed(0)}%`),
      });
    } catch (err) {
      // The config's own errors (a field, a changed field on resume) are usage errors.
      if (err instanceof R1ConfigError) throw new UsageError(err.message);
      throw err;
    }
    console.log('');
    console.log(r1Table(result.record));
    console.log(`report: ${result.report}`);
    if (values.json) console.log(JSON.stringify(result.record));
    if (result.stopped) throw new Interrupted(`${stop.received ?? 'interrupted'}: the pipeline stopped before its end; run the same command again to resume`);
  } finally {
    stop.dispose();
  }
}
