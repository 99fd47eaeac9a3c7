/**
 * `files`: edits of a small file tree. Setup writes the files; the task asks for one to four steps
 * (create a file, copy, move/rename, find the file that holds a word and write its path into
 * answer.txt, delete a file or every file of a kind in a folder). The generator replays the steps
 * on a model of the tree, and the state checks read the files it must hold (read_file) and the
 * exact listing of every folder something left (list_dir).
 */
import type { TaskCall } from '../task.ts';
import { call, quote, type Candidate, type Json, type Sampler } from './common.ts';

const DIRS = ['docs', 'inbox', 'archive', 'notes', 'tmp', 'reports', 'backup', 'drafts'];
const NAME_WORDS = ['report', 'draft', 'summary', 'invoice', 'memo', 'plan', 'budget', 'minutes', 'agenda', 'letter', 'todo', 'review', 'list', 'receipt'];
const EXTS = ['.txt', '.md', '.log', '.csv'];
/** Words of file contents; none is a part of another, of a file name or of a folder name. */
const CONTENT_WORDS = [
  'otter',
  'falcon',
  'walrus',
  'badger',
  'heron',
  'lynx',
  'bison',
  'gecko',
  'marmot',
  'ocelot',
  'puffin',
  'tapir',
  'quokka',
  'jackal',
  'mango',
  'papaya',
  'quince',
  'apricot',
  'lychee',
  'guava',
  'durian',
  'kumquat',
  'cobalt',
  'quartz',
  'basalt',
  'granite',
  'amber',
  'saffron',
  'nutmeg',
  'cumin',
  'fennel',
  'sorrel',
  'violet',
  'crimson',
  'indigo',
  'teal',
  'harbor',
  'canyon',
  'glacier',
  'meadow',
  'volcano',
  'lagoon',
  'tundra',
  'savanna',
  'comet',
  'nebula',
  'pulsar',
  'quasar',
  'zephyr',
  'monsoon',
  'drizzle',
  'thunder',
];

type FileOp =
  | { op: 'create'; path: string; content: string }
  | { op: 'copy'; from: string; to: string }
  | { op: 'move'; from: string; to: string }
  | { op: 'find'; dir: string; word: string; answer: string }
  | { op: 'delete'; path: string }
  | { op: 'delete_ext'; dir: string; ext: string; paths: string[] };

interface Level {
  steps: number;
  kinds: FileOp['op'][];
  files: [number, number];
  dirs: number;
}

const LEVELS: Record<number, Level> = {
  1: { steps: 1, kinds: ['create', 'delete'], files: [2, 3], dirs: 2 },
  2: { steps: 1, kinds: ['move', 'find', 'copy'], files: [4, 5], dirs: 2 },
  3: { steps: 2, kinds: ['create', 'move', 'find', 'copy', 'delete'], files: [5, 7], dirs: 3 },
  4: { steps: 3, kinds: ['create', 'move', 'find', 'copy', 'delete', 'delete_ext'], files: [7, 9], dirs: 3 },
  5: { steps: 4, kinds: ['create', 'move', 'find', 'copy', 'delete', 'delete_ext'], files: [10, 13], dirs: 4 },
};

const ANSWER_FILE = 'answer.txt';

const dirOf = (path: string) => path.slice(0, path.lastIndexOf('/'));
const baseOf = (path: string) => path.slice(path.lastIndexOf('/') + 1);
const extOf = (path: string) => path.slice(path.lastIndexOf('.'));
const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function stepText(op: FileOp): string {
  switch (op.op) {
    case 'create':
      return `create ${op.path} containing the text ${quote(op.content)}`;
    case 'copy':
      return `copy ${op.from} to ${op.to}`;
    case 'move':
      return dirOf(op.from) === dirOf(op.to) ? `rename ${op.from} to ${op.to}` : `move ${op.from} to ${op.to}`;
    case 'find':
      return `find the file under ${op.dir}/ that contains the word ${quote(op.word)} and write its path (like ${op.dir}/name.txt) into ${ANSWER_FILE}`;
    case 'delete':
      return `delete ${op.path}`;
    case 'delete_ext':
      return `delete every ${op.ext} file in ${op.dir}/`;
  }
}

/** The listing `list_dir` gives of a flat folder. */
function listing(fs: Map<string, string>, dir: string): Json {
  return [...fs.keys()]
    .filter((p) => dirOf(p) === dir)
    .sort((a, b) => byName(baseOf(a), baseOf(b)))
    .map((p) => ({ path: p, type: 'file', size: Buffer.byteLength(fs.get(p)!, 'utf8') }));
}

export const filesSampler: Sampler = (rng, difficulty) => {
  const level = LEVELS[difficulty]!;
  const dirs = rng.sample(DIRS, level.dirs);
  const reserved = new Set<string>();
  const sentence = (n: number): string => {
    const words = rng.sample(
      CONTENT_WORDS.filter((w) => !reserved.has(w)),
      n,
    );
    return words.join(' ');
  };
  const initial = new Map<string, string>();
  const fs = new Map<string, string>();
  const freshPath = (dir: string, ext?: string): string => {
    for (;;) {
      const p = `${dir}/${rng.pick(NAME_WORDS)}_${rng.int(1, 99)}${ext ?? rng.pick(EXTS)}`;
      if (!fs.has(p) && !initial.has(p)) return p;
    }
  };
  const nFiles = rng.int(level.files[0], level.files[1]);
  for (let i = 0; i < nFiles; i++) {
    const p = freshPath(i < dirs.length ? dirs[i]! : rng.pick(dirs));
    const content = sentence(rng.int(3, 6));
    initial.set(p, content);
    fs.set(p, content);
  }

  const touched = new Set<string>();
  const untouched = () => [...fs.keys()].filter((p) => !touched.has(p)).sort(byName);
  const ops: FileOp[] = [];
  const calls: TaskCall[] = [];
  const written = new Set<string>(); // paths whose content is checked
  const emptied = new Set<string>(); // folders something left
  let found = false;
  for (let i = 0; i < level.steps; i++) {
    let kind = rng.pick(level.kinds);
    if (kind === 'find' && found) kind = 'create';
    const free = untouched();
    if (kind !== 'create' && free.length === 0) kind = 'create';
    switch (kind) {
      case 'create': {
        const path = freshPath(rng.pick(DIRS));
        const content = sentence(rng.int(2, 4));
        ops.push({ op: 'create', path, content });
        calls.push(call('files', 'write_file', { path, content }));
        fs.set(path, content);
        touched.add(path);
        written.add(path);
        break;
      }
      case 'copy':
      case 'move': {
        const from = rng.pick(free);
        const content = fs.get(from)!;
        const rename = kind === 'move' && rng.chance(0.4);
        const to = rename ? freshPath(dirOf(from), extOf(from)) : `${rng.pick(DIRS.filter((d) => d !== dirOf(from)))}/${baseOf(from)}`;
        if (fs.has(to)) return undefined;
        ops.push({ op: kind, from, to });
        if (kind === 'copy') {
          calls.push(call('files', 'read_file', { path: from }), call('files', 'write_file', { path: to, content }));
        } else {
          calls.push(call('files', 'move', { from, to }));
          fs.delete(from);
          emptied.add(dirOf(from));
        }
        fs.set(to, content);
        touched.add(from).add(to);
        written.add(to);
        break;
      }
      case 'find': {
        const target = rng.pick(free);
        const dir = dirOf(target);
        const allText = [...fs.entries()].map(([p, c]) => `${p}\n${c}`).join('\n') + `\n${ANSWER_FILE}`;
        const word = rng.pick(CONTENT_WORDS.filter((w) => !reserved.has(w) && !allText.includes(w)));
        reserved.add(word);
        // Put the word into the target file (untouched, so its content is still the initial one).
        const words = fs.get(target)!.split(' ');
        words.splice(rng.int(0, words.length), 0, word);
        const content = words.join(' ');
        fs.set(target, content);
        initial.set(target, content);
        ops.push({ op: 'find', dir, word, answer: target });
        calls.push(call('files', 'search', { query: word, path: dir }), call('files', 'write_file', { path: ANSWER_FILE, content: target }));
        fs.set(ANSWER_FILE, target);
        touched.add(target).add(ANSWER_FILE);
        written.add(ANSWER_FILE);
        found = true;
        break;
      }
      case 'delete': {
        const path = rng.pick(free);
        ops.push({ op: 'delete', path });
        calls.push(call('files', 'delete', { path }));
        fs.delete(path);
        touched.add(path);
        emptied.add(dirOf(path));
        break;
      }
      case 'delete_ext': {
        // A folder and an extension with at least two untouched files and no touched one.
        const options: { dir: string; ext: string; paths: string[] }[] = [];
        for (const dir of dirs) {
          for (const ext of EXTS) {
            const inDir = [...fs.keys()].filter((p) => dirOf(p) === dir && extOf(p) === ext);
            if (inDir.length >= 2 && inDir.every((p) => !touched.has(p))) options.push({ dir, ext, paths: inDir.sort((a, b) => byName(baseOf(a), baseOf(b))) });
          }
        }
        if (options.length === 0) return undefined;
        const { dir, ext, paths } = rng.pick(options);
        ops.push({ op: 'delete_ext', dir, ext, paths });
        calls.push(call('files', 'list_dir', { path: dir }), ...paths.map((path) => call('files', 'delete', { path })));
        for (const p of paths) {
          fs.delete(p);
          touched.add(p);
        }
        emptied.add(dir);
        break;
      }
    }
  }

  const checks: Candidate['checks'] = [];
  for (const path of [...written].sort(byName)) {
    if (!fs.has(path)) continue;
    checks.push({ kind: 'state', call: call('files', 'read_file', { path }), path: 'content', expect: { kind: 'exact', value: fs.get(path)! } });
  }
  for (const dir of [...emptied].sort(byName)) {
    checks.push({ kind: 'state', call: call('files', 'list_dir', { path: dir }), path: 'entries', expect: { kind: 'equals', value: listing(fs, dir) } });
  }
  const setup = [...initial.entries()].map(([path, content]) => call('files', 'write_file', { path, content }));
  const kinds = new Set(ops.map((o) => (o.op === 'delete_ext' ? 'delete' : o.op)));
  return {
    family: ops.length === 1 ? `files.${[...kinds][0]}` : 'files.multi',
    params: { files: [...initial.entries()].map(([p, c]) => [p, c]), ops: ops as unknown as Json },
    prompt: `Use the files tools (read_file, write_file, list_dir, move, delete, search) to: ${ops.map(stepText).join('; ')}. When finished, answer done.`,
    servers: { files: 'files' },
    setup,
    checks,
    solution: { calls, answer: 'done' },
  };
};

export const filesSuite = {
  name: 'files',
  description:
    'Edits of a small file tree written by setup: create, copy, move/rename, find the file holding a word and write its path, delete (one file or every file of a kind); more steps and files as the difficulty grows.',
  families: ['files.create', 'files.copy', 'files.move', 'files.find', 'files.delete', 'files.multi'],
  servers: ['files'],
  sampler: filesSampler,
};
