/** Tokenisation on the rollout side for Hugging Face checkpoints (Qwen3, Llama 3.x). */
export { HfTokenizer, type EncodeOptions } from './tokenizer.ts';
export {
  ChatTemplateRenderer,
  detectFamily,
  turnEndToken,
  type ChatMessage,
  type OpenAiToolCall,
  type ToolSpec,
  type TemplateFamily,
  type RendererOptions,
  type RenderOptions,
} from './chat-template.ts';
export { parseToolCalls, type CallParse, type ParsedToolCall, type ParsedToolCalls } from './tool-calls.ts';
export {
  resolveToolFormat,
  writeChatTemplate,
  hermesTemplate,
  isHermesTemplate,
  templateHasTools,
  toolChangeNotice,
  TOOL_FORMAT_CHOICES,
  type ToolFormat,
  type ToolFormatChoice,
} from './tool-format.ts';
export { HfSequence, assistantMessageFromText, type ContinueResult, type Rewritten } from './sequence.ts';
