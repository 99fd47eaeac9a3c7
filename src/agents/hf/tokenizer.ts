/**
 * A Hugging Face checkpoint's tokenizer, read from its directory: `tokenizer.json` (the Rust
 * tokenizers' format, run by @huggingface/tokenizers), `tokenizer_config.json` (special tokens and,
 * usually, `chat_template`), optionally `chat_template.jinja` (newer checkpoints keep the template
 * there) and `generation_config.json` (its `eos_token_id` adds to the end-of-turn ids: Llama 3.x
 * ends turns with <|eot_id|> while tokenizer_config's eos_token is <|end_of_text|>).
 */
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';

export interface EncodeOptions {
  /** Whether the tokenizer's post-processor adds its special tokens (BOS); default false. */
  addSpecialTokens?: boolean;
}

type Json = Record<string, unknown>;

function readJson(dir: string, name: string, required: true): Json;
function readJson(dir: string, name: string, required: false): Json | undefined;
function readJson(dir: string, name: string, required: boolean): Json | undefined {
  const path = join(dir, name);
  if (!existsSync(path)) {
    if (required) throw new Error(`HfTokenizer: ${name} not found in ${dir}`);
    return undefined;
  }
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`HfTokenizer: ${path} is not valid JSON (${(err as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`HfTokenizer: ${path} is not a JSON object`);
  return value as Json;
}

/** A special token as tokenizer_config writes it: a string or an AddedToken object `{content}`. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

/**
 * The chat template of a tokenizer_config (a string, or a list of {name, template} where the one
 * named 'default' is taken, else the first), or of a `chat_template.jinja` file, which wins.
 */
function chatTemplateOf(dir: string, config: Json): string | undefined {
  const file = join(dir, 'chat_template.jinja');
  if (existsSync(file)) return readFileSync(file, 'utf8');
  const t = config.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t.filter((x): x is { name: string; template: string } => !!x && typeof x === 'object' && typeof (x as Json).template === 'string');
    return (named.find((x) => x.name === 'default') ?? named[0])?.template;
  }
  return undefined;
}

export class HfTokenizer {
  /** Ids that end a sampled turn (eos_token, and generation_config's eos_token_id). */
  readonly eosTokenIds: number[];
  readonly eosToken: string | undefined;
  readonly bosToken: string | undefined;
  readonly bosTokenId: number | undefined;
  /** The model's chat template (Jinja), when the checkpoint has one. */
  readonly chatTemplate: string | undefined;
  /** The ids of the added tokens that are marked special (e.g. <|im_start|>, <|eot_id|>). */
  readonly specialIds: ReadonlySet<number>;

  constructor(
    readonly tokenizer: Tokenizer,
    readonly config: Json,
    options: { chatTemplate?: string; generationConfig?: Json } = {},
  ) {
    this.chatTemplate = options.chatTemplate ?? (typeof config.chat_template === 'string' ? config.chat_template : undefined);
    this.bosToken = tokenText(config.bos_token);
    this.eosToken = tokenText(config.eos_token);
    this.bosTokenId = this.bosToken === undefined ? undefined : tokenizer.token_to_id(this.bosToken);
    const eos = new Set<number>();
    const e = this.eosToken === undefined ? undefined : tokenizer.token_to_id(this.eosToken);
    if (e !== undefined) eos.add(e);
    const g = options.generationConfig?.eos_token_id;
    for (const id of Array.isArray(g) ? g : [g]) if (typeof id === 'number') eos.add(id);
    this.eosTokenIds = [...eos];
    const special = new Set<number>();
    for (const [id, t] of tokenizer.get_added_tokens_decoder()) if (t.special) special.add(id);
    this.specialIds = special;
  }

  /** Reads tokenizer.json, tokenizer_config.json (and chat_template.jinja, generation_config.json when present) from `dir`. */
  static load(dir: string): HfTokenizer {
    if (!existsSync(dir)) throw new Error(`HfTokenizer: directory ${dir} does not exist`);
    const tj = readJson(dir, 'tokenizer.json', true);
    const config = readJson(dir, 'tokenizer_config.json', true);
    const generationConfig = readJson(dir, 'generation_config.json', false);
    const chatTemplate = chatTemplateOf(dir, config);
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(tj, config);
    } catch (err) {
      throw new Error(`HfTokenizer: cannot build the tokenizer of ${dir} (${(err as Error).message})`);
    }
    return new HfTokenizer(tokenizer, config, { ...(chatTemplate !== undefined ? { chatTemplate } : {}), ...(generationConfig ? { generationConfig } : {}) });
  }

  /** Token ids of a text; special tokens written in the text (<|im_start|>) become their single ids. */
  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  /** Text of token ids; special tokens are kept unless `skipSpecialTokens`. */
  decode(ids: ArrayLike<number>, options: { skipSpecialTokens?: boolean } = {}): string {
    return this.tokenizer.decode(Array.from(ids), { skip_special_tokens: options.skipSpecialTokens ?? false, clean_up_tokenization_spaces: false });
  }

  tokenId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }
}
