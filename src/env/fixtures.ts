/**
 * A task's fixtures (README: "Fresh state per episode for third-party servers (fixtures)"): each
 * stdio server spec's `fixtures.copy` is resolved against the task file's directory and checked
 * when the task is read, so that a wrong path is refused with the file, line and field before any
 * episode runs; `{fixture}` without `fixtures` is refused too. The copying itself is per connection,
 * in src/tools/fixtures.ts: the environment connects a stdio server once per episode.
 */
import { checkFixtures, type StdioSpec } from '../tools/index.ts';
import type { Task } from './task.ts';

/**
 * The task with every stdio server's `fixtures.copy` made absolute (relative ones against
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
