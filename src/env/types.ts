/**
 * The contracts between the environment, policies and training: chat messages (OpenAI format),
 * what a policy sees and returns, and the trajectory that records an episode.
 */
import { z } from 'zod';
import type { Task } from './task.ts';

export const ToolCallMessageSchema = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string(), arguments: z.string() }),
});

/** A chat message in the OpenAI format, with `tool_calls` on assistant messages. */
export const ChatMessageSchema = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string(),
  tool_calls: z.array(ToolCallMessageSchema).optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
  /** On a tool message: the tool failed (Anthropic's tool_result `is_error`; not sent to OpenAI-compatible servers). */
  is_error: z.boolean().optional(),
});
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

/** A tool as the agent sees it (its name may be qualified as `server_tool` when names collide). */
export interface AgentTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  /** Which task server and which of its tools this is. */
  server: string;
  tool: string;
  /** A tool fault injection added (src/env/faults.ts): not the server's. */
  distractor?: boolean;
  /** A meta-tool of the toolbelt or search mode (src/env/tool-modes.ts): the environment's, not a server's. */
  meta?: boolean;
}

export interface Observation {
  task: Task;
  messages: ChatMessage[];
  tools: AgentTool[];
  /** 0 for the first assistant turn; counts every assistant turn of the episode (all user turns). */
  turn: number;
  /**
   * The user turn this turn belongs to: 0 for the opening message's, k for follow-up k's (a task's
   * `followups`); set by the environment, absent where an observation is made otherwise.
   */
  userTurn?: number;
  /**
   * The environment's messages added since the policy's last action: tool results, or the user's
   * follow-up message after the policy's answer. `tools` may have changed since the last action
   * (a server's `notifications/tools/list_changed`).
   */
  newMessages: ChatMessage[];
  /** Identifies the episode, for policies that keep per-episode state (e.g. token sequences); unique, with a random part. */
  episodeId: string;
  /** The episode's group id and sample (`<group>#<sample>`): the same in every run, for seeding a policy's sampling. */
  episodeKey?: string;
}

/** A tool call as a policy proposes it; `arguments` may be the raw text when it did not parse. */
export interface ProposedCall {
  id?: string;
  name: string;
  arguments: Record<string, unknown> | string;
}

export interface PolicyAction {
  /** The assistant's text (with any reasoning); without tool calls it is the final answer. */
  content: string;
  toolCalls?: ProposedCall[];
  /** Token ids of this turn, as sampled, and their logprobs (for training). */
  tokens?: number[];
  logprobs?: number[];
  /** Token ids the environment contributed before this turn (prompt, tool results), when tokenised. */
  envTokens?: number[];
  /** A message about text that looked like a tool call but could not be parsed. */
  parseError?: string;
  /**
   * How the turn's tool calls were read: `strict` (the model's own format), `lenient` (a bare or
   * fenced JSON call, src/agents/hf/tool-calls.ts), `failed` (see parseError); absent for a plain answer.
   */
  callParse?: 'strict' | 'lenient' | 'failed';
  /** The turn as the model wrote it (its tokens decoded, special tokens kept): Hugging Face models. */
  text?: string;
  /** Tokens the provider billed for this turn (API policies). */
  usage?: TokenUsage;
  /** Why the model stopped, as its API says (`stop`, `tool_calls`, `length`, `end_turn`, `max_tokens`, `refusal`, ...). */
  stopReason?: string;
  /**
   * Set when this turn's tokens cannot be appended to the episode's earlier tokens (the server
   * rendered the conversation so far into other tokens than it sampled): the trajectory is then
   * not trained on, since its token sequence would not be the one sampled. Says what differed.
   */
  tokenDrift?: string;
  /**
   * The version of the weights that sampled this turn (an in-process model's version; a served
   * policy's adapter or weights version). Default: the policy's `version` as the turn started.
   */
  policyVersion?: string | number;
  /**
   * The server that sampled this turn, when a policy samples through several (a fleet of
   * OpenAI-compatible servers, src/agents/fleet.ts): its base URL without credentials or query.
   */
  policyServer?: string;
  /**
   * Prompt tokens the tool schemas take in this turn's context, as the policy's tokenizer counts
   * them (the tool list of its prompt, and each tool change appended since); recorded as the turn's `tool_tokens`.
   */
  toolTokens?: number;
}

/** Tokens a provider counted for a request (or summed over many). */
export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** What an API-backed policy or model has used so far: requests, retries, failures and tokens. */
export interface ApiUsage extends TokenUsage {
  requests: number;
  /** Requests that failed after their retries. */
  failed_requests: number;
}

/** A plain text request to a chat model: a system prompt and user/assistant messages. */
export interface ChatRequest {
  system?: string;
  messages: { role: 'user' | 'assistant'; content: string }[];
  maxTokens?: number;
  temperature?: number;
}

export interface ChatResult {
  text: string;
  usage?: TokenUsage;
}

/**
 * A text-only chat model: a judge (RULER) or a task generator. The API policies (OpenAI-compatible,
 * Anthropic) implement it besides Policy; the environment only knows this contract.
 */
export interface ChatModel {
  readonly id: string;
  complete(request: ChatRequest, signal?: AbortSignal): Promise<ChatResult>;
}

export interface Policy {
  /** Name and version, recorded in every trajectory. */
  readonly id: string;
  readonly version?: string | number;
  act(observation: Observation, signal?: AbortSignal): Promise<PolicyAction>;
  /** Called once an episode ends (to release per-episode state). */
  endEpisode?(episodeId: string): void;
  /** API policies: requests and tokens used so far. */
  usage?(): ApiUsage;
  close?(): Promise<void>;
}

export const ToolStepSchema = z.object({
  id: z.string(),
  name: z.string(),
  server: z.string().optional(),
  tool: z.string().optional(),
  arguments: z.unknown(),
  isError: z.boolean(),
  errorKind: z.string().optional(),
  ms: z.number(),
  text: z.string(),
  structured: z.unknown().optional(),
  /** An injected fault (src/env/faults.ts): the call timed out, failed or came back malformed on purpose, was delayed, or went to a distractor tool. */
  fault: z.enum(['timeout', 'error', 'malformed', 'slow', 'distractor']).optional(),
  /** A call to a meta-tool of the toolbelt or search mode (src/env/tool-modes.ts), answered by the environment. */
  meta: z.boolean().optional(),
});
export type ToolStep = z.infer<typeof ToolStepSchema>;

export const TurnSchema = z.object({
  tokens: z.array(z.number().int()).optional(),
  logprobs: z.array(z.number()).optional(),
  env_tokens: z.array(z.number().int()).optional(),
  action: z.object({ content: z.string(), tool_calls: z.array(z.object({ id: z.string(), name: z.string(), arguments: z.unknown() })) }),
  tool_results: z.array(ToolStepSchema),
  step_reward: z.number(),
  parse_error: z.string().optional(),
  /** How the turn's tool calls were read: strict (the model's format), lenient (a bare or fenced JSON call), failed; absent for a plain answer. */
  call_parse: z.enum(['strict', 'lenient', 'failed']).optional(),
  /** The turn as the model wrote it (its tokens decoded, special tokens kept): Hugging Face models. */
  text: z.string().optional(),
  policy_ms: z.number(),
  /** Tokens the provider billed for this turn (API policies). */
  usage: z.object({ prompt_tokens: z.number().int(), completion_tokens: z.number().int() }).optional(),
  /** Why the model stopped, in its API's words. */
  stop_reason: z.string().optional(),
  /** Why this turn's tokens do not extend the episode's earlier ones (the trajectory is not trained on). */
  token_drift: z.string().optional(),
  /** The version of the weights that sampled this turn (OnnxPolicy: the model's version; a served policy: its adapter's or weights' version). */
  policy_version: z.union([z.string(), z.number()]).optional(),
  /**
   * The server that sampled this turn (a served policy: its base URL, without credentials or query
   * string; never a key): with several servers (train --base-url U1 --base-url U2 ...), which one.
   */
  policy_server: z.string().optional(),
  /** The user turn this turn belongs to (0: the opening message's, k: follow-up k's); only in a task with follow-ups. */
  user_turn: z.number().int().optional(),
  /** Tools (the names the agent sees) the agent was shown first at this turn: a server's tool list changed since the last turn. */
  tools_added: z.array(z.string()).optional(),
  /** Tools the agent was shown until the last turn and no longer is, since this turn. */
  tools_removed: z.array(z.string()).optional(),
  /** The tools in the agent's context at this turn (the names it sees), in the toolbelt and search modes (src/env/tool-modes.ts). */
  tools_in_context: z.array(z.string()).optional(),
  /**
   * Prompt tokens the tool schemas took in this turn's context, as the policy counts them (a Hugging
   * Face or embedded model: its own tokens of the tool list and of every tool change appended since).
   */
  tool_tokens: z.number().int().optional(),
});
export type Turn = z.infer<typeof TurnSchema>;

export const CheckResultSchema = z.object({
  kind: z.string(),
  score: z.number(),
  weight: z.number(),
  detail: z.string(),
  /**
   * The check could not run: `task` when the task is at fault (an unknown tool or server, arguments
   * the tool refuses, a path its result cannot have), `server` when its tool server failed.
   */
  error: z.enum(['task', 'server']).optional(),
});
export type CheckResult = z.infer<typeof CheckResultSchema>;

export const TrajectorySchema = z.object({
  id: z.string(),
  run_id: z.string().optional(),
  task_id: z.string(),
  group_id: z.string(),
  /** Index of this rollout within its group. */
  sample: z.number().int(),
  split: z.enum(['train', 'eval']),
  difficulty: z.number().int(),
  family: z.string().optional(),
  policy: z.object({ id: z.string(), version: z.union([z.string(), z.number()]).optional() }),
  /**
   * The tools the agent was given (OpenAI function format, for export), with their task server and
   * tool name there: every tool it was shown during the episode, in the order first shown (the last
   * definition of each), when a server's tool list changed (each turn's `tools_added`/`tools_removed` say when).
   */
  tools: z
    .array(
      z.object({
        name: z.string(),
        description: z.string(),
        parameters: z.record(z.string(), z.unknown()),
        server: z.string().optional(),
        tool: z.string().optional(),
        distractor: z.boolean().optional(),
        meta: z.boolean().optional(),
      }),
    )
    .optional(),
  /** The hash of each server's tool surface (names, descriptions, input and output schemas), by alias (src/tools/surface.ts). */
  tool_surface: z.record(z.string(), z.string()).optional(),
  messages: z.array(ChatMessageSchema),
  turns: z.array(TurnSchema),
  answer: z.string().nullable(),
  success: z.boolean(),
  /** 0 for a failed episode (finish `error`), whose reward_parts are empty: nothing is made up. */
  reward: z.number(),
  reward_parts: z.record(z.string(), z.number()),
  /** The reward the episode was scored with (its registered name). */
  reward_name: z.string().optional(),
  checks: z.array(CheckResultSchema),
  metrics: z.object({
    turns: z.number().int(),
    tool_calls: z.number().int(),
    tool_errors: z.number().int(),
    policy_tokens: z.number().int(),
    /** Tool steps with an injected fault (`fault`), when faults were on. */
    injected_faults: z.number().int().optional(),
    /** Calls to the meta-tools of the toolbelt or search mode (counted in tool_calls too). */
    meta_calls: z.number().int().optional(),
    /** The tool schemas' prompt tokens in the context of the episode's last turn (its turns' `tool_tokens`), where the policy counted them. */
    tool_tokens: z.number().int().optional(),
  }),
  /** policy_ms: the turns' sampling (queueing included); tool_ms: the tool calls; score_ms: the checks and the reward (absent in older files). */
  timings: z.object({ started_at: z.string(), total_ms: z.number(), policy_ms: z.number(), tool_ms: z.number(), score_ms: z.number().optional() }),
  /** `error`: the episode failed (a tool server, the policy, the reward, or the task itself: see task_error). */
  finish: z.enum(['answer', 'max_turns', 'error']),
  /** Why the episode failed (finish `error`); its first line names the cause. */
  error: z.string().optional(),
  /**
   * True when the task itself is broken, not the agent: a setup call or a check that cannot run
   * (an unknown tool or server, arguments the tool refuses, a path its result cannot have).
   * Such an episode has finish `error`; `error` says what is wrong with the task.
   */
  task_error: z.boolean().optional(),
  /**
   * What failed (finish `error`): `server_start` a tool server could not be started or reached,
   * `server` one failed during the episode, `policy`, `task` (see task_error), `reward`, `replay`
   * (a recording lacks a call), `other`.
   */
  error_kind: z.enum(['server_start', 'server', 'policy', 'task', 'reward', 'replay', 'other']).optional(),
});
export type Trajectory = z.infer<typeof TrajectorySchema>;
export type ErrorKind = NonNullable<Trajectory['error_kind']>;
