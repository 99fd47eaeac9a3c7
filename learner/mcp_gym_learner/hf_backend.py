"""A Hugging Face causal LM behind the commands (PROTOCOL.md, "Hugging Face models"): loaded with
transformers (`AutoModelForCausalLM.from_pretrained`, local files only), optionally wrapped with a
LoRA adapter by peft, trained by the same RL trainer (policy.HFAdapter), written with
`save_pretrained`. The embedded GPT's commands (sft, logprobs, export's inline files) are refused.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from .backend import Backend
from .policy import HFAdapter, hf_base
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


def is_hf_dir(model_dir: str) -> bool:
    """A directory with a Hugging Face config.json (model_type / architectures), not an mcp-gym model."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("format") is None and ("model_type" in cfg or "architectures" in cfg)


def disable_dropout(model: nn.Module) -> None:
    """No dropout in RL: the policy's logprobs must be deterministic (the on-policy ratio is 1, the old
    logprobs are the sampler's). Zeroes every nn.Dropout and the config's *dropout* probabilities (attention
    dropout is read from the config); LoRA's own dropout (peft, applied afterwards) is left as configured."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    cfg = getattr(model, "config", None)
    if cfg is not None:
        for k, v in list(vars(cfg).items()):
            if "dropout" in k and isinstance(v, float):
                setattr(cfg, k, 0.0)
    for m in model.modules():  # attention modules that copied the probability at construction
        for k in ("attention_dropout", "dropout"):
            if isinstance(getattr(m, k, None), float):
                setattr(m, k, 0.0)


def load_hf(model_dir: str, device: str, dtype: str = "auto", gradient_checkpointing: bool = False,
            lora: Optional[Dict[str, Any]] = None, attn_implementation: Optional[str] = None):
    """AutoModelForCausalLM from a local directory. dtype auto: float32 parameters (bf16 autocast on CUDA);
    bfloat16: bf16 parameters. LoRA (peft) when `lora` is given: {r, alpha, dropout, target_modules}.
    Returns (model, adapter)."""
    import transformers

    if dtype not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"dtype: must be auto, float32 or bfloat16, got {dtype!r}")
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    if attn_implementation is None:
        attn_implementation = "eager"
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            attn_implementation = "sdpa"
        if device == "cuda":
            try:
                import flash_attn  # noqa: F401
                attn_implementation = "flash_attention_2"
            except Exception:
                pass
    kwargs: Dict[str, Any] = {"torch_dtype": torch_dtype}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn_implementation,
                                                                  **kwargs)
    except (TypeError, ValueError, ImportError):
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    if getattr(model.config, "use_cache", None) is not None:
        model.config.use_cache = False
    disable_dropout(model)
    if gradient_checkpointing:
        try:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        except TypeError:
            model.gradient_checkpointing_enable()
    if lora:
        if not peft_available():
            raise ValueError("lora: peft is not importable here")
        import peft

        cfg = peft.LoraConfig(r=int(lora.get("r", 16)), lora_alpha=int(lora.get("alpha", 32)),
                              lora_dropout=float(lora.get("dropout", 0.0)),
                              target_modules=lora.get("target_modules") or "all-linear", task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, cfg)
        if gradient_checkpointing and hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    model.to(device)
    return model, HFAdapter(model)


def save_hf(model, model_dir: str) -> Dict[str, Any]:
    """`save_pretrained` into model_dir (the adapter only, for a peft model)."""
    model.save_pretrained(model_dir, safe_serialization=True)
    return {"model_dir": model_dir, "format": "hf", "lora": hf_base(model) is not model}


class HFBackend(Backend):
    name = "hf"
    supports = frozenset()

    def refusal(self, what: str) -> str:
        if what == "inline":
            return "inline: only for the project's GPT models (a Hugging Face model is not sampled through ONNX)"
        return f"model: {what} is for the embedded GPT; the loaded model is a Hugging Face model"

    @classmethod
    def load(cls, model_dir: str, a: Dict[str, Any], device: str, torch_device: str) -> "HFBackend":
        if not transformers_available():
            raise RequestError("hf: transformers is not importable by this Python")
        dtype = a.get("dtype", "auto")
        gc = a.get("gradient_checkpointing", False)
        lora = a.get("lora")
        if lora is not None and not peft_available():
            raise RequestError("lora: peft is not importable by this Python")
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            raise RequestError(f"model_dir: {os.path.join(model_dir, 'config.json')} does not exist")
        try:
            model, adapter = load_hf(model_dir, torch_device, dtype=dtype, gradient_checkpointing=gc, lora=lora)
        except (OSError, ValueError) as e:
            raise RequestError(f"model_dir: cannot load a Hugging Face model from {model_dir}: {e}") from None
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
        autocast = None
        if device == "cuda" and dtype == "auto" and torch.cuda.is_bf16_supported():
            autocast = torch.bfloat16  # float32 master weights, bf16 matmuls
        info = {"dtype": dtype, "gradient_checkpointing": gc, "lora": lora,
                "autocast": str(autocast) if autocast else None,
                "attn_implementation": adapter.attn_implementation, "pack": adapter.pack}
        backend = cls(model, adapter, model_dir, {"format": "hf", "version": 0, "hf": info})
        backend.autocast_dtype = autocast
        return backend

    def reference_mode(self, requested: str) -> str:
        # LoRA: the base weights are shared; the reference is a snapshot of the adapter, swapped in.
        return "swap" if (self.config["hf"]["lora"] and requested == "copy") else requested

    def load_result(self) -> Dict[str, Any]:
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        return {"version": 0, "params": self.params(), "trainable_params": trainable, "hf": self.config["hf"],
                "vocab_size": self.adapter.vocab_size}

    def write(self, model_dir: str, full: Optional[bool], rl_steps: int) -> Dict[str, Any]:
        t0 = time.perf_counter()
        os.makedirs(model_dir, exist_ok=True)
        result = save_hf(self.model, model_dir)
        self.config["version"] = self.version + 1
        result.update({"seconds": time.perf_counter() - t0, "version": self.config["version"], "full": False,
                       "onnx": False})
        return result
