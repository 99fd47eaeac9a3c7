"""Atomic RL steps: a snapshot of what a step can change (the trainable parameters, for LoRA the adapter only, and
AdamW's state), taken before the step when it is small enough (`SNAPSHOT_MAX_ELEMENTS`) and restored when the step
fails part-way, so a batch is never half-applied; and the weights' fingerprint that tells whether a step changed
them. `AtomicSteps` is mixed into RLTrainer (rl.py).
"""

from __future__ import annotations

import copy

import torch

# trainable parameters + optimizer state (elements) up to which a step is atomic
SNAPSHOT_MAX_ELEMENTS = 64 * 1024 * 1024


def weights_fingerprint(params) -> tuple:
    """An exact fingerprint of the parameters' bits: per dtype width, the sum of the tensors' words as
    integers (a changed bit changes its word, so the sum, unless changes cancel exactly), and the float64
    sum of the values. Equal before and after a step: the step left the weights as they were."""
    words = 0
    total = 0.0
    with torch.no_grad():
        for p in params:
            t = p.detach()
            t = (t.to_local() if hasattr(t, "to_local") else t).contiguous()  # FSDP: this rank's shard
            view = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
            if view is not None:
                words += int(t.view(view).sum(dtype=torch.int64))
            total += float(t.sum(dtype=torch.float64))
    return (words, total)


class AtomicSteps:
    """RLTrainer's snapshot and rollback; they use its params(), model and optimizer."""

    def _state_elements(self) -> int:
        """Elements a step can change: the trainable parameters (LoRA: the adapter only) and AdamW's state."""
        n = sum(p.numel() for p in self.params())
        if self.optimizer is not None:
            for st in self.optimizer.state.values():
                n += sum(v.numel() for v in st.values() if torch.is_tensor(v))
        return n

    def _snapshot(self):
        if self._state_elements() > SNAPSHOT_MAX_ELEMENTS:
            return None
        params = self.params()
        return (params, [p.detach().clone() for p in params],
                copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
                self.optimizer is not None)

    def _restore(self, snap) -> None:
        params, values, opt_state, had = snap
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        for p in list(self.model.parameters()) + params:
            p.grad = None
        if had and opt_state is not None:
            self.optimizer.load_state_dict(opt_state)
        elif not had:
            self.optimizer = None
