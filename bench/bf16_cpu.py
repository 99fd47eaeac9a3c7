"""bf16 on this CPU (issue 49, point 5): why the learner's bf16 autocast ran 0.62x of float32 here, and whether bf16
weights with float32 master copies would differ.

    .venv/bin/python bench/bf16_cpu.py [--threads 2] [--tokens 2048] [--reps 5]

One of SmolLM2-135M's MLP blocks (hidden 576, intermediate 1536: gate, up and down projections, SiLU), forward and
backward over --tokens tokens, three ways, side by side:
  float32            float32 weights and activations (the learner's default);
  autocast bf16      float32 weights, torch.autocast("cpu", bfloat16): each linear casts its weight and input to
                     bf16 (every forward, and again in the backward), computes in bf16, returns bf16;
  bf16 weights       weights kept in bf16 (as float32 master copies would leave them between optimizer steps: one
                     cast per step, not per use), activations in bf16, no autocast.
And the bare matrix product [tokens, 576] x [576, 1536] in float32 and in bf16.

The CPU's flags decide: without avx512_bf16 or AMX (amx_bf16) there is no bf16 dot-product instruction, and
oneDNN computes a bf16 product by converting to float32, so bf16 can at best match float32 and pays the
conversions. Last line: one JSON object with every figure and the ratios (float32 seconds / the other's).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F


def cpu_flags() -> list:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return [x for x in line.split(":", 1)[1].split() if "bf16" in x or "amx" in x or x.startswith("avx512")]
    except OSError:
        pass
    return []


def timed(fn, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d, f, n = 576, 1536, a.tokens
    w32 = {k: (torch.randn(shape) * 0.02).requires_grad_(True) for k, shape in (("gate", (f, d)), ("up", (f, d)), ("down", (d, f)))}
    w16 = {k: v.detach().to(torch.bfloat16).requires_grad_(True) for k, v in w32.items()}
    x32 = torch.randn(n, d)

    def mlp(x, w):
        return F.linear(F.silu(F.linear(x, w["gate"])) * F.linear(x, w["up"]), w["down"])

    def step(x, w, autocast: bool):
        for p in w.values():
            p.grad = None
        xx = x.clone().requires_grad_(True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = mlp(xx, w)
        else:
            y = mlp(xx, w)
        y.float().square().mean().backward()

    fp32 = timed(lambda: step(x32, w32, False), a.reps)
    auto = timed(lambda: step(x32, w32, True), a.reps)
    bf16w = timed(lambda: step(x32.to(torch.bfloat16), w16, False), a.reps)
    A32, B32 = torch.randn(n, d), torch.randn(d, f)
    A16, B16 = A32.to(torch.bfloat16), B32.to(torch.bfloat16)
    mm32 = timed(lambda: A32 @ B32, a.reps * 4)
    mm16 = timed(lambda: A16 @ B16, a.reps * 4)
    flops_step = 3 * 2 * 3 * n * d * f  # three products, forward + two in the backward
    out = {
        "cpu_flags_bf16_amx_avx512": cpu_flags(),
        "torch": torch.__version__,
        "threads": a.threads,
        "tokens": n,
        "mlp_fwd_bwd_seconds": {"float32": fp32, "autocast_bf16": auto, "bf16_weights": bf16w},
        "mlp_gflops": {"float32": flops_step / fp32 / 1e9, "autocast_bf16": flops_step / auto / 1e9, "bf16_weights": flops_step / bf16w / 1e9},
        "matmul_seconds": {"float32": mm32, "bf16": mm16},
        "ratio_vs_float32": {"autocast_bf16": fp32 / auto, "bf16_weights": fp32 / bf16w, "matmul_bf16": mm32 / mm16},
    }
    print(f"CPU flags (bf16, amx, avx512): {out['cpu_flags_bf16_amx_avx512'] or 'none'}; torch {torch.__version__}, {a.threads} threads")
    print(f"{'MLP block fwd+bwd, ' + str(n) + ' tokens':40} {'seconds':>9} {'GFLOP/s':>9} {'x float32':>10}")
    for k in ("float32", "autocast_bf16", "bf16_weights"):
        s = out["mlp_fwd_bwd_seconds"][k]
        print(f"{k:40} {s:9.4f} {out['mlp_gflops'][k]:9.1f} {fp32 / s:10.2f}")
    print(f"{'matmul [' + str(n) + ',576]x[576,1536]':40} float32 {mm32 * 1e3:.2f} ms, bf16 {mm16 * 1e3:.2f} ms ({mm32 / mm16:.2f}x)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
