"""The model directory: config.json, weights.pt, model.onnx, model.onnx.data (see PROTOCOL.md)."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from typing import Any, Dict, Optional

FORMAT = "mcp-gym-model/1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.pt"
ONNX_GRAPH_FILE = "model.onnx"
ONNX_DATA_FILE = "model.onnx.data"
ONNX_OPSET = 14

PAD_ID = 263

DEFAULT_ARCHITECTURE: Dict[str, Any] = {
    "type": "gpt",
    "vocab_size": 264,
    "d_model": 128,
    "n_layers": 4,
    "n_heads": 4,
    "d_ff": 512,
    "max_seq_len": 1024,
    "tie_embeddings": True,
    "seed": 0,
}

DEFAULT_TOKENIZER: Dict[str, Any] = {
    "type": "byte",
    "special_tokens": {
        "<|system|>": 256,
        "<|user|>": 257,
        "<|assistant|>": 258,
        "<|tool|>": 259,
        "<|tool_call|>": 260,
        "<|/tool_call|>": 261,
        "<|end|>": 262,
        "<|pad|>": 263,
    },
}

DEFAULT_CHAT_TEMPLATE: Dict[str, Any] = {"max_tool_result_bytes": 256, "system_tools": True}

_INT_FIELDS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len")


class ConfigError(ValueError):
    """A bad value in a config or a request; the message names the field."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def normalize_architecture(arch: Optional[Dict[str, Any]], field: str = "architecture") -> Dict[str, Any]:
    """Fill the defaults into a (partial) architecture dict and check it."""
    if arch is None:
        arch = {}
    if not isinstance(arch, dict):
        raise ConfigError(f"{field}: must be an object")
    unknown = sorted(set(arch) - set(DEFAULT_ARCHITECTURE))
    if unknown:
        raise ConfigError(f"{field}.{unknown[0]}: unknown architecture field "
                          f"(known: {', '.join(DEFAULT_ARCHITECTURE)})")
    out = copy.deepcopy(DEFAULT_ARCHITECTURE)
    out.update(arch)
    if out["type"] != "gpt":
        raise ConfigError(f"{field}.type: only \"gpt\" is supported, got {out['type']!r}")
    for k in _INT_FIELDS:
        if not _is_int(out[k]) or out[k] < 1:
            raise ConfigError(f"{field}.{k}: must be a positive integer, got {out[k]!r}")
    if out["tie_embeddings"] is not True:
        raise ConfigError(f"{field}.tie_embeddings: only true is supported")
    if not _is_int(out["seed"]):
        raise ConfigError(f"{field}.seed: must be an integer, got {out['seed']!r}")
    if out["d_model"] % out["n_heads"] != 0:
        raise ConfigError(f"{field}.n_heads: d_model {out['d_model']} is not divisible by n_heads {out['n_heads']}")
    if out["vocab_size"] <= PAD_ID:
        raise ConfigError(f"{field}.vocab_size: must be > {PAD_ID} (the pad id), got {out['vocab_size']}")
    return out


def _file_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over `path`."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp makes 0600 files; use the usual umask-based mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_config(model_dir: str) -> Dict[str, Any]:
    path = os.path.join(model_dir, CONFIG_FILE)
    try:
        with open(path, "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"model_dir: {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"model_dir: {path} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise ConfigError(f"model_dir: {path} is not a {FORMAT} config")
    cfg["architecture"] = normalize_architecture(cfg.get("architecture"), "config.architecture")
    return cfg


def write_config(model_dir: str, cfg: Dict[str, Any]) -> None:
    data = (json.dumps(cfg, indent=2) + "\n").encode("utf-8")
    atomic_write_bytes(os.path.join(model_dir, CONFIG_FILE), data)


def new_config(name: str, architecture: Dict[str, Any], tokenizer: Optional[Dict[str, Any]] = None,
               chat_template: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {
        "format": FORMAT,
        "name": name,
        "version": 0,
        "architecture": architecture,
        "tokenizer": copy.deepcopy(tokenizer if tokenizer is not None else DEFAULT_TOKENIZER),
        "chat_template": copy.deepcopy(chat_template if chat_template is not None else DEFAULT_CHAT_TEMPLATE),
        "training": {"sft": None, "rl_steps": 0},
    }
