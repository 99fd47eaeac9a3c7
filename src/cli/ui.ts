/** Terminal output: a progress bar on stderr and plain tables. */

export class ProgressBar {
  private last = 0;
  private readonly tty = process.stderr.isTTY === true;
  private lastPercent = -1;
  private readonly t0 = performance.now();

  constructor(
    private readonly label: string,
    private readonly total: number,
  ) {}

  /**
   * Redraws (at most every 100 ms on a terminal; every 10% otherwise). `etaSeconds`, when given,
   * is shown as the time left (else the terminal shows the rate since the bar began).
   */
  update(done: number, extra = '', etaSeconds?: number): void {
    const now = performance.now();
    const pct = this.total ? Math.floor((100 * done) / this.total) : 100;
    const eta = etaSeconds !== undefined ? ` ETA ${minutes(etaSeconds)}` : '';
    if (this.tty) {
      if (now - this.last < 100 && done < this.total) return;
      this.last = now;
      const width = 24;
      const filled = Math.round((width * done) / Math.max(1, this.total));
      const rate = eta || ` ${(done / Math.max(1e-9, (now - this.t0) / 1000)).toFixed(1)}/s`;
      process.stderr.write(`\r${this.label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${this.total} ${extra}${rate}   `);
    } else if (Math.floor(pct / 10) !== Math.floor(this.lastPercent / 10) || done === this.total) {
      this.lastPercent = pct;
      process.stderr.write(`${this.label} ${done}/${this.total} (${pct}%) ${extra}${eta}\n`);
    }
  }

  done(): void {
    if (this.tty) process.stderr.write('\n');
  }
}

/** Seconds as 4m05s (rounded first: 119.7 s is 2m00s, not 1m60s). */
export function minutes(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const whole = Math.max(0, Math.round(seconds));
  return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, '0')}s`;
}

/** A left-aligned text table. */
export function table(rows: (string | number)[][]): string {
  const cells = rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)));
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export function fmt(x: number): string {
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 100 ? x.toFixed(1) : x.toFixed(3);
}
