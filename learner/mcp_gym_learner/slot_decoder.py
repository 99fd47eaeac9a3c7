"""The inference graph exported to ONNX: the GPT's weights with a *slot* KV cache.

The rollout side keeps, for each layer, a key buffer [B, H, Dh, C] (transposed, so that q·K
needs no transpose) and a value buffer [B, H, C, Dh] of C slots per row, and hands them to the
graph as they are: one input per layer and kind, so nothing is sliced, transposed or copied per
step. The graph attends over the valid slots (attention_mask[:, :C] == 1) and over the new
tokens causally (attention_mask[:, C:] == 1 and j <= t), and returns only what is new: the
logits of the last position and the new tokens' keys and values, which the caller writes into
its slots. Scores over the past and over the new tokens are computed apart and only the small
score matrices are concatenated.

    input_ids        int64   [B, T]
    position_ids     int64   [B, T]
    attention_mask   float32 [B, C + T]   1 real, 0 padding or empty slot
    past_key_<l>     float32 [B, H, Dh, C]   for each layer l (C may be 0)
    past_value_<l>   float32 [B, H, C, Dh]
 -> logits           float32 [B, V]        the last position's next-token logits
    new_keys         float32 [L, B, H, T, Dh]
    new_values       float32 [L, B, H, T, Dh]
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG = -1e9  # masked scores: exp() underflows to exactly 0, and an all-masked row stays finite


class SlotDecoder(nn.Module):
    def __init__(self, gpt: nn.Module):
        super().__init__()
        self.gpt = gpt

    def forward(self, input_ids, position_ids, attention_mask, *past):
        g = self.gpt
        L = g.n_layers
        B, T = input_ids.shape[0], input_ids.shape[1]
        C = past[0].shape[3]
        H, Dh = g.n_heads, g.head_dim
        scale = 1.0 / math.sqrt(Dh)
        x = g.tok_emb(input_ids) + g.pos_emb(position_ids)
        mask_past = attention_mask[:, :C]
        mask_new = attention_mask[:, C:]
        bias_past = ((1.0 - mask_past) * NEG).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, C]
        causal = torch.ones(T, T, dtype=torch.float32, device=input_ids.device).tril()  # [T, T]
        allowed_new = causal.unsqueeze(0) * mask_new.unsqueeze(1)  # [B, T, T]
        bias_new = ((1.0 - allowed_new) * NEG).unsqueeze(1)  # [B, 1, T, T]
        new_k, new_v = [], []
        for i, blk in enumerate(g.blocks):
            kt_past, v_past = past[i], past[L + i]  # [B, H, Dh, C], [B, H, C, Dh]
            a = blk.attn
            h = blk.ln1(x)
            qkv = a.qkv(h).reshape(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # [B, H, T, Dh]
            s_past = torch.matmul(q, kt_past) * scale + bias_past  # [B, H, T, C]
            s_new = torch.matmul(q, k.transpose(-2, -1)) * scale + bias_new  # [B, H, T, T]
            p = torch.softmax(torch.cat([s_past, s_new], dim=-1), dim=-1)
            y = torch.matmul(p[..., :C], v_past) + torch.matmul(p[..., C:], v)
            y = y.transpose(1, 2).reshape(B, T, H * Dh)
            x = x + a.proj(y)
            x = x + blk.fc_proj(F.gelu(blk.fc(blk.ln2(x))))
            new_k.append(k)
            new_v.append(v)
        last = g.ln_f(x[:, -1, :])
        logits = F.linear(last, g.tok_emb.weight)
        return logits, torch.stack(new_k), torch.stack(new_v)


def io_names(n_layers: int):
    past = [f"past_key_{i}" for i in range(n_layers)] + [f"past_value_{i}" for i in range(n_layers)]
    inputs = ["input_ids", "position_ids", "attention_mask"] + past
    outputs = ["logits", "new_keys", "new_values"]
    axes = {
        "input_ids": {0: "B", 1: "T"},
        "position_ids": {0: "B", 1: "T"},
        "attention_mask": {0: "B", 1: "S"},
        "logits": {0: "B"},
        "new_keys": {1: "B", 3: "T"},
        "new_values": {1: "B", 3: "T"},
    }
    for i in range(n_layers):
        axes[f"past_key_{i}"] = {0: "B", 3: "C"}
        axes[f"past_value_{i}"] = {0: "B", 2: "C"}
    return inputs, outputs, axes


def dummy_inputs(gpt, B: int = 2, T: int = 3, C: int = 4):
    L, H, Dh = gpt.n_layers, gpt.n_heads, gpt.head_dim
    ids = torch.randint(0, 256, (B, T), dtype=torch.long)
    pos = torch.arange(C, C + T, dtype=torch.long).unsqueeze(0).repeat(B, 1)
    mask = torch.ones(B, C + T, dtype=torch.float32)
    keys = [torch.randn(B, H, Dh, C) for _ in range(L)]
    values = [torch.randn(B, H, C, Dh) for _ in range(L)]
    return (ids, pos, mask, *keys, *values)


class _KeepInitializers:
    """The exporter merges initializers that are equal (fresh LayerNorm weights, zero biases);
    then one tensor would stand for several parameters and a later weight update could not be
    written in place. This turns that merge off for the duration of an export."""

    NAME = "_jit_pass_onnx_deduplicate_initializers"

    def __enter__(self):
        self.saved = getattr(torch._C, self.NAME, None)
        if self.saved is not None:
            setattr(torch._C, self.NAME, lambda graph, params, *rest: params)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            setattr(torch._C, self.NAME, self.saved)
        return False


def export_graph(gpt: nn.Module, path: str, opset: int = 14) -> None:
    """Traces the slot decoder into an ONNX file, one initializer per parameter."""
    was_training = gpt.training
    gpt.eval()
    try:
        with torch.no_grad(), _KeepInitializers():
            inputs, outputs, axes = io_names(gpt.n_layers)
            torch.onnx.export(
                SlotDecoder(gpt),
                dummy_inputs(gpt),
                path,
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=axes,
                opset_version=opset,
                do_constant_folding=False,
            )
    finally:
        gpt.train(was_training)


def externalize(onnx_path: str, data_name: str, prefix: str = "gpt.") -> list:
    """Moves every initializer of an ONNX file into `data_name` beside it (raw float32 at known
    offsets) and returns the manifest [{name, param, offset, shape}]."""
    import os

    import onnx
    from onnx.external_data_helper import convert_model_to_external_data

    model = onnx.load(onnx_path)
    data_path = os.path.join(os.path.dirname(onnx_path), data_name)
    if os.path.exists(data_path):
        os.remove(data_path)  # onnx appends to an existing file
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location=data_name, size_threshold=0)
    onnx.save_model(model, onnx_path)
    manifest = []
    for init in onnx.load(onnx_path, load_external_data=False).graph.initializer:
        info = {e.key: e.value for e in init.external_data}
        if init.data_type != onnx.TensorProto.FLOAT:
            raise ValueError(f"initializer {init.name} is not float32")
        name = init.name
        manifest.append({
            "name": name,
            "param": name[len(prefix):] if name.startswith(prefix) else name,
            "offset": int(info.get("offset", 0)),
            "length": int(info["length"]),
            "shape": list(init.dims),
        })
    return manifest


def write_weights(data_path: str, manifest: list, state_dict: dict) -> None:
    """Writes the parameters into an external-data file per the manifest (temp file + rename)."""
    import os

    import numpy as np

    size = max(m["offset"] + m["length"] for m in manifest)
    buf = bytearray(size)
    for m in manifest:
        t = state_dict[m["param"]]
        if list(t.shape) != m["shape"]:
            raise ValueError(f"{m['param']}: shape {list(t.shape)} does not match the graph's {m['shape']}")
        raw = t.detach().to("cpu", torch.float32).contiguous().numpy().astype(np.float32, copy=False).tobytes()
        if len(raw) != m["length"]:
            raise ValueError(f"{m['param']}: {len(raw)} bytes, the graph expects {m['length']}")
        buf[m["offset"]:m["offset"] + m["length"]] = raw
    tmp = data_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, data_path)
