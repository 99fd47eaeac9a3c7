"""SFT with `prompt_grad: false` (sft.detached_prompt_sft_step): the loss of the exact step, and the gradient
of a float64 reference built another way: one forward over the whole sequence whose attention keys and values
at the prompt's positions are detached (hooks on every layer's keys and v_proj). Tiny random Llama and Qwen3
checkpoints with the real tokenizers (tiny_hf.py)."""

import json

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")

from mcp_gym_learner.policy import HFAdapter, LogprobModule, hf_base  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402
from mcp_gym_learner.sft import Example, adapter_sft_step, detached_prompt_sft_step  # noqa: E402
from _helpers import tiny_hf_dir  # noqa: E402

SHAPE = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 64}


def _model(family, tmp_path):
    d = tiny_hf_dir(family, tmp_path, **SHAPE)
    m = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float64, attn_implementation="eager")
    m.train()
    return m


def _examples(vocab):
    g = torch.Generator().manual_seed(7)
    out = []
    for n, first in [(40, 31), (25, 9), (33, 30)]:
        ids = torch.randint(5, vocab, (n,), generator=g).tolist()
        # (eager attention softmaxes in float32, hence the tolerances) the scored tokens: an answer, a gap (a tool result) and a second answer
        mask = [0] * first + [1] * min(4, n - first) + [0] * max(0, n - first - 4)
        if n - first > 6:
            mask[n - 2:] = [1, 1]
        out.append(Example(ids, mask))
    return out


def _grads(model):
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def _reference(model, examples):
    """The loss and gradient with the prompt's keys and values detached, from one full forward per example."""
    total = sum(sum(e.mask[1:]) for e in examples)
    layers = hf_base(model).get_decoder().layers
    loss_sum = 0.0
    for e in examples:
        P = next(i for i in range(1, len(e.ids)) if e.mask[i]) - 1

        def cut(_mod, _inp, out):
            return torch.cat([out[:, :P].detach(), out[:, P:]], dim=1)

        # the keys as attention reads them: after k_norm where the model has one (Qwen3), else k_proj's
        keys = [getattr(layer.self_attn, "k_norm", None) or layer.self_attn.k_proj for layer in layers]
        hooks = [h for layer, k in zip(layers, keys) for h in (k.register_forward_hook(cut),
                                                                layer.self_attn.v_proj.register_forward_hook(cut))]
        try:
            ids = torch.tensor([e.ids])
            logits = model(input_ids=ids).logits[0]
        finally:
            for h in hooks:
                h.remove()
        lp = torch.log_softmax(logits[:-1], -1).gather(1, ids[0, 1:].unsqueeze(1))[:, 0]
        m = torch.tensor(e.mask[1:], dtype=torch.bool)
        loss = -lp[m].sum() / total
        loss.backward()
        loss_sum += float(loss)
    return loss_sum


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_detached_prompt_gradient_matches_a_float64_reference(family, tmp_path):
    model = _model(family, tmp_path)
    adapter = HFAdapter(model)
    ex = _examples(model.config.vocab_size)

    model.zero_grad()
    loss, scored, ntok = detached_prompt_sft_step(model, adapter, ex, "cpu")
    got = _grads(model)
    model.zero_grad()
    ref_loss = _reference(model, ex)
    ref = _grads(model)
    model.zero_grad()
    exact_loss, _, _ = adapter_sft_step(LogprobModule(model, adapter), adapter, ex, "cpu")
    exact = _grads(model)

    assert scored == sum(sum(e.mask[1:]) for e in ex) and ntok == sum(len(e.ids) for e in ex)
    assert loss == pytest.approx(ref_loss, rel=1e-6) and loss == pytest.approx(exact_loss, rel=1e-6)
    for n in ref:
        assert float((got[n] - ref[n]).norm()) <= 1e-6 * float(ref[n].norm()) + 1e-12, n
    # and it is not the exact gradient: the prompt's keys and values carry some of it
    k = next(n for n in ref if "layers.0.self_attn.k_proj.weight" in n)
    assert float((exact[k] - got[k]).norm()) > 1e-2 * float(exact[k].norm())


def test_the_request_takes_prompt_grad_and_refuses_a_non_boolean(tmp_path):
    d = tiny_hf_dir("llama", tmp_path, **SHAPE)
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"ids": e.ids, "mask": e.mask}) + "\n" for e in _examples(1000)))
    svc = LearnerService()
    assert svc.handle(json.dumps({"cmd": "load", "model_dir": str(d), "device": "cpu"}))["ok"]
    bad = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 1, "prompt_grad": "no"}))
    assert not bad["ok"] and bad["error"].startswith("prompt_grad"), bad
    ok = svc.handle(json.dumps({"cmd": "sft", "data": str(data), "steps": 4, "batch_size": 3, "lr": 1e-2, "prompt_grad": False}))
    assert ok["ok"], ok
    assert ok["result"]["steps"] == 4 and ok["result"]["loss_last"] < ok["result"]["loss_first"]
