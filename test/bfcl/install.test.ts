/**
 * BFCL's Python environment (.venv-bfcl, scripts/bfcl-venv.mjs): the lock pins every package with
 * a sha256, the installed bfcl-eval passes the tamper check and runs its own CLI, and the tamper
 * check names a changed, a missing and an added file. The tampering is done on a copy of bfcl_eval
 * and its dist-info in a temporary directory, never on the venv.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module without types (scripts/ is JavaScript)
import { bfclEnv, bfclLockFile, bfclPython, verifyBfclInstall } from '../../scripts/bfcl-venv.mjs';
import { ROOT } from '../helpers.ts';

const python: string = bfclPython(ROOT);
const DATA = 'bfcl_eval/data/BFCL_v4_simple_python.json';
const ANSWER = 'bfcl_eval/data/possible_answer/BFCL_v4_simple_python.json';

describe('bfcl/requirements.lock', () => {
  const text = readFileSync(bfclLockFile(ROOT), 'utf8');
  // One entry per package: "name==version \", then "--hash=sha256:..." (and a comment naming the wheel).
  const entries = text.split(/\n(?=[A-Za-z0-9])/).filter((e) => !e.startsWith('#'));

  it('pins every package with == and a sha256', () => {
    expect(entries.length).toBeGreaterThan(50);
    const bad = entries.filter((e) => !/^[a-z0-9][a-z0-9.-]*==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}\n\s+# \S+\.whl\n?$/.test(e));
    expect(bad).toEqual([]);
  });

  it('has bfcl-eval 2026.3.23 and not its heavy declared dependencies', () => {
    const names = entries.map((e) => e.split('==')[0]);
    expect(entries.find((e) => e.startsWith('bfcl-eval=='))).toMatch(/^bfcl-eval==2026\.3\.23 /);
    for (const n of ['numpy', 'mcp', 'tree-sitter', 'pandas', 'pydantic']) expect(names).toContain(n);
    for (const n of ['torch', 'sentence-transformers', 'faiss-cpu', 'transformers']) expect(names).not.toContain(n);
    expect(new Set(names).size).toBe(names.length);
  });
});

describe('the installed bfcl-eval', () => {
  let tmp: string;
  let site: string;
  // bfcl's own CLI takes about 6 s to import its model handlers; it runs while the other tests do.
  let cli: Promise<{ stdout: string; stderr: string }>;

  beforeAll(() => {
    if (!existsSync(python)) throw new Error(`${python} is missing: run node scripts/bfcl-venv.mjs (npm test does it first)`);
    cli = promisify(execFile)(python, ['-m', 'bfcl_eval', 'evaluate', '--help'], { env: { ...process.env, ...bfclEnv(ROOT) }, encoding: 'utf8' });
    cli.catch(() => {});
    tmp = mkdtempSync(join(tmpdir(), 'bfcl-install-'));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('matches its RECORD (full check, then cached)', () => {
    const full = verifyBfclInstall(python, { stamp: false });
    expect(full.cached).toBe(false);
    expect(full.files).toBeGreaterThan(150);
    expect(basename(full.distInfo)).toBe('bfcl_eval-2026.3.23.dist-info');
    site = full.sitePackages;
    const stamp = join(tmp, 'stamp.json');
    expect(verifyBfclInstall(python, { stamp }).cached).toBe(false);
    expect(verifyBfclInstall(python, { stamp }).cached).toBe(true);
  });

  it("runs bfcl's CLI: python -m bfcl_eval evaluate --help (imports both checkers)", async () => {
    const { stdout } = await cli;
    expect(stdout).toContain('--test-category');
  });

  describe('on a copy', () => {
    let copy: string;
    const error = (opts: object = {}) => {
      try {
        verifyBfclInstall(python, { sitePackages: copy, ...opts });
      } catch (err) {
        return (err as Error).message;
      }
      return 'no error';
    };

    beforeAll(() => {
      copy = join(tmp, 'site-packages');
      const distInfo = 'bfcl_eval-2026.3.23.dist-info';
      cpSync(join(site, 'bfcl_eval'), join(copy, 'bfcl_eval'), { recursive: true, filter: (src) => basename(src) !== '__pycache__' });
      cpSync(join(site, distInfo), join(copy, distInfo), { recursive: true });
    });

    it('passes untouched', () => {
      expect(verifyBfclInstall(python, { sitePackages: copy }).files).toBeGreaterThan(150);
    });

    it('names a data file with one byte changed', () => {
      const file = join(copy, DATA);
      const original = readFileSync(file);
      const flipped = Buffer.from(original);
      flipped.writeUInt8(flipped.readUInt8(100) ^ 1, 100);
      writeFileSync(file, flipped);
      expect(error()).toMatch(new RegExp(`^bfcl-eval is tampered with or incomplete: ${DATA} does not match its RECORD hash`));
      writeFileSync(file, original);
      expect(error()).toBe('no error');
    });

    it('names a missing data file', () => {
      rmSync(join(copy, ANSWER));
      expect(error()).toMatch(new RegExp(`^bfcl-eval is tampered with or incomplete: ${ANSWER} is missing`));
      cpSync(join(site, ANSWER), join(copy, ANSWER));
    });

    it('names a file the wheel does not have', () => {
      writeFileSync(join(copy, 'bfcl_eval/data/BFCL_v4_extra.json'), '{}\n');
      expect(error()).toMatch(/tampered with or incomplete: bfcl_eval\/data\/BFCL_v4_extra\.json is not in the wheel's RECORD/);
      rmSync(join(copy, 'bfcl_eval/data/BFCL_v4_extra.json'));
    });

    it('does not trust a stale stamp: a file changed after a cached check is found', () => {
      const stamp = join(tmp, 'copy-stamp.json');
      expect(verifyBfclInstall(python, { sitePackages: copy, stamp }).cached).toBe(false);
      expect(verifyBfclInstall(python, { sitePackages: copy, stamp }).cached).toBe(true);
      appendFileSync(join(copy, DATA), ' ');
      expect(error({ stamp })).toMatch(new RegExp(`${DATA} does not match its RECORD hash`));
    });
  });
});
