"""PPO with GAE: the value head, the advantages and the value loss (PROTOCOL.md, "PPO with GAE").

A batch that carries `rewards` (one per token, nonzero only on policy tokens: each turn's step reward on its
last policy token, the final reward minus the step rewards on the sequence's last policy token) is trained
with advantages the learner computes itself, from a value head on the policy's final hidden states:

    V_t  = w · h_t + b                      (h_t: the hidden state that predicts token t, the row its logprob
                                             is read from: the state before the policy emits token t)

The time axis is the sequence's scored tokens only (policy tokens, mask 1, position >= 1): prompt and
tool-result tokens get no value and are not bootstrapped across, so the successor of a turn's last policy
token is the next turn's first policy token, and after the sequence's last policy token V = 0 (terminal).

    gae_level token:  δ_t = r_t + γ·V_{t+1} − V_t,            A_t = Σ_l (γλ)^l δ_{t+l},   R_t = A_t + V_t
    gae_level turn :  the turns are the runs of consecutive scored positions; turn k has one value V_k (read
                      at its first policy token) and one reward R_k (the sum of its tokens' rewards):
                      δ_k = R_k + γ·V_{k+1} − V_k,            A_k = Σ_l (γλ)^l δ_{k+l},   Ret_k = A_k + V_k
                      A_k goes to every token of turn k; only the turn's first token has a value target.

V is V_old: the value head's values (no gradient) at the start of the train call, before its first optimizer
step. With whiten_advantages the advantages become (A − mean) / sqrt(var + 1e-8) over all scored tokens of
the batch (var the unbiased variance, as TRL's `masked_whiten`); every rank holds every sequence's values
(one all-reduce), so the mean and variance are those of the whole batch under DDP too.

The value loss (PPO2's clipping, c = value_clip; c = 0: no clipping), over the valued tokens (token level:
every scored token; turn level: each turn's first) and normalised by their count in the whole minibatch:

    L_V = Σ_t u_t · 0.5·max((V_t − R_t)², (V_old,t + clip(V_t − V_old,t, −c, c) − R_t)²),   u_t = 1 / N_V

added to the policy loss as value_coef · L_V, in the same backward and optimizer step. The head is created
zero (V = 0 everywhere until it learns: the first step's advantages are the discounted rewards, and every
rank creates the same head), lives beside the model (never in its state_dict: exports and the policy never
see it) and is saved in the learner's checkpoints (checkpoint.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn

WHITEN_EPS = 1e-8


def make_value_head(dim: int, device: torch.device, dtype: torch.dtype) -> nn.Linear:
    """A Linear(dim, 1), zero: every rank creates the same one, and V starts at 0."""
    head = nn.Linear(dim, 1, bias=True).to(device=device, dtype=dtype)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
    return head


def log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


@dataclass
class ValueTargets:
    """Per sequence (float64, over its scored tokens): V_old, the returns R, the advantages (whitened or not)
    and the valued tokens (1.0 where the value loss reads V: every scored token, or each turn's first)."""

    v_old: List[torch.Tensor]
    returns: List[torch.Tensor]
    adv: List[torch.Tensor]
    valued: List[torch.Tensor]
    stats: Dict[str, Any]


def discounted(deltas: torch.Tensor, factor: float) -> torch.Tensor:
    """A_k = Σ_l factor^l δ_{k+l} (backwards)."""
    out = torch.zeros_like(deltas)
    acc = 0.0
    for k in range(deltas.shape[0] - 1, -1, -1):
        acc = float(deltas[k]) + factor * acc
        out[k] = acc
    return out


def sequence_gae(values: torch.Tensor, rewards: torch.Tensor, turn_start: torch.Tensor, gamma: float, lam: float,
                 level: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(advantages per scored token, returns per scored token, valued mask) of one sequence (float64, CPU).
    Returns at tokens without a value target are 0."""
    v = values.detach().to(torch.float64).cpu()
    r = rewards.to(torch.float64)
    n = v.shape[0]
    if level == "token":
        nxt = torch.cat([v[1:], torch.zeros(1, dtype=torch.float64)])  # V after the last policy token: 0
        adv = discounted(r + gamma * nxt - v, gamma * lam)
        return adv, adv + v, torch.ones(n, dtype=torch.float64)
    if level != "turn":
        raise ValueError(f"gae_level: unknown level {level!r} (expected: token, turn)")
    starts = torch.nonzero(turn_start, as_tuple=False).reshape(-1).tolist()
    turn_of = torch.cumsum(turn_start.to(torch.long), 0) - 1  # the turn of each scored token
    m = len(starts)
    vt = v[starts]
    rt = torch.zeros(m, dtype=torch.float64).index_add(0, turn_of, r)
    nxt = torch.cat([vt[1:], torch.zeros(1, dtype=torch.float64)])
    at = discounted(rt + gamma * nxt - vt, gamma * lam)
    ret = torch.zeros(n, dtype=torch.float64)
    ret[starts] = at + vt
    valued = torch.zeros(n, dtype=torch.float64)
    valued[starts] = 1.0
    return at[turn_of], ret, valued


def _var(x: torch.Tensor, unbiased: bool) -> float:
    n = x.numel()
    if n < (2 if unbiased else 1):
        return 0.0
    return float(((x - x.mean()) ** 2).sum()) / (n - 1 if unbiased else n)


def value_targets(values: List[torch.Tensor], rewards: List[torch.Tensor], turn_start: List[torch.Tensor],
                  cfg: Any) -> ValueTargets:
    """GAE for every sequence of the batch from V_old (`values`), then the whitening and the statistics
    (value_mean, explained_variance, advantage_mean/std before whitening, return_mean)."""
    advs, rets, vals = [], [], []
    for v, r, ts in zip(values, rewards, turn_start):
        a, ret, valued = sequence_gae(v, r, ts, cfg.gae_gamma, cfg.gae_lambda, cfg.gae_level)
        advs.append(a)
        rets.append(ret)
        vals.append(valued)
    v_old = [v.detach().to(torch.float64).cpu() for v in values]
    A = torch.cat(advs)
    sel = torch.cat(vals) > 0
    Vv, Rv = torch.cat(v_old)[sel], torch.cat(rets)[sel]
    var_r = _var(Rv, False)
    stats = {"value_mean": float(Vv.mean()), "return_mean": float(Rv.mean()),
             "explained_variance": 1.0 - _var(Rv - Vv, False) / var_r if var_r > 0 else None,
             "advantage_mean": float(A.mean()), "advantage_std": _var(A, False) ** 0.5}
    if cfg.whiten_advantages:
        mean, var = float(A.mean()), _var(A, True)
        advs = [(a - mean) / (var + WHITEN_EPS) ** 0.5 for a in advs]
    return ValueTargets(v_old, rets, advs, vals, stats)


def value_terms(v: torch.Tensor, v_old: torch.Tensor, ret: torch.Tensor, weights: torch.Tensor,
                clip: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(Σ_t u_t · L_t, the clipped flags) of a micro-batch's scored tokens; weights u_t: 1/N_V on the valued
    tokens of the minibatch, 0 elsewhere. The clipped flag: |V − V_old| > c and the clipped branch is the larger
    (it gives the gradient, which is then 0)."""
    dt = v.dtype
    v_old, ret, u = v_old.to(dt), ret.to(dt), weights.to(dt)
    err = (v - ret) ** 2
    if clip > 0:
        vc = v_old + torch.clamp(v - v_old, -clip, clip)
        err_c = (vc - ret) ** 2
        per = 0.5 * torch.maximum(err, err_c)
        with torch.no_grad():
            # |V − V_old| <= c: both branches are the same number up to rounding, which must not count
            clipped = ((v - v_old).abs() > clip) & (err_c > err) & (u > 0)
    else:
        per = 0.5 * err
        clipped = torch.zeros_like(u, dtype=torch.bool)
    return (u * per).sum(), clipped


def check_gae(batch: Any, cfg: Any) -> None:
    """The rules between a GAE batch and the config."""
    from .protocol import RequestError

    if batch.rewards is None:
        return
    if cfg.loss == "gspo":
        raise RequestError("config.loss: gspo takes one sequence-level ratio for all of a sequence's tokens, which "
                           "does not fit GAE's per-token advantages (batch.rewards): use grpo, dapo, dr_grpo or "
                           "cispo")

