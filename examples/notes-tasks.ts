/**
 * Tasks against the example's own MCP server (examples/notes-server.ts), checked by the server's
 * state after the episode and by the answer. Used by examples/train-notes.ts, and run directly it
 * writes a task file for the command line (docs/tasks.md, "Train on your own server"):
 *
 *   npx tsx examples/notes-tasks.ts > runs/notes-tasks.jsonl      (300 train and 30 eval tasks)
 *
 * In the file the server is `node --import tsx examples/notes-server.ts`, run from the
 * repository's root; in code it is the same command with absolute paths.
 */
import { fileURLToPath, pathToFileURL } from 'node:url';
import { defineTask, type Task } from 'mcp-gym';
import type { ServerSpec } from 'mcp-gym/tools';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The notes server as a stdio server spec: a fresh process (an empty notebook) for every episode. */
export function notesServer(relative = false): ServerSpec {
  const script = relative ? 'examples/notes-server.ts' : fileURLToPath(new URL('./notes-server.ts', import.meta.url));
  return { transport: 'stdio', command: relative ? 'node' : process.execPath, args: ['--import', 'tsx', script], ...(relative ? {} : { cwd: ROOT }) };
}

/** Add these notes, then answer with how many there are; checked by the server's state and the answer. */
export function notesTask(id: string, split: 'train' | 'eval', texts: string[], server: ServerSpec = notesServer()): Task {
  return defineTask({
    id,
    split,
    difficulty: Math.min(5, texts.length),
    prompt: `Add these notes to the notebook: ${texts.map((t) => JSON.stringify(t)).join(', ')}. Then answer with the number of notes.`,
    servers: { notes: server },
    max_turns: texts.length + 2,
    checks: [
      { kind: 'state', call: { server: 'notes', tool: 'count_notes', arguments: {} }, path: 'count', expect: { kind: 'equals', value: texts.length } },
      { kind: 'state', call: { server: 'notes', tool: 'list_notes', arguments: {} }, path: 'notes', expect: { kind: 'subset', value: texts } },
      { kind: 'answer', expect: { kind: 'number', value: texts.length } },
    ],
    solution: { calls: texts.map((text) => ({ server: 'notes', tool: 'add_note', arguments: { text } })), answer: String(texts.length) },
  });
}

const WORDS = [
  'milk',
  'bread',
  'eggs',
  'rice',
  'tea',
  'soap',
  'call',
  'mum',
  'dad',
  'pay',
  'rent',
  'book',
  'dentist',
  'water',
  'plants',
  'fix',
  'bike',
  'read',
  'paper',
  'buy',
  'stamps',
  'walk',
  'dog',
  'clean',
  'desk',
  'send',
  'invoice',
  'email',
  'bank',
  'gym',
  'wash',
  'car',
  'bake',
  'cake',
  'plan',
  'trip',
  'pack',
  'bags',
  'mail',
  'letter',
];

/**
 * `train` and `evalCount` tasks of 1 to 3 notes of one or two words each, drawn with a seed; no note
 * of an eval task appears in a train task, so the model has to copy the prompt's text.
 */
export function notesTasks(train: number, evalCount: number, server: ServerSpec = notesServer(), seed = 7): Task[] {
  let x = seed >>> 0;
  const rand = () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const word = () => WORDS[Math.floor(rand() * WORDS.length)]!;
  const note = () => (rand() < 0.5 ? word() : `${word()} ${word()}`);
  const seen = new Set<string>();
  const draw = (n: number, fresh: boolean) => {
    const out: string[] = [];
    while (out.length < n) {
      const t = note();
      if (out.includes(t) || (fresh && seen.has(t))) continue;
      out.push(t);
    }
    return out;
  };
  const evalTasks = Array.from({ length: evalCount }, (_, i) => draw(1 + (i % 3), false));
  for (const texts of evalTasks) for (const t of texts) seen.add(t);
  return [
    ...Array.from({ length: train }, (_, i) => notesTask(`notes-train-${i}`, 'train', draw(1 + (i % 3), true), server)),
    ...evalTasks.map((texts, i) => notesTask(`notes-eval-${i}`, 'eval', texts, server)),
  ];
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const t of notesTasks(300, 30, notesServer(true))) process.stdout.write(JSON.stringify(t) + '\n');
}
