"""The frozen reference policy of the KL term (PROTOCOL.md, "Training"): the weights at `load` (or at
the last ProRL reset), kept as a deep copy of the model ("copy") or, for LoRA, as a snapshot of the
trainable parameters swapped into the model for the reference's forward ("swap": the base is shared).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Dict, List, Optional

import torch

from .config import ConfigError
from .policy import Adapter, LogprobModule
from .state_dict import cpu_state


class Reference:
    """The frozen reference policy. mode "copy": a deep copy of the model (eval, no gradients);
    mode "swap": a copy of the trainable parameters only, swapped into the model for the reference forward
    (for LoRA: the base weights are shared)."""

    def __init__(self, model: torch.nn.Module, adapter: Adapter, mode: str = "copy"):
        if mode not in ("copy", "swap"):
            raise ValueError(f"reference mode: copy or swap, got {mode!r}")
        self.model, self.adapter, self.mode = model, adapter, mode
        self.module: Optional[LogprobModule] = None
        self.snapshot: Optional[List[torch.Tensor]] = None
        self.sharded = False  # FSDP (rl.py): the copy is sharded like the model; a reset copies shard by shard
        self.root: Optional[LogprobModule] = None  # FSDP, swap: the trainer's sharded module (its forward gathers)
        self.reset()

    def _trainable(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def reset(self) -> None:
        """The reference becomes the current weights."""
        with torch.no_grad():
            if self.mode == "copy" and self.sharded:
                for r, p in zip(self.module.model.parameters(), self.model.parameters()):
                    r.copy_(p)
            elif self.mode == "copy":
                ref = copy.deepcopy(self.model)
                ref.eval()
                for p in ref.parameters():
                    p.requires_grad_(False)
                self.module = LogprobModule(ref, self.adapter)
            else:
                self.snapshot = [p.detach().clone() for p in self._trainable()]

    def state_dict(self) -> Dict[str, Any]:
        if self.mode == "copy":
            return {"mode": "copy", "state": cpu_state(self.module.model.state_dict())}
        return {"mode": "swap", "params": [t.detach().cpu() for t in self.snapshot]}

    def check_state(self, st: Dict[str, Any]) -> None:
        if not isinstance(st, dict) or st.get("mode") != self.mode:
            raise ConfigError(f"dir: the checkpoint's reference is not a {self.mode!r} reference")
        if self.mode == "copy":
            want = self.module.model.state_dict()
            got = st.get("state", {})
            if set(want) != set(got) or any(tuple(want[k].shape) != tuple(got[k].shape) for k in want):
                raise ConfigError("dir: the checkpoint's reference weights do not fit the loaded model")
        else:
            ps = self._trainable()
            got = st.get("params", [])
            if len(got) != len(ps) or any(tuple(a.shape) != tuple(b.shape) for a, b in zip(got, ps)):
                raise ConfigError("dir: the checkpoint's reference parameters do not fit the loaded model")

    def load_state_dict(self, st: Dict[str, Any]) -> None:
        with torch.no_grad():
            if self.mode == "copy":
                self.module.model.load_state_dict(st["state"])
            else:
                self.snapshot = [t.to(p.device, p.dtype).clone() for t, p in zip(st["params"], self._trainable())]

    @contextlib.contextmanager
    def _swapped(self):
        ps = self._trainable()
        saved = [p.detach().clone() for p in ps]
        with torch.no_grad():
            for p, s in zip(ps, self.snapshot):
                p.copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(ps, saved):
                    p.copy_(s)

    def logprobs(self, inputs, sel, targets, temperature: float, chunk: Optional[int]) -> torch.Tensor:
        """Untruncated log_softmax(logits / T) of the targets (no gradient)."""
        with torch.no_grad():
            if self.mode == "copy":
                lp, _, _ = self.module(inputs, sel, targets, temperature, 0, 1.0, chunk, False)
                if self.sharded:  # FSDP keeps the root unit gathered after a forward; this one has no backward
                    self.module.reshard()
                return lp
            with self._swapped():
                was = self.model.training
                self.model.eval()
                try:
                    module = self.root if self.root is not None else LogprobModule(self.model, self.adapter)
                    lp, _, _ = module(inputs, sel, targets, temperature, 0, 1.0, chunk, False)
                finally:
                    self.model.train(was)
                return lp
