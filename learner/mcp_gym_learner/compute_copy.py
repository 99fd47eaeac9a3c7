"""A low-precision compute copy of a model's weights, with float32 master weights (`load` with
`compute_dtype: "bfloat16"`; PROTOCOL.md, "Hugging Face models").

The loaded model keeps its float32 parameters: AdamW, clipping, checkpoints, exports and the reference see only
them (the master weights). A second module, a copy of the model whose parameters are cast to `dtype` (its
buffers, such as the rotary frequencies, stay as they were), runs the forwards and backwards of `train` and
`sft`. Each of its parameters hands its gradient to its master the moment autograd has accumulated it (a
post-accumulate-grad hook): the master's float32 .grad sums the micro-batches, and the copy holds no gradient
between them. `sync()` writes the master weights into the copy (rounded to `dtype`); the trainers call it at
the start of each call and after each optimizer step, so whatever changed the master weights in between (a
checkpoint restored, a rolled-back step, SFT) is picked up.

Why: on a CPU with AVX512-BF16 or AMX, bf16 matrix products run about twice as fast as float32 ones
(bench/gemm_bf16_cpu.py), and a whole RL step of SmolLM2-135M 1.74x (bench/hf_bf16_compute.py). CPU
autocast gets less (0.62x measured here) because it casts every weight again at every use, in the forward
and the backward; the copy casts each weight once per optimizer step. The price is precision: the logprobs
of a bf16 forward differ from float32 ones by about 1e-2 on sampled tokens (p99 about 0.3 nats on the real
model). That is rounding, not a policy difference, so the trainer takes the PPO ratio against the copy's own old
logprobs (rl.py `own_ratio`) rather than the sampler's, which clipped ~1% of the tokens for nothing. The update is
applied in float32 to float32 weights, so small updates are not lost to bf16 rounding.
"""

from __future__ import annotations

import copy
from typing import List, Tuple

import torch
import torch.nn as nn

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class ComputeCopy:
    def __init__(self, master: nn.Module, dtype: torch.dtype):
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            raise RuntimeError(f"compute_dtype needs torch >= 2.1 (post-accumulate-grad hooks); this torch is "
                               f"{torch.__version__}")
        self.master = master
        self.dtype = dtype
        self.model = copy.deepcopy(master)
        # parameters only: float buffers (rotary inv_freq) keep their precision; ties survive the deepcopy
        self.pairs: List[Tuple[nn.Parameter, nn.Parameter]] = []
        masters = dict(master.named_parameters())
        for name, p in self.model.named_parameters():
            m = masters[name]
            p.data = p.data.to(dtype)
            self.pairs.append((p, m))
            p.register_post_accumulate_grad_hook(self._hand_over(m))
        self.sync()

    @staticmethod
    def _hand_over(m: nn.Parameter):
        def hook(p: torch.Tensor) -> None:
            g = p.grad
            if g is None:
                return
            if m.grad is None:
                m.grad = g.to(m.dtype)
            else:
                m.grad.add_(g)
            p.grad = None

        return hook

    def sync(self) -> None:
        """The master weights into the copy (rounded), with their requires_grad and the master's mode."""
        with torch.no_grad():
            for p, m in self.pairs:
                p.copy_(m)
                p.requires_grad_(m.requires_grad)
        self.model.train(self.master.training)

    def info(self) -> dict:
        return {"compute_dtype": str(self.dtype).replace("torch.", ""), "master_dtype": "float32"}
