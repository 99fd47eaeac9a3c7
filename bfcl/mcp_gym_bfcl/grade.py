"""BFCL's verdict on model outputs, by BFCL's own per-entry evaluation functions, as a JSON-lines
service (stdin -> stdout), so that BFCL's modules are imported once.

Requests, one JSON object a line, each with an "id" echoed in its answer:
  {"op": "grade", "category": C, "entry": ID, "result": R}
      R is the entry's output in BFCL's result-file format for a function-calling model: single
      turn, the reply's calls [{name: json_arguments}, ...] or its text; multi-turn, per user turn
      per step such a reply. Answer: {"valid": bool, "error_type": str|null, "error": ...}.
  {"op": "summary", "scores": {C: {"accuracy": a, "total_count": n}}}
      BFCL's leaderboard figures (overall, non-live, live, multi-turn, ...) computed by BFCL's
      generate_leaderboard_csv from per-category accuracies. Answer: {"tables": {name: [rows]}}.
  {"op": "ping"}
A request that cannot be answered gets {"service_error": message} (BFCL's own "error" is part of a
verdict), and the service goes on.
"""
from __future__ import annotations

import copy
import csv
import json
import keyword
import os
import sys
import tempfile
import uuid

from . import MODEL_NAME
from .runtime import prepare


def _unsafe(result) -> str | None:
    """A multi-turn output whose calls BFCL's executor would eval() with a name or argument name that
    is not an identifier (code, not a call): refused instead of run."""

    def bad(x: str) -> bool:
        return not isinstance(x, str) or not x.isidentifier() or keyword.iskeyword(x)

    for turn in result if isinstance(result, list) else []:
        for step in turn if isinstance(turn, list) else []:
            for call in step if isinstance(step, list) else []:
                if not isinstance(call, dict):
                    continue
                for name, args in call.items():
                    if bad(name):
                        return f"function name {name!r}"
                    try:
                        parsed = json.loads(args) if isinstance(args, str) else args
                    except ValueError:
                        continue  # BFCL's decoder refuses it: that step is skipped
                    if isinstance(parsed, dict):
                        for k in parsed:
                            if bad(k):
                                return f"parameter name {k!r} of {name}"
    return None


class Grader:
    def __init__(self) -> None:
        prepare()
        # stdout is the protocol: BFCL's modules print banners and progress.
        real_stdout = sys.stdout
        sys.stdout = sys.stderr
        try:
            from bfcl_eval.eval_checker import eval_runner

            self.er = eval_runner
            self.handler = eval_runner.get_handler(MODEL_NAME)
        finally:
            sys.stdout = real_stdout
        self.entries: dict[str, dict[str, dict]] = {}
        self.truths: dict[str, dict[str, dict]] = {}

    def _load(self, category: str) -> None:
        if category in self.entries:
            return
        from .data import load_entries, load_ground_truth

        entries = load_entries(category, hints=False)
        truths = load_ground_truth(category)
        self.entries[category] = {e["id"]: e for e in entries}
        # BFCL aligns the possible answers with the entries by index (some ids differ in form).
        self.truths[category] = {e["id"]: truths[i] for i, e in enumerate(entries)} if truths is not None else {}

    def grade(self, category: str, entry_id: str, result) -> dict:
        from bfcl_eval import utils
        from bfcl_eval.constants.enums import Language, ReturnFormat

        self._load(category)
        if entry_id not in self.entries[category]:
            raise ValueError(f"no entry '{entry_id}' in BFCL category {category}")
        prompt = copy.deepcopy(self.entries[category][entry_id])
        er = self.er
        if utils.is_relevance_or_irrelevance(category):
            r = er._evaluate_single_relevance_entry(self.handler, entry_id, result, prompt, MODEL_NAME, category)
        elif utils.is_multi_turn(category):
            unsafe = _unsafe(result)
            if unsafe:
                return {"valid": False, "error_type": "mcp_gym:unsafe_call", "error": [f"not run: {unsafe} is not a Python identifier"]}
            model = "mcpgym_" + uuid.uuid4().hex[:12]
            try:
                truth = self.truths[category][entry_id]["ground_truth"]
                r = er._evaluate_single_multi_turn_entry(self.handler, entry_id, result, truth, prompt, model, category)
            finally:
                self._forget(model)
        else:
            if utils.is_java(category):
                language, fmt = Language.JAVA, ReturnFormat.JAVA
            elif utils.is_js(category):
                language, fmt = Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT
            else:
                language, fmt = Language.PYTHON, ReturnFormat.PYTHON
            truth = self.truths[category][entry_id]["ground_truth"]
            r = er._evaluate_single_ast_entry(self.handler, entry_id, result, truth, prompt, MODEL_NAME, category, language, fmt, False)
        if r.get("valid"):
            return {"valid": True, "error_type": None, "error": None}
        error = r.get("error")
        error_type = r.get("error_type") or (error.get("error_type") if isinstance(error, dict) else None)
        if isinstance(error, dict):
            error = error.get("error_message", error)
        return {"valid": False, "error_type": error_type, "error": error}

    @staticmethod
    def _forget(model: str) -> None:
        """Drops the backend instances BFCL's executor kept for this grading (module globals keyed by model name)."""
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

        g = vars(multi_turn_utils)
        for k in [k for k in g if k.startswith(model)]:
            del g[k]

    def summary(self, scores: dict) -> dict:
        from bfcl_eval.eval_checker.eval_runner_helper import generate_leaderboard_csv

        table = {MODEL_NAME: {c: {"accuracy": float(s["accuracy"]), "total_count": int(s["total_count"])} for c, s in scores.items()}}
        with tempfile.TemporaryDirectory() as d:
            real_stdout = sys.stdout
            sys.stdout = sys.stderr
            try:
                from pathlib import Path

                generate_leaderboard_csv(table, Path(d))
            finally:
                sys.stdout = real_stdout
            tables = {}
            for name in sorted(os.listdir(d)):
                if name.endswith(".csv"):
                    with open(os.path.join(d, name), newline="", encoding="utf8") as f:
                        tables[name[: -len(".csv")]] = list(csv.DictReader(f))
        return {"tables": tables}


def main(argv: list[str]) -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol
    grader = Grader()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            op = req.get("op")
            if op == "grade":
                ans = grader.grade(req["category"], req["entry"], req["result"])
            elif op == "summary":
                ans = grader.summary(req["scores"])
            elif op == "ping":
                ans = {"pong": True}
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as err:  # an answer, never a crash: the caller names the entry
            ans = {"service_error": f"{type(err).__name__}: {err}"}
        ans["id"] = rid
        out.write(json.dumps(ans, default=str) + "\n")
        out.flush()
