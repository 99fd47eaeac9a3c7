"""Hugging Face causal LMs in the learner (skipped where `transformers` is not importable, as with Debian's
python3-torch; run them with a Python that has torch 2.x and transformers)."""

import copy
import json
import os

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")

from mcp_gym_learner.batch import parse_batch  # noqa: E402
from mcp_gym_learner.hf_backend import is_hf_dir  # noqa: E402
from mcp_gym_learner.policy import HFAdapter  # noqa: E402
from mcp_gym_learner.rl import RLTrainer  # noqa: E402
from mcp_gym_learner.rl_config import parse_config  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402

from _rl_helpers import sampled_batch  # noqa: E402

VOCAB = 300


def _config():
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                    tie_word_embeddings=True)


def _model(seed=0):
    torch.manual_seed(seed)
    m = transformers.LlamaForCausalLM(_config())
    with torch.no_grad():  # larger than the default init, so that the logits are not all ~0
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    return m


class _Sampler(torch.nn.Module):
    """The GPT-style call signature sampled_batch uses, over an HF model."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, pos, attn):
        return self.m(input_ids=ids).logits, None, None


def _batch(model, B=6, seed=0, **kw):
    raw = sampled_batch(_Sampler(model), B=B, seed=seed, **kw)
    for s in raw["ids"]:  # prompt/env tokens are drawn below 256 < VOCAB: nothing to fix
        assert max(s) < VOCAB
    return raw


def _ref_loss(policy, reference, raw, beta, eps=0.2):
    """GRPO + k3 KL from full logits, written out (float64)."""
    B = len(raw["ids"])
    total = 0
    for b in range(B):
        ids = torch.tensor(raw["ids"][b]).unsqueeze(0)
        idx = [i for i in range(1, ids.shape[1]) if raw["mask"][b][i] == 1]
        rows, tgt = torch.tensor([i - 1 for i in idx]), ids[0, idx]
        lp = torch.log_softmax(policy(input_ids=ids).logits[0, :-1], -1)[rows, tgt]
        with torch.no_grad():
            ref = torch.log_softmax(reference(input_ids=ids).logits[0, :-1], -1)[rows, tgt]
        old = torch.tensor([raw["old_logprobs"][b][i] for i in idx], dtype=lp.dtype)
        A = float(raw["advantages"][b])
        r = torch.exp(lp - old)
        pg = -torch.min(r * A, torch.clamp(r, 1 - eps, 1 + eps) * A)
        kl = torch.exp(ref - lp) - (ref - lp) - 1
        total = total + (pg + beta * kl).mean()
    return total / B


def _assert_reference_gradient(policy, base, raw):
    """policy's accumulated gradient is the float64 reference's (_ref_loss, beta 0.1, base the reference)."""
    got = torch.cat([p.grad.reshape(-1) for p in policy.parameters()])
    mirror = copy.deepcopy(policy)
    for p in mirror.parameters():
        p.grad = None
    _ref_loss(mirror, base, raw, beta=0.1).backward()
    want = torch.cat([p.grad.reshape(-1) for p in mirror.parameters()])
    assert float(want.norm()) > 1e-4
    assert float((got - want).norm() / want.norm()) < 1e-6


def test_hf_gradient_matches_float64_reference():
    base = _model(0).double()
    raw = _batch(base, B=6, seed=1)
    policy = copy.deepcopy(base)
    tr = RLTrainer(policy, HFAdapter(policy))
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    cfg = parse_config({"loss": "grpo", "beta": 0.1, "entropy_coef": 0.0, "micro_batch_size": 4})
    tr.gradients(parse_batch(raw, VOCAB, 128), cfg)
    _assert_reference_gradient(policy, base, raw)


def _save(tmp_path, name="hf"):
    d = str(tmp_path / name)
    _model(0).save_pretrained(d)
    assert is_hf_dir(d)
    return d


def test_hf_through_the_protocol_checkpoint_and_export(tmp_path):
    d = _save(tmp_path)
    base = transformers.AutoModelForCausalLM.from_pretrained(d)
    batches = [_batch(base, B=5, seed=s) for s in range(3)]
    cfg = {"loss": "dapo", "beta": 0.04, "epochs": 2, "minibatch_size": 3, "micro_batch_size": 2, "lr": 1e-3}

    def learner():
        L = LearnerService()
        r = L.handle(json.dumps({"cmd": "load", "model_dir": d, "device": "cpu", "threads": 1}))  # auto-detected
        assert r["ok"], r
        assert r["result"]["hf"]["dtype"] == "auto" and L.backend.name == "hf"
        return L

    a = learner()
    for s in range(2):
        r = a.handle(json.dumps({"cmd": "train", "batch": batches[s], "config": cfg}))
        assert r["ok"], r
    assert a.handle(json.dumps({"cmd": "checkpoint_save", "dir": str(tmp_path / "ck")}))["ok"]
    r = a.handle(json.dumps({"cmd": "train", "batch": batches[2], "config": cfg}))
    assert r["ok"] and r["result"]["step"] == 3
    bad = copy.deepcopy(batches[0])
    bad["ids"][0][1] = VOCAB
    r = a.handle(json.dumps({"cmd": "train", "batch": bad, "config": cfg}))
    assert not r["ok"] and r["error"].startswith(f"batch.ids[0][1]: token id {VOCAB} is out of range [0, {VOCAB})")
    r = a.handle(json.dumps({"cmd": "sft", "data": "x.jsonl"}))  # sft is there for HF models: the file is not
    assert not r["ok"] and r["error"].startswith("data: cannot open x.jsonl")
    r = a.handle(json.dumps({"cmd": "export", "inline": True}))
    assert not r["ok"] and r["error"].startswith("inline: only for the project's GPT models")

    b = learner()
    assert b.handle(json.dumps({"cmd": "checkpoint_load", "dir": str(tmp_path / "ck")}))["result"]["step"] == 2
    r = b.handle(json.dumps({"cmd": "train", "batch": batches[2], "config": cfg}))
    assert r["ok"] and r["result"]["step"] == 3
    sa, sb = a.model.state_dict(), b.model.state_dict()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k

    out = str(tmp_path / "exported")
    r = b.handle(json.dumps({"cmd": "export", "model_dir": out}))
    assert r["ok"], r
    again = transformers.AutoModelForCausalLM.from_pretrained(out)
    for k, v in again.state_dict().items():
        assert torch.equal(v, sb[k]), k


def test_hf_padding_matches_single_sequences():
    m = _model(2)
    raw = _batch(m, B=5, seed=3)
    tr = RLTrainer(m, HFAdapter(m))
    cfg = parse_config({"micro_batch_size": 5})
    lps = tr.score(parse_batch(raw, VOCAB, 128), cfg)  # one right-padded micro-batch of 5 lengths
    for b, ids in enumerate(raw["ids"]):
        t = torch.tensor(ids).unsqueeze(0)
        with torch.no_grad():
            full = torch.log_softmax(m(input_ids=t).logits[0, :-1].float(), -1)
        idx = [i for i in range(1, len(ids)) if raw["mask"][b][i] == 1]
        want = full[torch.tensor(idx) - 1, torch.tensor([ids[i] for i in idx])]
        assert float((lps[b] - want).abs().max()) < 1e-5


def test_hf_lora(tmp_path):
    pytest.importorskip("peft")
    d = _save(tmp_path)
    L = LearnerService()
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    r = L.handle(json.dumps({"cmd": "load", "model_dir": d, "device": "cpu", "lora": lora,
                             "gradient_checkpointing": True}))
    assert r["ok"], r
    assert 0 < r["result"]["trainable_params"] < r["result"]["params"] // 4
    assert L.trainer.reference.mode == "swap"
    frozen = {k: v.clone() for k, v in L.model.state_dict().items() if "lora_" not in k}
    raw = _batch(L.model.get_base_model(), B=4, seed=5)
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": {"beta": 0.1, "epochs": 1, "lr": 1e-2}}))
    assert r["ok"], r
    assert r["result"]["metrics"]["kl"] == 0.0  # LoRA B = 0: the reference (the initial adapter) is the policy
    r = L.handle(json.dumps({"cmd": "train", "batch": raw, "config": {"beta": 0.1, "epochs": 1, "lr": 1e-2}}))
    assert r["result"]["metrics"]["kl"] > 0.0
    after = L.model.state_dict()
    assert all(torch.equal(frozen[k], after[k]) for k in frozen)
    # the reference keeps the initial adapter (a snapshot swapped in for its forward), the policy moved on
    current = [p for p in L.model.parameters() if p.requires_grad]
    assert any(not torch.equal(s, p.detach()) for s, p in zip(L.trainer.reference.snapshot, current))
    out = tmp_path / "exported"  # another directory: the base checkpoint (linked) and the adapter in adapter/
    r = L.handle(json.dumps({"cmd": "export", "model_dir": str(out)}))
    assert r["ok"] and r["result"]["lora"] is True and r["result"]["adapter_dir"] == str(out / "adapter")
    assert os.path.exists(out / "adapter" / "adapter_config.json")
    assert os.path.exists(out / "model.safetensors") and os.path.exists(out / "config.json")
    peft = pytest.importorskip("peft")
    again = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(str(out)),
                                           str(out / "adapter"))
    ids = torch.tensor(raw["ids"][0]).unsqueeze(0)
    with torch.no_grad():
        assert float((again(input_ids=ids).logits - L.model(input_ids=ids).logits).abs().max()) < 1e-5


def _grouped_raw(seed=3):
    """Two GRPO groups of three samples (each group one prompt), and one sample whose prompt no other shares."""
    g = torch.Generator().manual_seed(seed)
    ids, mask = [], []
    for P, n in [(30, 3), (22, 3), (17, 1)]:
        prompt = torch.randint(3, VOCAB, (P,), generator=g).tolist()
        for _ in range(n):
            k = int(torch.randint(4, 11, (1,), generator=g))
            ids.append(prompt + torch.randint(3, VOCAB, (k,), generator=g).tolist())
            mask.append([0] * P + [1] * k)
    old = [[0.0 if m == 0 else -float(torch.rand(1, generator=g)) * 3 for m in row] for row in mask]
    adv = [float(x) for x in torch.randn(len(ids), generator=g)]
    return {"ids": ids, "mask": mask, "old_logprobs": old, "advantages": adv,
            "group_ids": ["a", "a", "a", "b", "b", "b", "c"]}


def _shared_prefix_trainer(base, micro_tokens, trie):
    """A perturbed copy of `base` behind an HFAdapter with the shared prefix on (`trie`: rests as a prefix tree),
    its RLTrainer, and the list of (sequences, layout) of every micro-batch the adapter lays out."""
    policy = copy.deepcopy(base)
    adapter = HFAdapter(policy)
    adapter.share_prefix, adapter.micro_tokens, adapter.trie = True, micro_tokens, trie
    tr = RLTrainer(policy, adapter)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    seen = []
    real_inputs = adapter.inputs

    def inputs(seqs, device, need_from=None):
        seen.append((seqs, real_inputs(seqs, device, need_from)))
        return seen[-1][1]

    adapter.inputs = inputs
    return policy, tr, seen


def test_hf_groups_share_their_prompt_and_the_gradient_stays_exact():
    """A micro-batch per prompt (batch.micro_batches_by_prompt, when the adapter computes a common prefix once):
    each group's prompt runs once, and the gradient is the float64 reference's."""
    from mcp_gym_learner.batch import micro_batches_by_prompt

    base = _model(0).double()
    raw = _grouped_raw()
    batch = parse_batch(raw, VOCAB, 128)
    assert sorted(map(sorted, micro_batches_by_prompt(range(7), batch, 8, 4096))) == [[0, 1, 2], [3, 4, 5], [6]]
    # at most two per micro-batch: a group is cut, never mixed with another
    for mb in micro_batches_by_prompt(range(7), batch, 2, 4096):
        assert len({raw["group_ids"][i] for i in mb}) == 1
    policy, tr, seen = _shared_prefix_trainer(base, 4096, trie=False)
    cfg = parse_config({"loss": "grpo", "beta": 0.1, "entropy_coef": 0.0, "micro_batch_size": 8})
    tr.gradients(batch, cfg)
    assert 3 in [len(seqs) for seqs, _ in seen]  # a group's three samples in one micro-batch (the prefix layout)
    _assert_reference_gradient(policy, base, raw)


def _system_raw(seed=4):
    """Three GRPO groups whose prompts open alike (a system turn of 40 tokens, then each group's own question),
    and whose samples repeat each other's first tokens (a first turn several of them wrote alike)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda n: torch.randint(3, VOCAB, (n,), generator=g).tolist()  # noqa: E731
    system = r(40)
    ids, mask, gids = [], [], []
    for name, q in (("a", 6), ("b", 9), ("c", 4)):
        prompt = system + r(q)
        first = r(5)
        for j in range(4):
            rest = (first if j < 3 else r(5)) + r(3 + j)
            ids.append(prompt + rest)
            mask.append([0] * len(prompt) + [1] * len(rest))
            gids.append(name)
    old = [[0.0 if m == 0 else -float(torch.rand(1, generator=g)) * 3 for m in row] for row in mask]
    adv = [float(x) for x in torch.randn(len(ids), generator=g)]
    return {"ids": ids, "mask": mask, "old_logprobs": old, "advantages": adv, "group_ids": gids}


def test_hf_prefix_tree_packs_groups_and_the_gradient_stays_exact():
    """Rests as a prefix tree (HFAdapter.trie, the default): whole groups packed by the tree's size
    (batch.micro_batches_by_trie), so the system turn all prompts open with runs once per micro-batch and a run
    that several samples wrote alike once; the gradient is the float64 reference's, in one micro-batch and cut
    into several."""
    from mcp_gym_learner.batch import micro_batches_by_trie

    base = _model(0).double()
    raw = _system_raw()
    batch = parse_batch(raw, VOCAB, 128)
    every = list(range(12))
    assert [sorted(mb) for mb in micro_batches_by_trie(every, batch, 64, 4096, 40)] == [every]
    # a group's tree beyond the system turn: its question, the shared first turn once, the rests
    per_group = [6 + 5 + 3 + 4 + 5 + (5 + 6), 9 + 5 + 3 + 4 + 5 + (5 + 6), 4 + 5 + 3 + 4 + 5 + (5 + 6)]
    cut = micro_batches_by_trie(every, batch, 64, per_group[0] + per_group[1], 40)
    assert [sorted(mb) for mb in cut] == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11]]
    assert [sorted(mb) for mb in micro_batches_by_trie(every, batch, 5, 4096, 40)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # a group larger than the budget on its own is cut as micro_batches_by_prompt cuts it
    assert all(len(mb) <= 2 for mb in micro_batches_by_trie(every, batch, 64, 12, 40))
    for micro, budget in ((64, 4096), (64, per_group[0] + per_group[1]), (2, 12)):
        policy, tr, seen = _shared_prefix_trainer(base, budget, trie=True)
        cfg = parse_config({"loss": "grpo", "beta": 0.1, "entropy_coef": 0.0, "micro_batch_size": micro})
        tr.gradients(batch, cfg)
        if budget == 4096:
            inputs = seen[0][1][0]
            assert inputs["prefix_ids"].shape[1] == 40  # the system turn, once
            laid = int((inputs["input_ids"] != tr.adapter.pad_id).sum())
            assert laid < sum(len(x) - 40 for x in raw["ids"])  # the shared first turns once
        _assert_reference_gradient(policy, base, raw)
