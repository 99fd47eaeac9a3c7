"""Process-level CPU settings: threads (torch and a separate OpenBLAS pool) and glibc malloc."""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Dict, Optional


def default_threads() -> int:
    """The CPUs this process may run on (the affinity mask, where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_openblas: Optional[Any] = None
_openblas_checked = False


def _pthread_openblas():
    """The loaded OpenBLAS when it runs its own pthread pool (Debian's torch links openblas-pthread), else None."""
    global _openblas, _openblas_checked
    if _openblas_checked:
        return _openblas
    _openblas_checked = True
    try:
        with open("/proc/self/maps", "r") as f:
            paths = set(re.findall(r"(/\S*libopenblas\S*\.so\S*)", f.read()))
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            if lib.openblas_get_parallel() == 1:  # 0 sequential, 1 pthreads, 2 OpenMP
                _openblas = lib
                return lib
        except (OSError, AttributeError):
            continue
    return None


def configure_threads(n: int) -> Dict[str, Any]:
    """Use n CPU threads for training and inference. Call after `import torch`.

    Where torch's BLAS is an OpenBLAS with its own pthread pool, two pools of n threads fight over n
    cores (torch's OpenMP workers spin while OpenBLAS works): measured on 2 cores with Debian's
    torch 1.13, torch 2 + BLAS 2 threads ran at ~5k tokens/s, torch 1 + BLAS 2 at ~8.8k. There the
    matrix products get the n threads and torch's own (element-wise) ops one; elsewhere (MKL, OpenMP
    BLAS, torch 2 wheels) torch.set_num_threads(n) covers both.
    """
    import torch

    lib = _pthread_openblas()
    if lib is not None:
        lib.openblas_set_num_threads(int(n))
        torch.set_num_threads(1)
        return {"threads": n, "torch_threads": 1, "blas_threads": n, "blas": "openblas-pthread"}
    torch.set_num_threads(int(n))
    return {"threads": n, "torch_threads": n, "blas_threads": n, "blas": "torch"}


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap instead of returning it to the OS (M_MMAP_MAX = 0, a high
    M_TRIM_THRESHOLD): a CPU training step allocates and frees the same large attention tensors every
    step, and fresh pages cost a page fault each (measured: ~15% of a step). Off with
    MCP_GYM_LEARNER_MALLOPT=0; a no-op off glibc. Returns whether it applied."""
    if os.environ.get("MCP_GYM_LEARNER_MALLOPT", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


def trim_heap() -> bool:
    """Give glibc's freed heap memory back to the OS (malloc_trim(0)); a no-op off glibc. Returns whether it ran."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def trim_after_calls() -> bool:
    """MCP_GYM_LEARNER_TRIM=1: the service gives its freed heap back after each call (trim_heap). tune_malloc keeps
    a step's activations (up to ~12 GB on the CPU) in the heap for the next step, which is right for one job on a
    machine; where several learners share one (bench/model-job.ts runs two jobs in turns), an idle learner holding
    its last step's heap can leave the busy one too little memory. Costs the next call its page faults."""
    return os.environ.get("MCP_GYM_LEARNER_TRIM", "0") == "1"


def adamw(groups, device_type: str, **kwargs: Any):
    """AdamW with the fastest implementation this torch offers: fused on CUDA (torch >= 2.0),
    else foreach; feature-detected, so torch 1.13 works too."""
    import inspect

    import torch

    accepted = inspect.signature(torch.optim.AdamW).parameters
    if device_type == "cuda" and "fused" in accepted:
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError):
            pass
    if "foreach" in accepted:
        kwargs["foreach"] = True
    return torch.optim.AdamW(groups, **kwargs)
