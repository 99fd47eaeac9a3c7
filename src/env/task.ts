/**
 * The task format: one zod schema, used from TypeScript (`defineTask`) and from JSON / JSONL
 * files (`loadTasks`). A task says what the agent is asked, which MCP servers it gets, the state
 * they start in (setup calls), how many turns it has, and how success is checked; optionally the
 * user's later messages (follow-ups), delivered as the agent ends each user turn, and checks made
 * at the end of a given user turn (docs/tasks.md, "Follow-up user turns, per-turn checks and
 * control tools").
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { BFCL_CATEGORIES } from './bfcl/data.ts';
import { checkFixtures, HttpSpecSchema, InProcessSpecSchema, OpenEnvSpecSchema, StdioSpecSchema, type StdioSpec } from '../tools/index.ts';

const Json = z.json();

/** A server a task needs: a bundled server's name, or any server spec of src/tools. */
export const ServerRefSchema = z.union([
  z.string().min(1).describe('the name of a bundled server'),
  StdioSpecSchema,
  HttpSpecSchema,
  OpenEnvSpecSchema,
  InProcessSpecSchema,
]);
export type ServerRef = z.input<typeof ServerRefSchema>;

const Alias = z.string().regex(/^[a-z][a-z0-9_-]{0,31}$/, 'a server alias is 1-32 lower-case letters, digits, _ or -, starting with a letter');

/** A tool call of the task's own (setup, state checks, reference solutions). */
export const TaskCallSchema = z.strictObject({
  server: Alias,
  tool: z.string().min(1),
  arguments: z.record(z.string(), Json).default({}),
});
export type TaskCall = z.output<typeof TaskCallSchema>;

/** How a value is compared with what was expected. */
export const MatcherSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('equals'), value: Json }),
  z.strictObject({ kind: z.literal('contains'), value: z.string(), ignore_case: z.boolean().default(false) }),
  z.strictObject({ kind: z.literal('number'), value: z.union([z.number(), z.string()]), tolerance: z.number().min(0).default(1e-6) }),
  z.strictObject({ kind: z.literal('subset'), value: Json }),
  z.strictObject({ kind: z.literal('exact'), value: z.string(), ignore_case: z.boolean().default(false) }),
  z.strictObject({
    kind: z.literal('regex'),
    value: z.string(),
    flags: z
      .string()
      .regex(/^[imsu]*$/)
      .default(''),
  }),
]);
export type Matcher = z.output<typeof MatcherSchema>;

/**
 * When a check is made: at the end of user turn k (0: the opening message's turn, k: follow-up k's
 * turn), before the next follow-up's setup; without it, at the episode's end.
 */
const CheckTurn = z.number().int().min(0).optional();

export const StateCheckSchema = z.strictObject({
  kind: z.literal('state'),
  /** After the episode, this call is made on the episode's server state... */
  call: TaskCallSchema,
  /** ...and the value at this dotted path of its structured result (e.g. "value", "rows.0.0") ... */
  path: z.string().optional(),
  /** ...is compared. */
  expect: MatcherSchema,
  weight: z.number().min(0).default(1),
  turn: CheckTurn,
});

export const AnswerCheckSchema = z.strictObject({
  kind: z.literal('answer'),
  /** The final answer, taken out of \boxed{}, <answer></answer> or "答案是" when present. */
  expect: MatcherSchema,
  weight: z.number().min(0).default(1),
  turn: CheckTurn,
});

export const CallCheckSchema = z.strictObject({
  kind: z.literal('call'),
  server: Alias,
  tool: z.string().min(1),
  /** Only these arguments are compared (each by equality); others may be anything. */
  arguments: z.record(z.string(), Json).default({}),
  /** The call must have succeeded (not isError). Default true. */
  succeeded: z.boolean().default(true),
  weight: z.number().min(0).default(1),
  turn: CheckTurn,
});

export const CodeCheckSchema = z.strictObject({
  kind: z.literal('code'),
  language: z.literal('javascript').default('javascript'),
  /** The answer must define this function; it is called with each test's input. */
  function: z.string().regex(/^[A-Za-z_$][\w$]*$/, 'function must be a JavaScript identifier'),
  tests: z
    .array(z.strictObject({ input: z.array(Json), output: Json }))
    .min(1)
    .max(100),
  timeout_ms: z.number().int().min(10).max(60_000).default(2000),
  weight: z.number().min(0).default(1),
  turn: CheckTurn,
});

/**
 * BFCL's verdict on the episode's output (docs/bfcl.md): its calls, in BFCL's result format, graded
 * by BFCL's own checker for the entry (the AST checker, relevance, or the multi-turn checker).
 */
export const BfclCheckSchema = z.strictObject({
  kind: z.literal('bfcl'),
  category: z
    .string()
    .refine((c) => BFCL_CATEGORIES.includes(c), { error: (i) => `unknown BFCL category '${String(i.input)}'; the categories: ${BFCL_CATEGORIES.join(', ')}` }),
  entry: z.string().min(1),
  weight: z.number().min(0).default(1),
  turn: CheckTurn,
});

export const CheckSchema = z.discriminatedUnion('kind', [StateCheckSchema, AnswerCheckSchema, CallCheckSchema, CodeCheckSchema, BfclCheckSchema]);
export type Check = z.output<typeof CheckSchema>;

/** A later message of the user: delivered when the agent ends its current user turn, after its setup calls. */
export const FollowupSchema = z.strictObject({
  content: z.string().min(1),
  /** Calls the environment makes on the episode's servers before the message is delivered (as the task's setup). */
  setup: z.array(TaskCallSchema).default([]),
});
export type Followup = z.output<typeof FollowupSchema>;

/** One user turn of a reference solution: the calls the expert makes in it, then its answer. */
export const SolutionTurnSchema = z.strictObject({
  calls: z.array(TaskCallSchema).default([]),
  answer: z.string(),
  /** The expert makes every call of the turn in one reply (parallel calls), then answers; default: one call a reply. */
  parallel: z.boolean().default(false),
});

export const MessageSchema = z.strictObject({
  role: z.enum(['system', 'user', 'assistant']),
  content: z.string(),
});

export const TaskSchema = z
  .strictObject({
    id: z.string().min(1).max(200),
    split: z.enum(['train', 'eval']),
    difficulty: z.number().int().min(1).max(5),
    /** The family of generated tasks it belongs to (e.g. "calculator.arith"). */
    family: z.string().optional(),
    system: z.string().optional(),
    /** The user's request; or give `messages` for a conversation. */
    prompt: z.string().min(1).optional(),
    messages: z.array(MessageSchema).min(1).optional(),
    /** The servers the task needs, by alias: a bundled server's name or a server spec. */
    servers: z.record(Alias, ServerRefSchema).refine((s) => Object.keys(s).length > 0, 'a task needs at least one server'),
    /** Calls that put the servers into the task's starting state, made before the agent starts. */
    setup: z.array(TaskCallSchema).default([]),
    /** The user's later messages, one per user turn after the opening one. */
    followups: z.array(FollowupSchema).default([]),
    /** The most assistant turns in the whole episode. */
    max_turns: z.number().int().min(1).max(1000).default(8),
    /** The most assistant turns within one user turn (reached: the episode ends, finish `max_turns`). */
    max_turns_per_user_turn: z.number().int().min(1).max(100).optional(),
    checks: z.array(CheckSchema).min(1, 'a task needs at least one check'),
    /**
     * A reference solution: the calls an expert makes, and its final answer; or, per user turn
     * (the opening one, then each follow-up's), its calls and answer (`turns`, used instead).
     */
    solution: z
      .strictObject({ calls: z.array(TaskCallSchema).default([]), answer: z.string().optional(), turns: z.array(SolutionTurnSchema).optional() })
      .superRefine((sol, ctx) => {
        if (sol.answer === undefined && sol.turns === undefined)
          ctx.addIssue({ code: 'custom', path: ['answer'], message: 'give the final answer (or solution.turns, per user turn)' });
      })
      .transform((sol) => ({ ...sol, answer: sol.answer ?? '' }))
      .optional(),
    /** The generator's parameters, kept for the record. */
    params: z.record(z.string(), Json).optional(),
  })
  .superRefine((task, ctx) => {
    if ((task.prompt === undefined) === (task.messages === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['prompt'], message: 'give exactly one of prompt or messages' });
    }
    const aliases = new Set(Object.keys(task.servers));
    const checkAlias = (server: string, path: (string | number)[]) => {
      if (!aliases.has(server))
        ctx.addIssue({ code: 'custom', path, message: `unknown server '${server}'; the task's servers are ${[...aliases].join(', ')}` });
    };
    task.setup.forEach((c, i) => checkAlias(c.server, ['setup', i, 'server']));
    task.followups.forEach((f, k) => f.setup.forEach((c, i) => checkAlias(c.server, ['followups', k, 'setup', i, 'server'])));
    const userTurns = task.followups.length + 1;
    task.checks.forEach((c, i) => {
      if (c.turn !== undefined && c.turn >= userTurns)
        ctx.addIssue({
          code: 'custom',
          path: ['checks', i, 'turn'],
          message: `turn ${c.turn} is past the task's last user turn (${userTurns - 1}: user turns are 0, the opening message, to the number of followups, ${task.followups.length})`,
        });
      if (c.kind === 'state') checkAlias(c.call.server, ['checks', i, 'call', 'server']);
      if (c.kind === 'call') checkAlias(c.server, ['checks', i, 'server']);
      if (c.kind === 'answer' && c.expect.kind === 'regex') {
        try {
          new RegExp(c.expect.value, c.expect.flags);
        } catch (err) {
          ctx.addIssue({ code: 'custom', path: ['checks', i, 'expect', 'value'], message: `invalid regular expression: ${(err as Error).message}` });
        }
      }
    });
    task.solution?.calls.forEach((c, i) => checkAlias(c.server, ['solution', 'calls', i, 'server']));
    const turns = task.solution?.turns;
    if (turns) {
      if (turns.length !== userTurns)
        ctx.addIssue({
          code: 'custom',
          path: ['solution', 'turns'],
          message: `one entry per user turn is needed: ${userTurns} (the opening message and ${task.followups.length} follow-up(s)), got ${turns.length}`,
        });
      turns.forEach((t, k) => t.calls.forEach((c, i) => checkAlias(c.server, ['solution', 'turns', k, 'calls', i, 'server'])));
    }
  });

export type Task = z.output<typeof TaskSchema>;
export type TaskInput = z.input<typeof TaskSchema>;

/** Error in a task file: names the file, the line (for JSONL) and the field. */
export class TaskFileError extends Error {
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    readonly field: string,
    readonly reason: string,
  ) {
    super(`${file}${line !== undefined ? `:${line}` : ''}: ${field ? `${field}: ` : ''}${reason}`);
    this.name = 'TaskFileError';
  }
}

function fieldOf(path: PropertyKey[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i ? '.' : ''}${String(p)}`)).join('');
}

/**
 * The issue to report. A server spec that fails every option of `ServerRefSchema` (a stdio spec
 * with `fixtures.env.A: 1`) is one issue, "Invalid input"; the option its `transport` chose says
 * what is wrong, at which field.
 */
function unionIssue(issue: z.core.$ZodIssue): { path: PropertyKey[]; message: string } {
  if (issue.code !== 'invalid_union') return issue;
  const otherKind = (e: z.core.$ZodIssue) =>
    (e.code === 'invalid_type' && e.path.length === 0) || (e.code === 'invalid_value' && e.path.length === 1 && e.path[0] === 'transport');
  const meant = issue.errors.filter((errors) => errors.length > 0 && !errors.some(otherKind));
  if (meant.length !== 1) return issue;
  const inner = unionIssue(meant[0]![0]!);
  return { path: [...issue.path, ...inner.path], message: inner.message };
}

/** How deeply a task's JSON may nest: far more than any task needs, far less than what overflows the stack. */
export const MAX_TASK_DEPTH = 256;

/**
 * Where a value nests more than `max` levels deep (arrays and objects), as the path to that
 * point, or undefined. Iterative, so that a value of any depth is measured without recursion.
 */
export function tooDeep(value: unknown, max = MAX_TASK_DEPTH): PropertyKey[] | undefined {
  interface Node {
    value: unknown;
    depth: number;
    key?: PropertyKey;
    parent?: Node;
  }
  const stack: Node[] = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const node = stack.pop()!;
    const v = node.value;
    if (v === null || typeof v !== 'object') continue;
    if (node.depth >= max) {
      const path: PropertyKey[] = [];
      for (let n: Node | undefined = node; n?.key !== undefined; n = n.parent) path.push(n.key);
      return path.reverse();
    }
    if (Array.isArray(v)) v.forEach((x, i) => stack.push({ value: x, depth: node.depth + 1, key: i, parent: node }));
    else for (const [k, x] of Object.entries(v)) stack.push({ value: x, depth: node.depth + 1, key: k, parent: node });
  }
  return undefined;
}

/** The start of a (long) path to where a value nests too deeply: its first levels, then an ellipsis. */
function deepField(path: PropertyKey[]): string {
  const shown = path.slice(0, 4);
  return fieldOf(shown) + (path.length > shown.length ? '…' : '');
}

const deepReason = `nested more than ${MAX_TASK_DEPTH} levels deep (arrays and objects)`;

/** Validates a task given in TypeScript; throws with the field named. */
export function defineTask(input: TaskInput): Task {
  const deep = tooDeep(input);
  if (deep) {
    const id = typeof (input as { id?: unknown })?.id === 'string' ? ` '${(input as { id: string }).id}'` : '';
    throw new Error(`Invalid task${id}: ${deepField(deep) || '(task)'}: ${deepReason}`);
  }
  const r = TaskSchema.safeParse(input);
  if (!r.success) {
    const issue = unionIssue(r.error.issues[0]!);
    const id = typeof (input as { id?: unknown }).id === 'string' ? ` '${(input as { id: string }).id}'` : '';
    throw new Error(`Invalid task${id}: ${fieldOf(issue.path) || '(task)'}: ${issue.message}`);
  }
  // A fixture's relative `copy` is the working directory's; one that does not exist is refused now.
  const fx = resolveTaskFixtures(r.data, process.cwd());
  if (fx.problem) throw new Error(`Invalid task '${r.data.id}': ${fx.problem.field}: ${fx.problem.reason}`);
  return fx.task;
}

function parseOne(value: unknown, file: string, line: number | undefined, prefix = ''): Task {
  // Validation recurses into the value: a value nested thousands of levels deep would overflow the stack.
  const deep = tooDeep(value);
  if (deep) throw new TaskFileError(file, line, prefix + deepField(deep), deepReason);
  let r: ReturnType<typeof TaskSchema.safeParse>;
  try {
    r = TaskSchema.safeParse(value);
  } catch (err) {
    if (err instanceof RangeError) throw new TaskFileError(file, line, prefix.replace(/\.$/, ''), `cannot be checked: ${err.message}`);
    throw err;
  }
  if (r.success) {
    // A fixture's relative `copy` is the task file's; one that does not exist is refused here, before any episode.
    const fx = resolveTaskFixtures(r.data, dirname(resolve(file)));
    if (fx.problem) throw new TaskFileError(file, line, prefix + fx.problem.field, fx.problem.reason);
    return fx.task;
  }
  const issue = unionIssue(r.error.issues[0]!);
  throw new TaskFileError(file, line, (prefix + fieldOf(issue.path)).replace(/\.$/, ''), issue.message);
}

/** The line (1-based) of a character offset in a text. */
function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/**
 * Parses tasks from text: JSON Lines (one task per line; blank lines and lines starting with
 * `//` are skipped), a JSON array of tasks, or one JSON task. Errors name the file, line and field.
 */
export function parseTasks(text: string, file = '<tasks>'): Task[] {
  const tasks: Task[] = [];
  let whole: { value: unknown } | undefined;
  let wholeError: Error | undefined;
  if (!file.endsWith('.jsonl')) {
    try {
      whole = { value: JSON.parse(text) };
    } catch (err) {
      wholeError = err as Error;
    }
  }
  const lines = text.split('\n');
  const looksJsonl = lines.filter((l) => l.trim() && !l.trim().startsWith('//')).every((l) => l.trim().startsWith('{'));
  if (whole === undefined && (file.endsWith('.jsonl') || looksJsonl)) {
    lines.forEach((raw, i) => {
      const lineText = raw.trim();
      if (!lineText || lineText.startsWith('//')) return;
      let value: unknown;
      try {
        value = JSON.parse(lineText);
      } catch (err) {
        throw new TaskFileError(file, i + 1, '', `invalid JSON: ${(err as Error).message}`);
      }
      tasks.push(parseOne(value, file, i + 1));
    });
  } else if (whole === undefined) {
    const m = /position (\d+)/.exec(wholeError!.message);
    throw new TaskFileError(file, m ? lineAt(text, Number(m[1])) : undefined, '', `invalid JSON: ${wholeError!.message}`);
  } else if (Array.isArray(whole.value)) {
    // Find where each element starts, to report its line.
    whole.value.forEach((v, i) => {
      const id = (v as { id?: unknown })?.id;
      const at = typeof id === 'string' ? text.indexOf(JSON.stringify(id)) : -1;
      tasks.push(parseOne(v, file, at >= 0 ? lineAt(text, at) : undefined, `[${i}].`));
    });
  } else {
    tasks.push(parseOne(whole.value, file, undefined));
  }
  const seen = new Map<string, number>();
  tasks.forEach((t, i) => {
    if (seen.has(t.id)) throw new TaskFileError(file, undefined, `[${i}].id`, `duplicate task id '${t.id}' (also task ${seen.get(t.id)})`);
    seen.set(t.id, i);
  });
  return tasks;
}

/** Loads tasks from a .json or .jsonl file. */
export function loadTasks(file: string): Task[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TaskFileError(file, undefined, '', `cannot read the file: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseTasks(text, file);
}

/** The messages a task opens with. */
export function openingMessages(task: Task): { role: 'system' | 'user' | 'assistant'; content: string }[] {
  const msgs = task.messages ? [...task.messages] : [{ role: 'user' as const, content: task.prompt! }];
  if (task.system && msgs[0]?.role !== 'system') msgs.unshift({ role: 'system', content: task.system });
  return msgs;
}

/**
 * A task's fixtures (docs/tasks.md, "Fresh state per episode for third-party servers (fixtures)"): each
 * stdio server spec's `fixtures.copy` is resolved against the task file's directory and checked
 * when the task is read, so that a wrong path is refused with the file, line and field before any
 * episode runs; `{fixture}` without `fixtures` is refused too. The copying itself is per connection,
 * in src/tools/fixtures.ts: the environment connects a stdio server once per episode.
 *
 * Returns the task with every stdio server's `fixtures.copy` made absolute (relative ones against
 * `baseDir`), or the first problem with its field (`servers.fs.fixtures.copy`).
 */
export function resolveTaskFixtures(task: Task, baseDir: string): { task: Task; problem?: { field: string; reason: string } } {
  let servers: Task['servers'] | undefined;
  for (const [alias, ref] of Object.entries(task.servers)) {
    if (typeof ref === 'string' || ref.transport !== 'stdio') continue;
    const { spec, problem } = checkFixtures(ref as StdioSpec, baseDir);
    if (problem) return { task, problem: { field: `servers.${alias}.${problem.field}`, reason: problem.reason } };
    if (spec !== ref) (servers ??= { ...task.servers })[alias] = spec;
  }
  return { task: servers ? { ...task, servers } : task };
}
