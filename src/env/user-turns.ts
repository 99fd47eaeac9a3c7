/**
 * An episode's user turns (docs/tasks.md, "Follow-up user turns, per-turn checks and control
 * tools"): the opening message's turn is user turn 0, follow-up k's is user turn k. A user turn
 * ends when the agent answers (a turn without tool calls or parse error); then the checks of that
 * turn (`turn: k`) run, on the server state of that moment, with that turn's answer and calls, and
 * the next follow-up is delivered (its setup calls first). A check whose turn never ended (the
 * turns ran out) scores 0, "not reached".
 */
import { runChecks, type EpisodeRecord, type StateCaller } from './checks.ts';
import type { Followup, Task } from './task.ts';
import type { CheckResult } from './types.ts';

/** An agent's call, with the user turn it was made in. */
export type TurnCall = EpisodeRecord['calls'][number] & { userTurn: number };

export const NOT_REACHED = 'not reached';

export class UserTurns {
  /** The user turn under way. */
  current = 0;
  /** Assistant turns taken in the current user turn. */
  turnsInCurrent = 0;
  /** The results of the per-turn checks made so far, by their index in task.checks. */
  private readonly results = new Map<number, CheckResult>();

  /** `extraTurns`: assistant turns each user turn gets beyond `max_turns_per_user_turn` (the toolbelt and search modes' meta-calls). */
  constructor(
    private readonly task: Task,
    private readonly extraTurns = 0,
  ) {}

  /** Whether the task has follow-ups (its turns then carry `user_turn`). */
  get multi(): boolean {
    return this.task.followups.length > 0;
  }

  /** Whether the current user turn is the last one (no follow-up after it). */
  get last(): boolean {
    return this.current >= this.task.followups.length;
  }

  /** Whether the current user turn has used its assistant turns (`max_turns_per_user_turn`). */
  get exhausted(): boolean {
    const cap = this.task.max_turns_per_user_turn;
    return cap !== undefined && this.turnsInCurrent >= cap + this.extraTurns;
  }

  /** The current user turn ended with `answer`: its checks, with its calls and the state now. */
  async end(answer: string, calls: readonly TurnCall[], callState: StateCaller): Promise<void> {
    const k = this.current;
    if (!this.task.checks.some((c) => c.turn === k)) return;
    const indices = this.task.checks.flatMap((c, i) => (c.turn === k ? [i] : []));
    const record = { answer, calls: calls.filter((c) => c.userTurn === k) };
    const results = await runChecks(this.task, record, callState, (c) => c.turn === k);
    indices.forEach((i, j) => this.results.set(i, results[j]!));
  }

  /** The next user turn begins: its follow-up (whose setup the caller runs before telling its message). */
  next(): Followup {
    const f = this.task.followups[this.current]!;
    this.current++;
    this.turnsInCurrent = 0;
    return f;
  }

  /**
   * Every check of the task, in its order: the per-turn ones as they scored when their turn ended
   * ("not reached" when it never did), the others run now with the episode's record.
   */
  async final(record: EpisodeRecord, callState: StateCaller): Promise<CheckResult[]> {
    const atEnd = await runChecks(this.task, record, callState, (c) => c.turn === undefined);
    let j = 0;
    return this.task.checks.map((c, i) =>
      c.turn === undefined ? atEnd[j++]! : (this.results.get(i) ?? { kind: c.kind, weight: c.weight, score: 0, detail: NOT_REACHED }),
    );
  }
}
