"""`put_files`: files sent inline (base64) written under <working dir>/mcp-gym-files/<dir>, for a caller
that does not share this file system (a run driving a learner on another machine sends the model
directory, then loads it by the path this answers). Nothing is written outside that root.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, Dict, Optional

from .protocol import RequestError

FILES_ROOT = "mcp-gym-files"


def put_files(a: Dict[str, Any], cwd: Optional[str] = None) -> Dict[str, Any]:
    rel = a["dir"]
    parts = rel.replace("\\", "/").split("/")
    if os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
        raise RequestError(f"dir: {rel!r} must be a relative path of plain names (not absolute, no '.' or '..')")
    files = a["files"]
    if not files:
        raise RequestError("files: must be an object {file name: base64 data} with at least one file")
    decoded = {}
    for name, data in files.items():
        if name in ("", ".", "..") or "/" in name or "\\" in name:
            raise RequestError(f"files: {name!r} is not a plain file name")
        try:
            decoded[name] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(f"files.{name}: not valid base64") from None
    d = os.path.join(cwd or os.getcwd(), FILES_ROOT, *parts)
    os.makedirs(d, exist_ok=True)
    for name, raw in decoded.items():
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, os.path.join(d, name))
    return {"dir": d, "files": sorted(decoded), "bytes": sum(len(r) for r in decoded.values())}
