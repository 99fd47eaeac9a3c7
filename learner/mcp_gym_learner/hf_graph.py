"""The inference graph of a Hugging Face causal LM (Llama, Qwen2, Qwen3) for the rollout side's sampler: a *slot*
KV cache per row, and a *shared prefix* read by every row.

    input_ids        int64   [B, T]
    position_ids     int64   [B, T]
    attention_mask   float32 [B, C + T]          1 real, 0 padding or empty slot
    prefix_mask      float32 [B, P]              1 where the row reads that prefix position
    past_key_<l>     float32 [B, Hkv, Dh, C]     each row's own cache, for each layer l (C may be 0)
    past_value_<l>   float32 [B, Hkv, C, Dh]
    prefix_key_<l>   float32 [1, Hkv, Dh, P]     the shared prefix's keys and values, one copy for all rows
    prefix_value_<l> float32 [1, Hkv, P, Dh]     (P >= 1: without a prefix, one position that prefix_mask hides)
 -> logits           float32 [B, V]              the last position's next-token logits
    new_keys         float32 [L, B, Hkv, T, Dh]  (after k_norm and RoPE: what attention reads)
    new_values       float32 [L, B, Hkv, T, Dh]
    probs            float32 [B, V]              softmax(logits): the distribution at temperature 1

A row attends to the prefix positions its prefix_mask allows, to its valid cache slots, and causally to its new
tokens: scores over the three are computed apart (the prefix's against its single copy, broadcast over the
rows: the matrix products broadcast, nothing is repeated) and only the score matrices are concatenated. With
a chat template's system turn and tool list as the prefix (thousands of tokens), each row's cache holds only
its own tokens: a decode step reads the prefix once, not once per row (bench/hf-sampling.ts, "prefix").
Grouped-query attention: each group of query heads reads its key/value head inside the graph, the caches
are never repeated.

Inside: the token embedding, per layer RMSNorm -> q/k/v projections (Qwen2's biases; Qwen3's per-head
RMSNorm q_norm/k_norm before RoPE) -> RoPE computed from position_ids with the model's own inv_freq and
attention scaling (its rotary_emb buffers: default, linear, llama3 and yarn rope) -> attention -> o_proj ->
RMSNorm -> SwiGLU MLP; the final RMSNorm and the LM head (tied to the embeddings or not) on the last position.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .hf_weights import _spec, merged_state_dict
from .slot_decoder import NEG


def hf_io_names(n_layers: int):
    """The graph's input and output names and dynamic axes."""
    past = [f"past_key_{i}" for i in range(n_layers)] + [f"past_value_{i}" for i in range(n_layers)]
    prefix = [f"prefix_key_{i}" for i in range(n_layers)] + [f"prefix_value_{i}" for i in range(n_layers)]
    inputs = ["input_ids", "position_ids", "attention_mask", "prefix_mask"] + past + prefix
    outputs = ["logits", "new_keys", "new_values", "probs"]
    axes = {"input_ids": {0: "B", 1: "T"}, "position_ids": {0: "B", 1: "T"}, "attention_mask": {0: "B", 1: "S"},
            "prefix_mask": {0: "B", 1: "P"}, "logits": {0: "B"}, "probs": {0: "B"},
            "new_keys": {1: "B", 3: "T"}, "new_values": {1: "B", 3: "T"}}
    for i in range(n_layers):
        axes[f"past_key_{i}"] = {0: "B", 3: "C"}
        axes[f"past_value_{i}"] = {0: "B", 2: "C"}
        axes[f"prefix_key_{i}"] = {3: "P"}
        axes[f"prefix_value_{i}"] = {2: "P"}
    return inputs, outputs, axes


def _rms(x, w, eps: float):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x, half: int):
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class HfSlotDecoder(nn.Module):
    """A Llama / Qwen2 / Qwen3 causal LM (possibly under peft) as the graph of the module docstring. Holds the
    merged float32 weights as its own parameters, named as in the transformers model's state_dict (so the ONNX
    initializers carry those names)."""

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

    def forward(self, input_ids, position_ids, attention_mask, prefix_mask, *caches):
        L, H, Hkv, Dh, G = self.L, self.H, self.Hkv, self.Dh, self.G
        w, eps = self.w, self.eps
        B, T = input_ids.shape[0], input_ids.shape[1]
        C = caches[0].shape[3]
        P = caches[2 * L].shape[3]
        x = F.embedding(input_ids, w["model.embed_tokens.weight"])
        # RoPE from the positions, as the model's rotary embedding computes it (float32)
        inv_freq = self.inv_freq_values.to(x.device)
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq  # [B, T, Dh/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos = (emb.cos() * self.attention_scaling).unsqueeze(1)  # [B, 1, T, Dh]
        sin = (emb.sin() * self.attention_scaling).unsqueeze(1)
        half = Dh // 2
        bias_prefix = ((1.0 - prefix_mask) * NEG).unsqueeze(1).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, 1, P]
        mask_past = attention_mask[:, :C]
        mask_new = attention_mask[:, C:]
        bias_past = ((1.0 - mask_past) * NEG).unsqueeze(1).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, 1, C]
        causal = torch.ones(T, T, dtype=torch.float32, device=input_ids.device).tril()
        allowed_new = causal.unsqueeze(0) * mask_new.unsqueeze(1)  # [B, T, T]
        bias_new = ((1.0 - allowed_new) * NEG).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, T, T]
        new_k, new_v = [], []
        for i in range(L):
            p = f"model.layers.{i}"
            kt_past, v_past = caches[i], caches[L + i]  # [B, Hkv, Dh, C], [B, Hkv, C, Dh]
            kt_pre, v_pre = caches[2 * L + i], caches[3 * L + i]  # [1, Hkv, Dh, P], [1, Hkv, P, Dh]
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
            # query head h reads key/value head h // G: [B, Hkv, G, T, Dh] against [B or 1, Hkv, 1, ., .] (MatMul
            # broadcasts; nothing is repeated). No Reshape names C or P: ONNX reads a 0 there as "keep".
            q5 = q.reshape(B, Hkv, G, T, Dh)
            # The prefix's scores as one product per key/value head over every row's queries ([B*G*T, Dh] against
            # [Dh, P]): a MatMul broadcasting the single prefix over the rows ran one tiny product per row and head.
            qh = q5.permute(1, 0, 2, 3, 4).reshape(Hkv, -1, Dh)  # [Hkv, B*G*T, Dh]
            s_pre = torch.matmul(qh, kt_pre[0]).reshape(Hkv, B, G, T, -1).permute(1, 0, 2, 3, 4)  # [B, Hkv, G, T, P]
            s_pre = s_pre * self.scaling + bias_prefix
            s_past = torch.matmul(q5, kt_past.unsqueeze(2)) * self.scaling + bias_past  # [B, Hkv, G, T, C]
            s_new = torch.matmul(q5, k.transpose(-2, -1).unsqueeze(2)) * self.scaling + bias_new  # [.., T, T]
            pr = torch.softmax(torch.cat([s_pre, s_past, s_new], dim=-1), dim=-1)  # [B, Hkv, G, T, P + C + T]
            p_pre = pr[..., :P].permute(1, 0, 2, 3, 4).reshape(Hkv, -1, P)  # [Hkv, B*G*T, P]
            y_pre = torch.matmul(p_pre, v_pre[0]).reshape(Hkv, B, G, T, Dh).permute(1, 0, 2, 3, 4)
            y = y_pre + torch.matmul(pr[..., P:P + C], v_past.unsqueeze(2)) + torch.matmul(pr[..., P + C:], v.unsqueeze(2))
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

    def dummy_inputs(self, B: int = 2, T: int = 3, C: int = 4, P: int = 5):
        V = self.spec["vocab_size"]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, V, (B, T), dtype=torch.long, generator=g)
        pos = torch.arange(P + C, P + C + T, dtype=torch.long).unsqueeze(0).repeat(B, 1)
        mask = torch.ones(B, C + T, dtype=torch.float32)
        prefix_mask = torch.ones(B, P, dtype=torch.float32)
        keys = [torch.randn(B, self.Hkv, self.Dh, C, generator=g) for _ in range(self.L)]
        values = [torch.randn(B, self.Hkv, C, self.Dh, generator=g) for _ in range(self.L)]
        pkeys = [torch.randn(1, self.Hkv, self.Dh, P, generator=g) for _ in range(self.L)]
        pvalues = [torch.randn(1, self.Hkv, P, self.Dh, generator=g) for _ in range(self.L)]
        return (ids, pos, mask, prefix_mask, *keys, *values, *pkeys, *pvalues)


def no_prefix(n_layers: int, n_kv_heads: int, head_dim: int, rows: int):
    """The prefix inputs of a call without a prefix: one position, hidden from every row (the graph needs P >= 1)."""
    keys = [torch.zeros(1, n_kv_heads, head_dim, 1) for _ in range(n_layers)]
    values = [torch.zeros(1, n_kv_heads, 1, head_dim) for _ in range(n_layers)]
    return torch.zeros(rows, 1), keys, values
