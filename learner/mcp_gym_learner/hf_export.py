"""ONNX export of a Hugging Face causal LM (Llama, Qwen2, Qwen3) with the rollout side's *slot* KV cache.

The graph has the interface of the embedded GPT's (slot_decoder.py), with caches of the model's key/value
heads (grouped-query attention: each group of query heads reads its key/value head inside the graph, the
cache is never repeated):

    input_ids        int64   [B, T]
    position_ids     int64   [B, T]
    attention_mask   float32 [B, C + T]      1 real, 0 padding or empty slot
    past_key_<l>     float32 [B, Hkv, Dh, C] for each layer l (C may be 0)
    past_value_<l>   float32 [B, Hkv, C, Dh]
 -> logits           float32 [B, V]          the last position's next-token logits
    new_keys         float32 [L, B, Hkv, T, Dh]   (after k_norm and RoPE: what attention reads)
    new_values       float32 [L, B, Hkv, T, Dh]

Inside: the token embedding, per layer RMSNorm -> q/k/v projections (Qwen2's biases; Qwen3's per-head
RMSNorm q_norm/k_norm before RoPE) -> RoPE computed from position_ids with the model's own inv_freq and
attention scaling (its rotary_emb buffers: default, linear, llama3 and yarn rope) -> attention over the
valid cache slots and, causally, the new tokens -> o_proj -> RMSNorm -> SwiGLU MLP; the final RMSNorm and the
LM head (tied to the embeddings or not) on the last position only.

A peft-wrapped model (LoRA) is exported with MERGED weights, W + scaling * B @ A (and LoRA biases), computed
into new tensors: the training model is not modified.

Files, beside the checkpoint:

    <model_dir>/onnx/model.onnx        the graph (initializers stored externally)
    <model_dir>/onnx/model.onnx.data   every weight as little-endian float32, at the manifest's offsets
    <model_dir>/onnx/config.json       {"format": "mcp-gym-onnx/1", "version", "family", "architecture",
                                        "eos_token_ids", "graph", "data", "manifest"} (written last)

`export_hf_onnx` traces the graph and writes all three; `update_hf_onnx_weights` rewrites only the data file
(temp file + rename) from the current (merged) weights and increments `version`, which the rollout side
(src/agents/onnx.ts) watches; it falls back to a full export when the manifest does not fit the model.

    python -m mcp_gym_learner.hf_export --model-dir DIR     (exports a checkpoint directory in place;
                                                            a PEFT adapter in DIR/adapter/ is merged in)
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ONNX_DATA_FILE, ONNX_GRAPH_FILE, ONNX_OPSET, atomic_write_bytes
from .policy import hf_base
from .slot_decoder import NEG, _KeepInitializers, io_names

FORMAT = "mcp-gym-onnx/1"
ONNX_DIR = "onnx"
ONNX_CONFIG_FILE = "config.json"
FAMILIES = ("qwen3", "qwen2", "llama")
# RoPE types whose inv_freq does not depend on the sequence length (the buffer is all the graph needs).
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The effective (merged) weights


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


# ---------------------------------------------------------------------------------------------
# The graph


def _rms(x, w, eps: float):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x, half: int):
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class HfSlotDecoder(nn.Module):
    """A Llama / Qwen2 / Qwen3 causal LM (possibly under peft) as the slot-cache decoder of the module
    docstring. Holds the merged float32 weights as its own parameters, named as in the transformers model's
    state_dict (so the ONNX initializers carry those names)."""

    def __init__(self, model, state: Optional[Dict[str, torch.Tensor]] = None):
        super().__init__()
        spec = _spec(model)
        self.spec = spec
        self.family = spec["family"]
        self.L, self.H, self.Hkv, self.Dh = spec["n_layers"], spec["n_heads"], spec["n_kv_heads"], spec["head_dim"]
        if self.H % self.Hkv:
            raise NotImplementedError(f"n_heads {self.H} is not a multiple of n_kv_heads {self.Hkv}")
        self.G = self.H // self.Hkv
        self.eps = spec["eps"]
        self.scaling = spec["scaling"]
        self.attention_scaling = spec["attention_scaling"]
        self.inv_freq_values = spec["inv_freq"]
        state = state if state is not None else merged_state_dict(model, spec)
        self.w: Dict[str, nn.Parameter] = {}
        for key, t in state.items():
            self._add(key, nn.Parameter(t, requires_grad=False))

    def _add(self, key: str, p: nn.Parameter) -> None:
        parts = key.split(".")
        m: nn.Module = self
        for part in parts[:-1]:
            sub = m._modules.get(part)
            if sub is None:
                sub = nn.Module()
                m.add_module(part, sub)
            m = sub
        m.register_parameter(parts[-1], p)
        self.w[key] = p

    def _linear(self, x, name: str):
        return F.linear(x, self.w[f"{name}.weight"], self.w.get(f"{name}.bias"))

    def forward(self, input_ids, position_ids, attention_mask, *past):
        L, H, Hkv, Dh, G = self.L, self.H, self.Hkv, self.Dh, self.G
        w, eps = self.w, self.eps
        B, T = input_ids.shape[0], input_ids.shape[1]
        C = past[0].shape[3]
        x = F.embedding(input_ids, w["model.embed_tokens.weight"])
        # RoPE from the positions, as the model's rotary embedding computes it (float32)
        inv_freq = self.inv_freq_values.to(x.device)
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq  # [B, T, Dh/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos = (emb.cos() * self.attention_scaling).unsqueeze(1)  # [B, 1, T, Dh]
        sin = (emb.sin() * self.attention_scaling).unsqueeze(1)
        half = Dh // 2
        mask_past = attention_mask[:, :C]
        mask_new = attention_mask[:, C:]
        bias_past = ((1.0 - mask_past) * NEG).unsqueeze(1).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, 1, C]
        causal = torch.ones(T, T, dtype=torch.float32, device=input_ids.device).tril()
        allowed_new = causal.unsqueeze(0) * mask_new.unsqueeze(1)  # [B, T, T]
        bias_new = ((1.0 - allowed_new) * NEG).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, T, T]
        new_k, new_v = [], []
        for i in range(L):
            p = f"model.layers.{i}"
            kt_past, v_past = past[i], past[L + i]  # [B, Hkv, Dh, C], [B, Hkv, C, Dh]
            h = _rms(x, w[f"{p}.input_layernorm.weight"], eps)
            q = self._linear(h, f"{p}.self_attn.q_proj").reshape(B, T, H, Dh)
            k = self._linear(h, f"{p}.self_attn.k_proj").reshape(B, T, Hkv, Dh)
            v = self._linear(h, f"{p}.self_attn.v_proj").reshape(B, T, Hkv, Dh)
            if self.family == "qwen3":
                q = _rms(q, w[f"{p}.self_attn.q_norm.weight"], eps)
                k = _rms(k, w[f"{p}.self_attn.k_norm.weight"], eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, Dh]
            q = q * cos + _rotate_half(q, half) * sin
            k = k * cos + _rotate_half(k, half) * sin
            # query head h reads key/value head h // G: [B, Hkv, G, T, Dh] against [B, Hkv, 1, ., .] (MatMul
            # broadcasts; the cache is not repeated). No Reshape names C: ONNX reads a 0 there as "keep".
            q5 = q.reshape(B, Hkv, G, T, Dh)
            s_past = torch.matmul(q5, kt_past.unsqueeze(2)) * self.scaling + bias_past  # [B, Hkv, G, T, C]
            s_new = torch.matmul(q5, k.transpose(-2, -1).unsqueeze(2)) * self.scaling + bias_new  # [.., T, T]
            pr = torch.softmax(torch.cat([s_past, s_new], dim=-1), dim=-1)  # [B, Hkv, G, T, C + T]
            y = torch.matmul(pr[..., :C], v_past.unsqueeze(2)) + torch.matmul(pr[..., C:], v.unsqueeze(2))
            y = y.reshape(B, H, T, Dh).transpose(1, 2).reshape(B, T, H * Dh)
            x = x + self._linear(y, f"{p}.self_attn.o_proj")
            h = _rms(x, w[f"{p}.post_attention_layernorm.weight"], eps)
            g = self._linear(h, f"{p}.mlp.gate_proj")
            x = x + self._linear(F.silu(g) * self._linear(h, f"{p}.mlp.up_proj"), f"{p}.mlp.down_proj")
            new_k.append(k)
            new_v.append(v)
        last = _rms(x[:, -1, :], w["model.norm.weight"], eps)
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        logits = F.linear(last, head, w.get("lm_head.bias"))
        # The next-token distribution at temperature 1, computed by the runtime's vectorised softmax: the
        # sampler then draws a token with one cumulative walk instead of an exponential per vocabulary entry
        # (151k of them per row and step for Qwen), which had made sampling half of a decode step.
        probs = torch.softmax(logits, dim=-1)
        return logits, torch.stack(new_k), torch.stack(new_v), probs

    def dummy_inputs(self, B: int = 2, T: int = 3, C: int = 4):
        V = self.spec["vocab_size"]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, V, (B, T), dtype=torch.long, generator=g)
        pos = torch.arange(C, C + T, dtype=torch.long).unsqueeze(0).repeat(B, 1)
        mask = torch.ones(B, C + T, dtype=torch.float32)
        keys = [torch.randn(B, self.Hkv, self.Dh, C, generator=g) for _ in range(self.L)]
        values = [torch.randn(B, self.Hkv, C, self.Dh, generator=g) for _ in range(self.L)]
        return (ids, pos, mask, *keys, *values)


# ---------------------------------------------------------------------------------------------
# Files


def onnx_dir(model_dir: str) -> str:
    return os.path.join(model_dir, ONNX_DIR)


def read_onnx_config(model_dir: str) -> Optional[Dict[str, Any]]:
    """<model_dir>/onnx/config.json, or None when it is missing or not ours."""
    try:
        with open(os.path.join(onnx_dir(model_dir), ONNX_CONFIG_FILE), "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) and cfg.get("format") == FORMAT else None


def _write_config(model_dir: str, cfg: Dict[str, Any]) -> None:
    atomic_write_bytes(os.path.join(onnx_dir(model_dir), ONNX_CONFIG_FILE),
                       (json.dumps(cfg, indent=1) + "\n").encode("utf-8"))


def _align(n: int, nbytes: int) -> int:
    a = 4096 if nbytes >= (1 << 20) else 64
    return (n + a - 1) // a * a


def _layout(proto, state: Dict[str, torch.Tensor], base_dir: str) -> List[Dict[str, Any]]:
    """Points every parameter initializer of the traced graph at its place in model.onnx.data (64-byte
    aligned, 4096 for tensors of 1 MiB or more) and turns the other initializers (constants the tracer made)
    into Constant nodes. Returns the manifest [{name, param, offset, length, shape}] in file order."""
    import onnx
    from onnx import numpy_helper

    manifest: List[Dict[str, Any]] = []
    constants = []
    used = set()
    offset = 0
    for init in list(proto.graph.initializer):
        shape = [int(d) for d in init.dims]
        param = init.name if init.name in state and list(state[init.name].shape) == shape else None
        if param is None and init.data_location != onnx.TensorProto.EXTERNAL:
            # an exporter that renamed a parameter: match by value
            arr = numpy_helper.to_array(init)
            for k, v in state.items():
                if k not in used and list(v.shape) == shape and np.array_equal(v.numpy(), arr):
                    param = k
                    break
        if param is None:
            constants.append(init)
            continue
        if param in used:
            raise RuntimeError(f"parameter {param} appears twice among the ONNX initializers")
        if init.data_type != onnx.TensorProto.FLOAT:
            raise RuntimeError(f"ONNX initializer {init.name} is not float32")
        used.add(param)
        length = 4 * int(np.prod(shape, dtype=np.int64))
        offset = _align(offset, length)
        for field in ("raw_data", "float_data"):
            init.ClearField(field)
        del init.external_data[:]
        init.data_location = onnx.TensorProto.EXTERNAL
        for k, v in (("location", ONNX_DATA_FILE), ("offset", str(offset)), ("length", str(length))):
            e = init.external_data.add()
            e.key, e.value = k, v
        manifest.append({"name": init.name, "param": param, "offset": offset, "length": length, "shape": shape})
        offset += length
    missing = sorted(set(state) - used)
    if missing:
        raise RuntimeError(f"weights missing from the ONNX initializers: {', '.join(missing[:5])}")
    for init in constants:
        value = numpy_helper.from_array(numpy_helper.to_array(init, base_dir=base_dir), init.name)
        proto.graph.initializer.remove(init)
        proto.graph.node.insert(0, onnx.helper.make_node("Constant", [], [init.name], value=value,
                                                         name=f"const_{init.name}"))
    return manifest


def _write_data(path: str, manifest: List[Dict[str, Any]], state: Dict[str, torch.Tensor]) -> None:
    """Writes each entry's weights as little-endian float32 at its offset into a temporary file beside
    `path` (gaps stay zero), fsyncs it and renames it over `path`."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            end = 0
            for e in sorted(manifest, key=lambda e: e["offset"]):
                t = state[e["param"]]
                if list(t.shape) != list(e["shape"]):
                    raise ValueError(f"{e['param']}: shape {list(t.shape)}, the graph's is {e['shape']}")
                raw = t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False).tobytes()
                if len(raw) != e["length"]:
                    raise ValueError(f"{e['param']}: {len(raw)} bytes, the graph expects {e['length']}")
                f.seek(e["offset"])
                f.write(raw)
                end = max(end, e["offset"] + len(raw))
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _trace(dec: HfSlotDecoder, path: str) -> None:
    inputs, outputs, axes = io_names(dec.L)
    outputs = outputs + ["probs"]
    axes = {**axes, "probs": {0: "B"}}
    kwargs: Dict[str, Any] = dict(input_names=inputs, output_names=outputs, dynamic_axes=axes,
                                  opset_version=ONNX_OPSET, do_constant_folding=False, export_params=True)
    params = inspect.signature(torch.onnx.export).parameters
    if "dynamo" in params:  # keep the TorchScript exporter (dynamo became the default in torch 2.9)
        kwargs["dynamo"] = False
    if "keep_initializers_as_inputs" in params:
        kwargs["keep_initializers_as_inputs"] = False
    with torch.no_grad(), _KeepInitializers():
        torch.onnx.export(dec, dec.dummy_inputs(), path, **kwargs)


def _architecture(spec: Dict[str, Any]) -> Dict[str, Any]:
    return {k: spec[k] for k in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_seq_len")}


def export_hf_onnx(model, model_dir: str, verify: bool = True) -> Dict[str, Any]:
    """Traces the slot-cache graph of `model` (merged weights if peft-wrapped; the model is not modified)
    and writes <model_dir>/onnx/{model.onnx, model.onnx.data, config.json} (graph and data first, each by
    rename; config.json last, with `version` one more than the previous export's, or 1).
    Returns {"seconds", "full": True, "version", "config"}."""
    import onnx

    t0 = time.perf_counter()
    dec = HfSlotDecoder(model)
    state = {k: p.data for k, p in dec.w.items()}
    out_dir = onnx_dir(model_dir)
    os.makedirs(out_dir, exist_ok=True)
    old = read_onnx_config(model_dir)
    tmpdir = tempfile.mkdtemp(prefix=".export-", dir=out_dir)
    try:
        traced = os.path.join(tmpdir, "traced.onnx")
        _trace(dec, traced)
        proto = onnx.load(traced, load_external_data=False)
        manifest = _layout(proto, state, tmpdir)
        graph = os.path.join(tmpdir, ONNX_GRAPH_FILE)
        onnx.save_model(proto, graph)
        del proto
        data = os.path.join(tmpdir, ONNX_DATA_FILE)
        _write_data(data, manifest, state)
        if verify:
            onnx.checker.check_model(graph)
            names = [i.name for i in onnx.load(graph, load_external_data=False).graph.input]
            want, _, _ = io_names(dec.L)
            if names != want:
                raise RuntimeError(f"ONNX inputs {names}, expected {want}")
        os.replace(data, os.path.join(out_dir, ONNX_DATA_FILE))
        os.replace(graph, os.path.join(out_dir, ONNX_GRAPH_FILE))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    spec = dec.spec
    cfg = {
        "format": FORMAT,
        "version": int(old.get("version", 0)) + 1 if old else 1,
        "family": spec["family"],
        "architecture": _architecture(spec),
        "eos_token_ids": spec["eos_token_ids"],
        "graph": ONNX_GRAPH_FILE,
        "data": ONNX_DATA_FILE,
        "opset": ONNX_OPSET,
        "cache": "slots",
        "manifest": manifest,
    }
    _write_config(model_dir, cfg)
    seconds = time.perf_counter() - t0
    _log(f"exported {spec['family']} to {out_dir} version {cfg['version']} ({len(manifest)} tensors, {seconds:.2f}s)")
    return {"seconds": seconds, "full": True, "version": cfg["version"], "config": cfg}


def _manifest_fits(cfg: Optional[Dict[str, Any]], state: Dict[str, torch.Tensor], spec: Dict[str, Any],
                   model_dir: str) -> Optional[str]:
    """None when the export at model_dir can take these weights in place, else why not."""
    if cfg is None:
        return "no onnx/config.json"
    entries = cfg.get("manifest")
    if not isinstance(entries, list) or not entries:
        return "no manifest"
    if cfg.get("family") != spec["family"] or cfg.get("architecture") != _architecture(spec):
        return "another architecture"
    seen = set()
    for e in entries:
        p = e.get("param") if isinstance(e, dict) else None
        if p not in state or list(state[p].shape) != list(e.get("shape", [])):
            return f"manifest entry {p!r} does not match the model"
        seen.add(p)
    if seen != set(state):
        return "the manifest does not cover the model's weights"
    for f in (cfg.get("graph", ONNX_GRAPH_FILE), cfg.get("data", ONNX_DATA_FILE)):
        if not os.path.exists(os.path.join(onnx_dir(model_dir), f)):
            return f"onnx/{f} is missing"
    return None


def update_hf_onnx_weights(model, model_dir: str) -> Dict[str, Any]:
    """After a learner step: rewrites <model_dir>/onnx/model.onnx.data in place (temp file + rename) from
    the current (merged) weights per the manifest, then increments `version` in onnx/config.json (written
    last). Falls back to export_hf_onnx when there is no export or its manifest does not fit the model.
    Returns {"seconds", "full", "version", "config"}."""
    t0 = time.perf_counter()
    spec = _spec(model)
    state = merged_state_dict(model, spec)
    cfg = read_onnx_config(model_dir)
    why = _manifest_fits(cfg, state, spec, model_dir)
    if why is not None:
        _log(f"ONNX weights update: {why}; exporting the graph again")
        return export_hf_onnx(model, model_dir)
    assert cfg is not None
    _write_data(os.path.join(onnx_dir(model_dir), cfg.get("data", ONNX_DATA_FILE)), cfg["manifest"], state)
    cfg["version"] = int(cfg.get("version", 0)) + 1
    cfg["eos_token_ids"] = spec["eos_token_ids"]
    _write_config(model_dir, cfg)
    return {"seconds": time.perf_counter() - t0, "full": False, "version": cfg["version"], "config": cfg}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.hf_export",
                                description="Export a Llama / Qwen2 / Qwen3 checkpoint directory to ONNX "
                                            "(<dir>/onnx/) for the rollout side's sampler.")
    p.add_argument("--model-dir", required=True, help="a transformers checkpoint directory (written in place)")
    p.add_argument("--adapter", default=None,
                   help="a PEFT (LoRA) adapter directory to merge in (default: <model-dir>/adapter/ when it exists)")
    p.add_argument("--no-adapter", action="store_true", help="export the base weights even if <model-dir>/adapter/ exists")
    p.add_argument("--update", action="store_true",
                   help="rewrite only the weights when the existing export fits (else a full export)")
    a = p.parse_args(argv)
    import transformers

    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, torch_dtype=torch.float32)
    adapter = a.adapter
    default_adapter = os.path.join(a.model_dir, "adapter")
    if adapter is None and not a.no_adapter and os.path.exists(os.path.join(default_adapter, "adapter_config.json")):
        adapter = default_adapter
    if adapter is not None:
        import peft

        model = peft.PeftModel.from_pretrained(model, adapter)
    model.eval()
    try:
        r = update_hf_onnx_weights(model, a.model_dir) if a.update else export_hf_onnx(model, a.model_dir)
    except NotImplementedError as e:
        print(f"hf_export: {e}", file=sys.stderr)
        return 2
    cfg = r["config"]
    print(json.dumps({"model_dir": a.model_dir, "onnx_dir": onnx_dir(a.model_dir), "adapter": adapter,
                      "family": cfg["family"],
                      "version": r["version"], "full": r["full"], "seconds": round(r["seconds"], 3),
                      "architecture": cfg["architecture"], "eos_token_ids": cfg["eos_token_ids"],
                      "tensors": len(cfg["manifest"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
