"""`load` with compute_dtype "bfloat16" (compute_copy.py): the learner's forwards and backwards run on a bf16 copy of
the weights, the gradient lands in the float32 master weights, AdamW updates them in float32, and the copy takes
the new weights after each step. On a tiny random Llama (SmolLM2's architecture) with the real tokenizer."""

import json
import random

import pytest
import torch

pytestmark = pytest.mark.hf
pytest.importorskip("transformers")

from mcp_gym_learner.batch import parse_batch  # noqa: E402
from mcp_gym_learner.compute_copy import ComputeCopy  # noqa: E402
from mcp_gym_learner.rl_config import parse_config  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402

from _helpers import tiny_hf_dir  # noqa: E402

SHAPE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return str(tiny_hf_dir("llama", tmp_path_factory.mktemp("cc"), **SHAPE))


def _load(model_dir, **extra):
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": model_dir, "device": "cpu", **extra}))
    return svc, r


def _batch(svc, seed=0, groups=2, group=4):
    """Sequences of random tokens sharing a prompt per group, their sampled tokens' old logprobs from the
    float32 model (the `logprobs` command), advantages of mean 0 within each group."""
    rng = random.Random(seed)
    V = svc.trainer.adapter.vocab_size
    ids, mask, old, adv, gids = [], [], [], [], []
    for g in range(groups):
        prompt = [rng.randrange(1000, 5000) for _ in range(24)]
        rewards = [rng.random() for _ in range(group)]
        mean = sum(rewards) / group
        for r in rewards:
            tail = [rng.randrange(1000, min(V, 5000)) for _ in range(rng.randrange(6, 14))]
            ids.append(prompt + tail)
            mask.append([0] * len(prompt) + [1] * len(tail))
            adv.append(r - mean)
            gids.append(f"g{g}")
    lp = svc.handle(json.dumps({"cmd": "logprobs", "sequences": ids, "starts": [1] * len(ids)}))
    assert lp["ok"], lp
    for s, row in zip(ids, lp["result"]["logprobs"]):
        old.append([0.0] + row)
    return {"ids": ids, "mask": mask, "old_logprobs": old, "advantages": adv, "group_ids": gids}


def _grad(svc, batch):
    tr = svc.trainer
    tr.model.zero_grad(set_to_none=True)
    tr.gradients(parse_batch(batch, tr.adapter.vocab_size, tr.adapter.max_seq_len),
                 parse_config({"loss": "grpo", "beta": 0.0}))
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
                      for p in tr.model.parameters()])


def test_the_copy_computes_in_bf16_and_hands_float32_gradients_to_the_masters(llama):
    svc, r = _load(llama)
    model = svc.backend.model
    cc = ComputeCopy(model, torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in cc.model.parameters())
    # the float buffers (the rotary frequencies) keep their precision
    assert all(b.dtype == mb.dtype for b, mb in zip(cc.model.buffers(), model.buffers()))
    # tied embeddings stay tied in the copy: one parameter, as in the master
    assert len(list(cc.model.parameters())) == len(list(model.parameters()))
    ids = torch.tensor([[5, 900, 1200, 77, 3000, 41]])
    for k in (1, 2):  # two backwards: the masters' gradients are their sum
        cc.model(input_ids=ids).logits.float().logsumexp(-1).sum().backward()
        assert all(p.grad is None for p in cc.model.parameters()), "the copy keeps no gradient"
        assert all(m.grad is not None and m.grad.dtype == torch.float32 for m in model.parameters())
        if k == 1:
            once = [m.grad.clone() for m in model.parameters()]
    for m, g in zip(model.parameters(), once):
        assert torch.allclose(m.grad, 2 * g, rtol=1e-6, atol=1e-9)
    # sync: the copy takes the master weights (rounded) and their requires_grad
    with torch.no_grad():
        for m in model.parameters():
            m.add_(0.5)
    first = next(model.parameters())
    first.requires_grad_(False)
    cc.sync()
    for p, m in cc.pairs:
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
        assert p.requires_grad == m.requires_grad


def test_train_with_a_bf16_copy_follows_float32_training(llama):
    base, _ = _load(llama)
    batch = _batch(base)
    g32 = _grad(base, batch)
    svc, r = _load(llama, compute_dtype="bfloat16")
    assert r["ok"], r
    assert r["result"]["hf"]["compute_dtype"] == "bfloat16"
    g16 = _grad(svc, batch)
    cos = float(g32 @ g16 / (g32.norm() * g16.norm()))
    assert cos > 0.98, f"the bf16 copy's gradient is off: cosine {cos:.4f} with float32's"
    assert float((g32 - g16).norm() / g32.norm()) < 0.25
    # a `train` call: AdamW on the float32 masters, which move; the copy holds them afterwards
    w0 = [p.detach().clone() for p in svc.backend.model.parameters()]
    cfg = {"loss": "grpo", "lr": 1e-3, "warmup_steps": 0, "beta": 0.0, "epochs": 1, "minibatch_size": 0}
    for _ in range(2):
        t = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))
        assert t["ok"], t
    assert t["result"]["metrics"]["weights_changed"]
    assert all(p.dtype == torch.float32 for p in svc.backend.model.parameters())
    moved = sum(int((p.detach() != w).sum()) for p, w in zip(svc.backend.model.parameters(), w0))
    assert moved > 0.5 * sum(w.numel() for w in w0)
    for p, m in svc.trainer.compute.pairs:
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    # float32 training of the same two steps: the losses move the same way
    t32 = [base.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg})) for _ in range(2)]
    d32 = torch.cat([(p.detach() - w).reshape(-1).double() for p, w in zip(base.backend.model.parameters(), w0)])
    d16 = torch.cat([(p.detach() - w).reshape(-1).double() for p, w in zip(svc.backend.model.parameters(), w0)])
    assert t32[-1]["ok"]
    assert float(d32 @ d16 / (d32.norm() * d16.norm())) > 0.9


def test_sft_with_a_bf16_copy_lowers_the_loss_as_float32_does(llama, tmp_path):
    rng = random.Random(1)
    path = tmp_path / "sft.jsonl"
    with open(path, "w") as f:
        for _ in range(8):
            p = [rng.randrange(1000, 5000) for _ in range(10)]
            a = [rng.randrange(1000, 5000) for _ in range(6)]
            f.write(json.dumps({"ids": p + a, "mask": [0] * 10 + [1] * 6}) + "\n")
    out = {}
    for extra in ({}, {"compute_dtype": "bfloat16"}):
        svc, r = _load(llama, **extra)
        assert r["ok"], r
        s = svc.handle(json.dumps({"cmd": "sft", "data": str(path), "steps": 30, "batch_size": 8, "lr": 3e-3}))
        assert s["ok"], s
        assert all(p.dtype == torch.float32 for p in svc.backend.model.parameters())
        out[bool(extra)] = s["result"]
    for res in out.values():
        assert res["loss_last"] < 0.6 * res["loss_first"]
    assert abs(out[True]["loss_last"] - out[False]["loss_last"]) < 0.05 * out[False]["loss_first"], out


@pytest.mark.parametrize("extra, words", [
    ({"compute_dtype": "float16x"}, "compute_dtype"),
    ({"compute_dtype": "bfloat16", "lora": {"r": 4}}, "full fine-tuning"),
    ({"compute_dtype": "bfloat16", "dtype": "bfloat16", "device": "cpu"}, "bfloat16"),
])
def test_compute_dtype_refusals_name_the_field(llama, extra, words):
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": llama, "device": "cpu", **extra}))
    assert not r["ok"]
    assert "compute_dtype" in r["error"] or words in r["error"], r
    assert svc.backend is None


def test_the_ratio_is_taken_against_the_copys_own_logprobs(llama):
    """The sampler's float32 logprobs differ from a bf16 forward by rounding: the PPO ratio's denominator is the
    copy's own o_t (rl.py own_ratio), so a one-step call clips nothing, while the off-policy statistics still
    report the sampler's difference. With two epochs o_t comes from a pre-pass (not each forward's own)."""
    base, _ = _load(llama)
    batch = _batch(base)
    svc, _ = _load(llama, compute_dtype="bfloat16")
    cfg = {"loss": "grpo", "lr": 1e-3, "warmup_steps": 0, "beta": 0.0, "epochs": 1, "minibatch_size": 0}
    m = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))["result"]["metrics"]
    assert m["clip_fraction"] == 0 and m["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert m["sampler_log_ratio_abs_max"] > 1e-3  # bf16 against float32
    assert len(svc.trainer._learner_old(
        parse_batch(batch, svc.trainer.adapter.vocab_size, None), parse_config({**cfg, "epochs": 2}))) == len(batch["ids"])
    m2 = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": {**cfg, "epochs": 2, "lr": 3e-2}}))
    assert m2["ok"], m2
    assert m2["result"]["metrics"]["ratio_max"] > 1.0 + 1e-3  # the second epoch's ratio moved off 1
