/**
 * `--record F` and `--replay F` of rollout, eval and train (src/env/recording.ts): record every
 * tool interaction of a run, or serve a recorded run's tool traffic back without any server.
 */
import { existsSync, statSync } from 'node:fs';
import { RecordingFileError, ToolRecording } from '../env/index.ts';
import { UsageError } from './args.ts';

/** parseArgs options of the two flags. */
export const TAPE_FLAGS = {
  record: { type: 'string' },
  replay: { type: 'string' },
} as const;

export const TAPE_HELP = `  --record F              record every tool list and call (results, latency) in F (JSONL; appended with --resume)
  --replay F              serve the tool traffic from a recording F, starting no server (a call it lacks fails its episode)`;

/**
 * The environment options of `--record F` / `--replay F`, checked before the run starts: both at
 * once, a record file that already holds a recording (without `--resume`, which appends to it),
 * and a replay file that is missing, unreadable or has an invalid line are usage errors. The
 * recording is loaded here; a partial last line (a killed run's) is ignored with a warning.
 */
export function tapeOptions(values: { record?: string; replay?: string }, resume: boolean): { record?: string; replay?: ToolRecording } {
  const { record, replay } = values;
  if (record !== undefined && replay !== undefined) throw new UsageError('give --record F or --replay F, not both');
  if (record === '' || replay === '') throw new UsageError(`--${record === '' ? 'record' : 'replay'} needs a file`);
  if (replay !== undefined) {
    try {
      return { replay: ToolRecording.load(replay, { onWarning: (m) => process.stderr.write(`mcp-gym: warning: ${m}\n`) }) };
    } catch (err) {
      if (err instanceof RecordingFileError) throw new UsageError(err.message);
      throw err;
    }
  }
  if (record !== undefined) {
    if (existsSync(record) && statSync(record).isDirectory()) throw new UsageError(`--record ${record}: a directory, not a file`);
    if (!resume && existsSync(record) && statSync(record).size > 0) {
      throw new UsageError(`--record ${record}: the file already holds a recording: pass --resume to add this run's to it, or choose another file`);
    }
    return { record };
  }
  return {};
}
