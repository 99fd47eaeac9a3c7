#!/usr/bin/env node
// `npm test`: the formatter's check, type-check, lint, then every test suite: vitest (TypeScript) and pytest (the
// learner). Each suite runs even when an earlier one failed; the exit code is non-zero if any
// step failed. Reports go to .tmp/ (vitest.json, pytest.xml) for .ci/run to count.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
mkdirSync(join(root, '.tmp'), { recursive: true });
rmSync(join(root, '.tmp', 'vitest.json'), { force: true });
rmSync(join(root, '.tmp', 'pytest.xml'), { force: true });
rmSync(join(root, '.tmp', 'pytest-hf.xml'), { force: true });
const bin = (name) => join(root, 'node_modules', '.bin', name);
const python = process.env.MCP_GYM_PYTHON ?? '/usr/bin/python3';
// The Hugging Face tests (pytest marker `hf`) run with the learner's venv (scripts/learner-venv.mjs).
const hfPython = process.env.MCP_GYM_HF_PYTHON ?? join(root, '.venv', 'bin', 'python');

const steps = [
  // tsconfig.json's include covers src, servers, lib, test, bench, bin and examples (whose
  // `import 'mcp-gym'` resolves to dist/, which scripts/ensure.mjs built before this script).
  // The formatter (biome.json: one config; `npx biome format --write .` applies it).
  ['format', bin('biome'), ['format', '.']],
  ['type-check', bin('tsc'), ['--noEmit', '-p', '.']],
  ['lint', bin('eslint'), ['.']],
  ['vitest', bin('vitest'), ['run', '--reporter=default', '--reporter=json', '--outputFile.json=.tmp/vitest.json']],
  ['pytest', python, ['-m', 'pytest', 'learner/tests', '-q', '-p', 'no:cacheprovider', '-m', 'not hf', '--junitxml=.tmp/pytest.xml']],
  ['pytest (hf)', hfPython, ['-m', 'pytest', 'learner/tests', '-q', '-p', 'no:cacheprovider', '-m', 'hf', '--junitxml=.tmp/pytest-hf.xml']],
].filter(([name]) => !name.startsWith('pytest') || existsSync(join(root, 'learner', 'tests')));
const failed = [];
for (const [name, cmd, args] of steps) {
  process.stdout.write(`\n== ${name}: ${[cmd.replace(root + '/', ''), ...args].join(' ')}\n`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, PYTHONPATH: join(root, 'learner') } });
  if (r.status !== 0) failed.push(`${name} (exit ${r.status ?? r.signal})`);
}
if (failed.length) {
  process.stdout.write(`\nfailed: ${failed.join(', ')}\n`);
  process.exit(1);
}
