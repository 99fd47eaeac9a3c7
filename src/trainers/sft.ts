/**
 * The SFT cold start (stage 1 of the DeepSeek-R1 pipeline): expert demonstrations by rollouts,
 * tokenised with the loss on the assistant's tokens only, a model trained from scratch by the
 * learner and exported for the rollout side.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ChatTemplate, ExpertPolicy } from '../agents/index.ts';
import { Environment, rollout, type Task, type Trajectory } from '../env/index.ts';
import { seededRandom } from '../../lib/index.ts';
import { LearnerClient } from './learner-client.ts';

export interface SftOptions {
  tasks: Task[];
  demos: number;
  out: string;
  architecture?: Record<string, number | boolean>;
  maxToolResultBytes?: number;
  /** List the tool names in a system turn (longer prompts; useful when tasks mix servers). */
  systemTools?: boolean;
  steps: number;
  batchSize: number;
  lr: number;
  seed: number;
  threads?: number;
  onLog?: (line: string) => void;
}

export interface SftResult {
  demos: number;
  dropped: number;
  tokens: number;
  masked_tokens: number;
  learner: Record<string, unknown>;
  export: Record<string, unknown>;
  seconds: number;
}

export function demoExamples(trajectories: Trajectory[], template: ChatTemplate, maxLen: number) {
  const examples: { ids: number[]; mask: number[] }[] = [];
  let dropped = 0;
  for (const t of trajectories) {
    if (!t.success) continue;
    const ex = template.conversation(t.messages as never, (t.tools ?? []).map((x) => x.name));
    if (ex.ids.length > maxLen) {
      dropped++;
      continue;
    }
    examples.push(ex);
  }
  return { examples, dropped };
}

export async function runSft(o: SftOptions): Promise<SftResult> {
  const t0 = performance.now();
  const log = o.onLog ?? (() => {});
  const out = resolve(o.out);
  mkdirSync(out, { recursive: true });
  // Expert demonstrations on train tasks, drawn with the seed.
  const rng = seededRandom(o.seed);
  const pool = o.tasks.filter((t) => t.split === 'train');
  if (pool.length === 0) throw new Error('sft needs train tasks');
  const chosen: Task[] = [];
  for (let i = 0; i < o.demos; i++) chosen.push(pool[Math.floor(rng() * pool.length)]!);
  const unique = [...new Map(chosen.map((t) => [t.id, t])).values()];
  const env = new Environment();
  const demos = await rollout(env, new ExpertPolicy(), unique, { concurrency: 16 });
  await env.close();
  const byId = new Map(demos.trajectories.map((t) => [t.task_id, t]));
  const trajectories = chosen.map((t) => byId.get(t.id)!).filter(Boolean);

  const maxLen = Number(o.architecture?.max_seq_len ?? 1024);
  const template = new ChatTemplate({ maxToolResultBytes: o.maxToolResultBytes ?? 256, systemTools: o.systemTools ?? false });
  const { examples, dropped } = demoExamples(trajectories, template, maxLen);
  const data = join(out, 'sft-data.jsonl');
  writeFileSync(data, examples.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const tokens = examples.reduce((s, e) => s + e.ids.length, 0);
  const masked = examples.reduce((s, e) => s + e.mask.reduce((a, b) => a + b, 0), 0);
  log(`${examples.length} demonstrations (${dropped} longer than ${maxLen} tokens dropped), ${tokens} tokens, ${masked} with loss`);

  const learner = LearnerClient.start({ threads: o.threads, forwardStderr: false });
  try {
    await learner.request('create', {
      model_dir: out,
      name: o.out.split('/').filter(Boolean).pop(),
      architecture: o.architecture ?? {},
      chat_template: { max_tool_result_bytes: o.maxToolResultBytes ?? 256, system_tools: o.systemTools ?? false },
      seed: o.seed,
    });
    await learner.request('load', { model_dir: out, device: 'cpu' });
    log(`training: ${o.steps} steps of ${o.batchSize}, lr ${o.lr}`);
    const trained = await learner.request('sft', { data, steps: o.steps, batch_size: o.batchSize, lr: o.lr, seed: o.seed, warmup: Math.max(1, Math.round(o.steps * 0.05)) });
    log(`trained: loss ${Number(trained.loss_first).toFixed(3)} -> ${Number(trained.loss_last).toFixed(3)}, ${Math.round(Number(trained.tokens_per_s))} tokens/s`);
    const exported = await learner.request('export', { model_dir: out, full: true });
    return { demos: examples.length, dropped, tokens, masked_tokens: masked, learner: trained, export: exported, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await learner.close();
  }
}
