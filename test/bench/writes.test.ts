/**
 * The benchmark never harms a user's data: against the official filesystem MCP server
 * (`@modelcontextprotocol/server-filesystem <dir>`, from npm) over stdio, `mcp-gym bench --fuzz`
 * leaves the served directory exactly as it was (names, contents, mtimes) and reports the tools it
 * skipped and why; with `--allow-writes` it calls them, says so first, and the directory changes.
 */
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../helpers.ts';

const FILESYSTEM = join(ROOT, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
/** The server's tools that may write, and the annotation that says so. */
const WRITERS = {
  write_file: 'destructiveHint: true',
  edit_file: 'destructiveHint: true',
  move_file: 'destructiveHint: true',
  create_directory: 'readOnlyHint: false, destructiveHint: false (it only adds)',
};

const cli = runCli;

/** Everything under `dir`, itself included: type, mode, size, mtime (ns) and the bytes of each file. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const visit = (rel: string) => {
    const abs = join(dir, rel);
    const st = lstatSync(abs, { bigint: true });
    const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'link' : 'other';
    out.set(
      rel || '.',
      JSON.stringify({
        type,
        mode: String(st.mode),
        size: String(st.size),
        mtimeNs: String(st.mtimeNs),
        bytes: st.isFile() ? readFileSync(abs).toString('base64') : undefined,
      }),
    );
    if (st.isDirectory()) for (const name of readdirSync(abs).sort()) visit(join(rel, name));
  };
  visit('');
  return out;
}

/** A served directory holding a.txt (and a folder with a file), with mtimes in the past. */
function servedDir(): string {
  const dir = join(mkdtempSync(join(tmpdir(), 'mcp-gym-bench-writes-')), 'served');
  mkdirSync(join(dir, 'notes'), { recursive: true });
  writeFileSync(join(dir, 'a.txt'), 'the user data\n');
  writeFileSync(join(dir, 'notes', 'b.md'), '# keep me\n');
  const past = new Date('2020-01-02T03:04:05Z');
  for (const p of [join(dir, 'notes', 'b.md'), join(dir, 'notes'), join(dir, 'a.txt'), dir]) utimesSync(p, past, past);
  return dir;
}

/** A short benchmark run with fuzzing of the filesystem server serving `dir`. */
function benchArgs(dir: string, extra: string[]): string[] {
  const failures = join(dir, '..', 'failures.jsonl');
  return [
    'bench',
    '--stdio',
    `"${process.execPath}" "${FILESYSTEM}" "${dir}"`,
    '--fuzz',
    '--fuzz-cases',
    '15',
    '--calls',
    '20',
    '--concurrency',
    '1,4',
    '--duration-ms',
    '2000',
    '--timeout-ms',
    '3000',
    '--save-failures',
    failures,
    '--json',
    ...extra,
  ];
}

type Json = {
  tools: Record<string, unknown>;
  fuzz: { tools: Record<string, { cases: number }>; totals: { cases: number } };
  skipped: { tool: string; reason: string }[];
  excluded: string[];
  allow_writes: boolean;
  may_write?: { tool: string; reason: string }[];
};
const lastJson = (stdout: string) => JSON.parse(stdout.trim().split('\n').pop()!) as Json;

describe('bench against the official filesystem server (npm)', () => {
  it('by default leaves the served directory byte for byte as it was, and reports the skipped tools', async () => {
    const dir = servedDir();
    const before = snapshot(dir);
    const html = join(dir, '..', 'report.html');
    const r = await cli(benchArgs(dir, ['--exclude', 'list_allowed_directories', '--html', html]));
    expect(r.code, r.stderr).toBe(0);
    expect(snapshot(dir)).toEqual(before);

    const report = lastJson(r.stdout);
    expect(report.allow_writes).toBe(false);
    expect(report.excluded).toEqual(['list_allowed_directories']);
    expect(Object.fromEntries(report.skipped.map((s) => [s.tool, s.reason]))).toEqual(WRITERS);
    // The rest was really benchmarked: loaded and fuzzed.
    const called = [
      'read_file',
      'read_text_file',
      'read_media_file',
      'read_multiple_files',
      'list_directory',
      'list_directory_with_sizes',
      'directory_tree',
      'search_files',
      'get_file_info',
    ];
    expect(Object.keys(report.tools).sort()).toEqual([...called].sort());
    expect(Object.keys(report.fuzz.tools).sort()).toEqual([...called].sort());
    expect(report.fuzz.totals.cases).toBeGreaterThan(called.length * 10);

    // The terminal table, progress on stderr and the HTML page name each skipped tool and why.
    expect(r.stdout).toContain('skipped 4 tools that may write (not called; --allow-writes calls them):');
    for (const [tool, reason] of Object.entries(WRITERS)) expect(r.stdout).toMatch(new RegExp(`^ +${tool} +${reason.replace(/[()]/g, '\\$&')}$`, 'm'));
    expect(r.stderr).toMatch(/skipped 4 tools that may write \(--allow-writes calls them\): write_file \(destructiveHint: true\)/);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain('<h2>Skipped tools</h2>');
    for (const [tool, reason] of Object.entries(WRITERS)) expect(page).toContain(`<td>${tool}</td><td>${reason}</td>`);
  });

  it('with --allow-writes says first which tools it calls, and the directory changes', async () => {
    const dir = servedDir();
    const before = snapshot(dir);
    const r = await cli(benchArgs(dir, ['--allow-writes']));
    expect(r.code, r.stderr).toBe(0);
    const said = r.stderr.split('\n');
    const first = said.findIndex((l) => l.startsWith('--allow-writes: calling 14 tools with generated arguments: read_file, '));
    expect(first, r.stderr).toBeGreaterThanOrEqual(0);
    expect(said[first + 1]).toMatch(
      /^ +of which may change or delete data: write_file \(destructiveHint: true\), edit_file \(destructiveHint: true\), create_directory \(readOnlyHint: false, destructiveHint: false \(it only adds\)\), move_file \(destructiveHint: true\)$/,
    );
    // Said before the first call.
    expect(said.findIndex((l) => l.startsWith('load '))).toBeGreaterThan(first);

    const report = lastJson(r.stdout);
    expect(report).toMatchObject({ allow_writes: true, skipped: [] });
    expect(Object.fromEntries(report.may_write!.map((s) => [s.tool, s.reason]))).toEqual(WRITERS);
    expect(Object.keys(report.tools)).toEqual(expect.arrayContaining(Object.keys(WRITERS)));
    expect(r.stdout).toContain('--allow-writes: called although they may write: write_file (destructiveHint: true)');

    const after = snapshot(dir);
    expect(after).not.toEqual(before);
    expect(after.size).toBeGreaterThan(before.size); // new files and folders
  });
});
