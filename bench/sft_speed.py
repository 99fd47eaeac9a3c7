"""SFT throughput of the learner's cheaper `sft` modes beside exact SFT of every weight, on the same
demonstrations, in one run: the subject beside its baseline, and the ratio.

    .venv/bin/python bench/sft_speed.py MODEL_DIR DATA.jsonl --subject prompt_grad | train_layers
        [--layers 10] [--examples 16] [--batch 8] [--steps 2]

Subjects (learner/PROTOCOL.md, `sft`):
  prompt_grad    `prompt_grad: false`: each prompt runs once without the gradient (its keys and values kept)
  train_layers   `train_layers: N` (--layers): only the top N decoder layers train; the backward pass stops there
DATA: the {"ids", "mask"} JSONL an SFT run writes (runSft: <out>/sft-data.jsonl), e.g. the BFCL job's
demonstrations (long tool lists, short answers). Each arm loads the model fresh and runs the same steps; the
figure is the learner's own tokens/s over the whole sequences (the same tokens in both arms). The first loss
is the same in both arms (the same weights, the same first batch): only the backward pass differs."""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))

from mcp_gym_learner.service import LearnerService  # noqa: E402


def arm(model, data, steps, batch, fields):
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": model, "device": "cpu"}))
    assert r["ok"], r
    r = svc.handle(json.dumps({"cmd": "sft", "data": data, "steps": steps, "batch_size": batch, "lr": 1e-5, **fields}))
    assert r["ok"], r
    return r["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--subject", choices=["prompt_grad", "train_layers"], required=True)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--examples", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    fields = {"prompt_grad": False} if a.subject == "prompt_grad" else {"train_layers": a.layers}
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
        base = arm(a.model, data, a.steps, a.batch, {})
        subj = arm(a.model, data, a.steps, a.batch, fields)
    name = ", ".join(f"{k} {json.dumps(v)}" for k, v in fields.items())
    print(f"{'arm':<30}{'tokens/s':>10}{'seconds':>10}{'loss_first':>12}")
    for label, r in [("exact, every weight (baseline)", base), (name, subj)]:
        print(f"{label:<30}{r['tokens_per_s']:>10.1f}{r['seconds']:>10.1f}{r['loss_first']:>12.4f}")
    ratio = subj["tokens_per_s"] / base["tokens_per_s"]
    print(f"ratio: {ratio:.2f}x")
    print(json.dumps({"subject": fields, "baseline_tok_s": base["tokens_per_s"], "subject_tok_s": subj["tokens_per_s"],
                      "ratio": ratio, "loss_first": [base["loss_first"], subj["loss_first"]]}))


if __name__ == "__main__":
    main()
