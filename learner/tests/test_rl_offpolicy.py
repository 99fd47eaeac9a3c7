"""Off-policy corrections (is_correction), cispo and the dual clip around the loss: where the learner's old
logprobs o_t come from (the first forward's own, or a pre-pass before the first optimizer step), the metrics,
the refusals of the config, DDP. The losses themselves against float64 references: test_rl_losses.py."""

import copy
import json
import os

import pytest
import torch

from mcp_gym_learner.batch import parse_batch
from mcp_gym_learner.model import GPT
from mcp_gym_learner.policy import GPTAdapter
from mcp_gym_learner.protocol import RequestError
from mcp_gym_learner.rl import RLTrainer
from mcp_gym_learner.rl_config import RLConfig, parse_config
from mcp_gym_learner.service import LearnerService

from _rl_helpers import TINY, ddp_and_one_process, perturb_, sampled_batch, soft_model

V = 264
OFF_METRICS = ("sampler_log_ratio_mean", "sampler_log_ratio_abs_max", "is_weight_mean", "is_truncated_fraction",
               "is_masked_fraction", "dual_clip_fraction")


def _model(seed=0, dtype=torch.float64):
    return soft_model(seed, dtype)


def _state(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _on_policy_batch(tr, raw, cfg):
    """raw with old_logprobs = the trainer's own logprobs (as a sampler with the learner's weights reports them)."""
    lps = tr.score(parse_batch(raw, V, 64), cfg)
    raw = copy.deepcopy(raw)
    for b, mask in enumerate(raw["mask"]):
        pos = [i for i in range(1, len(mask)) if mask[i] == 1]
        for j, i in enumerate(pos):
            raw["old_logprobs"][b][i] = float(lps[b][j])
    return raw


PATHS = [
    ("free", {"epochs": 1, "minibatch_size": 0}),
    ("free_minibatch_ge_batch", {"epochs": 1, "minibatch_size": 8}),
    ("pre_pass_minibatches", {"epochs": 1, "minibatch_size": 3}),
    ("pre_pass_epochs", {"epochs": 2, "minibatch_size": 0}),
    ("pre_pass_both", {"epochs": 2, "minibatch_size": 3}),
]


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask", "none"])
@pytest.mark.parametrize("path,extra", PATHS, ids=[p[0] for p in PATHS])
def test_learner_old_logprobs_are_the_start_weights_in_both_paths(path, extra, mode):
    """With s_t = the model's own logprobs, o_t - s_t is ~0 and w^IS is 1 everywhere, whether o_t comes free
    (one optimizer step) or from the pre-pass (several steps; a large learning rate moves the weights between
    the minibatches, so an o_t taken after a step would show). is_correction none reports the sampler
    metrics only when o_t is free."""
    m = _model(3)
    tr = RLTrainer(m, GPTAdapter(m))
    cfg = parse_config(dict(extra, loss="grpo", is_correction=mode, is_min=0.5, beta=0.04, micro_batch_size=2,
                            lr=5e-2))
    raw = _on_policy_batch(tr, sampled_batch(m, B=8, seed=4), cfg)
    before = _state(m)
    res = tr.train(parse_batch(raw, V, 64), cfg)["metrics"]
    assert max(float((before[k] - v).abs().max()) for k, v in m.state_dict().items()) > 1e-3  # the steps moved
    free = path.startswith("free")
    assert res["optimizer_steps"] == (1 if free else extra["epochs"] * (1 if extra["minibatch_size"] == 0 else 3))
    if free:  # one step: the ratio is 1 exactly (against o_t = s_t, its own forward's logprobs)
        assert res["ratio_min"] == 1.0 and res["ratio_max"] == 1.0, res
    else:  # the steps after the first see moved weights: the ratio against the start weights is no longer 1
        assert res["ratio_min"] < 1 - 1e-6 or res["ratio_max"] > 1 + 1e-6, res
    if mode == "none" and not free:
        assert all(res[k] is None for k in OFF_METRICS), res
        return
    assert abs(res["sampler_log_ratio_mean"]) < 1e-9 and res["sampler_log_ratio_abs_max"] < 1e-9, res
    if mode == "none":
        assert res["is_weight_mean"] is None and res["is_truncated_fraction"] is None
        assert res["is_masked_fraction"] is None
    else:
        assert abs(res["is_weight_mean"] - 1.0) < 1e-9, res
        assert res["is_truncated_fraction"] == 0.0 and res["is_masked_fraction"] == 0.0, res
    assert res["dual_clip_fraction"] is None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("mode", ["token_truncate", "sequence_truncate"])
def test_the_pre_pass_equals_the_free_logprobs_exactly(dtype, mode):
    """o_t from the pre-pass (same micro-batches, same forward) is bit-identical to the first forward's own
    logprobs: the gradient of the first minibatch is the same, bit for bit, with o_t from either (epochs 2 takes
    the pre-pass, epochs 1 the free path); and the pre-pass is what `score` reports."""
    base = _model(5, dtype)
    raw = sampled_batch(base, B=7, seed=9)
    perturb_(base, 0.03)
    grads, lps = [], []
    for epochs in (1, 2):
        m = copy.deepcopy(base)
        tr = RLTrainer(m, GPTAdapter(m))
        cfg = parse_config({"loss": "grpo", "is_correction": mode, "beta": 0.05, "entropy_coef": 0.01,
                            "micro_batch_size": 3, "epochs": epochs})
        batch = parse_batch(raw, V, 64)
        assert (tr._learner_old(batch, cfg) is None) == (epochs == 1)
        tr.gradients(batch, cfg)
        grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
        lps.append((tr._policy_logprobs(batch, cfg), tr.score(batch, cfg)))
    assert float(grads[0].norm()) > 1e-6
    assert torch.equal(grads[0], grads[1])
    for a, b in zip(*lps[1]):
        assert torch.equal(a, b)


def test_the_metrics_of_a_none_call_change_nothing(monkeypatch):
    """is_correction none with one optimizer step computes the sampler metrics from the forward's own logprobs;
    without them (o_t taken as unknown) the step is bit-identical: same loss, same weights."""
    base = _model(6)
    raw = sampled_batch(base, B=8, seed=3)
    perturb_(base, 0.03)
    cfg = parse_config({"loss": "grpo", "beta": 0.04, "entropy_coef": 0.01, "micro_batch_size": 3, "epochs": 1,
                        "lr": 1e-2, "dual_clip": 3.0})
    out = []
    for with_metrics in (True, False):
        m = copy.deepcopy(base)
        tr = RLTrainer(m, GPTAdapter(m))
        if not with_metrics:
            monkeypatch.setattr(RLTrainer, "one_optimizer_step", staticmethod(lambda cfg, n: False))
        res = tr.train(parse_batch(raw, V, 64), cfg)["metrics"]
        out.append((res, _state(m)))
    (a, sa), (b, sb) = out
    assert a["sampler_log_ratio_mean"] is not None and abs(a["sampler_log_ratio_mean"]) > 1e-4
    assert b["sampler_log_ratio_mean"] is None and b["sampler_log_ratio_abs_max"] is None
    for k in ("loss", "pg_loss", "kl", "entropy", "kl_old", "clip_fraction", "ratio_mean", "grad_norm",
              "dual_clip_fraction"):
        assert a[k] == b[k], k
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_config_refusals_name_the_field():
    m = _model(0)
    raw = sampled_batch(m, B=2, seed=1)
    batch = parse_batch(raw, V, 64)
    bad = [
        ({"dual_clip": 0.5}, r"^config\.dual_clip: must be 0 \(off\) or > 1"),
        ({"dual_clip": 1.0}, r"^config\.dual_clip: must be 0 \(off\) or > 1"),
        ({"loss": "cispo", "dual_clip": 3.0}, r"^config\.dual_clip: not used by loss cispo"),
        ({"is_min": 2.0}, r"^config\.is_min: must be below config\.is_cap"),
        ({"is_min": 0.5, "is_cap": 0.4}, r"^config\.is_min: must be below config\.is_cap"),
        ({"is_correction": "token_clip"}, r"^config\.is_correction: "),
        ({"is_cap": 0}, r"^config\.is_cap: "),
        ({"is_min": -1}, r"^config\.is_min: "),
        ({"dual_clip": -3}, r"^config\.dual_clip: "),
        ({"loss": "ppo"}, r"^config\.loss: "),
    ]
    for given, msg in bad:
        with pytest.raises(RequestError, match=msg):
            parse_config(given)
    before = _state(m)
    for given, msg in bad[:5]:  # the rules between fields: train checks them too, before anything changes
        with pytest.raises(RequestError, match=msg):
            RLTrainer(m, GPTAdapter(m)).train(batch, RLConfig(**given))
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    ok = parse_config({"loss": "cispo", "is_correction": "sequence_mask", "is_min": 0.5, "is_cap": 3})
    assert (ok.loss, ok.is_correction, ok.is_min, ok.is_cap, ok.dual_clip) == ("cispo", "sequence_mask", 0.5, 3, 0)
    d = parse_config({})
    assert (d.is_correction, d.is_cap, d.is_min, d.dual_clip) == ("none", 2, 0, 0)


def test_train_command_answers_the_metrics_and_they_fit_the_schema(tmp_path):
    """Through the protocol handler: the new metrics are in the answer (null where not applicable)."""
    from jsonschema import Draft202012Validator

    from mcp_gym_learner.protocol import COMMANDS

    L = LearnerService()
    d = str(tmp_path / "m")
    assert L.handle(json.dumps({"cmd": "create", "model_dir": d, "architecture": TINY, "seed": 2}))["ok"]
    assert L.handle(json.dumps({"cmd": "load", "model_dir": d, "device": "cpu"}))["ok"]
    raw = sampled_batch(GPT(dict(TINY, seed=2)), B=4, seed=2)
    validator = Draft202012Validator(COMMANDS["train"]["result"])
    sampler = ("sampler_log_ratio_mean", "sampler_log_ratio_abs_max")
    weights = ("is_weight_mean", "is_truncated_fraction", "is_masked_fraction")
    for config, present in (({"epochs": 2}, ()),
                            ({"epochs": 1, "dual_clip": 3}, sampler + ("dual_clip_fraction",)),
                            ({"epochs": 2, "loss": "cispo", "is_correction": "token_mask"}, sampler + weights)):
        r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": config}))
        assert r["ok"], r
        validator.validate(r["result"])
        met = r["result"]["metrics"]
        for k in OFF_METRICS:
            assert k in met and (met[k] is not None) == (k in present), (config, k, met[k])


# ---------------------------------------------------------------------------------------------
# DDP (torchrun, gloo): the pre-pass shares o_t across ranks, the metrics are summed over them


def _skewed(raw, scale, seed=0):
    import random

    rng = random.Random(seed)
    for b, mask in enumerate(raw["mask"]):
        for i in range(1, len(mask)):
            if mask[i] == 1:
                raw["old_logprobs"][b][i] = min(0.0, raw["old_logprobs"][b][i] - rng.gauss(0.0, scale))
    return raw


def test_ddp_two_processes_match_one_process_with_corrections(tmp_path):
    """torchrun --nproc_per_node 2 (gloo, CPU) against one process, with off-policy corrections: the pre-pass
    (7 sequences, minibatches of 3: in the last one rank 1 has none), the free path, cispo, the dual clip. The
    weights agree within 1e-5, the off-policy metrics within 1e-6."""
    L = LearnerService()
    model_dir = str(tmp_path / "m")
    assert L.handle(json.dumps({"cmd": "create", "model_dir": model_dir, "architecture": TINY, "seed": 3}))["ok"]
    sampler = GPT(dict(TINY, seed=3))
    with torch.no_grad():
        perturb_(sampler, 0.02)  # a sampler a little behind (or ahead of) the learner
    cases = [
        {"batch": _skewed(sampled_batch(sampler, B=7, seed=1), 0.5), "steps": 2,
         "config": {"loss": "grpo", "is_correction": "token_truncate", "is_min": 0.5, "dual_clip": 3, "beta": 0.04,
                    "epochs": 2, "minibatch_size": 3, "micro_batch_size": 1, "lr": 1e-3}},
        {"batch": _skewed(sampled_batch(sampler, B=6, seed=2, per_token=True), 0.05),
         "config": {"loss": "dapo", "is_correction": "sequence_mask", "is_min": 0.5, "clip_high": 0.28, "beta": 0.0,
                    "epochs": 1, "micro_batch_size": 2, "lr": 1e-3}},
        {"batch": _skewed(sampled_batch(sampler, B=5, seed=3), 0.5),
         "config": {"loss": "cispo", "is_correction": "token_mask", "clip_high": 0.3, "beta": 0.02, "epochs": 2,
                    "micro_batch_size": 2, "lr": 1e-3}},
        {"batch": _skewed(sampled_batch(sampler, B=5, seed=4), 0.5),
         "config": {"loss": "grpo", "dual_clip": 2.5, "epochs": 1, "micro_batch_size": 4, "lr": 1e-3}},
    ]
    ddp, (states, metrics, world) = ddp_and_one_process(tmp_path, model_dir, cases, timeout=180)
    assert world == 1
    init = torch.load(os.path.join(model_dir, "weights.pt"))
    for n, (a, b) in enumerate(zip(states, ddp["states"])):
        moved = max(float((a[k] - init[k]).abs().max()) for k in a)
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert moved > 1e-4 and diff < 1e-5, (n, moved, diff)
    for n, (ma, mb) in enumerate(zip(metrics, ddp["metrics"])):
        for x, y in zip(ma, mb):
            assert abs(x["loss"] - y["loss"]) < 1e-5
            for k in OFF_METRICS:
                assert (x[k] is None) == (y[k] is None), (n, k)
                if x[k] is not None:
                    assert abs(x[k] - y[k]) < 1e-6, (n, k, x[k], y[k])
        corr = cases[n]["config"].get("is_correction", "none")
        first = ma[0]
        assert first["sampler_log_ratio_mean"] is not None
        if corr.endswith("_truncate"):
            assert 0 < first["is_truncated_fraction"] < 1, first
        elif corr.endswith("_mask"):
            assert 0 < first["is_masked_fraction"] < 1, first
