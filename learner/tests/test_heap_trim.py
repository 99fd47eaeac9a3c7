"""MCP_GYM_LEARNER_TRIM=1: the learner gives its freed heap back after each call (runtime.trim_after_calls), so that
an idle learner does not hold its last step's activations while another learner on the machine trains."""

import json
import os
import subprocess
import sys

import pytest

from mcp_gym_learner import service as service_mod
from mcp_gym_learner.service import LearnerService

from _rl_helpers import TINY, sampled_batch

LEARNER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In a process of its own (mallopt settings are process-wide): tune_malloc as the learner process sets it, 512 MiB
# allocated and freed, then trim_heap. Prints the resident MiB after the free and after the trim.
PROBE = """
import ctypes, sys
from mcp_gym_learner.runtime import tune_malloc, trim_heap
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 // (1 << 20)
assert tune_malloc()
libc = ctypes.CDLL('libc.so.6')
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(1 << 20) for _ in range(512)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for b in blocks:
    libc.free(b)
held = rss()
assert trim_heap()
print(held, rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc")
def test_trim_heap_returns_what_tune_malloc_keeps():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=LEARNER_DIR, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    held, after = map(int, out.stdout.split())
    assert held - after > 400, (held, after)  # the 512 MiB freed but kept by tune_malloc's settings, then returned


@pytest.mark.parametrize("env,calls", [("1", 1), ("0", 0), (None, 0)])
def test_the_service_trims_after_a_train_call_only_when_told(tmp_path, monkeypatch, env, calls):
    if env is None:
        monkeypatch.delenv("MCP_GYM_LEARNER_TRIM", raising=False)
    else:
        monkeypatch.setenv("MCP_GYM_LEARNER_TRIM", env)
    trims = []
    monkeypatch.setattr(service_mod, "trim_heap", lambda: trims.append(1) or True)
    L = LearnerService()
    r = L.handle(json.dumps({"cmd": "create", "model_dir": str(tmp_path / "m"), "architecture": TINY, "seed": 1}))
    assert r["ok"], r
    r = L.handle(json.dumps({"cmd": "load", "model_dir": str(tmp_path / "m"), "device": "cpu", "threads": 1}))
    assert r["ok"], r
    assert trims == []  # not after create or load
    r = L.handle(json.dumps({"cmd": "train", "batch": sampled_batch(L.model, B=2, seed=3),
                             "config": {"loss": "grpo", "epochs": 1}}))
    assert r["ok"], r
    assert len(trims) == calls
