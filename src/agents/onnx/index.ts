/**
 * The embedded policy: the project's small transformer (or a Hugging Face Llama / Qwen2 / Qwen3
 * checkpoint), exported by the learner to ONNX and run here with onnxruntime-node. Sampling is batched across concurrent episodes, with a KV cache
 * kept in slots that the graph reads in place (no per-step copy of the cache); each episode's
 * token sequence grows by appending, and every sampled token comes with its logprob under the
 * distribution it was sampled from.
 *
 * Rows of one batch may differ in their sampling settings, token limit and random source
 * (`GenerateOptions.rows`). `OnnxModel.serve` batches continuously (rows join the running batch
 * between decode steps and leave it as they finish), and a `GenerationBatcher` feeds it
 * concurrent requests: the episodes of OnnxPolicy, the HTTP requests of serve-policy/.
 *
 * The folder, by job: config.ts (a model directory's config), session.ts (the onnxruntime session),
 * graph.ts (feeding the graph), kv-slots.ts (the KV cache in slots), prefix-cache.ts (shared
 * prefixes), row-cache.ts (rows kept between turns), sampler.ts (the decode loop), model.ts
 * (OnnxModel), batcher.ts (GenerationBatcher), policy.ts (OnnxPolicy); this file is its face.
 */
export { HfOnnxConfigSchema, hfOnnxConfigPath, readHfOnnxConfig } from './config.ts';
export type { HfOnnxConfig, ModelFamily } from './config.ts';
export type { GenerateOptions, Generation, ResolvedRow, RowOptions, RowSource, SourceRow } from './generation.ts';
export { OnnxModel } from './model.ts';
export type { OnnxModelOptions } from './model.ts';
export { GenerationBatcher } from './batcher.ts';
export type { BatchedGeneration, BatcherOptions, BatcherStats, BatchRequest } from './batcher.ts';
export { OnnxPolicy } from './policy.ts';
export type { OnnxPolicyOptions } from './policy.ts';
