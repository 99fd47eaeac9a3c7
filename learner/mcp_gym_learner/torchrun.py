"""`torchrun`, runnable where the installed one is broken: python3 -m mcp_gym_learner.torchrun [torchrun args].

Debian's torch 1.13 (python3-torch) with Python 3.11 cannot start any worker: its
`Std.from_str("0")` looks the value up by iterating over the IntFlag `Std`, which since Python 3.11
yields only the single-bit members (not NONE = 0 nor ALL = 3), and returns None for the default
`--redirects 0` (AttributeError: 'NoneType' object has no attribute 'get'). This module replaces
that one function when (and only when) it is broken, then runs `torch.distributed.run.main`
unchanged. Elsewhere it is plain torchrun.
"""

from __future__ import annotations

import re
import sys


def _patch_std() -> bool:
    try:
        from torch.distributed.elastic.multiprocessing import api
    except Exception:  # pragma: no cover
        return False
    Std = api.Std
    try:
        if Std.from_str("0") is not None:
            return False
    except Exception:  # pragma: no cover
        return False

    def from_str(cls, vm: str):
        def to_std(v):
            return cls(int(v))

        if re.match(api._VALUE_REGEX, vm):
            return to_std(vm)
        if re.match(api._MAPPING_REGEX, vm):
            d = {}
            for m in vm.split(","):
                i, v = m.split(":")
                d[int(i)] = to_std(v)
            return d
        raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")

    Std.from_str = classmethod(from_str)
    return True


def main(argv=None) -> int:
    _patch_std()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(argv if argv is not None else sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
