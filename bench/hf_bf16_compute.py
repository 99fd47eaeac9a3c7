"""The Hugging Face learner with a bf16 compute copy (issue 49, point 5): one GRPO `train` call on sequences an RL
step of the real-model job sampled, with float32 weights throughout (the baseline: `load` as the job did before)
beside the same call with `compute_dtype: "bfloat16"` (compute_copy.py: forwards and backwards on a bf16 copy of
the weights, the gradient handed to float32 master weights, AdamW in float32), on the same batch and the same
starting weights, taking turns --reps times in fresh services. Prints the seconds of each, seconds per 1k tokens as
the job counts them (every token of the sequences kept, prompts included), their ratio, and how far the bf16 arm
is from the float32 one: the cosine between the two updates (weights after minus before) and their relative
difference, and the logprobs of the sampled tokens against the sampler's.

    .venv/bin/python bench/hf_bf16_compute.py MODEL_DIR TRAJECTORIES.jsonl [--groups 8] [--skip 0] [--reps 2]

The batch is bench/hf_trie.py's (load_batch): the first --groups groups after --skip whose rewards differ."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from hf_trie import batch_args, load_batch  # noqa: E402

from mcp_gym_learner.service import LearnerService  # noqa: E402


def flat(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def service(model, compute):
    """A fresh learner service with the model loaded, in float32 or with the bf16 compute copy."""
    svc = LearnerService()
    req = {"cmd": "load", "model_dir": model, "device": "cpu", **({"compute_dtype": "bfloat16"} if compute else {})}
    r = svc.handle(json.dumps(req))
    assert r["ok"], r
    return svc


def cosine(x, y):
    x, y = x.double(), y.double()
    return float(x @ y / (x.norm() * y.norm()))


def arm(model, batch, lr, compute):
    svc = service(model, compute)
    w0 = flat(svc.backend.model)
    cfg = {"loss": "grpo", "lr": lr, "warmup_steps": 0, "beta": 0.0, "epochs": 1, "minibatch_size": 0,
           "micro_batch_size": 64}
    t = time.perf_counter()
    r = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))
    dt = time.perf_counter() - t
    assert r["ok"], r
    m = r["result"]["metrics"] if "result" in r else r.get("metrics", {})
    return dt, flat(svc.backend.model) - w0, m


def gradient(model, batch, compute):
    """The float32 master gradient of the GRPO loss on `batch` (RLTrainer.gradients: no step)."""
    from mcp_gym_learner.batch import parse_batch
    from mcp_gym_learner.rl_config import parse_config

    svc = service(model, compute)
    tr = svc.trainer
    cfg = parse_config({"loss": "grpo", "beta": 0.0, "micro_batch_size": 64})
    tr.gradients(parse_batch(batch, tr.adapter.vocab_size, tr.adapter.max_seq_len), cfg)
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                      for p in svc.backend.model.parameters()])


def main():
    ap = batch_args()
    ap.add_argument("--grad-groups", type=int, default=2, help="groups of the gradient comparison (0: none)")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("MCP_GYM_THREADS", "2")))
    batch, kept = load_batch(a.trajectories, a.groups, a.skip)
    tokens = sum(len(s) for s in batch["ids"])
    print(f"{kept} groups, {len(batch['ids'])} sequences, {tokens} tokens as the job counts them")
    times = {False: [], True: []}
    upd, metrics = {}, {}
    for r in range(a.reps):
        for compute in ((False, True) if r % 2 == 0 else (True, False)):
            dt, d, m = arm(a.model, batch, a.lr, compute)
            times[compute].append(dt)
            upd[compute], metrics[compute] = d, m
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    cos = cosine(upd[False], upd[True])
    rel = float((upd[False] - upd[True]).norm() / upd[False].norm())
    print(f"{'learner':<40}{'seconds':>10}{'s per 1k tokens':>18}   runs")
    for k, name in ((False, "float32 weights (before)"), (True, "bf16 compute copy, float32 master")):
        print(f"{name:<40}{med[k]:>10.1f}{1000 * med[k] / tokens:>18.2f}   {', '.join(f'{x:.1f}' for x in times[k])}")
    print(f"ratio: {med[False] / med[True]:.2f}x; the updates' cosine {cos:.4f}, relative difference {rel:.3f}")
    gcos = grel = None
    if a.grad_groups > 0:
        gb, _ = load_batch(a.trajectories, a.grad_groups, a.skip)
        g32, g16 = gradient(a.model, gb, False), gradient(a.model, gb, True)
        gcos = cosine(g32, g16)
        grel = float((g32 - g16).norm() / g32.norm())
        print(f"the gradient on {a.grad_groups} groups: cosine {gcos:.4f}, relative difference {grel:.3f} "
              f"(norms {float(g32.norm()):.4g} float32, {float(g16.norm()):.4g} bf16 copy)")
    keys = ("loss", "pg_loss", "clip_frac", "ratio_mean")
    for k, name in ((False, "float32"), (True, "bf16 copy")):
        print(f"  {name}: " + ", ".join(f"{x} {metrics[k][x]:.4g}" for x in keys if isinstance(metrics[k].get(x), float)))
    print(json.dumps({"groups": kept, "sequences": len(batch["ids"]), "tokens": tokens, "baseline_s": med[False],
                      "subject_s": med[True], "baseline_s_per_1k": 1000 * med[False] / tokens,
                      "subject_s_per_1k": 1000 * med[True] / tokens, "ratio": med[False] / med[True],
                      "update_cosine": cos, "update_rel_diff": rel,
                      "grad_cosine": gcos, "grad_rel_diff": grel}))


if __name__ == "__main__":
    main()
