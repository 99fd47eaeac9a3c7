"""The weights and shape of a Hugging Face causal LM (Llama, Qwen2, Qwen3) as the ONNX graph (hf_graph.py) computes
with them: a peft-wrapped model's LoRA merged in (W + scaling * B @ A, as new tensors: the training model is not
modified), modules_to_save resolved, named as in the transformers model's state_dict."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .policy import hf_base

FAMILIES = ("qwen3", "qwen2", "llama")
# RoPE types whose inv_freq does not depend on the sequence length (the buffer is all the graph needs).
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def _adapter_names(module) -> List[str]:
    names = []
    for attr in ("lora_A", "lora_embedding_A"):
        d = getattr(module, attr, None)
        if d is not None:
            names.extend(k for k in d.keys() if k not in names)
    return names


def effective_weights(module: nn.Module) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The weight and bias a module computes with: for a peft LoRA layer the base weights plus the active,
    not yet merged adapters' scaling * B @ A (new tensors); for a modules_to_save wrapper its active copy;
    otherwise the module's own parameters (the same tensors, detached)."""
    # peft's ModulesToSaveWrapper (e.g. a fully trained lm_head or embed_tokens)
    if hasattr(module, "modules_to_save") and hasattr(module, "original_module"):
        active = list(getattr(module, "active_adapters", []) or [])
        if getattr(module, "disable_adapters", False) or not active or active[0] not in module.modules_to_save:
            return effective_weights(module.original_module)
        return effective_weights(module.modules_to_save[active[0]])
    if hasattr(module, "base_layer"):
        if not hasattr(module, "get_delta_weight"):
            raise NotImplementedError(f"{type(module).__name__}: this adapter type cannot be merged for the ONNX export")
        base = module.get_base_layer()
        w = base.weight.detach()
        b = base.bias.detach() if getattr(base, "bias", None) is not None else None
        if getattr(module, "disable_adapters", False):
            return w, b
        merged = set(getattr(module, "merged_adapters", []) or [])
        known = _adapter_names(module)
        for a in getattr(module, "active_adapters", []) or []:
            if a not in known or a in merged:
                continue
            if a in (getattr(module, "lora_variant", None) or {}) or (getattr(module, "use_dora", None) or {}).get(a):
                raise NotImplementedError(f"{type(module).__name__}: adapter {a!r} is a LoRA variant (e.g. DoRA) "
                                          "that the ONNX export cannot merge")
            with torch.no_grad():
                delta = module.get_delta_weight(a).detach()
                w = w.to(torch.float32) + delta.to(w.device, torch.float32)
                if (getattr(module, "lora_bias", None) or {}).get(a):
                    lb = module.lora_B[a].bias.detach().to(torch.float32) * module.scaling[a]
                    b = lb if b is None else b.to(torch.float32) + lb.to(b.device)
        return w, b
    w = getattr(module, "weight", None)
    if w is None:
        raise NotImplementedError(f"{type(module).__name__}: no weight")
    b = getattr(module, "bias", None)
    return w.detach(), (b.detach() if b is not None else None)


def _spec(model) -> Dict[str, Any]:
    """What the graph needs to know of a Llama / Qwen2 / Qwen3 model (checks what it cannot export)."""
    base = hf_base(model)
    cfg = base.config
    family = getattr(cfg, "model_type", None)
    if family not in FAMILIES:
        raise NotImplementedError(f"ONNX export: model_type {family!r} is not supported (one of {', '.join(FAMILIES)})")
    dec = base.get_decoder()
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise NotImplementedError(f"ONNX export: hidden_act {cfg.hidden_act!r} (only silu)")
    layer_types = getattr(cfg, "layer_types", None) or []
    window = getattr(cfg, "sliding_window", None)
    if "sliding_attention" in layer_types and window is not None and window < cfg.max_position_embeddings:
        raise NotImplementedError("ONNX export: sliding-window attention layers are not supported")
    rot = dec.rotary_emb
    rope_type = getattr(rot, "rope_type", "default")
    if rope_type not in STATIC_ROPE:
        raise NotImplementedError(f"ONNX export: rope type {rope_type!r} depends on the sequence length "
                                  f"(supported: {', '.join(STATIC_ROPE)})")
    attn0 = dec.layers[0].self_attn
    H = int(cfg.num_attention_heads)
    Hkv = int(getattr(cfg, "num_key_value_heads", None) or H)
    Dh = int(getattr(attn0, "head_dim", None) or cfg.hidden_size // H)
    eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(cfg, "eos_token_id", None)
    eos_list = [eos] if isinstance(eos, int) else list(eos or [])
    eos_ids: List[int] = []
    for e in eos_list:
        if int(e) not in eos_ids:
            eos_ids.append(int(e))
    return {
        "family": family,
        "n_layers": int(cfg.num_hidden_layers),
        "n_heads": H,
        "n_kv_heads": Hkv,
        "head_dim": Dh,
        "vocab_size": int(base.get_output_embeddings().weight.shape[0]),
        "max_seq_len": int(cfg.max_position_embeddings),
        "eps": float(cfg.rms_norm_eps),
        "scaling": float(getattr(attn0, "scaling", Dh ** -0.5)),
        "inv_freq": rot.inv_freq.detach().to("cpu", torch.float32).clone(),
        "attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
        "eos_token_ids": eos_ids,
    }


def _module_names(spec: Dict[str, Any]) -> List[str]:
    names = ["model.embed_tokens"]
    for i in range(spec["n_layers"]):
        p = f"model.layers.{i}"
        names += [f"{p}.input_layernorm", f"{p}.self_attn.q_proj", f"{p}.self_attn.k_proj", f"{p}.self_attn.v_proj"]
        if spec["family"] == "qwen3":
            names += [f"{p}.self_attn.q_norm", f"{p}.self_attn.k_norm"]
        names += [f"{p}.self_attn.o_proj", f"{p}.post_attention_layernorm", f"{p}.mlp.gate_proj",
                  f"{p}.mlp.up_proj", f"{p}.mlp.down_proj"]
    return names + ["model.norm"]


def merged_state_dict(model, spec: Optional[Dict[str, Any]] = None) -> Dict[str, torch.Tensor]:
    """The weights the graph computes with, as float32 CPU tensors keyed like the transformers model's
    state_dict ("model.layers.0.self_attn.q_proj.weight", ...; LoRA merged in). The LM head appears as
    "lm_head.weight" only when it is not tied to the embeddings. Tensors of unadapted float32 CPU parameters
    share their storage (do not modify them)."""
    spec = spec or _spec(model)
    base = hf_base(model)
    out: Dict[str, torch.Tensor] = {}
    emb_w = None
    with torch.no_grad():
        for name in _module_names(spec):
            w, b = effective_weights(base.get_submodule(name))
            if name == "model.embed_tokens":
                emb_w = w
            out[f"{name}.weight"] = w.to("cpu", torch.float32).contiguous()
            if b is not None:
                out[f"{name}.bias"] = b.to("cpu", torch.float32).contiguous()
        head = base.get_output_embeddings()
        hw, hb = effective_weights(head)
        if hw is not emb_w and not (hw.data_ptr() == emb_w.data_ptr() and hw.shape == emb_w.shape
                                    and hw.dtype == emb_w.dtype):
            out["lm_head.weight"] = hw.to("cpu", torch.float32).contiguous()
        if hb is not None:
            out["lm_head.bias"] = hb.to("cpu", torch.float32).contiguous()
    return out
