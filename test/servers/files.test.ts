import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport } from '@modelcontextprotocol/server';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EPISODE_META_KEY, serverFactory, type Backend } from '../../servers/common.ts';
import { filesServer } from '../../servers/files.ts';

interface Result {
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
  content: { type: string; text?: string }[];
}

let base: string;
let dataDir: string;
let outside: string;
let backend: Backend<unknown>;
let client: Client;

beforeEach(async () => {
  base = mkdtempSync(join(tmpdir(), 'mcp-gym-files-test-'));
  dataDir = join(base, 'data');
  outside = join(base, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'top secret\n');
  const built = serverFactory(filesServer, { dataDir });
  backend = built.backend as Backend<unknown>;
  const [a, b] = InMemoryTransport.createLinkedPair();
  await built.factory().connect(a);
  client = new Client({ name: 't', version: '1' });
  await client.connect(b);
});

afterEach(async () => {
  await client.close();
  await backend.close();
  rmSync(base, { recursive: true, force: true });
});

async function call(name: string, args: Record<string, unknown>, episode = 'e1'): Promise<Result> {
  return (await client.callTool({ name, arguments: args, _meta: { [EPISODE_META_KEY]: episode } })) as Result;
}

/** The structured result of a call that must succeed. */
async function ok(name: string, args: Record<string, unknown>, episode = 'e1'): Promise<Record<string, unknown>> {
  const r = await call(name, args, episode);
  expect(r.isError, r.content[0]?.text).toBeFalsy();
  return r.structuredContent ?? {};
}

/** The message of a call that must fail. */
async function fail(name: string, args: Record<string, unknown>, episode = 'e1'): Promise<string> {
  const r = await call(name, args, episode);
  expect(r.isError, JSON.stringify(r.structuredContent)).toBe(true);
  return r.content[0]?.text ?? '';
}

/** The sandbox directory of an episode, found by the marker file written into it. */
async function episodeDir(episode: string): Promise<string> {
  await ok('write_file', { path: 'marker.txt', content: episode }, episode);
  const dirs = readdirSync(dataDir).filter(
    (d) => existsSync(join(dataDir, d, 'marker.txt')) && readFileSync(join(dataDir, d, 'marker.txt'), 'utf8') === episode,
  );
  expect(dirs).toHaveLength(1);
  return join(dataDir, dirs[0] ?? '');
}

describe('files server', () => {
  it('lists its tools with read-only hints', async () => {
    const { tools } = await client.listTools();
    const hints = Object.fromEntries(tools.map((t) => [t.name, t.annotations?.readOnlyHint]));
    expect(hints).toEqual({ read_file: true, write_file: false, list_dir: true, move: false, delete: false, search: true });
    for (const t of tools) expect(t.outputSchema).toBeDefined();
  });

  it('writes, appends and reads files', async () => {
    expect(await ok('write_file', { path: 'notes/a.txt', content: 'hello\n' })).toEqual({ path: 'notes/a.txt', size: 6, created: true });
    expect(await ok('write_file', { path: './notes/a.txt', content: 'wörld\n', append: true })).toEqual({ path: 'notes/a.txt', size: 13, created: false });
    expect(await ok('read_file', { path: 'notes/a.txt' })).toEqual({ path: 'notes/a.txt', content: 'hello\nwörld\n', size: 13, truncated: false });
    expect(await ok('read_file', { path: 'notes/./a.txt', offset: 6, length: 3 })).toEqual({ path: 'notes/a.txt', content: 'wör', size: 13, truncated: true });
    expect(await ok('write_file', { path: 'notes/a.txt', content: 'new' })).toEqual({ path: 'notes/a.txt', size: 3, created: false });
    expect((await ok('read_file', { path: 'notes/a.txt' })).content).toBe('new');
    const r = await call('read_file', { path: 'notes/a.txt' });
    expect(JSON.parse(r.content[0]?.text ?? '')).toEqual(r.structuredContent);
  });

  it('caps what is read and written', async () => {
    const big = 'x'.repeat(150_000);
    await ok('write_file', { path: 'big.txt', content: big });
    const first = await ok('read_file', { path: 'big.txt' });
    expect((first.content as string).length).toBe(100_000);
    expect(first.truncated).toBe(true);
    const rest = await ok('read_file', { path: 'big.txt', offset: 100_000 });
    expect((rest.content as string).length).toBe(50_000);
    expect(rest.truncated).toBe(false);
    await ok('write_file', { path: 'full.txt', content: 'y'.repeat(999_999) });
    expect(await fail('write_file', { path: 'full.txt', content: 'yy', append: true })).toMatch(/'full\.txt' would be 1,000,001 bytes/);
    expect(await fail('write_file', { path: 'multi.txt', content: 'é'.repeat(600_000) })).toMatch(/at most 1,000,000/);
  });

  it('lists directories, sorted, flat or recursive', async () => {
    await ok('write_file', { path: 'b.txt', content: 'bb' });
    await ok('write_file', { path: 'a/z.txt', content: 'z' });
    await ok('write_file', { path: 'a/deep/y.txt', content: 'yyy' });
    expect(await ok('list_dir', {})).toEqual({
      path: '.',
      entries: [
        { path: 'a', type: 'dir', size: 0 },
        { path: 'b.txt', type: 'file', size: 2 },
      ],
      truncated: false,
    });
    expect((await ok('list_dir', { path: '.', recursive: true })).entries).toEqual([
      { path: 'a', type: 'dir', size: 0 },
      { path: 'a/deep', type: 'dir', size: 0 },
      { path: 'a/deep/y.txt', type: 'file', size: 3 },
      { path: 'a/z.txt', type: 'file', size: 1 },
      { path: 'b.txt', type: 'file', size: 2 },
    ]);
    expect(await ok('list_dir', { path: 'a/' })).toEqual({
      path: 'a',
      entries: [
        { path: 'a/deep', type: 'dir', size: 0 },
        { path: 'a/z.txt', type: 'file', size: 1 },
      ],
      truncated: false,
    });
  });

  it('truncates long listings', async () => {
    const dir = await episodeDir('e1');
    mkdirSync(join(dir, 'many'));
    for (let i = 0; i < 1005; i++) writeFileSync(join(dir, 'many', `f${String(i).padStart(4, '0')}`), '');
    const r = await ok('list_dir', { path: 'many' });
    expect(r.truncated).toBe(true);
    expect((r.entries as unknown[]).length).toBe(1000);
    expect((r.entries as { path: string }[])[0]?.path).toBe('many/f0000');
  });

  it('moves files and directories', async () => {
    await ok('write_file', { path: 'a.txt', content: 'A' });
    await ok('write_file', { path: 'b.txt', content: 'B' });
    expect(await ok('move', { from: 'a.txt', to: 'sub/c.txt' })).toEqual({ from: 'a.txt', to: 'sub/c.txt' });
    expect(await fail('read_file', { path: 'a.txt' })).toBe("No such file: 'a.txt'");
    expect((await ok('read_file', { path: 'sub/c.txt' })).content).toBe('A');
    expect(await fail('move', { from: 'b.txt', to: 'sub/c.txt' })).toMatch(/'sub\/c\.txt' already exists \(pass overwrite: true/);
    expect((await ok('read_file', { path: 'sub/c.txt' })).content).toBe('A');
    await ok('move', { from: 'b.txt', to: 'sub/c.txt', overwrite: true });
    expect((await ok('read_file', { path: 'sub/c.txt' })).content).toBe('B');
    await ok('move', { from: 'sub', to: 'moved' });
    expect((await ok('list_dir', { recursive: true })).entries).toEqual([
      { path: 'moved', type: 'dir', size: 0 },
      { path: 'moved/c.txt', type: 'file', size: 1 },
    ]);
    expect(await fail('move', { from: 'moved', to: 'moved/inner' })).toMatch(/into itself/);
    expect(await fail('move', { from: 'nope', to: 'x' })).toBe("No such file or directory: 'nope'");
    expect(await fail('move', { from: '.', to: 'x' })).toMatch(/sandbox root/);
  });

  it('deletes files and directories', async () => {
    await ok('write_file', { path: 'd/e/f.txt', content: 'f' });
    await ok('write_file', { path: 'g.txt', content: 'g' });
    expect(await ok('delete', { path: 'g.txt' })).toEqual({ path: 'g.txt', deleted: true });
    expect(await ok('delete', { path: 'g.txt' })).toEqual({ path: 'g.txt', deleted: false });
    expect(await fail('delete', { path: 'd' })).toMatch(/Directory 'd' is not empty \(pass recursive: true/);
    await ok('delete', { path: 'd/e/f.txt' });
    expect(await ok('delete', { path: 'd/e' })).toEqual({ path: 'd/e', deleted: true });
    await ok('write_file', { path: 'd/x/y.txt', content: 'y' });
    expect(await ok('delete', { path: 'd', recursive: true })).toEqual({ path: 'd', deleted: true });
    expect((await ok('list_dir', {})).entries).toEqual([]);
    for (const root of ['', '.', './', 'a/..']) expect(await fail('delete', { path: root, recursive: true })).toBe('Cannot delete the sandbox root');
  });

  it('searches contents and names', async () => {
    await ok('write_file', { path: 'src/main.ts', content: 'const todo = 1;\nlet x = 2;\n// TODO: more\n' });
    await ok('write_file', { path: 'src/todo.md', content: 'nothing here\n' });
    await ok('write_file', { path: 'README', content: 'todo list\n' });
    expect(await ok('search', { query: 'todo' })).toEqual({
      matches: [
        { path: 'README', line: 1, text: 'todo list' },
        { path: 'src/main.ts', line: 1, text: 'const todo = 1;' },
        { path: 'src/todo.md', line: 0, text: 'todo.md' },
      ],
      truncated: false,
    });
    expect(await ok('search', { query: '^(let|//)', regex: true, path: 'src' })).toEqual({
      matches: [
        { path: 'src/main.ts', line: 2, text: 'let x = 2;' },
        { path: 'src/main.ts', line: 3, text: '// TODO: more' },
      ],
      truncated: false,
    });
    expect((await ok('search', { query: 'TODO', path: 'src/main.ts' })).matches).toEqual([{ path: 'src/main.ts', line: 3, text: '// TODO: more' }]);
    expect(await fail('search', { query: '(unclosed', regex: true })).toMatch(/^Invalid regular expression "\(unclosed"/);
    expect(await fail('search', { query: 'x', path: 'missing' })).toBe("No such file or directory: 'missing'");
  });

  it('ends a search whose regular expression backtracks catastrophically, and goes on', async () => {
    await ok('write_file', { path: 'evil.txt', content: `${'a'.repeat(30_000)}!\n` });
    const t0 = Date.now();
    expect(await fail('search', { query: '(a+)+$', regex: true })).toMatch(
      /^search: the search took longer than 5,000 ms \(the pattern may backtrack catastrophically/,
    );
    expect(Date.now() - t0).toBeLessThan(9500);
    // File names are matched in the worker too.
    await ok('write_file', { path: `${'a'.repeat(60)}!`, content: '' });
    expect(await fail('search', { query: '^(a|aa)+$', regex: true, path: `${'a'.repeat(60)}!` })).toMatch(/took longer than 5,000 ms/);
    const next = await ok('search', { query: 'a!$', regex: true, path: 'evil.txt' });
    expect(next.matches).toEqual([{ path: 'evil.txt', line: 1, text: expect.stringMatching(/^….*a!$/) }]);
  });

  it('stops the search when the call is cancelled', async () => {
    await ok('write_file', { path: 'evil.txt', content: `${'a'.repeat(30_000)}!\n` });
    const call = client.callTool({ name: 'search', arguments: { query: '(a+)+$', regex: true }, _meta: { [EPISODE_META_KEY]: 'e1' } }, { timeout: 300 });
    await expect(call).rejects.toThrow(/timed out/i);
    await new Promise((r) => setTimeout(r, 200));
    const c0 = process.cpuUsage();
    await new Promise((r) => setTimeout(r, 1000));
    const c = process.cpuUsage(c0);
    expect((c.user + c.system) / 1e6).toBeLessThan(0.3); // the worker is gone, not spinning to its deadline
  });

  it('caps search matches', async () => {
    await ok('write_file', { path: 'many.txt', content: 'hit\n'.repeat(300) });
    const r = await ok('search', { query: 'hit' });
    expect((r.matches as unknown[]).length).toBe(200);
    expect(r.truncated).toBe(true);
  });

  it('reports missing files, directories and files in the wrong place', async () => {
    await ok('write_file', { path: 'f.txt', content: 'f' });
    await ok('write_file', { path: 'dir/g.txt', content: 'g' });
    expect(await fail('read_file', { path: 'x' })).toBe("No such file: 'x'");
    expect(await fail('read_file', { path: 'dir' })).toMatch(/^'dir' is a directory/);
    expect(await fail('read_file', { path: '.' })).toMatch(/^'\.' is a directory/);
    expect(await fail('write_file', { path: 'dir', content: '' })).toMatch(/^'dir' is a directory/);
    expect(await fail('write_file', { path: '', content: '' })).toMatch(/sandbox root/);
    expect(await fail('write_file', { path: 'f.txt/inner.txt', content: '' })).toMatch(/^Not a directory/);
    expect(await fail('read_file', { path: 'f.txt/inner.txt' })).toBe("No such file: 'f.txt/inner.txt'");
    expect(await fail('list_dir', { path: 'f.txt' })).toMatch(/^Not a directory: 'f\.txt'/);
    expect(await fail('list_dir', { path: 'nope' })).toBe("No such directory: 'nope'");
    expect(await fail('move', { from: 'f.txt', to: 'dir' })).toMatch(/'dir' is an existing directory/);
  });

  it('gives each episode its own sandbox', async () => {
    await ok('write_file', { path: 'a.txt', content: 'one' }, 'e1');
    await ok('write_file', { path: 'a.txt', content: 'two' }, 'e2');
    await ok('write_file', { path: 'only2.txt', content: '' }, 'e2');
    expect((await ok('read_file', { path: 'a.txt' }, 'e1')).content).toBe('one');
    expect((await ok('read_file', { path: 'a.txt' }, 'e2')).content).toBe('two');
    expect((await ok('list_dir', {}, 'e1')).entries).toEqual([{ path: 'a.txt', type: 'file', size: 3 }]);
    expect(await fail('read_file', { path: 'only2.txt' }, 'e1')).toBe("No such file: 'only2.txt'");
    // A call without the key uses the default episode.
    const r = (await client.callTool({ name: 'list_dir', arguments: {} })) as Result;
    expect(r.structuredContent?.entries).toEqual([]);
  });

  it('names episode directories by a hash, never the raw id', async () => {
    const dir = await episodeDir('../../evil/id');
    expect(dir.startsWith(dataDir)).toBe(true);
    for (const name of readdirSync(dataDir)) expect(name).toMatch(/^ep-[0-9a-f]{32}$/);
    expect(existsSync(join(base, 'evil'))).toBe(false);
  });

  it('deletes an episode sandbox on release and starts it afresh', async () => {
    const dir1 = await episodeDir('e1');
    const dir2 = await episodeDir('e2');
    backend.release('e1');
    expect(existsSync(dir1)).toBe(false);
    expect(existsSync(dir2)).toBe(true);
    expect((await ok('list_dir', {}, 'e1')).entries).toEqual([]);
    expect((await ok('list_dir', {}, 'e2')).entries).toEqual([{ path: 'marker.txt', type: 'file', size: 2 }]);
  });

  it('removes its own data dir on close but keeps a given one', async () => {
    const own = serverFactory(filesServer).backend;
    const state = own.episode('x') as { root: string };
    expect(existsSync(state.root)).toBe(true);
    await own.close();
    expect(existsSync(state.root)).toBe(false);
    expect(existsSync(join(state.root, '..'))).toBe(false);

    await episodeDir('e1');
    await backend.close();
    expect(existsSync(dataDir)).toBe(true);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  describe('refuses paths outside the sandbox', () => {
    const escapes: [string, RegExp][] = [
      ['..', /^Path '\.\.' is outside the sandbox/],
      ['../x', /^Path '\.\.\/x' is outside the sandbox/],
      ['a/../../x', /^Path 'a\/\.\.\/\.\.\/x' is outside the sandbox/],
      ['..\\x', /is outside the sandbox/],
      ['/etc/passwd', /^Path '\/etc\/passwd' is absolute/],
      ['C:\\x', /^Path 'C:\\x' is absolute/],
      ['\\\\server\\share', /is absolute/],
      ['a\0b', /^Path 'a\\0b' contains a NUL byte/],
    ];

    it.each(escapes)('%j', async (path, message) => {
      expect(await fail('read_file', { path })).toMatch(message);
      expect(await fail('write_file', { path, content: 'x' })).toMatch(message);
      expect(await fail('list_dir', { path })).toMatch(message);
      expect(await fail('search', { query: 'x', path })).toMatch(message);
      expect(await fail('delete', { path, recursive: true })).toMatch(message);
      await ok('write_file', { path: 'in.txt', content: 'in' });
      expect(await fail('move', { from: 'in.txt', to: path })).toMatch(message);
      expect(await fail('move', { from: path, to: 'in2.txt' })).toMatch(message);
    });

    it('through a symbolic link to a directory outside', async () => {
      const dir = await episodeDir('e1');
      symlinkSync(outside, join(dir, 'link'));
      symlinkSync(join(outside, 'secret.txt'), join(dir, 'file-link'));
      const message = /outside the sandbox \(through a symbolic link\)/;
      for (const path of ['link', 'link/secret.txt', 'link/new.txt', 'link/sub/new.txt', 'file-link', './link/../link/secret.txt']) {
        expect(await fail('read_file', { path })).toMatch(message);
        expect(await fail('write_file', { path, content: 'pwned' })).toMatch(message);
        expect(await fail('write_file', { path, content: 'pwned', append: true })).toMatch(message);
        expect(await fail('list_dir', { path, recursive: true })).toMatch(message);
        expect(await fail('search', { query: 'secret', path })).toMatch(message);
        expect(await fail('delete', { path, recursive: true })).toMatch(message);
        expect(await fail('move', { from: 'marker.txt', to: path, overwrite: true })).toMatch(message);
        expect(await fail('move', { from: path, to: 'stolen' })).toMatch(message);
      }
      // Walking the sandbox neither lists nor searches what the links point at.
      expect((await ok('list_dir', { recursive: true })).entries).toEqual([{ path: 'marker.txt', type: 'file', size: 2 }]);
      expect(await ok('search', { query: 'secret' })).toEqual({ matches: [], truncated: false });
      expect(readdirSync(outside)).toEqual(['secret.txt']);
      expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('top secret\n');
    });

    it('through a broken symbolic link', async () => {
      const dir = await episodeDir('e1');
      symlinkSync(join(outside, 'not-yet.txt'), join(dir, 'dangling'));
      expect(await fail('write_file', { path: 'dangling', content: 'pwned' })).toMatch(/broken symbolic link/);
      expect(existsSync(join(outside, 'not-yet.txt'))).toBe(false);
    });

    it('but follows symbolic links that stay inside', async () => {
      const dir = await episodeDir('e1');
      await ok('write_file', { path: 'real/f.txt', content: 'inside' });
      symlinkSync(join(dir, 'real'), join(dir, 'alias'));
      expect((await ok('read_file', { path: 'alias/f.txt' })).content).toBe('inside');
      await ok('write_file', { path: 'alias/g.txt', content: 'via alias' });
      expect((await ok('read_file', { path: 'real/g.txt' })).content).toBe('via alias');
      const entries = (await ok('list_dir', { recursive: true })).entries as { path: string }[];
      expect(entries.map((e) => e.path)).toEqual(['alias', 'marker.txt', 'real', 'real/f.txt', 'real/g.txt']);
    });
  });
});
