"""ONNX export of Hugging Face causal LMs (hf_export.py, hf_graph.py): the slot-cache graph in onnxruntime-node
(the rollout side's runtime, through ort_run.mjs) against transformers' float32 forward, for a prefill (left
padded) and decode steps through the cache, with and without a shared prefix read by every row; LoRA exported
merged; weight updates in place."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")

from mcp_gym_learner.hf_export import (HfSlotDecoder, export_hf_onnx, merged_state_dict,  # noqa: E402
                                       read_onnx_config, update_hf_onnx_weights)
from mcp_gym_learner.hf_graph import no_prefix  # noqa: E402
from mcp_gym_learner.model import positions_from_mask  # noqa: E402
from mcp_gym_learner.tiny_hf import make_config  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_NODE = os.path.join(REPO, "node_modules", "onnxruntime-node")
ORT_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_run.mjs")
needs_node = pytest.mark.skipif(not (shutil.which("node") and os.path.isdir(ORT_NODE)), reason="node + onnxruntime-node")

VOCAB = 384
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

# family, make_config kwargs, extra config attributes
CASES = {
    "qwen3": ("qwen3", dict(hidden=64, heads=4, kv_heads=2, head_dim=32), {}),  # head_dim != hidden / heads
    "qwen2": ("qwen2", dict(hidden=64, heads=4, kv_heads=2), {}),  # q/k/v biases (random below)
    "llama": ("llama", dict(hidden=64, heads=4, kv_heads=1, tie=False), {}),  # untied head, 4 query heads per kv head
    "llama3-rope": ("llama", dict(hidden=64, heads=4, kv_heads=2), {"rope_parameters": LLAMA3_ROPE}),
}


def _model(case: str, seed: int = 0):
    family, shape, extra = CASES[case]
    cfg = make_config(family, VOCAB, layers=2, intermediate=96, max_positions=256, bos=1, eos=[2, 3], pad=0, **shape)
    for k, v in extra.items():
        setattr(cfg, k, v)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # every weight random (norms and biases too), so nothing is trivial
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return m.eval()


def _inputs(seed: int = 1, B: int = 3, T: int = 6, steps: int = 4):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (B, T + steps), generator=g)
    mask = torch.ones(B, T + steps, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :5] = 0
    ids[mask == 0] = 0
    return ids, mask, positions_from_mask(mask)


def _reference(model, ids, mask, pos):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()


def _ort(model_dir, tmp_path, ids, mask, pos, T, prefix=None):
    """The exported graph in onnxruntime-node: logits at positions T-1 (prefill), T, T+1, ... (decode steps);
    with `prefix` (token ids), every row reads it first (positions 0 .. P-1, computed once)."""
    cfg = read_onnx_config(model_dir)
    a = cfg["architecture"]
    B, steps = ids.shape[0], ids.shape[1] - T
    L, Hkv, Dh, V = a["n_layers"], a["n_kv_heads"], a["head_dim"], a["vocab_size"]
    case = {"model": os.path.join(model_dir, "onnx", cfg["graph"]), "B": B, "T": T, "L": L, "H": Hkv, "Dh": Dh,
            "input_ids": ids[:, :T].flatten().tolist(), "position_ids": pos[:, :T].flatten().tolist(),
            "attention_mask": mask[:, :T].flatten().tolist(),
            "steps": [{"input_ids": ids[:, T + s].tolist(), "position_ids": pos[:, T + s].tolist()}
                      for s in range(steps)]}
    if prefix is not None:
        case["prefix_ids"] = prefix.tolist()
    cp, op = tmp_path / "case.json", tmp_path / "out.json"
    cp.write_text(json.dumps(case))
    subprocess.run(["node", ORT_RUN, str(cp), str(op)], check=True, timeout=120, capture_output=True, cwd=REPO)
    out = json.loads(op.read_text())
    assert out["prefix"] == (0 if prefix is None else len(prefix))
    assert out["inputs"] == ["input_ids", "position_ids", "attention_mask", "prefix_mask"] + \
        [f"past_key_{i}" for i in range(L)] + [f"past_value_{i}" for i in range(L)] + \
        [f"prefix_key_{i}" for i in range(L)] + [f"prefix_value_{i}" for i in range(L)]
    assert out["outputs"] == ["logits", "new_keys", "new_values", "probs"]
    assert out["probs_error"] < 1e-6  # probs is softmax(logits)
    assert out["new_dims"][0] == [L, B, Hkv, T, Dh] and out["new_dims"][-1] == [L, B, Hkv, 1, Dh]
    pre = torch.tensor(out["prefill"]).reshape(B, 1, V)
    dec = torch.stack([torch.tensor(s).reshape(B, V) for s in out["steps"]], 1)
    return torch.cat([pre, dec], 1)


def _check(model, model_dir, tmp_path, T=6, steps=4, seed=1):
    ids, mask, pos = _inputs(seed, T=T, steps=steps)
    want = _reference(model, ids, mask, pos)[:, T - 1:T + steps]
    got = _ort(model_dir, tmp_path, ids, mask, pos, T)
    assert torch.isfinite(got).all()
    diff = float((got - want).abs().max())
    print(f"max |onnx - transformers| = {diff:.3g} (logits up to {float(want.abs().max()):.3g})")
    assert diff < 1e-4
    return diff


@pytest.mark.parametrize("case", list(CASES))
def test_slot_decoder_in_torch_matches_transformers(case):
    """The graph's torch module itself: a prefill with an empty cache, then one token at a time."""
    m = _model(case)
    dec = HfSlotDecoder(m)
    if case == "llama3-rope":  # the llama3 scaling really changes the frequencies the graph uses
        Dh = dec.Dh
        default = 1.0 / (LLAMA3_ROPE["rope_theta"] ** (torch.arange(0, Dh, 2, dtype=torch.float) / Dh))
        assert not torch.allclose(dec.inv_freq_values, default)
    ids = torch.randint(4, VOCAB, (2, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 8, dtype=torch.long)
    pos = positions_from_mask(mask)
    want = _reference(m, ids, mask, pos)
    L, Hkv, Dh = dec.L, dec.Hkv, dec.Dh
    pm, pk, pv = no_prefix(L, Hkv, Dh, 2)
    with torch.no_grad():
        lg, nk, nv, _ = dec(ids[:, :5], pos[:, :5], mask[:, :5].float(), pm,
                         *[torch.zeros(2, Hkv, Dh, 0)] * L, *[torch.zeros(2, Hkv, 0, Dh)] * L, *pk, *pv)
        assert (lg - want[:, 4]).abs().max() < 1e-5
        K = [nk[i].transpose(-2, -1) for i in range(L)]
        Vs = [nv[i] for i in range(L)]
        for t in range(5, 8):
            lg, nk, nv, _ = dec(ids[:, t:t + 1], pos[:, t:t + 1], torch.ones(2, t + 1), pm, *K, *Vs, *pk, *pv)
            assert (lg - want[:, t]).abs().max() < 1e-5
            K = [torch.cat([K[i], nk[i].transpose(-2, -1)], -1) for i in range(L)]
            Vs = [torch.cat([Vs[i], nv[i]], -2) for i in range(L)]


@pytest.mark.parametrize("case", ["qwen3", "llama"])
def test_rows_read_a_shared_prefix_as_their_own_tokens(case):
    """Three rows share a 6-token prefix computed once (one copy, batch 1): row 0 reads all of it, row 1 the
    first 4 (its slots hold tokens 4 and 5 itself), row 2 none (all in its slots). Each row's logits, at its
    prefill and through decode steps, equal transformers' forward over its whole sequence."""
    m = _model(case)
    dec = HfSlotDecoder(m)
    L, Hkv, Dh = dec.L, dec.Hkv, dec.Dh
    g = torch.Generator().manual_seed(5)
    prefix = torch.randint(4, VOCAB, (6,), generator=g)
    seqs = [torch.cat([prefix, torch.randint(4, VOCAB, (5,), generator=g)]) for _ in range(3)]
    reads = [6, 4, 0]
    none_b = lambda b: (*[torch.zeros(b, Hkv, Dh, 0)] * L, *[torch.zeros(b, Hkv, 0, Dh)] * L)  # noqa: E731
    pm0, pk0, pv0 = no_prefix(L, Hkv, Dh, 1)
    with torch.no_grad():
        _, pk, pv, _ = dec(prefix.unsqueeze(0), torch.arange(6).unsqueeze(0), torch.ones(1, 6), pm0, *none_b(1), *pk0, *pv0)
        pre = (*[pk[i].transpose(-2, -1) for i in range(L)], *[pv[i] for i in range(L)])  # [1, Hkv, Dh, 6], ...
        for s, r in zip(seqs, reads):
            want = _reference(m, s.unsqueeze(0), torch.ones(1, 11, dtype=torch.long), torch.arange(11).unsqueeze(0))[0]
            pm = (torch.arange(6) < r).float().unsqueeze(0)
            T0 = 8 - r  # the row's own prompt tokens: r .. 7
            lg, nk, nv, _ = dec(s[r:8].unsqueeze(0), torch.arange(r, 8).unsqueeze(0), torch.ones(1, T0), pm,
                                *none_b(1), *pre)
            assert (lg[0] - want[7]).abs().max() < 1e-5
            K = [nk[i].transpose(-2, -1) for i in range(L)]
            Vs = [nv[i] for i in range(L)]
            for t in range(8, 11):
                lg, nk, nv, _ = dec(s[t:t + 1].unsqueeze(0), torch.tensor([[t]]), torch.ones(1, t - r + 1), pm, *K, *Vs, *pre)
                assert (lg[0] - want[t]).abs().max() < 1e-5
                K = [torch.cat([K[i], nk[i].transpose(-2, -1)], -1) for i in range(L)]
                Vs = [torch.cat([Vs[i], nv[i]], -2) for i in range(L)]


@needs_node
@pytest.mark.parametrize("case", ["qwen2", "llama"])
def test_onnx_rows_read_a_shared_prefix(case, tmp_path):
    """The exported graph in onnxruntime-node with a prefix computed once and read by every row (its keys and values
    a single [1, ...] copy that the graph broadcasts): the same logits as transformers over the whole sequences."""
    m = _model(case)
    d = str(tmp_path / "m")
    os.makedirs(d)
    export_hf_onnx(m, d)
    assert read_onnx_config(d)["prefix"] is True
    g = torch.Generator().manual_seed(3)
    P, T, steps = 7, 4, 3
    prefix = torch.randint(4, VOCAB, (P,), generator=g)
    rest = torch.randint(4, VOCAB, (3, T + steps), generator=g)
    full = torch.cat([prefix.unsqueeze(0).expand(3, P), rest], 1)
    want = _reference(m, full, torch.ones_like(full), torch.arange(P + T + steps).unsqueeze(0).expand(3, -1))
    pos = torch.arange(P, P + T + steps).unsqueeze(0).expand(3, -1)
    got = _ort(d, tmp_path, rest, torch.ones_like(rest), pos, T, prefix=prefix)
    diff = float((got - want[:, P + T - 1:]).abs().max())
    print(f"max |onnx with a shared prefix - transformers| = {diff:.3g}")
    assert diff < 1e-4


@needs_node
@pytest.mark.parametrize("case", list(CASES))
def test_onnx_matches_transformers_prefill_and_decode(case, tmp_path):
    m = _model(case)
    d = str(tmp_path / "m")
    os.makedirs(d)
    r = export_hf_onnx(m, d)
    assert r["full"] and r["version"] == 1
    cfg = read_onnx_config(d)
    family, shape, _ = CASES[case]
    assert cfg["format"] == "mcp-gym-onnx/1" and cfg["family"] == family
    assert cfg["architecture"] == {"n_layers": 2, "n_heads": 4, "n_kv_heads": shape["kv_heads"],
                                   "head_dim": shape.get("head_dim", 16), "vocab_size": VOCAB, "max_seq_len": 256}
    assert cfg["eos_token_ids"] == [2, 3]
    assert sorted(os.listdir(os.path.join(d, "onnx"))) == ["config.json", "model.onnx", "model.onnx.data"]
    state = merged_state_dict(m)
    assert sorted(e["param"] for e in cfg["manifest"]) == sorted(state)
    assert ("lm_head.weight" in state) == (not shape.get("tie", True))
    if family == "qwen2":
        assert "model.layers.0.self_attn.q_proj.bias" in state
    _check(m, d, tmp_path)


@needs_node
def test_lora_exports_merged_weights_without_touching_the_model(tmp_path):
    peft = pytest.importorskip("peft")
    m = _model("qwen2", seed=3)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    pm = peft.get_peft_model(m, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # lora_B starts at zero: make the adapters do something
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    pm.eval()
    before = {k: v.clone() for k, v in pm.state_dict().items()}
    d = str(tmp_path / "m")
    os.makedirs(d)
    export_hf_onnx(pm, d)
    after = pm.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    state = merged_state_dict(pm)
    assert not any("lora" in k or "base_layer" in k for k in state)
    base_q = pm.get_base_model().model.layers[0].self_attn.q_proj
    assert not torch.equal(state["model.layers.0.self_attn.q_proj.weight"], base_q.base_layer.weight)
    diff = _check(pm, d, tmp_path)
    # the un-merged base model gives other logits: the adapters are really in the export
    ids, mask, pos = _inputs(1)
    with pm.disable_adapter():
        base_logits = _reference(pm, ids, mask, pos)
    assert float((base_logits - _reference(pm, ids, mask, pos)).abs().max()) > 100 * max(diff, 1e-6)


@needs_node
def test_update_weights_in_place_and_fallback(tmp_path):
    m = _model("qwen3", seed=4)
    d = str(tmp_path / "m")
    os.makedirs(d)
    export_hf_onnx(m, d)
    graph_path = os.path.join(d, "onnx", "model.onnx")
    graph = open(graph_path, "rb").read()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    r = update_hf_onnx_weights(m, d)
    assert not r["full"] and r["version"] == 2 and read_onnx_config(d)["version"] == 2
    assert open(graph_path, "rb").read() == graph  # same graph, new data
    _check(m, d, tmp_path)
    # a model the manifest does not fit (untied head): a full export, version still increasing
    m2 = _model("qwen3", seed=5)
    m2.config.tie_word_embeddings = False
    m2.lm_head.weight = torch.nn.Parameter(m2.lm_head.weight.detach().clone() + 0.1)
    r = update_hf_onnx_weights(m2, d)
    assert r["full"] and r["version"] == 3
    assert "lm_head.weight" in {e["param"] for e in read_onnx_config(d)["manifest"]}
    _check(m2, d, tmp_path)


def test_cli_exports_a_checkpoint_dir(tmp_path):
    m = _model("llama")
    m.generation_config = transformers.GenerationConfig(eos_token_id=[3, 2, 3])
    d = str(tmp_path / "ckpt")
    m.save_pretrained(d)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "learner"))
    p = subprocess.run([sys.executable, "-m", "mcp_gym_learner.hf_export", "--model-dir", d], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["family"] == "llama" and out["version"] == 1 and out["full"]
    assert out["eos_token_ids"] == [3, 2]
    cfg = read_onnx_config(d)
    assert cfg["version"] == 1 and cfg["graph"] == "model.onnx" and cfg["data"] == "model.onnx.data"
    size = os.path.getsize(os.path.join(d, "onnx", "model.onnx.data"))
    assert size == max(e["offset"] + e["length"] for e in cfg["manifest"])
    p = subprocess.run([sys.executable, "-m", "mcp_gym_learner.hf_export", "--model-dir", d, "--update"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["version"] == 2 and not out["full"] and out["adapter"] is None
    # a LoRA adapter in <dir>/adapter/ is merged into the export
    peft = pytest.importorskip("peft")
    pm = peft.get_peft_model(m, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, q in pm.named_parameters():
            if "lora_B" in name:
                q.normal_(0, 0.3)
    pm.eval()
    pm.save_pretrained(os.path.join(d, "adapter"))
    p = subprocess.run([sys.executable, "-m", "mcp_gym_learner.hf_export", "--model-dir", d, "--update"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["version"] == 3 and not out["full"] and out["adapter"] == os.path.join(d, "adapter")
    if shutil.which("node") and os.path.isdir(ORT_NODE):
        _check(pm, d, tmp_path)


def test_unsupported_models_are_refused():
    cfg = make_config("qwen2", VOCAB, hidden=32, heads=2, kv_heads=2, max_positions=256)
    cfg.rope_parameters = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    m = transformers.AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(NotImplementedError, match="rope type 'dynamic'"):
        HfSlotDecoder(m)
