/**
 * The vocabularies of the training config's options, a leaf that imports nothing of the trainer:
 * the curriculum's modes and its schedule's syntax, the replay buffer's priorities and the
 * experiment trackers. config.ts validates with these; curriculum.ts, replay.ts and trackers.ts
 * use them.
 */

export const CURRICULUM_MODES = ['off', 'adaptive', 'schedule'] as const;
export type CurriculumMode = (typeof CURRICULUM_MODES)[number];

/** Parses a schedule, `difficulty:from_step,...` (e.g. "1:0,2:10,3:25"); errors name the field. */
export function parseSchedule(text: string): { difficulty: number; from: number }[] {
  const entries = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const m = /^(\d+):(\d+)$/.exec(s);
      if (!m) throw new Error(`curriculum_schedule: '${s}' is not difficulty:from_step (e.g. "1:0,2:10,3:25")`);
      const difficulty = Number(m[1]);
      if (difficulty < 1 || difficulty > 5) throw new Error(`curriculum_schedule: difficulty ${difficulty} in '${s}' is not in 1..5`);
      return { difficulty, from: Number(m[2]) };
    });
  if (entries.length === 0) throw new Error('curriculum_schedule: empty; give difficulty:from_step entries (e.g. "1:0,2:10,3:25") with curriculum schedule');
  for (let i = 1; i < entries.length; i++) {
    if (entries[i]!.from <= entries[i - 1]!.from)
      throw new Error(`curriculum_schedule: from_step must increase (${entries[i - 1]!.from} then ${entries[i]!.from})`);
  }
  return entries;
}

export const REPLAY_PRIORITIES = ['uniform', 'advantage'] as const;
export type ReplayPriority = (typeof REPLAY_PRIORITIES)[number];

export const TRACKERS = ['wandb', 'tensorboard', 'mlflow'] as const;
export type TrackerName = (typeof TRACKERS)[number];

/** `wandb,tensorboard` -> the names, checked; '' or 'none' -> none. */
export function parseReportTo(spec: string | undefined): TrackerName[] {
  const names = (spec ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s && s !== 'none');
  const bad = names.filter((n) => !(TRACKERS as readonly string[]).includes(n));
  if (bad.length) throw new Error(`report_to: unknown tracker ${bad.map((b) => `'${b}'`).join(', ')} (known: ${TRACKERS.join(', ')}; comma-separated)`);
  return [...new Set(names)] as TrackerName[];
}
