/**
 * Hashing: FNV-1a (32 bits), the stable string hash behind the suites' train/eval partition and
 * per-suite seeds and the bench's per-tool seeds; and SHA-256 in hex, for names derived from ids
 * (e.g. the files server's sandbox directories); and the stable JSON text those are taken of.
 */
import { createHash } from 'node:crypto';

/** FNV-1a, 32 bits, over the UTF-16 code units of `text`: an unsigned 32-bit integer. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The SHA-256 of `text` (UTF-8), as 64 lowercase hex digits. */
export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** A JSON text with object keys sorted at every depth (undefined members left out): the stable key of a task's `params`, a recorded call's arguments. */
export function stableJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
}
