/** The R1 pipeline's report: its table of stages as text, and report.md. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { R1_STAGES, type HeldOut, type R1Record } from './r1-record.ts';
import type { RejectionCounts } from './r1-rejection.ts';

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** One row per stage: name, held-out success, its 95% interval, episodes, seconds, what the stage did. */
function stageRows(record: R1Record): string[][] {
  return R1_STAGES.map((name) => {
    const s = record.stages.find((x) => x.name === name);
    if (!s) return [name, '(not done)', '', '', record.partial[name] ? record.partial[name]!.toFixed(1) : '', ''];
    const d = s.detail;
    let note: string;
    if (name === '1-sft')
      note = d.as_is
        ? 'the given model, as is'
        : `SFT on ${d.demos} demonstrations, loss ${Number(d.loss_first).toFixed(3)} -> ${Number(d.loss_last).toFixed(3)}`;
    else if (name === '3-rs-sft') {
      const r = d.rejected as RejectionCounts['rejected'];
      const sft = d.sft as Record<string, number> | null;
      note = `kept ${d.kept}/${d.samples} (incorrect ${r.incorrect}, duplicate ${r.duplicate}, over M ${r.over_max}${r.untrainable ? `, untrainable ${r.untrainable}` : ''})${sft ? `; SFT loss ${Number(sft.loss_first).toFixed(3)} -> ${Number(sft.loss_last).toFixed(3)}` : '; no SFT'}`;
    } else note = `${d.steps} steps, from ${pct((d.before as HeldOut).success)}`;
    return [name, pct(s.eval.success), `[${pct(s.eval.ci95[0])}, ${pct(s.eval.ci95[1])}]`, String(s.eval.episodes), s.seconds.toFixed(1), note];
  });
}

/** The pipeline's table as text: one row per stage (held-out success with its 95% interval, wall time, what it did). */
export function r1Table(record: R1Record): string {
  const rows = [['stage', 'held-out success', '95% interval', 'episodes', 'seconds', 'notes'], ...stageRows(record)];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((v, i) => (i === r.length - 1 ? v : v.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** report.md in `out`: the table, the held-out tasks, stage 3's accounting, and where each stage's model is. */
export function writeR1Report(out: string, record: R1Record): string {
  const md = (v: string) => v.replace(/\|/g, '\\|');
  const lines = [
    '# DeepSeek-R1 pipeline',
    '',
    `Suite ${md(String(record.config.suite))} (difficulty <= ${record.config.max_difficulty}); every stage evaluated on the same ${record.held_out.tasks} held-out tasks x ${record.held_out.samples} samples; 95% intervals cluster-robust over tasks (docs/evaluation.md).`,
    '',
    '| stage | held-out success | 95% interval | episodes | seconds | notes |',
    '|---|---|---|---|---|---|',
    ...stageRows(record).map((r) => `| ${r.map(md).join(' | ')} |`),
  ];
  const rs = record.stages.find((s) => s.name === '3-rs-sft');
  if (rs) {
    const r = rs.detail.rejected as RejectionCounts['rejected'];
    lines.push(
      '',
      '## Stage 3: rejection sampling',
      '',
      `${rs.detail.k} samples on each of ${rs.detail.tasks} train tasks; kept ${rs.detail.kept} (at most ${rs.detail.max_per_task} per task), rejected: ${r.incorrect} incorrect, ${r.duplicate} duplicate, ${r.over_max} over M, ${r.untrainable} untrainable.`,
    );
  }
  lines.push('', '## Models', '', ...record.stages.map((s) => `- ${s.name}: \`${md(s.model)}\``), '');
  const file = join(out, 'report.md');
  writeFileSync(file, lines.join('\n'));
  return file;
}
