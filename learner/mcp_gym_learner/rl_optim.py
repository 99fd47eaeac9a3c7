"""What an RL step trains and with which optimizer: the trainable parameters (the model's, and the value head of
PPO with GAE, created here), AdamW over them (its parameter groups; the hyper-parameters a call may change) and the
learning-rate schedule (`lr_at`: linear warm-up, then cosine to min_lr_ratio · lr). `Optimizing` is mixed into
RLTrainer (rl.py).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from .gae import log, make_value_head
from .rl_config import RLConfig
from .runtime import adamw


def lr_at(step: int, total: int, lr: float, warmup: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine to lr · min_lr_ratio at step total - 1 (then flat);
    total 0: constant after the warm-up."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if total <= 0:
        return lr
    span = max(1, total - warmup - 1)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class Optimizing:
    """RLTrainer's parameters and optimizer; they use its model, adapter, device, optimizer and value_head."""

    # -- the value head --

    def value_dim(self) -> int:
        """The width of the final hidden states (the LM head's input)."""
        w, _ = self.adapter.head(self.model)
        return int(w.shape[1])

    def ensure_value_head(self, reason: Optional[str] = None) -> bool:
        """The value head, created (zero) when there is none yet; an optimizer that exists gets it as one
        more parameter group. reason: logged when a head is created. True when it was created."""
        if self.value_head is not None:
            return False
        w, _ = self.adapter.head(self.model)
        self.value_head = make_value_head(int(w.shape[1]), self.device, w.dtype)
        if reason is not None:
            log(f"value head: a fresh one ({int(w.shape[1])} -> 1, zero) for GAE: {reason}")
        if self.optimizer is not None:
            self.optimizer.add_param_group(self._value_group(self.optimizer.param_groups[0]))
        return True

    def _value_group(self, like: Dict[str, Any]) -> Dict[str, Any]:
        g = {k: v for k, v in like.items() if k not in ("params", "weight_decay")}
        return {**g, "params": list(self.value_head.parameters()), "weight_decay": 0.0}

    # -- parameters and optimizer --

    def model_params(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def params(self) -> List[torch.nn.Parameter]:
        """What a step trains: the model's trainable parameters, and the value head's when there is one."""
        return self.model_params() + (list(self.value_head.parameters()) if self.value_head is not None else [])

    def make_optimizer(self, cfg: RLConfig) -> torch.optim.Optimizer:
        """AdamW over two groups: the matrices (with weight decay) and the 1-D parameters (without); a third, the
        value head's (without), when there is one."""
        decay, no_decay = [], []
        for p in self.model_params():
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "weight_decay": 0.0})
        return adamw(groups, self.device.type, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps)

    def _optimizer_for(self, cfg: RLConfig) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = self.make_optimizer(cfg)
        groups = self.optimizer.param_groups  # hyper-parameters may change between calls
        for g in groups:
            g["betas"] = (cfg.adam_beta1, cfg.adam_beta2)
            g["eps"] = cfg.adam_eps
        groups[0]["weight_decay"] = cfg.weight_decay
        return self.optimizer
