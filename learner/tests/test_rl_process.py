"""The learner as a process: bit-exact resume after SIGKILL, DDP over 2 processes (gloo), HTTP with a token."""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import torch

from mcp_gym_learner.model import GPT
from mcp_gym_learner.service import LearnerService

from _rl_helpers import LEARNER, TINY, Client, ddp_and_one_process, sampled_batch


def _make_model(tmp_path, name="m", seed=1):
    L = LearnerService()
    r = L.handle(json.dumps({"cmd": "create", "model_dir": str(tmp_path / name), "architecture": TINY,
                             "seed": seed}))
    assert r["ok"], r
    return str(tmp_path / name)


def _weights(model_dir):
    return torch.load(os.path.join(model_dir, "weights.pt"))


def test_resume_after_sigkill_is_bit_exact(tmp_path):
    model_dir = _make_model(tmp_path)
    pristine = str(tmp_path / "pristine")
    shutil.copytree(model_dir, pristine)
    sampler = GPT(dict(TINY, seed=1))
    batches = [sampled_batch(sampler, B=7, seed=100 + s, per_token=(s % 2 == 1)) for s in range(4)]
    cfg = {"loss": "grpo", "beta": 0.04, "entropy_coef": 0.01, "epochs": 2, "minibatch_size": 3,
           "micro_batch_size": 2, "lr": 1e-3, "warmup_steps": 1, "total_steps": 4, "ref_reset_every": 3,
           "weight_decay": 0.01, "seed": 5}
    ckpt = str(tmp_path / "ckpt" / "step-00002")

    # A: two steps, a checkpoint, then killed in the middle of the third step
    a = Client(str(tmp_path))
    try:
        a.ok("load", model_dir=model_dir, device="cpu", threads=1)
        for s in range(2):
            assert a.ok("train", batch=batches[s], config=cfg)["step"] == s + 1
            a.ok("save")  # the run directory's model moves on, like the training loop's export
        info = a.ok("checkpoint_save", dir=ckpt)
        assert info["step"] == 2 and os.path.exists(os.path.join(ckpt, "trainer.pt"))
        a.send("train", batch=batches[2], config=cfg)
        a.p.send_signal(signal.SIGKILL)
        a.p.wait()
        assert a.p.returncode == -signal.SIGKILL
    finally:
        a.close()
    assert not [n for n in os.listdir(tmp_path / "ckpt") if n != "step-00002"]  # no temporary left behind

    # B: a new process restarts from the checkpoint and finishes the run
    b = Client(str(tmp_path))
    try:
        b.ok("load", model_dir=model_dir, device="cpu", threads=1)
        assert b.ok("checkpoint_load", dir=ckpt)["step"] == 2
        assert b.ok("state")["rl_steps"] == 2
        m_b = [b.ok("train", batch=batches[s], config=cfg)["metrics"] for s in (2, 3)]
        b.ok("save", model_dir=str(tmp_path / "resumed"))
    finally:
        b.close()

    # C: the same run, never interrupted
    c = Client(str(tmp_path))
    try:
        c.ok("load", model_dir=pristine, device="cpu", threads=1)
        m_c = [c.ok("train", batch=batches[s], config=cfg)["metrics"] for s in range(4)][2:]
        c.ok("save", model_dir=str(tmp_path / "straight"))
    finally:
        c.close()

    w_b, w_c = _weights(str(tmp_path / "resumed")), _weights(str(tmp_path / "straight"))
    assert set(w_b) == set(w_c)
    for k in w_b:
        assert torch.equal(w_b[k], w_c[k]), k  # bit for bit
    assert not torch.equal(w_b["tok_emb.weight"], _weights(pristine)["tok_emb.weight"])
    for x, y in zip(m_b, m_c):
        for k in ("loss", "kl", "grad_norm", "lr", "ratio_mean", "ref_reset"):
            assert x[k] == y[k], k
    assert m_b[0]["ref_reset"] is True  # the ProRL reset of step 3 happened after the resume, identically


def test_checkpoint_load_refuses_a_foreign_checkpoint(tmp_path):
    d1 = _make_model(tmp_path, "a")
    L = LearnerService()
    assert L.handle(json.dumps({"cmd": "create", "model_dir": str(tmp_path / "b"),
                                "architecture": dict(TINY, d_model=64), "seed": 1}))["ok"]
    assert L.handle(json.dumps({"cmd": "load", "model_dir": str(tmp_path / "b"), "device": "cpu"}))["ok"]
    assert L.handle(json.dumps({"cmd": "checkpoint_save", "dir": str(tmp_path / "ck")}))["ok"]
    assert L.handle(json.dumps({"cmd": "load", "model_dir": d1, "device": "cpu"}))["ok"]
    before = {k: v.clone() for k, v in L.model.state_dict().items()}
    r = L.handle(json.dumps({"cmd": "checkpoint_load", "dir": str(tmp_path / "ck")}))
    assert not r["ok"] and r["error"].startswith("dir: the checkpoint's"), r
    r = L.handle(json.dumps({"cmd": "checkpoint_load", "dir": str(tmp_path / "nothing")}))
    assert not r["ok"] and r["error"].startswith("dir: "), r
    assert all(torch.equal(before[k], v) for k, v in L.model.state_dict().items())


def test_ddp_two_processes_gloo_match_one_process(tmp_path):
    """torchrun --nproc_per_node 2 (gloo, CPU): each rank takes its shard of every minibatch, DDP averages the
    gradients with the whole minibatch's normalisation: the weights equal the single-process run's within 1e-5."""
    model_dir = _make_model(tmp_path, seed=3)
    sampler = GPT(dict(TINY, seed=3))
    cases = [
        # 7 sequences, minibatches of 3 (3, 3, 1: in the last one rank 1 has nothing), micro-batches of 1
        {"batch": sampled_batch(sampler, B=7, seed=1), "steps": 2,
         "config": {"loss": "grpo", "beta": 0.04, "entropy_coef": 0.01, "epochs": 2, "minibatch_size": 3,
                    "micro_batch_size": 1, "lr": 1e-3}},
        {"batch": sampled_batch(sampler, B=6, seed=2, per_token=True),
         "config": {"loss": "dapo", "beta": 0.0, "clip_high": 0.28, "epochs": 1, "micro_batch_size": 2, "lr": 1e-3}},
        {"batch": sampled_batch(sampler, B=5, seed=3),
         "config": {"loss": "gspo", "beta": 0.02, "clip_low": 0.05, "clip_high": 0.08, "micro_batch_size": 2,
                    "lr": 1e-3}},
        {"batch": sampled_batch(sampler, B=5, seed=4),
         "config": {"loss": "dr_grpo", "dr_grpo_constant": 24, "beta": 0.0, "micro_batch_size": 4, "lr": 1e-3}},
    ]
    ddp, (states, metrics, world) = ddp_and_one_process(tmp_path, model_dir, cases)
    assert world == 1
    init = _weights(model_dir)
    for n, (a, b) in enumerate(zip(states, ddp["states"])):
        moved = max(float((a[k] - init[k]).abs().max()) for k in a)
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert moved > 1e-4 and diff < 1e-5, (n, moved, diff)
    for ma, mb in zip(metrics, ddp["metrics"]):
        for x, y in zip(ma, mb):
            assert y["world_size"] == 2
            assert abs(x["loss"] - y["loss"]) < 1e-5 and abs(x["grad_norm"] - y["grad_norm"]) < 1e-5
            assert x["clip_fraction"] == y["clip_fraction"] and x["sequences"] == y["sequences"]


def _post(url, body, token=None, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json",
                                          **({"authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_mode_with_token(tmp_path):
    model_dir = _make_model(tmp_path)
    env = dict(os.environ, PYTHONPATH=LEARNER)
    p = subprocess.Popen([sys.executable, "-m", "mcp_gym_learner", "serve", "--http", "--port", "0", "--token",
                          "s3cret"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        url = None
        for _ in range(200):
            ready, _, _ = select.select([p.stderr], [], [], 30)
            assert ready, "the HTTP learner did not start"
            line = p.stderr.readline()
            assert line, "the HTTP learner exited"
            if "listening on http://" in line:
                url = line.split("listening on ")[1].split()[0]
                break
        assert url and url.startswith("http://127.0.0.1:")  # localhost unless told
        rpc = url + "/rpc"
        st, body = _post(rpc, {"id": 1, "cmd": "state"})
        assert st == 401 and not body["ok"] and "Bearer" in body["error"]
        st, body = _post(rpc, {"id": 1, "cmd": "state"}, token="wrong")
        assert st == 401
        st, body = _post(rpc, {"id": 7, "cmd": "state"}, token="s3cret")
        assert st == 200 and body["ok"] and body["id"] == 7 and body["result"]["loaded"] is False
        st, body = _post(rpc, {"id": 2, "cmd": "load", "model_dir": model_dir, "device": "cpu", "threads": 1},
                         token="s3cret")
        assert body["ok"], body
        raw = sampled_batch(GPT(dict(TINY, seed=1)), B=4, seed=3)
        bad = json.loads(json.dumps(raw))
        bad["mask"][0][1] = 7
        st, body = _post(rpc, {"id": 3, "cmd": "train", "batch": bad, "config": {}}, token="s3cret")
        assert st == 200 and not body["ok"] and body["error"].startswith("batch.mask[0][1]: must be 0 or 1")
        st, body = _post(rpc, {"id": 4, "cmd": "train", "batch": raw, "config": {"epochs": 1}}, token="s3cret")
        assert body["ok"] and body["result"]["step"] == 1 and body["result"]["metrics"]["sequences"] == 4
        st, body = _post(rpc, {"id": 5, "cmd": "checkpoint_save", "dir": str(tmp_path / "ck")}, token="s3cret")
        assert body["ok"] and os.path.exists(tmp_path / "ck" / "trainer.pt")
        st, body = _post(url + "/nope", {"cmd": "state"}, token="s3cret")
        assert st == 404
        st, body = _post(rpc, {"id": 6, "cmd": "shutdown"}, token="s3cret")
        assert body["ok"]
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
