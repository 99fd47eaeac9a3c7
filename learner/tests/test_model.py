import torch
import pytest

from mcp_gym_learner import model as model_mod
from mcp_gym_learner.model import GPT, positions_from_mask

from _helpers import tiny_model


def _left_padded(B=3, T=12, seed=0, V=264):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, : T - 2] = 0
    ids[mask == 0] = 263
    return ids, mask, positions_from_mask(mask)


def test_defaults_and_tied_head():
    m = GPT()
    a = m.architecture
    assert (a["vocab_size"], a["d_model"], a["n_layers"], a["n_heads"], a["d_ff"], a["max_seq_len"]) == \
        (264, 128, 4, 4, 512, 1024)
    names = list(m.state_dict())
    assert names.count("tok_emb.weight") == 1 and not any("head" in n for n in names)
    assert 0.9e6 < m.num_params() < 1.0e6
    # same seed, same weights
    assert all(torch.equal(x, y) for x, y in zip(GPT({"seed": 3}).state_dict().values(),
                                                   GPT({"seed": 3}).state_dict().values()))


def test_positions_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 2, 0, 0]]


@pytest.mark.parametrize("cuts", [[0, 12], [0, 5, 12], [0, 1, 2, 3, 9, 10, 11, 12], [0, 7, 8, 9, 10, 11, 12]])
def test_kv_cache_equals_full_forward(cuts):
    torch.manual_seed(0)
    m = tiny_model()
    ids, mask, pos = _left_padded()
    with torch.no_grad():
        full, fk, fv = m(ids, pos, mask)
        pk, pv = m.empty_cache(ids.shape[0])  # P = 0
        outs = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            lg, pk, pv = m(ids[:, a:b], pos[:, a:b], mask[:, :b], pk, pv)
            assert pk.shape == (2, 3, 4, b, 8) and lg.shape == (3, b - a, 264)
            outs.append(lg)
        inc = torch.cat(outs, 1)
    real = mask.bool()
    assert (full - inc).abs()[real].max() < 1e-5
    assert (fk - pk).abs().permute(1, 3, 0, 2, 4)[real].max() < 1e-5
    assert torch.isfinite(inc).all()


def test_left_padding_matches_unpadded_rows():
    m = tiny_model(1)
    ids, mask, pos = _left_padded(seed=2)
    with torch.no_grad():
        batched, _, _ = m(ids, pos, mask)
        for b in range(ids.shape[0]):
            keep = mask[b].bool()
            n = int(keep.sum())
            alone, _, _ = m(ids[b, keep][None], torch.arange(n)[None], torch.ones(1, n, dtype=torch.long))
            assert (alone[0] - batched[b, keep]).abs().max() < 1e-5


def test_all_pad_rows_are_finite():
    m = tiny_model()
    ids = torch.full((2, 5), 263)
    mask = torch.zeros(2, 5, dtype=torch.long)
    mask[1, 4] = 1
    pos = positions_from_mask(mask)
    with torch.no_grad():
        lg, k, v = m(ids, pos, mask)
        assert torch.isfinite(lg).all() and torch.isfinite(k).all()
        # a decode step after an all-pad prefill
        lg2, _, _ = m(ids[:, :1], pos[:, :1], torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1), k, v)
        assert torch.isfinite(lg2).all()


def test_export_path_and_training_path_agree(monkeypatch):
    """The exported graph's attention (MatMul/Where) equals the eager one; the training shortcut
    (causal only, right padding) equals the masked forward at real positions."""
    m = tiny_model(2)
    ids, mask, pos = _left_padded(seed=3)
    with torch.no_grad():
        eager, _, _ = m(ids, pos, mask)
        monkeypatch.setattr(model_mod, "_exporting", lambda: True)
        exported, _, _ = m(ids, pos, mask)
        monkeypatch.undo()
        assert (eager - exported).abs()[mask.bool()].max() < 1e-5
        # right padding
        rmask = torch.flip(mask, [1])
        rids = torch.where(rmask.bool(), torch.flip(ids, [1]), torch.full_like(ids, 263))
        rpos = positions_from_mask(rmask)
        masked, _, _ = m(rids, rpos, rmask)
        h, k, v = m.features(rids, rpos, rmask, causal_only=True, return_cache=False)
        assert k is None and v is None
        assert (m.logits(h) - masked).abs()[rmask.bool()].max() < 1e-5


def _reference_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """torch 2's F.scaled_dot_product_attention semantics, for torch 1.13 (is_causal: top-left aligned)."""
    import math as _m
    s = torch.matmul(q, k.transpose(-2, -1)) * (scale or 1.0 / _m.sqrt(q.shape[-1]))
    if is_causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.matmul(torch.softmax(s, dim=-1), v)


def test_torch2_attention_path(monkeypatch):
    """The branch torch >= 2 takes (F.scaled_dot_product_attention): on torch 1.13 against a reference
    implementation of its semantics, on torch 2 against the real kernel."""
    import torch.nn.functional as F
    if not model_mod._HAS_SDPA:
        monkeypatch.setattr(F, "scaled_dot_product_attention", _reference_sdpa, raising=False)
        monkeypatch.setattr(model_mod, "_HAS_SDPA", True)
    m = tiny_model(7)
    ids, mask, pos = _left_padded(seed=4)
    with torch.no_grad():
        full, _, _ = m(ids, pos, mask)
        pk, pv = m.empty_cache(ids.shape[0])
        outs = []
        for a, b in [(0, 5), (5, 6), (6, 12)]:
            lg, pk, pv = m(ids[:, a:b], pos[:, a:b], mask[:, :b], pk, pv)
            outs.append(lg)
        assert (full - torch.cat(outs, 1)).abs()[mask.bool()].max() < 1e-5
        assert torch.isfinite(full).all()
        monkeypatch.setattr(model_mod, "_HAS_SDPA", False)
        eager, _, _ = m(ids, pos, mask)
        monkeypatch.setattr(model_mod, "_HAS_SDPA", True)
        assert (full - eager).abs()[mask.bool()].max() < 1e-5
        rmask = torch.flip(mask, [1])
        rids = torch.where(rmask.bool(), torch.flip(ids, [1]), torch.full_like(ids, 263))
        h, _, _ = m.features(rids, positions_from_mask(rmask), rmask, causal_only=True, return_cache=False)
        masked, _, _ = m(rids, positions_from_mask(rmask), rmask)
        assert (m.logits(h) - masked).abs()[rmask.bool()].max() < 1e-5
