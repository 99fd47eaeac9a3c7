"""Logprobs under the sampling distribution (PROTOCOL.md, "Logprobs")."""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from .config import PAD_ID


def keep_mask(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The tokens kept by top-k then top-p, as a bool tensor shaped like `logits` ([..., V]).

    Computed in float64 from logits / temperature (what a JS sampler does with float32 logits):
    1. top_k > 0: keep the tokens whose scaled logit is >= the k-th largest (ties at the boundary kept).
    2. top_p < 1: p = softmax over the kept tokens; sort descending; a token at sorted rank r is kept
       when the sum of the probabilities ranked before it is < top_p (the smallest prefix whose
       probability reaches top_p); then every token whose p is >= the smallest kept p is kept (ties).
    At least one token (the largest logit) is always kept.
    """
    with torch.no_grad():
        x = logits.detach().to(torch.float64) / float(temperature)
        V = x.shape[-1]
        keep = torch.ones_like(x, dtype=torch.bool)
        if 0 < top_k < V:
            kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
            keep = x >= kth
        if top_p < 1.0:
            masked = x.masked_fill(~keep, float("-inf"))
            p = torch.softmax(masked, dim=-1)
            sp, _ = torch.sort(p, dim=-1, descending=True)
            before = torch.cumsum(sp, dim=-1) - sp
            n_keep = (before < top_p).sum(dim=-1, keepdim=True).clamp(min=1)
            threshold = torch.gather(sp, -1, n_keep - 1)
            keep = keep & (p >= threshold)
        return keep


def processed_logprobs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                       top_p: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / temperature) over the tokens kept by top-k then top-p; -inf elsewhere.

    Differentiable with respect to `logits` (the kept set is not). Same dtype as `logits`.
    """
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    scaled = logits / temperature
    if top_k > 0 or top_p < 1.0:
        keep = keep_mask(logits, temperature, top_k, top_p)
        scaled = scaled.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def token_logprobs(model, input_ids: torch.Tensor, lengths: torch.Tensor, temperature: float = 1.0,
                   top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Right-padded batch [B, T] -> [B, T - 1]: logprob of token i + 1 given tokens <= i (0 past each length).

    Differentiable (for a policy-gradient step); positions past a row's length hold 0.
    """
    B, T = input_ids.shape
    device = input_ids.device
    ar = torch.arange(T, device=device)
    attn = (ar.unsqueeze(0) < lengths.unsqueeze(1)).long()
    pos = ar.unsqueeze(0).expand(B, T)
    h, _, _ = model.features(input_ids, pos, attn, causal_only=True, return_cache=False)
    valid = attn[:, 1:] != 0
    out = torch.zeros(B, T - 1, dtype=torch.float32, device=device)
    if valid.any():
        logits = model.logits(h[:, :-1][valid]).float()
        lp = processed_logprobs(logits, temperature, top_k, top_p)
        tgt = input_ids[:, 1:][valid]
        out = out.masked_scatter(valid, lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1))
    return out


def sequence_logprobs(model, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 1.0,
                      top_k: int = 0, top_p: float = 1.0, max_batch_tokens: int = 32768) -> List[List[Optional[float]]]:
    """For each sequence, the logprob of token i given tokens < i for i in [start, len).

    The caller checks starts[b] in [1, len(sequences[b])]. Tokens outside the kept set (top-k/top-p)
    give -inf. Sequences are batched by similar length; the result is in the input order.
    """
    device = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    results: List[List[float]] = [[] for _ in sequences]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            i = 0
            while i < len(order):
                j = i + 1
                while j < len(order) and len(sequences[order[j]]) * (j - i + 1) <= max_batch_tokens:
                    j += 1
                idx = order[i:j]
                i = j
                T = len(sequences[idx[-1]])
                batch = torch.full((len(idx), T), PAD_ID, dtype=torch.long)
                for r, k in enumerate(idx):
                    batch[r, : len(sequences[k])] = torch.tensor(sequences[k], dtype=torch.long)
                lengths = torch.tensor([len(sequences[k]) for k in idx], dtype=torch.long)
                lp = token_logprobs(model, batch.to(device), lengths.to(device), temperature, top_k, top_p).cpu()
                for r, k in enumerate(idx):
                    results[k] = lp[r, starts[k] - 1: len(sequences[k]) - 1].tolist()
    finally:
        model.train(was_training)
    return results
