/**
 * The docs cannot drift from the code: docs/cli.md is what the commands' own --help prints
 * (scripts/cli-docs.mjs), every `mcp-gym <command>` the README and docs/ show is a command, every
 * flag shown with a command is one of that command's flags, every relative link and every file
 * named resolves, and docs/exit-codes.md's table is lib/failures.ts's. Runs the built CLI (dist/).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module without types (scripts/ is JavaScript)
import { CLI_DOC, commandsOf, helpInvocations, helpOf, renderCliDoc } from '../scripts/cli-docs.mjs';
import { EXIT_MEANINGS } from '../lib/index.ts';
import { ROOT } from './helpers.ts';

const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The code of a markdown text: inline code spans and the lines of fenced blocks, with where each is. */
function codeOf(file: string): { where: string; code: string }[] {
  const out: { where: string; code: string }[] = [];
  let fenced = false;
  readFileSync(join(ROOT, file), 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const where = `${file}:${i + 1}`;
      if (/^\s*```/.test(line)) {
        fenced = !fenced;
        return;
      }
      if (fenced) out.push({ where, code: line });
      else for (const m of line.matchAll(/`([^`]+)`/g)) out.push({ where, code: m[1]! });
    });
  return out;
}

/** A command's flags, as its --help names them. */
function flagsIn(help: string): Set<string> {
  return new Set([...help.matchAll(/(?<![\w-])(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]!));
}

describe('docs', { timeout: 120_000 }, () => {
  const main = helpOf(['--help']) as string;
  const commands = new Set<string>((commandsOf(main) as { name: string }[]).map((c) => c.name));
  const helps = new Map<string, Set<string>>();
  for (const h of helpInvocations(main) as { args: string[] }[]) {
    const name = h.args[0]!;
    helps.set(name, new Set([...(helps.get(name) ?? []), ...flagsIn(helpOf(h.args) as string), ...flagsIn(main)]));
  }
  const code = DOCS.flatMap(codeOf);

  it('reads the commands and the docs', () => {
    expect(commands).toContain('train');
    expect(commands).toContain('bench');
    expect(helps.get('train')).toContain('--steps');
    expect(code.length).toBeGreaterThan(200);
  });

  it('docs/cli.md is what the commands print (node scripts/cli-docs.mjs regenerates it)', async () => {
    expect(readFileSync(CLI_DOC, 'utf8')).toBe(await renderCliDoc());
  });

  it('every `mcp-gym <command>` in the docs is a command', () => {
    const unknown = code.flatMap(({ where, code: c }) =>
      [...c.matchAll(/(?<![\w/-])mcp-gym ([a-z][a-z0-9-]*)/g)].filter((m) => !commands.has(m[1]!)).map((m) => `${where}: mcp-gym ${m[1]}`),
    );
    expect(unknown).toEqual([]);
  });

  it("every flag shown after `mcp-gym <command>` (or `npm start --`) is one of that command's", () => {
    const wrong: string[] = [];
    for (const { where, code: c } of code) {
      // Each command on the line, up to the next one (or a pipe, a ;, a &&).
      for (const m of c.matchAll(/(?:(?<![\w/-])mcp-gym ([a-z][a-z0-9-]*)|npm start --)([^|;&]*)/g)) {
        const name = m[1] ?? 'start';
        const flags = helps.get(name);
        if (!flags) continue; // not a command: the test above says so
        for (const f of m[2]!.matchAll(/(?<![\w-])(--[a-z][a-z0-9-]*)/g)) if (!flags.has(f[1]!)) wrong.push(`${where}: mcp-gym ${name} ${f[1]}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('every relative link resolves', () => {
    const broken: string[] = [];
    for (const file of DOCS) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/\]\(([^)#\s]+)(#[^)\s]*)?\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        if (!existsSync(join(ROOT, dirname(file), target))) broken.push(`${file}: ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every file of the repository the docs name exists', () => {
    const missing: string[] = [];
    for (const file of DOCS) {
      readFileSync(join(ROOT, file), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(
            /(?<![\w/.-])((?:src|lib|servers|learner|test|bench|scripts|examples)\/[\w./-]*\.(?:json|jsonl|ts|mjs|js|py|md|sh))(?![\w/-])/g,
          )) {
            if (!existsSync(join(ROOT, m[1]!))) missing.push(`${file}:${i + 1}: ${m[1]}`);
          }
        });
    }
    expect(missing).toEqual([]);
  });

  it("docs/exit-codes.md's table is lib/failures.ts's", () => {
    const text = readFileSync(join(ROOT, 'docs/exit-codes.md'), 'utf8');
    const rows = [...text.matchAll(/^\| (\d+) \| (.+) \|$/gm)].map((m) => [Number(m[1]), m[2]]);
    expect(rows).toEqual(Object.entries(EXIT_MEANINGS).map(([code, meaning]) => [Number(code), meaning]));
  });
});
