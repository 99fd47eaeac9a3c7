"""The CPU's own ceilings, for bench/scaling.ts: what the scaling model's roofline needs on this machine.

    .venv/bin/python bench/scaling_cpu.py [--threads 1,2] [--reps 5] [--matmul 1024] [--copy-mib 256]

Prints one JSON line per thread count:
  {"bench": "cpu_ceiling", "threads": T, "matmul_gflops": ..., "copy_gbps": ..., ...}

- matmul_gflops: float32 torch.mm of two n x n matrices, 2 n^3 FLOPs per call, the median of `reps` timed
  calls (after one warm-up) -- the "peak" the learner's and the sampler's FLOPs are compared with on this CPU.
- copy_gbps: the memory bandwidth a copy of a `copy-mib` MiB float32 tensor reaches (bytes read + bytes
  written, per second; median of `reps`) -- the "HBM bandwidth" of the decode roofline on this CPU.

Measurements, not constants: on a shared 2-core VM they move with the load (loadavg is printed with them).
"""
import argparse
import json
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--reps", type=int, default=5, help="timed repeats per figure (default 5)")
    ap.add_argument("--matmul", type=int, default=1024, help="matrix side n of the matmul (default 1024)")
    ap.add_argument("--copy-mib", type=int, default=256, help="MiB copied per bandwidth repeat (default 256)")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        print(f"--threads: expected comma-separated integers, got {a.threads!r}", file=sys.stderr)
        return 2
    if any(t < 1 for t in threads) or a.reps < 1 or a.matmul < 16 or a.copy_mib < 1:
        print("--threads >= 1 each, --reps >= 1, --matmul >= 16, --copy-mib >= 1", file=sys.stderr)
        return 2
    import torch

    n = a.matmul
    x = torch.randn(n, n)
    y = torch.randn(n, n)
    src = torch.empty(a.copy_mib * (1 << 20) // 4).uniform_()
    dst = torch.empty_like(src)
    for t in threads:
        torch.set_num_threads(t)
        torch.mm(x, y)
        mm = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            torch.mm(x, y)
            mm.append(time.perf_counter() - t0)
        dst.copy_(src)
        cp = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            dst.copy_(src)
            cp.append(time.perf_counter() - t0)
        mm_s = statistics.median(mm)
        cp_s = statistics.median(cp)
        print(json.dumps({
            "bench": "cpu_ceiling",
            "threads": t,
            "matmul_n": n,
            "matmul_gflops": round(2 * n ** 3 / mm_s / 1e9, 2),
            "matmul_gflops_runs": [round(2 * n ** 3 / s / 1e9, 2) for s in mm],
            "copy_mib": a.copy_mib,
            "copy_gbps": round(2 * src.numel() * 4 / cp_s / 1e9, 2),
            "copy_gbps_runs": [round(2 * src.numel() * 4 / s / 1e9, 2) for s in cp],
            "torch": torch.__version__,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
