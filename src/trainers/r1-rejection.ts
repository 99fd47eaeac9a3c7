/** Stage 3's rejection sampling: which samples are kept (verifier-correct, distinct, at most M per task) and their SFT examples. */
import type { Trajectory } from '../env/index.ts';
import { sequenceOf } from './batch.ts';
import { canonical } from './r1-config.ts';

/** Stage 3's accounting: every sample is kept or rejected for one reason. */
export interface RejectionCounts {
  tasks: number;
  samples: number;
  kept: number;
  rejected: { incorrect: number; duplicate: number; over_max: number; untrainable: number };
}

/**
 * What makes two samples the same for deduplication: the same tool calls (names and arguments, in
 * order) and the same final answer (whitespace at the ends aside). Wording between calls does not count.
 */
export function trajectorySignature(t: Pick<Trajectory, 'turns' | 'answer'>): string {
  const calls = t.turns.flatMap((turn) => turn.action.tool_calls.map((c) => `${c.name}(${canonical(c.arguments)})`));
  return `${calls.join(';')}|${(t.answer ?? '').trim()}`;
}

/**
 * Rejection sampling's choice, per task in sample order: a sample that is not verifier-correct
 * (not solved, or a failed episode) is rejected as incorrect; one whose signature a kept sample of
 * its task has is a duplicate; one beyond M kept for its task is over_max; one without a token
 * sequence that fits the context cannot be trained on (untrainable). The rest are kept.
 */
export function selectVerified(trajectories: Trajectory[], o: { maxPerTask: number; maxLen: number }): { kept: Trajectory[]; counts: RejectionCounts } {
  const byTask = new Map<string, Trajectory[]>();
  for (const t of trajectories) byTask.set(t.task_id, [...(byTask.get(t.task_id) ?? []), t]);
  const counts: RejectionCounts = {
    tasks: byTask.size,
    samples: trajectories.length,
    kept: 0,
    rejected: { incorrect: 0, duplicate: 0, over_max: 0, untrainable: 0 },
  };
  const kept: Trajectory[] = [];
  for (const ts of byTask.values()) {
    const seen = new Set<string>();
    let n = 0;
    for (const t of [...ts].sort((a, b) => a.sample - b.sample)) {
      if (!t.success || t.finish === 'error') {
        counts.rejected.incorrect++;
        continue;
      }
      const sig = trajectorySignature(t);
      if (seen.has(sig)) {
        counts.rejected.duplicate++;
        continue;
      }
      if (n >= o.maxPerTask) {
        counts.rejected.over_max++;
        continue;
      }
      const seq = sequenceOf(t);
      if (!seq || seq.ids.length > o.maxLen) {
        counts.rejected.untrainable++;
        continue;
      }
      seen.add(sig);
      n++;
      kept.push(t);
    }
  }
  counts.kept = kept.length;
  return { kept, counts };
}

/** The SFT examples of kept samples: each one's token sequence as sampled, the loss on the policy's tokens only. */
export function rejectionExamples(kept: Trajectory[]): { ids: number[]; mask: number[] }[] {
  return kept.map((t) => {
    const s = sequenceOf(t)!;
    return { ids: s.ids, mask: s.mask };
  });
}
