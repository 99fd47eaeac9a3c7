#!/usr/bin/env node
// Installs what is missing before `npm start` and `npm test`: the npm packages (when
// node_modules is absent or older than package-lock.json), checks that the native
// module better-sqlite3 loads, and builds dist/ (which bin/mcp-gym.js runs) when it is missing or
// older than a source. Uses only Node's built-ins, since it runs before the install.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lock = join(root, 'package-lock.json');
const installed = join(root, 'node_modules', '.package-lock.json');
const quiet = process.argv.includes('--quiet');
const log = (m) => quiet || process.stderr.write(`[ensure] ${m}\n`);

function npm(args) {
  log(`npm ${args.join(' ')}`);
  execFileSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
}

const stale = !existsSync(installed) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(installed).mtimeMs + 1000);
// `npm install`, not `npm ci`: vite lists an optional dependency the registry does not have, which
// `npm ci` takes for a lock file out of sync. `npm install` still follows package-lock.json.
if (stale) npm(['install', '--no-audit', '--no-fund']);

// The compiled code in dist/: built only when missing or older than a source (a few seconds).
// A type error does not stop `npm test` here: its type-check step reports it.
const { build, staleReason } = await import('./build.mjs');
const buildReason = staleReason(root);
if (buildReason) {
  log(`building dist/: ${buildReason}`);
  try {
    build({ root, strict: false, log });
  } catch (err) {
    process.stderr.write(`building dist/ failed: ${err.message}\n`);
    process.exit(1);
  }
}

// The native SQLite binding must load on this Node; rebuild it once if it does not.
const require = createRequire(join(root, 'package.json'));
function sqliteLoads() {
  try {
    const Database = require('better-sqlite3');
    new Database(':memory:').close();
    return true;
  } catch (err) {
    log(`better-sqlite3 does not load: ${err.message.split('\n')[0]}`);
    return false;
  }
}
if (!sqliteLoads()) {
  npm(['rebuild', 'better-sqlite3']);
  if (!sqliteLoads()) {
    process.stderr.write('better-sqlite3 could not be built: it needs python3, make and g++ (apt-get install python3 make g++)\n');
    process.exit(1);
  }
}

// The learner: Debian's PyTorch (with OpenBLAS: without it torch runs 25 times slower), onnx,
// jsonschema (the learner validates requests against the contract), pytest and venv (the package
// test installs the learner into a virtual environment), for /usr/bin/python3; and Chromium, which the report test opens headless. Installed
// with apt-get when missing (CI runs as root).
const APT = ['python3-torch', 'libopenblas0-pthread', 'python3-onnx', 'python3-pytest', 'python3-jsonschema', 'python3-venv', 'chromium'];
const python = process.env.MCP_GYM_PYTHON ?? '/usr/bin/python3';
const pythonOk = () => spawnSync(python, ['-c', 'import torch, onnx, pytest, jsonschema'], { stdio: 'ignore' }).status === 0;
const missingDebs = () =>
  APT.filter((p) => spawnSync('dpkg-query', ['-W', '-f=${Status}', p], { encoding: 'utf8' }).stdout?.includes('install ok installed') !== true);
if (!process.env.MCP_GYM_PYTHON && (!pythonOk() || missingDebs().length)) {
  const missing = missingDebs();
  if (process.getuid?.() !== 0) {
    process.stderr.write(
      `The learner needs Debian packages that are missing: ${missing.join(' ')}.\nInstall them as root: apt-get install -y ${APT.join(' ')}\n`,
    );
    process.exit(1);
  }
  log(`apt-get install ${missing.join(' ')}`);
  execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'inherit', 'inherit'] });
  execFileSync('apt-get', ['install', '-y', '-qq', ...APT], {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (!pythonOk()) {
    process.stderr.write(`${python} still cannot import torch, onnx, pytest and jsonschema after installing ${APT.join(' ')}\n`);
    process.exit(1);
  }
}

// The learner's venv for Hugging Face models (scripts/learner-venv.mjs). MCP_GYM_HF_PYTHON names
// another Python that has them instead.
if (!process.env.MCP_GYM_HF_PYTHON) {
  const { ensureVenv } = await import('./learner-venv.mjs');
  try {
    ensureVenv({ root, log, basePython: python });
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}

// BFCL's venv (scripts/bfcl-venv.mjs): bfcl-eval without its declared dependencies, plus what its
// checkers, data and CLI import, every wheel pinned by hash in bfcl/requirements.lock. Created when
// missing or when the lock changed, and checked against bfcl-eval's RECORD on every run (cached: a
// few milliseconds). MCP_GYM_BFCL_PYTHON names another Python that has them instead (still checked).
{
  const { ensureBfclVenv } = await import('./bfcl-venv.mjs');
  try {
    ensureBfclVenv({ root, log, basePython: python });
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
