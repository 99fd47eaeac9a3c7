"""The JSON-lines protocol on stdin/stdout (PROTOCOL.md, "The protocol"): `python -m mcp_gym_learner serve`.

One request per line in, one response per line out, in order. stdout carries protocol lines only: at
start the real stdout is kept for responses and file descriptor 1 (and sys.stdout) are pointed at
stderr, so a print or a C library's output cannot corrupt the stream. Under torchrun rank 0 reads
the lines and broadcasts each to the other ranks (distributed.py), which follow.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Callable, Dict, Optional

from .protocol import encode_response
from .runtime import tune_malloc
from .service import LearnerService, _log


def _protocol_stream() -> IO[str]:
    """Keep the real stdout for protocol lines; send fd 1 and sys.stdout to stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(out_fd, "w", encoding="utf-8", newline="\n")


def make_dispatcher(service: LearnerService) -> Callable[[str], Dict[str, Any]]:
    """handle(line) on this process; under torchrun (rank 0) the line goes to every rank first."""
    if service.world <= 1:
        return service.handle
    from .distributed import broadcast_object

    def dispatch(line: str) -> Dict[str, Any]:
        broadcast_object(line)
        return service.handle(line)

    return dispatch


def serve(stdin: Optional[IO[bytes]] = None) -> int:
    from .distributed import broadcast_object, follow, init_from_env, shutdown_group

    rank, world, _ = init_from_env()  # (0, 1, 0) unless started by torchrun
    if rank != 0:
        # torchrun's ranks share its stdout, the protocol's pipe: anything a rank other than 0 prints (a library, NCCL's
        # debug lines) would land between the answers, so their stdout goes to stderr
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        tune_malloc()
        service = LearnerService()
        _log(f"rank {rank}/{world} following rank 0 (pid {os.getpid()})")
        follow(service)
        shutdown_group()
        return 0
    out = _protocol_stream()
    tune_malloc()
    inp = stdin if stdin is not None else sys.stdin.buffer
    service = LearnerService()
    dispatch = make_dispatcher(service)
    import torch

    _log(f"serving (pid {os.getpid()}, torch {torch.__version__}, threads {service.threads}"
         f"{f', rank 0 of {world}' if world > 1 else ''})")
    try:
        return _serve_lines(service, dispatch, inp, out)
    finally:
        if world > 1:
            if not service.shutdown:
                broadcast_object(None)  # the followers stop too
            shutdown_group()


def _serve_lines(service: LearnerService, dispatch: Callable[[str], Dict[str, Any]], inp: IO[bytes],
                 out: IO[str]) -> int:
    while not service.shutdown:
        raw = inp.readline()
        if not raw:
            break  # EOF: the client is gone
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        resp = dispatch(line)
        try:
            out.write(encode_response(resp) + "\n")
            out.flush()
        except BrokenPipeError:
            _log("stdout closed: exiting")
            return 0
    _log("bye")
    return 0
