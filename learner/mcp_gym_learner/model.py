"""A small GPT-style decoder with a KV cache (the forward of PROTOCOL.md's ONNX graph)."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import normalize_architecture

# torch >= 2.0 has a fused attention kernel; torch 1.13 (Debian) does not. Feature-detected, never required.
_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def _exporting() -> bool:
    try:
        if torch.onnx.is_in_onnx_export():
            return True
    except AttributeError:  # pragma: no cover
        pass
    return torch.jit.is_tracing() or torch.jit.is_scripting()


def _additive_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if allowed.dtype == dtype:  # already a bias (features with `allowed`: converted once for all blocks)
        return allowed
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, allowed: Optional[torch.Tensor], past_k: Optional[torch.Tensor],
                past_v: Optional[torch.Tensor], causal_only: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        H, Dh = self.n_heads, self.head_dim
        qkv = self.qkv(x).reshape(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)  # [3, B, H, T, Dh]
        q, k, v = qkv.unbind(0)
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        S = k.shape[2]
        if _exporting():
            # The exported graph: plain MatMul / Where / Softmax.
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))  # [B, H, T, S]
            # A large negative number, not -inf: a row with no allowed key gets uniform weights, not NaN.
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            y = torch.matmul(torch.softmax(scores, dim=-1), v)
        elif _HAS_SDPA:  # torch >= 2.0
            if causal_only:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=_additive_bias(allowed, q.dtype))
        else:
            # torch 1.13: one baddbmm writes scale * q k^T + bias (bias: 0 or the most negative float; a
            # score plus that rounds to it, so a row with no allowed key is uniform, never NaN).
            bias = _additive_bias(allowed, q.dtype)  # [1, 1, T, S] or [B, 1, T, S]
            if bias.shape[0] == 1:
                bias = bias.reshape(1, T, S)
            else:
                bias = bias.expand(B, H, T, S).reshape(B * H, T, S)
            scores = torch.baddbmm(bias, q.reshape(B * H, T, Dh), k.reshape(B * H, S, Dh).transpose(1, 2),
                                   alpha=1.0 / math.sqrt(Dh))
            y = torch.bmm(torch.softmax(scores, dim=-1), v.reshape(B * H, S, Dh)).view(B, H, T, Dh)
        y = y.transpose(1, 2).reshape(B, T, D)
        return self.proj(y), k, v


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, d_ff)
        self.fc_proj = nn.Linear(d_ff, d_model)

    def forward(self, x, allowed, past_k, past_v, causal_only):
        a, k, v = self.attn(self.ln1(x), allowed, past_k, past_v, causal_only)
        x = x + a
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))
        return x, k, v


class GPT(nn.Module):
    """Token + learned position embeddings, pre-LN blocks, final LN, head tied to the token embedding.

    The state_dict holds `tok_emb.weight` once: the head is `F.linear(h, tok_emb.weight)`.
    """

    def __init__(self, architecture: Optional[Dict[str, Any]] = None):
        super().__init__()
        arch = normalize_architecture(architecture)
        self.architecture = arch
        V, D, L = arch["vocab_size"], arch["d_model"], arch["n_layers"]
        self.vocab_size, self.d_model, self.n_layers = V, D, L
        self.n_heads = arch["n_heads"]
        self.head_dim = D // self.n_heads
        self.max_seq_len = arch["max_seq_len"]
        self.tok_emb = nn.Embedding(V, D)
        self.pos_emb = nn.Embedding(arch["max_seq_len"], D)
        self.blocks = nn.ModuleList([Block(D, self.n_heads, arch["d_ff"]) for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)
        self.reset_parameters(arch["seed"])

    def reset_parameters(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.n_layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith(("attn.proj.weight", "fc_proj.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # -- the pieces, so that training can apply the head to the scored positions only --

    def features(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor,
                 past_keys: Optional[torch.Tensor] = None, past_values: Optional[torch.Tensor] = None,
                 causal_only: bool = False, return_cache: bool = True, allowed: Optional[torch.Tensor] = None):
        """The final hidden states [B, T, D] and the presents (None, None without return_cache);
        `forward` without the head.

        allowed: bool [B, 1, T, S], which keys each query attends (replacing the causal and padding mask built
        from attention_mask): a training layout (the prefix tree of trie_layout.py) states its own mask.

        causal_only=True is a training shortcut: the caller guarantees that in every row all padding
        comes after all real tokens (right padding) and there is no past, so the padding mask can be
        dropped; the outputs at real positions are unchanged, those at padding positions differ.
        """
        if causal_only and past_keys is not None:
            raise ValueError("causal_only needs an empty past")
        T = input_ids.shape[1]
        S = attention_mask.shape[1]  # P + T
        x = self.tok_emb(input_ids) + self.pos_emb(position_ids)
        if allowed is not None:
            if causal_only or _exporting():
                raise ValueError("allowed replaces the mask: a training layout (not with causal_only or export)")
            allowed = _additive_bias(allowed, x.dtype)
        elif not (causal_only and _HAS_SDPA and not _exporting()):
            key_idx = torch.arange(S, device=input_ids.device)
            query_idx = torch.arange(T, device=input_ids.device) + (S - T)
            causal = key_idx.unsqueeze(0) <= query_idx.unsqueeze(1)  # [T, S]: j <= P + t
            if causal_only:
                allowed = causal.unsqueeze(0).unsqueeze(0)  # [1, 1, T, S]
            else:
                allowed = causal.unsqueeze(0) & (attention_mask.unsqueeze(1) != 0)  # [B, T, S]
                allowed = allowed.unsqueeze(1)  # [B, 1, T, S]
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            pk = past_keys[i] if past_keys is not None else None
            pv = past_values[i] if past_values is not None else None
            x, k, v = block(x, allowed, pk, pv, causal_only)
            if return_cache:
                keys.append(k)
                values.append(v)
        if not return_cache:
            return self.ln_f(x), None, None
        return self.ln_f(x), torch.stack(keys), torch.stack(values)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.tok_emb.weight)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor,
                past_keys: Optional[torch.Tensor] = None,
                past_values: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """PROTOCOL.md's graph (exactly the exported signature).

        input_ids, position_ids: int64 [B, T]; attention_mask: int64 [B, P + T] (1 real, 0 pad);
        past_keys/past_values: float [L, B, H, P, D/H] or None (P = 0).
        Returns logits [B, T, V], present_keys/present_values [L, B, H, P + T, D/H].
        Query t of row b attends key j iff j <= P + t and attention_mask[b, j] == 1.
        """
        h, k, v = self.features(input_ids, position_ids, attention_mask, past_keys, past_values)
        return self.logits(h), k, v

    def empty_cache(self, batch_size: int, device=None, dtype=torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
        shape = (self.n_layers, batch_size, self.n_heads, 0, self.head_dim)
        return torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """position_ids for (left or right) padded rows: real tokens count 0, 1, 2, ...; pads get 0."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp(min=0) * (attention_mask != 0).long()
