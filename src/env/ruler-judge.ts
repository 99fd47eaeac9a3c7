/** Asking RULER's judge: a request's answer from the cache or the judge, asked once more when it does not parse. */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { sha256Hex } from '../../lib/index.ts';
import type { ChatModel, ChatRequest } from './types.ts';
import { JudgeError, type RulerMode, type RulerOptions } from './ruler-types.ts';
import { clip } from './ruler-prompt.ts';
import type { Parsed } from './ruler-parse.ts';

export const MAX_ERROR = 300;

export interface Ctx {
  judge: ChatModel;
  o: RulerOptions;
  mode: RulerMode;
  rubric: string;
  calls: number;
  cached: number;
}

function cacheFile(ctx: Ctx, request: ChatRequest, extra: Record<string, unknown>): string | undefined {
  if (!ctx.o.cacheDir) return undefined;
  const prompt = [request.system ?? '', ...request.messages.map((m) => `${m.role}: ${m.content}`)].join('\n\n');
  const key = sha256Hex(JSON.stringify({ judge: ctx.judge.id, mode: ctx.mode, rubric: ctx.rubric, prompt, ...extra }));
  return join(ctx.o.cacheDir, `${key}.json`);
}

function readCache(file: string | undefined): string | undefined {
  if (!file) return undefined;
  try {
    const v = JSON.parse(readFileSync(file, 'utf8')) as { text?: unknown };
    return typeof v.text === 'string' ? v.text : undefined;
  } catch {
    return undefined; // absent or unreadable: ask the judge
  }
}

function writeCache(file: string | undefined, ctx: Ctx, text: string): void {
  if (!file) return;
  mkdirSync(ctx.o.cacheDir!, { recursive: true });
  const tmp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  writeFileSync(tmp, JSON.stringify({ judge: ctx.judge.id, mode: ctx.mode, text }) + '\n');
  renameSync(tmp, file);
}

async function complete(ctx: Ctx, request: ChatRequest): Promise<string> {
  ctx.calls++;
  try {
    return (await ctx.judge.complete(request, ctx.o.signal)).text;
  } catch (err) {
    throw new JudgeError(`judge ${ctx.judge.id}: the request failed: ${clip((err as Error).message ?? String(err), MAX_ERROR)}`, { cause: err });
  }
}

/**
 * The judge's answer to `request`, parsed: from the cache, or asked (and asked once more, saying
 * what was wrong, when the first answer does not parse). A request that throws is a JudgeError.
 */
export async function ask<T>(
  ctx: Ctx,
  request: ChatRequest,
  parse: (text: string) => Parsed<T>,
  retryHint: string,
  extra: Record<string, unknown> = {},
): Promise<Parsed<T>> {
  const file = cacheFile(ctx, request, extra);
  const hit = readCache(file);
  if (hit !== undefined) {
    const p = parse(hit);
    if (p.ok) {
      ctx.cached++;
      return p;
    }
  }
  const first = await complete(ctx, request);
  const p1 = parse(first);
  if (p1.ok) {
    writeCache(file, ctx, first);
    return p1;
  }
  const retry: ChatRequest = {
    ...request,
    messages: [
      ...request.messages,
      { role: 'assistant', content: first },
      { role: 'user', content: `Your answer could not be used: ${p1.error}. ${retryHint}` },
    ],
  };
  const second = await complete(ctx, retry);
  const p2 = parse(second);
  if (p2.ok) {
    writeCache(file, ctx, second);
    return p2;
  }
  return { ok: false, error: `${p1.error}; asked again: ${p2.error}` };
}
