"""Running the learner under `torchrun` (PyTorch distributed: DDP, gloo on the CPU, NCCL on CUDA).

Every rank runs the same LearnerService (service.py). Rank 0 reads the requests (stdin or HTTP) and broadcasts each
request line to the other ranks; every rank handles it (the same validation, the same errors), the
`train` command runs DistributedDataParallel over the ranks (each takes its shard of every
minibatch), files are written by rank 0 only, and rank 0 alone answers.

    torchrun --nproc_per_node 2 -m mcp_gym_learner serve            (stdin/stdout on rank 0)
    torchrun --nproc_per_node 8 -m mcp_gym_learner serve --http --port 8765
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple


def env_world() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def init_from_env() -> Tuple[int, int, int]:
    """(rank, world_size, local_rank); initialises the default process group under torchrun (WORLD_SIZE > 1):
    NCCL when CUDA is available (each rank on cuda:LOCAL_RANK), gloo otherwise (MCP_GYM_DIST_BACKEND overrides)."""
    import torch
    import torch.distributed as dist

    world = env_world()
    if world <= 1:
        return 0, 1, 0
    die_with_parent()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = os.environ.get("MCP_GYM_DIST_BACKEND")
        if not backend:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), local


def die_with_parent() -> None:
    """torchrun starts each rank in a session of its own: when torchrun itself is killed (SIGKILL, which it cannot
    pass on), its ranks would live on, rank 0 still serving. On Linux the kernel kills this rank with its parent."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover
        return


def current() -> Tuple[int, int, int]:
    """(rank, world_size, local_rank) of an initialised process group, else (0, 1, 0)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))
    except Exception:  # pragma: no cover
        pass
    return 0, 1, 0


def broadcast_object(obj: Any = None) -> Any:
    """Rank 0's `obj` on every rank."""
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    _, world, _ = current()
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def follow(service) -> int:
    """The loop of a rank other than 0: handle every request rank 0 broadcasts, until None or shutdown."""
    while True:
        line: Optional[str] = broadcast_object(None)
        if line is None:
            break
        service.handle(line)
        if service.shutdown:
            break
    return 0


def shutdown_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # pragma: no cover
        pass
