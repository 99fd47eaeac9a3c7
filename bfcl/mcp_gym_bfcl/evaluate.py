"""BFCL's own evaluation (bfcl_eval's `evaluate` command, unmodified) over result files in its
format, then its score files read back: per category the accuracy, the count and the failed ids."""
import argparse
import json
import os
import subprocess
import sys

from . import MODEL_NAME


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_bfcl evaluate")
    p.add_argument("--result-dir", required=True)
    p.add_argument("--score-dir", required=True)
    p.add_argument("--category", required=True, nargs="+")
    a = p.parse_args(argv)
    result_dir = os.path.abspath(a.result_dir)
    score_dir = os.path.abspath(a.score_dir)
    cmd = [sys.executable, "-m", "bfcl_eval", "evaluate", "--model", MODEL_NAME, "--test-category", ",".join(a.category),
           "--result-dir", result_dir, "--score-dir", score_dir, "--partial-eval"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        raise SystemExit(f"bfcl_eval evaluate failed (exit {r.returncode})")
    from bfcl_eval.utils import get_directory_structure_by_category

    out = {}
    for c in a.category:
        path = os.path.join(score_dir, MODEL_NAME, get_directory_structure_by_category(c), f"BFCL_v4_{c}_score.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        header = rows[0]
        out[c] = {"accuracy": header["accuracy"], "correct_count": header["correct_count"], "total_count": header["total_count"],
                  "failed": [str(r["id"]) for r in rows[1:]]}
    print(json.dumps(out))
