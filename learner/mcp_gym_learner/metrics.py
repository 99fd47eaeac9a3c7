"""The metrics of a `train` call, kept by name (PROTOCOL.md, "Training"; TrainMetricsSchema in
src/trainers/protocol.ts lists the answer's fields).

Within an optimizer step the micro-batches add their loss parts into named float64 scalars
(StepSums); under DDP they are stacked into one tensor for a single all-reduce and unstacked by the
same names. Each step's sums (with the step's gradient norm) are kept as tensors, so the device is
synchronised once, when `summary` reads them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Dict, List, Optional

import torch

from .losses import ImportanceWeights, TokenTerms

# What a micro-batch adds to its step, by name.
SUMMED = ("loss", "pg_loss", "kl", "entropy", "kl_old", "ratio_count", "clipped", "ratio_sum", "dual_clipped",
          "sampler_count", "sampler_log_ratio_sum", "is_weight_sum", "is_truncated", "is_masked",
          "value_loss", "value_clipped", "value_count")
# Means over the optimizer steps of the call.
STEP_MEANS = ("loss", "pg_loss", "kl", "entropy", "kl_old", "grad_norm", "value_loss")
# Totals over the optimizer steps of the call.
TOTALS = ("ratio_count", "clipped", "ratio_sum", "dual_clipped", "sampler_count", "sampler_log_ratio_sum",
          "is_weight_sum", "is_truncated", "is_masked", "value_clipped", "value_count")


class StepSums:
    """The named sums of one optimizer step, the smallest and largest ratio seen, and the largest
    |learner old logprob - sampler logprob|. The off-policy sums (sampler_*, is_*) are added by the first
    epoch only (`add(..., importance)`): they do not change across the epochs of a call."""

    def __init__(self, device: torch.device):
        f64 = torch.float64
        self.sums: "OrderedDict[str, torch.Tensor]" = OrderedDict(
            (k, torch.zeros((), dtype=f64, device=device)) for k in SUMMED)
        self.ratio_min = torch.full((1,), math.inf, dtype=f64, device=device)
        self.maxes = torch.full((2,), -math.inf, dtype=f64, device=device)  # ratio_max, sampler_log_ratio_abs_max

    def add(self, terms: TokenTerms, importance: Optional[ImportanceWeights] = None) -> None:
        r = terms.ratio.to(torch.float64)
        parts = {"loss": terms.loss.detach(), "pg_loss": terms.pg,
                 "kl": terms.kl if terms.kl is not None else terms.pg * 0, "entropy": terms.ent,
                 "kl_old": terms.kl_old, "ratio_count": torch.tensor(float(r.numel()), device=r.device),
                 "clipped": terms.clipped.sum(), "ratio_sum": r.sum()}
        if terms.dual_clipped is not None:
            parts["dual_clipped"] = terms.dual_clipped.sum()
        if terms.value is not None:
            parts.update(value_loss=terms.value, value_clipped=terms.value_clipped, value_count=terms.valued)
        big = r.max().reshape(1)
        if importance is not None:
            d = importance.log_ratio.to(torch.float64)
            parts["sampler_count"] = torch.tensor(float(d.numel()), device=d.device)
            parts["sampler_log_ratio_sum"] = d.sum()
            if importance.weight is not None:
                parts["is_weight_sum"] = importance.weight.to(torch.float64).sum()
                parts["is_truncated"] = importance.truncated.sum()
                parts["is_masked"] = importance.masked.sum()
            big = torch.cat([big, d.abs().max().reshape(1)])
        else:
            big = torch.cat([big, self.maxes[1:]])
        for k, v in parts.items():
            self.sums[k] = self.sums[k] + v.to(torch.float64)
        self.ratio_min = torch.minimum(self.ratio_min, r.min().reshape(1))
        self.maxes = torch.maximum(self.maxes, big)

    def all_reduce(self, dist: Any) -> None:
        """Sums over the ranks: one all-reduce of the stacked sums, one each for the minima and the maxima."""
        stacked = torch.stack(list(self.sums.values()))
        dist.all_reduce(stacked)
        self.sums = OrderedDict(zip(self.sums.keys(), stacked.unbind(0)))
        dist.all_reduce(self.ratio_min, op=dist.ReduceOp.MIN)
        dist.all_reduce(self.maxes, op=dist.ReduceOp.MAX)

    def record(self, grad_norm: torch.Tensor) -> Dict[str, torch.Tensor]:
        """This step's values by name (tensors, still on the device)."""
        out = dict(self.sums)
        out["grad_norm"] = grad_norm.detach().to(torch.float64).reshape(()).to(self.ratio_min.device)
        out["ratio_min"] = self.ratio_min.reshape(())
        out["ratio_max"] = self.maxes[0].reshape(())
        out["sampler_log_ratio_abs_max"] = self.maxes[1].reshape(())
        return out


def summary(steps: List[Dict[str, torch.Tensor]], beta: float, sampler: bool = False, is_correction: str = "none",
            dual_clip: float = 0.0, gae: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The loss metrics of a call from its optimizer steps' records (means over the steps of the aggregated
    losses and gradient norms; ratio statistics and the clip fractions over all scored tokens and epochs; the
    off-policy statistics over the scored tokens, once). sampler: the learner's old logprobs were known (the
    sampler_* metrics; else null); is_correction none: the is_* metrics are null; dual_clip 0: its fraction
    is null; gae: the call's GAE statistics (gae.py's ValueTargets.stats; None: no value metrics)."""
    col = {k: torch.stack([s[k] for s in steps]).cpu() for k in steps[0]}
    mean = {k: float(col[k].mean()) for k in STEP_MEANS}
    total = {k: float(col[k].sum()) for k in TOTALS}
    n = total["ratio_count"]
    rmin, rmax = float(col["ratio_min"].min()), float(col["ratio_max"].max())
    ns = total["sampler_count"]
    smax = float(col["sampler_log_ratio_abs_max"].max())
    known = sampler and ns > 0
    corrected = known and is_correction != "none"
    nv = total["value_count"]
    value = {} if gae is None else {
        **gae, "value_loss": mean["value_loss"], "value_clip_fraction": total["value_clipped"] / nv if nv else 0.0}
    return {
        **value,
        "loss": mean["loss"], "pg_loss": mean["pg_loss"], "kl": mean["kl"] if beta > 0 else None,
        "entropy": mean["entropy"], "kl_old": mean["kl_old"],
        "clip_fraction": total["clipped"] / n if n else 0.0,
        "ratio_mean": total["ratio_sum"] / n if n else None,
        "ratio_min": rmin if math.isfinite(rmin) else None,
        "ratio_max": rmax if math.isfinite(rmax) else None,
        "dual_clip_fraction": (total["dual_clipped"] / n if n else 0.0) if dual_clip > 0 else None,
        "sampler_log_ratio_mean": total["sampler_log_ratio_sum"] / ns if known else None,
        "sampler_log_ratio_abs_max": smax if known and math.isfinite(smax) else None,
        "is_weight_mean": total["is_weight_sum"] / ns if corrected else None,
        "is_truncated_fraction": total["is_truncated"] / ns if corrected else None,
        "is_masked_fraction": total["is_masked"] / ns if corrected else None,
        "grad_norm": mean["grad_norm"], "grad_norm_max": float(col["grad_norm"].max()),
        "optimizer_steps": len(steps),
    }
