"""The GRPO-family losses on the scored tokens of a micro-batch (PROTOCOL.md, "Training").

Every loss is a weighted sum over the scored tokens t (policy tokens, mask 1) of

    w_t · (w^IS_t · pg_t + beta · kl_t - entropy_coef · ent_t)

(w^IS_t = 1 without an off-policy correction; the KL and entropy terms are never multiplied by it, as in
TRL) and the aggregations differ only in the weights w_t (B: the sequences of the whole minibatch,
|y_i|: the scored tokens of sequence i, N: the scored tokens of the whole minibatch, C: a constant):

    grpo, gspo   : w_t = 1 / (|y_i| · B)     per-sequence mean, then mean over sequences
    dapo, cispo  : w_t = 1 / N               token-level
    dr_grpo      : w_t = 1 / (B · C)         sum over a constant

Because the weights use the counts of the whole minibatch, micro-batches (gradient accumulation)
and DDP shards sum to exactly the full-batch loss.

Old logprobs. s_t: the sampler's logprob of the token (the batch's old_logprobs). o_t: the learner's
old-policy logprob, that of the weights at the start of the train call (before any optimizer step of
the call), processed like lp_t (temperature, top-k, top-p). The PPO ratio is taken against old_t:

    is_correction none : old_t = s_t                  (the learner's and the sampler's weights are taken equal)
    otherwise          : old_t = o_t, and the sampler's lag is corrected by the importance weight w^IS
                         (detached: no gradient), from
        token level    : r_t = exp(clamp(o_t - s_t, -20, 20))
        sequence level : r_t = r_i = exp(clamp(Σ_{u in y_i} (o_u - s_u), -20, 20))   (every token of sequence i)
        *_truncate     : w^IS_t = clamp(r_t, min=is_min, max=is_cap)
        *_mask         : w^IS_t = 1 if is_min <= r_t <= is_cap else 0               (is_min 0: no lower bound)

The policy-gradient term:

    log ρ_t = clamp(lp_t - old_t, -20, 20)                     (a token the sampler could not have drawn;
                                                                0 when lp_t = old_t = -inf: a token outside
                                                                the kept top-k/top-p set of both)
    grpo, dapo, dr_grpo, cispo : ρ_t = exp(log ρ_t)
    gspo                : s_i = exp(mean_{t in y_i} log ρ_t),   ρ_t = sg(s_i) · exp(log ρ_t - sg(log ρ_t))
                          (GSPO-token: value s_i, gradient s_i ∇lp_t; with one advantage per sequence
                          this is exactly GSPO's sequence-level objective and gradient)
    pg_t  = -min(ρ_t A_t, clip(ρ_t, 1 - clip_low, 1 + clip_high) A_t)        (grpo, dapo, dr_grpo, gspo)
            dual_clip c > 0 (verl's clip_ratio_c): for A_t < 0, pg_t = min(pg_t, -c · A_t) (A_t >= 0: unchanged)
    cispo : pg_t = -sg(min(ρ_t, 1 + clip_high)) · A_t · lp_t   (MiniMax-M1; upper bound only, as in TRL and
            ScaleRL: clip_low is unused; a token with lp_t = -inf, outside the kept set, gives 0)
    kl_t  = exp(d) - d - 1,  d = clamp(ref_t - lp_t, -20, 20)  (k3; lp, ref: untruncated log_softmax(x / T))
    ent_t = entropy of the sampling distribution at t

The `clipped` flag of a token: A_t > 0 and ρ_t > 1 + clip_high, or A_t < 0 and ρ_t < 1 - clip_low; for
cispo ρ_t > 1 + clip_high. The dual-clip flag: A_t < 0 and the PPO term exceeds -c · A_t.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch

LOSSES = ("grpo", "dapo", "dr_grpo", "gspo", "cispo")
IS_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
LOG_RATIO_CLAMP = 20.0


@dataclass
class TokenTerms:
    """The per-token tensors of the loss (all [N] over the scored tokens)."""

    loss: torch.Tensor  # the differentiable weighted sum (a scalar)
    pg: torch.Tensor  # Σ w·w^IS·pg (a scalar, detached)
    kl: Optional[torch.Tensor]  # Σ w·kl, or None without a reference
    ent: torch.Tensor  # Σ w·ent
    ratio: torch.Tensor  # ρ per token (detached)
    clipped: torch.Tensor  # bool per token: the clipped branch is active (no gradient from pg)
    kl_old: torch.Tensor  # Σ w·k3(old, lp): KL to the old policy of the ratio (monitoring)
    dual_clipped: Optional[torch.Tensor] = None  # bool per token: the dual-clip bound is active (None: off)
    # PPO with GAE (gae.py; None without): Σ u·L_V (detached, before value_coef; `loss` includes value_coef times
    # it), the valued tokens whose clipped value branch is the larger, and the valued tokens
    value: Optional[torch.Tensor] = None
    value_clipped: Optional[torch.Tensor] = None
    valued: Optional[torch.Tensor] = None


@dataclass
class ImportanceWeights:
    """The off-policy correction of a micro-batch's scored tokens (all [N], detached)."""

    log_ratio: torch.Tensor  # clamp(o_t - s_t, -20, 20): the learner's old logprob minus the sampler's
    weight: Optional[torch.Tensor]  # w^IS (None: is_correction none)
    truncated: Optional[torch.Tensor]  # bool: truncation changed the weight
    masked: Optional[torch.Tensor]  # bool: masking set the weight to 0


def token_weights(kind: str, seq_index: torch.Tensor, seq_tokens: torch.Tensor, n_seqs: float, n_tokens: float,
                  constant: float, dtype: torch.dtype) -> torch.Tensor:
    """w_t for each scored token. seq_index: [N] local sequence of each token; seq_tokens: [b] scored tokens
    of each local sequence; n_seqs, n_tokens: counts of the whole minibatch; constant: Dr. GRPO's C."""
    if kind in ("grpo", "gspo"):
        return 1.0 / (seq_tokens.to(dtype)[seq_index] * float(n_seqs))
    if kind in ("dapo", "cispo"):
        return torch.full(seq_index.shape, 1.0 / float(n_tokens), dtype=dtype, device=seq_index.device)
    if kind == "dr_grpo":
        return torch.full(seq_index.shape, 1.0 / (float(n_seqs) * float(constant)), dtype=dtype,
                          device=seq_index.device)
    raise ValueError(f"loss: unknown loss {kind!r} (expected: {', '.join(LOSSES)})")


def segment_mean(values: torch.Tensor, seq_index: torch.Tensor, seq_tokens: torch.Tensor) -> torch.Tensor:
    """Mean of `values` per sequence ([b]); every sequence has at least one token."""
    return segment_sum(values, seq_index, seq_tokens) / seq_tokens.to(values.dtype)


def segment_sum(values: torch.Tensor, seq_index: torch.Tensor, seq_tokens: torch.Tensor) -> torch.Tensor:
    """Sum of `values` per sequence ([b])."""
    sums = torch.zeros(seq_tokens.shape[0], dtype=values.dtype, device=values.device)
    return sums.index_add(0, seq_index, values)


@torch.no_grad()
def importance_weights(mode: str, learner_old: torch.Tensor, sampler: torch.Tensor, seq_index: torch.Tensor,
                       seq_tokens: torch.Tensor, is_min: float, is_cap: float) -> ImportanceWeights:
    """w^IS of each scored token (see the module's docstring); mode none: the log-ratios only."""
    o = learner_old.detach()
    s = sampler.to(o.dtype)
    d = torch.clamp(o - s, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # o = -inf (outside the kept set): -20
    if mode == "none":
        return ImportanceWeights(d, None, None, None)
    if mode.startswith("token_"):
        r = torch.exp(d)
    elif mode.startswith("sequence_"):
        seq = torch.clamp(segment_sum(o - s, seq_index, seq_tokens), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        r = torch.exp(seq)[seq_index]
    else:
        raise ValueError(f"is_correction: unknown mode {mode!r} (expected: {', '.join(IS_CORRECTIONS)})")
    outside = (r > is_cap) | (r < is_min)
    none = torch.zeros_like(outside)
    if mode.endswith("_truncate"):
        return ImportanceWeights(d, torch.clamp(r, min=is_min, max=is_cap), outside, none)
    return ImportanceWeights(d, (~outside).to(o.dtype), none, outside)


def loss_terms(kind: str, lp: torch.Tensor, lp_t: torch.Tensor, ent: torch.Tensor, old: torch.Tensor,
               adv: torch.Tensor, ref: Optional[torch.Tensor], weights: torch.Tensor, seq_index: torch.Tensor,
               seq_tokens: torch.Tensor, clip_low: float, clip_high: float, beta: float,
               entropy_coef: float, is_weight: Optional[torch.Tensor] = None,
               dual_clip: float = 0.0) -> TokenTerms:
    """The loss of one micro-batch's scored tokens (see the module's docstring). old: the denominator of the
    ratio (s_t, or o_t with an off-policy correction); is_weight: w^IS (detached), or None."""
    dt = lp.dtype
    old = old.to(dt)
    adv = adv.to(dt)
    w = weights.to(dt)
    # -inf - -inf (a token outside the kept set of both): log ρ = 0 (a no-op where old is finite)
    both_out = torch.isneginf(lp.detach()) & torch.isneginf(old)
    diff = torch.where(both_out, torch.zeros_like(lp), lp - old)
    log_ratio = torch.clamp(diff, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if kind == "gspo":
        seq_lr = segment_mean(log_ratio, seq_index, seq_tokens).detach()
        ratio = torch.exp(seq_lr[seq_index] + (log_ratio - log_ratio.detach()))
    else:
        ratio = torch.exp(log_ratio)
    dual = None
    if kind == "cispo":
        capped = torch.clamp(ratio.detach(), max=1.0 + clip_high)
        finite_lp = torch.where(torch.isfinite(lp), lp, torch.zeros_like(lp))
        pg = -capped * adv * finite_lp
    else:
        clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        pg = torch.maximum(-ratio * adv, -clipped_ratio * adv)
        if dual_clip > 0:
            bound = -dual_clip * adv
            with torch.no_grad():
                dual = (adv < 0) & (pg.detach() > bound)
            pg = torch.where(adv < 0, torch.minimum(pg, bound), pg)
    if is_weight is not None:
        pg = is_weight.to(dt) * pg
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
        if kind == "cispo":
            clipped = r > 1.0 + clip_high
        else:
            clipped = ((adv > 0) & (r > 1.0 + clip_high)) | ((adv < 0) & (r < 1.0 - clip_low))
        d_old = torch.clamp(torch.where(both_out, torch.zeros_like(old), old - lp.detach()),
                            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl_old = (w * (torch.exp(d_old) - d_old - 1.0)).sum()
    return TokenTerms(loss=total, pg=pg_sum.detach(), kl=kl_sum, ent=ent_sum.detach(), ratio=r,
                      clipped=clipped, kl_old=kl_old, dual_clipped=dual)


def describe() -> Dict[str, str]:
    return {"grpo": "PPO clip, per-sequence mean", "dapo": "decoupled clip, token-level",
            "dr_grpo": "sum over a constant", "gspo": "sequence ratio",
            "cispo": "clipped IS-weight REINFORCE, token-level"}
