"""A GGUF file into an ordinary Hugging Face checkpoint directory (docs/models.md):

    python -m mcp_gym_learner.gguf_convert --gguf FILE.gguf --out DIR

transformers reads GGUF (`from_pretrained(dir, gguf_file=...)`, with the `gguf` package) and dequantises
the tensors to float32, but refuses `save_pretrained` on such a model ("quantized with gguf and is not
serializable"). So the model is built again from its config without the GGUF quantization entry and given the
dequantised state dict; that model, and the tokenizer (with its chat template), are saved as safetensors,
`tokenizer.json`, `tokenizer_config.json` and `generation_config.json`. The result loads in plain
transformers with no `gguf` package. The directory is written beside `out` and renamed into place, so a
conversion that stops halfway leaves nothing at `out`.

Prints one JSON line: {"dir", "model_type", "params", "seconds", "gguf_sha256"}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Any, Dict, Optional

SOURCE_FILE = "mcp-gym-source.json"  # where the checkpoint came from (written beside config.json)


def _log(msg: str) -> None:
    print(f"[convert] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert(gguf_path: str, out_dir: str, source: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Converts `gguf_path` into the Hugging Face directory `out_dir` (which must not exist). `source` is
    recorded in `<out>/mcp-gym-source.json` with the file's sha256."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise SystemExit("the gguf package is not importable by this Python (pip install gguf; "
                         "the learner's venv has it)") from None
    import torch
    import transformers

    t0 = time.perf_counter()
    gguf_path = os.path.abspath(gguf_path)
    if not os.path.isfile(gguf_path):
        raise SystemExit(f"--gguf: {gguf_path} does not exist")
    if os.path.exists(out_dir):
        raise SystemExit(f"--out: {out_dir} exists already (remove it to convert again)")
    folder, name = os.path.split(gguf_path)
    digest = sha256_file(gguf_path)
    _log(f"reading {gguf_path} ({os.path.getsize(gguf_path) / 1e6:.0f} MB, sha256 {digest[:16]}...)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as e:  # a file transformers cannot read: say which and why
        raise SystemExit(f"--gguf: transformers cannot read {gguf_path}: {type(e).__name__}: {e}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    config.name_or_path = ""
    state = loaded.state_dict()
    del loaded
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied output embeddings are one tensor: the head may be missing from the state dict by design.
    tied = getattr(config, "tie_word_embeddings", False)
    missing = [k for k in missing if not (tied and k.endswith("lm_head.weight"))]
    if missing or unexpected:
        raise SystemExit(f"--gguf: the dequantised tensors do not fit the model transformers builds from the "
                         f"file's config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    if tied:
        model.tie_weights()
    model.eval()
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.converting-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        params = sum(p.numel() for p in model.parameters())
        record = {"format": "mcp-gym-source/1", "gguf_file": name, "gguf_sha256": digest,
                  "converted_with": {"transformers": transformers.__version__, "torch": torch.__version__},
                  **(source or {})}
        with open(os.path.join(tmp, SOURCE_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"dir": os.path.abspath(out_dir), "model_type": config.model_type, "params": params,
              "seconds": round(time.perf_counter() - t0, 1), "gguf_sha256": digest}
    _log(f"wrote {out_dir}: {config.model_type}, {params / 1e6:.1f}M parameters, in {result['seconds']} s")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.gguf_convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, help="the .gguf file")
    p.add_argument("--out", required=True, help="the checkpoint directory to write (must not exist)")
    args = p.parse_args(argv)
    print(json.dumps(convert(args.gguf, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
