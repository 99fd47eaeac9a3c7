/**
 * Where mcp-gym's own files are, wherever its code runs from: the TypeScript sources (`src/`,
 * under tsx or vitest), the build (`dist/src/`), or an installed package
 * (`node_modules/mcp-gym/dist/src/`). Found by walking up from this module to the directory whose
 * package.json is mcp-gym's, so no path here depends on the working directory or on how deep the
 * compiled file sits.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE_NAME = 'mcp-gym';

function findPackageRoot(from: string): string {
  for (let dir = from; ; ) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      try {
        if ((JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown }).name === PACKAGE_NAME) return dir;
      } catch {
        // not a readable package.json: keep walking up
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`mcp-gym: no package.json named "${PACKAGE_NAME}" above ${from}`);
    dir = parent;
  }
}

/** The directory holding mcp-gym's package.json. */
export const PACKAGE_ROOT = findPackageRoot(dirname(fileURLToPath(import.meta.url)));
/** The Python learner package's parent directory (the learner's cwd and PYTHONPATH). */
export const LEARNER_DIR = join(PACKAGE_ROOT, 'learner');
/** The `mcp-gym` command's script (run it with `process.execPath`). */
export const CLI_PATH = join(PACKAGE_ROOT, 'bin', 'mcp-gym.js');
/** The small policy model shipped with the package. */
export const BUNDLED_MODEL_DIR = join(PACKAGE_ROOT, 'models', 'calc-tiny');
