"""The RL trainer: masked tokens, equal rewards, the on-policy ratio, accumulation, validation, atomicity."""

import copy
import json
import math

import pytest
import torch
from jsonschema import Draft202012Validator

from mcp_gym_learner import rl as rl_mod
from mcp_gym_learner.batch import parse_batch
from mcp_gym_learner.policy import GPTAdapter
from mcp_gym_learner.protocol import COMMANDS
from mcp_gym_learner.rl import RLTrainer, lr_at
from mcp_gym_learner.rl_config import parse_config
from mcp_gym_learner.service import LearnerService

from _rl_helpers import TINY, perturb_, sampled_batch, soft_model

V = 264
LOSSES = ["grpo", "dapo", "dr_grpo", "gspo"]


def _model(seed=0, dtype=torch.float64):
    return soft_model(seed, dtype)


def _config(d):
    """parse_config; dr_grpo gets its constant (the trainer's fixed budget of policy tokens)."""
    return parse_config(dict(d, dr_grpo_constant=24) if d.get("loss") == "dr_grpo" else d)


def _state(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


class SpyAdapter(GPTAdapter):
    """Records the gradient reaching the final hidden states, i.e. the head's input at every position, in the
    padded layout (one row per sequence; the prefix tree gives the same gradients: test_gpt_shared_prefix)."""

    def __init__(self, model):
        super().__init__(model, share_prefix=False)
        self.records = []

    def hidden(self, model, inputs):
        h = super().hidden(model, inputs)
        if h.requires_grad:
            rec = {"ids": inputs["ids"].clone(), "lengths": inputs["lengths"].clone(), "grad": None}
            self.records.append(rec)
            h.register_hook(lambda g, rec=rec: rec.__setitem__("grad", g.detach().clone()))
        return h


def _row_map(raw):
    """(tuple(ids)) -> mask, to find which padded row holds which sequence."""
    return {tuple(s): m for s, m in zip(raw["ids"], raw["mask"])}


@pytest.mark.parametrize("loss", LOSSES)
def test_masked_tokens_get_exactly_zero_gradient(loss):
    m = _model(1)
    raw = sampled_batch(m, B=6, seed=3, per_token=(loss == "dapo"))
    ad = SpyAdapter(m)
    tr = RLTrainer(m, ad)
    perturb_(m, 0.03)
    cfg = _config({"loss": loss, "beta": 0.1, "entropy_coef": 0.05, "micro_batch_size": 4})
    tr.gradients(parse_batch(raw, V, 64), cfg)
    masks = _row_map(raw)
    checked = nonzero = 0
    for rec in ad.records:
        ids, lengths, g = rec["ids"], rec["lengths"], rec["grad"]
        B, T = ids.shape
        g = g.reshape(B, T, -1)
        for r in range(B):
            n = int(lengths[r])
            mask = masks[tuple(ids[r, :n].tolist())]
            for j in range(T):
                # row j predicts token j + 1: it may get a gradient only if that token is a policy token
                scored = j + 1 < n and mask[j + 1] == 1
                if scored:
                    nonzero += int(bool(g[r, j].abs().sum() > 0))
                else:
                    assert torch.count_nonzero(g[r, j]) == 0, (r, j)
                    checked += 1
    assert checked > 20 and nonzero > 20


def test_values_under_mask_zero_change_nothing():
    """Old logprobs and per-token advantages at positions of mask 0 are ignored: the same update bit for bit."""
    base = _model(2)
    raw = sampled_batch(base, B=6, seed=4, per_token=True)
    junk = copy.deepcopy(raw)
    for b, mask in enumerate(junk["mask"]):
        for i, mk in enumerate(mask):
            if mk == 0:
                junk["old_logprobs"][b][i] = -1e6 * (i + 1)
                junk["advantages"][b][i] = 1e6 * (-1) ** i
    cfg = _config({"loss": "dapo", "beta": 0.1, "entropy_coef": 0.01, "micro_batch_size": 2, "epochs": 2,
                        "minibatch_size": 3, "lr": 1e-3})
    outs = []
    for r in (raw, junk):
        m = copy.deepcopy(base)
        RLTrainer(m, GPTAdapter(m)).train(parse_batch(r, V, 64), cfg)
        outs.append(_state(m))
    assert _same(outs[0], outs[1])


@pytest.mark.parametrize("loss", LOSSES)
def test_equal_rewards_give_zero_policy_gradient_and_no_nan(loss):
    """A group whose rewards are all equal has advantages 0: no policy gradient at all, no NaN anywhere,
    and with the reference still equal to the policy the KL's gradient is exactly 0 too."""
    m = _model(3, torch.float32)
    raw = sampled_batch(m, B=8, seed=5, adv=[0.0] * 8)
    before = _state(m)
    tr = RLTrainer(m, GPTAdapter(m))
    cfg = _config({"loss": loss, "beta": 0.04, "entropy_coef": 0.0, "micro_batch_size": 3,
                        "weight_decay": 0.0, "epochs": 2})
    parts = tr.gradients(parse_batch(raw, V, 64), cfg)
    assert all(math.isfinite(v) for v in parts.values())
    for p in m.parameters():
        assert torch.count_nonzero(p.grad) == 0
        p.grad = None
    res = tr.train(parse_batch(raw, V, 64), cfg)
    for k, v in res["metrics"].items():
        assert not (isinstance(v, float) and not math.isfinite(v)), (k, v)
    assert res["metrics"]["grad_norm"] == 0.0 and res["metrics"]["pg_loss"] == 0.0
    assert _same(before, _state(m))  # AdamW with zero gradients and no decay does not move
    assert res["metrics"]["weights_changed"] is False  # and the step says so (mcp-gym's no-signal check)

    # a batch where one group has equal rewards: that group's sequences get exactly zero gradient
    raw2 = sampled_batch(m, B=8, seed=6, groups=2, adv=[0.0 if b % 2 == 0 else (b - 4) / 3 for b in range(8)])
    ad = SpyAdapter(m)
    tr2 = RLTrainer(m, ad)
    cfg2 = _config({"loss": loss, "beta": 0.0, "micro_batch_size": 8})
    perturb_(m, 0.02)
    tr2.gradients(parse_batch(raw2, V, 64), cfg2)
    zero_group = {tuple(s) for b, s in enumerate(raw2["ids"]) if b % 2 == 0}
    (rec,) = ad.records
    g = rec["grad"].reshape(rec["ids"].shape[0], rec["ids"].shape[1], -1)
    seen = 0
    for r in range(g.shape[0]):
        n = int(rec["lengths"][r])
        if tuple(rec["ids"][r, :n].tolist()) in zero_group:
            assert torch.count_nonzero(g[r]) == 0
            seen += 1
        else:
            assert torch.count_nonzero(g[r]) > 0
    assert seen == 4


@pytest.mark.parametrize("loss", LOSSES)
def test_on_policy_ratio_is_exactly_one(loss):
    m = _model(4, torch.float32)
    tr = RLTrainer(m, GPTAdapter(m))
    raw = sampled_batch(m, B=8, seed=8)
    cfg = _config({"loss": loss, "epochs": 1, "micro_batch_size": 3, "beta": 0.04, "lr": 1e-3})
    batch = parse_batch(raw, V, 64)
    lps = tr.score(batch, cfg)  # the learner's own logprobs, as the sampler would report them
    for b, mask in enumerate(raw["mask"]):
        pos = [i for i in range(1, len(mask)) if mask[i] == 1]
        for j, i in enumerate(pos):
            raw["old_logprobs"][b][i] = float(lps[b][j])
    res = tr.train(parse_batch(raw, V, 64), cfg)["metrics"]
    assert res["ratio_min"] == 1.0 and res["ratio_max"] == 1.0 and res["ratio_mean"] == 1.0
    assert res["clip_fraction"] == 0.0 and res["kl_old"] == 0.0
    assert res["kl"] == 0.0  # the reference is the policy at load time


@pytest.mark.parametrize("loss", LOSSES)
def test_one_batch_equals_four_accumulated_quarters(loss):
    """micro_batch_size B vs B/4 (gradient accumulation): the same gradient and the same update."""
    base = _model(5)
    raw = sampled_batch(base, B=8, seed=9, per_token=(loss == "dapo"))
    perturb_(base, 0.03)
    grads, states, metrics = [], [], []
    for mbs in (8, 2):
        m = copy.deepcopy(base)
        tr = RLTrainer(m, GPTAdapter(m))
        cfg = _config({"loss": loss, "beta": 0.05, "entropy_coef": 0.01, "micro_batch_size": mbs,
                            "epochs": 1, "lr": 1e-3, "max_grad_norm": 0.5})
        tr.gradients(parse_batch(raw, V, 64), cfg)
        grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
        for p in m.parameters():
            p.grad = None
        metrics.append(tr.train(parse_batch(raw, V, 64), cfg)["metrics"])
        states.append(_state(m))
    assert float((grads[0] - grads[1]).norm() / grads[0].norm()) < 1e-12
    for k in states[0]:
        assert float((states[0][k] - states[1][k]).abs().max()) < 1e-12, k
    assert abs(metrics[0]["loss"] - metrics[1]["loss"]) < 1e-12
    assert abs(metrics[0]["grad_norm"] - metrics[1]["grad_norm"]) < 1e-12


def test_lr_schedule_and_persistent_optimizer():
    assert lr_at(0, 10, 1.0, 2, 0.1) == 0.5 and lr_at(1, 10, 1.0, 2, 0.1) == 1.0
    assert abs(lr_at(9, 10, 1.0, 2, 0.1) - 0.1) < 1e-12 and abs(lr_at(50, 10, 1.0, 2, 0.1) - 0.1) < 1e-12
    assert lr_at(5, 0, 1.0, 2, 0.1) == 1.0  # total_steps 0: constant after the warm-up
    m = _model(6, torch.float32)
    tr = RLTrainer(m, GPTAdapter(m))
    raw = sampled_batch(m, B=4, seed=10)
    cfg = _config({"lr": 1e-3, "warmup_steps": 2, "total_steps": 4, "min_lr_ratio": 0.1, "epochs": 1,
                        "ref_reset_every": 3})
    lrs, resets = [], []
    for _ in range(4):
        r = tr.train(parse_batch(raw, V, 64), cfg)
        lrs.append(r["metrics"]["lr"])
        resets.append(r["metrics"]["ref_reset"])
        if r["step"] < 3:
            assert tr.optimizer is not None and len(tr.optimizer.state) > 0  # AdamW state persists
    assert r["step"] == 4
    assert lrs[0] == 5e-4 and lrs[1] == 1e-3 and lrs[2] == 1e-3 and abs(lrs[3] - 1e-4) < 1e-12
    assert resets == [False, False, True, False]
    # after the reset at step 3 the reference is the policy of step 3, and step 4 started a fresh AdamW
    assert int(next(iter(tr.optimizer.state.values()))["step"]) == 1


def _learner(tmp_path):
    L = LearnerService()
    r = L.handle(json.dumps({"cmd": "create", "model_dir": str(tmp_path / "m"), "architecture": TINY, "seed": 1}))
    assert r["ok"], r
    r = L.handle(json.dumps({"cmd": "load", "model_dir": str(tmp_path / "m"), "device": "cpu", "threads": 1}))
    assert r["ok"], r
    return L


def test_train_command_refuses_bad_batches_and_changes_nothing(tmp_path):
    L = _learner(tmp_path)
    raw = sampled_batch(L.model, B=4, seed=11)
    good_cfg = {"loss": "grpo", "epochs": 1, "micro_batch_size": 2}
    before = _state(L.model)

    def bad(path_and_value, expect, cfg=None, drop=None):
        b = copy.deepcopy(raw)
        for path, value in path_and_value:
            obj = b
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value
        if drop:
            del b[drop]
        r = L.handle(json.dumps({"cmd": "train", "batch": b, "config": cfg or good_cfg}))
        assert not r["ok"] and r["error"].startswith(expect), (expect, r)
        assert _same(before, _state(L.model)) and L.trainer.step == 0 and L.trainer.optimizer is None

    bad([(("ids", 1, 3), 999)], "batch.ids[1][3]: token id 999 is out of range [0, 264)")
    bad([(("ids", 0, 2), True)], "batch.ids[0][2]: token id True")
    bad([(("ids", 2), [1])], "batch.ids[2]: needs at least 2 tokens")
    bad([(("ids", 0), list(range(65)))], "batch.ids[0]: 65 tokens is more than max_seq_len 64")
    bad([(("mask", 2), [0, 1])], "batch.mask[2]: must be a list of")
    bad([(("mask", 0, 4), 2)], "batch.mask[0][4]: must be 0 or 1, got 2")
    bad([(("mask", 1), [0] * len(raw["ids"][1]))], "batch.mask[1]: no token with mask 1")
    pos = raw["mask"][1].index(1)
    bad([(("old_logprobs", 1, pos), "x")], f"batch.old_logprobs[1][{pos}]: must be a finite number")
    bad([(("old_logprobs", 1, pos), 0.5)], f"batch.old_logprobs[1][{pos}]: 0.5 is positive")
    bad([(("advantages",), [0.1, 0.2, 0.3])], "batch.advantages: 3 entries for 4 sequences")
    bad([(("advantages", 1), [0.0] * len(raw["ids"][1]))], "batch.advantages[1]: must be a finite number")
    bad([(("advantages", 2), None)], "batch.advantages[2]: must be a finite number")
    bad([(("group_ids", 2), 5)], "batch.group_ids[2]: must be a string, got 5")
    bad([(("values",), [1, 2, 3, 4])], "batch.values: unknown field")
    bad([(("rewards",), [1, 2, 3, 4])], "batch.rewards[0]: must be a list")
    bad([], "batch.group_ids: missing", drop="group_ids")
    bad([], "config.loss: must be one of grpo, dapo, dr_grpo, gspo", cfg={"loss": "ppo"})
    bad([], "config.clip_low: must be <= 1, got 2", cfg={"clip_low": 2})
    bad([], "config.epochs: must be >= 1", cfg={"epochs": 0})
    bad([], "config.top_p: must be > 0, got 0", cfg={"top_p": 0})
    bad([], "config.lr: must be a finite number", cfg={"lr": "fast"})
    bad([], "config.micro_batch_size: must be an integer", cfg={"micro_batch_size": 1.5})
    bad([], "config.lerning_rate: unknown field", cfg={"lerning_rate": 1})
    bad([], "config.eps: unknown field", cfg={"eps": 1e-6})  # AdamW's settings are adam_eps, adam_beta1, adam_beta2
    bad([], "config.adam_beta2: must be < 1, got 1", cfg={"adam_beta2": 1})
    bad([], "config.dr_grpo_constant: required for dr_grpo (a fixed budget of policy tokens, set by the trainer)",
        cfg={"loss": "dr_grpo"})
    bad([], "config.dr_grpo_constant: must be > 0, got 0", cfg={"loss": "dr_grpo", "dr_grpo_constant": 0})
    r = L.handle(json.dumps({"cmd": "train", "config": good_cfg}))
    assert not r["ok"] and r["error"] == "batch: missing"
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": good_cfg, "extra": 1}))
    assert not r["ok"] and r["error"].startswith("extra: unknown argument for train")
    # and a good one goes through
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": good_cfg}))
    assert r["ok"], r
    assert r["result"]["step"] == 1
    Draft202012Validator(COMMANDS["train"]["result"]).validate(r["result"])  # TrainMetricsSchema's names
    want = {"loss", "pg_loss", "kl", "entropy", "clip_fraction", "ratio_mean", "ratio_min", "ratio_max",
            "grad_norm", "lr", "learner_tokens_per_s", "tokens", "sequences", "seconds", "cpu_seconds"}
    assert want <= set(r["result"]["metrics"])
    assert r["result"]["metrics"]["sequences"] == 4 and r["result"]["metrics"]["tokens"] == sum(map(len, raw["ids"]))
    assert not _same(before, _state(L.model))
    st = L.handle(json.dumps({"cmd": "state"}))["result"]
    assert st["rl_steps"] == 1 and st["dirty"] is True


def test_a_step_that_fails_half_way_is_rolled_back(tmp_path, monkeypatch):
    L = _learner(tmp_path)
    raw = sampled_batch(L.model, B=6, seed=12)
    cfg = {"loss": "grpo", "epochs": 2, "minibatch_size": 2, "micro_batch_size": 1, "lr": 1e-2}
    assert L.handle(json.dumps({"cmd": "train", "batch": raw, "config": cfg}))["ok"]
    before = _state(L.model)
    opt_before = copy.deepcopy(L.trainer.optimizer.state_dict())
    real = rl_mod.loss_terms
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 9:  # after several optimizer steps of this call
            raise RuntimeError("boom")
        return real(*a, **k)

    monkeypatch.setattr(rl_mod, "loss_terms", flaky)
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": cfg}))
    assert not r["ok"] and "boom" in r["error"]
    assert calls["n"] == 9
    assert _same(before, _state(L.model)) and L.trainer.step == 1
    after = L.trainer.optimizer.state_dict()
    for k, st in opt_before["state"].items():
        for name, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(after["state"][k][name]))
    monkeypatch.setattr(rl_mod, "loss_terms", real)
    assert L.handle(json.dumps({"cmd": "train", "batch": raw, "config": cfg}))["result"]["step"] == 2


def test_vector_lr_scale_multiplies_the_step_of_1d_parameters_only():
    """With SGD-like Adam steps (one step: |update| = lr for every parameter with a gradient), the
    1-D parameters (norm gains, biases) move vector_lr_scale times as far as the matrices."""
    moves = {}
    for scale in (1.0, 8.0):
        m = _model(6, torch.float64)
        before = _state(m)
        tr = RLTrainer(m, GPTAdapter(m))
        cfg = _config({"loss": "grpo", "epochs": 1, "beta": 0.0, "lr": 1e-3, "max_grad_norm": 0.0,
                            "micro_batch_size": 8, "vector_lr_scale": scale})
        tr.train(parse_batch(sampled_batch(m, B=8, seed=9), V, 64), cfg)
        after = _state(m)
        moves[scale] = {k: (after[k] - before[k]).abs().max().item() for k in before}
        groups = tr.optimizer.param_groups
        assert groups[1]["lr"] == pytest.approx(scale * groups[0]["lr"])
    vec = [k for k in before if before[k].dim() == 1 and moves[1.0][k] > 0]
    mat = [k for k in before if before[k].dim() >= 2 and moves[1.0][k] > 0]
    assert vec and mat
    for k in vec:  # Adam's first step is lr * sign(g) (up to eps): the ratio is the scale
        assert moves[8.0][k] == pytest.approx(8.0 * moves[1.0][k], rel=1e-3)
    for k in mat:
        assert moves[8.0][k] == pytest.approx(moves[1.0][k], rel=1e-6)


def test_config_defaults_come_from_the_schema_and_adam_settings_reach_the_optimizer():
    from mcp_gym_learner.protocol import request_schema
    from mcp_gym_learner.rl_config import RLConfig

    props = request_schema("train", "config")["properties"]
    cfg = parse_config(None)
    assert [f for f in cfg.to_json()] == list(props)
    for k, p in props.items():
        assert getattr(cfg, k) == p.get("default"), k
    assert cfg == RLConfig() and parse_config({"lr": None, "top_k": None}) == cfg  # null: the default
    assert isinstance(parse_config({"epochs": 3.0}).epochs, int) and isinstance(parse_config({"lr": 1}).lr, float)
    with pytest.raises(Exception):
        cfg.lr = 1.0  # frozen
    m = _model(6, torch.float32)
    tr = RLTrainer(m, GPTAdapter(m))
    cfg = parse_config({"adam_eps": 1e-6, "adam_beta1": 0.8, "adam_beta2": 0.99, "epochs": 1, "beta": 0.0})
    tr.train(parse_batch(sampled_batch(m, B=2, seed=1), V, 64), cfg)
    for g in tr.optimizer.param_groups:
        assert g["eps"] == 1e-6 and g["betas"] == (0.8, 0.99)
    assert tr.last_config["adam_beta1"] == 0.8 and "betas" not in tr.last_config


def test_a_checkpoint_with_the_old_adamw_names_still_loads(tmp_path):
    """Checkpoints written before the config followed the contract store eps and betas."""
    from mcp_gym_learner.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint

    m = _model(6, torch.float32)
    tr = RLTrainer(m, GPTAdapter(m))
    raw = sampled_batch(m, B=2, seed=1)
    tr.train(parse_batch(raw, V, 64), parse_config({"epochs": 1, "adam_eps": 1e-6, "adam_beta1": 0.8}))
    save_checkpoint(tr, str(tmp_path / "ck"))
    path = tmp_path / "ck" / CHECKPOINT_FILE
    st = torch.load(path, weights_only=False)  # RNG states (numpy arrays): our own file
    old = dict(st["scheduler"]["config"])
    old["eps"] = old.pop("adam_eps")
    old["betas"] = [old.pop("adam_beta1"), old.pop("adam_beta2")]
    st["scheduler"]["config"] = old
    torch.save(st, path)
    m2 = _model(7, torch.float32)
    tr2 = RLTrainer(m2, GPTAdapter(m2))
    assert load_checkpoint(tr2, str(tmp_path / "ck"))["step"] == 1
    assert tr2.last_config["adam_eps"] == 1e-6 and tr2.last_config["adam_beta1"] == 0.8
    assert _same(_state(m), _state(m2))
    assert tr2.optimizer.param_groups[0]["eps"] == 1e-6


def test_weights_changed_reports_a_real_update_and_an_update_below_bf16_precision():
    """weights_changed is True for an ordinary step, and False for a bf16 model whose lr is too small for any
    update to change a bit of its weights (a run that would write its input back and call it trained)."""
    m = _model(4, torch.float32)
    raw = sampled_batch(m, B=8, seed=7, adv=[(b - 4) / 3 for b in range(8)])
    res = RLTrainer(m, GPTAdapter(m)).train(parse_batch(raw, V, 64), _config({"loss": "grpo", "beta": 0.0, "lr": 1e-3, "weight_decay": 0.0}))
    assert res["metrics"]["grad_norm"] > 0 and res["metrics"]["weights_changed"] is True
    b = _model(4, torch.bfloat16)
    before = _state(b)
    res = RLTrainer(b, GPTAdapter(b)).train(parse_batch(raw, V, 64), _config({"loss": "grpo", "beta": 0.0, "lr": 1e-9, "weight_decay": 0.0}))
    assert res["metrics"]["grad_norm"] > 0
    assert _same(before, _state(b)) and res["metrics"]["weights_changed"] is False


def test_weights_fingerprint_sees_one_bit():
    p = torch.nn.Parameter(torch.randn(1000, dtype=torch.float32))
    a = rl_mod.weights_fingerprint([p])
    with torch.no_grad():
        p.view(torch.int32)[537] ^= 1  # the lowest mantissa bit of one weight
    assert rl_mod.weights_fingerprint([p]) != a
