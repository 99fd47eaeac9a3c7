/**
 * The generated parts of learner/PROTOCOL.md: the table of commands and the table of the training
 * config, rendered from the contract (src/trainers/protocol.ts) between marker comments. A test
 * (test/trainers/protocol.test.ts) fails when the committed file differs from the rendering.
 */
import { z } from 'zod';
import { join } from 'node:path';
import { LEARNER_DIR } from '../paths.ts';
import { LEARNER_COMMANDS, LearnerConfigSchema } from './protocol.ts';

export const PROTOCOL_SCHEMA_FILE = join(LEARNER_DIR, 'mcp_gym_learner', 'protocol.schema.json');
export const PROTOCOL_DOC_FILE = join(LEARNER_DIR, 'PROTOCOL.md');

type Js = Record<string, unknown>;

function typeOf(s: Js): string {
  if (s.enum) return (s.enum as unknown[]).map((v) => `\`${JSON.stringify(v)}\``).join(', ');
  if (s.const !== undefined) return `\`${JSON.stringify(s.const)}\``;
  if (s.anyOf) return (s.anyOf as Js[]).map(typeOf).join(' or ');
  if (s.type === 'array') {
    if (s.prefixItems) return `[${(s.prefixItems as Js[]).map(typeOf).join(', ')}]`;
    return s.items ? `${typeOf(s.items as Js)}[]` : 'array';
  }
  if (s.type === 'object') return s.properties ? `{${Object.keys(s.properties as Js).join(', ')}}` : 'object';
  return String(s.type ?? 'any');
}

function bounds(s: Js): string {
  const b: string[] = [];
  const safe = (v: unknown) => typeof v === 'number' && Math.abs(v) >= Number.MAX_SAFE_INTEGER; // zod's int bounds: no information
  if (s.minimum !== undefined && !safe(s.minimum)) b.push(`≥ ${s.minimum}`);
  if (s.exclusiveMinimum !== undefined) b.push(`> ${s.exclusiveMinimum}`);
  if (s.maximum !== undefined && !safe(s.maximum)) b.push(`≤ ${s.maximum}`);
  if (s.exclusiveMaximum !== undefined) b.push(`< ${s.exclusiveMaximum}`);
  if (s.minLength !== undefined) b.push(`length ≥ ${s.minLength}`);
  return b.join(', ');
}

const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

function argsCell(request: Js): string {
  const props = (request.properties ?? {}) as Record<string, Js>;
  const required = new Set((request.required ?? []) as string[]);
  const parts = Object.entries(props).map(([k, p]) => {
    const extra = [typeOf(p), bounds(p)].filter(Boolean).join(', ');
    return `\`${k}${required.has(k) ? '' : '?'}\` (${cell(extra)})${p.description ? `: ${cell(String(p.description))}` : ''}`;
  });
  return parts.length ? parts.join('; ') : '(none)';
}

function resultCell(result: Js): string {
  const props = Object.keys((result.properties ?? {}) as Js);
  return props.length ? `{${props.join(', ')}, ...}` : '{...}';
}

export function commandsTable(): string {
  const rows = ['| cmd | what it does | arguments (`?`: optional, may be null) | result |', '| --- | --- | --- | --- |'];
  for (const [name, c] of Object.entries(LEARNER_COMMANDS)) {
    const req = z.toJSONSchema(c.request, { io: 'input', unrepresentable: 'any' }) as Js;
    const res = z.toJSONSchema(c.result, { io: 'output', unrepresentable: 'any' }) as Js;
    rows.push(`| \`${name}\` | ${cell(c.summary)} | ${argsCell(req)} | ${resultCell(res)} |`);
  }
  return rows.join('\n');
}

export function configTable(): string {
  const js = z.toJSONSchema(LearnerConfigSchema, { io: 'input' }) as Js;
  const rows = ['| field | type | default | meaning |', '| --- | --- | --- | --- |'];
  for (const [k, p] of Object.entries((js.properties ?? {}) as Record<string, Js>)) {
    const t = [typeOf(p), bounds(p)].filter(Boolean).join(', ');
    rows.push(`| \`${k}\` | ${cell(t)} | ${p.default === undefined ? '(none)' : `\`${JSON.stringify(p.default)}\``} | ${cell(String(p.description ?? ''))} |`);
  }
  return rows.join('\n');
}

const BLOCKS: Record<string, () => string> = { commands: commandsTable, config: configTable };

/** The document with every `<!-- generated:NAME -->…<!-- /generated:NAME -->` block rendered anew. */
export function renderProtocolDoc(doc: string): string {
  let out = doc;
  for (const [name, render] of Object.entries(BLOCKS)) {
    const open = `<!-- generated:${name} (from src/trainers/protocol.ts by scripts/gen-protocol.ts; do not edit) -->`;
    const close = `<!-- /generated:${name} -->`;
    const re = new RegExp(`<!-- generated:${name}[^>]*-->[\\s\\S]*?<!-- /generated:${name} -->`);
    if (!re.test(out)) throw new Error(`${PROTOCOL_DOC_FILE}: no <!-- generated:${name} --> block`);
    out = out.replace(re, () => `${open}\n${render()}\n${close}`);
  }
  return out;
}
