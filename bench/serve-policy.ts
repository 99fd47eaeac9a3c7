/**
 * Throughput of the embedded policy behind serve-policy (an OpenAI-compatible HTTP server in its
 * own process) against the same policy in process, on the same requests: N concurrent clients
 * (the official openai SDK) each sending their share of the calculator conversations one after
 * another, against N concurrent loops submitting the same prompts to the in-process batcher
 * (what OnnxPolicy does: render the prompt, sample in a batch, parse the turn). Same prompts,
 * same max tokens, same sampling settings and per-request seeds on both sides; the server is
 * asked for what an RL client needs (logprobs and token ids). Tokens/s counts the sampled
 * tokens; each rate is the median of a few runs, the two sides alternating, and the ratio is the
 * median of the paired runs' ratios (this machine's load drifts between runs).
 *
 *   npx tsx bench/serve-policy.ts [--model models/calc-tiny] [--clients 16] [--requests 64] [--max-tokens 64] [--reps 9]
 *
 * Two baselines in process: the policy itself (OnnxPolicy.act, static batches: what rollouts
 * and training use; the issue's ratio) and the continuous batcher the server uses.
 *
 * Last line: {"served_tok_s", "in_process_policy_tok_s", "ratio", "goal": 0.8, "in_process_batcher_tok_s", ...}
 */
import { spawn } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import type { ChatCompletionTool } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { OnnxModel, OnnxPolicy, parseAssistantTokens } from '../src/agents/index.ts';
import type { AgentTool } from '../src/env/index.ts';
import { GenerationBatcher } from '../src/agents/onnx/index.ts';
import { startPolicyServer } from '../src/agents/serve-policy/index.ts';
import { openingMessages } from '../src/env/index.ts';
import { generateSuite } from '../src/env/suites/index.ts';
import { BUNDLED_MODEL_DIR } from '../src/paths.ts';
import { bundledServers } from '../servers/index.ts';
import { seededRandom } from '../lib/index.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: BUNDLED_MODEL_DIR },
    clients: { type: 'string', default: '16' },
    requests: { type: 'string', default: '64' },
    'max-tokens': { type: 'string', default: '64' },
    reps: { type: 'string', default: '9' },
    threads: { type: 'string', default: '1' },
    temperature: { type: 'string', default: '1' },
    serve: { type: 'boolean', default: false },
    batching: { type: 'string', default: 'static' },
  },
});
const dir = values.model;
const threads = Number(values.threads);

if (values.serve) {
  // The server's process: prints its URL, answers `stats` lines on stdin with its stats, ends with stdin.
  const server = await startPolicyServer({ modelDir: dir, threads, batching: values.batching as 'static' | 'continuous' });
  console.log(JSON.stringify({ url: server.url }));
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() === 'stats') console.log(JSON.stringify({ ...server.stats(), cpu: process.cpuUsage() }));
  }
  await server.close();
  process.exit(0);
}

const CLIENTS = Number(values.clients);
const REQUESTS = Number(values.requests);
const MAX_TOKENS = Number(values['max-tokens']);
const REPS = Number(values.reps);
const TEMPERATURE = Number(values.temperature);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

const tasks = generateSuite('calculator').slice(0, REQUESTS);
if (tasks.length < REQUESTS) throw new Error(`the calculator suite has ${tasks.length} tasks, fewer than --requests ${REQUESTS}`);
const conversations = tasks.map((t) => openingMessages(t));
const tools: ChatCompletionTool[] = bundledServers.calculator!.tools.map((t) => ({
  type: 'function',
  function: { name: t.name, description: t.description, parameters: z.toJSONSchema(t.input) as Record<string, unknown> },
}));
const toolNames = bundledServers.calculator!.tools.map((t) => t.name);

/** Runs `CLIENTS` loops over the requests (client c takes requests c, c + CLIENTS, ...); returns tokens/s, tokens, seconds and this process's CPU seconds. */
async function timed(one: (i: number) => Promise<number>): Promise<Run> {
  let tokens = 0;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, c) => {
      for (let i = c; i < REQUESTS; i += CLIENTS) {
        const n = await one(i);
        tokens += n;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { rate: tokens / seconds, tokens, seconds, cpu: (cpu.user + cpu.system) / 1e6 };
}

interface Run {
  rate: number;
  tokens: number;
  seconds: number;
  cpu: number;
}

// The server, in its own process (as it is deployed).
const child = spawn(
  process.execPath,
  ['--import', 'tsx', fileURLToPath(import.meta.url), '--serve', '--model', dir, '--threads', String(threads), '--batching', values.batching],
  { stdio: ['pipe', 'pipe', 'inherit'] },
);
const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
async function readLine<R>(): Promise<R> {
  const next = await lines.next();
  if (next.done) throw new Error('the server process exited');
  return JSON.parse(next.value) as R;
}
const { url } = await readLine<{ url: string }>();
const client = new OpenAI({ baseURL: url, apiKey: 'bench', maxRetries: 0 });
const { data } = await client.models.list();
const modelName = data[0]!.id;

async function servedRun(seedBase: number) {
  return timed(async (i) => {
    const r = await client.chat.completions.create({
      model: modelName,
      messages: conversations[i]!,
      tools,
      temperature: TEMPERATURE,
      max_tokens: MAX_TOKENS,
      seed: seedBase + i,
      logprobs: true,
      return_token_ids: true,
    } as never);
    return (r as { usage: { completion_tokens: number } }).usage.completion_tokens;
  });
}

// The same policy in process: the batcher OnnxPolicy uses, fed by the same number of loops.
const model = await OnnxModel.load(dir, { threads });
const batcher = new GenerationBatcher(model, { maxBatch: 32, sampling: { temperature: TEMPERATURE, topK: 0, topP: 1 }, rng: seededRandom(1) });
async function inProcessRun(seedBase: number) {
  return timed(async (i) => {
    const prompt = model.template.prompt(conversations[i]! as never, toolNames);
    const g = await batcher.submit({ prompt, maxNewTokens: Math.min(MAX_TOKENS, model.maxLen - prompt.length), rng: seededRandom(seedBase + i) });
    parseAssistantTokens(g.tokens);
    return g.tokens.length;
  });
}

// The in-process policy itself (what rollouts and training use): OnnxPolicy.act on the same
// conversations, its static batches formed by the turns that queue while a batch runs.
const policy = await OnnxPolicy.load(dir, { threads, temperature: TEMPERATURE, maxNewTokens: MAX_TOKENS, seed: 1 });
const agentTools: AgentTool[] = bundledServers.calculator!.tools.map((t) => ({
  name: t.name,
  description: t.description,
  inputSchema: z.toJSONSchema(t.input) as Record<string, unknown>,
  server: 'calculator',
  tool: t.name,
}));
async function policyRun(seedBase: number) {
  return timed(async (i) => {
    const episodeId = `bench-${seedBase}-${i}`;
    const a = await policy.act({ task: tasks[i]!, messages: conversations[i]! as never, tools: agentTools, turn: 0, newMessages: [], episodeId });
    policy.endEpisode(episodeId);
    return a.tokens!.length;
  });
}

interface Stats {
  steps: number;
  rowSteps: number;
  cpu?: NodeJS.CpuUsage;
}
async function serverStats(): Promise<Stats> {
  child.stdin!.write('stats\n');
  return readLine<Stats>();
}
const meanBatch = (a: Stats, b: Stats) => (b.rowSteps - a.rowSteps) / (b.steps - a.steps);

const loadBefore = loadavg()[0]!;
await servedRun(1_000_000); // warm-up of every side
await inProcessRun(1_000_000);
await policyRun(1_000_000);
const served: Run[] = [];
const inProcess: Run[] = [];
const inPolicy: Run[] = [];
const serverBefore = await serverStats();
const localBefore = batcher.stats();
for (let k = 0; k < REPS; k++) {
  // Paired runs, in alternating order, so that both sides meet the machine's load alike.
  if (k % 2) {
    inProcess.push(await inProcessRun(1000 * k));
    inPolicy.push(await policyRun(1000 * k));
  }
  served.push(await servedRun(1000 * k));
  if (!(k % 2)) {
    inPolicy.push(await policyRun(1000 * k));
    inProcess.push(await inProcessRun(1000 * k));
  }
}
const serverAfter = await serverStats();
const serverBatch = meanBatch(serverBefore, serverAfter);
const cpuSeconds = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1e6;
const serverCpu = cpuSeconds(serverAfter.cpu!) - cpuSeconds(serverBefore.cpu!);
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const localBatch = meanBatch(localBefore, batcher.stats());
child.stdin!.end();
await batcher.close();
await model.close();
await policy.close();

const s = median(served.map((x) => x.rate));
const p = median(inProcess.map((x) => x.rate));
const ratios = served.map((x, i) => x.rate / inProcess[i]!.rate);
const ratio = median(ratios);
const q = median(inPolicy.map((x) => x.rate));
const policyRatios = served.map((x, i) => x.rate / inPolicy[i]!.rate);
const policyRatio = median(policyRatios);
const r1 = (x: number) => Math.round(x * 10) / 10;
console.log(
  `server batching ${values.batching}; model ${dir}; ${REQUESTS} calculator conversations, ${CLIENTS} concurrent clients, max_tokens ${MAX_TOKENS}, temperature ${TEMPERATURE}, seeded per request, ${threads} thread(s); median of ${REPS} runs`,
);
console.log(
  `served (openai SDK -> serve-policy, logprobs + token ids): ${r1(s)} tok/s   in-process policy (OnnxPolicy.act, static batches): ${r1(q)} tok/s   ratio ${policyRatio.toFixed(2)} (goal >= 0.8)`,
);
console.log(`served: ${r1(s)} tok/s   in process through the same continuous batcher as the server: ${r1(p)} tok/s   ratio ${ratio.toFixed(2)}`);
console.log(
  `each ratio is the median of the paired runs' ratios: against the policy ${policyRatios.map((x) => x.toFixed(2)).join(' ')}; against the batcher ${ratios.map((x) => x.toFixed(2)).join(' ')}`,
);
console.log(`sampled tokens per run, served / in process: ${served.map((x) => x.tokens).join(' ')} / ${inProcess.map((x) => x.tokens).join(' ')}`);
console.log(`rows per decode step (mean): served ${serverBatch.toFixed(1)}, in process ${localBatch.toFixed(1)}`);
// The served side needs two processes (server, clients) where the in-process side needs one: on a
// machine whose cores are busy, the clients' share slows the server's steps.
console.log(`this machine: ${cpus().length} cores, load average ${loadBefore.toFixed(2)} before the runs, ${loadavg()[0]!.toFixed(2)} after`);
console.log(
  `CPU seconds per wall second: served: server ${(serverCpu / sum(served.map((x) => x.seconds))).toFixed(2)} + clients ${(sum(served.map((x) => x.cpu)) / sum(served.map((x) => x.seconds))).toFixed(2)}; in process ${(sum(inProcess.map((x) => x.cpu)) / sum(inProcess.map((x) => x.seconds))).toFixed(2)}`,
);
console.log(
  JSON.stringify({
    served_tok_s: r1(s),
    in_process_policy_tok_s: r1(q),
    ratio: +policyRatio.toFixed(3),
    goal: 0.8,
    ratio_rounds: policyRatios.map((x) => +x.toFixed(3)),
    in_process_batcher_tok_s: r1(p),
    ratio_to_batcher: +ratio.toFixed(3),
    mean_batch_served: +serverBatch.toFixed(2),
    mean_batch_in_process: +localBatch.toFixed(2),
    clients: CLIENTS,
    requests: REQUESTS,
    max_tokens: MAX_TOKENS,
    load_average: +loadavg()[0]!.toFixed(2),
  }),
);
