/**
 * One temporary directory for the whole test run: TMPDIR points into it before the test workers
 * start (they, the CLI processes, tool servers and the Python learner they start inherit it), and
 * it is removed when the run ends. Tests make their run directories, models and fixtures with
 * mkdtemp(tmpdir()) and several hundred MB of them would otherwise stay behind after every run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export default function setup(): () => void {
  const previous = process.env.TMPDIR;
  const dir = mkdtempSync(join(tmpdir(), 'mcp-gym-test-'));
  process.env.TMPDIR = dir;
  return () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    if (!process.env.MCP_GYM_KEEP_TEST_TMP) rmSync(dir, { recursive: true, force: true });
  };
}
