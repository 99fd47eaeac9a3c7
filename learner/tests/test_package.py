"""learner/ is a package: installed into a virtual environment (offline, with the system's torch), it serves
the protocol from any directory with no PYTHONPATH, finds its schema through the package, and has its
console script. Installing writes nothing into learner/ (build_backend.py builds from a copy)."""

import json
import os
import subprocess
import sys

import pytest

LEARNER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _listing():
    """learner/'s entries and its package's, less bytecode caches."""
    out = set()
    for d in ("", "mcp_gym_learner"):
        out |= {os.path.join(d, n) for n in os.listdir(os.path.join(LEARNER, d)) if n != "__pycache__"}
    return out


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg")
    venv = root / "venv"
    # --system-site-packages: the system's torch, jsonschema (and pip) are seen from the venv
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   cwd=str(root), env=_env(), timeout=120)
    py = str(venv / "bin" / "python")
    if subprocess.run([py, "-m", "pip", "--version"], cwd=str(root), env=_env(), capture_output=True).returncode:
        pytest.skip("pip is not importable from a venv of this Python")
    before = _listing()
    p = subprocess.run([py, "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--no-build-isolation",
                        "--no-index", LEARNER], cwd=str(root), env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert _listing() == before, "the build wrote into learner/"
    return venv


def test_installed_package_serves_from_anywhere(venv, tmp_path):
    py = str(venv / "bin" / "python")
    probe = "import mcp_gym_learner.protocol as p; print(p.__file__); print(p.PROTOCOL_VERSION)"
    where = subprocess.run([py, "-c", probe], cwd=str(tmp_path), env=_env(), capture_output=True, text=True,
                           timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    path, version = where.stdout.split()
    assert path.startswith(str(venv)) and int(version) >= 2  # the installed copy, its schema inside it

    lines = [{"id": 1, "cmd": "state"}, {"id": 2, "cmd": "train", "batch": {}}, {"id": 3, "cmd": "shutdown"}]
    p = subprocess.run([py, "-m", "mcp_gym_learner", "serve"], cwd=str(tmp_path), env=_env(),
                       input="".join(json.dumps(x) + "\n" for x in lines), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    state, bad, bye = [json.loads(x) for x in p.stdout.splitlines()]
    assert state["id"] == 1 and state["ok"] and state["result"]["loaded"] is False
    assert state["result"]["protocol"] == int(version)
    assert bad["id"] == 2 and not bad["ok"] and bad["error"].startswith("batch.ids: missing"), bad
    assert bye["id"] == 3 and bye["ok"]


def test_console_script(venv, tmp_path):
    p = subprocess.run([str(venv / "bin" / "mcp-gym-learner"), "--help"], cwd=str(tmp_path), env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "serve" in p.stdout and "mcp-gym-learner" in p.stdout
