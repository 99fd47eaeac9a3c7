/** `mcp-gym train` (any preset) and `mcp-gym start` (the main job). */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  CONFIG_GROUPS,
  GROUP_OF,
  isHfModelDir,
  isModelName,
  recordedConfig,
  resolveConfig,
  train,
  TrainConfigSchema,
  type EvalResult,
  type TrainConfigInput,
  type TrainResult,
} from '../trainers/index.ts';
import { Interrupted } from '../../lib/index.ts';
import { stopOnSignals } from './signals.ts';
import { modelJobCommand } from './model-job.ts';
import { BUNDLED_MODEL_DIR } from '../paths.ts';
import { resolveModelName } from './rollout.ts';
import { ProgressBar } from './ui.ts';
import { baseUrlsFile, UsageError } from './args.ts';
import { flagsHelp, flagsOf, flagValues, parseArgsOptions } from './flags.ts';
import { TAPE_FLAGS, tapeOptions } from './record-replay.ts';

/** Every field of the training config is a flag (--snake-case), its help the field's description. */
export const TRAIN_FLAGS = flagsOf(TrainConfigSchema).map((f) => (f.field === 'steps' ? { ...f, min: 1 } : f)); // 0 steps (evaluate only) is for code, not the command line

export const TRAIN_HELP = `mcp-gym train: train a policy with a preset (grpo, dapo, dr_grpo, gspo, rlvr, art, ruler, prorl, ppo)

Usage: mcp-gym train [--preset P] [options]

Run options:
  --run DIR        the run directory (default runs/<preset>-<time>)
  --resume         continue the run in DIR from its last checkpoint
  --config FILE    a JSON file of config fields (a preset < the file < flags)
  --json           (accepted for scripts; the last line is always one JSON object)
  --base-urls-file F  the policy servers' base URLs in F, one a line (# comments, blank lines skipped),
                   after any --base-url (several servers: docs/training.md, "Many inference servers")
  --record F       record every tool list and call of the run's episodes in F (JSONL; appended with --resume)
  --replay F       serve the episodes' tool traffic from a recording F, starting no server

Config (every field of the training config, by group; booleans also take --no-<flag>; a --config
file gives them flat or grouped, {"rollout": {"group": 8}, "learner": {"lr": 0.0005}}):
${Object.keys(CONFIG_GROUPS)
  .map((g) => `\n ${g}:\n${flagsHelp(TRAIN_FLAGS.filter((f) => GROUP_OF[f.field] === g))}`)
  .join('\n')}
`;

/**
 * The main job. One epoch per batch without the KL term, the batch of 192 episodes cut into
 * minibatches of 48 (four AdamW steps per batch), 90 steps, synchronous (max_staleness 0: on 2
 * cores the learner is compute-bound on both cores, and overlapping it with the rollouts made a
 * step slower, not faster: bench/RESULTS.md, "Asynchronous training"). What moved held-out success
 * on the CPU (seed 0, 400 held-out episodes): 60 steps with one optimizer step per batch at lr
 * 5e-4: 36.0% -> 52.7%; at lr 1e-3: 65.0% (2e-3 collapsed); minibatches of 96 / 48 / 24 at lr
 * 5e-4: 60.5% / 67.7% / 67.7%; minibatches of 48 for 90 steps: 75.2% (seed 1: 30.0% -> 62.7%).
 * A minibatch is one forward and backward (micro_batch_size 48): the learner lays it out as a
 * prefix tree, and 48 sequences share more of their tokens than 16 do (the same gradients).
 */
export const MAIN_JOB: Partial<TrainConfigInput> = {
  preset: 'art',
  suite: 'calculator',
  max_difficulty: 1,
  model: BUNDLED_MODEL_DIR,
  steps: 90,
  tasks_per_step: 24,
  group: 8,
  epochs: 1,
  minibatch_size: 48,
  micro_batch_size: 48,
  beta: 0,
  lr: 5e-4,
  warmup_steps: 5,
  eval_every: 30,
  eval_samples: 4,
  max_staleness: 0,
};

function parseTrainArgs(argv: string[], defaults: Partial<TrainConfigInput>) {
  const options = {
    config: { type: 'string' as const },
    run: { type: 'string' as const },
    resume: { type: 'boolean' as const },
    json: { type: 'boolean' as const },
    'base-urls-file': { type: 'string' as const },
    help: { type: 'boolean' as const, short: 'h' },
    ...TAPE_FLAGS,
    ...parseArgsOptions(TRAIN_FLAGS),
  };
  let values: Record<string, unknown>;
  try {
    values = parseArgs({ args: argv, options, allowNegative: true }).values;
  } catch (err) {
    throw new UsageError(`${(err as Error).message} (mcp-gym train --help lists the options)`);
  }
  const fields = trainFlagValues(values);
  return { values: values as Record<string, string | boolean | undefined>, fields, overrides: { ...defaults, ...fields } };
}

/** The config fields the flags give: every field's flag, and --base-urls-file's URLs after any --base-url. */
function trainFlagValues(values: Record<string, unknown>): Record<string, unknown> {
  const fields = flagValues(TRAIN_FLAGS, values);
  const file = values['base-urls-file'] as string | undefined;
  if (file !== undefined) {
    const given = fields.base_url === undefined ? [] : [fields.base_url].flat().map(String);
    const urls = [...given, ...baseUrlsFile(file)];
    const twice = urls.find((u, i) => urls.indexOf(u) !== i);
    if (twice) throw new UsageError(`--base-urls-file ${file}: ${twice} is given twice (with --base-url or in the file): each server once`);
    fields.base_url = urls.length === 1 ? urls[0] : urls;
  }
  return fields;
}

export async function runTraining(argv: string[], defaults: Partial<TrainConfigInput>, title: string): Promise<TrainResult | undefined> {
  const { values, fields, overrides } = parseTrainArgs(argv, defaults);
  if (values.help) {
    process.stdout.write(TRAIN_HELP);
    return undefined;
  }
  let config;
  try {
    // A resumed run keeps the settings it was made with (its config.json); flags given change only
    // what may change (e.g. --steps to extend it), and train() refuses the rest, naming it.
    const recorded = values.resume && values.run ? recordedConfig(values.run as string) : undefined;
    if (recorded) for (const [k, v] of Object.entries(fields)) recorded[k] = v;
    config = recorded
      ? resolveConfig(recorded as Partial<TrainConfigInput>)
      : resolveConfig(overrides as Partial<TrainConfigInput>, values.config as string | undefined);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (config.steps < 1)
    throw new UsageError(
      `--steps must be a positive integer, got ${config.steps}${values.config ? ` (from ${String(values.config)} or the flags)` : ''}: to evaluate a model without training it, use mcp-gym eval --model DIR`,
    );
  // --model names a registered model or a .gguf file: its checkpoint directory (fetched and converted on first use).
  config.model = await resolveModelName(config.model);
  const tape = tapeOptions({ record: values.record as string | undefined, replay: values.replay as string | undefined }, values.resume === true);
  const runDir = (values.run as string | undefined) ?? join('runs', `${config.preset}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  console.log(
    `${title}: preset ${config.preset}, ${config.tasks ? `tasks ${config.tasks}${config.eval_tasks ? ` (held out: ${config.eval_tasks})` : ''}` : `suite ${config.suite}`} (difficulty <= ${config.max_difficulty}), ${config.steps} steps of ${config.tasks_per_step} tasks x ${config.group} rollouts, from ${config.model}; run in ${runDir}`,
  );
  const stop = stopOnSignals((name) => `${name}: stopping after the step in flight, which is checkpointed`);
  const ac = stop.ac;
  const bar = new ProgressBar('train', config.steps);
  const stepSeconds: number[] = [];
  try {
    const result = await train({
      config,
      runDir,
      resume: values.resume === true,
      signal: ac.signal,
      ...(tape.record !== undefined || tape.replay !== undefined ? { environment: tape } : {}),
      onLog: (l) => console.log(l),
      onWarning: (m) => process.stderr.write(`mcp-gym: warning: ${m}\n`),
      onStep: (m) => {
        // The steps' mean seconds so far (this process's: a resumed run counts from its first step here) times the steps left.
        const s = Number(m.step);
        const last = Number(m.step_seconds);
        stepSeconds.push(last);
        const meanStep = stepSeconds.reduce((x, y) => x + y, 0) / stepSeconds.length;
        bar.update(
          s,
          `success ${(100 * Number(m.success_rate)).toFixed(0)}% reward ${Number(m.reward_mean).toFixed(3)}${m.eval_success !== undefined ? ` held-out ${(100 * Number(m.eval_success)).toFixed(0)}%` : ''} last step ${last.toFixed(1)} s`,
          meanStep * (config.steps - s),
        );
      },
    });
    bar.done();
    const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
    const ci = (c: [number, number]) => `[${pct(c[0])}, ${pct(c[1])}]`;
    const K = String(config.eval_samples);
    const hat = (e: EvalResult) => (K !== '1' && e.pass_hat_k?.[K] !== undefined ? `, pass^${K} ${pct(e.pass_hat_k[K])}` : '');
    const line = (e: EvalResult) => `${pct(e.success)} ${ci(e.ci95)} (${e.episodes} episodes${e.tasks !== undefined ? ` of ${e.tasks} tasks` : ''})${hat(e)}`;
    console.log(`held-out success before: ${line(result.before)}`);
    console.log(
      `held-out success after:  ${result.after ? line(result.after) : `none: the run stopped at step ${result.steps} of ${config.steps} before its end, and no final evaluation ran`}`,
    );
    console.log(`report: ${result.report}`);
    const fig = (e: EvalResult) => ({ success: e.success, ci95: e.ci95, ...(e.pass_hat_k ? { pass_hat_k: e.pass_hat_k } : {}) });
    console.log(
      JSON.stringify({
        before: fig(result.before),
        after: result.after ? fig(result.after) : null,
        train_seconds: Math.round(result.train_seconds * 10) / 10,
        report: result.report,
        ...(result.stopped ? { stopped_at_step: result.steps } : {}),
      }),
    );
    if (result.stopped)
      throw new Interrupted(
        `${stop.received ?? 'interrupted'}: the run stopped at step ${result.steps} of ${config.steps}, checkpointed; continue it with: mcp-gym train --resume --run ${runDir}`,
      );
    return result;
  } finally {
    stop.dispose();
  }
}

export async function trainCommand(argv: string[]): Promise<void> {
  await runTraining(argv, {}, 'train');
}

/**
 * The main job: the embedded policy from its SFT cold start, trained with the art preset; with
 * `--model` naming a Hugging Face model (a registered name, a checkpoint directory, a .gguf file),
 * the real-model job instead (model-job.ts: base -> SFT -> GRPO).
 */
export async function startCommand(argv: string[]): Promise<void> {
  const at = argv.findIndex((a) => a === '--model' || a.startsWith('--model='));
  const spec = at < 0 ? undefined : argv[at]!.includes('=') ? argv[at]!.slice('--model='.length) : argv[at + 1];
  // A real model (a registered name, a .gguf, a checkpoint directory), or something that is no model directory at
  // all: the model job resolves it (and says what it looked for).
  if (spec !== undefined && (isModelName(spec) || isHfModelDir(spec) || !existsSync(join(spec, 'config.json')))) return modelJobCommand(argv);
  if (!argv.includes('--model') && !existsSync(join(String(MAIN_JOB.model), 'config.json'))) {
    throw new UsageError(`the cold-start model ${MAIN_JOB.model} is missing: make it with: npx mcp-gym sft --out ${MAIN_JOB.model}`);
  }
  await runTraining(argv, MAIN_JOB, 'main job');
}
