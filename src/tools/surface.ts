/**
 * Tool-surface drift: a fingerprint of what a server shows an agent (each tool's name, description,
 * input schema and output schema), so that a model trained against one surface is not silently
 * evaluated or trained further against another.
 *
 * - Canonical JSON: object keys sorted at every depth, `undefined` members dropped, and the two
 *   JSON Schema keywords whose arrays are sets (`required`, `type`) sorted; every other array keeps
 *   its order (`enum`, `prefixItems`, `anyOf` order can matter to a model reading the schema).
 * - A tool's fingerprint: the SHA-256 of its description, of its input schema and of its output
 *   schema (canonical JSON; an absent description or output schema is `null`), and the hash of the
 *   whole tool (its name and those three). A server's hash is the SHA-256 of the canonical JSON of
 *   `{tool name: tool hash}`, so it does not depend on the order of tools/list.
 * - Titles and annotations are not part of the surface: the agent is shown names, descriptions and
 *   schemas only.
 *
 * Recorded in every trajectory (`tool_surface: {alias: server hash}`), in a training run's
 * directory and in the model directory it trains (`tool-surface.json`, every tool's fingerprint),
 * and in `mcp-gym eval`'s and `mcp-gym bench`'s output; `compareSurfaces` names what changed.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { sha256Hex } from '../../lib/index.ts';
import type { ToolInfo } from './contracts.ts';

/** The file that holds a recorded surface, in a run directory and in a trained model directory. */
export const TOOL_SURFACE_FILE = 'tool-surface.json';

/** JSON Schema keywords whose arrays are sets: sorted in the canonical form. */
const SET_KEYWORDS = new Set(['required', 'type']);

function canonical(value: unknown, key: string | undefined, seen: Set<object>): unknown {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) return null;
    if (typeof value === 'bigint') return value.toString();
    return value;
  }
  if (seen.has(value)) throw new TypeError('canonicalJson: a cyclic value');
  seen.add(value);
  try {
    if (Array.isArray(value)) {
      const items = value.map((v) => (v === undefined || typeof v === 'function' ? null : canonical(v, undefined, seen)));
      if (key !== undefined && SET_KEYWORDS.has(key) && items.every((v) => typeof v === 'string')) return [...(items as string[])].sort();
      return items;
    }
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v === undefined || typeof v === 'function') continue;
      out[k] = canonical(v, k, seen);
    }
    return out;
  } finally {
    seen.delete(value);
  }
}

/** JSON with object keys sorted at every depth (and `required`/`type` arrays sorted): equal for equal meanings. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(canonical(value, undefined, new Set())) ?? 'null';
}

/** The SHA-256 (hex) of a value's canonical JSON. */
export function canonicalHash(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}

export const ToolFingerprintSchema = z.object({
  /** The hash of the whole tool: its name, description, input and output schemas. */
  hash: z.string(),
  description: z.string(),
  input_schema: z.string(),
  output_schema: z.string(),
});
export type ToolFingerprint = z.infer<typeof ToolFingerprintSchema>;

export const ServerSurfaceSchema = z.object({
  /** The server's surface hash: of `{tool name: tool hash}`, independent of the tools' order. */
  hash: z.string(),
  tools: z.record(z.string(), ToolFingerprintSchema),
});
export type ServerSurface = z.infer<typeof ServerSurfaceSchema>;

/** The surfaces of a task set's servers, by the alias the tasks give them. */
export type ToolSurfaces = Record<string, ServerSurface>;

/** `tool-surface.json`: every server's surface, and one hash over them all. */
export const ToolSurfaceFileSchema = z.object({
  hash: z.string(),
  servers: z.record(z.string(), ServerSurfaceSchema),
  recorded_at: z.string().optional(),
});
export type ToolSurfaceFile = z.infer<typeof ToolSurfaceFileSchema>;

/** What part of a tool changed. */
export type SurfacePart = 'description' | 'input_schema' | 'output_schema';
const PARTS: SurfacePart[] = ['description', 'input_schema', 'output_schema'];

/** One tool's fingerprint. */
export function toolFingerprint(tool: Pick<ToolInfo, 'name' | 'description' | 'inputSchema' | 'outputSchema'>): ToolFingerprint {
  const description = canonicalHash(tool.description ?? null);
  const input_schema = canonicalHash(tool.inputSchema ?? null);
  const output_schema = canonicalHash(tool.outputSchema ?? null);
  return { hash: canonicalHash({ name: tool.name, description, input_schema, output_schema }), description, input_schema, output_schema };
}

/**
 * A server's surface from its tools/list. A name listed twice (a broken server) keeps every
 * listing: the later ones under `name#2`, `name#3`, ... in the order of their own hashes.
 */
export function toolSurface(tools: readonly Pick<ToolInfo, 'name' | 'description' | 'inputSchema' | 'outputSchema'>[]): ServerSurface {
  const byName = new Map<string, ToolFingerprint[]>();
  for (const t of tools) {
    const list = byName.get(t.name) ?? [];
    list.push(toolFingerprint(t));
    byName.set(t.name, list);
  }
  const out: Record<string, ToolFingerprint> = {};
  for (const name of [...byName.keys()].sort()) {
    const list = byName.get(name)!.sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
    list.forEach((f, i) => (out[i === 0 ? name : `${name}#${i + 1}`] = f));
  }
  return { hash: canonicalHash(Object.fromEntries(Object.entries(out).map(([n, f]) => [n, f.hash]))), tools: out };
}

/** The hash over several servers' surfaces (`{alias: server hash}`). */
export function surfacesHash(surfaces: ToolSurfaces): string {
  return canonicalHash(Object.fromEntries(Object.entries(surfaces).map(([alias, s]) => [alias, s.hash])));
}

/** What changed between two recorded surfaces of one server. */
export interface SurfaceDiff {
  added: string[];
  removed: string[];
  changed: { tool: string; parts: SurfacePart[] }[];
}

/** The tools added, removed and changed (and which parts of them) from `was` to `now`; names sorted. */
export function compareSurfaces(was: ServerSurface, now: ServerSurface): SurfaceDiff {
  const diff: SurfaceDiff = { added: [], removed: [], changed: [] };
  if (was.hash === now.hash) return diff;
  const names = [...new Set([...Object.keys(was.tools), ...Object.keys(now.tools)])].sort();
  for (const name of names) {
    const a = was.tools[name];
    const b = now.tools[name];
    if (!a) diff.added.push(name);
    else if (!b) diff.removed.push(name);
    else if (a.hash !== b.hash) {
      const parts = PARTS.filter((p) => a[p] !== b[p]);
      diff.changed.push({ tool: name, parts: parts.length ? parts : PARTS });
    }
  }
  return diff;
}

export function isEmptyDiff(d: SurfaceDiff): boolean {
  return d.added.length === 0 && d.removed.length === 0 && d.changed.length === 0;
}

/** The drift between two sets of server surfaces, by alias. */
export interface SurfacesDrift {
  /** Servers now in use that the recorded surface does not have. */
  new_servers: string[];
  /** Servers the recorded surface has that are not in use now (not drift in itself: a subset is evaluated). */
  missing_servers: string[];
  /** For each server in both whose surface changed: what changed. */
  servers: Record<string, SurfaceDiff>;
}

/** Compares every server in `now` with the one of the same alias in `was`. */
export function compareSurfaceSets(was: ToolSurfaces, now: ToolSurfaces): SurfacesDrift {
  const drift: SurfacesDrift = { new_servers: [], missing_servers: [], servers: {} };
  for (const alias of Object.keys(now).sort()) {
    const a = was[alias];
    if (!a) drift.new_servers.push(alias);
    else {
      const d = compareSurfaces(a, now[alias]!);
      if (!isEmptyDiff(d)) drift.servers[alias] = d;
    }
  }
  drift.missing_servers = Object.keys(was)
    .filter((alias) => !(alias in now))
    .sort();
  return drift;
}

/** Whether anything an agent sees differs: a server it was not trained on, or a changed one (missing servers aside). */
export function hasDrift(d: SurfacesDrift): boolean {
  return d.new_servers.length > 0 || Object.keys(d.servers).length > 0;
}

const PART_WORDS: Record<SurfacePart, string> = { description: 'description', input_schema: 'input schema', output_schema: 'output schema' };

/** One line per drifted server, naming the tools: `calculator: changed evaluate (description, input schema); added sqrt; removed pow`. */
export function describeDrift(d: SurfacesDrift): string[] {
  const lines: string[] = [];
  for (const alias of d.new_servers) lines.push(`${alias}: a server not in the recorded surface (its tools were never seen)`);
  for (const [alias, s] of Object.entries(d.servers)) {
    const parts: string[] = [];
    if (s.changed.length) parts.push(`changed ${s.changed.map((c) => `${c.tool} (${c.parts.map((p) => PART_WORDS[p]).join(', ')})`).join(', ')}`);
    if (s.added.length) parts.push(`added ${s.added.join(', ')}`);
    if (s.removed.length) parts.push(`removed ${s.removed.join(', ')}`);
    lines.push(`${alias}: ${parts.join('; ')}`);
  }
  return lines;
}

/** Writes `dir/tool-surface.json` (atomically). */
export function writeToolSurfaces(dir: string, surfaces: ToolSurfaces): ToolSurfaceFile {
  const file: ToolSurfaceFile = { hash: surfacesHash(surfaces), servers: surfaces, recorded_at: new Date().toISOString() };
  const path = join(dir, TOOL_SURFACE_FILE);
  writeFileSync(path + '.tmp', JSON.stringify(file, null, 2) + '\n');
  renameSync(path + '.tmp', path);
  return file;
}

/** The surfaces recorded in `dir/tool-surface.json`; undefined when there is none; throws, naming the file, when it cannot be read. */
export function readToolSurfaces(dir: string): ToolSurfaceFile | undefined {
  const path = join(dir, TOOL_SURFACE_FILE);
  if (!existsSync(path)) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`);
  }
  const r = ToolSurfaceFileSchema.safeParse(raw);
  if (!r.success)
    throw new Error(`${path}: not a recorded tool surface (${r.error.issues[0]?.path.join('.') ?? ''}: ${r.error.issues[0]?.message ?? 'invalid'})`);
  return r.data;
}

/**
 * The drift of `now` from the surface recorded in `dir` (a model or run directory), as one warning
 * (a heading, then a line per server naming its tools); undefined when nothing drifted or nothing
 * is recorded. `what` ends the heading (e.g. `the model models/x was trained on`).
 */
export function driftWarning(dir: string, now: ToolSurfaces, what: string): string | undefined {
  let recorded: ToolSurfaceFile | undefined;
  try {
    recorded = readToolSurfaces(dir);
  } catch (err) {
    return `cannot compare the tool surface with ${what}: ${(err as Error).message}`;
  }
  if (!recorded) return undefined;
  const drift = compareSurfaceSets(recorded.servers, now);
  if (!hasDrift(drift)) return undefined;
  return `the tools differ from those ${what} (${join(dir, TOOL_SURFACE_FILE)}):\n${describeDrift(drift)
    .map((l) => `  ${l}`)
    .join('\n')}`;
}
