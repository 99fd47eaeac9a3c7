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
from typing import Any, Dict, List

import torch

from .losses import TokenTerms

# What a micro-batch adds to its step, by name.
SUMMED = ("loss", "pg_loss", "kl", "entropy", "kl_old", "ratio_count", "clipped", "ratio_sum")
# Means over the optimizer steps of the call.
STEP_MEANS = ("loss", "pg_loss", "kl", "entropy", "kl_old", "grad_norm")


class StepSums:
    """The named sums of one optimizer step, and the smallest and largest ratio seen."""

    def __init__(self, device: torch.device):
        f64 = torch.float64
        self.sums: "OrderedDict[str, torch.Tensor]" = OrderedDict(
            (k, torch.zeros((), dtype=f64, device=device)) for k in SUMMED)
        self.ratio_min = torch.full((1,), math.inf, dtype=f64, device=device)
        self.ratio_max = torch.full((1,), -math.inf, dtype=f64, device=device)

    def add(self, terms: TokenTerms) -> None:
        r = terms.ratio.to(torch.float64)
        parts = {"loss": terms.loss.detach(), "pg_loss": terms.pg,
                 "kl": terms.kl if terms.kl is not None else terms.pg * 0, "entropy": terms.ent,
                 "kl_old": terms.kl_old, "ratio_count": torch.tensor(float(r.numel()), device=r.device),
                 "clipped": terms.clipped.sum(), "ratio_sum": r.sum()}
        for k, v in parts.items():
            self.sums[k] = self.sums[k] + v.to(torch.float64)
        self.ratio_min = torch.minimum(self.ratio_min, r.min().reshape(1))
        self.ratio_max = torch.maximum(self.ratio_max, r.max().reshape(1))

    def all_reduce(self, dist: Any) -> None:
        """Sums over the ranks: one all-reduce of the stacked sums, one each for the min and the max."""
        stacked = torch.stack(list(self.sums.values()))
        dist.all_reduce(stacked)
        self.sums = OrderedDict(zip(self.sums.keys(), stacked.unbind(0)))
        dist.all_reduce(self.ratio_min, op=dist.ReduceOp.MIN)
        dist.all_reduce(self.ratio_max, op=dist.ReduceOp.MAX)

    def record(self, grad_norm: torch.Tensor) -> Dict[str, torch.Tensor]:
        """This step's values by name (tensors, still on the device)."""
        out = dict(self.sums)
        out["grad_norm"] = grad_norm.detach().to(torch.float64).reshape(()).to(self.ratio_min.device)
        out["ratio_min"] = self.ratio_min.reshape(())
        out["ratio_max"] = self.ratio_max.reshape(())
        return out


def summary(steps: List[Dict[str, torch.Tensor]], beta: float) -> Dict[str, Any]:
    """The loss metrics of a call from its optimizer steps' records (means over the steps of the aggregated
    losses and gradient norms; ratio statistics and the clip fraction over all scored tokens and epochs)."""
    col = {k: torch.stack([s[k] for s in steps]).cpu() for k in steps[0]}
    mean = {k: float(col[k].mean()) for k in STEP_MEANS}
    total = {k: float(col[k].sum()) for k in ("ratio_count", "clipped", "ratio_sum")}
    n = total["ratio_count"]
    rmin, rmax = float(col["ratio_min"].min()), float(col["ratio_max"].max())
    return {
        "loss": mean["loss"], "pg_loss": mean["pg_loss"], "kl": mean["kl"] if beta > 0 else None,
        "entropy": mean["entropy"], "kl_old": mean["kl_old"],
        "clip_fraction": total["clipped"] / n if n else 0.0,
        "ratio_mean": total["ratio_sum"] / n if n else None,
        "ratio_min": rmin if math.isfinite(rmin) else None,
        "ratio_max": rmax if math.isfinite(rmax) else None,
        "grad_norm": mean["grad_norm"], "grad_norm_max": float(col["grad_norm"].max()),
        "optimizer_steps": len(steps),
    }
