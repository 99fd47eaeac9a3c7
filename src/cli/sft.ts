/** `mcp-gym sft`: the SFT cold start of the embedded model (from scratch) or of a Hugging Face checkpoint (--model). */
import { parseArgs } from 'node:util';
import { OnnxPolicy } from '../agents/index.ts';
import { Environment, rollout, summarize } from '../env/index.ts';
import { isHfModelDir, runSft } from '../trainers/index.ts';
import { intFlag, UsageError } from './args.ts';
import { resolveModelName, selectTasks } from './rollout.ts';

export const SFT_DEFAULTS = {
  suite: 'calculator',
  maxDifficulty: 1,
  evalTasks: 200,
  demos: 1500,
  steps: 400,
  batch: 32,
  lr: 3e-3,
  seed: 0,
  d_model: 128,
  layers: 4,
  heads: 4,
  ctx: 384,
};

export async function sftCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    allowNegative: true, // --no-eval
    options: {
      suite: { type: 'string', default: SFT_DEFAULTS.suite },
      'max-difficulty': { type: 'string' },
      tasks: { type: 'string' },
      demos: { type: 'string', default: String(SFT_DEFAULTS.demos) },
      out: { type: 'string' },
      model: { type: 'string' },
      'lora-rank': { type: 'string' },
      'lora-alpha': { type: 'string' },
      steps: { type: 'string', default: String(SFT_DEFAULTS.steps) },
      batch: { type: 'string', default: String(SFT_DEFAULTS.batch) },
      lr: { type: 'string', default: String(SFT_DEFAULTS.lr) },
      seed: { type: 'string', default: String(SFT_DEFAULTS.seed) },
      'd-model': { type: 'string', default: String(SFT_DEFAULTS.d_model) },
      layers: { type: 'string', default: String(SFT_DEFAULTS.layers) },
      heads: { type: 'string', default: String(SFT_DEFAULTS.heads) },
      ctx: { type: 'string', default: String(SFT_DEFAULTS.ctx) },
      eval: { type: 'boolean', default: true },
      'system-tools': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
    },
  });
  if (!values.out) throw new UsageError('sft needs --out <model dir>');
  // A registered name or a .gguf file: its checkpoint directory (fetched and converted on first use).
  if (values.model !== undefined) values.model = await resolveModelName(values.model);
  if (values.model !== undefined && !isHfModelDir(values.model))
    throw new UsageError(
      `--model: ${values.model} is not a Hugging Face checkpoint directory (config.json with model_type); the embedded model is trained from scratch without --model`,
    );
  if (values['lora-rank'] !== undefined && values.model === undefined) throw new UsageError('--lora-rank is for a Hugging Face checkpoint (--model <dir>)');
  const loraRank = values['lora-rank'] === undefined ? 0 : intFlag(values['lora-rank'], '--lora-rank', 0);
  const lr = Number(values.lr);
  if (!(lr > 0)) throw new UsageError(`--lr must be a positive number, got '${values.lr}'`);
  const demos = intFlag(values.demos, '--demos', 400);
  // A pool of train tasks large enough that demonstrations rarely repeat, and a held-out set
  // large enough for a useful estimate.
  // A suite's cold start keeps difficulty 1 unless told otherwise; a task file keeps all of it.
  const maxDifficulty = values['max-difficulty'] ?? (values.tasks ? undefined : String(SFT_DEFAULTS.maxDifficulty));
  const tasks = selectTasks(
    { suite: values.tasks ? undefined : values.suite, tasks: values.tasks, split: 'all', 'max-difficulty': maxDifficulty },
    { train: Math.max(200, demos * 3), eval: SFT_DEFAULTS.evalTasks },
  );
  const count = (split: string) => tasks.filter((t) => t.split === split).length;
  const difficulties = [...new Set(tasks.map((t) => t.difficulty))].sort();
  console.log(
    `sft: ${count('train')} train tasks (demonstrations) and ${count('eval')} eval tasks from ${values.tasks ?? `the ${values.suite} suite`}, difficulties ${difficulties.join(', ')}${maxDifficulty ? ` (--max-difficulty ${maxDifficulty})` : ''}`,
  );
  if (count('train') === 0)
    throw new UsageError(`${values.tasks ?? values.suite}: no train tasks to make demonstrations from (a task's "split" says where it goes)`);
  const unsolvable = tasks.filter((t) => t.split === 'train' && !t.solution).length;
  if (unsolvable) console.log(`sft: ${unsolvable} train tasks have no "solution": the expert cannot demonstrate them (they are skipped)`);
  const dModel = intFlag(values['d-model'], '--d-model', 128);
  const heads = intFlag(values.heads, '--heads', 4);
  if (dModel % heads !== 0) throw new UsageError(`--d-model (${dModel}) must be a multiple of --heads (${heads})`);
  const result = await runSft({
    tasks,
    ...(values.model !== undefined ? { model: values.model } : {}),
    ...(loraRank > 0 ? { lora: { r: loraRank, alpha: values['lora-alpha'] === undefined ? 2 * loraRank : Number(values['lora-alpha']) } } : {}),
    demos,
    out: values.out,
    steps: intFlag(values.steps, '--steps', 400),
    batchSize: intFlag(values.batch, '--batch', 32),
    lr,
    seed: intFlag(values.seed, '--seed', 0),
    systemTools: values['system-tools'],
    architecture:
      values.model !== undefined
        ? argv.includes('--ctx')
          ? { max_seq_len: intFlag(values.ctx, '--ctx', 512) }
          : {}
        : {
            d_model: dModel,
            n_layers: intFlag(values.layers, '--layers', 4),
            n_heads: heads,
            d_ff: 4 * dModel,
            max_seq_len: intFlag(values.ctx, '--ctx', 512),
          },
    onLog: (l) => console.log(l),
  });
  console.log(`SFT done in ${result.seconds.toFixed(1)} s; model in ${values.out}`);
  const summary: Record<string, unknown> = { ...result };
  if (values.eval) {
    const evalTasks = tasks.filter((t) => t.split === 'eval');
    const policy = await OnnxPolicy.load(values.out);
    const env = new Environment();
    const r = await rollout(env, policy, evalTasks, { concurrency: 32 });
    await env.close();
    await policy.close();
    const s = summarize(r.trajectories, r.seconds);
    console.log(
      `held-out (${evalTasks.length} eval tasks, T=1): success ${(100 * s.success_rate).toFixed(1)}%, mean reward ${s.mean_reward.toFixed(3)}, ${s.episodes_per_s.toFixed(1)} episodes/s`,
    );
    summary.eval = { success_rate: s.success_rate, mean_reward: s.mean_reward, episodes: s.episodes };
  }
  if (values.json) console.log(JSON.stringify(summary));
}
