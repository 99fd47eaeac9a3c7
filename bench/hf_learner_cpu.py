#!/usr/bin/env python3
"""Learner tokens/s on the CPU for a Hugging Face checkpoint: one GRPO step of the learner's own training
path, as a `load` + `train` of the learner service runs it (bench/hf-sampling.ts calls this; it runs alone
too):

    PYTHONPATH=learner .venv/bin/python bench/hf_learner_cpu.py --model-dir DIR [--threads 2] [--batch 8] [--seq 256]

The model is loaded by `HFBackend.load` (float32 on the CPU, its attention choice, the packing check, packed
rows) and trained by `RLTrainer` with the reference the service makes (a frozen copy: beta > 0, so its
forward is part of the step). The batch is built like bench/learner_gpu.py's: `batch` sequences of `seq`
random token ids, the first quarter prompt (no loss), one advantage per sequence, old logprobs from the
model itself (on-policy); PPO clip 0.2, beta 0.04, AdamW lr 1e-6, no gradient clipping, one micro-batch.

tokens/s = batch · seq / step seconds (every token of every sequence; the scored ones are 3/4 of them):
the median of `--repeats` steps after `--warmup` steps. Threads: the learner's own configure_threads(n)
(torch.set_num_threads, or the OpenBLAS pool). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "learner"))

import torch  # noqa: E402

from learner_gpu import naive_batch  # noqa: E402  (the naive step's batch: no loss on the first quarter)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="bf16: the step under torch.autocast('cpu', bfloat16) (float32 parameters and optimizer)")
    a = p.parse_args()

    from mcp_gym_learner.hf_backend import HFBackend
    from mcp_gym_learner.rl import RLConfig, RLTrainer
    from mcp_gym_learner.runtime import configure_threads, tune_malloc

    tune_malloc()  # as the learner process does
    threads = configure_threads(a.threads)
    t0 = time.perf_counter()
    backend = HFBackend.load(a.model_dir, {}, "cpu", "cpu")
    trainer = RLTrainer(backend.model, backend.adapter, autocast_dtype=backend.autocast_dtype,
                        reference=backend.reference_mode("copy"))
    load_s = time.perf_counter() - t0
    params = sum(t.numel() for t in backend.model.parameters())
    V = backend.adapter.vocab_size

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (a.batch, a.seq), generator=g)
    adv = torch.randn(a.batch, 1, generator=g, dtype=torch.float64)
    batch = naive_batch(ids, adv.reshape(-1), a.seq)
    cfg = RLConfig(loss="grpo", clip_low=0.2, clip_high=0.2, beta=0.04, entropy_coef=0.0, epochs=1,
                   minibatch_size=0, micro_batch_size=a.batch, max_grad_norm=0.0, lr=1e-6, weight_decay=0.01,
                   total_steps=0, warmup_steps=0)
    batch.old = [t.double() for t in trainer.score(batch, cfg)]

    times = []
    last = {}
    for i in range(a.warmup + a.repeats):
        t = time.perf_counter()
        if a.autocast == "bf16":
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                last = trainer.train(batch, cfg)["metrics"]
        else:
            last = trainer.train(batch, cfg)["metrics"]
        dt = time.perf_counter() - t
        if i >= a.warmup:
            times.append(dt)
        print(json.dumps({"step": i + 1, "warmup": i < a.warmup, "step_s": round(dt, 3),
                          "tokens_per_s": round(a.batch * a.seq / dt, 1)}), flush=True)
    step_s = sorted(times)[len(times) // 2]
    tokens = a.batch * a.seq
    # FLOPs of the step, attention aside: the policy's forward + backward (6 per weight per token) and the
    # reference's forward (2). The tied embedding matrix counts once, as the head's matmul (a lookup is free).
    head = V * backend.model.config.hidden_size
    flops = tokens * 8 * params
    out = {"bench": "hf_learner_cpu", "model_dir": a.model_dir, "params": params, "vocab_size": V,
           "head_params": head, "batch": a.batch, "seq": a.seq, "tokens": tokens, "threads": threads,
           "attn_implementation": backend.adapter.attn_implementation, "pack": backend.adapter.pack,
           "load_s": round(load_s, 2), "step_s": round(step_s, 3), "step_s_all": [round(t, 3) for t in times],
           "tokens_per_s": round(tokens / step_s, 1), "gflop_s": round(flops / step_s / 1e9, 2),
           "loss": last.get("loss"), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "autocast": a.autocast, "torch": torch.__version__}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
