"""The reference side of the chat-template parity check (docs/models.md, "Parity with transformers"):
transformers' own `apply_chat_template` and tokenizer, on the cases mcp-gym rendered.

    python -m mcp_gym_learner.template_parity templates [--root DIR]
        the models' published chat templates (Qwen2.5, Qwen3, Llama 3.1/3.2/3.3, Hermes ...), taken from
        the llama.cpp copy inside the llama-cpp-python source package of the Python registry (pinned by
        version and sha256; its models/templates/ are the checkpoints' tokenizer_config.json templates,
        verbatim, kept there for llama.cpp's own template tests); extracted once under
        <models root>/reference-templates/<package>-<version>/; prints {"dir", "files"}.

    python -m mcp_gym_learner.template_parity render --cases IN.jsonl --out OUT.jsonl
        each case {"id", "tokenizer": DIR, "template": TEXT, "messages", "tools"?, "add_generation_prompt",
        "context"?} rendered by tokenizer.apply_chat_template(..., tokenize=False) and tokenised as
        apply_chat_template(tokenize=True) does (the text's encoding, no special tokens added);
        writes {"id", "text", "ids"} or {"id", "error"} per case.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from typing import Any, Dict, List

from .gguf_convert import sha256_file
from .model_store import default_root

SOURCE = {
    "package": "llama-cpp-python",
    "version": "0.3.36",
    "sdist": "llama_cpp_python-0.3.36.tar.gz",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "licence": "MIT (llama.cpp); each template is its model's",
}
# The templates the parity corpus renders (named as llama.cpp names them: the model's repository).
TEMPLATES = [
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
]


class ParityError(Exception):
    pass


def _log(msg: str) -> None:
    print(f"[templates] {msg}", file=sys.stderr, flush=True)


def templates(root: str | None = None) -> Dict[str, Any]:
    out_dir = os.path.join(root or default_root(), "reference-templates", f"{SOURCE['package']}-{SOURCE['version']}")
    if all(os.path.isfile(os.path.join(out_dir, t)) for t in TEMPLATES):
        return {"dir": out_dir, "files": TEMPLATES, "fetched": False}
    dl = os.path.join(out_dir, ".download")
    os.makedirs(dl, exist_ok=True)
    sdist = os.path.join(dl, SOURCE["sdist"])
    if not (os.path.isfile(sdist) and sha256_file(sdist) == SOURCE["sha256"]):
        req = f"{SOURCE['package']}=={SOURCE['version']}"
        _log(f"downloading {req}'s source package from the Python package registry (77 MB, for its templates only)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
               # The source package for this package only (its build requirements come as wheels: pip
               # reads the sdist's metadata with them; nothing is built or installed).
               f"--no-binary={SOURCE['package']}", "--quiet", "-d", dl, req]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.isfile(sdist):
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
            raise ParityError(f"pip download {req} failed (exit {r.returncode}): {tail}")
    got = sha256_file(sdist)
    if got != SOURCE["sha256"]:
        raise ParityError(f"{SOURCE['sdist']}: sha256 {got} is not the pinned {SOURCE['sha256']}")
    prefix = f"{SOURCE['sdist'][:-len('.tar.gz')]}/vendor/llama.cpp/models/templates/"
    with tarfile.open(sdist, "r:gz") as tf:
        for name in TEMPLATES:
            member = tf.getmember(prefix + name)
            src = tf.extractfile(member)
            if src is None:
                raise ParityError(f"{SOURCE['sdist']}: {prefix + name} is not a file")
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(src.read())
    shutil.rmtree(dl, ignore_errors=True)
    return {"dir": out_dir, "files": TEMPLATES, "fetched": True}


def render(cases_file: str, out_file: str) -> int:
    from transformers import AutoTokenizer

    tokenizers: Dict[str, Any] = {}
    results: List[Dict[str, Any]] = []
    with open(cases_file, "r", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for case in cases:
        d = case["tokenizer"]
        if d not in tokenizers:
            tokenizers[d] = AutoTokenizer.from_pretrained(d)
        tok = tokenizers[d]
        try:
            kwargs = dict(case.get("context") or {})
            text = tok.apply_chat_template(
                case["messages"],
                tools=case.get("tools"),
                chat_template=case["template"],
                add_generation_prompt=bool(case.get("add_generation_prompt")),
                tokenize=False,
                **kwargs,
            )
            ids = tok(text, add_special_tokens=False)["input_ids"]
            results.append({"id": case["id"], "text": text, "ids": ids})
        except Exception as e:  # the template raised (raise_exception) or the case is not renderable
            results.append({"id": case["id"], "error": f"{type(e).__name__}: {e}"})
    with open(out_file, "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mcp_gym_learner.template_parity")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("templates")
    t.add_argument("--root")
    r = sub.add_parser("render")
    r.add_argument("--cases", required=True)
    r.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "templates":
            print(json.dumps(templates(a.root)))
        else:
            print(json.dumps({"rendered": render(a.cases, a.out)}))
    except ParityError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
