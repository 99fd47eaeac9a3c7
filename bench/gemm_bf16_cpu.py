#!/usr/bin/env python3
"""float32 against bf16 matrix products on the CPU at SmolLM2-135M's shapes (issue 49, point 5): `F.linear` forward
and backward (the input's and the weight's gradients), each dtype in turn, 2 warm-up runs then the mean of --reps;
prints each shape's milliseconds and GFLOP/s (6·M·K·N per forward and backward) side by side and the bf16 speedup,
then one JSON line.

    .venv/bin/python bench/gemm_bf16_cpu.py [--threads 2] [--reps 8] [--tokens 4096]
"""

import argparse
import json
import time

import torch


def run(dtype, M, K, N, reps):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(dtype).requires_grad_()
    w = torch.randn(N, K, generator=g).to(dtype).requires_grad_()
    for _ in range(2):
        torch.nn.functional.linear(x, w).sum().backward()
    t = time.perf_counter()
    for _ in range(reps):
        torch.nn.functional.linear(x, w).sum().backward()
    dt = (time.perf_counter() - t) / reps
    return dt, 6 * M * K * N / dt / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=4096)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    T = a.tokens
    # the MLP's up and down projections, the attention's q/o projections, the head on a quarter of the tokens
    shapes = [(T, 576, 1536), (T, 1536, 576), (T, 576, 576), (T // 4, 576, 49152)]
    out = []
    for M, K, N in shapes:
        f32, g32 = run(torch.float32, M, K, N, a.reps)
        b16, g16 = run(torch.bfloat16, M, K, N, a.reps)
        print(f"{M} x {K} -> {N}: float32 {1e3 * f32:.1f} ms ({g32:.0f} GFLOP/s), bf16 {1e3 * b16:.1f} ms "
              f"({g16:.0f} GFLOP/s), bf16 {f32 / b16:.2f}x", flush=True)
        out.append({"shape": [M, K, N], "float32_ms": 1e3 * f32, "bf16_ms": 1e3 * b16, "float32_gflops": g32,
                    "bf16_gflops": g16, "speedup": f32 / b16})
    print(json.dumps({"threads": a.threads, "torch": torch.__version__, "shapes": out}))


if __name__ == "__main__":
    main()
