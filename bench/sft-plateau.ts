/**
 * SFT to its plateau (issue 30): the real-model job's SFT (src/trainers/model-job.ts, MODEL_JOB's
 * recipe: 128 expert demonstrations of the job's training tasks, batch 16, lr 1e-4, all weights)
 * for 1, 2, 3 ... epochs, each a run of its own from the base checkpoint, each evaluated as the job
 * evaluates (the same 64 held-out tasks x 2 samples, interval over tasks). An epoch is worth
 * keeping while it adds 2 points or more.
 *
 *   npx tsx bench/sft-plateau.ts [--model smollm2-135m] [--epochs 1,2,3] [--seed 0] [--out .tmp/sft-plateau]
 *                                [--lora R --lora-epochs 2 --lora-lr 1e-3] [--min-difficulty D --max-difficulty D] [--demos N]
 *
 * With --per-epoch, one run instead of one per epoch count: the SFT for the largest of --epochs passes at a
 * constant lr after a 2-step warm-up (min_lr_ratio 1), the weights written after every pass
 * (runSft's saveEpochs), each of --epochs evaluated. With a constant lr the weights after pass e are
 * those of a run of e passes (learner/tests/test_hf_train.py checks it), so the whole curve costs one
 * SFT of the largest count plus the evaluations. The job's SFT takes the same schedule with
 * `--sft-warmup 2 --sft-min-lr-ratio 1`.
 *
 * With --lora R, the same SFT with a LoRA adapter (rank R, alpha 2R, all linear layers) for each of
 * --lora-epochs, evaluated the same way: the full-weights rows and the LoRA rows side by side.
 *
 * Prints one row per epoch count (success, interval, the gain over the previous row, SFT and
 * evaluation seconds) and, last, one JSON line.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { MODEL_JOB } from '../src/cli/model-job.ts';
import { evaluateCheckpoint, jobTasks, resolveModel, runSft, stageEval, type ModelJobConfig } from '../src/trainers/index.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'smollm2-135m' },
    epochs: { type: 'string', default: '1,2,3' },
    seed: { type: 'string', default: '0' },
    out: { type: 'string', default: '.tmp/sft-plateau' },
    lora: { type: 'string', default: '0' },
    'lora-epochs': { type: 'string', default: '2' },
    'lora-lr': { type: 'string', default: '1e-3' },
    'min-difficulty': { type: 'string' },
    'max-difficulty': { type: 'string' },
    demos: { type: 'string' },
    'per-epoch': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const log = (l: string) => console.log(l);
const model = await resolveModel(values.model!, log);
const config: ModelJobConfig = {
  model,
  model_name: values.model!,
  suite: MODEL_JOB.suite,
  min_difficulty: values['min-difficulty'] !== undefined ? Number(values['min-difficulty']) : MODEL_JOB.min_difficulty,
  max_difficulty: values['max-difficulty'] !== undefined ? Number(values['max-difficulty']) : MODEL_JOB.max_difficulty,
  eval_tasks: MODEL_JOB.eval_tasks,
  k: MODEL_JOB.k,
  seed: Number(values.seed),
  tool_format: 'auto',
  sft: { ...MODEL_JOB.sft, ...(values.demos !== undefined ? { demos: Number(values.demos) } : {}) },
  rl: { ...MODEL_JOB.rl },
};
const { train, held } = jobTasks(config);
const root = resolve(values.out!);
mkdirSync(root, { recursive: true });
const rows: { mode: string; epochs: number; success: number; ci95: [number, number]; gain: number | null; sft_s: number; eval_s: number }[] = [];
const lora = Number(values.lora);
const evaluate = async (mode: string, epochs: number, dir: string, sftSeconds: number) => {
  const t1 = performance.now();
  const trajectories = await evaluateCheckpoint(config, held, join(dir, 'eval-trajectories.jsonl'), {}, dir);
  const e = stageEval(trajectories, config.k, 'eval-trajectories.jsonl');
  const prev = rows.filter((r) => r.mode === mode).at(-1);
  rows.push({
    mode,
    epochs,
    success: e.success,
    ci95: e.ci95,
    gain: prev ? 100 * (e.success - prev.success) : null,
    sft_s: sftSeconds,
    eval_s: (performance.now() - t1) / 1000,
  });
  const r = rows.at(-1)!;
  console.log(
    `${mode} ${epochs} epoch(s): held-out ${(100 * r.success).toFixed(1)}% [${(100 * r.ci95[0]).toFixed(1)}, ${(100 * r.ci95[1]).toFixed(1)}]${r.gain === null ? '' : `, ${r.gain >= 0 ? '+' : ''}${r.gain.toFixed(1)} points over ${prev!.epochs}`}; SFT ${r.sft_s.toFixed(0)} s, eval ${r.eval_s.toFixed(0)} s`,
  );
};
if (values['per-epoch']) {
  // One constant-lr run of the largest count; every pass's weights written, the asked ones evaluated.
  const wanted = values
    .epochs!.split(',')
    .filter(Boolean)
    .map(Number)
    .sort((a, b) => a - b);
  const last = wanted.at(-1)!;
  const out = join(root, `constant-d${config.min_difficulty}-${config.max_difficulty}-n${config.sft.demos}-epochs-${last}`);
  const perEpoch = Math.ceil(config.sft.demos / config.sft.batch);
  const t0 = performance.now();
  const r = await runSft({
    tasks: train,
    model,
    demos: config.sft.demos,
    out,
    steps: last * perEpoch,
    batchSize: config.sft.batch,
    lr: config.sft.lr,
    seed: config.seed,
    toolFormat: 'auto',
    warmup: MODEL_JOB.sft.warmup,
    minLrRatio: 1,
    saveEpochs: join(out, 'epochs'),
    onProgress: (l) => /step \d+0\//.test(l) && console.log(l),
  });
  const sftSeconds = (performance.now() - t0) / 1000;
  if (r.demos !== config.sft.demos)
    console.log(`note: ${r.demos} of ${config.sft.demos} demonstrations rendered: a pass is ${Math.ceil(r.demos / config.sft.batch)} steps, not ${perEpoch}`);
  const dirs = [...(r.epochDirs ?? []), out];
  for (const e of wanted) {
    // Seconds: the SFT up to pass e, pro rata (one run).
    await evaluate('constant', e, dirs[e - 1]!, (sftSeconds * e) / last);
    if (!values.keep && e < last) for (const f of ['model.safetensors', 'onnx']) rmSync(join(dirs[e - 1]!, f), { recursive: true, force: true });
  }
  console.log(
    JSON.stringify({
      model: values.model,
      seed: config.seed,
      demos: config.sft.demos,
      difficulty: [config.min_difficulty, config.max_difficulty],
      schedule: 'constant lr after 2 warm-up steps',
      rows,
    }),
  );
  process.exit(0);
}
const runs: { mode: string; epochs: number }[] = [
  ...values
    .epochs!.split(',')
    .filter(Boolean)
    .map((e) => ({ mode: 'full', epochs: Number(e) })),
  ...(lora > 0
    ? values['lora-epochs']!.split(',')
        .filter(Boolean)
        .map((e) => ({ mode: `lora-r${lora}`, epochs: Number(e) }))
    : []),
];
for (const { mode, epochs } of runs) {
  const out = join(root, `${mode}-d${config.min_difficulty}-${config.max_difficulty}-n${config.sft.demos}-epochs-${epochs}`);
  const t0 = performance.now();
  const isLora = mode !== 'full';
  await runSft({
    tasks: train,
    model,
    demos: config.sft.demos,
    out,
    steps: Math.round((epochs * config.sft.demos) / config.sft.batch),
    batchSize: config.sft.batch,
    lr: isLora ? Number(values['lora-lr']) : config.sft.lr,
    seed: config.seed,
    toolFormat: 'auto',
    ...(isLora ? { lora: { r: lora, alpha: 2 * lora } } : {}),
  });
  await evaluate(mode, epochs, out, (performance.now() - t0) / 1000);
}
console.log(
  JSON.stringify({ model: values.model, seed: config.seed, demos: config.sft.demos, difficulty: [config.min_difficulty, config.max_difficulty], rows }),
);
