/**
 * Taking turns in one process (bench/main-job.ts, bench/model-job.ts): two runs ask for the turn before
 * each unit of their work and hand it on after, so that both meet the machine as it is at the same minutes
 * (this VM's speed drifts within an hour). The promise chain hands the turn on in order of asking.
 */
let turn: Promise<void> = Promise.resolve();

/** Resolves when the turn is this caller's, with the function that hands it on. */
export function takeTurn(): Promise<() => void> {
  let release!: () => void;
  const mine = new Promise<void>((r) => (release = r));
  const before = turn;
  turn = before.then(() => mine);
  return before.then(() => release);
}
