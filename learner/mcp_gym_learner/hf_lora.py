"""The LoRA options of a Hugging Face model's `load` (PROTOCOL.md, "Hugging Face models"): their defaults, their
check against the model's modules (RequestError names the field), and the options of an adapter saved in
`<model_dir>/adapter/` (a `lora` given with it must agree with them).
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Tuple

import torch.nn as nn

from .protocol import RequestError

ADAPTER_DIR = "adapter"  # <model_dir>/adapter/: the PEFT adapter of a LoRA model
LORA_DEFAULTS = {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "all-linear"}


def lora_target_names(model: nn.Module) -> List[str]:
    """The names (last component) of the modules of `model` that LoRA can wrap: linear layers (and
    transformers' Conv1D), embeddings."""
    kinds: Tuple[type, ...] = (nn.Linear, nn.Embedding)
    try:
        from transformers.pytorch_utils import Conv1D

        kinds = kinds + (Conv1D,)
    except Exception:  # pragma: no cover
        pass
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if name and isinstance(m, kinds)})


def check_lora(lora: Dict[str, Any], model: nn.Module) -> Dict[str, Any]:
    """The LoRA options with their defaults, checked against the model; RequestError names the field."""
    out = dict(LORA_DEFAULTS)
    out.update({k: v for k, v in lora.items() if v is not None})
    r, alpha, dropout, targets = out["r"], out["alpha"], out["dropout"], out["target_modules"]
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise RequestError(f"lora.r: must be an integer >= 1, got {r!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha <= 0:
        raise RequestError(f"lora.alpha: must be a number > 0, got {alpha!r}")
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise RequestError(f"lora.dropout: must be a number in [0, 1), got {dropout!r}")
    names = lora_target_names(model)
    linear = [n for n in names if n not in ("embed_tokens", "lm_head", "wte", "wpe")]
    if isinstance(targets, str):
        if targets != "all-linear":
            try:  # peft reads a string as a regular expression over the full module names
                rx = re.compile(targets)
            except re.error as e:
                raise RequestError(f"lora.target_modules: {targets!r} is not a valid regular expression: {e}") from None
            if not any(rx.fullmatch(n) for n, _ in model.named_modules()):
                raise RequestError(f"lora.target_modules: the pattern {targets!r} matches no module of this model "
                                   f"(its linear modules: {', '.join(linear)}; or \"all-linear\")")
    elif isinstance(targets, list):
        if not targets:
            raise RequestError("lora.target_modules: an empty list (name modules, or \"all-linear\")")
        for i, t in enumerate(targets):
            if not isinstance(t, str) or t not in names:
                raise RequestError(f"lora.target_modules[{i}]: {t!r} is not a module of this model "
                                   f"(its linear modules: {', '.join(linear)})")
        targets = sorted(set(targets))
    else:
        raise RequestError(f"lora.target_modules: a list of module names or \"all-linear\", got {targets!r}")
    return {"r": int(r), "alpha": float(alpha), "dropout": float(dropout), "target_modules": targets}


def _saved_lora(adapter_dir: str) -> Dict[str, Any]:
    with open(os.path.join(adapter_dir, "adapter_config.json"), "r", encoding="utf-8") as f:
        c = json.load(f)
    targets = c.get("target_modules")
    if isinstance(targets, list):
        targets = sorted(targets)
    return {"r": c.get("r"), "alpha": float(c.get("lora_alpha", 0)), "dropout": float(c.get("lora_dropout", 0.0)),
            "target_modules": targets}


def _check_resumed_lora(asked: Dict[str, Any], saved: Dict[str, Any], adapter_dir: str, model: nn.Module) -> None:
    """`lora` given for a model directory that holds an adapter: what it names must be the adapter's."""
    for k in ("r", "alpha", "dropout"):
        if k in asked and asked[k] is not None and float(asked[k]) != float(saved[k]):
            raise RequestError(f"lora.{k}: {adapter_dir} holds an adapter with {k} {saved[k]}, asked {asked[k]} "
                               "(loading continues that adapter; remove it to start a new one)")
    t = asked.get("target_modules")
    got = saved["target_modules"]
    if t is None or t == "all-linear":  # peft saves "all-linear" resolved into names: nothing to compare
        return
    same = sorted(set(t)) == sorted(set(got)) if isinstance(t, list) and isinstance(got, list) else t == got
    if not same:
        raise RequestError(f"lora.target_modules: {adapter_dir} holds an adapter of {got}, asked {t} "
                           "(loading continues that adapter; remove it to start a new one)")
