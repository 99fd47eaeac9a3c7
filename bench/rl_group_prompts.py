"""One GRPO `train` call on a Hugging Face model, its micro-batches cut by prompt (each group's prompt runs once:
batch.micro_batches_by_prompt, the default) beside the baseline cut by length only (MCP_GYM_HF_GROUP_PROMPTS=0),
on the same batch and the same weights, in one run; prints both times, their ratio and the largest difference of
the updated weights (the gradients are the same; the updates agree to float32 rounding).

    .venv/bin/python bench/rl_group_prompts.py MODEL_DIR [--tasks 8] [--group 4] [--prompt 600] [--completion 50]

The default shape is a step of the job on BFCL (docs/bfcl.md): 8 tasks, 4 samples each, prompts of about
600 tokens (a tool list), answers of about 50."""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))

import torch  # noqa: E402

from mcp_gym_learner.service import LearnerService  # noqa: E402


def make_batch(tasks, group, prompt, completion, vocab, seed=0):
    rng = random.Random(seed)
    ids, mask, old, adv, gid = [], [], [], [], []
    for t in range(tasks):
        p = [rng.randrange(100, vocab) for _ in range(prompt + rng.randrange(-prompt // 5, prompt // 5))]
        for s in range(group):
            c = [rng.randrange(100, vocab) for _ in range(completion + rng.randrange(-completion // 2, completion // 2))]
            ids.append(p + c)
            mask.append([0] * len(p) + [1] * len(c))
            old.append([0.0] * len(p) + [-rng.random() * 4 for _ in c])
            adv.append(rng.choice([-1.0, 1.0]) * (0.5 + rng.random()))
            gid.append(f"t{t}")
    return {"ids": ids, "mask": mask, "old_logprobs": old, "advantages": adv, "group_ids": gid}


def arm(model, batch, grouped):
    os.environ["MCP_GYM_HF_GROUP_PROMPTS"] = "1" if grouped else "0"
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": model, "device": "cpu"}))
    assert r["ok"], r
    cfg = {"loss": "grpo", "lr": 1e-5, "warmup_steps": 0, "beta": 0.0, "epochs": 1, "minibatch_size": 0}
    t = time.perf_counter()
    r = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))
    dt = time.perf_counter() - t
    assert r["ok"], r
    assert r["result"]["metrics"].get("lr", 1) > 0, r["result"]["metrics"]
    w = torch.cat([p.detach().reshape(-1) for p in svc.backend.model.parameters()])
    return dt, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=600)
    ap.add_argument("--completion", type=int, default=50)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    batch = make_batch(a.tasks, a.group, a.prompt, a.completion, vocab)
    tokens = sum(len(s) for s in batch["ids"])
    print(f"{a.tasks} tasks x {a.group} samples, {tokens} tokens ({a.prompt} prompt, {a.completion} answer each)")
    base_s, base_w = arm(a.model, batch, False)
    subj_s, subj_w = arm(a.model, batch, True)
    diff = float((base_w - subj_w).abs().max())
    print(f"{'arm':<34}{'seconds':>10}")
    print(f"{'by length (baseline)':<34}{base_s:>10.1f}")
    print(f"{'by prompt (each prompt once)':<34}{subj_s:>10.1f}")
    print(f"ratio: {base_s / subj_s:.2f}x; largest weight difference after the step: {diff:.2e}")
    print(json.dumps({"baseline_s": base_s, "subject_s": subj_s, "ratio": base_s / subj_s, "max_weight_diff": diff}))


if __name__ == "__main__":
    main()
