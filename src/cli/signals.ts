/**
 * Ctrl-C and SIGTERM for the long commands: the first stops the work gracefully (the command's
 * AbortController; what is done is saved and the command exits 130, "interrupted"), a second
 * one quits at once with 130.
 */
import { setMaxListeners } from 'node:events';
import { EXIT } from '../../lib/index.ts';

export interface StopSignals {
  readonly ac: AbortController;
  /** The signal that stopped the command, if one did. */
  readonly received: NodeJS.Signals | undefined;
  dispose(): void;
}

/** Listens for SIGINT and SIGTERM; `message` (printed on stderr, if given) says what happens now. */
export function stopOnSignals(message?: (name: NodeJS.Signals) => string): StopSignals {
  const ac = new AbortController();
  setMaxListeners(10_000, ac.signal); // every tool call in flight listens to it (and lets go when done)
  let received: NodeJS.Signals | undefined;
  const quit = () => process.exit(EXIT.interrupted);
  const on = (name: NodeJS.Signals) => {
    received = name;
    process.off('SIGINT', on);
    process.off('SIGTERM', on);
    if (message) process.stderr.write(`\n${message(name)} (${name === 'SIGINT' ? 'Ctrl-C' : name} again to quit at once)\n`);
    ac.abort();
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
  };
  process.once('SIGINT', on);
  process.once('SIGTERM', on);
  return {
    ac,
    get received() {
      return received;
    },
    dispose() {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      process.off('SIGINT', quit);
      process.off('SIGTERM', quit);
    },
  };
}
