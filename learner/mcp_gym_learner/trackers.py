"""Experiment trackers for mcp-gym runs, through their official clients: Weights & Biases (offline
mode: nothing leaves the machine; `wandb sync DIR` uploads it later), TensorBoard (its event file
writer, through torch.utils.tensorboard) and MLflow (its file store).

    python -m mcp_gym_learner.trackers --run-dir DIR --report-to wandb,tensorboard,mlflow [--name N]

reads JSON lines on stdin, one message each, and answers each with one JSON line on stdout:

    {"type": "config", "config": {...}}                            the run's settings
    {"type": "metrics", "step": N, "values": {...}}                a step's row of metrics.jsonl
    {"type": "eval", "step": N, "values": {...}}                   a held-out evaluation (success, ci95, pass@k)
    {"type": "table", "step": N, "name": T, "columns": [...], "rows": [[...]]}   sample trajectories
    {"type": "close"}                                              finish every run, then exit

Where each tracker writes, under DIR: wandb/ (an offline run), tensorboard/ (event files), mlruns/ (an
MLflow file store). Nested values are flattened with "/" (reward_parts_mean/ok); only numbers are
logged as metrics. Answers: {"ok": true} or {"ok": false, "error": "..."}; the first line, before any
message, is {"ready": true, "dirs": {...}} or {"ready": false, "error": "..."} (a tracker whose package
is missing, named with the file that installs it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Dict, List

TRACKERS = ("wandb", "tensorboard", "mlflow")
INSTALL_HINT = "learner/requirements-trackers.lock (mcp-gym installs it into the learner's venv on the first --report-to)"


def flatten(values: Dict[str, Any], prefix: str = "") -> Dict[str, float]:
    """Numeric leaves of nested dicts, keyed by their path joined with "/" (booleans as 0/1)."""
    out: Dict[str, float] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            out[key] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)):
            if math.isfinite(float(v)):
                out[key] = float(v)
        elif isinstance(v, dict):
            out.update(flatten(v, key + "/"))
    return out


def flat_params(config: Dict[str, Any], prefix: str = "") -> Dict[str, str]:
    """Every leaf of the config as a string (dicts flattened with "/", lists as JSON)."""
    out: Dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flat_params(v, key + "/"))
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v)
    return out


class TensorBoard:
    def __init__(self, run_dir: str, name: str, project: str):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.dir = os.path.join(run_dir, "tensorboard")
        self.w = SummaryWriter(log_dir=self.dir)

    def config(self, config):
        self.w.add_text("config", "```json\n" + json.dumps(config, indent=2, sort_keys=True) + "\n```", 0)

    def metrics(self, step, values, prefix=""):
        for k, v in flatten(values).items():
            self.w.add_scalar(prefix + k, v, step)

    def table(self, step, name, columns, rows):
        head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
        body = "".join("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |\n" for r in rows)
        self.w.add_text(name, head + body, step)

    def close(self):
        self.w.flush()
        self.w.close()


class Wandb:
    def __init__(self, run_dir: str, name: str, project: str):
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ["WANDB_MODE"] = "offline"  # never the network: `wandb sync` uploads it later
        import wandb

        self.wandb = wandb
        self.dir = os.path.join(run_dir, "wandb")
        os.makedirs(self.dir, exist_ok=True)
        self.run = wandb.init(project=project, name=name, dir=run_dir, mode="offline", reinit="create_new",
                              settings=wandb.Settings(console="off", x_disable_stats=True))
        self.step = 0

    def config(self, config):
        self.run.config.update(config, allow_val_change=True)

    def metrics(self, step, values, prefix=""):
        self.step = max(self.step, int(step))
        self.run.log({prefix + k: v for k, v in flatten(values).items()}, step=self.step)

    def table(self, step, name, columns, rows):
        self.step = max(self.step, int(step))
        self.run.log({name: self.wandb.Table(columns=columns, data=[[str(c) for c in r] for r in rows])}, step=self.step)

    def close(self):
        self.run.finish()


class MLflow:
    def __init__(self, run_dir: str, name: str, project: str):
        import pathlib

        # MLflow 3 keeps the file store in maintenance mode and refuses it unless asked: mcp-gym asks, since a
        # database backend needs SQLAlchemy and Alembic (MLflow's full package), and the file store is read by
        # `mlflow ui --backend-store-uri DIR` and by `mlflow migrate-filestore`.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import mlflow

        self.mlflow = mlflow
        self.dir = os.path.join(run_dir, "mlruns")
        mlflow.set_tracking_uri(pathlib.Path(self.dir).resolve().as_uri())
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=name)

    def config(self, config):
        params = flat_params(config)
        items = list(params.items())
        for i in range(0, len(items), 90):  # the file store takes at most 100 per batch
            self.mlflow.log_params({k: v[:6000] for k, v in items[i:i + 90]})

    def metrics(self, step, values, prefix=""):
        m = {self._key(prefix + k): v for k, v in flatten(values).items()}
        if m:
            self.mlflow.log_metrics(m, step=int(step))

    def table(self, step, name, columns, rows):
        self.mlflow.log_dict({"columns": columns, "data": [[str(c) for c in r] for r in rows]},
                             f"{self._key(name)}/step-{int(step):05d}.json")

    @staticmethod
    def _key(k: str) -> str:  # MLflow names: alphanumerics, _ - . / and spaces
        return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in k)

    def close(self):
        self.mlflow.end_run()


SINKS = {"wandb": Wandb, "tensorboard": TensorBoard, "mlflow": MLflow}
PACKAGES = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow"}


def _say(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.trackers")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--report-to", required=True)
    p.add_argument("--name", default=None)
    p.add_argument("--project", default="mcp-gym")
    a = p.parse_args(argv)
    names = [t.strip() for t in a.report_to.split(",") if t.strip()]
    bad = [t for t in names if t not in SINKS]
    if bad:
        _say({"ready": False, "error": f"--report-to: unknown tracker {', '.join(bad)} (known: {', '.join(TRACKERS)})"})
        return 2
    name = a.name or os.path.basename(os.path.abspath(a.run_dir))
    sinks = {}
    for t in names:
        try:
            sinks[t] = SINKS[t](a.run_dir, name, a.project)
        except ImportError as e:
            _say({"ready": False, "error": f"{t}: the package {PACKAGES[t]} cannot be imported ({e}); it comes with {INSTALL_HINT}"})
            return 3
        except Exception as e:  # noqa: BLE001 (a tracker that cannot start: say which and why)
            _say({"ready": False, "error": f"{t}: cannot start: {type(e).__name__}: {e}"})
            return 3
    _say({"ready": True, "dirs": {t: s.dir for t, s in sinks.items()}})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            kind = msg.get("type")
            if kind == "close":
                break
            for s in sinks.values():
                if kind == "config":
                    s.config(msg["config"])
                elif kind == "metrics":
                    s.metrics(msg["step"], msg["values"])
                elif kind == "eval":
                    s.metrics(msg["step"], msg["values"], prefix="eval/")
                elif kind == "table":
                    s.table(msg["step"], msg["name"], msg["columns"], msg["rows"])
                else:
                    raise ValueError(f"unknown message type {kind!r}")
            _say({"ok": True})
        except Exception as e:  # noqa: BLE001 (one bad message is reported, the run goes on)
            _say({"ok": False, "error": f"{type(e).__name__}: {e}"})
    for s in sinks.values():
        s.close()
    _say({"closed": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
