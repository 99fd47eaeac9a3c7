"""PPO with GAE (gae.py, rl.py's value head) against float64 references written here.

The reference GAE sums the TD errors explicitly (A_t = Σ_l (γλ)^l δ_{t+l}, no recursion) over the positions of
the sequence, skipping the tokens with mask 0; the reference value loss is PPO2's formula element by element;
the reference values come from a plain forward of the model (`features`) and the head. The learner's loss
and gradient (model and value head, micro-batches, the whole minibatch's normalisation) must match in
float64 to a relative error under 1e-6.

A case by hand (γ = 0.9, λ = 0.5, γλ = 0.45). ids: prompt p0 p1, turn 1: a b, tool result t0 t1, turn 2: c d;
mask 0 0 1 1 0 0 1 1; the scored tokens are a b c d (positions 2 3 6 7) with V = 0.5 0.2 -0.1 0.3; rewards:
turn 1's step reward 0.1 on b, the final reward 1.0 on d.

    token level (b's successor is c: the tool result is skipped; after d, V = 0):
      δ_d = 1.0 + 0.9·0    − 0.3  = 0.7      A_d = 0.7
      δ_c = 0   + 0.9·0.3  + 0.1  = 0.37     A_c = 0.37  + 0.45·0.7     = 0.685
      δ_b = 0.1 + 0.9·-0.1 − 0.2  = -0.19    A_b = -0.19 + 0.45·0.685   = 0.11825
      δ_a = 0   + 0.9·0.2  − 0.5  = -0.32    A_a = -0.32 + 0.45·0.11825 = -0.2667875
      R = A + V = 0.2332125 0.31825 0.585 1.0
    turn level (V_1 = V_a = 0.5, V_2 = V_c = -0.1; R_1 = 0.1, R_2 = 1.0):
      δ_2 = 1.0 − -0.1 = 1.1                  A_2 = 1.1
      δ_1 = 0.1 + 0.9·-0.1 − 0.5 = -0.49      A_1 = -0.49 + 0.45·1.1 = 0.005
      advantages a b c d = 0.005 0.005 1.1 1.1; returns at a and c: 0.505, 1.0 (b and d have no value target)
"""

import copy
import json
import os
import random

import pytest
import torch

from mcp_gym_learner.batch import parse_batch
from mcp_gym_learner.gae import sequence_gae, value_targets, value_terms
from mcp_gym_learner.policy import GPTAdapter
from mcp_gym_learner.protocol import RequestError
from mcp_gym_learner.rl import RLTrainer
from mcp_gym_learner.rl_config import parse_config
from mcp_gym_learner.service import LearnerService

from _rl_helpers import TINY, ddp_and_one_process, perturb_, sampled_batch, soft_model

V = 264


def _rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# ---------------------------------------------------------------------------------------------
# the reference


def scored(mask):
    return [i for i in range(1, len(mask)) if mask[i] == 1]


def turns_of(mask):
    """The runs of consecutive scored positions."""
    out = []
    for i in scored(mask):
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def ref_gae(mask, V, r, gamma, lam, level):
    """{position: advantage}, {position: return} (valued positions only), by the explicit sums."""
    if level == "token":
        steps = [[i] for i in scored(mask)]
    else:
        steps = turns_of(mask)
    vals = [V[s[0]] for s in steps] + [0.0]  # after the last step: terminal
    rews = [sum(r[i] for i in s) for s in steps]
    deltas = [rews[k] + gamma * vals[k + 1] - vals[k] for k in range(len(steps))]
    adv, ret = {}, {}
    for k, s in enumerate(steps):
        a = sum((gamma * lam) ** l * deltas[k + l] for l in range(len(steps) - k))
        for i in s:
            adv[i] = a
        ret[s[0]] = a + vals[k]
    return adv, ret


def with_rewards(raw, seed=0, three_turns=False):
    """Rewards as the TypeScript side sends them: each turn's step reward on its last policy token, the final
    reward minus the step rewards added on the last policy token; advantages 0."""
    rng = random.Random(seed)
    raw = copy.deepcopy(raw)
    raw["rewards"], raw["advantages"] = [], [0.0] * len(raw["ids"])
    for mask in raw["mask"]:
        r = [0.0] * len(mask)
        ts = turns_of(mask)
        steps = 0.0
        for t in ts:
            s = round(rng.uniform(-0.3, 0.4), 3)
            r[t[-1]] += s
            steps += s
        r[ts[-1][-1]] += rng.choice([0.0, 1.0]) - steps
        raw["rewards"].append(r)
    return raw


# ---------------------------------------------------------------------------------------------
# GAE itself


def test_the_hand_checked_case():
    mask = [0, 0, 1, 1, 0, 0, 1, 1]
    Vpos = {2: 0.5, 3: 0.2, 6: -0.1, 7: 0.3}
    r = [0, 0, 0, 0.1, 0, 0, 0, 1.0]
    v = torch.tensor([0.5, 0.2, -0.1, 0.3], dtype=torch.float64)
    rew = torch.tensor([0, 0.1, 0, 1.0], dtype=torch.float64)
    starts = torch.tensor([True, False, True, False])
    a, ret, valued = sequence_gae(v, rew, starts, 0.9, 0.5, "token")
    want = [-0.2667875, 0.11825, 0.685, 0.7]
    assert torch.allclose(a, torch.tensor(want, dtype=torch.float64), atol=1e-12, rtol=0)
    assert torch.allclose(ret, torch.tensor([0.2332125, 0.31825, 0.585, 1.0], dtype=torch.float64), atol=1e-12)
    assert valued.tolist() == [1, 1, 1, 1]
    ra, rr = ref_gae(mask, Vpos, r, 0.9, 0.5, "token")
    assert [ra[i] for i in (2, 3, 6, 7)] == pytest.approx(want, abs=1e-12)
    a, ret, valued = sequence_gae(v, rew, starts, 0.9, 0.5, "turn")
    assert a.tolist() == pytest.approx([0.005, 0.005, 1.1, 1.1], abs=1e-12)
    assert valued.tolist() == [1, 0, 1, 0]
    assert ret[0].item() == pytest.approx(0.505, abs=1e-12) and ret[2].item() == pytest.approx(1.0, abs=1e-12)
    ra, rr = ref_gae(mask, Vpos, r, 0.9, 0.5, "turn")
    assert rr == pytest.approx({2: 0.505, 6: 1.0}, abs=1e-12)


def _three_turn_raw(seed):
    """Hand-built sequences: a prompt, three turns with tool results between (one turn of a single token)."""
    rng = random.Random(seed)
    raw = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
    for b in range(4):
        mask = [0] * rng.randrange(1, 4)
        for t in range(3):
            mask += [1] * (1 if (t == 1 and b % 2) else rng.randrange(2, 5))
            if t < 2:
                mask += [0] * rng.randrange(1, 3)
        raw["ids"].append([rng.randrange(V) for _ in mask])
        raw["mask"].append(mask)
        raw["old_logprobs"].append([-1.0 if m else 0.0 for m in mask])
        raw["advantages"].append(0.0)
        raw["group_ids"].append(f"g{b % 2}")
    return raw


@pytest.mark.parametrize("level", ["token", "turn"])
@pytest.mark.parametrize("whiten", [False, True])
def test_gae_matches_the_reference_over_turns_and_tool_results(level, whiten):
    raw = with_rewards(_three_turn_raw(3), seed=4)
    batch = parse_batch(raw, V, 64)
    g = torch.Generator().manual_seed(0)
    values = [torch.randn(n, generator=g, dtype=torch.float64) for n in batch.scored]
    cfg = parse_config({"gae_gamma": 0.97, "gae_lambda": 0.9, "gae_level": level, "whiten_advantages": whiten})
    vt = value_targets(values, batch.rewards, batch.turn_start, cfg)
    all_adv, all_ret_v = [], []
    for b in range(len(batch)):
        pos = scored(raw["mask"][b])
        assert len(turns_of(raw["mask"][b])) == 3
        Vpos = dict(zip(pos, values[b].tolist()))
        ra, rr = ref_gae(raw["mask"][b], Vpos, raw["rewards"][b], 0.97, 0.9, level)
        want_a = torch.tensor([ra[i] for i in pos], dtype=torch.float64)
        all_adv.append(want_a)
        valued = [i for i in pos if i in rr]
        assert [pos[k] for k in range(len(pos)) if vt.valued[b][k] > 0] == valued
        got_ret = [float(vt.returns[b][pos.index(i)]) for i in valued]
        assert got_ret == pytest.approx([rr[i] for i in valued], abs=1e-12)
        all_ret_v += [(rr[i], Vpos[i]) for i in valued]
        if not whiten:
            assert torch.allclose(vt.adv[b], want_a, atol=1e-12, rtol=0)
    A = torch.cat(all_adv)
    assert vt.stats["advantage_mean"] == pytest.approx(float(A.mean()), abs=1e-12)
    assert vt.stats["advantage_std"] == pytest.approx(float(A.std(unbiased=False)), abs=1e-12)
    R = torch.tensor([x[0] for x in all_ret_v], dtype=torch.float64)
    Vv = torch.tensor([x[1] for x in all_ret_v], dtype=torch.float64)
    ev = 1 - float((R - Vv).var(unbiased=False)) / float(R.var(unbiased=False))
    assert vt.stats["explained_variance"] == pytest.approx(ev, abs=1e-12)
    assert vt.stats["value_mean"] == pytest.approx(float(Vv.mean()), abs=1e-12)
    if whiten:  # mean 0, (unbiased) std 1 over every scored token of the batch
        W = torch.cat(vt.adv)
        assert abs(float(W.mean())) < 1e-12
        assert float(W.std(unbiased=True)) == pytest.approx(1.0, abs=1e-6)
        want = (A - A.mean()) / (A.var(unbiased=True) + 1e-8).sqrt()
        assert torch.allclose(W, want, atol=1e-12, rtol=0)


def test_the_value_loss_and_its_gradient_match_ppo2():
    g = torch.Generator().manual_seed(1)
    n = 200
    v_old = torch.randn(n, generator=g, dtype=torch.float64)
    ret = torch.randn(n, generator=g, dtype=torch.float64)
    v = (v_old + 0.4 * torch.randn(n, generator=g, dtype=torch.float64)).requires_grad_()
    u = (torch.rand(n, generator=g, dtype=torch.float64) < 0.7).to(torch.float64)
    u = u / u.sum()
    c = 0.2
    got, clipped = value_terms(v, v_old, ret, u, c)
    (gv,) = torch.autograd.grad(got, v)
    v2 = v.detach().clone().requires_grad_()
    want = 0.0
    flags = []
    for t in range(n):  # element by element, as PPO2 writes it
        vc = v_old[t] + min(max(v2[t] - v_old[t], -c), c)
        a, b = (v2[t] - ret[t]) ** 2, (vc - ret[t]) ** 2
        want = want + u[t] * 0.5 * (a if a >= b else b)
        flags.append(bool(abs(v2[t] - v_old[t]) > c and b > a and u[t] > 0))
    (gw,) = torch.autograd.grad(want, v2)
    assert abs(float(got.detach()) - float(want.detach())) <= 1e-12 * abs(float(want.detach()))
    assert _rel(gv, gw) < 1e-10
    assert clipped.tolist() == flags and 0 < sum(flags) < n
    # c = 0: no clipping
    got0, clipped0 = value_terms(v, v_old, ret, u, 0.0)
    assert float(got0) == pytest.approx(float((u * 0.5 * (v - ret) ** 2).sum()), rel=1e-12)
    assert not clipped0.any()


# ---------------------------------------------------------------------------------------------
# the learner's loss and gradient against float64


def _values(model, head, ids, pos):
    """The reference values: a plain forward of the whole sequence, the head on the state before each token."""
    n = len(ids)
    t = torch.tensor(ids).unsqueeze(0)
    h, _, _ = model.features(t, torch.arange(n).unsqueeze(0), torch.ones(1, n, dtype=torch.long),
                             return_cache=False)
    return head(h[0, [i - 1 for i in pos]]).reshape(-1)


GRAD_CASES = [
    ("token_dapo_whiten", {"loss": "dapo", "clip_high": 0.28, "gae_level": "token", "whiten_advantages": True,
                           "value_coef": 0.5}),
    ("token_grpo_kl", {"loss": "grpo", "gae_level": "token", "whiten_advantages": False, "beta": 0.1,
                       "value_coef": 0.8, "gae_gamma": 0.95, "gae_lambda": 0.7}),
    ("turn_grpo_whiten", {"loss": "grpo", "gae_level": "turn", "whiten_advantages": True, "value_coef": 1.0}),
    ("turn_dapo_truncate", {"loss": "dapo", "gae_level": "turn", "whiten_advantages": True, "value_coef": 0.3,
                            "is_correction": "token_truncate"}),
]


@pytest.mark.parametrize("name,cfg", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_loss_and_gradient_with_gae_match_float64_reference(name, cfg):
    from test_rl_losses import reference_loss

    sampler = soft_model(0)
    raw = with_rewards(sampled_batch(sampler, B=6, seed=11), seed=2)
    policy = copy.deepcopy(sampler)
    trainer = RLTrainer(policy, GPTAdapter(policy))
    perturb_(policy, 0.03)
    trainer.ensure_value_head()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a head that is not zero, so that the backbone gets the value loss's gradient
        trainer.value_head.weight.copy_(torch.randn(trainer.value_head.weight.shape, generator=g,
                                                    dtype=torch.float64) * 0.5)
        trainer.value_head.bias.fill_(0.1)
    full = dict({"beta": 0.0, "gae_gamma": 0.9, "gae_lambda": 0.8}, **cfg, micro_batch_size=4, epochs=1)
    c = parse_config(full)
    parts = trainer.gradients(parse_batch(raw, V, 64), c)
    params = list(policy.parameters()) + list(trainer.value_head.parameters())
    got = torch.cat([p.grad.reshape(-1) for p in params])

    mirror, head = copy.deepcopy(policy), copy.deepcopy(trainer.value_head)
    for q in list(mirror.parameters()) + list(head.parameters()):
        q.grad = None
    raw2 = copy.deepcopy(raw)
    del raw2["rewards"]
    advs, vterm, n_valued, Vs = [], [], 0, []
    for b, ids in enumerate(raw["ids"]):
        pos = scored(raw["mask"][b])
        Vb = _values(mirror, head, ids, pos)
        Vs.append(Vb)
        ra, rr = ref_gae(raw["mask"][b], dict(zip(pos, Vb.detach().tolist())), raw["rewards"][b],
                         full["gae_gamma"], full["gae_lambda"], full["gae_level"])
        advs.append([ra.get(i, 0.0) for i in range(len(ids))])
        for k, i in enumerate(pos):
            if i in rr:  # V_old = V at the start: the clipped branch equals the other
                vterm.append(0.5 * (Vb[k] - rr[i]) ** 2)
    if full["whiten_advantages"]:
        flat = torch.tensor([a[i] for b, a in enumerate(advs) for i in scored(raw["mask"][b])], dtype=torch.float64)
        m, s = float(flat.mean()), float((flat.var(unbiased=True) + 1e-8).sqrt())
        advs = [[(x - m) / s for x in a] for a in advs]
    raw2["advantages"] = advs
    policy_loss = reference_loss(mirror, sampler, raw2, full)
    value_loss = sum(vterm) / len(vterm)
    total = policy_loss + full["value_coef"] * value_loss
    total.backward()
    want = torch.cat([q.grad.reshape(-1) for q in list(mirror.parameters()) + list(head.parameters())])
    assert abs(parts["loss"] - float(total.detach())) <= 1e-10 * max(1.0, abs(float(total.detach())))
    assert abs(parts["value"] - float(value_loss)) <= 1e-10 * max(1.0, float(value_loss))
    assert _rel(got, want) < 1e-6
    hg = torch.cat([q.grad.reshape(-1) for q in head.parameters()])
    assert float(hg.norm()) > 1e-4 and _rel(got[-hg.numel():], hg) < 1e-6


def test_a_hugging_face_model_gets_the_value_head_too():
    """The same check on a float64 Llama (transformers), through HFAdapter: the head reads the decoder's final
    hidden states; micro-batches of different lengths are right-padded."""
    transformers = pytest.importorskip("transformers")
    from test_rl_losses import reference_loss
    from mcp_gym_learner.policy import HFAdapter

    cfg_hf = transformers.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    sampler = transformers.LlamaForCausalLM(cfg_hf).double()
    with torch.no_grad():
        for p in sampler.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)

    class GPTStyle(torch.nn.Module):  # sampled_batch's and reference_loss's call signature
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, pos, attn):
            return self.m(input_ids=ids).logits, None, None

    raw = with_rewards(sampled_batch(GPTStyle(sampler), B=5, seed=3), seed=3)
    policy = copy.deepcopy(sampler)
    trainer = RLTrainer(policy, HFAdapter(policy))
    perturb_(policy, 0.02)
    trainer.ensure_value_head()
    with torch.no_grad():
        trainer.value_head.weight.normal_(0, 0.5)
    full = {"loss": "dapo", "beta": 0.0, "gae_gamma": 0.9, "gae_lambda": 0.8, "gae_level": "token",
            "whiten_advantages": True, "value_coef": 0.7, "micro_batch_size": 2, "epochs": 1}
    parts = trainer.gradients(parse_batch(raw, 300, 128), parse_config(full))
    params = [p for p in policy.parameters()] + list(trainer.value_head.parameters())
    got = torch.cat([p.grad.reshape(-1) for p in params])

    mirror, head = copy.deepcopy(policy), copy.deepcopy(trainer.value_head)
    for q in list(mirror.parameters()) + list(head.parameters()):
        q.grad = None
    advs, vterm = [], []
    for b, ids in enumerate(raw["ids"]):
        pos = scored(raw["mask"][b])
        h = mirror.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        Vb = head(h[[i - 1 for i in pos]]).reshape(-1)
        ra, rr = ref_gae(raw["mask"][b], dict(zip(pos, Vb.detach().tolist())), raw["rewards"][b], 0.9, 0.8, "token")
        advs.append([ra.get(i, 0.0) for i in range(len(ids))])
        vterm += [0.5 * (Vb[k] - rr[i]) ** 2 for k, i in enumerate(pos)]
    flat = torch.tensor([a[i] for b, a in enumerate(advs) for i in scored(raw["mask"][b])], dtype=torch.float64)
    m, s = float(flat.mean()), float((flat.var(unbiased=True) + 1e-8).sqrt())
    raw2 = dict(copy.deepcopy(raw), advantages=[[(x - m) / s for x in a] for a in advs])
    del raw2["rewards"]
    total = reference_loss(GPTStyle(mirror), GPTStyle(sampler), raw2, full) + 0.7 * sum(vterm) / len(vterm)
    total.backward()
    want = torch.cat([q.grad.reshape(-1) for q in list(mirror.parameters()) + list(head.parameters())])
    assert abs(parts["loss"] - float(total.detach())) <= 1e-10 * max(1.0, abs(float(total.detach())))
    assert _rel(got, want) < 1e-6


# ---------------------------------------------------------------------------------------------
# train calls: metrics, refusals, checkpoints


def _load(L, model_dir):
    r = L.handle(json.dumps({"cmd": "load", "model_dir": model_dir, "device": "cpu", "threads": 1}))
    assert r["ok"], r


def _train(L, raw, cfg):
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": cfg}))
    assert r["ok"], r
    return r["result"]["metrics"]


PPO_CFG = {"loss": "dapo", "beta": 0.0, "epochs": 2, "minibatch_size": 3, "micro_batch_size": 2, "lr": 3e-3,
           "gae_level": "token", "value_clip": 0.2, "value_coef": 0.5}


def _model_dir(tmp_path, L):
    model_dir = str(tmp_path / "m")
    assert L.handle(json.dumps({"cmd": "create", "model_dir": model_dir, "architecture": TINY, "seed": 3}))["ok"]
    return model_dir


def test_the_value_head_learns_and_the_metrics_report_it(tmp_path):
    L = LearnerService()
    model_dir = _model_dir(tmp_path, L)
    _load(L, model_dir)
    from mcp_gym_learner.model import GPT

    raw = with_rewards(sampled_batch(GPT(dict(TINY, seed=3)), B=6, seed=1), seed=1)
    ms = [_train(L, raw, PPO_CFG) for _ in range(12)]
    first, last = ms[0], ms[-1]
    assert first["value_head_fresh"] is True and last["value_head_fresh"] is False
    assert first["value_mean"] == 0.0  # the head starts at zero
    for k in ("value_loss", "value_mean", "explained_variance", "value_clip_fraction", "advantage_mean",
              "advantage_std", "return_mean"):
        assert isinstance(last[k], float), k
    assert last["value_loss"] < 0.5 * first["value_loss"], [m["value_loss"] for m in ms]
    assert last["explained_variance"] > first["explained_variance"] + 0.1, [m["explained_variance"] for m in ms]
    assert any(m["value_clip_fraction"] > 0 for m in ms)  # the second epoch moves V past V_old ± 0.2
    assert not any(k.startswith("value") for k in L.model.state_dict())  # never part of the model (exports)
    # a batch without rewards: no value metrics
    plain = sampled_batch(GPT(dict(TINY, seed=3)), B=4, seed=2)
    m = _train(L, plain, {"loss": "grpo", "beta": 0.0})
    assert m.get("value_loss") is None and "value_head_fresh" not in m


def test_refusals_name_the_field(tmp_path):
    L = LearnerService()
    _load(L, _model_dir(tmp_path, L))
    from mcp_gym_learner.model import GPT

    raw = with_rewards(sampled_batch(GPT(dict(TINY, seed=3)), B=3, seed=1), seed=1)

    def refused(batch, cfg, text):
        r = L.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))
        assert not r["ok"] and text in str(r["error"]), r

    refused(raw, {"loss": "gspo"}, "config.loss: gspo")
    bad = copy.deepcopy(raw)
    bad["rewards"][1][0] = 1.0
    refused(bad, {}, "batch.rewards[1][0]")
    bad = copy.deepcopy(raw)
    bad["advantages"][2] = 0.5
    refused(bad, {}, "batch.advantages[2]: must be 0 with batch.rewards")
    bad = copy.deepcopy(raw)
    bad["rewards"][0] = bad["rewards"][0][:-1]
    refused(bad, {}, "batch.rewards[0]")
    refused(raw, {"gae_level": "episode"}, "config.gae_level")
    refused(raw, {"gae_gamma": 1.5}, "config.gae_gamma")
    assert L.trainer.step == 0 and L.trainer.value_head is None  # nothing changed


def test_a_checkpoint_restores_the_value_head(tmp_path):
    from mcp_gym_learner.model import GPT

    raw = with_rewards(sampled_batch(GPT(dict(TINY, seed=3)), B=6, seed=1), seed=1)
    A = LearnerService()
    model_dir = _model_dir(tmp_path, A)
    _load(A, model_dir)
    _train(A, raw, PPO_CFG)
    _train(A, raw, PPO_CFG)
    ck = str(tmp_path / "ck")
    assert A.handle(json.dumps({"cmd": "checkpoint_save", "dir": ck}))["ok"]
    head = {k: v.clone() for k, v in A.trainer.value_head.state_dict().items()}
    assert float(head["weight"].abs().max()) > 0
    m_a = _train(A, raw, PPO_CFG)  # the run that never stopped

    B = LearnerService()
    _load(B, model_dir)
    assert B.handle(json.dumps({"cmd": "checkpoint_load", "dir": ck}))["ok"]
    for k, v in B.trainer.value_head.state_dict().items():
        assert torch.equal(v, head[k]), k
    m_b = _train(B, raw, PPO_CFG)  # resumed: the same step, bit for bit
    assert m_b["value_head_fresh"] is False
    assert m_a["value_loss"] == m_b["value_loss"] and m_a["loss"] == m_b["loss"]
    for (k, a), b in zip(A.trainer.value_head.state_dict().items(), B.trainer.value_head.state_dict().values()):
        assert torch.equal(a, b), k
    sa, sb = A.model.state_dict(), B.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)

    # a checkpoint without a value head, then GAE: a fresh head
    C = LearnerService()
    _load(C, model_dir)
    _train(C, sampled_batch(GPT(dict(TINY, seed=3)), B=4, seed=2), {"loss": "grpo", "beta": 0.0})
    ck2 = str(tmp_path / "ck2")
    assert C.handle(json.dumps({"cmd": "checkpoint_save", "dir": ck2}))["ok"]
    assert B.handle(json.dumps({"cmd": "checkpoint_load", "dir": ck2}))["ok"]
    assert B.trainer.value_head is None
    m = _train(B, raw, PPO_CFG)
    assert m["value_head_fresh"] is True and m["value_mean"] == 0.0


def test_ddp_two_processes_match_one_process_with_gae(tmp_path):
    """torchrun --nproc_per_node 2 (gloo, CPU) against one process: the values shared by the pre-pass, the
    whitening over the whole batch, the value head's gradient all-reduced by hand (7 sequences, minibatches of
    3: in the last one rank 1 has none)."""
    from mcp_gym_learner.model import GPT

    L = LearnerService()
    model_dir = _model_dir(tmp_path, L)
    sampler = GPT(dict(TINY, seed=3))
    with torch.no_grad():
        perturb_(sampler, 0.02)
    # adam_eps 1e-6: with AdamW's 1e-8 an element whose gradient is ~0 moves by ~lr·sign(g), so the all-reduce's
    # rounding (a few ulps) became differences of 1e-5 (seen with Debian's torch 1.13); at 1e-6 they stay ~1e-7.
    cases = [
        {"batch": with_rewards(sampled_batch(sampler, B=7, seed=1), seed=1), "steps": 2,
         "config": dict(PPO_CFG, micro_batch_size=1, is_correction="token_truncate", adam_eps=1e-6)},
        {"batch": with_rewards(sampled_batch(sampler, B=6, seed=2), seed=2), "steps": 2,
         "config": {"loss": "grpo", "beta": 0.04, "epochs": 1, "micro_batch_size": 2, "lr": 1e-3, "adam_eps": 1e-6,
                    "gae_level": "turn", "whiten_advantages": True}},
    ]
    ddp, (states, metrics, world) = ddp_and_one_process(tmp_path, model_dir, cases, timeout=240)
    assert world == 1
    for n, (a, b) in enumerate(zip(states, ddp["states"])):
        assert "value_head.weight" in a and "value_head.weight" in b
        assert float(a["value_head.weight"].abs().max()) > 1e-4
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert diff < 1e-5, (n, diff)
    for ma, mb in zip(metrics, ddp["metrics"]):
        for x, y in zip(ma, mb):
            for k in ("loss", "value_loss", "value_mean", "explained_variance", "advantage_mean", "advantage_std",
                      "value_clip_fraction"):
                assert abs(x[k] - y[k]) < 1e-5, (k, x[k], y[k])
