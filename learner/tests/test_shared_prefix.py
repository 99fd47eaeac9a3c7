"""The shared prefix of a micro-batch (policy.py HFAdapter.prefix_inputs): the sequences' common prefix computed
once, their rests in rows that attend to it, side by side (rest_inputs) or as a prefix tree (the default: runs of
tokens that several rests share computed once). The logprobs and the gradient of every parameter must be those of
each sequence computed on its own, in float64 (a float64 model, so the comparison is exact to rounding): with
one row and with several, with rests of different lengths and rests that share runs (a group's identical first
turns), with the prefix cut where the first scored token needs it, and in the SFT and RL steps that use it."""

import os

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")

from mcp_gym_learner.batch import micro_batches, parse_batch, rows_at  # noqa: E402
from mcp_gym_learner.hf_backend import check_prefix_sharing  # noqa: E402
from mcp_gym_learner.policy import HFAdapter, LogprobModule, common_prefix_len  # noqa: E402
from mcp_gym_learner.tiny_hf import make_config  # noqa: E402

VOCAB = 300


def _model(family="llama", seed=0):
    cfg = make_config(family, VOCAB, layers=2, intermediate=48, max_positions=512, bos=1, eos=[2], pad=0,
                      hidden=32, heads=4, kv_heads=2)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg).double()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def _seqs(P=40, rests=(7, 12, 3, 20, 9), seed=1):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(3, VOCAB, (P,), generator=g)
    return [torch.cat([prefix, torch.randint(3, VOCAB, (n,), generator=g)]) for n in rests]


def _logprobs_and_grads(model, adapter, seqs, need, share):
    adapter.share_prefix = share
    model.zero_grad()
    mod = LogprobModule(model, adapter)
    inputs, starts = adapter.inputs(seqs, "cpu", need_from=need)
    sel = torch.cat([rows_at(st, torch.arange(n, len(s) - 1)) for s, n, st in zip(seqs, need, starts)])
    tgt = torch.cat([s[n + 1:] for s, n in zip(seqs, need)])
    lp, _, _ = mod(inputs, sel, tgt, 1.0, 0, 1.0, None, False)
    (lp * torch.linspace(-1, 1, lp.shape[0], dtype=lp.dtype)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), grads, inputs


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("row_tokens", [512, 16])
def test_logprobs_and_gradients_equal_each_sequence_alone(family, row_tokens):
    model = _model(family)
    adapter = HFAdapter(model, pack=False)
    adapter.trie = False  # the rests side by side
    adapter.rest_row_tokens = row_tokens  # 16: the rests spread over several rows, each with the prefix
    seqs = _seqs()
    need = [42, 40, 41, 45, 43]  # the first hidden row read: after the common prefix of 40
    a_lp, a_g, inputs = _logprobs_and_grads(model, adapter, seqs, need, True)
    assert "prefix_ids" in inputs and inputs["prefix_ids"].shape[1] == 40
    assert inputs["input_ids"].shape[0] == (1 if row_tokens == 512 else 3)  # rows of max(16, the longest rest 20)
    b_lp, b_g, _ = _logprobs_and_grads(model, adapter, seqs, need, False)
    assert torch.allclose(a_lp, b_lp, atol=1e-10, rtol=0)
    assert a_g.keys() == b_g.keys()
    for n in a_g:
        assert torch.allclose(a_g[n], b_g[n], atol=1e-6, rtol=1e-6), n  # the chunked head computes in float32


def _group(P=40, seed=2):
    """A GRPO group's shape: one prompt; answers whose first turns repeat each other (a shared run of 9 tokens for
    three of them, then 4 more for two of those), one answer that is another's prefix, one that shares nothing."""
    g = torch.Generator().manual_seed(seed)
    r = lambda n: torch.randint(3, VOCAB, (n,), generator=g)  # noqa: E731
    prefix, a, b = r(P), r(9), r(4)
    return [torch.cat([prefix, a, b, r(6)]), torch.cat([prefix, a, b, r(3)]), torch.cat([prefix, a, r(5)]),
            torch.cat([prefix, r(7)]), torch.cat([prefix, a, b])]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("unit", [512, 12])
def test_the_prefix_tree_gives_each_sequence_alone(family, unit):
    """The rests as a prefix tree: every shared run computed once (unit 512: one row), or split into units of at
    most 12 tokens, each after its own copy of the runs above (several rows); logprobs and gradients equal those
    of the sequences side by side, which equal each sequence alone (the test above)."""
    model = _model(family)
    adapter = HFAdapter(model, pack=False)
    adapter.trie_max_unit = adapter.trie_min_row = unit
    seqs = _group()
    need = [41, 40, 45, 40, 48]
    a_lp, a_g, inputs = _logprobs_and_grads(model, adapter, seqs, need, True)
    assert inputs["prefix_ids"].shape[1] == 40
    rests = sum(len(s) - 40 for s in seqs)
    laid = int((inputs["input_ids"] != adapter.pad_id).sum())
    if unit == 512:
        assert inputs["input_ids"].shape[0] == 1 and laid == 9 + 4 + 6 + 3 + 5 + 7 < rests  # each run once (69 side by side)
    else:
        assert inputs["input_ids"].shape[0] > 1
    adapter.trie = False
    b_lp, b_g, _ = _logprobs_and_grads(model, adapter, seqs, need, True)
    assert torch.allclose(a_lp, b_lp, atol=1e-10, rtol=0)
    assert a_g.keys() == b_g.keys()
    for n in a_g:
        assert torch.allclose(a_g[n], b_g[n], atol=1e-6, rtol=1e-6), n
    c_lp, c_g, _ = _logprobs_and_grads(model, adapter, seqs, need, False)  # no sharing at all
    assert torch.allclose(a_lp, c_lp, atol=1e-10, rtol=0)
    for n in a_g:
        assert torch.allclose(a_g[n], c_g[n], atol=1e-6, rtol=1e-6), n


@pytest.mark.parametrize("trie", [True, False])
def test_the_prefix_stops_before_the_first_hidden_row_read(trie):
    """A scored token inside the common prefix (identical first tokens of a group's answers) cuts the shared part
    there: the hidden state it needs is a row of the rest."""
    model = _model()
    adapter = HFAdapter(model, pack=False)
    adapter.trie = trie
    seqs = _seqs()
    need = [38, 40, 41, 45, 43]
    a_lp, a_g, inputs = _logprobs_and_grads(model, adapter, seqs, need, True)
    assert inputs["prefix_ids"].shape[1] == 38
    b_lp, b_g, _ = _logprobs_and_grads(model, adapter, seqs, need, False)
    assert torch.allclose(a_lp, b_lp, atol=1e-10, rtol=0)
    for n in a_g:
        assert torch.allclose(a_g[n], b_g[n], atol=1e-6, rtol=1e-6), n  # the chunked head computes in float32


def test_a_short_prefix_is_not_shared_and_the_check_passes():
    model = _model()
    adapter = HFAdapter(model, pack=False)
    adapter.share_prefix = True
    seqs = _seqs(P=10)
    inputs, _ = adapter.inputs(seqs, "cpu", need_from=[12] * 5)
    assert "prefix_ids" not in inputs  # 10 < MIN_SHARED_PREFIX: not worth a pass of its own
    assert common_prefix_len(seqs) == 10
    assert check_prefix_sharing(model.float(), HFAdapter(model))


def test_micro_batches_count_tokens_beyond_the_shared_prefix():
    seqs = [[5] * 100 + [7] * n for n in (30, 20, 50, 10)]
    batch = parse_batch({"ids": seqs, "mask": [[0] * 100 + [1] * (len(s) - 100) for s in seqs],
                         "old_logprobs": [[0.0] * 100 + [-1.0] * (len(s) - 100) for s in seqs], "advantages": [1.0, -1.0, 0.5, 0.0],
                         "group_ids": ["a", "a", "b", "b"]}, 300, 512)
    assert micro_batches(range(4), batch, 16) == [[2, 0, 1, 3]]
    # longest first, at most 60 tokens beyond the 100 shared: 50 | 30 + 20 + 10
    assert micro_batches(range(4), batch, 16, max_tokens=60, shared=100) == [[2], [0, 1, 3]]
    assert micro_batches(range(4), batch, 2, max_tokens=1000, shared=100) == [[2, 0], [1, 3]]


def test_sft_step_with_a_shared_prefix_gives_the_same_gradient(tmp_path):
    from mcp_gym_learner.sft import Example, adapter_sft_step

    model = _model()
    adapter = HFAdapter(model, pack=False)
    seqs = _seqs()
    examples = [Example(ids=s.tolist(), mask=[0] * 41 + [1] * (len(s) - 41)) for s in seqs]
    mod = LogprobModule(model, adapter)
    grads = []
    for share in (True, False):
        adapter.share_prefix = share
        model.zero_grad()
        loss, n, _ = adapter_sft_step(mod, adapter, examples, "cpu", 16384)
        grads.append((loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])))
    assert abs(grads[0][0] - grads[1][0]) < 1e-6
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-6, rtol=1e-6)
    assert os.path.isdir(tmp_path)
