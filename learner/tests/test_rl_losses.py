"""The RL losses against float64 references written here, independently of losses.py / rl.py / head.py.

The reference computes the logits of every sequence with a plain forward of the model, the logprobs
with logsumexp, and each loss with its textbook formula and its own aggregation; autograd gives the
reference gradient. The learner's gradient (chunked head, micro-batches, the normalisation of the
whole minibatch) must match it to a relative error under 1e-6 in float64. The same for the off-policy
corrections (is_correction, with o_t from the policy at the start of the call or from an earlier copy of it),
cispo and the dual clip, whose train calls must also report the reference's off-policy metrics.
"""

import copy
import random

import pytest
import torch

from mcp_gym_learner.head import head_logprobs, reference_head_logprobs
from mcp_gym_learner.logprobs import keep_mask
from mcp_gym_learner.losses import token_weights
from mcp_gym_learner.policy import GPTAdapter
from mcp_gym_learner.batch import parse_batch
from mcp_gym_learner.rl import RLTrainer
from mcp_gym_learner.protocol import RequestError
from mcp_gym_learner.rl_config import RLConfig, parse_config

from _helpers import tiny_model
from _rl_helpers import perturb_, sampled_batch

V = 264


def _model64(seed=0):
    # smaller weights than tiny_model's, so that the distributions are not one-hot and the entropy matters
    m = tiny_model(seed).double()
    with torch.no_grad():
        m.tok_emb.weight.mul_(0.25)
    return m


def _logits(model, ids):
    n = len(ids)
    t = torch.tensor(ids).unsqueeze(0)
    logits, _, _ = model(t, torch.arange(n).unsqueeze(0), torch.ones(1, n, dtype=torch.long))
    return logits[0]  # [n, V]: row j predicts token j + 1


def _processed(model, ids, idx, T, k, p):
    """Processed logprobs (temperature, top-k, top-p) of the tokens at positions idx, the untruncated ones, and
    the entropies of the processed distributions."""
    x = _logits(model, ids)[:-1] / T
    full = x - torch.logsumexp(x, -1, keepdim=True)
    if k or p < 1:
        keep = keep_mask(x * T, T, k, p)
        xk = torch.where(keep, x, torch.full_like(x, float("-inf")))
        proc = xk - torch.logsumexp(xk, -1, keepdim=True)
        probs = torch.where(keep, proc.exp(), torch.zeros_like(x))
        ent_all = -(probs * torch.where(keep, proc, torch.zeros_like(x))).sum(-1)
    else:
        proc = full
        ent_all = -(full.exp() * full).sum(-1)
    rows = torch.tensor([i - 1 for i in idx])
    tgt = torch.tensor([ids[i] for i in idx])
    return proc[rows, tgt], full[rows, tgt], ent_all[rows]


def reference_loss(policy, reference, raw, cfg, old_policy=None, stats=None):
    """The loss, from its definition (PROTOCOL.md, "Training"), in float64. old_policy: the learner's weights at
    the start of the call (o_t, with an off-policy correction; None: `policy`'s own logprobs, detached).
    stats: a dict that gets the per-token sampler log-ratios, importance weights and dual-clip flags."""
    loss_kind = cfg.get("loss", "grpo")
    corr = cfg.get("is_correction", "none")
    c_max, c_min = cfg.get("is_cap", 2.0), cfg.get("is_min", 0.0)
    dual = cfg.get("dual_clip", 0.0)
    T = cfg.get("temperature", 1.0)
    k, p = cfg.get("top_k", 0), cfg.get("top_p", 1.0)
    eps_lo, eps_hi = cfg.get("clip_low", 0.2), cfg.get("clip_high", 0.2)
    beta, c_ent = cfg.get("beta", 0.0), cfg.get("entropy_coef", 0.0)
    B = len(raw["ids"])
    C = cfg.get("dr_grpo_constant")  # Dr. GRPO's fixed budget of policy tokens (required for dr_grpo)
    seq_terms, token_sums, n_tokens = [], [], 0
    for key in ("log_ratio", "w_is", "dual"):
        if stats is not None:
            stats[key] = []
    for b in range(B):
        ids = raw["ids"][b]
        idx = [i for i in range(1, len(ids)) if raw["mask"][b][i] == 1]
        rows = torch.tensor([i - 1 for i in idx])
        tgt = torch.tensor([ids[i] for i in idx])
        lp, lp_full, ent = _processed(policy, ids, idx, T, k, p)
        sampler = torch.tensor([raw["old_logprobs"][b][i] for i in idx], dtype=torch.float64)
        # o_t: the learner's logprob at the start of the call
        with torch.no_grad():
            o = (_processed(old_policy, ids, idx, T, k, p)[0] if old_policy is not None else lp.detach())
        if corr == "none":
            old, w_is = sampler, torch.ones_like(sampler)
        else:
            old = o
            if corr.startswith("token_"):
                r_is = torch.exp(torch.clamp(o - sampler, -20.0, 20.0))
            else:
                r_is = torch.exp(torch.clamp((o - sampler).sum(), -20.0, 20.0)) * torch.ones_like(o)
            if corr.endswith("_truncate"):
                w_is = torch.clamp(r_is, min=c_min, max=c_max)
            else:
                w_is = ((r_is >= c_min) & (r_is <= c_max)).to(torch.float64)
        if stats is not None:
            stats["log_ratio"].append(torch.clamp(o - sampler, -20.0, 20.0))
            stats["w_is"].append(w_is)
        a = raw["advantages"][b]
        A = torch.tensor([a[i] for i in idx] if isinstance(a, list) else [a] * len(idx), dtype=torch.float64)
        with torch.no_grad():
            xr = _logits(reference, ids)[:-1] / T
            ref = (xr - torch.logsumexp(xr, -1, keepdim=True))[rows, tgt]
        kl = torch.exp(ref - lp_full) - (ref - lp_full) - 1
        # a token outside the policy's top-k / top-p set now has lp = -inf: the log-ratio is clamped to [-20, 20];
        # outside the set of both the policy and the old policy: log-ratio 0
        both = torch.isinf(lp.detach()) & torch.isinf(old)
        log_ratio = torch.clamp(torch.where(both, torch.zeros_like(lp), lp - old), -20.0, 20.0)

        def dual_clipped(pg_ppo, adv):  # verl: for A < 0 the loss is at most dual · |A|
            if not dual:
                return pg_ppo
            if stats is not None:
                stats["dual"].append((adv < 0) & (pg_ppo.detach() > -dual * adv))
            return torch.where(adv < 0, torch.min(pg_ppo, -dual * adv), pg_ppo)

        if loss_kind == "gspo":  # one advantage per sequence, one importance weight per sequence (sequence_*)
            s = torch.exp(log_ratio.mean())
            a0 = A[0]
            seq_pg = dual_clipped(-torch.min(s * a0, torch.clamp(s, 1 - eps_lo, 1 + eps_hi) * a0), a0)
            seq_terms.append(w_is[0] * seq_pg + (beta * kl - c_ent * ent).mean())
            continue
        r = torch.exp(log_ratio)
        if loss_kind == "cispo":
            lp_fin = torch.where(torch.isinf(lp), torch.zeros_like(lp), lp)  # outside the kept set: 0
            pg = -torch.clamp(r, max=1 + eps_hi).detach() * A * lp_fin
        else:
            pg = dual_clipped(-torch.min(r * A, torch.clamp(r, 1 - eps_lo, 1 + eps_hi) * A), A)
        per_tok = w_is * pg + beta * kl - c_ent * ent
        seq_terms.append(per_tok.mean())
        token_sums.append(per_tok.sum())
        n_tokens += len(idx)
    if loss_kind in ("grpo", "gspo"):
        return sum(seq_terms) / B
    if loss_kind in ("dapo", "cispo"):
        return sum(token_sums) / n_tokens
    if loss_kind == "dr_grpo":
        return sum(token_sums) / (B * C)
    raise AssertionError(loss_kind)


def _rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


CASES = [
    ("grpo", {"loss": "grpo"}),
    ("dapo", {"loss": "dapo", "clip_high": 0.28}),
    ("dr_grpo", {"loss": "dr_grpo", "dr_grpo_constant": 16}),
    ("dr_grpo_constant", {"loss": "dr_grpo", "dr_grpo_constant": 50}),
    ("gspo", {"loss": "gspo", "clip_low": 0.05, "clip_high": 0.08}),
    ("grpo_kl", {"loss": "grpo", "beta": 0.3}),
    ("grpo_entropy", {"loss": "grpo", "entropy_coef": 0.05}),
    ("dapo_kl_entropy_T", {"loss": "dapo", "beta": 0.1, "entropy_coef": 0.02, "clip_high": 0.28,
                           "temperature": 0.7}),
    ("dr_grpo_kl_entropy", {"loss": "dr_grpo", "dr_grpo_constant": 24, "beta": 0.2, "entropy_coef": 0.03}),
    ("gspo_kl_entropy", {"loss": "gspo", "beta": 0.2, "entropy_coef": 0.03, "clip_low": 0.05, "clip_high": 0.08}),
    ("grpo_topk_topp", {"loss": "grpo", "beta": 0.1, "entropy_coef": 0.02, "temperature": 0.8, "top_k": 40,
                        "top_p": 0.9}),
]


@pytest.mark.parametrize("name,cfg", CASES, ids=[c[0] for c in CASES])
def test_loss_and_gradient_match_float64_reference(name, cfg):
    sampler = _model64(0)
    per_token = name.startswith("dapo")
    raw = sampled_batch(sampler, B=8, temperature=cfg.get("temperature", 1.0), top_k=cfg.get("top_k", 0),
                        top_p=cfg.get("top_p", 1.0), seed=7, per_token=per_token)
    policy = copy.deepcopy(sampler)
    trainer = RLTrainer(policy, GPTAdapter(policy))  # the reference: the sampler's weights
    perturb_(policy, 0.03)  # off-policy: ratios on both sides of the clip range
    full_cfg = dict({"beta": 0.0, "entropy_coef": 0.0}, **cfg, micro_batch_size=3, epochs=1)
    batch = parse_batch(raw, V, 64)
    parts = trainer.gradients(batch, parse_config(full_cfg))
    got = torch.cat([p.grad.reshape(-1) for p in policy.parameters()])

    mirror = copy.deepcopy(policy)
    for q in mirror.parameters():
        q.grad = None
    want_loss = reference_loss(mirror, sampler, raw, full_cfg)
    want_loss.backward()
    want = torch.cat([q.grad.reshape(-1) for q in mirror.parameters()])

    wl = want_loss.item()
    assert abs(parts["loss"] - wl) <= 1e-10 * max(1.0, abs(wl))
    assert float(want.norm()) > 1e-4, "a trivial case"
    assert _rel(got, want) < 1e-6
    # every tensor, not just the whole
    for (name_, q), r in zip(policy.named_parameters(), mirror.parameters()):
        assert float((q.grad - r.grad).abs().max()) <= 1e-6 * float(want.abs().max()), name_
    # the case exercises the clip: some tokens clipped, some not
    cfg2 = parse_config(full_cfg)
    trainer2 = RLTrainer(copy.deepcopy(policy), GPTAdapter(policy))
    m = trainer2.train(batch, cfg2)["metrics"]
    assert 0.0 < m["clip_fraction"] < 1.0, m


# Off-policy corrections, cispo and the dual clip. The sampler's logprobs are skewed (per token: Gaussian noise of
# `token`; per sequence: a shift of SEQ_SHIFTS × `seq`, cycled, spread over its tokens) so that importance weights
# fall on both sides of [is_min, is_cap] and ratios reach the dual-clip bound.
SEQ_SHIFTS = [-2.0, 0.1, -0.3, 1.5, 0.0, -1.2, 2.5, 0.3]
OFF_CASES = [
    ("grpo_token_truncate", {"loss": "grpo", "is_correction": "token_truncate", "is_min": 0.5}, dict(token=0.8)),
    ("grpo_token_mask", {"loss": "grpo", "is_correction": "token_mask", "is_cap": 1.8, "beta": 0.2,
                         "entropy_coef": 0.03}, dict(token=0.8)),
    ("dr_grpo_sequence_truncate", {"loss": "dr_grpo", "dr_grpo_constant": 20, "is_correction": "sequence_truncate",
                                   "is_min": 0.6, "is_cap": 1.5}, dict(token=0.05, seq=True)),
    ("grpo_sequence_mask", {"loss": "grpo", "is_correction": "sequence_mask", "is_min": 0.4, "is_cap": 2.5,
                            "beta": 0.1}, dict(token=0.05, seq=True)),
    ("gspo_sequence_truncate", {"loss": "gspo", "is_correction": "sequence_truncate", "clip_low": 0.05,
                                "clip_high": 0.08, "is_cap": 1.5}, dict(token=0.05, seq=True)),
    ("cispo", {"loss": "cispo", "clip_high": 0.5, "entropy_coef": 0.02}, dict(token=0.8)),
    ("cispo_token_truncate", {"loss": "cispo", "clip_high": 0.1, "is_correction": "token_truncate", "is_min": 0.3,
                              "beta": 0.1}, dict(token=0.8)),
    ("grpo_dual_clip", {"loss": "grpo", "dual_clip": 3.0}, dict(token=1.0, negative=True)),
    ("gspo_dual_clip", {"loss": "gspo", "dual_clip": 2.0, "clip_low": 0.05, "clip_high": 0.08},
     dict(token=0.3, seq=8.0, negative=True)),
    ("dapo_sequence_mask", {"loss": "dapo", "clip_high": 0.28, "is_correction": "sequence_mask", "is_min": 0.5,
                            "beta": 0.05, "dual_clip": 3.0}, dict(token=0.05, seq=True)),
    ("grpo_topk_token_truncate", {"loss": "grpo", "is_correction": "token_truncate", "is_min": 0.5,
                                  "temperature": 0.8, "top_k": 40, "top_p": 0.9, "beta": 0.1}, dict(token=0.8)),
]


def skew_sampler_(raw, token=0.0, seq=False, negative=False, seed=5):
    """Move the sampler's logprobs (kept <= 0): Gaussian noise per token, a shift per sequence (SEQ_SHIFTS);
    negative: the first half of the sequences get negative advantages."""
    rng = random.Random(seed)
    for b, mask in enumerate(raw["mask"]):
        pos = [i for i in range(1, len(mask)) if mask[i] == 1]
        shift = SEQ_SHIFTS[b % len(SEQ_SHIFTS)] * float(seq)
        for i in pos:
            raw["old_logprobs"][b][i] = min(0.0, raw["old_logprobs"][b][i] - rng.gauss(0.0, token) - shift / len(pos))
        if negative:
            a = raw["advantages"][b]
            raw["advantages"][b] = -abs(a) - 0.5 if b % 2 == 0 else abs(a) + 0.5
    return raw


@pytest.mark.parametrize("after_a_step", [False, True], ids=["start", "after_a_step"])
@pytest.mark.parametrize("name,cfg,skew", OFF_CASES, ids=[c[0] for c in OFF_CASES])
def test_off_policy_loss_and_gradient_match_float64_reference(name, cfg, skew, after_a_step):
    """The loss and its gradient with an off-policy correction, cispo, the dual clip: float64 reference. start:
    the policy is the learner at the start of the call (o_t: the forward's own logprobs, ρ = 1 under a
    correction); after_a_step: the policy has moved since (o_t: the pre-pass of the start weights), so the
    ratio and the clips are active too. Then a train call from the start weights reports the off-policy
    metrics of the reference."""
    sampler = _model64(0)
    T, k, p = cfg.get("temperature", 1.0), cfg.get("top_k", 0), cfg.get("top_p", 1.0)
    raw = sampled_batch(sampler, B=8, temperature=T, top_k=k, top_p=p, seed=7, per_token=name.startswith("dapo"))
    skew_sampler_(raw, **skew)
    full_cfg = dict({"beta": 0.0, "entropy_coef": 0.0}, **cfg, micro_batch_size=3, epochs=1)
    batch = parse_batch(raw, V, 64)
    start = copy.deepcopy(sampler)
    trainer = RLTrainer(start, GPTAdapter(start))  # the reference: the sampler's weights
    perturb_(start, 0.03)
    start_weights = copy.deepcopy(start)
    learner_old = None
    if after_a_step:
        learner_old = trainer._policy_logprobs(batch, parse_config(full_cfg))  # o_t of the start weights
        perturb_(start, 0.02, seed=99)
    policy = start
    parts = trainer.gradients(batch, parse_config(full_cfg), learner_old=learner_old)
    got = torch.cat([q.grad.reshape(-1) for q in policy.parameters()])

    mirror = copy.deepcopy(policy)
    for q in mirror.parameters():
        q.grad = None
    want_loss = reference_loss(mirror, sampler, raw, full_cfg, old_policy=start_weights if after_a_step else None)
    want_loss.backward()
    want = torch.cat([q.grad.reshape(-1) for q in mirror.parameters()])
    wl = want_loss.item()
    assert abs(parts["loss"] - wl) <= 1e-10 * max(1.0, abs(wl)), (parts["loss"], wl)
    assert float(want.norm()) > 1e-4, "a trivial case"
    assert _rel(got, want) < 1e-6
    for (name_, q), r in zip(policy.named_parameters(), mirror.parameters()):
        assert float((q.grad - r.grad).abs().max()) <= 1e-6 * float(want.abs().max()), name_

    # a train call from the start weights: its off-policy metrics are those of the reference
    m0 = copy.deepcopy(start_weights)
    tr = RLTrainer(m0, GPTAdapter(m0))
    m = tr.train(batch, parse_config(full_cfg))["metrics"]
    stats = {}
    reference_loss(copy.deepcopy(start_weights), sampler, raw, full_cfg, stats=stats)
    lr_ = torch.cat(stats["log_ratio"])
    assert abs(m["sampler_log_ratio_mean"] - float(lr_.mean())) < 1e-9
    assert abs(m["sampler_log_ratio_abs_max"] - float(lr_.abs().max())) < 1e-9
    corr = cfg.get("is_correction", "none")
    if corr == "none":
        assert m["is_weight_mean"] is None and m["is_truncated_fraction"] is None and m["is_masked_fraction"] is None
    else:
        w_is = torch.cat(stats["w_is"])
        assert abs(m["is_weight_mean"] - float(w_is.mean())) < 1e-9
        if corr.endswith("_truncate"):
            assert 0.0 < m["is_truncated_fraction"] < 1.0 and m["is_masked_fraction"] == 0.0, m
        else:
            assert m["is_truncated_fraction"] == 0.0 and 0.0 < m["is_masked_fraction"] < 1.0, m
            assert abs(m["is_masked_fraction"] - float((w_is == 0).double().mean())) < 1e-12
    if cfg.get("dual_clip"):
        flags = torch.cat([f.reshape(-1).expand(len(w)) for f, w in zip(stats["dual"], stats["w_is"])])
        assert abs(m["dual_clip_fraction"] - float(flags.double().mean())) < 1e-12
        if skew.get("negative"):
            assert m["dual_clip_fraction"] > 0.0, m
    else:
        assert m["dual_clip_fraction"] is None
    if cfg["loss"] == "cispo" and corr == "none":
        assert 0.0 < m["clip_fraction"] < 1.0, m  # the cap is active on some tokens


def test_dr_grpo_divides_by_the_given_constant_whatever_the_lengths():
    """Dr. GRPO's weights are 1 / (B · C) with C the trainer's constant (a fixed budget of policy tokens),
    never a length of the batch: two batches whose longest sequences differ (one sequence gets 20 more
    environment tokens at its end: mask 0, so its scored tokens and their terms do not change) give the
    float64 reference's gradient with w = 1 / (B · C), the same for both; with 2C it is exactly half."""
    sampler = _model64(0)
    raw = sampled_batch(sampler, B=6, seed=11)
    longer = copy.deepcopy(raw)
    longer["ids"][0] += [65 + i for i in range(20)]
    longer["mask"][0] += [0] * 20
    longer["old_logprobs"][0] += [0.0] * 20
    assert max(map(len, longer["ids"])) > max(map(len, raw["ids"])) + 5

    def grad(r, C):
        policy = copy.deepcopy(sampler)
        trainer = RLTrainer(policy, GPTAdapter(policy))  # the reference: the sampler's weights
        perturb_(policy, 0.03)
        cfg = {"loss": "dr_grpo", "dr_grpo_constant": C, "beta": 0.1, "entropy_coef": 0.02, "micro_batch_size": 4,
               "epochs": 1}
        trainer.gradients(parse_batch(r, V, 64), parse_config(cfg))
        got = torch.cat([p.grad.reshape(-1) for p in policy.parameters()])
        for q in policy.parameters():
            q.grad = None
        reference_loss(policy, sampler, r, cfg).backward()  # w = 1 / (B · C), from the definition
        want = torch.cat([q.grad.reshape(-1) for q in policy.parameters()])
        assert _rel(got, want) < 1e-6
        return got

    short, long_ = grad(raw, 40), grad(longer, 40)
    assert _rel(long_, short) < 1e-10
    assert _rel(2 * grad(raw, 80), short) < 1e-12

    # the weights themselves, and no constant: refused (no fallback)
    seq_index, seq_tokens = torch.tensor([0, 0, 1]), torch.tensor([2, 1])
    w = token_weights("dr_grpo", seq_index, seq_tokens, 6, 3, 40.0, torch.float64)
    assert torch.equal(w, torch.full((3,), 1.0 / (6 * 40.0), dtype=torch.float64))
    policy = copy.deepcopy(sampler)
    with pytest.raises(RequestError, match="config.dr_grpo_constant: required for dr_grpo"):
        parse_config({"loss": "dr_grpo"})
    with pytest.raises(RequestError, match="config.dr_grpo_constant: required for dr_grpo"):
        RLTrainer(policy, GPTAdapter(policy)).train(parse_batch(raw, V, 64), RLConfig(loss="dr_grpo"))


def test_chunked_head_matches_autograd():
    """head.py's closed-form backward (in chunks) against autograd through processed_logprobs, float64."""
    g = torch.Generator().manual_seed(0)
    for T, k, p in [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.8, 5, 1.0), (1.3, 0, 0.8), (0.9, 7, 0.6)]:
        N, D, Vs = 37, 8, 23
        h = torch.randn(N, D, dtype=torch.float64, generator=g, requires_grad=True)
        W = torch.randn(Vs, D, dtype=torch.float64, generator=g, requires_grad=True)
        bias = torch.randn(Vs, dtype=torch.float64, generator=g, requires_grad=True)
        t = torch.randint(0, Vs, (N,), generator=g)
        up = [torch.randn(N, dtype=torch.float64, generator=g) for _ in range(3)]

        def total(outs):
            return sum((torch.where(torch.isfinite(o), o, torch.zeros_like(o)) * u).sum() for o, u in zip(outs, up))

        r = reference_head_logprobs(torch.nn.functional.linear(h, W, bias), t, T, k, p)
        gr = torch.autograd.grad(total(r), (h, W, bias))
        for budget in (0, 1 << 30):  # logits recomputed in the backward, or kept and overwritten by their gradient
            a = head_logprobs(h, W, bias, t, T, k, p, chunk=10, save_budget=budget)
            for x, y in zip(a, r):
                assert torch.equal(torch.isfinite(x), torch.isfinite(y))
                fin = torch.isfinite(y)
                assert float((x[fin] - y[fin]).abs().max()) < 1e-12
            ga = torch.autograd.grad(total(a), (h, W, bias))
            for x, y in zip(ga, gr):
                assert _rel(x, y) < 1e-12
