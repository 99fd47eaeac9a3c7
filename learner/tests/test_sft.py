import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from mcp_gym_learner.config import ConfigError
from mcp_gym_learner.model import GPT
from mcp_gym_learner.sft import Example, collate, load_jsonl, lr_at, make_batches, sft_loss, train_sft

from _helpers import tiny_model


def copy_task(n, seed, length=4):
    """<|system|> s <|tool_call|> s <|end|>, loss on the copy and the end: 4 * ln 8 / 5 = 1.66 nats
    per token is the best possible without copying."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        s = [97 + r.randrange(8) for _ in range(length)]
        ids = [256] + s + [260] + s + [262]
        out.append(Example(ids, [0] * (length + 2) + [1] * (length + 1)))
    return out


def test_sft_learns_to_copy():
    torch.manual_seed(0)
    m = GPT({"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_seq_len": 32, "seed": 0})
    r = train_sft(m, copy_task(512, 0), steps=100, batch_size=32, lr=3e-3, seed=0, log_every=0)
    assert r["steps"] == 100 and r["loss_first"] > 5.0
    assert r["loss_last_avg"] < 1.0, r  # well under 1.66: it copies
    assert r["tokens"] == 100 * 32 * 11 and r["tokens_per_s"] > 0
    assert not m.training


def test_sft_is_deterministic_and_epochs_count_batches():
    ex = copy_task(70, 1)
    a, b = tiny_model(0), tiny_model(0)
    ra = train_sft(a, ex, epochs=2, batch_size=16, seed=7, log_every=0)
    rb = train_sft(b, ex, epochs=2, batch_size=16, seed=7, log_every=0)
    assert ra["steps"] == 2 * math.ceil(70 / 16)
    assert ra["loss_last"] == rb["loss_last"]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _batch():
    g = torch.Generator().manual_seed(0)
    ex = []
    for n in (9, 6, 12):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        mask = (torch.rand(n, generator=g) < 0.5).long().tolist()
        mask[-1] = 1
        ex.append(Example(ids, mask))
    return ex


def test_loss_matches_reference_and_ignores_mask0_labels_and_pads():
    m = tiny_model(4)
    ex = _batch()
    ids, attn, lmask = collate(ex, "cpu")
    assert ids[1, 6:].eq(263).all() and attn[1, 6:].eq(0).all() and lmask[1, 6:].eq(0).all()
    loss, n = sft_loss(m, ids, attn, lmask)
    # reference: each sequence alone, full forward, mean CE over labels i+1 with mask 1
    terms = []
    for e in ex:
        t = len(e.ids)
        lg, _, _ = m(torch.tensor([e.ids]), torch.arange(t)[None], torch.ones(1, t, dtype=torch.long))
        for i in range(t - 1):
            if e.mask[i + 1]:
                terms.append(F.cross_entropy(lg[0, i][None], torch.tensor([e.ids[i + 1]])))
    assert n == len(terms)
    assert abs(loss.item() - torch.stack(terms).mean().item()) < 1e-5

    def grads(labels=None, ids_=ids):
        m.zero_grad()
        loss, _ = sft_loss(m, ids_, attn, lmask, labels)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in m.parameters()]

    base_loss, base = grads()
    labels = ids[:, 1:].clone()
    scored = (lmask[:, 1:] == 1) & (attn[:, 1:] == 1)
    labels[~scored] = (labels[~scored] + 17) % 264  # change every label whose mask is 0 (and the pads')
    l2, g2 = grads(labels)
    assert l2 == base_loss and all(torch.equal(a, b) for a, b in zip(base, g2))
    ids2 = ids.clone()
    ids2[attn == 0] = 5  # what the pads hold does not matter either (right padding, causal)
    l3, g3 = grads(None, ids2)
    assert abs(l3 - base_loss) < 1e-6 and all(torch.allclose(a, b, atol=1e-7) for a, b in zip(base, g3))
    # and a scored label does matter
    labels[scored.nonzero()[0].tolist()[0], scored.nonzero()[0].tolist()[1]] += 1
    assert grads(labels)[0] != base_loss


def test_lr_schedule():
    lrs = [lr_at(s, 100, 1.0, 10, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def test_batches_have_similar_lengths_and_cover_the_data():
    r = random.Random(0)
    lengths = [r.randint(10, 400) for _ in range(300)]
    batches = make_batches(lengths, 32, random.Random(1))
    assert sorted(i for b in batches for i in b) == list(range(300))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 60  # random batches would spread ~350
    assert make_batches(lengths, 32, random.Random(1)) == batches


def test_load_jsonl_names_the_bad_field(tmp_path):
    p = tmp_path / "d.jsonl"
    good = {"ids": [1, 2, 3], "mask": [0, 1, 1]}
    cases = [
        ({"ids": [1, 999, 3], "mask": [0, 1, 1]}, "data: line 2: ids[1]: token id 999 is out of range [0, 264)"),
        ({"ids": [1, 2, 3], "mask": [0, 1]}, "data: line 2: mask: length 2 differs from ids length 3"),
        ({"ids": [1, 2, 3]}, "data: line 2: mask: missing or not a list"),
        ({"ids": [1, 2, 3], "mask": [0, 2, 1]}, "data: line 2: mask[1]: must be 0 or 1, got 2"),
        ({"ids": [1, True, 3], "mask": [0, 1, 1]}, "data: line 2: ids[1]: token id True is out of range"),
    ]
    for bad, msg in cases:
        p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(ConfigError) as e:
            load_jsonl(str(p), 264, 64)
        assert str(e.value).startswith(msg)
    p.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ConfigError, match="data: line 2: invalid JSON"):
        load_jsonl(str(p), 264, 64)
    p.write_text(json.dumps({"ids": list(range(70)), "mask": [1] * 70}) + "\n")
    with pytest.raises(ConfigError, match="more than max_seq_len 64"):
        load_jsonl(str(p), 264, 64)
    p.write_text(json.dumps(good) + "\n\n" + json.dumps(good) + "\n")
    assert len(load_jsonl(str(p), 264, 64)) == 2
