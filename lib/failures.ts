/**
 * Failures that end a command, each with its exit code (docs/exit-codes.md, "Exit codes"). A library caller
 * catches them by class; the command line turns `exitCode` into the process's exit status and
 * prints the message (which names the cause) on stderr.
 *
 *   0    did what was asked
 *   1    failed otherwise (an unexpected error: its message says what)
 *   2    bad input: a flag, a config, a task file (file, line and field named)
 *   3    could not start a tool server, the model or the learner (the command, the last lines of its stderr)
 *   4    every episode failed (the causes, most frequent first)
 *   5    training without a learning signal: steps whose every group had equal rewards
 *        (no_signal_patience in a row), or a training step that left the weights unchanged
 *   6    an evaluation below --fail-under
 *   130  interrupted (Ctrl-C or SIGTERM): a partial run, resumable
 */

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  cannot_start: 3,
  all_failed: 4,
  no_signal: 5,
  below_threshold: 6,
  interrupted: 130,
} as const;

/** What each exit code means, as docs/cli.md's table says it (generated from this). */
export const EXIT_MEANINGS: Record<(typeof EXIT)[keyof typeof EXIT], string> = {
  0: 'did what was asked',
  1: 'failed otherwise (an unexpected error; its message says what)',
  2: 'bad input: a flag (`--steps -1`: "must be a positive integer"), a config, a task file (file:line: field)',
  3: 'could not start a tool server, the model or the learner: the command and the last lines of its stderr',
  4: 'every episode failed (a server dying on each call, a policy that cannot answer): the causes, most frequent first',
  5: 'training without a learning signal: `--no-signal-patience` (default 5) steps in a row whose groups all had equal rewards, or whose learner step left the weights bit-identical (`weights_changed` in metrics.jsonl)',
  6: 'below `--fail-under X` (`eval`, `bench --tasks`): success under the threshold',
  130: 'interrupted: Ctrl-C or SIGTERM ended the step in flight, checkpointed it, and printed `after: none` (no final evaluation ran); `--resume` continues',
};

/** A failure with the exit status the command line gives it. */
export class RunFailure extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** A tool server, the model or the learner could not be started. */
export class StartFailure extends RunFailure {
  constructor(message: string) {
    super(message, EXIT.cannot_start);
  }
}

/** Every episode of an evaluation or a rollout failed: nothing was measured. */
export class AllEpisodesFailed extends RunFailure {
  constructor(message: string) {
    super(message, EXIT.all_failed);
  }
}

/** Training stopped: no learning signal, or weights a step did not change. */
export class NoLearningSignal extends RunFailure {
  constructor(message: string) {
    super(message, EXIT.no_signal);
  }
}

/** An evaluation scored below the threshold asked (--fail-under). */
export class BelowThreshold extends RunFailure {
  constructor(message: string) {
    super(message, EXIT.below_threshold);
  }
}

/** A run was interrupted (SIGINT, SIGTERM); what it wrote can be resumed. */
export class Interrupted extends RunFailure {
  constructor(message: string) {
    super(message, EXIT.interrupted);
  }
}
