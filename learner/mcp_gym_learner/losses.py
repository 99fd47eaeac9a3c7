"""The GRPO-family losses on the scored tokens of a micro-batch (PROTOCOL.md, "Training").

Every loss is a weighted sum over the scored tokens t (policy tokens, mask 1) of

    w_t · (pg_t + beta · kl_t - entropy_coef · ent_t)

and the aggregations differ only in the weights w_t (B: the sequences of the whole minibatch,
|y_i|: the scored tokens of sequence i, N: the scored tokens of the whole minibatch, C: a constant):

    grpo, gspo : w_t = 1 / (|y_i| · B)     per-sequence mean, then mean over sequences
    dapo       : w_t = 1 / N               token-level
    dr_grpo    : w_t = 1 / (B · C)         sum over a constant

Because the weights use the counts of the whole minibatch, micro-batches (gradient accumulation)
and DDP shards sum to exactly the full-batch loss.

    log ρ_t = clamp(lp_t - old_t, -20, 20)                     (a token the sampler could not have drawn)
    grpo, dapo, dr_grpo : ρ_t = exp(log ρ_t)
    gspo                : s_i = exp(mean_{t in y_i} log ρ_t),   ρ_t = sg(s_i) · exp(log ρ_t - sg(log ρ_t))
                          (GSPO-token: value s_i, gradient s_i ∇lp_t; with one advantage per sequence
                          this is exactly GSPO's sequence-level objective and gradient)
    pg_t  = -min(ρ_t A_t, clip(ρ_t, 1 - clip_low, 1 + clip_high) A_t)
    kl_t  = exp(d) - d - 1,  d = clamp(ref_t - lp_t, -20, 20)  (k3; lp, ref: untruncated log_softmax(x / T))
    ent_t = entropy of the sampling distribution at t
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch

LOSSES = ("grpo", "dapo", "dr_grpo", "gspo")
LOG_RATIO_CLAMP = 20.0


@dataclass
class TokenTerms:
    """The per-token tensors of the loss (all [N] over the scored tokens)."""

    loss: torch.Tensor  # the differentiable weighted sum (a scalar)
    pg: torch.Tensor  # Σ w·pg (a scalar, detached)
    kl: Optional[torch.Tensor]  # Σ w·kl, or None without a reference
    ent: torch.Tensor  # Σ w·ent
    ratio: torch.Tensor  # ρ per token (detached)
    clipped: torch.Tensor  # bool per token: the clipped branch is active (no gradient from pg)
    kl_old: torch.Tensor  # Σ w·k3(old, lp): KL to the sampling policy (monitoring)


def token_weights(kind: str, seq_index: torch.Tensor, seq_tokens: torch.Tensor, n_seqs: float, n_tokens: float,
                  constant: float, dtype: torch.dtype) -> torch.Tensor:
    """w_t for each scored token. seq_index: [N] local sequence of each token; seq_tokens: [b] scored tokens
    of each local sequence; n_seqs, n_tokens: counts of the whole minibatch; constant: Dr. GRPO's C."""
    if kind in ("grpo", "gspo"):
        return 1.0 / (seq_tokens.to(dtype)[seq_index] * float(n_seqs))
    if kind == "dapo":
        return torch.full(seq_index.shape, 1.0 / float(n_tokens), dtype=dtype, device=seq_index.device)
    if kind == "dr_grpo":
        return torch.full(seq_index.shape, 1.0 / (float(n_seqs) * float(constant)), dtype=dtype,
                          device=seq_index.device)
    raise ValueError(f"loss: unknown loss {kind!r} (expected: {', '.join(LOSSES)})")


def segment_mean(values: torch.Tensor, seq_index: torch.Tensor, seq_tokens: torch.Tensor) -> torch.Tensor:
    """Mean of `values` per sequence ([b]); every sequence has at least one token."""
    sums = torch.zeros(seq_tokens.shape[0], dtype=values.dtype, device=values.device)
    sums = sums.index_add(0, seq_index, values)
    return sums / seq_tokens.to(values.dtype)


def loss_terms(kind: str, lp: torch.Tensor, lp_t: torch.Tensor, ent: torch.Tensor, old: torch.Tensor,
               adv: torch.Tensor, ref: Optional[torch.Tensor], weights: torch.Tensor, seq_index: torch.Tensor,
               seq_tokens: torch.Tensor, clip_low: float, clip_high: float, beta: float,
               entropy_coef: float) -> TokenTerms:
    """The loss of one micro-batch's scored tokens (see the module's docstring)."""
    dt = lp.dtype
    old = old.to(dt)
    adv = adv.to(dt)
    w = weights.to(dt)
    log_ratio = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if kind == "gspo":
        seq_lr = segment_mean(log_ratio, seq_index, seq_tokens).detach()
        ratio = torch.exp(seq_lr[seq_index] + (log_ratio - log_ratio.detach()))
    else:
        ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(-ratio * adv, -clipped_ratio * adv)
    pg_sum = (w * pg).sum()
    total = pg_sum
    kl_sum = None
    if ref is not None:
        d = torch.clamp(ref.to(dt) - lp_t, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl = torch.exp(d) - d - 1.0
        kl_sum = (w * kl).sum()
        if beta != 0.0:
            total = total + beta * kl_sum
        kl_sum = kl_sum.detach()
    ent_sum = (w * ent).sum()
    if entropy_coef != 0.0:
        total = total - entropy_coef * ent_sum
    with torch.no_grad():
        r = ratio.detach()
        clipped = ((adv > 0) & (r > 1.0 + clip_high)) | ((adv < 0) & (r < 1.0 - clip_low))
        d_old = torch.clamp(old - lp.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl_old = (w * (torch.exp(d_old) - d_old - 1.0)).sum()
    return TokenTerms(loss=total, pg=pg_sum.detach(), kl=kl_sum, ent=ent_sum.detach(), ratio=r,
                      clipped=clipped, kl_old=kl_old)


def describe() -> Dict[str, str]:
    return {"grpo": "PPO clip, per-sequence mean", "dapo": "decoupled clip, token-level",
            "dr_grpo": "sum over a constant", "gspo": "sequence ratio"}
