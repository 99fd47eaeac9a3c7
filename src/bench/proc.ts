/**
 * CPU time and peak memory of a stdio server's process tree (Linux /proc): utime + stime from
 * /proc/<pid>/stat, VmHWM (peak resident set) from /proc/<pid>/status, for the server and every
 * process below it, sampled while the benchmark runs. A restarted server (a new pid) is followed.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { descendants } from '../tools/index.ts';

let ticksPerSecond: number | undefined;
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU time (user + system) of one process in ms, or undefined when it cannot be read. */
export function processCpuMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (in parentheses, may hold spaces): field 3 is rest[0].
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(rest[11]);
    const stime = Number(rest[12]);
    if (!Number.isFinite(utime) || !Number.isFinite(stime)) return undefined;
    return ((utime + stime) * 1000) / clockTicks();
  } catch {
    return undefined;
  }
}

/** Peak resident set size (VmHWM) of one process in bytes, or undefined. */
export function processPeakRss(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = /^VmHWM:\s+(\d+)\s*kB/m.exec(status);
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

export interface ProcessReport {
  /** The server's pid when sampling ended (the last one, after restarts). */
  pid: number | undefined;
  /** Every process of the tree seen while sampling. */
  processes: number;
  /** CPU time of the tree since it started, ms (what it had used when last seen). */
  cpu_ms: number;
  /** CPU time used between `start()` and `stop()`, ms. */
  cpu_ms_window: number;
  /** `cpu_ms_window` over the window's wall time: 1 = one core busy. */
  cpu_cores_window: number;
  /** Highest sum of the tree's peak resident sets, MB. */
  peak_rss_mb: number;
}

/** Samples a process tree's CPU time and peak memory every `intervalMs` between start and stop. */
export class ProcessSampler {
  private readonly lastCpu = new Map<number, number>();
  private readonly baseCpu = new Map<number, number>();
  /** Processes present at start(): they count from their CPU time then; later ones from zero. */
  private readonly atStart = new Set<number>();
  private peakBytes = 0;
  private timer?: ReturnType<typeof setInterval>;
  private t0 = 0;
  private t1 = 0;
  private pid: number | undefined;

  constructor(
    private readonly getPid: () => number | undefined,
    private readonly intervalMs = 500,
  ) {}

  /** Reads the tree now. */
  sample(): void {
    const root = this.getPid();
    if (root === undefined) return;
    this.pid = root;
    let rss = 0;
    for (const pid of [root, ...descendants(root)]) {
      const cpu = processCpuMs(pid);
      if (cpu !== undefined) {
        this.lastCpu.set(pid, cpu);
        if (!this.baseCpu.has(pid)) this.baseCpu.set(pid, this.atStart.has(pid) ? cpu : 0);
      }
      rss += processPeakRss(pid) ?? 0;
    }
    this.peakBytes = Math.max(this.peakBytes, rss);
  }

  start(): void {
    this.t0 = performance.now();
    const root = this.getPid();
    if (root !== undefined) for (const pid of [root, ...descendants(root)]) this.atStart.add(pid);
    this.timer = setInterval(() => this.sample(), this.intervalMs);
    this.timer.unref?.();
    this.sample();
  }

  stop(): ProcessReport {
    this.sample();
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.t1 = performance.now();
    return this.report();
  }

  report(): ProcessReport {
    let cpu = 0;
    let window = 0;
    for (const [pid, v] of this.lastCpu) {
      cpu += v;
      window += v - (this.baseCpu.get(pid) ?? 0);
    }
    const seconds = ((this.t1 || performance.now()) - this.t0) / 1000;
    return {
      pid: this.pid,
      processes: this.lastCpu.size,
      cpu_ms: cpu,
      cpu_ms_window: window,
      cpu_cores_window: seconds > 0 ? window / 1000 / seconds : 0,
      peak_rss_mb: this.peakBytes / (1024 * 1024),
    };
  }
}
