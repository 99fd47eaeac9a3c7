"""Token logprobs and entropies through the LM head, for the scored positions only, in chunks of tokens.

`head_logprobs(h, weight, bias, targets, temperature, top_k, top_p)` takes the final hidden states of
the scored positions ([N, D]) and returns, for each of them, in float32 (float64 for float64 inputs):

- `lp`:   the processed logprob of the target (PROTOCOL.md, "Logprobs": logits / temperature, then
          top-k, then top-p, as `logprobs.processed_logprobs`; -inf outside the kept set),
- `lp_t`: the logprob of the target under log_softmax(logits / temperature), without truncation (the
          same values as `lp` when top_k = 0 and top_p = 1),
- `ent`:  the entropy of the processed (sampling) distribution, in nats.

Memory: float32 logits never exist beyond one chunk of tokens ([chunk, V], about 128 MiB). The
logits themselves, in the matmul dtype (bf16 under CUDA autocast), are kept for the backward when
they fit in a budget (`MCP_GYM_HEAD_SAVE_BYTES`; default 4 GiB on CUDA, 256 MiB on the CPU); the
backward then overwrites them in place with their gradient and does two matmuls over all tokens.
Past the budget they are recomputed chunk by chunk in the backward. (The naive way keeps float32
[B, T, V] logits, their log-softmax and its gradient alive over every position, prompt included.)

The gradient with respect to the logits is written in closed form (x = logits / temperature):
    d lp   / d x = keep ⊙ (onehot - p)          (p: the processed distribution)
    d lp_t / d x = onehot - softmax(x)
    d ent  / d x = -p ⊙ (log p + ent)           (0 outside the kept set)
The kept set carries no gradient (as in processed_logprobs). Without top-k/top-p the per-chunk
element-wise work is two small functions, compiled with torch.compile on CUDA (torch >= 2) into
fused kernels that read the bf16 logits and write their bf16 gradient; eager PyTorch elsewhere
(MCP_GYM_HEAD_COMPILE=0 turns the compilation off).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .logprobs import keep_mask

# Elements of one chunk's [chunk, V] float32 temporaries: 2**25 (128 MiB) on the CPU, 2**27 (512 MiB) on CUDA.
DEFAULT_CHUNK_ELEMENTS = 1 << 25
CUDA_CHUNK_ELEMENTS = 1 << 27


def chunk_tokens_for(vocab_size: int, elements: int = DEFAULT_CHUNK_ELEMENTS) -> int:
    """Tokens per chunk: about `elements` logits, a multiple of 64 (at least 64)."""
    return max(64, (elements // max(1, vocab_size)) // 64 * 64)


def save_budget_bytes(device: torch.device) -> int:
    env = os.environ.get("MCP_GYM_HEAD_SAVE_BYTES")
    if env:
        try:
            return int(float(env))
        except ValueError:
            pass
    return (4 << 30) if device.type == "cuda" else (256 << 20)


def _cuda_autocast_dtype() -> Optional[torch.dtype]:
    """The CUDA autocast dtype when CUDA autocast is on, else None (torch 1.13 to 2.x spellings)."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def _no_autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", enabled=False)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# per-chunk math without truncation (the common case): pure functions, compiled on CUDA


def _plain_fwd(lc: torch.Tensor, tgt: torch.Tensor, temperature: float, acc: torch.dtype, need_ent: bool):
    x = lc.to(acc)
    if temperature != 1.0:
        x = x / temperature
    lse = torch.logsumexp(x, dim=-1)
    lp = x.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - lse
    if need_ent:
        p = torch.exp(x - lse.unsqueeze(-1))
        ent = lse - (p * x).sum(-1)
    else:
        ent = torch.zeros_like(lse)
    return lp, lse, ent


def _plain_grad(lc: torch.Tensor, tgt: torch.Tensor, lse: torch.Tensor, ent: torch.Tensor, g_lp: torch.Tensor,
                g_ent: Optional[torch.Tensor], temperature: float, acc: torch.dtype, out_dtype: torch.dtype):
    x = lc.to(acc)
    if temperature != 1.0:
        x = x / temperature
    logp = x - lse.unsqueeze(-1)
    p = torch.exp(logp)
    gx = -g_lp.unsqueeze(-1) * p
    if g_ent is not None:
        gx = gx - g_ent.unsqueeze(-1) * p * (logp + ent.unsqueeze(-1))
    onehot = torch.arange(lc.shape[-1], device=lc.device).unsqueeze(0) == tgt.unsqueeze(-1)
    gx = gx + torch.where(onehot, g_lp.unsqueeze(-1), torch.zeros_like(gx))
    if temperature != 1.0:
        gx = gx / temperature
    return gx.to(out_dtype)


_COMPILED: Dict[str, object] = {}
_OOM = getattr(torch.cuda, "OutOfMemoryError", MemoryError)
_COMPILE_BROKEN = False


def _run(name: str, fn, device: torch.device, *args):
    """fn(*args), through torch.compile on CUDA when it works (falls back to eager for good if it does not)."""
    global _COMPILE_BROKEN
    if (device.type != "cuda" or _COMPILE_BROKEN or not hasattr(torch, "compile")
            or os.environ.get("MCP_GYM_HEAD_COMPILE", "1") == "0"):
        return fn(*args)
    f = _COMPILED.get(name)
    if f is None:
        f = _COMPILED[name] = torch.compile(fn, dynamic=True)
    try:
        return f(*args)
    except _OOM:
        raise
    except Exception as e:  # pragma: no cover (a GPU without a working Triton, an old compiler)
        _COMPILE_BROKEN = True
        print(f"[learner] head: torch.compile failed ({type(e).__name__}: {e}); eager from now on",
              file=sys.stderr, flush=True)
        return fn(*args)


# ---------------------------------------------------------------------------------------------
# per-chunk math with top-k / top-p (eager)


def _trunc_stats(logits: torch.Tensor, tgt: torch.Tensor, temperature: float, top_k: int, top_p: float,
                 need_ent: bool):
    """Stats of one chunk with truncation; also what the backward needs (log p kept, log p full, keep)."""
    x = logits / temperature
    full = torch.log_softmax(x, dim=-1)
    keep = keep_mask(logits, temperature, top_k, top_p)
    proc = torch.log_softmax(x.masked_fill(~keep, float("-inf")), dim=-1)
    t = tgt.unsqueeze(-1)
    lp = proc.gather(-1, t).squeeze(-1)
    lp_t = full.gather(-1, t).squeeze(-1)
    ent = None
    if need_ent:
        logp0 = proc.masked_fill(~keep, 0.0)
        ent = -(logp0.exp() * logp0).sum(-1)
    return lp, lp_t, ent, proc, full, keep


def _trunc_grad(lc, tgt, temperature, top_k, top_p, g_lp, g_lpt, g_ent, acc, out_dtype):
    _, _, ent, proc, full, keep = _trunc_stats(lc.to(acc), tgt, temperature, top_k, top_p, g_ent is not None)
    t = tgt.unsqueeze(-1)
    p = proc.exp()  # 0 outside the kept set
    gl = g_lp.unsqueeze(-1)
    glt = g_lpt.unsqueeze(-1)
    gx = -gl * p - glt * full.exp()
    gx.scatter_add_(-1, t, gl * keep.gather(-1, t).to(acc) + glt)
    if g_ent is not None:
        logp0 = proc.masked_fill(~keep, 0.0)
        gx = gx - g_ent.unsqueeze(-1) * p * (logp0 + ent.unsqueeze(-1))
    return (gx / temperature).to(out_dtype)


# ---------------------------------------------------------------------------------------------


class _HeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, targets, temperature, top_k, top_p, chunk, compute_dtype, need_ent, budget):
        N, V = h.shape[0], weight.shape[0]
        acc = torch.float64 if torch.float64 in (h.dtype, weight.dtype) else torch.float32
        dev = h.device
        truncated = top_k > 0 or top_p < 1.0
        lp = torch.empty(N, dtype=acc, device=dev)
        lp_t = torch.empty(N, dtype=acc, device=dev) if truncated else None
        ent = torch.empty(N, dtype=acc, device=dev)
        lse = torch.empty(N, dtype=acc, device=dev) if not truncated else None
        save = N * V * torch.empty((), dtype=compute_dtype).element_size() <= budget
        with torch.no_grad(), _no_autocast(dev):
            w = weight.to(compute_dtype)
            b = bias.to(compute_dtype) if bias is not None else None
            logits = F.linear(h.to(compute_dtype), w, b) if save else None
            for s in range(0, N, chunk):
                e = min(N, s + chunk)
                lc = logits[s:e] if save else F.linear(h[s:e].to(compute_dtype), w, b)
                if truncated:
                    a, a_t, en, _, _, _ = _trunc_stats(lc.to(acc), targets[s:e], temperature, top_k, top_p, need_ent)
                    lp[s:e] = a
                    lp_t[s:e] = a_t
                    if need_ent:
                        ent[s:e] = en
                else:
                    a, l_, en = _run("fwd", _plain_fwd, dev, lc, targets[s:e], temperature, acc, need_ent)
                    lp[s:e] = a
                    lse[s:e] = l_
                    ent[s:e] = en
        if not need_ent:
            ent.zero_()
        ctx.save_for_backward(h, weight, bias, targets, lse, ent)
        ctx.logits = logits
        ctx.saved_mode = save
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, not zeros
        ctx.cfg = (temperature, top_k, top_p, chunk, compute_dtype, need_ent, acc)
        if lp_t is None:
            lp_t = lp.clone()  # the same values; its gradient is added to lp's
        if not need_ent:
            ctx.mark_non_differentiable(ent)
        return lp, lp_t, ent

    @staticmethod
    def backward(ctx, g_lp, g_lpt, g_ent):
        h, weight, bias, targets, lse, ent = ctx.saved_tensors
        temperature, top_k, top_p, chunk, cd, need_ent, acc = ctx.cfg
        truncated = top_k > 0 or top_p < 1.0
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        N = h.shape[0]
        dev = h.device
        zero = torch.zeros(N, dtype=acc, device=dev)
        g_lp = zero if g_lp is None else g_lp.to(acc)
        g_lpt = zero if g_lpt is None else g_lpt.to(acc)
        g_ent = None if (g_ent is None or not need_ent) else g_ent.to(acc)
        if not truncated:  # lp_t is lp
            g_lp = g_lp + g_lpt
        saved = ctx.logits
        if saved is None and ctx.saved_mode:
            raise RuntimeError("head_logprobs: a second backward through the same graph is not supported "
                               "(the saved logits became their gradient)")
        ctx.logits = None
        with torch.no_grad(), _no_autocast(dev):
            w = weight.to(cd)
            b = bias.to(cd) if bias is not None else None
            gh = torch.empty_like(h) if (need_h and saved is None) else None
            gw = torch.zeros(weight.shape, dtype=acc, device=dev) if (need_w and saved is None) else None
            gb = torch.zeros(weight.shape[0], dtype=acc, device=dev) if need_b else None
            for s in range(0, N, chunk):
                e = min(N, s + chunk)
                lc = saved[s:e] if saved is not None else F.linear(h[s:e].to(cd), w, b)
                if truncated:
                    gc = _trunc_grad(lc, targets[s:e], temperature, top_k, top_p, g_lp[s:e], g_lpt[s:e],
                                     None if g_ent is None else g_ent[s:e], acc, cd)
                else:
                    gc = _run("grad", _plain_grad, dev, lc, targets[s:e], lse[s:e], ent[s:e], g_lp[s:e],
                              None if g_ent is None else g_ent[s:e], temperature, acc, cd)
                if need_b:
                    gb += gc.to(acc).sum(0)
                if saved is not None:
                    saved[s:e] = gc  # the logits become their gradient, in place
                    continue
                hc = h[s:e].to(cd)
                if need_h:
                    gh[s:e] = (gc @ w).to(h.dtype)
                if need_w:
                    gw += (gc.t() @ hc).to(acc)
            if saved is not None:
                if need_h:
                    gh = (saved @ w).to(h.dtype)
                if need_w:
                    gw = saved.t() @ h.to(cd)
        return (gh, gw.to(weight.dtype) if gw is not None else None, gb.to(bias.dtype) if gb is not None else None,
                None, None, None, None, None, None, None, None)


def head_logprobs(h: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor,
                  temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, chunk: Optional[int] = None,
                  need_entropy: bool = True, save_budget: Optional[int] = None
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(lp, lp_t, ent), each [N]; see the module's docstring. h: [N, D]; weight: [V, D]; targets: [N]."""
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    V = weight.shape[0]
    if chunk is None:
        chunk = chunk_tokens_for(V, CUDA_CHUNK_ELEMENTS if h.is_cuda else DEFAULT_CHUNK_ELEMENTS)
    chunk = max(1, int(chunk))
    cd = _cuda_autocast_dtype() if h.is_cuda else None
    if cd is None:
        cd = torch.promote_types(h.dtype, weight.dtype)
    if h.shape[0] == 0:
        acc = torch.float64 if torch.float64 in (h.dtype, weight.dtype) else torch.float32
        e = h.sum() * 0 + weight.sum() * 0  # keep the graph connected (DDP: every parameter gets a gradient)
        zero = torch.zeros(0, dtype=acc, device=h.device) + e.to(acc)
        return zero, zero, zero
    budget = save_budget_bytes(h.device) if save_budget is None else int(save_budget)
    return _HeadLogprobs.apply(h, weight, bias, targets, float(temperature), int(top_k), float(top_p), chunk, cd,
                               bool(need_entropy), budget)


def reference_head_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                            top_p: float = 1.0):
    """The plain autograd version of `head_logprobs` from logits [N, V] (for tests and small models)."""
    from .logprobs import processed_logprobs

    proc = processed_logprobs(logits, temperature, top_k, top_p)
    full = torch.log_softmax(logits / temperature, dim=-1)
    t = targets.unsqueeze(-1)
    p = proc.exp()
    logp0 = torch.where(p > 0, proc, torch.zeros_like(proc))
    ent = -(p * logp0).sum(-1)
    return proc.gather(-1, t).squeeze(-1), full.gather(-1, t).squeeze(-1), ent


__all__ = ["head_logprobs", "reference_head_logprobs", "chunk_tokens_for", "save_budget_bytes",
           "DEFAULT_CHUNK_ELEMENTS"]
