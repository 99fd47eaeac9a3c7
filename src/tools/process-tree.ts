/** Finding and killing a process's whole tree (Linux: /proc; elsewhere: the process group). */
import { readdirSync, readFileSync } from 'node:fs';

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may contain spaces.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[1]);
  } catch {
    return undefined;
  }
}

/** All live descendants of `root` (children, grandchildren, ...), not including `root`. */
export function descendants(root: number): number[] {
  let pids: number[];
  try {
    pids = readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map(Number);
  } catch {
    return [];
  }
  const children = new Map<number, number[]>();
  for (const pid of pids) {
    const ppid = parentOf(pid);
    if (ppid === undefined) continue;
    const list = children.get(ppid);
    if (list) list.push(pid);
    else children.set(ppid, [pid]);
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length) {
    const p = queue.shift()!;
    for (const c of children.get(p) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    // A zombie still answers signal 0; it holds nothing, so count it as gone.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function signal(pid: number, sig: NodeJS.Signals, group: boolean): void {
  try {
    process.kill(group ? -pid : pid, sig);
  } catch {
    // already gone
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Ends `pid` and every process below it: SIGTERM to the group and each descendant, then
 * SIGKILL to whatever is still alive after `graceMs`. Descendants are collected before any
 * signal, so children that would be re-parented to init are not missed.
 */
export async function killTree(pid: number, options: { graceMs?: number; group?: boolean; known?: number[] } = {}): Promise<void> {
  const graceMs = options.graceMs ?? 1000;
  const tree = [...new Set([pid, ...(options.known ?? []), ...descendants(pid)])];
  if (options.group) signal(pid, 'SIGTERM', true);
  for (const p of tree) signal(p, 'SIGTERM', false);
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && tree.some(isAlive)) await sleep(20);
  const left = [...tree, ...tree.flatMap(descendants)];
  if (options.group) signal(pid, 'SIGKILL', true);
  for (const p of left) if (isAlive(p)) signal(p, 'SIGKILL', false);
}
