"""SFT with `train_layers: N` (hf_backend: only the top N decoder layers and the final norm train): the trained
weights get the full model's gradient (float64, tiny random Llama and Qwen3 checkpoints with the real
tokenizers), the frozen ones do not move, every weight trains again after the request, and bad values are
refused before anything changes."""

import json

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")

from mcp_gym_learner.hf_backend import decoder_layers, freeze_below  # noqa: E402
from mcp_gym_learner.policy import HFAdapter, LogprobModule  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402
from mcp_gym_learner.sft import Example, adapter_sft_step  # noqa: E402
from _helpers import tiny_hf_dir  # noqa: E402

SHAPE = {"hidden": 32, "layers": 4, "heads": 4, "kv_heads": 2, "intermediate": 64}


def _tiny(family, tmp_path):
    return tiny_hf_dir(family, tmp_path, **SHAPE)


def _examples(vocab):
    g = torch.Generator().manual_seed(11)
    out = []
    for n, first in [(40, 31), (25, 9), (33, 30)]:
        ids = torch.randint(5, vocab, (n,), generator=g).tolist()
        out.append(Example(ids, [0] * first + [1] * (n - first)))
    return out


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_top_layers_get_the_full_models_gradient_and_nothing_below_is_recorded(family, tmp_path):
    d = _tiny(family, tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float64, attn_implementation="eager")
    model.train()
    adapter = HFAdapter(model)
    ex = _examples(model.config.vocab_size)
    module = LogprobModule(model, adapter)

    model.zero_grad()
    full_loss, _, _ = adapter_sft_step(module, adapter, ex, "cpu")
    full = _grads(model)

    frozen = freeze_below(model, 2)
    try:
        model.zero_grad(set_to_none=True)
        loss, _, _ = adapter_sft_step(module, adapter, ex, "cpu")
        got = _grads(model)
    finally:
        for p in frozen:
            p.requires_grad_(True)

    _, layers = decoder_layers(model)
    top = {n for n, _ in model.named_parameters()
           if any(f"layers.{i}." in n for i in range(len(layers) - 2, len(layers))) or n.endswith("model.norm.weight")}
    assert loss == pytest.approx(full_loss, rel=1e-12)
    # exactly the top two layers and the final norm have a gradient: the layers below, the embeddings and the
    # (tied or not) head got none, since autograd recorded nothing there
    assert set(got) == top, sorted(set(got) ^ top)
    for n in top:
        assert float((got[n] - full[n]).norm()) <= 1e-10 * float(full[n].norm()) + 1e-15, n
    assert all(p.requires_grad for p in model.parameters())


def test_the_request_trains_only_the_top_layers_then_everything_again(tmp_path):
    d = _tiny("llama", tmp_path)
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"ids": e.ids, "mask": e.mask}) + "\n" for e in _examples(1000)))
    svc = LearnerService()
    assert svc.handle(json.dumps({"cmd": "load", "model_dir": str(d), "device": "cpu"}))["ok"]
    model = svc.backend.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for bad, msg in [(0, ">= 1"), (1.5, "train_layers"), (True, "train_layers"), (5, "> the model's 4 decoder layers")]:
        r = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 1, "train_layers": bad}))
        assert not r["ok"] and r["error"].startswith("train_layers") and msg in r["error"], r
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())

    ok = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 4, "batch_size": 3, "lr": 1e-2, "train_layers": 1}))
    assert ok["ok"], ok
    r = ok["result"]
    assert r["train_layers"] == 1 and r["loss_last"] < r["loss_first"]
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {n for n in before if "layers.3." in n or n == "model.norm.weight"}, sorted(moved)
    assert all(p.requires_grad for p in model.parameters())

    # the next request trains every weight again
    ok = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 1, "batch_size": 3, "lr": 1e-2}))
    assert ok["ok"], ok
    assert not any(torch.equal(p, before[n]) for n, p in model.named_parameters() if "layers.0." in n)


@pytest.mark.parametrize("field", [{"train_layers": 1}, {"prompt_grad": False}])
def test_the_embedded_gpt_refuses_the_hugging_face_only_sft_fields(field, tmp_path):
    svc = LearnerService()
    arch = {"vocab_size": 300, "d_model": 32, "n_layers": 2, "n_heads": 2, "max_seq_len": 64}
    assert svc.handle(json.dumps({"cmd": "create", "model_dir": str(tmp_path / "m"), "architecture": arch, "seed": 1}))["ok"]
    assert svc.handle(json.dumps({"cmd": "load", "model_dir": str(tmp_path / "m"), "device": "cpu", "threads": 1}))["ok"]
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps({"ids": list(range(5, 25)), "mask": [0] * 10 + [1] * 10}) + "\n")
    r = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 1, **field}))
    name = next(iter(field))
    assert not r["ok"] and r["error"].startswith(name) and "Hugging Face" in r["error"], r
