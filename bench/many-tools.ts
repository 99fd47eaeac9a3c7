/**
 * The many-tools suite in the three tool modes (issue 50): for each of all, toolbelt and search,
 * the tool schemas' prompt tokens per episode, the episode's wall time and held-out success with
 * its 95% interval, for the expert and for trained checkpoints, side by side with `all` as the
 * baseline (the ratio of each mode's prompt tokens to all's).
 *
 *   npx tsx bench/many-tools.ts [--eval-tasks 40] [-k 2] [--model smollm2-135m]
 *                               [--run all=DIR --run toolbelt=DIR --run search=DIR]
 *
 * Tokens are the model's own (--model: a registered name or a checkpoint directory; its tokenizer
 * and chat template, the Hermes tool format for SmolLM2): the tool list of the episode's prompt and
 * every tool change appended since (the sequence is append-only), at the episode's last turn
 * (trajectory metrics.tool_tokens). The expert's actions are written in the model's tool-call
 * format through the same HfTurns, so its episodes are counted in the model's tokens too.
 *
 * --run MODE=DIR: a real-model job's run directory (`mcp-gym start --model smollm2-135m --suite
 * many-tools --tools MODE --run DIR`), whose RL checkpoint (DIR/rl/model) is evaluated in MODE on
 * the same held-out tasks, k samples each. An episode whose prompt does not fit the model's context
 * is answered "The conversation no longer fits my context." and fails: it counts as 0, and the
 * `fits` column says how many did fit.
 *
 * Last line: {"suite", "model", "modes": {mode: {"prompt_tokens", "success", "ci95", "episodes"}}}
 * for the trained checkpoints when --run is given, else for the expert.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { summarizeEpisodes } from '../lib/index.ts';
import { ExpertPolicy, HfTurns, OnnxPolicy } from '../src/agents/index.ts';
import { Environment, parseToolMode, rollout, type Observation, type Policy, type PolicyAction, type Task, type Trajectory } from '../src/env/index.ts';
import { generateSuite } from '../src/env/suites/index.ts';
import { ensureHfOnnx, resolveModel } from '../src/trainers/index.ts';

const MODES = ['all', 'toolbelt', 'search'] as const;
type Mode = (typeof MODES)[number];

const { values } = parseArgs({
  options: {
    'eval-tasks': { type: 'string', default: '40' },
    k: { type: 'string', short: 'k', default: '2' },
    model: { type: 'string', default: 'smollm2-135m' },
    run: { type: 'string', multiple: true, default: [] },
    seed: { type: 'string', default: '0' },
  },
});

/** The expert's actions as the model would write them (its tool-call format), through HfTurns: the model's tokens, counted. */
class HfExpert implements Policy {
  readonly id = 'expert';
  private readonly expert = new ExpertPolicy();
  constructor(private readonly turns: HfTurns) {}
  async act(obs: Observation): Promise<PolicyAction> {
    const p = this.turns.prompt(obs);
    const a = await this.expert.act(obs);
    const text = a.toolCalls?.length
      ? a.toolCalls.map((c) => `<tool_call>\n${JSON.stringify({ name: c.name, arguments: c.arguments })}\n</tool_call>`).join('\n')
      : a.content;
    const tokens = this.turns.tokenizer.encode(`${text}<|im_end|>`);
    return { ...this.turns.sampled(obs, tokens), tokens, envTokens: p.env, toolTokens: p.toolTokens };
  }
  endEpisode(id: string): void {
    this.turns.end(id);
  }
}

interface Row {
  who: string;
  mode: Mode;
  prompt_tokens: number;
  first_prompt_tokens: number;
  fits: number;
  success: number;
  ci95: [number, number];
  episodes: number;
  seconds_per_episode: number;
  meta_calls: number;
}

async function measure(who: string, mode: Mode, policy: Policy, tasks: Task[], k: number, maxContext: number): Promise<Row> {
  const o = parseToolMode(mode);
  const env = new Environment(o.mode === 'all' ? {} : { tools: o });
  let r: { trajectories: Trajectory[] };
  try {
    r = await rollout(env, policy, tasks, { group: k, concurrency: 16 });
  } finally {
    await env.close();
  }
  const ts = r.trajectories;
  const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / Math.max(1, xs.length);
  const s = summarizeEpisodes(ts, k);
  const firstPrompt = ts.map((t) => t.turns[0]?.env_tokens?.length ?? 0);
  return {
    who,
    mode,
    prompt_tokens: mean(ts.map((t) => t.metrics.tool_tokens ?? 0)),
    first_prompt_tokens: mean(firstPrompt),
    fits: firstPrompt.filter((n) => n < maxContext).length / Math.max(1, ts.length),
    success: s.success,
    ci95: s.ci95,
    episodes: ts.length,
    seconds_per_episode: mean(ts.map((t) => t.timings.total_ms / 1000)),
    meta_calls: mean(ts.map((t) => t.metrics.meta_calls ?? 0)),
  };
}

function print(rows: Row[]): void {
  const base = new Map(rows.filter((r) => r.mode === 'all').map((r) => [r.who, r.prompt_tokens]));
  console.log('who       mode      tool tokens/episode  vs all   first prompt  fits   success [95% CI]        s/episode  meta calls');
  for (const r of rows) {
    const ratio = base.get(r.who) ? (r.prompt_tokens / base.get(r.who)!).toFixed(3) : '-';
    console.log(
      `${r.who.padEnd(9)} ${r.mode.padEnd(9)} ${r.prompt_tokens.toFixed(0).padStart(19)}  ${ratio.padStart(6)}  ${r.first_prompt_tokens.toFixed(0).padStart(12)}  ${(100 * r.fits).toFixed(0).padStart(3)}%  ${(100 * r.success).toFixed(1).padStart(5)}% [${(100 * r.ci95[0]).toFixed(1)}, ${(100 * r.ci95[1]).toFixed(1)}]`.padEnd(
        92,
      ) + `${r.seconds_per_episode.toFixed(2).padStart(9)}  ${r.meta_calls.toFixed(2).padStart(10)}`,
    );
  }
}

async function main(): Promise<void> {
  const n = Number(values['eval-tasks']);
  const k = Number(values.k);
  const tasks = generateSuite('many-tools', { train: 0, eval: n, seed: 1234 + Number(values.seed) });
  const modelDir = existsSync(values.model!) ? values.model! : await resolveModel(values.model!, (l) => console.error(l));
  const config = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as { max_position_embeddings?: number };
  const maxContext = config.max_position_embeddings ?? 8192;
  const turns = HfTurns.load(modelDir);
  console.log(`many-tools: ${tasks.length} held-out tasks; tokens of ${values.model} (${turns.family} format, context ${maxContext})`);

  const rows: Row[] = [];
  for (const mode of MODES) rows.push(await measure('expert', mode, new HfExpert(turns), tasks, 1, maxContext));
  const runs = new Map(
    (values.run as string[]).map((s) => {
      const [mode, dir] = s.split('=') as [Mode, string];
      if (!MODES.includes(mode) || !dir) throw new Error(`--run MODE=DIR with MODE one of ${MODES.join(', ')}, got '${s}'`);
      return [mode, dir] as const;
    }),
  );
  for (const [mode, dir] of runs) {
    const ckpt = existsSync(join(dir, 'rl', 'model')) ? join(dir, 'rl', 'model') : dir;
    ensureHfOnnx(ckpt, (l) => console.error(l));
    const policy = await OnnxPolicy.load(ckpt, { seed: 101, maxNewTokens: 96, threads: 2 });
    try {
      rows.push(await measure('trained', mode, policy, tasks, k, maxContext));
    } finally {
      await policy.close();
    }
  }
  print(rows);
  const who = runs.size ? 'trained' : 'expert';
  const modes = Object.fromEntries(
    rows
      .filter((r) => r.who === who)
      .map((r) => [r.mode, { prompt_tokens: Math.round(r.prompt_tokens), success: r.success, ci95: r.ci95, episodes: r.episodes }]),
  );
  console.log(JSON.stringify({ suite: 'many-tools', model: runs.size ? values.model : 'expert', modes }));
}

await main();
