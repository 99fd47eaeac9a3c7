"""Loading a Hugging Face causal LM for training (PROTOCOL.md, "Hugging Face models"): what a directory holds
(config.json), whether transformers and peft are importable, and `load_hf`: AutoModelForCausalLM from local files,
made deterministic for RL (no dropout, no KV cache), optionally with gradient checkpointing, and wrapped with a
LoRA adapter by peft (a new one, or the one in `<model_dir>/adapter/`, trained on; options: hf_lora.py).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from .hf_lora import ADAPTER_DIR, _check_resumed_lora, _saved_lora, check_lora
from .policy import HFAdapter
from .protocol import RequestError


def transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
        return True
    except Exception:
        return False


def read_hf_config(model_dir: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def is_hf_dir(model_dir: str) -> bool:
    """A directory with a Hugging Face config.json (model_type / architectures), not an mcp-gym model."""
    cfg = read_hf_config(model_dir)
    return cfg is not None and cfg.get("format") is None and ("model_type" in cfg or "architectures" in cfg)


def disable_dropout(model: nn.Module) -> Dict[str, float]:
    """No dropout in RL: the policy's logprobs must be deterministic (the on-policy ratio is 1, the old
    logprobs are the sampler's). Zeroes every nn.Dropout and the config's *dropout* probabilities (attention
    dropout is read from the config); LoRA's own dropout (peft, applied afterwards) is left as configured.
    Returns the config values it changed (restored in a written config.json)."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    changed: Dict[str, float] = {}
    cfg = getattr(model, "config", None)
    if cfg is not None:
        for k, v in list(vars(cfg).items()):
            if "dropout" in k and isinstance(v, float) and not isinstance(v, bool):
                if v != 0.0:
                    changed[k] = v
                setattr(cfg, k, 0.0)
    for m in model.modules():  # attention modules that copied the probability at construction
        for k in ("attention_dropout", "dropout"):
            if isinstance(getattr(m, k, None), float):
                setattr(m, k, 0.0)
    return changed


def _dtype_kwarg() -> str:
    """from_pretrained's dtype argument: `dtype` from transformers 4.56 on, `torch_dtype` before."""
    import transformers

    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:  # pragma: no cover
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def load_hf(model_dir: str, device: str, dtype: str = "auto", gradient_checkpointing: bool = False,
            lora: Optional[Dict[str, Any]] = None, attn_implementation: Optional[str] = None):
    """AutoModelForCausalLM from a local directory. dtype auto / float32: float32 parameters (auto: bf16
    autocast on CUDA); bfloat16: bf16 parameters. LoRA (peft): `lora` ({r, alpha, dropout, target_modules})
    makes a new adapter; a directory with `adapter/` continues that adapter (is_trainable). Returns
    (model, adapter, info)."""
    import transformers

    if dtype not in ("auto", "float32", "bfloat16"):
        raise RequestError(f"dtype: must be auto, float32 or bfloat16, got {dtype!r}")
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    if attn_implementation is None:
        attn_implementation = "eager"
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            attn_implementation = "sdpa"
        if device.startswith("cuda"):
            try:
                import flash_attn  # noqa: F401
                attn_implementation = "flash_attention_2"
            except Exception:
                pass
    kwargs: Dict[str, Any] = {_dtype_kwarg(): torch_dtype, "local_files_only": True}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn_implementation,
                                                                  **kwargs)
    except (TypeError, ImportError):
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    restore: Dict[str, Any] = {}  # config values changed for training, restored in a written config.json
    if getattr(model.config, "use_cache", None) is not None:
        restore["use_cache"] = model.config.use_cache
        model.config.use_cache = False
    restore.update(disable_dropout(model))
    if gradient_checkpointing:
        kw = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name warns)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            try:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
            except TypeError:
                model.gradient_checkpointing_enable()
    adapter_dir = os.path.join(model_dir, ADAPTER_DIR)
    resumed = os.path.exists(os.path.join(adapter_dir, "adapter_config.json"))
    lora_info: Optional[Dict[str, Any]] = None
    if resumed or lora is not None:
        if not peft_available():
            raise RequestError("lora: peft is not importable by this Python"
                               + (f" (needed for {adapter_dir})" if resumed else ""))
        import peft

        if resumed:
            saved = _saved_lora(adapter_dir)
            if lora:
                _check_resumed_lora(lora, saved, adapter_dir, model)
            with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing
                warnings.simplefilter("ignore", FutureWarning)
                model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
            lora_info = {**saved, "resumed": True, "adapter_dir": adapter_dir}
        else:
            opts = check_lora(lora, model)
            cfg = peft.LoraConfig(r=opts["r"], lora_alpha=opts["alpha"], lora_dropout=opts["dropout"],
                                  target_modules=opts["target_modules"], task_type="CAUSAL_LM")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    model = peft.get_peft_model(model, cfg)
            except ValueError as e:
                raise RequestError(f"lora: {e}") from None
            lora_info = {**opts, "resumed": False}
        if gradient_checkpointing and hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    model.to(device)
    model.eval()
    info = {"dtype": dtype, "param_dtype": str(torch_dtype).replace("torch.", ""),
            "gradient_checkpointing": bool(gradient_checkpointing), "lora": lora_info, "restore": restore}
    return model, HFAdapter(model), info
