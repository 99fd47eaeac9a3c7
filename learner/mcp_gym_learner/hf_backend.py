"""A Hugging Face causal LM behind the commands (PROTOCOL.md, "Hugging Face models"): loaded with
transformers (`AutoModelForCausalLM.from_pretrained`, local files only), optionally wrapped with a
LoRA adapter by peft (a new one, or the one in `<model_dir>/adapter/`, trained on), trained by the same
RL trainer (policy.HFAdapter) and by `sft`, scored by `logprobs`, written back as a standard checkpoint
(full fine-tuning) or as the PEFT adapter in `<model_dir>/adapter/` (LoRA).

Everything goes through the decoder and the chunked LM head (head.py): float32 logits exist for one
chunk of scored tokens at a time, never as [batch, length, vocab].

This module is the Backend the commands see (load, logprobs, SFT; `write` is hf_write.py's HFWriter, mixed in).
Its pieces: hf_load.py (transformers / peft, `load_hf`), hf_lora.py (the LoRA options), hf_layout_checks.py (the
packing and shared-prefix checks of `load`), hf_write.py (export / save); their names are importable from here.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn

from .backend import Backend, check_sequences
from .batch import rows_at
from .config import ConfigError
from .hf_layout_checks import check_packing, check_prefix_sharing
from .hf_load import (disable_dropout, is_hf_dir, load_hf, peft_available, read_hf_config,  # noqa: F401
                      transformers_available)
from .hf_lora import ADAPTER_DIR, LORA_DEFAULTS, check_lora, lora_target_names  # noqa: F401
from .hf_write import TOKENIZER_FILES, WEIGHT_FILE_RE, HFWriter  # noqa: F401
from .policy import HFAdapter, LogprobModule, hf_base
from .protocol import RequestError

# Tokens per micro-batch with a gradient (`sft`, `train`; gradient accumulation within one step), a shared prefix
# counted once: activations of a 135M model take ~3 MB per token on the CPU, so 4096 tokens stay near 12 GB.
# `logprobs` (no gradient) takes four times as many.
MICRO_TOKENS = int(os.environ.get("MCP_GYM_HF_MICRO_TOKENS", "4096"))
SFT_LR_DEFAULTS = {"full": 1e-5, "lora": 1e-4}  # `sft` without lr on a Hugging Face model


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


class HFBackend(HFWriter, Backend):
    name = "hf"
    supports = frozenset({"sft", "logprobs"})

    def refusal(self, what: str) -> str:
        if what == "inline":
            return "inline: only for the project's GPT models (a Hugging Face model is not sampled through ONNX)"
        return f"model: {what} is not supported for a Hugging Face model"

    @classmethod
    def load(cls, model_dir: str, a: Dict[str, Any], device: str, torch_device: str) -> "HFBackend":
        if not transformers_available():
            raise RequestError("hf: transformers is not importable by this Python")
        dtype = a.get("dtype", "auto")
        gc = bool(a.get("gradient_checkpointing", False))
        lora = a.get("lora")
        if dtype == "bfloat16" and device != "cuda":
            raise RequestError("dtype: bfloat16 parameters are for CUDA; on the CPU the learner trains in float32 "
                               "(dtype auto or float32)")
        compute = a.get("compute_dtype")
        if compute is not None:
            from .compute_copy import DTYPES

            if compute not in DTYPES:
                raise RequestError(f"compute_dtype: one of {sorted(DTYPES)}, got {compute!r}")
            if lora is not None:
                raise RequestError("compute_dtype: a compute copy is for full fine-tuning (a LoRA adapter trains "
                                   "few weights; leave it out)")
            if dtype == "bfloat16":
                raise RequestError("compute_dtype: the parameters are already bfloat16 (dtype); the compute copy "
                                   "keeps float32 master weights")
            if device == "cuda":
                raise RequestError("compute_dtype: for the CPU; on CUDA the learner already computes in bf16 "
                                   "(autocast, with float32 master weights)")
        if lora is not None and not peft_available():
            raise RequestError("lora: peft is not importable by this Python")
        source_cfg = read_hf_config(model_dir)
        if source_cfg is None:
            raise RequestError(f"model_dir: {os.path.join(model_dir, 'config.json')} does not exist or is not JSON")
        try:
            model, adapter, info = load_hf(model_dir, torch_device, dtype=dtype, gradient_checkpointing=gc, lora=lora)
        except RequestError:
            raise
        except (OSError, ValueError) as e:
            raise RequestError(f"model_dir: cannot load a Hugging Face model from {model_dir}: {e}") from None
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
        autocast = None
        if device == "cuda" and dtype == "auto" and torch.cuda.is_bf16_supported():
            autocast = torch.bfloat16  # float32 master weights, bf16 matmuls
        pack = os.environ.get("MCP_GYM_HF_PACK", "1") != "0"
        if pack:
            try:
                pack = check_packing(model, adapter, autocast)
            except Exception as e:  # a model whose forward does not take position ids this way
                _log(f"{model_dir}: packing check failed ({type(e).__name__}: {e})")
                pack = False
            if not pack:
                _log(f"{model_dir}: packed sequences do not match single ones with this model and attention "
                     f"({adapter.attn_implementation}); right padding instead")
        adapter.pack = pack
        share = os.environ.get("MCP_GYM_HF_SHARE_PREFIX", "1") != "0" and not gc
        if share:
            try:
                share = check_prefix_sharing(model, adapter, autocast)
            except Exception as e:  # a decoder that does not take a cache this way
                _log(f"{model_dir}: shared-prefix check failed ({type(e).__name__}: {e})")
                share = False
            if not share:
                _log(f"{model_dir}: a shared prefix does not reproduce single sequences with this model; not shared")
        adapter.share_prefix = share
        adapter.micro_tokens = MICRO_TOKENS
        env_tokens = os.environ.get("MCP_GYM_HF_PACK_TOKENS")
        if env_tokens:
            adapter.pack_tokens = max(1, int(env_tokens))
        restore = info.pop("restore")
        info.update({"autocast": str(autocast).replace("torch.", "") if autocast else None,
                     "attn_implementation": adapter.attn_implementation, "pack": adapter.pack,
                     "share_prefix": adapter.share_prefix,
                     "model_type": source_cfg.get("model_type")})
        backend = cls(model, adapter, model_dir, {"format": "hf", "version": 0, "hf": info})
        backend.autocast_dtype = autocast
        backend.compute_dtype = None
        if compute is not None:
            from .compute_copy import DTYPES

            backend.compute_dtype = DTYPES[compute]
            info["compute_dtype"] = compute
        backend.restore = restore
        backend.source_cfg = source_cfg
        return backend

    @property
    def lora(self) -> bool:
        return hf_base(self.model) is not self.model

    def reference_mode(self, requested: str) -> str:
        # LoRA: the base weights are shared; the reference is a snapshot of the adapter, swapped in.
        return "swap" if (self.lora and requested == "copy") else requested

    def load_result(self) -> Dict[str, Any]:
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        return {"version": 0, "params": self.params(), "trainable_params": trainable, "hf": self.config["hf"],
                "vocab_size": self.adapter.vocab_size}

    def describe(self) -> Dict[str, Any]:
        return {"hf_info": self.config["hf"]}

    def _autocast(self):
        if self.autocast_dtype is not None and next(self.model.parameters()).is_cuda:
            return torch.autocast(device_type="cuda", dtype=self.autocast_dtype)
        import contextlib

        return contextlib.nullcontext()

    # -- logprobs --

    def logprobs(self, a: Dict[str, Any]) -> Dict[str, Any]:
        seqs, starts = a["sequences"], a["starts"]
        check_sequences(seqs, starts, self.adapter.vocab_size, self.adapter.max_seq_len)
        temperature, top_k, top_p = a.get("temperature", 1.0), a.get("top_k", 0), a.get("top_p", 1.0)
        lps = score_sequences(self.model, self.adapter, seqs, starts, temperature, top_k, top_p, self._autocast)
        # -inf (a token outside the top-k / top-p set) is not JSON: null.
        return {"logprobs": [[x if math.isfinite(x) else None for x in row] for row in lps]}

    # -- SFT --

    def _freeze_below(self, n: Any) -> List[nn.Parameter]:
        """`train_layers: n` (freeze_below); full fine-tuning only."""
        if self.lora:
            raise RequestError("train_layers: for full fine-tuning (a LoRA adapter already trains only its own weights)")
        return freeze_below(self.model, n)


    def sft_examples(self, a: Dict[str, Any]) -> List[Any]:
        warmup = a.get("warmup")
        if warmup is not None and warmup >= 1 and warmup != int(warmup):
            raise RequestError(f"warmup: a step count (integer >= 1) or a fraction in [0, 1), got {warmup}")
        from .sft import load_jsonl

        S = self.adapter.max_seq_len or (1 << 31)
        try:
            return load_jsonl(a["data"], self.adapter.vocab_size, S)
        except ConfigError as e:
            raise RequestError(str(e)) from None

    def sft(self, a: Dict[str, Any], examples: List[Any]) -> Dict[str, Any]:
        """Full fine-tuning or the LoRA adapter (whatever load set up): the loss on the mask's tokens, through
        the chunked head, micro-batches of at most MICRO_TOKENS tokens packed like RL's."""
        from .sft import adapter_sft_step, detached_prompt_sft_step, train_sft

        steps, epochs = a.get("steps"), a.get("epochs", 1)
        lr = a.get("lr", SFT_LR_DEFAULTS["lora" if self.lora else "full"])
        batch_size, warmup, seed = a.get("batch_size", 32), a.get("warmup"), a.get("seed", 0)
        compute = getattr(self, "compute", None)  # a bf16 copy to compute on (compute_copy.py), or None
        net = compute.model if compute is not None else self.model
        module = LogprobModule(net, self.adapter)
        device = next(self.model.parameters()).device

        prompt_grad = a.get("prompt_grad", True)
        if not isinstance(prompt_grad, bool):
            raise RequestError(f"prompt_grad: true or false, got {prompt_grad!r}")

        train_layers = a.get("train_layers")
        frozen = self._freeze_below(train_layers) if train_layers is not None else []
        sync = compute.sync if compute is not None else None
        if sync is not None:
            sync()

        def step_fn(batch):
            if not prompt_grad:
                return detached_prompt_sft_step(net, self.adapter, batch, device, autocast=self._autocast)
            return adapter_sft_step(module, self.adapter, batch, device, MICRO_TOKENS, autocast=self._autocast)

        # save_epochs: the weights after each pass but the last, written as checkpoints DIR/epoch-<e> (the
        # last pass is the loaded model itself, written by export as usual).
        save_epochs = a.get("save_epochs")
        epoch_dirs: List[str] = []

        def on_epoch(e: int) -> None:
            d = os.path.join(save_epochs, f"epoch-{e}")
            self.write(d, True, 0)
            epoch_dirs.append(d)

        try:
            result = train_sft(self.model, examples, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr,
                               warmup=warmup, seed=seed, weight_decay=a.get("weight_decay", 0.01),
                               betas=tuple(a.get("betas", (0.9, 0.95))), grad_clip=a.get("grad_clip", 1.0),
                               min_lr_ratio=a.get("min_lr_ratio", 0.1), step_fn=step_fn, log_every=1,
                               on_epoch=on_epoch if save_epochs else None, after_step=sync)
        finally:
            for p in frozen:
                p.requires_grad_(True)
        if train_layers is not None:
            result["train_layers"] = train_layers
        self.sft_steps += result["steps"]
        result.update({"examples": len(examples), "lr": lr, "lora": self.lora, "epoch_dirs": epoch_dirs})
        return result


def decoder_layers(model: nn.Module) -> Tuple[Any, List[nn.Module]]:
    """A transformers causal LM's decoder and its layers, bottom to top."""
    from .policy import hf_base

    dec = hf_base(model).get_decoder()
    layers = getattr(dec, "layers", None)
    if layers is None:
        raise RequestError(f"train_layers: {type(dec).__name__} has no .layers list")
    return dec, list(layers)


def freeze_below(model: nn.Module, n: Any) -> List[nn.Parameter]:
    """`train_layers: n`: only the top n decoder layers and the final norm keep requires_grad (the embeddings, the
    LM head and the layers below are frozen). Autograd then records nothing below layer L - n, so the backward
    pass stops there: the trained weights get the full model's gradient at a fraction of the cost. Returns the
    parameters it froze (the caller sets requires_grad on them again); refuses a bad n before freezing anything."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RequestError(f"train_layers: an integer >= 1 (the top decoder layers to train), got {n!r}")
    dec, layers = decoder_layers(model)
    if n > len(layers):
        raise RequestError(f"train_layers: {n} > the model's {len(layers)} decoder layers")
    keep = {id(p) for m in layers[len(layers) - n:] for p in m.parameters()}
    norm = getattr(dec, "norm", None)
    if norm is not None:
        keep |= {id(p) for p in norm.parameters()}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in keep]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def score_sequences(model: nn.Module, adapter: HFAdapter, seqs: List[List[int]], starts: List[int],
                    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, autocast=None,
                    micro_tokens: int = 4 * MICRO_TOKENS) -> List[List[float]]:
    """The processed logprob of tokens starts[b] .. len - 1 of each sequence (PROTOCOL.md, "Logprobs"), in
    micro-batches laid out by the adapter (packed), through the chunked head. No gradient; eval mode."""
    import contextlib

    device = next(model.parameters()).device
    module = LogprobModule(model, adapter)
    out: List[List[float]] = [[] for _ in seqs]
    order = sorted((b for b in range(len(seqs)) if starts[b] < len(seqs[b])), key=lambda b: -len(seqs[b]))
    groups: List[List[int]] = []
    n = 0
    for b in order:
        if groups and n + len(seqs[b]) <= micro_tokens:
            groups[-1].append(b)
            n += len(seqs[b])
        else:
            groups.append([b])
            n = len(seqs[b])
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for g in groups:
                ts = [torch.tensor(seqs[b], dtype=torch.long) for b in g]
                inputs, st = adapter.inputs(ts, device, need_from=[starts[b] - 1 for b in g])
                sel = torch.cat([rows_at(st[j], torch.arange(starts[b] - 1, len(seqs[b]) - 1)) for j, b in enumerate(g)])
                tgt = torch.cat([ts[j][starts[b]:] for j, b in enumerate(g)])
                with (autocast() if autocast is not None else contextlib.nullcontext()):
                    lp, _, _ = module(inputs, sel.to(device), tgt.to(device), temperature, top_k, top_p, None, False)
                lp = lp.float().cpu()
                o = 0
                for b in g:
                    k = len(seqs[b]) - starts[b]
                    out[b] = lp[o: o + k].tolist()
                    o += k
    finally:
        model.train(was)
    return out
