"""State dicts moved to the CPU for torch.save, shared storage kept shared (checkpoint.py, reference.py)."""

from __future__ import annotations

from typing import Any, Dict

import torch


def cpu_state(sd: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A state dict's tensors on the CPU, without copies beyond the move: tensors that share storage (tied
    embeddings and output head) stay shared, so torch.save writes them once. (A clone per entry wrote a tied
    151k x 64 embedding twice: half of a tiny Qwen3's checkpoint.) torch.save serialises at once, so no
    copy is needed to keep the values of the moment."""
    moved: Dict[Any, torch.Tensor] = {}
    out: Dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        t = v.detach()
        if t.device.type != "cpu":
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
            if key not in moved:
                moved[key] = t.cpu()
            t = moved[key]
        out[k] = t
    return out
