/**
 * The wire types of `mcp-gym serve-env` (OpenEnv): the action a client sends to `step`, the
 * observation it gets back, and the session's state, as zod schemas (GET /schema gives their JSON
 * Schemas). `call_tool` and `list_tools` are OpenEnv's own MCP actions (openenv-core's
 * CallToolAction and ListToolsAction); `answer` ends the episode with the agent's final answer.
 */
import { z } from 'zod';
import { ChatMessageSchema } from '../types.ts';

const Metadata = z.record(z.string(), z.unknown()).optional().describe('OpenEnv Action.metadata (ignored)');

export const CallToolActionSchema = z.strictObject({
  type: z.literal('call_tool'),
  tool_name: z.string().min(1).describe("a tool of the observation's `tools`"),
  arguments: z.record(z.string(), z.unknown()).default({}).describe("the tool's arguments (a JSON object)"),
  content: z.string().optional().describe("the assistant's text with the call (recorded in the transcript)"),
  metadata: Metadata,
});

export const AnswerActionSchema = z.strictObject({
  type: z.literal('answer'),
  content: z.string().describe("the agent's final answer: the episode ends, is checked and scored"),
  metadata: Metadata,
});

export const ListToolsActionSchema = z.strictObject({
  type: z.literal('list_tools'),
  metadata: Metadata,
});

export const EnvActionSchema = z.discriminatedUnion('type', [CallToolActionSchema, AnswerActionSchema, ListToolsActionSchema]);
export type EnvAction = z.output<typeof EnvActionSchema>;

export const EnvToolSchema = z.object({
  name: z.string(),
  description: z.string(),
  input_schema: z.record(z.string(), z.unknown()).describe("the tool's JSON Schema (MCP inputSchema)"),
});
export type EnvTool = z.output<typeof EnvToolSchema>;

export const EnvObservationSchema = z.object({
  session_id: z.string(),
  episode_id: z.string().nullable(),
  task_id: z.string(),
  turn: z.number().int().describe('actions taken in this episode (list_tools not counted)'),
  max_turns: z.number().int(),
  messages: z.array(ChatMessageSchema).describe('the messages added since the last observation (on reset: the opening messages)'),
  tools: z.array(EnvToolSchema),
  tool_result: z
    .object({ tool_name: z.string(), text: z.string(), is_error: z.boolean() })
    .nullable()
    .describe("the last tool message among `messages` (a failed call's error text, a crashed server's too), or null"),
  success: z.boolean().optional().describe('when done: whether the checks passed'),
  finish: z.enum(['answer', 'max_turns', 'error']).optional().describe('when done: how the episode ended'),
  reward_parts: z.record(z.string(), z.number()).optional().describe("when done: the reward's named parts"),
  checks: z
    .array(z.object({ kind: z.string(), score: z.number(), weight: z.number(), detail: z.string().optional() }))
    .optional()
    .describe("when done: the task's checks"),
  error: z.string().optional().describe('when done: why the episode failed (a server that did not start, a broken task)'),
});
export type EnvObservation = z.output<typeof EnvObservationSchema>;

export const EnvStateSchema = z.object({
  episode_id: z.string().nullable(),
  step_count: z.number().int(),
  task_id: z.string().nullable(),
  session_id: z.string(),
  done: z.boolean(),
  max_turns: z.number().int().nullable(),
});
export type EnvState = z.output<typeof EnvStateSchema>;

/** GET /schema: OpenEnv's SchemaResponse {action, observation, state}. */
export function envSchemas(): { action: unknown; observation: unknown; state: unknown } {
  return {
    action: z.toJSONSchema(EnvActionSchema, { io: 'input' }),
    observation: z.toJSONSchema(EnvObservationSchema, { io: 'output' }),
    state: z.toJSONSchema(EnvStateSchema, { io: 'output' }),
  };
}
