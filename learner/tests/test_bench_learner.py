"""bench/learner_gpu.py at a tiny shape on the CPU: it runs both steps and prints the comparison line.
(The measurement that counts is on a GPU: --shape qwen2-0.5b --batch 16 --seq 1024.)"""

import json
import os
import subprocess
import sys

from _rl_helpers import LEARNER

BENCH = os.path.join(os.path.dirname(LEARNER), "bench", "learner_gpu.py")


def test_bench_prints_the_comparison_line(tmp_path):
    p = subprocess.run([sys.executable, BENCH, "--shape", "tiny", "--batch", "2", "--seq", "64", "--device", "cpu",
                        "--repeats", "2", "--warmup", "1", "--threads", "1"],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    last = json.loads(lines[-1])
    for k in ("tokens_per_s", "naive_tokens_per_s", "speedup", "mfu", "peak_mem_gib", "loss", "naive_loss"):
        assert k in last, k
    assert last["tokens_per_s"] > 0 and last["naive_tokens_per_s"] > 0 and last["speedup"] > 0
    assert last["naive_source"] == "inline" and last["batch"] == 2 and last["seq"] == 64
    # the same loss on both sides (the same models, batch and steps; float32 on the CPU)
    assert last["loss_rel_diff"] < 1e-4, last
