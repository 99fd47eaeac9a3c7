import math

import pytest
import torch

from mcp_gym_learner.logprobs import keep_mask, processed_logprobs, sequence_logprobs

from _helpers import tiny_model


def reference(row, temperature, top_k, top_p):
    """PROTOCOL.md's logprobs in plain float64 Python."""
    x = [float(v) / temperature for v in row]
    V = len(x)
    keep = [True] * V
    if 0 < top_k < V:
        kth = sorted(x, reverse=True)[top_k - 1]
        keep = [v >= kth for v in x]
    if top_p < 1:
        m = max(v for v, k in zip(x, keep) if k)
        z = sum(math.exp(v - m) for v, k in zip(x, keep) if k)
        p = [math.exp(v - m) / z if k else 0.0 for v, k in zip(x, keep)]
        order = sorted((i for i in range(V) if keep[i]), key=lambda i: -p[i])
        cum, last = 0.0, None
        for i in order:
            if cum < top_p or last is None:
                last = p[i]
                cum += p[i]
            else:
                break
        keep = [k and p[i] >= last for i, k in enumerate(keep)]
    m = max(v for v, k in zip(x, keep) if k)
    logz = m + math.log(sum(math.exp(v - m) for v, k in zip(x, keep) if k))
    return [v - logz if k else -math.inf for v, k in zip(x, keep)]


SETTINGS = [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 20, 1.0), (1.0, 1, 1.0), (0.8, 0, 0.9), (1.0, 40, 0.5),
            (0.5, 5, 0.95), (1.0, 0, 0.01), (2.0, 264, 0.999), (1.0, 1000, 1.0)]


@pytest.mark.parametrize("temperature,top_k,top_p", SETTINGS)
def test_processed_logprobs_matches_float64_reference(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(int(temperature * 100) + top_k)
    logits = torch.randn(6, 264, generator=g) * 3
    got = processed_logprobs(logits, temperature, top_k, top_p)
    assert got.dtype == torch.float32
    for r in range(logits.shape[0]):
        ref = torch.tensor(reference(logits[r].tolist(), temperature, top_k, top_p), dtype=torch.float64)
        kept = torch.isfinite(ref)
        assert torch.equal(torch.isfinite(got[r]), kept)
        assert (got[r].double()[kept] - ref[kept]).abs().max() < 1e-5
        assert abs(torch.logsumexp(got[r].double(), 0).item()) < 1e-5  # renormalised
        if top_k > 0 and top_k < 264:
            assert int(kept.sum()) <= top_k


def test_ties_and_at_least_one_token():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, -1.0]])
    assert keep_mask(logits, 1.0, 1, 1.0).tolist() == [[False, True, True, False, False]]  # ties kept
    assert keep_mask(logits, 1.0, 0, 1e-9).tolist() == [[False, True, True, False, False]]
    one = torch.tensor([[0.0, 5.0, 1.0]])
    assert keep_mask(one, 1.0, 0, 1e-9).tolist() == [[False, True, False]]
    lp = processed_logprobs(one, 1.0, 0, 1e-9)
    assert lp[0, 1].item() == 0.0 and lp[0, 0].item() == -math.inf


def test_processed_logprobs_is_differentiable():
    logits = torch.randn(3, 264, requires_grad=True)
    lp = processed_logprobs(logits, 0.9, 10, 0.8)
    tgt = logits.argmax(-1)
    lp.gather(-1, tgt[:, None]).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_sequence_logprobs_matches_forward():
    m = tiny_model(3)
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, 264, (n,), generator=g).tolist() for n in (7, 3, 12, 1, 9)]
    starts = [1, 2, 5, 1, 9]
    for t, k, p in [(1.0, 0, 1.0), (0.8, 30, 0.9)]:
        got = sequence_logprobs(m, seqs, starts, t, k, p, max_batch_tokens=20)  # several batches
        for s, st, row in zip(seqs, starts, got):
            assert len(row) == len(s) - st
            if not row:
                continue
            n = len(s)
            with torch.no_grad():
                lg, _, _ = m(torch.tensor([s]), torch.arange(n)[None], torch.ones(1, n, dtype=torch.long))
            lp = processed_logprobs(lg[0], t, k, p)
            want = [lp[i - 1, s[i]].item() for i in range(st, n)]
            for a, b in zip(row, want):
                assert (a == b == -math.inf) or abs(a - b) < 1e-5
