/**
 * The layers point one way. `lib/` is the bottom (Node built-ins only); `servers/` builds on it;
 * in `src/`, tools -> env -> agents -> trainers (and bench) -> cli, each importing only layers
 * below it. `src/` reaches `lib/` only through lib/index.ts and `servers/` only through
 * servers/index.ts (the servers' public face, never a server's internals).
 *
 * Every .ts/.js file under src/, servers/ and lib/ (tests and node_modules aside) is read, its
 * relative import specifiers are extracted (static imports, `import type`, `export ... from`,
 * dynamic `import('...')`, `typeof import('...')`) with TypeScript's own pre-processor, so that
 * comments and strings never count, and each is checked against the table below. The folders'
 * import graph must also have no cycle.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SCANNED = ['lib', 'servers', 'src'];

/**
 * The layers: a folder (every file under it) or a single file. `src/paths.ts` is a leaf (where the
 * package's files are; Node built-ins only) that any layer of src/ may use.
 */
const LAYERS = [
  'lib',
  'servers',
  'src/tools',
  'src/env',
  'src/agents',
  'src/trainers',
  'src/bench',
  'src/view',
  'src/cli',
  'src/index.ts',
  'src/paths.ts',
] as const;
type Layer = (typeof LAYERS)[number];

/** What a file may import: layers (any file of them), or exact public files (`servers/index.ts`). */
interface Allowed {
  layers: Layer[];
  files?: string[];
}

const SRC_LAYERS: Layer[] = ['src/tools', 'src/env', 'src/agents', 'src/trainers', 'src/bench', 'src/view', 'src/cli', 'src/paths.ts'];

const RULES: Record<Layer, Allowed> = {
  lib: { layers: ['lib'] },
  servers: { layers: ['servers', 'lib'] },
  'src/tools': { layers: ['src/tools', 'lib', 'src/paths.ts'] },
  'src/env': { layers: ['src/env', 'src/tools', 'lib', 'src/paths.ts'], files: ['servers/index.ts'] },
  'src/agents': { layers: ['src/agents', 'src/env', 'src/tools', 'lib', 'src/paths.ts'] },
  'src/trainers': { layers: ['src/trainers', 'src/agents', 'src/env', 'src/tools', 'lib', 'src/paths.ts'], files: ['servers/index.ts'] },
  'src/bench': { layers: ['src/bench', 'src/env', 'src/agents', 'src/tools', 'lib', 'src/paths.ts'] },
  // The viewer reads what trainers and bench write; its page (src/view/assets/) is browser modules importing only one another.
  'src/view': { layers: ['src/view', 'src/trainers', 'src/bench', 'src/env', 'src/agents', 'src/tools', 'lib', 'src/paths.ts'] },
  'src/cli': { layers: [...SRC_LAYERS, 'lib'], files: ['servers/index.ts'] },
  'src/index.ts': { layers: [...SRC_LAYERS, 'lib'], files: ['servers/index.ts'] },
  'src/paths.ts': { layers: ['lib'] },
};

/** The only file of lib/ that src/ may import. */
const LIB_FACE = 'lib/index.ts';

/** The layer of a root-relative posix path, or undefined when it is in none. */
function layerOf(path: string): Layer | undefined {
  if (path === 'src/index.ts' || path === 'src/paths.ts') return path;
  for (const layer of LAYERS) if (path.startsWith(`${layer}/`)) return layer;
  return undefined;
}

/** Root-relative posix paths of the scanned source files, tests and node_modules left out. */
function sourceFiles(): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const entry of readdirSync(join(ROOT, rel), { withFileTypes: true })) {
      const path = posix.join(rel, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== 'test' && entry.name !== '__tests__') walk(path);
      } else if (/\.(ts|js|mts|mjs|cts|cjs)$/.test(entry.name) && !/\.(test|spec)\.[cm]?[jt]s$/.test(entry.name) && !entry.name.endsWith('.d.ts')) {
        out.push(path);
      }
    }
  };
  for (const dir of SCANNED) walk(dir);
  return out.sort();
}

/** The relative specifiers a file imports or re-exports (static, type-only and dynamic). */
function relativeSpecifiers(text: string): string[] {
  return ts
    .preProcessFile(text, true, true)
    .importedFiles.map((f) => f.fileName)
    .filter((s) => s.startsWith('./') || s.startsWith('../'));
}

interface Edge {
  from: string;
  specifier: string;
  /** The imported file, root-relative (posix). */
  to: string;
}

function edgesOf(files: Record<string, string>): Edge[] {
  return Object.entries(files).flatMap(([from, text]) =>
    relativeSpecifiers(text).map((specifier) => ({ from, specifier, to: posix.normalize(posix.join(posix.dirname(from), specifier)) })),
  );
}

/** Files in no layer, and every import that breaks the table, as "file: import 'specifier' (-> target): why". */
function violations(files: Record<string, string>): string[] {
  const problems = Object.keys(files)
    .filter((path) => !layerOf(path))
    .map((path) => `${path}: this file is in no layer; add it to LAYERS and RULES in test/layers.test.ts`);
  for (const e of edgesOf(files)) {
    const what = `${e.from}: import '${e.specifier}' (-> ${e.to})`;
    const source = layerOf(e.from);
    const target = layerOf(e.to);
    if (!source) continue;
    if (!target) {
      problems.push(`${what}: the target is outside ${SCANNED.join('/, ')}/`);
      continue;
    }
    const rule = RULES[source];
    if (target === source) continue;
    const fromSrc = source.startsWith('src/');
    if (target === 'servers') {
      if (!(rule.files ?? []).includes(e.to)) {
        problems.push(
          fromSrc && rule.files?.includes('servers/index.ts')
            ? `${what}: src/ may import servers/ only through servers/index.ts, never a server's internals`
            : `${what}: ${source} may not import servers/`,
        );
      }
      continue;
    }
    if (!rule.layers.includes(target)) {
      problems.push(`${what}: ${source} may import only ${[...rule.layers.filter((l) => l !== source), ...(rule.files ?? [])].join(', ')}`);
      continue;
    }
    if (fromSrc && target === 'lib' && e.to !== LIB_FACE) problems.push(`${what}: src/ imports lib/ only through ${LIB_FACE}`);
  }
  return problems;
}

/** The cycles of the layer graph (self-imports aside), each as "a -> b -> a" with an example import per step. */
function layerCycles(edges: readonly Edge[]): string[] {
  const graph = new Map<Layer, Map<Layer, Edge>>();
  for (const e of edges) {
    const a = layerOf(e.from);
    const b = layerOf(e.to);
    if (!a || !b || a === b) continue;
    const out = graph.get(a) ?? new Map<Layer, Edge>();
    if (!out.has(b)) out.set(b, e);
    graph.set(a, out);
  }
  const cycles: string[] = [];
  const seen = new Set<string>();
  const state = new Map<Layer, 'open' | 'done'>();
  const stack: Layer[] = [];
  const visit = (node: Layer) => {
    state.set(node, 'open');
    stack.push(node);
    for (const [next] of graph.get(node) ?? []) {
      if (state.get(next) === 'open') {
        const cycle = [...stack.slice(stack.indexOf(next)), next];
        const key = [...cycle.slice(0, -1)].sort().join(',');
        if (!seen.has(key)) {
          seen.add(key);
          const steps = cycle.slice(0, -1).map((l, i) => {
            const e = graph.get(l)!.get(cycle[i + 1]!)!;
            return `${e.from} imports '${e.specifier}'`;
          });
          cycles.push(`${cycle.join(' -> ')} (${steps.join('; ')})`);
        }
      } else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of LAYERS) if (!state.has(node)) visit(node);
  return cycles;
}

/** The import circles between files (type-only and dynamic imports count), each as "a -> b -> ... -> a". */
function fileCycles(edges: readonly Edge[]): string[] {
  const graph = new Map<string, string[]>();
  for (const e of edges) if (e.from !== e.to) graph.set(e.from, [...(graph.get(e.from) ?? []), e.to]);
  // Tarjan's strongly connected components: a component of two or more files is a circle.
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length < 2) return;
    // One circle through the component, for the message: from its first file, along edges inside it.
    const inside = new Set(component);
    const start = [...component].sort()[0]!;
    const path = [start];
    const seen = new Set([start]);
    for (let at = start; ; ) {
      const to = (graph.get(at) ?? []).find((x) => inside.has(x) && (x === start || !seen.has(x)));
      if (!to || to === start) break;
      path.push(to);
      seen.add(to);
      at = to;
    }
    out.push(
      `${[...path, start].join(' -> ')}${
        component.length > path.length
          ? ` (and ${component.length - path.length} more files in the same circle: ${component
              .filter((f) => !seen.has(f))
              .sort()
              .join(', ')})`
          : ''
      }`,
    );
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out.sort();
}

/**
 * Imports that reach past a folder's index.ts: a file may import the files of its own folder and
 * of the folders above it directly; any other folder that has an index.ts is reached through it.
 */
function indexBypasses(files: Record<string, string>, edges: readonly Edge[]): string[] {
  const withIndex = new Set(
    Object.keys(files)
      .filter((f) => posix.basename(f) === 'index.ts')
      .map((f) => posix.dirname(f)),
  );
  return edges
    .filter((e) => {
      const from = posix.dirname(e.from);
      const to = posix.dirname(e.to);
      if (to === from || from.startsWith(`${to}/`) || !withIndex.has(to)) return false;
      return posix.basename(e.to) !== 'index.ts';
    })
    .map((e) => `${e.from}: import '${e.specifier}' bypasses ${posix.dirname(e.to)}/index.ts`);
}

describe('layers', () => {
  const files = Object.fromEntries(sourceFiles().map((path) => [path, readFileSync(join(ROOT, path), 'utf8')]));
  const edges = edgesOf(files);

  it('reads the source tree', () => {
    expect(Object.keys(files)).toContain('lib/index.ts');
    expect(Object.keys(files)).toContain('servers/index.ts');
    expect(Object.keys(files)).toContain('src/env/suites/common.ts');
    expect(edges.length).toBeGreaterThan(50);
  });

  it('every file is in a layer, and imports only what its layer may', () => {
    expect(violations(files)).toEqual([]);
  });

  it('the layers import one another without cycles', () => {
    expect(layerCycles(edges)).toEqual([]);
  });

  it('no two files import each other, directly or round a circle', () => {
    expect(fileCycles(edges)).toEqual([]);
  });

  it('imports into another folder go through its index.ts', () => {
    expect(indexBypasses(files, edges)).toEqual([]);
  });

  it('lib/ uses nothing but itself and Node built-ins', () => {
    const outside = Object.entries(files)
      .filter(([path]) => path.startsWith('lib/'))
      .flatMap(([path, text]) =>
        ts
          .preProcessFile(text, true, true)
          .importedFiles.map((f) => f.fileName)
          .filter((s) => !s.startsWith('./') && !s.startsWith('node:'))
          .map((s) => `${path}: import '${s}'`),
      );
    expect(outside).toEqual([]);
  });

  // The checker itself: the imports this test was written against are all reported.
  it('reports the old violations, cycles and bypasses (checked on sample files)', () => {
    const sample: Record<string, string> = {
      'src/tools/schema-sample.ts': `/** import { x } from '../../servers/in-a-comment.ts' */\nimport { mulberry32 } from '../../servers/random.ts';`,
      'src/env/suites/calculator.ts': `import { evaluateExpression } from '../../../servers/calculator.ts';`,
      'src/env/suites/search.ts': `import { CORPUS } from '../../../servers/corpus.ts';\nexport { corpusIndex } from '../../../servers/search.ts';`,
      'src/env/suites/mixed.ts': `import type { Doc } from '../../../servers/corpus.ts';\nimport { x } from '../../../lib/random.ts';`,
      'src/env/suites/ok.ts': `import { CORPUS } from '../../../servers/index.ts';\nimport { fnv1a } from '../../../lib/index.ts';\nconst s = "import { y } from '../../agents/index.ts'";`,
      'src/agents/onnx.ts': `const m = await import('../trainers/index.ts');`,
      'src/trainers/loop.ts': `import { OnnxPolicy } from '../agents/index.ts';`,
      'servers/search.ts': `import type { Task } from '../src/env/task.ts';`,
      'lib/random.ts': `import { ToolError } from '../servers/common.ts';`,
      'src/other.ts': `export {};`,
    };
    const found = violations(sample);
    const expected = [
      `src/tools/schema-sample.ts: import '../../servers/random.ts'`,
      `src/env/suites/calculator.ts: import '../../../servers/calculator.ts'`,
      `src/env/suites/search.ts: import '../../../servers/corpus.ts'`,
      `src/env/suites/search.ts: import '../../../servers/search.ts'`,
      `src/env/suites/mixed.ts: import '../../../servers/corpus.ts'`,
      `src/env/suites/mixed.ts: import '../../../lib/random.ts'`,
      `src/agents/onnx.ts: import '../trainers/index.ts'`,
      `servers/search.ts: import '../src/env/task.ts'`,
      `lib/random.ts: import '../servers/common.ts'`,
    ];
    for (const prefix of expected)
      expect(
        found.some((p) => p.startsWith(prefix)),
        `${prefix}\n in\n${found.join('\n')}`,
      ).toBe(true);
    expect(found.some((p) => p.startsWith('src/other.ts: this file is in no layer'))).toBe(true);
    expect(found.filter((p) => p.includes('in-a-comment') || p.startsWith('src/env/suites/ok.ts'))).toEqual([]);
    expect(found).toHaveLength(expected.length + 1);
    const cycles = layerCycles(edgesOf({ 'src/agents/onnx.ts': sample['src/agents/onnx.ts']!, 'src/trainers/loop.ts': sample['src/trainers/loop.ts']! }));
    expect(cycles).toHaveLength(1);
    const circle = {
      'src/env/task.ts': `import { r } from './fixtures.ts';`,
      'src/env/fixtures.ts': `import type { Task } from './task.ts';`,
      'src/env/other.ts': `import { x } from './task.ts';`,
    };
    expect(fileCycles(edgesOf(circle))).toEqual(['src/env/fixtures.ts -> src/env/task.ts -> src/env/fixtures.ts']);
    const three = { 'a/x.ts': `import './y.ts';`, 'a/y.ts': `import './z.ts';`, 'a/z.ts': `import type { X } from './x.ts';` };
    expect(fileCycles(edgesOf(three))).toEqual(['a/x.ts -> a/y.ts -> a/z.ts -> a/x.ts']);
    const bypass = {
      'src/agents/index.ts': '',
      'src/cli/serve.ts': `import { s } from '../agents/serve-policy.ts';\nimport { t } from '../agents/index.ts';\nimport { p } from '../paths.ts';`,
      'src/agents/hf/index.ts': '',
      'src/agents/hf/x.ts': `import { m } from '../model-config.ts';`,
    };
    expect(indexBypasses(bypass, edgesOf(bypass))).toEqual([`src/cli/serve.ts: import '../agents/serve-policy.ts' bypasses src/agents/index.ts`]);
    expect(cycles[0]).toMatch(
      /^src\/agents -> src\/trainers -> src\/agents \(src\/agents\/onnx\.ts imports '\.\.\/trainers\/index\.ts'; src\/trainers\/loop\.ts imports '\.\.\/agents\/index\.ts'\)$/,
    );
  });
});
