#!/usr/bin/env python3
"""GRPO steps of the learner on a Hugging Face model with a LoRA adapter, timed.

    python3 bench/hf_lora_step.py --shape qwen2-0.5b --batch 16 --seq 1024     (a CUDA machine: torch 2.x,
        transformers, peft)
    python3 bench/hf_lora_step.py --shape tiny --batch 2 --seq 64 --device cpu  (a CPU smoke test)

The learner's real path: a random-initialised Qwen2ForCausalLM of the shape (bench/hf_logprob_check.py
writes it once into --model-dir and reuses it) loaded by hf_backend.HFBackend.load with
`lora: {r: 16, alpha: 32, target_modules: "all-linear"}` (peft; float32 base, bf16 autocast on CUDA, the
packing check), RLTrainer built as the service's `load` builds it (the reference: "swap", the adapter's
snapshot swapped in over the shared base). The batch is bench/learner_gpu.py's: `batch` random sequences of
`seq` tokens, the first quarter prompt (no loss), one random advantage per sequence, on-policy old logprobs
(RLTrainer.score). The step is RLTrainer.train: GRPO (PPO clip 0.2, beta 0.04 k3 KL to the reference),
one epoch, one minibatch, fused AdamW on the adapter only, no gradient clipping.

Reported (one JSON line): step_s (median of --repeats steps after --warmup), tokens/s (batch · seq per
step), trainable and total parameters, peak CUDA memory, the last step's loss / kl, and two checks: the base
weights are bit-for-bit unchanged after the steps, and the adapter did change. Exit status 1 when a check
fails (or the loss is not finite).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "learner"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no bench/__pycache__ from importing the sibling scripts

import torch  # noqa: E402

import hf_logprob_check as hlc  # noqa: E402  (the random checkpoint, the learner's load)
from learner_gpu import naive_batch, timer  # noqa: E402  (CUDA events on CUDA, perf_counter on the CPU; median)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2-0.5b", choices=sorted(hlc.SHAPES))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--targets", default="all-linear")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--micro-batch", type=int, default=0, help="sequences per forward/backward (0: the batch)")
    p.add_argument("--pack", choices=["auto", "on", "off"], default="auto",
                   help="auto: what load decides (the packing check); on/off: override the adapter's choice")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model-dir", help="the random checkpoint (default: $TMPDIR/mcp-gym-random-qwen2-<shape>)")
    p.add_argument("--threads", type=int)
    a = p.parse_args()
    t_start = time.perf_counter()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available to this torch")
    try:
        import peft
    except Exception as e:
        print(json.dumps({"bench": "hf_lora_step", "pass": False, "error": f"peft is not importable: {e}"}))
        print("FAIL (peft is not importable by this Python)")
        return 1
    device = torch.device(a.device)
    model_dir, make_s = hlc.ensure_checkpoint(a.model_dir or hlc.default_model_dir(a.shape), a.shape, a.device)
    lora = {"r": a.r, "alpha": a.alpha, "target_modules": a.targets}
    t0 = time.perf_counter()
    backend, trainer = hlc.load_learner(model_dir, a.device, lora=lora)
    load_s = time.perf_counter() - t0
    model = backend.model
    if a.pack != "auto":
        backend.adapter.pack = a.pack == "on"
    named = list(model.named_parameters())
    trainable = sum(t.numel() for _, t in named if t.requires_grad)
    total = sum(t.numel() for _, t in named)
    base0 = {n: t.detach().clone() for n, t in named if not t.requires_grad}
    lora0 = {n: t.detach().clone() for n, t in named if t.requires_grad}

    from mcp_gym_learner.rl import RLConfig

    V = backend.adapter.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (a.batch, a.seq), generator=g)
    adv = torch.randn(a.batch, generator=g).double()
    batch = naive_batch(ids, adv, a.seq)  # learner_gpu.py's (the naive step's) mask: no loss on the first quarter
    cfg = RLConfig(loss="grpo", clip_low=a.epsilon, clip_high=a.epsilon, beta=a.beta, entropy_coef=0.0, epochs=1,
                   minibatch_size=0, micro_batch_size=a.micro_batch or a.batch, max_grad_norm=0.0, lr=a.lr,
                   weight_decay=0.01, total_steps=0, warmup_steps=0)
    batch.old = [t.double() for t in trainer.score(batch, cfg)]  # on-policy
    last = {}

    def step():
        last.update(trainer.train(batch, cfg)["metrics"])

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    seconds = timer(device)(step, a.repeats, a.warmup)
    steps_wall = time.perf_counter() - t0
    with torch.no_grad():
        after = dict(model.named_parameters())
        base_changed = [n for n, t in base0.items() if not torch.equal(t, after[n].detach())]
        lora_changed = sum(1 for n, t in lora0.items() if not torch.equal(t, after[n].detach()))
    loss = last.get("loss")
    finite = loss is not None and math.isfinite(loss)
    ok = not base_changed and lora_changed > 0 and finite
    tokens = a.batch * a.seq
    res = {"bench": "hf_lora_step", "impl": "mcp-gym-learner+lora", "shape": a.shape, "device": str(device),
           "batch": a.batch, "seq": a.seq, "step_s": round(seconds, 4), "tokens_per_s": round(tokens / seconds),
           "steps_timed": a.repeats, "warmup": a.warmup,
           "trainable_params": trainable, "total_params": total, "trainable_pct": round(100 * trainable / total, 3),
           "lora": {"r": a.r, "alpha": a.alpha, "target_modules": a.targets},
           "lora_tensors": len(lora0), "lora_tensors_changed": lora_changed,
           "base_tensors": len(base0), "base_unchanged": not base_changed, "base_changed": base_changed[:5],
           "peak_mem_gib": (round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if device.type == "cuda" else None),
           "loss": loss, "kl": last.get("kl"), "ratio_mean": last.get("ratio_mean"),
           "reference_mode": trainer.reference.mode, "pack": bool(backend.adapter.pack),
           "attn_implementation": backend.adapter.attn_implementation,
           "autocast": str(backend.autocast_dtype).replace("torch.", "") if backend.autocast_dtype else None,
           "micro_batch_size": cfg.micro_batch_size, "load_s": round(load_s, 1), "make_checkpoint_s": round(make_s, 1),
           "steps_wall_s": round(steps_wall, 1), "seconds": round(time.perf_counter() - t_start, 1),
           "torch": torch.__version__, "peft": peft.__version__, "pass": ok}
    print(json.dumps(res), flush=True)
    why = [] if ok else (["base weights changed"] if base_changed else []) + \
        (["the adapter did not change"] if lora_changed == 0 else []) + ([] if finite else ["loss not finite"])
    print(f"{'PASS' if ok else 'FAIL'} LoRA r{a.r}: {res['step_s']} s/step, {res['tokens_per_s']} tokens/s, "
          f"{trainable} trainable of {total} ({res['trainable_pct']}%), base unchanged {not base_changed}, "
          f"adapter tensors changed {lora_changed}/{len(lora0)}" + (f" — {'; '.join(why)}" if why else ""), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
