"""Shared by the RL tests: batches sampled from a model (as the rollout side makes them), a stdio client."""

import json
import os
import random
import select
import signal
import socket
import subprocess
import sys

import torch

from mcp_gym_learner.logprobs import processed_logprobs

LEARNER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "max_seq_len": 64}


@torch.no_grad()
def _sample(model, ids, n, temperature, top_k, top_p, g):
    """Append n tokens sampled from the processed distribution; returns their logprobs."""
    lps = []
    for _ in range(n):
        t = torch.tensor(ids).unsqueeze(0)
        L = t.shape[1]
        logits, _, _ = model(t, torch.arange(L).unsqueeze(0), torch.ones(1, L, dtype=torch.long))
        lp = processed_logprobs(logits[0, -1].double(), temperature, top_k, top_p)
        tok = int(torch.multinomial(lp.exp(), 1, generator=g))
        ids.append(tok)
        lps.append(float(lp[tok]))
    return lps


def sampled_batch(model, B=8, temperature=1.0, top_k=0, top_p=1.0, seed=0, per_token=False, groups=2,
                  adv=None, min_len=6, max_len=14):
    """A TrainBatch like the rollout side's: a prompt (mask 0), policy tokens sampled from `model` (mask 1,
    with their sampling logprobs), an environment chunk (mask 0), more policy tokens."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    out = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
    was = model.training
    model.eval()
    for b in range(B):
        prompt = [rng.randrange(256) for _ in range(rng.randrange(2, 6))]
        ids = list(prompt)
        mask = [0] * len(ids)
        old = [0.0] * len(ids)
        lps = _sample(model, ids, rng.randrange(min_len // 2, max_len // 2 + 1), temperature, top_k, top_p, g)
        mask += [1] * len(lps)
        old += lps
        env = [rng.randrange(256) for _ in range(rng.randrange(1, 4))]
        ids += env
        mask += [0] * len(env)
        old += [0.0] * len(env)
        lps = _sample(model, ids, rng.randrange(min_len // 2, max_len // 2 + 1), temperature, top_k, top_p, g)
        mask += [1] * len(lps)
        old += lps
        out["ids"].append(ids)
        out["mask"].append(mask)
        out["old_logprobs"].append(old)
        out["group_ids"].append(f"task-{b % groups}")
        if adv is not None:
            a = adv[b]
        elif per_token:
            a = [rng.gauss(0, 1) if m else 0.0 for m in mask]
        else:
            a = rng.gauss(0, 1)
        out["advantages"].append(a)
    model.train(was)
    return out


def perturb_(model, scale=0.05, seed=123):
    """Move every parameter a little (so that the policy differs from the sampler and the reference)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * scale)
    return model


class Client:
    """The learner as a subprocess speaking JSON lines on stdin/stdout."""

    def __init__(self, cwd, env=None):
        e = dict(os.environ, PYTHONPATH=LEARNER)
        if env:
            e.update(env)
        self.p = subprocess.Popen([sys.executable, "-m", "mcp_gym_learner", "serve"], cwd=cwd, env=e,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0

    def send(self, cmd, **args):
        self.next_id += 1
        self.p.stdin.write((json.dumps({"id": self.next_id, "cmd": cmd, **args}) + "\n").encode())
        self.p.stdin.flush()
        return self.next_id

    def recv(self, timeout=120):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, "no response"
        return json.loads(self.p.stdout.readline())

    def ok(self, cmd, **args):
        rid = self.send(cmd, **args)
        resp = self.recv()
        assert resp["id"] == rid and resp["ok"], resp
        return resp["result"]

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_and_one_process(tmp_path, model_dir, cases, timeout=120):
    """The `cases` (mcp_gym_learner.ddp_check's) run by torchrun with 2 processes (gloo, CPU, one thread
    each), then in this process: (the 2-process result {world_size, states, metrics}, (states, metrics,
    world_size) of the 1-process run)."""
    with open(tmp_path / "cases.json", "w") as f:
        json.dump(cases, f)
    out = str(tmp_path / "ddp.pt")
    env = dict(os.environ, PYTHONPATH=LEARNER, OMP_NUM_THREADS="1")
    # mcp_gym_learner.torchrun is torchrun (Debian's torch 1.13 torchrun cannot start workers on Python 3.11)
    cmd = [sys.executable, "-m", "mcp_gym_learner.torchrun", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), "-m", "mcp_gym_learner.ddp_check", "--model-dir", model_dir, "--cases",
           str(tmp_path / "cases.json"), "--out", out]
    p = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and its workers
        p.communicate()
        raise
    assert p.returncode == 0, err[-3000:]
    ddp = torch.load(out)
    assert ddp["world_size"] == 2

    from mcp_gym_learner.ddp_check import run

    return ddp, run(model_dir, cases)


def soft_model(seed=0, dtype=torch.float64):
    """A tiny GPT with smaller embeddings than tiny_model's, so that the distributions are not one-hot and
    the entropy matters (the RL tests' float64 model)."""
    from _helpers import tiny_model

    m = tiny_model(seed).to(dtype)
    with torch.no_grad():
        m.tok_emb.weight.mul_(0.25)
    return m
