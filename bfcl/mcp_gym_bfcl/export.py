"""python -m mcp_gym_bfcl export --category C [--out FILE]"""
import argparse
import json
import os
import sys


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_bfcl export")
    p.add_argument("--category", required=True, action="append", help="repeatable")
    p.add_argument("--out", help="a file (written whole, then renamed); default stdout")
    a = p.parse_args(argv)
    from .data import check_category, export_category

    try:
        for c in a.category:
            check_category(c)
    except ValueError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(2)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    lines = [json.dumps(e, ensure_ascii=False) for c in a.category for e in export_category(c)]
    sys.stdout = real_stdout
    text = "\n".join(lines) + "\n"
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        tmp = f"{a.out}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf8") as f:
            f.write(text)
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text)
