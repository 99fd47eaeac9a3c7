"""Supervised fine-tuning on JSONL {"ids": [...], "mask": [...]} (mask 1 where the loss applies)."""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .batch import rows_at
from .config import PAD_ID, ConfigError
from .runtime import adamw


@dataclass
class Example:
    ids: List[int]
    mask: List[int]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_example(obj: Any, where: str, vocab_size: int, max_seq_len: int) -> Example:
    """Validate one {"ids", "mask"} object; errors name the field, prefixed by `where` (e.g. "data: line 3: ")."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}must be an object with ids and mask")
    for k in obj:
        if k not in ("ids", "mask"):
            raise ConfigError(f"{where}{k}: unknown field (expected ids, mask)")
    ids, mask = obj.get("ids"), obj.get("mask")
    if not isinstance(ids, list):
        raise ConfigError(f"{where}ids: missing or not a list")
    if not isinstance(mask, list):
        raise ConfigError(f"{where}mask: missing or not a list")
    if len(ids) < 2:
        raise ConfigError(f"{where}ids: needs at least 2 tokens, got {len(ids)}")
    if len(ids) > max_seq_len:
        raise ConfigError(f"{where}ids: {len(ids)} tokens is more than max_seq_len {max_seq_len}")
    if len(mask) != len(ids):
        raise ConfigError(f"{where}mask: length {len(mask)} differs from ids length {len(ids)}")
    for i, t in enumerate(ids):
        if not _is_int(t) or not 0 <= t < vocab_size:
            raise ConfigError(f"{where}ids[{i}]: token id {t!r} is out of range [0, {vocab_size})")
    for i, m in enumerate(mask):
        if not _is_int(m) or m not in (0, 1):
            raise ConfigError(f"{where}mask[{i}]: must be 0 or 1, got {m!r}")
    return Example(ids, mask)


def load_jsonl(path: str, vocab_size: int, max_seq_len: int, field: str = "data") -> List[Example]:
    """Read and validate a whole JSONL file (before any training starts)."""
    try:
        f = open(path, "r", encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{field}: cannot open {path}: {e.strerror}") from None
    out: List[Example] = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{field}: line {n}: invalid JSON: {e}") from None
            out.append(check_example(obj, f"{field}: line {n}: ", vocab_size, max_seq_len))
    if not out:
        raise ConfigError(f"{field}: {path} holds no examples")
    if not any(any(e.mask[1:]) for e in out):
        raise ConfigError(f"{field}: no example has a mask of 1 after its first token (nothing to learn)")
    return out


def make_batches(lengths: Sequence[int], batch_size: int, rng: random.Random, pool: int = 50) -> List[List[int]]:
    """One epoch: shuffle, sort by length within pools of `pool` batches, cut into batches, shuffle them."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    batches: List[List[int]] = []
    step = batch_size * pool
    for i in range(0, len(idx), step):
        chunk = sorted(idx[i: i + step], key=lambda k: lengths[k])
        batches.extend(chunk[j: j + batch_size] for j in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(examples: Sequence[Example], device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T] (pad 263), attention mask [B, T], loss mask [B, T] (0 on pads)."""
    T = max(len(e.ids) for e in examples)
    B = len(examples)
    ids = torch.full((B, T), PAD_ID, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    lmask = torch.zeros((B, T), dtype=torch.long)
    for r, e in enumerate(examples):
        n = len(e.ids)
        ids[r, :n] = torch.tensor(e.ids, dtype=torch.long)
        attn[r, :n] = 1
        lmask[r, :n] = torch.tensor(e.mask, dtype=torch.long)
    return ids.to(device), attn.to(device), lmask.to(device)


def sft_loss(model, ids: torch.Tensor, attn: torch.Tensor, lmask: torch.Tensor,
             labels: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, int]:
    """Mean next-token cross-entropy: position i predicts labels[:, i] (default ids[:, i + 1]) where
    lmask[:, i + 1] == 1 and attn[:, i + 1] == 1. Returns (loss, number of scored tokens).

    The head is applied to the scored positions only, so positions with mask 0 contribute nothing.
    Right padding is assumed (collate's layout).
    """
    if labels is None:
        labels = ids[:, 1:]
    B, T = ids.shape
    pos = torch.arange(T, device=ids.device).unsqueeze(0).expand(B, T)
    h, _, _ = model.features(ids, pos, attn, causal_only=True, return_cache=False)
    sel = (lmask[:, 1:] != 0) & (attn[:, 1:] != 0)
    n = int(sel.sum())
    if n == 0:
        return h.sum() * 0.0, 0
    logits = model.logits(h[:, :-1][sel])
    return F.cross_entropy(logits.float(), labels[sel]), n


def adapter_sft_step(module, adapter, examples: Sequence[Example], device, micro_tokens: int = 16384,
                     autocast: Optional[Callable[[], Any]] = None) -> Tuple[float, int, int]:
    """One SFT batch through a policy adapter (policy.py; a Hugging Face model): the mean cross-entropy over the
    tokens i >= 1 whose mask is 1, each predicted from tokens < i, computed by `module` (a LogprobModule: the
    decoder, then the chunked LM head on the scored positions only, head.py). The batch is cut into micro-batches
    of at most `micro_tokens` tokens (laid out by the adapter: packed rows, or right padding), each backward'ed
    with the weight 1 / (the batch's scored tokens): the gradient is the whole batch's. Returns (loss, scored
    tokens, tokens)."""
    scored = [[i for i in range(1, len(e.ids)) if e.mask[i]] for e in examples]
    total = sum(len(s) for s in scored)
    ntok = sum(len(e.ids) for e in examples)
    if total == 0:
        return 0.0, 0, ntok
    order = sorted((j for j in range(len(examples)) if scored[j]), key=lambda j: -len(examples[j].ids))
    # With a shared prefix (policy.py) a micro-batch computes the examples' common prefix once: the budget
    # counts each example's tokens after it (and the prefix once).
    shared = 0
    if getattr(adapter, "share_prefix", False) and len(order) > 1:
        from .policy import common_prefix_len

        shared = min(common_prefix_len([torch.tensor(examples[j].ids) for j in order]), min(scored[j][0] - 1 for j in order))
    micro: List[List[int]] = []
    n = 0
    for j in order:
        cost = len(examples[j].ids) - shared
        if micro and n + cost <= micro_tokens:
            micro[-1].append(j)
            n += cost
        else:
            micro.append([j])
            n = shared + cost
    loss_sum = 0.0
    for mb in micro:
        seqs = [torch.tensor(examples[j].ids, dtype=torch.long) for j in mb]
        inputs, starts = adapter.inputs(seqs, device, need_from=[scored[j][0] - 1 for j in mb])
        sel = torch.cat([rows_at(starts[k], torch.tensor(scored[j], dtype=torch.long) - 1) for k, j in enumerate(mb)])
        tgt = torch.cat([seqs[k][torch.tensor(scored[j], dtype=torch.long)] for k, j in enumerate(mb)])
        with (autocast() if autocast is not None else contextlib.nullcontext()):
            lp, _, _ = module(inputs, sel.to(device), tgt.to(device), 1.0, 0, 1.0, None, False)
        loss = -lp.float().sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum, total, ntok


def detached_prompt_sft_step(model, adapter, examples: Sequence[Example], device,
                             autocast: Optional[Callable[[], Any]] = None) -> Tuple[float, int, int]:
    """adapter_sft_step without the gradient through the prompt (`prompt_grad: false`, PROTOCOL.md): each
    example's tokens before its first scored token's predecessor run through the decoder once under no_grad,
    their keys and values kept; the rest (the first scored token's predecessor onwards) runs with the gradient,
    attending to them. The loss is the same; the gradient leaves out only what flows through the prompt's keys
    and values (the weights still learn from every scored token, through every layer, at its own positions).
    Its cost: the prompt's forward pass alone (about a third of a forward and backward pass), which makes SFT on
    long prompts (tool lists) with short answers about three times faster on the CPU. One example at a time.
    Returns (loss, scored tokens, tokens)."""
    from .head import head_logprobs
    from .policy import hf_base

    scored = [[i for i in range(1, len(e.ids)) if e.mask[i]] for e in examples]
    total = sum(len(s) for s in scored)
    ntok = sum(len(e.ids) for e in examples)
    if total == 0:
        return 0.0, 0, ntok
    dec = hf_base(model).get_decoder()
    w, b = adapter.head(model)
    loss_sum = 0.0
    for j, e in enumerate(examples):
        if not scored[j]:
            continue
        ids = torch.tensor(e.ids, dtype=torch.long, device=device).unsqueeze(0)
        P = scored[j][0] - 1  # the prompt: tokens 0 .. P-1; the rest starts at the first scored token's predecessor
        kw: Dict[str, Any] = {}
        with (autocast() if autocast is not None else contextlib.nullcontext()):
            if P > 0:
                with torch.no_grad():
                    kw["past_key_values"] = dec(input_ids=ids[:, :P], use_cache=True).past_key_values
            pos = torch.arange(P, ids.shape[1], device=device).unsqueeze(0)
            out = dec(input_ids=ids[:, P:], position_ids=pos, use_cache=P > 0, **kw)
            h = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
            sel = torch.tensor(scored[j], dtype=torch.long, device=device)
            lp, _, _ = head_logprobs(h[0].index_select(0, sel - 1 - P), w, b, ids[0].index_select(0, sel), need_entropy=False)
        loss = -lp.float().sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum, total, ntok


def lr_at(step: int, total: int, lr: float, warmup: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to lr * min_lr_ratio at the last step."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, total - warmup - 1)
    progress = min(1.0, (step - warmup) / span)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _param_groups(model, weight_decay: float):
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _make_optimizer(model, lr, betas, weight_decay):
    groups = _param_groups(model, weight_decay)
    return adamw(groups, next(model.parameters()).device.type, lr=lr, betas=tuple(betas))


def _autocast(device: torch.device):
    """bf16 autocast on a CUDA device that supports it (torch >= 1.10); plain float32 elsewhere."""
    if device.type == "cuda" and hasattr(torch, "autocast"):
        try:
            if torch.cuda.is_bf16_supported():
                return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        except Exception:  # pragma: no cover
            pass
    return contextlib.nullcontext()


def train_sft(model, examples: Sequence[Example], epochs: int = 1, steps: Optional[int] = None,
              batch_size: int = 32, lr: float = 3e-3, warmup: Optional[float] = None, seed: int = 0,
              weight_decay: float = 0.01, betas: Tuple[float, float] = (0.9, 0.95), grad_clip: float = 1.0,
              min_lr_ratio: float = 0.1, log_every: int = 10,
              log: Optional[Callable[[str], None]] = None,
              step_fn: Optional[Callable[[List[Example]], Tuple[float, int, int]]] = None,
              on_epoch: Optional[Callable[[int], None]] = None,
              after_step: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
    """AdamW, warm-up + cosine, clipping; `steps` (if given) else `epochs` passes over the data.

    step_fn (a Hugging Face model, hf_backend.py): given a batch's examples, accumulates the gradient of the
    batch's mean loss into .grad and returns (loss, scored tokens, tokens); by default the embedded GPT's
    forward on a right-padded batch (collate, sft_loss) under bf16 autocast on CUDA.

    warmup: a step count (>= 1), or a fraction of the total steps (< 1); default 5% of the steps.
    on_epoch(e): called (in eval mode, then back to training) after each complete pass e = 1, 2, ... over the
    data that is not the last step; with min_lr_ratio 1 (no decay) and a warm-up in steps, the weights it sees
    after pass e are those of a run of e passes.
    after_step(): called after each optimizer step (a compute copy takes the new weights: compute_copy.py).
    Returns {steps, loss_first, loss_last, loss_last_avg, tokens, tokens_per_s, seconds}: `tokens` counts
    the real (non-pad) tokens fed to the model; loss_last_avg is the mean over the last 10% of the steps.
    """
    if log is None:
        def log(msg: str) -> None:
            print(f"[learner] {msg}", file=sys.stderr, flush=True)
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    rng = random.Random(seed)
    lengths = [len(e.ids) for e in examples]
    per_epoch = math.ceil(len(examples) / batch_size)
    total = int(steps) if steps is not None else epochs * per_epoch
    if warmup is None:
        warmup_steps = round(0.05 * total)
    elif warmup < 1:
        warmup_steps = round(warmup * total)
    else:
        warmup_steps = int(warmup)
    opt = _make_optimizer(model, lr, betas, weight_decay)
    model.train()
    losses: List[float] = []
    tokens = 0
    t0 = time.perf_counter()
    queue: List[List[int]] = []
    for step in range(total):
        if not queue:
            queue = make_batches(lengths, batch_size, rng)
        batch = queue.pop(0)
        cur_lr = lr_at(step, total, lr, warmup_steps, min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        if step_fn is not None:
            opt.zero_grad(set_to_none=True)
            loss_value, n, ntok = step_fn([examples[i] for i in batch])
        else:
            ids, attn, lmask = collate([examples[i] for i in batch], device)
            with _autocast(device):
                loss, n = sft_loss(model, ids, attn, lmask)
            opt.zero_grad(set_to_none=True)
            if n > 0:
                loss.backward()
            loss_value, ntok = float(loss.detach()), int(attn.sum())
        if n > 0:
            if grad_clip and grad_clip > 0:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
            opt.step()
            if after_step is not None:
                after_step()
        losses.append(loss_value)
        tokens += ntok
        if log_every and (step + 1) % log_every == 0 or step + 1 == total:
            dt = time.perf_counter() - t0
            log(f"sft step {step + 1}/{total} loss {losses[-1]:.4f} lr {cur_lr:.2e} {tokens / dt:.0f} tok/s")
        if on_epoch is not None and (step + 1) % per_epoch == 0 and step + 1 < total:
            model.eval()
            on_epoch((step + 1) // per_epoch)
            model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    model.eval()
    tail = losses[-max(1, len(losses) // 10):] if losses else []
    return {
        "steps": total,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "loss_last_avg": sum(tail) / len(tail) if tail else None,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "seconds": seconds,
    }
