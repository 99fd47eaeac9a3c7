/** `mcp-gym serve-policy`: the embedded model behind an OpenAI-compatible server (src/agents/serve-policy.ts). */
import { parseArgs } from 'node:util';
import { startPolicyServer } from '../agents/serve-policy/index.ts';
import { BUNDLED_MODEL_DIR } from '../paths.ts';
import { ensureHfOnnx, resolveModel } from '../trainers/index.ts';
import { checkToken, intFlag, UsageError } from './args.ts';
import { toolFormatFlag } from './rollout.ts';

export const SERVE_POLICY_HELP = `mcp-gym serve-policy: a model behind an OpenAI-compatible API (vLLM's formats)

  --model M            a model directory (the embedded GPT's, or a Hugging Face checkpoint: exported to
                       ONNX on first use), a model store name (smollm2-135m) or a .gguf file
                       (default: the bundled ${BUNDLED_MODEL_DIR.split('/').slice(-2).join('/')})
  --tool-format F      a Hugging Face model's tools: auto (default: the template's own format, or
                       Hermes <tool_call> blocks for a template without tools), native, hermes
  --host H             interface to bind (default 127.0.0.1)     --port N (default 8000; 0 picks a free one)
  --token T            require "Authorization: Bearer T" (or env MCP_GYM_TOKEN); not empty
  --allowed-host N     also accept N in the Host and Origin headers (repeatable, or N1,N2)
  --name NAME          the model's name in the API (default: the model config's name)
  --max-batch N        requests sampled together at most (default 32)   --threads N (default 1)   --seed S
  --batching static|continuous   static (default): the requests queued when a batch ends are the next
                       batch; continuous: requests join the running batch between decode steps

Endpoints: GET /v1/models, POST /v1/chat/completions (tools, logprobs, vLLM's return_token_ids and
return_tokens_as_token_ids, stream), POST /v1/reload ({} or {"model_dir": DIR}), GET /health.
Use it with --policy openai:<name> --base-url http://127.0.0.1:8000/v1 (rollout, eval, train, a judge).
`;

export async function servePolicyCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string', default: BUNDLED_MODEL_DIR },
      host: { type: 'string' },
      port: { type: 'string' },
      token: { type: 'string' },
      'allowed-host': { type: 'string', multiple: true },
      name: { type: 'string' },
      'max-batch': { type: 'string' },
      threads: { type: 'string' },
      seed: { type: 'string' },
      batching: { type: 'string', default: 'static' },
      'tool-format': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(SERVE_POLICY_HELP);
    return;
  }
  const token = values.token ?? process.env.MCP_GYM_TOKEN;
  if (token !== undefined) checkToken(token, values.token !== undefined ? '--token' : 'MCP_GYM_TOKEN');
  const allowedHosts = (values['allowed-host'] ?? []).flatMap((v) => v.split(',')).map((h) => h.trim());
  if (allowedHosts.includes('')) throw new UsageError('--allowed-host needs a host name: --allowed-host NAME (repeatable) or --allowed-host NAME1,NAME2');
  const maxBatch = intFlag(values['max-batch'], '--max-batch', 32);
  if (values.batching !== 'static' && values.batching !== 'continuous')
    throw new UsageError(`--batching must be static or continuous, got '${values.batching}'`);
  if (maxBatch < 1) throw new UsageError(`--max-batch must be at least 1, got '${values['max-batch']}'`);
  const toolFormat = toolFormatFlag(values['tool-format']);
  const log = (line: string) => process.stderr.write(`${line}\n`);
  let modelDir: string;
  try {
    modelDir = await resolveModel(values.model!, log);
  } catch (err) {
    throw new UsageError(`serve-policy: ${(err as Error).message}`);
  }
  const server = await startPolicyServer({
    modelDir,
    toolFormat,
    // A Hugging Face checkpoint (the first, or one /v1/reload names) is exported to ONNX when its export is missing or stale.
    prepare: (dir) => {
      ensureHfOnnx(dir, log);
    },
    host: values.host,
    port: intFlag(values.port, '--port', 8000),
    token,
    allowedHosts,
    modelName: values.name,
    maxBatch,
    threads: intFlag(values.threads, '--threads', 1),
    seed: intFlag(values.seed, '--seed', 1),
    batching: values.batching,
  }).catch((err: unknown) => {
    throw new UsageError(`serve-policy: ${(err as Error).message}`);
  });
  const s = server.stats();
  process.stderr.write(
    `mcp-gym serve-policy: model '${server.modelName}' (version ${s.version}, ${s.modelDir}) at ${server.url}${token !== undefined ? ' (bearer token required)' : ''}\n`,
  );
  const stop = () => void server.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
