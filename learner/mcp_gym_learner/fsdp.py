"""FSDP2 for the Hugging Face learner: PyTorch's `fully_shard` over the decoder layers and the scoring module, under
torchrun (`serve --fsdp`, or MCP_GYM_PARALLEL=fsdp). docs/distributed.md has the recipe (several nodes too).

Each decoder layer is one FSDP unit; the root unit is the trainer's LogprobModule (what every forward calls), so the
embeddings, the final norm and the head (tied or not) are gathered for each forward and sharded after the step.
Every parameter, gradient and AdamW moment is sharded over the ranks (DTensors, Shard(0)); each rank scores its share
of every minibatch, the loss scaled by the world size (FSDP averages gradients as DDP does), and since every forward
and backward gathers parameters, every rank runs the same number of them (rl_update.py pads with zero-weight passes).
On CUDA the parameters are gathered in bfloat16 and gradients reduced in float32 (MixedPrecisionPolicy).

Checkpoints (checkpoint.py) are torch.distributed.checkpoint directories: each rank writes its shards of the model,
AdamW's state and the reference, under fully qualified names, so that a checkpoint loads on any world size (one
process without FSDP included). Exports gather the full state dict on rank 0 (cpu offload) and write an ordinary
Hugging Face checkpoint, or the PEFT adapter.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import torch
from torch import nn

FSDP_DIR = "dcp"  # the sharded part of a checkpoint directory


def requested() -> str:
    """The parallelism asked for under torchrun: "fsdp" (MCP_GYM_PARALLEL=fsdp, `serve --fsdp`) or "ddp"."""
    v = os.environ.get("MCP_GYM_PARALLEL", "ddp").strip().lower() or "ddp"
    if v not in ("ddp", "fsdp"):
        raise ValueError(f"MCP_GYM_PARALLEL: ddp or fsdp, got {v!r}")
    return v


def available() -> bool:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (torch >= 2.6)
        return True
    except Exception:
        return False


def decoder_layers(model: nn.Module) -> List[nn.Module]:
    """The decoder's layers of a transformers causal LM (under a peft wrapper too)."""
    from .policy import hf_base

    base = hf_base(model)
    dec = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, "model", None)
    layers = getattr(dec, "layers", None)
    if layers is None or len(layers) == 0:
        raise ValueError(f"FSDP: {type(base).__name__} has no decoder layers (get_decoder().layers)")
    return list(layers)


def mixed_precision(device: torch.device):
    """bf16 parameters for compute and float32 gradient reduction on a CUDA device with bf16; None on the CPU."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return None


def shard(root: nn.Module, model: nn.Module, device: torch.device) -> Dict[str, Any]:
    """fully_shard each decoder layer of `model`, then `root` (the module whose forward is called). Returns what
    was done (for the load's answer)."""
    from torch.distributed.fsdp import fully_shard

    import torch.distributed as dist

    mp = mixed_precision(device)
    kw: Dict[str, Any] = {"mp_policy": mp} if mp is not None else {}
    layers = decoder_layers(model)
    # Every rank keeps its slice of its own tensors: rank 0's values first (DDP broadcasts them too), or a fresh LoRA
    # adapter (random A) would be a different one on each rank.
    with torch.no_grad():
        for t in list(root.parameters()) + list(root.buffers()):
            dist.broadcast(t.data, 0)
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(root, **kw)
    return {"units": len(layers) + 1, "mixed_precision": "bf16 params, fp32 reduce" if mp is not None else None}


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a plain tensor as it is)."""
    return t.to_local() if hasattr(t, "to_local") else t


def grad_norm(params: List[nn.Parameter], max_norm: float, group=None) -> torch.Tensor:
    """The global L2 norm of sharded gradients (each element lives on one rank: the sum of the local squares,
    all-reduced), the gradients scaled by min(1, max_norm / norm) when max_norm > 0 (clip_grad_norm_'s rule).
    Plain tensors (the value head, replicated) count once: rank 0 adds them."""
    import torch.distributed as dist

    dev = None
    sq = None
    plain = None
    for p in params:
        if p.grad is None:
            continue
        g = local(p.grad).detach()
        dev = g.device
        s = g.double().pow(2).sum()
        if hasattr(p.grad, "to_local"):
            sq = s if sq is None else sq + s
        else:
            plain = s if plain is None else plain + s
    if dev is None:
        dev = torch.device("cpu")
    total = sq if sq is not None else torch.zeros((), dtype=torch.float64, device=dev)
    if plain is not None and dist.get_rank(group) == 0:
        total = total + plain
    dist.all_reduce(total, group=group)
    norm = total.sqrt()
    if max_norm > 0:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for p in params:
            if p.grad is not None:
                local(p.grad).mul_(coef.to(local(p.grad).dtype))
    return norm.float()


class _StateRoot(nn.Module):
    """The modules whose state a checkpoint holds, under stable names: `policy` (the LogprobModule: its keys are
    "policy.model.<the model's keys>") and `value_head` (PPO with GAE), so that AdamW's state maps to names."""

    def __init__(self, policy: nn.Module, value_head: Optional[nn.Module]):
        super().__init__()
        self.policy = policy
        if value_head is not None:
            self.value_head = value_head


def full_model_state(trainer, trainable_only: bool = False) -> Dict[str, torch.Tensor]:
    """The model's full state dict (its own keys, on the CPU) on rank 0, {} elsewhere; every rank must call it.
    trainable_only: the parameters that train (a LoRA adapter), not the frozen ones."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(trainer.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True,
                                                                       ignore_frozen_params=trainable_only))
    return {k[len("model."):]: v for k, v in sd.items() if k.startswith("model.")}


def _states(trainer, with_optimizer: bool):
    from torch.distributed.checkpoint.state_dict import get_state_dict, get_model_state_dict

    root = _StateRoot(trainer.module, trainer.value_head)
    if with_optimizer and trainer.optimizer is not None:
        model_sd, optim_sd = get_state_dict(root, [trainer.optimizer])
    else:
        model_sd, optim_sd = get_model_state_dict(root), None
    ref = trainer.reference
    if ref.mode == "copy":
        ref_sd: Dict[str, Any] = get_model_state_dict(ref.module)
    else:
        ref_sd = {f"param.{i}": t for i, t in enumerate(ref.snapshot)}
    return root, model_sd, optim_sd, ref_sd


def save_sharded(trainer, path: str) -> None:
    """The model, AdamW's state and the reference into `path` (torch.distributed.checkpoint: each rank its
    shards); every rank must call it."""
    import torch.distributed.checkpoint as dcp

    _, model_sd, optim_sd, ref_sd = _states(trainer, True)
    state: Dict[str, Any] = {"model": model_sd, "reference": ref_sd}
    if optim_sd is not None:
        state["optimizer"] = optim_sd
    dcp.save(state, checkpoint_id=path)


def load_sharded(trainer, path: str, has_optimizer: bool) -> None:
    """The state save_sharded wrote, into this trainer, whatever its world size (resharded by DCP); the trainer's
    optimizer must exist when the checkpoint has one (made by the caller from the saved config)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    root, model_sd, optim_sd, ref_sd = _states(trainer, has_optimizer)
    state: Dict[str, Any] = {"model": model_sd, "reference": ref_sd}
    if optim_sd is not None:
        state["optimizer"] = optim_sd
    dcp.load(state, checkpoint_id=path)
    if optim_sd is not None:
        set_state_dict(root, [trainer.optimizer], model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
    else:
        set_model_state_dict(root, state["model"])
    ref = trainer.reference
    if ref.mode == "copy":
        set_model_state_dict(ref.module, state["reference"])
    else:
        with torch.no_grad():
            for i, t in enumerate(ref.snapshot):
                local(t).copy_(local(state["reference"][f"param.{i}"]))
