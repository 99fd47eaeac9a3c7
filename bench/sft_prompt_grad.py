"""SFT throughput with and without the gradient through the prompt (the learner's `sft` request, `prompt_grad`),
on the same demonstrations, in one run: the subject (prompt_grad false) beside its baseline (true), and the ratio.

    .venv/bin/python bench/sft_prompt_grad.py MODEL_DIR DATA.jsonl [--examples 32] [--batch 8] [--steps 3]

DATA: the {"ids", "mask"} JSONL an SFT run writes (runSft: <out>/sft-data.jsonl), e.g. the BFCL job's
demonstrations (long tool lists, short answers). Each arm loads the model fresh and runs the same steps; the
figure is the learner's own tokens/s over the whole sequences (the same tokens in both arms)."""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))

from mcp_gym_learner.service import LearnerService  # noqa: E402


def arm(model, data, steps, batch, prompt_grad):
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": model, "device": "cpu"}))
    assert r["ok"], r
    r = svc.handle(json.dumps({"cmd": "sft", "data": data, "steps": steps, "batch_size": batch, "lr": 1e-5,
                               "prompt_grad": prompt_grad}))
    assert r["ok"], r
    return r["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--examples", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    with open(a.data) as f:
        lines = [l for l in f if l.strip()][: a.examples]
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "sft.jsonl")
        with open(data, "w") as f:
            f.writelines(lines)
        rows = [json.loads(l) for l in lines]
        tok = sum(len(r["ids"]) for r in rows) / len(rows)
        scored = sum(sum(r["mask"][1:]) for r in rows) / len(rows)
        print(f"{len(rows)} examples, {tok:.0f} tokens each ({scored:.0f} scored), {a.steps} steps of {a.batch}")
        base = arm(a.model, data, a.steps, a.batch, True)
        subj = arm(a.model, data, a.steps, a.batch, False)
    print(f"{'arm':<28}{'tokens/s':>10}{'seconds':>10}{'loss_first':>12}")
    for name, r in [("prompt_grad true (baseline)", base), ("prompt_grad false", subj)]:
        print(f"{name:<28}{r['tokens_per_s']:>10.1f}{r['seconds']:>10.1f}{r['loss_first']:>12.4f}")
    ratio = subj["tokens_per_s"] / base["tokens_per_s"]
    print(f"ratio: {ratio:.2f}x")
    print(json.dumps({"baseline_tok_s": base["tokens_per_s"], "subject_tok_s": subj["tokens_per_s"], "ratio": ratio,
                      "loss_first": [base["loss_first"], subj["loss_first"]]}))


if __name__ == "__main__":
    main()
