"""The embedded GPT's prefix tree (policy.py GPTAdapter, trie_layout.py): a micro-batch's common prefix computed
once, every other run of tokens that several sequences share computed once, the runs packed into rows. The
logprobs and the gradient of every parameter must be those of each sequence laid out on its own (right padding),
in float64 (exact to rounding): with rests of different lengths, with the prefix cut where the first scored token
needs it or too short to share, with groups sharing prompts and whole episodes, sequences that are prefixes of
others, subtrees split into units, and through a whole RL step of the trainer (the weights after it)."""

import copy

import pytest
import torch

from _helpers import tiny_model
from mcp_gym_learner import policy, trie_layout
from mcp_gym_learner.batch import parse_batch, rows_at
from mcp_gym_learner.policy import MIN_SHARED_PREFIX, GPTAdapter, LogprobModule
from mcp_gym_learner.rl import RLConfig, RLTrainer


def soft_model(seed=0):
    """_rl_helpers.soft_model with room for 128 positions: a float64 GPT whose distributions are not one-hot."""
    m = tiny_model(seed, max_seq_len=128).double()
    with torch.no_grad():
        m.tok_emb.weight.mul_(0.25)
    return m


def _seqs(P=40, rests=(7, 12, 3, 20, 9), seed=1):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, 256, (P,), generator=g)
    return [torch.cat([prefix, torch.randint(0, 256, (n,), generator=g)]) for n in rests]


def _logprobs_and_grads(model, seqs, need, share):
    model.zero_grad()
    adapter = GPTAdapter(model, share_prefix=share)
    inputs, starts = adapter.inputs(seqs, "cpu", need_from=need)
    sel = torch.cat([rows_at(st, torch.arange(n, len(s) - 1)) for s, n, st in zip(seqs, need, starts)])
    tgt = torch.cat([s[n + 1:] for s, n in zip(seqs, need)])
    lp, _, _ = LogprobModule(model, adapter)(inputs, sel, tgt, 1.0, 0, 1.0, None, False)
    (lp * torch.linspace(-1, 1, lp.shape[0], dtype=lp.dtype)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), grads, inputs


@pytest.mark.parametrize("need", [[39, 41, 41, 39, 45], [35, 50, 42, 39, 40]])
def test_logprobs_and_gradients_equal_each_sequence_alone(need):
    model = soft_model(0)
    model.train()
    seqs = _seqs()
    lp0, g0, plain = _logprobs_and_grads(model, seqs, need, share=False)
    lp1, g1, shared = _logprobs_and_grads(model, seqs, need, share=True)
    assert "prefix" not in plain and "allowed" not in plain
    assert shared["prefix"].shape[1] == min(40, min(need))  # cut where the first scored token's row is read
    assert shared["ids"].numel() < plain["ids"].numel()
    assert torch.allclose(lp0, lp1, rtol=0, atol=1e-12)
    assert g0.keys() == g1.keys()
    for name in g0:
        assert torch.allclose(g0[name], g1[name], rtol=1e-10, atol=1e-12), name


def test_a_short_prefix_is_not_computed_apart():
    model = soft_model(0)
    model.train()
    seqs = _seqs(P=MIN_SHARED_PREFIX - 1)
    need = [len(s) - 2 for s in seqs]
    inputs, starts = GPTAdapter(model).inputs(seqs, "cpu", need_from=need)
    assert "prefix" not in inputs and "allowed" in inputs  # the trie's root segment holds it
    lp0, g0, _ = _logprobs_and_grads(model, seqs, need, share=False)
    lp1, g1, _ = _logprobs_and_grads(model, seqs, need, share=True)
    assert torch.allclose(lp0, lp1, rtol=0, atol=1e-12)
    for name in g0:
        assert torch.allclose(g0[name], g1[name], rtol=1e-10, atol=1e-12), name
    one, st = GPTAdapter(model).inputs(seqs[:1], "cpu", need_from=[40])  # one sequence: nothing to share
    assert "allowed" not in one and st == [0]


def _group_seqs(seed=5):
    """Two groups after a common opening of 40: a prompt per group, members that repeat each other (one whole
    episode twice, one a prefix of another, one first turn shared by three), others that differ."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda n: torch.randint(0, 256, (n,), generator=g)  # noqa: E731
    opening = rnd(40)
    seqs, need = [], []
    for _ in range(2):
        prompt = torch.cat([opening, rnd(15)])
        turn = rnd(9)
        full = torch.cat([prompt, turn, rnd(12)])
        members = [full, full.clone(), full[:-5], torch.cat([prompt, turn, rnd(4)]), torch.cat([prompt, rnd(30)]),
                   torch.cat([prompt, turn])]
        seqs += members
        need += [len(prompt) - 1] * len(members)
    return seqs, need


@pytest.mark.parametrize("max_unit", [384, 40, 8])
def test_shared_runs_are_computed_once_with_the_same_gradients(monkeypatch, max_unit):
    """A small max_unit splits the subtrees into units with copies of the segments above them (a sequence that
    ends inside a split segment goes with its first child's unit)."""
    monkeypatch.setattr(policy, "TRIE_MAX_UNIT", max_unit)
    model = soft_model(0)
    model.train()
    seqs, need = _group_seqs()
    lp0, g0, plain = _logprobs_and_grads(model, seqs, need, share=False)
    lp1, g1, trie = _logprobs_and_grads(model, seqs, need, share=True)
    assert trie["prefix"].shape[1] == 40
    assert torch.allclose(lp0, lp1, rtol=0, atol=1e-12)
    for name in g0:
        assert torch.allclose(g0[name], g1[name], rtol=1e-10, atol=1e-12), name
    laid = int((trie["pos"] > 0).sum())  # real tokens in the rows (pads have position 0, real ones >= 40)
    distinct = len({tuple(s[:k].tolist()) for s in seqs for k in range(41, len(s) + 1)})
    if max_unit == 384:  # one copy of each distinct prefix
        assert laid == distinct
    else:  # copies of the segments above the split units
        assert laid > distinct
    assert laid < sum(len(s) - 40 for s in seqs)


def test_the_trie_of_a_micro_batch():
    seqs, _ = _group_seqs()
    lists = [s.tolist() for s in seqs]
    segs, paths = trie_layout.build_trie(lists, 40)
    for m, path in enumerate(paths):  # a path's segments spell the sequence after the prefix
        assert sum((lists[segs[i].seq][segs[i].start: segs[i].end] for i in path), []) == lists[m][40:]
        assert [segs[i].parent for i in path] == [-1] + path[:-1]
    assert len([s for s in segs if s.parent < 0]) == 2  # one subtree per group
    assert sum(s.end - s.start for s in segs) == len({tuple(x[:k]) for x in lists for k in range(41, len(x) + 1)})
    units = trie_layout.make_units(segs, 10_000)
    assert len(units) == 2 and all(not u.chain for u in units)
    small = trie_layout.make_units(segs, 20)
    assert len(small) > 2 and any(u.chain for u in small)
    ending = [m for u in small for m in u.extra] + [m for u in small for i in trie_layout.subtree(segs, u.root)
                                                    for m in segs[i].ending]
    assert sorted(ending) == list(range(len(seqs)))  # every sequence is read from exactly one unit


def _batch(P=48, B=8, seed=3):
    """A TrainBatch like the calculator's: a common opening, then per sequence a prompt rest (mask 0), policy
    tokens (mask 1), a tool result (mask 0) and more policy tokens; two groups."""
    g = torch.Generator().manual_seed(seed)
    opening = torch.randint(0, 256, (P,), generator=g).tolist()
    out = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
    for b in range(B):
        n = [int(x) for x in torch.randint(3, 12, (4,), generator=g)]
        ids = opening + torch.randint(0, 256, (sum(n),), generator=g).tolist()
        mask = [0] * (P + n[0]) + [1] * n[1] + [0] * n[2] + [1] * n[3]
        out["ids"].append(ids)
        out["mask"].append(mask)
        out["old_logprobs"].append([-1.0 if m else 0.0 for m in mask])
        out["advantages"].append(float(torch.randn((), generator=g)))
        out["group_ids"].append(f"task-{b % 2}")
    return out


def test_an_rl_step_with_the_shared_prefix_gives_the_same_weights():
    base = soft_model(0)
    wire = _batch()
    cfg = RLConfig(loss="grpo", beta=0.0, epochs=1, minibatch_size=4, micro_batch_size=3, lr=1e-3, max_grad_norm=1.0,
                   total_steps=1, warmup_steps=0)
    after = []
    for share in (False, True):
        m = copy.deepcopy(base)
        tr = RLTrainer(m, GPTAdapter(m, share_prefix=share))
        metrics = tr.train(parse_batch(wire, 264, 128), cfg)["metrics"]
        assert metrics["weights_changed"] is True
        after.append((metrics, {n: p.detach().clone() for n, p in m.named_parameters()}))
    (m0, w0), (m1, w1) = after
    assert abs(m0["loss"] - m1["loss"]) < 1e-12
    for name in w0:
        assert torch.allclose(w0[name], w1[name], rtol=0, atol=1e-12), name


def test_sequences_without_advantage_are_left_out_and_change_nothing():
    """A group whose episodes all got the same reward (advantages all 0) adds 0 to the loss: the learner spends
    no pass on it, and the step gives the same weights as one that runs every sequence (float64)."""
    base = soft_model(0)
    wire = _batch(B=12)
    for b in range(12):
        if b % 3 == 0:
            wire["advantages"][b] = 0.0  # four sequences without signal, spread over the minibatches
    cfg = RLConfig(loss="grpo", beta=0.0, epochs=2, minibatch_size=4, micro_batch_size=2, lr=1e-3, max_grad_norm=1.0,
                   total_steps=1, warmup_steps=0)
    after = []
    for skip in (False, True):
        m = copy.deepcopy(base)
        tr = RLTrainer(m, GPTAdapter(m))
        if not skip:
            tr._idle_sequences = lambda *a: set()
        metrics = tr.train(parse_batch(wire, 264, 128), cfg)["metrics"]
        assert metrics["idle_sequences"] == (4 if skip else 0)
        after.append((metrics, {n: p.detach().clone() for n, p in m.named_parameters()}))
    (m0, w0), (m1, w1) = after
    assert abs(m0["pg_loss"] - m1["pg_loss"]) < 1e-12 and abs(m0["grad_norm"] - m1["grad_norm"]) < 1e-12
    for name in w0:
        assert torch.allclose(w0[name], w1[name], rtol=0, atol=1e-12), name
    # with a KL term the idle sequences still pull towards the reference: none is left out
    kl = RLConfig(loss="grpo", beta=0.04, epochs=1, minibatch_size=4, micro_batch_size=2, lr=1e-3, total_steps=1)
    m = copy.deepcopy(base)
    assert RLTrainer(m, GPTAdapter(m)).train(parse_batch(wire, 264, 128), kl)["metrics"]["idle_sequences"] == 0
