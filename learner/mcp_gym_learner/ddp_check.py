"""Train steps under torchrun through the learner's own protocol handler, and write the resulting weights.

    torchrun --nproc_per_node 2 -m mcp_gym_learner.ddp_check --model-dir D --cases CASES.json --out OUT.pt
    (python3 -m torch.distributed.run ... where torchrun is not on PATH)

CASES.json: [{"batch": TrainBatch, "config": {...}, "steps": n?}, ...]. For each case every rank loads the
model afresh (`load`), runs `train` `steps` times (default 1) on the batch (DDP: each rank takes its shard of
every minibatch, the gradients are averaged by DDP, the loss normalised by the whole minibatch), and rank 0
collects the weights and the metrics. OUT.pt: {"states": [state_dict per case (with a GAE value head: its
"value_head.*" too)], "metrics": [[...] per case],
"world_size": n}. Run without torchrun it is the single-process reference (tests/test_rl_process.py compares them).
"""

from __future__ import annotations

import argparse
import json
import sys


def run(model_dir: str, cases, threads: int = 1, device: str = "cpu"):
    from .distributed import current
    from .service import LearnerService

    learner = LearnerService()
    states, metrics = [], []
    for n, case in enumerate(cases):
        r = learner.handle(json.dumps({"cmd": "load", "model_dir": model_dir, "device": device, "threads": threads}))
        if not r["ok"]:
            raise SystemExit(f"case {n}: load: {r['error']}")
        ms = []
        for _ in range(int(case.get("steps", 1))):
            r = learner.handle(json.dumps({"cmd": "train", "batch": case["batch"], "config": case["config"]}))
            if not r["ok"]:
                raise SystemExit(f"case {n}: train: {r['error']}")
            ms.append(r["result"]["metrics"])
        state = {k: v.detach().cpu().clone() for k, v in learner.model.state_dict().items()}
        head = learner.trainer.value_head  # PPO with GAE: the value head too (prefixed, beside the model's)
        if head is not None:
            state.update({f"value_head.{k}": v.detach().cpu().clone() for k, v in head.state_dict().items()})
        states.append(state)
        metrics.append(ms)
    return states, metrics, current()[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m mcp_gym_learner.ddp_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--cases", required=True, help="JSON file: a list of {batch, config, steps?}")
    p.add_argument("--out", required=True, help="where rank 0 writes {states, metrics, world_size} (torch.save)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args(argv)
    import torch

    from .distributed import init_from_env, shutdown_group

    rank, world, _ = init_from_env()
    with open(a.cases, "r", encoding="utf-8") as f:
        cases = json.load(f)
    states, metrics, world = run(a.model_dir, cases, a.threads, a.device)
    if rank == 0:
        torch.save({"states": states, "metrics": metrics, "world_size": world}, a.out)
        print(json.dumps({"world_size": world, "cases": len(cases),
                          "grad_norm": [m[-1]["grad_norm"] for m in metrics]}), flush=True)
    # Both ranks reach the end before the group is torn down: a rank that leaves while rank 0 still writes
    # can abort in gloo's teardown ("terminate called without an active exception", SIGABRT).
    torch.distributed.barrier()
    shutdown_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
