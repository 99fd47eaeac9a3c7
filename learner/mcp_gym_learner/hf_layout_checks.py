"""Whether a loaded Hugging Face model computes the learner's batched layouts right (policy.HFAdapter), checked
once at `load`: packed rows (position ids restarting at each sequence: `check_packing`) and a shared prefix computed
once for several sequences (`check_prefix_sharing`) must give the hidden states of each sequence alone; where one
does not, `load` falls back to right padding / no sharing.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn as nn

from .batch import rows_at
from .policy import HFAdapter


@torch.no_grad()
def _same_as_alone(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype], seqs: List[torch.Tensor],
                   layout, skip: int) -> bool:
    """Whether the hidden states of `seqs` laid out together (`layout(seqs, device)` -> (inputs, starts)) equal
    those of each sequence computed alone, from position `skip` of each on (relative tolerance: 1e-4 in
    float32, 5e-2 in a low-precision dtype or under CUDA autocast)."""
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    ctx = torch.autocast(device_type="cuda", dtype=autocast) if (autocast and dev.type == "cuda") else None
    try:
        if ctx is not None:
            ctx.__enter__()
        inputs, starts = layout(seqs, dev)
        together = adapter.hidden(model, inputs).float()
        alone = [adapter.hidden(model, {"input_ids": s.unsqueeze(0).to(dev)}).float() for s in seqs]
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        model.train(was)
    scale = float(torch.cat(alone).abs().max()) + 1e-6
    low = next(model.parameters()).dtype != torch.float32 or (autocast is not None and dev.type == "cuda")
    tol = 5e-2 if low else 1e-4
    err = max(float((together[rows_at(st, torch.arange(skip, len(s)))] - h[skip:]).abs().max()) for s, st, h in zip(seqs, starts, alone))
    return err / scale < tol


def check_packing(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype] = None) -> bool:
    """Whether this model reads packed position ids as sequence boundaries: the hidden states of two short
    sequences packed into one row must be those of each sequence alone (a model whose attention ignores the
    restarts would let the second sequence see the first)."""
    g = torch.Generator().manual_seed(0)
    top = min(adapter.vocab_size, 1000)
    seqs = [torch.randint(0, top, (5,), generator=g), torch.randint(0, top, (4,), generator=g)]
    return _same_as_alone(model, adapter, autocast, seqs, lambda xs, dev: adapter.packed_inputs(xs, dev, cap=None), 0)


def check_prefix_sharing(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype] = None) -> bool:
    """Whether the shared-prefix layout (policy.py) gives this model's hidden states: three sequences with a common
    prefix, two of them sharing a run after it, computed with it once, must equal each sequence on its own."""
    g = torch.Generator().manual_seed(1)
    top = min(adapter.vocab_size, 1000)
    prefix = torch.randint(0, top, (40,), generator=g)
    branch = torch.randint(0, top, (4,), generator=g)  # a run two of the rests share (a branch of the prefix tree)
    seqs = [torch.cat([prefix, branch, torch.randint(0, top, (5,), generator=g)]), torch.cat([prefix, torch.randint(0, top, (3,), generator=g)]),
            torch.cat([prefix, branch, torch.randint(0, top, (2,), generator=g)])]
    return _same_as_alone(model, adapter, autocast, seqs, lambda xs, dev: adapter.prefix_inputs(xs, 38, dev), 38)
