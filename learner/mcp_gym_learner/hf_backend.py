"""A Hugging Face causal LM behind the commands (PROTOCOL.md, "Hugging Face models"): loaded with
transformers (`AutoModelForCausalLM.from_pretrained`, local files only), optionally wrapped with a
LoRA adapter by peft (a new one, or the one in `<model_dir>/adapter/`, trained on), trained by the same
RL trainer (policy.HFAdapter) and by `sft`, scored by `logprobs`, written back as a standard checkpoint
(full fine-tuning) or as the PEFT adapter in `<model_dir>/adapter/` (LoRA).

Everything goes through the decoder and the chunked LM head (head.py): float32 logits exist for one
chunk of scored tokens at a time, never as [batch, length, vocab].
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .backend import Backend, check_sequences
from .config import ConfigError
from .policy import HFAdapter, LogprobModule, hf_base
from .protocol import RequestError

ADAPTER_DIR = "adapter"  # <model_dir>/adapter/: the PEFT adapter of a LoRA model
LORA_DEFAULTS = {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "all-linear"}
# The tokenizer's files, copied beside a checkpoint written into another directory than the loaded one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")
# A full checkpoint's weight files (the stale ones are removed after a write that does not rewrite them).
WEIGHT_FILE_RE = re.compile(r"^(model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|"
                            r"pytorch_model(-\d+-of-\d+)?\.bin|pytorch_model\.bin\.index\.json)$")
# Tokens per micro-batch with a gradient (`sft`, `train`; gradient accumulation within one step), a shared prefix
# counted once: activations of a 135M model take ~3 MB per token on the CPU, so 4096 tokens stay near 12 GB.
# `logprobs` (no gradient) takes four times as many.
MICRO_TOKENS = int(os.environ.get("MCP_GYM_HF_MICRO_TOKENS", "4096"))
SFT_LR_DEFAULTS = {"full": 1e-5, "lora": 1e-4}  # `sft` without lr on a Hugging Face model


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


def transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
        return True
    except Exception:
        return False


def read_hf_config(model_dir: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def is_hf_dir(model_dir: str) -> bool:
    """A directory with a Hugging Face config.json (model_type / architectures), not an mcp-gym model."""
    cfg = read_hf_config(model_dir)
    return cfg is not None and cfg.get("format") is None and ("model_type" in cfg or "architectures" in cfg)


def disable_dropout(model: nn.Module) -> Dict[str, float]:
    """No dropout in RL: the policy's logprobs must be deterministic (the on-policy ratio is 1, the old
    logprobs are the sampler's). Zeroes every nn.Dropout and the config's *dropout* probabilities (attention
    dropout is read from the config); LoRA's own dropout (peft, applied afterwards) is left as configured.
    Returns the config values it changed (restored in a written config.json)."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    changed: Dict[str, float] = {}
    cfg = getattr(model, "config", None)
    if cfg is not None:
        for k, v in list(vars(cfg).items()):
            if "dropout" in k and isinstance(v, float) and not isinstance(v, bool):
                if v != 0.0:
                    changed[k] = v
                setattr(cfg, k, 0.0)
    for m in model.modules():  # attention modules that copied the probability at construction
        for k in ("attention_dropout", "dropout"):
            if isinstance(getattr(m, k, None), float):
                setattr(m, k, 0.0)
    return changed


def _dtype_kwarg() -> str:
    """from_pretrained's dtype argument: `dtype` from transformers 4.56 on, `torch_dtype` before."""
    import transformers

    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:  # pragma: no cover
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


# ---------------------------------------------------------------------------------------------
# LoRA options


def lora_target_names(model: nn.Module) -> List[str]:
    """The names (last component) of the modules of `model` that LoRA can wrap: linear layers (and
    transformers' Conv1D), embeddings."""
    kinds: Tuple[type, ...] = (nn.Linear, nn.Embedding)
    try:
        from transformers.pytorch_utils import Conv1D

        kinds = kinds + (Conv1D,)
    except Exception:  # pragma: no cover
        pass
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if name and isinstance(m, kinds)})


def check_lora(lora: Dict[str, Any], model: nn.Module) -> Dict[str, Any]:
    """The LoRA options with their defaults, checked against the model; RequestError names the field."""
    out = dict(LORA_DEFAULTS)
    out.update({k: v for k, v in lora.items() if v is not None})
    r, alpha, dropout, targets = out["r"], out["alpha"], out["dropout"], out["target_modules"]
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise RequestError(f"lora.r: must be an integer >= 1, got {r!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha <= 0:
        raise RequestError(f"lora.alpha: must be a number > 0, got {alpha!r}")
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise RequestError(f"lora.dropout: must be a number in [0, 1), got {dropout!r}")
    names = lora_target_names(model)
    linear = [n for n in names if n not in ("embed_tokens", "lm_head", "wte", "wpe")]
    if isinstance(targets, str):
        if targets != "all-linear":
            try:  # peft reads a string as a regular expression over the full module names
                rx = re.compile(targets)
            except re.error as e:
                raise RequestError(f"lora.target_modules: {targets!r} is not a valid regular expression: {e}") from None
            if not any(rx.fullmatch(n) for n, _ in model.named_modules()):
                raise RequestError(f"lora.target_modules: the pattern {targets!r} matches no module of this model "
                                   f"(its linear modules: {', '.join(linear)}; or \"all-linear\")")
    elif isinstance(targets, list):
        if not targets:
            raise RequestError("lora.target_modules: an empty list (name modules, or \"all-linear\")")
        for i, t in enumerate(targets):
            if not isinstance(t, str) or t not in names:
                raise RequestError(f"lora.target_modules[{i}]: {t!r} is not a module of this model "
                                   f"(its linear modules: {', '.join(linear)})")
        targets = sorted(set(targets))
    else:
        raise RequestError(f"lora.target_modules: a list of module names or \"all-linear\", got {targets!r}")
    return {"r": int(r), "alpha": float(alpha), "dropout": float(dropout), "target_modules": targets}


def _saved_lora(adapter_dir: str) -> Dict[str, Any]:
    with open(os.path.join(adapter_dir, "adapter_config.json"), "r", encoding="utf-8") as f:
        c = json.load(f)
    targets = c.get("target_modules")
    if isinstance(targets, list):
        targets = sorted(targets)
    return {"r": c.get("r"), "alpha": float(c.get("lora_alpha", 0)), "dropout": float(c.get("lora_dropout", 0.0)),
            "target_modules": targets}


def _check_resumed_lora(asked: Dict[str, Any], saved: Dict[str, Any], adapter_dir: str, model: nn.Module) -> None:
    """`lora` given for a model directory that holds an adapter: what it names must be the adapter's."""
    for k in ("r", "alpha", "dropout"):
        if k in asked and asked[k] is not None and float(asked[k]) != float(saved[k]):
            raise RequestError(f"lora.{k}: {adapter_dir} holds an adapter with {k} {saved[k]}, asked {asked[k]} "
                               "(loading continues that adapter; remove it to start a new one)")
    t = asked.get("target_modules")
    got = saved["target_modules"]
    if t is None or t == "all-linear":  # peft saves "all-linear" resolved into names: nothing to compare
        return
    same = sorted(set(t)) == sorted(set(got)) if isinstance(t, list) and isinstance(got, list) else t == got
    if not same:
        raise RequestError(f"lora.target_modules: {adapter_dir} holds an adapter of {got}, asked {t} "
                           "(loading continues that adapter; remove it to start a new one)")


# ---------------------------------------------------------------------------------------------
# loading


def load_hf(model_dir: str, device: str, dtype: str = "auto", gradient_checkpointing: bool = False,
            lora: Optional[Dict[str, Any]] = None, attn_implementation: Optional[str] = None):
    """AutoModelForCausalLM from a local directory. dtype auto / float32: float32 parameters (auto: bf16
    autocast on CUDA); bfloat16: bf16 parameters. LoRA (peft): `lora` ({r, alpha, dropout, target_modules})
    makes a new adapter; a directory with `adapter/` continues that adapter (is_trainable). Returns
    (model, adapter, info)."""
    import transformers

    if dtype not in ("auto", "float32", "bfloat16"):
        raise RequestError(f"dtype: must be auto, float32 or bfloat16, got {dtype!r}")
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    if attn_implementation is None:
        attn_implementation = "eager"
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            attn_implementation = "sdpa"
        if device.startswith("cuda"):
            try:
                import flash_attn  # noqa: F401
                attn_implementation = "flash_attention_2"
            except Exception:
                pass
    kwargs: Dict[str, Any] = {_dtype_kwarg(): torch_dtype, "local_files_only": True}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn_implementation,
                                                                  **kwargs)
    except (TypeError, ImportError):
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    restore: Dict[str, Any] = {}  # config values changed for training, restored in a written config.json
    if getattr(model.config, "use_cache", None) is not None:
        restore["use_cache"] = model.config.use_cache
        model.config.use_cache = False
    restore.update(disable_dropout(model))
    if gradient_checkpointing:
        kw = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name warns)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            try:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
            except TypeError:
                model.gradient_checkpointing_enable()
    adapter_dir = os.path.join(model_dir, ADAPTER_DIR)
    resumed = os.path.exists(os.path.join(adapter_dir, "adapter_config.json"))
    lora_info: Optional[Dict[str, Any]] = None
    if resumed or lora is not None:
        if not peft_available():
            raise RequestError("lora: peft is not importable by this Python"
                               + (f" (needed for {adapter_dir})" if resumed else ""))
        import peft

        if resumed:
            saved = _saved_lora(adapter_dir)
            if lora:
                _check_resumed_lora(lora, saved, adapter_dir, model)
            with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing
                warnings.simplefilter("ignore", FutureWarning)
                model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
            lora_info = {**saved, "resumed": True, "adapter_dir": adapter_dir}
        else:
            opts = check_lora(lora, model)
            cfg = peft.LoraConfig(r=opts["r"], lora_alpha=opts["alpha"], lora_dropout=opts["dropout"],
                                  target_modules=opts["target_modules"], task_type="CAUSAL_LM")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    model = peft.get_peft_model(model, cfg)
            except ValueError as e:
                raise RequestError(f"lora: {e}") from None
            lora_info = {**opts, "resumed": False}
        if gradient_checkpointing and hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    model.to(device)
    model.eval()
    info = {"dtype": dtype, "param_dtype": str(torch_dtype).replace("torch.", ""),
            "gradient_checkpointing": bool(gradient_checkpointing), "lora": lora_info, "restore": restore}
    return model, HFAdapter(model), info


@torch.no_grad()
def _same_as_alone(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype], seqs: List[torch.Tensor],
                   layout, skip: int) -> bool:
    """Whether the hidden states of `seqs` laid out together (`layout(seqs, device)` -> (inputs, starts)) equal
    those of each sequence computed alone, from position `skip` of each on (relative tolerance: 1e-4 in
    float32, 5e-2 in a low-precision dtype or under CUDA autocast)."""
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    ctx = torch.autocast(device_type="cuda", dtype=autocast) if (autocast and dev.type == "cuda") else None
    try:
        if ctx is not None:
            ctx.__enter__()
        inputs, starts = layout(seqs, dev)
        together = adapter.hidden(model, inputs).float()
        alone = [adapter.hidden(model, {"input_ids": s.unsqueeze(0).to(dev)}).float() for s in seqs]
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        model.train(was)
    scale = float(torch.cat(alone).abs().max()) + 1e-6
    low = next(model.parameters()).dtype != torch.float32 or (autocast is not None and dev.type == "cuda")
    tol = 5e-2 if low else 1e-4
    err = max(float((together[st + skip: st + len(s)] - h[skip:]).abs().max()) for s, st, h in zip(seqs, starts, alone))
    return err / scale < tol


def check_packing(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype] = None) -> bool:
    """Whether this model reads packed position ids as sequence boundaries: the hidden states of two short
    sequences packed into one row must be those of each sequence alone (a model whose attention ignores the
    restarts would let the second sequence see the first)."""
    g = torch.Generator().manual_seed(0)
    top = min(adapter.vocab_size, 1000)
    seqs = [torch.randint(0, top, (5,), generator=g), torch.randint(0, top, (4,), generator=g)]
    return _same_as_alone(model, adapter, autocast, seqs, lambda xs, dev: adapter.packed_inputs(xs, dev, cap=None), 0)


def check_prefix_sharing(model: nn.Module, adapter: HFAdapter, autocast: Optional[torch.dtype] = None) -> bool:
    """Whether the shared-prefix layout (policy.py) gives this model's hidden states: two sequences with a common
    prefix, computed with it once, must equal each sequence on its own."""
    g = torch.Generator().manual_seed(1)
    top = min(adapter.vocab_size, 1000)
    prefix = torch.randint(0, top, (40,), generator=g)
    seqs = [torch.cat([prefix, torch.randint(0, top, (5,), generator=g)]), torch.cat([prefix, torch.randint(0, top, (3,), generator=g)])]
    return _same_as_alone(model, adapter, autocast, seqs, lambda xs, dev: adapter.prefix_inputs(xs, 38, dev), 38)


# ---------------------------------------------------------------------------------------------
# writing


def _atomic_move(src_dir: str, dst_dir: str, names: List[str]) -> None:
    """Rename each file of src_dir into dst_dir, config.json last (a reader sees old or new files, each whole)."""
    for name in sorted(names, key=lambda n: n == "config.json"):
        os.replace(os.path.join(src_dir, name), os.path.join(dst_dir, name))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_tokenizer(src_dir: str, dst_dir: str) -> List[str]:
    out = []
    for name in TOKENIZER_FILES:
        s, d = os.path.join(src_dir, name), os.path.join(dst_dir, name)
        if os.path.isfile(s) and not os.path.exists(d):
            shutil.copy2(s, d)
            out.append(name)
    return out


def _save_dtype(source_cfg: Optional[Dict[str, Any]], model: nn.Module) -> torch.dtype:
    """The dtype a full checkpoint is written in: the one the loaded checkpoint declared (a bf16 model trained
    with float32 master weights is written back in bf16), else the parameters'."""
    name = None
    if source_cfg:
        name = source_cfg.get("dtype") or source_cfg.get("torch_dtype")
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if isinstance(name, str) and name in table:
        return table[name]
    return next(model.parameters()).dtype


class HFBackend(Backend):
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

    # -- export / save --

    def write(self, model_dir: str, full: Optional[bool], rl_steps: int) -> Dict[str, Any]:
        """Full fine-tuning: a standard checkpoint into model_dir (model.safetensors or shards, config.json,
        generation_config.json; the tokenizer files there stay, and are copied from the loaded directory when
        absent). LoRA: the PEFT adapter into <model_dir>/adapter/ (adapter_config.json,
        adapter_model.safetensors); the base weights are not touched (a model_dir without a checkpoint gets
        the loaded base's files, hard-linked where possible). Files are written into a temporary directory and
        renamed into place, config.json last."""
        t0 = time.perf_counter()
        os.makedirs(model_dir, exist_ok=True)
        same = os.path.realpath(model_dir) == os.path.realpath(self.model_dir)
        tmp = os.path.join(model_dir, f".write-tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        written: List[str] = []
        try:
            if self.lora:
                result = self._write_lora(model_dir, tmp, same, written)
            else:
                result = self._write_full(model_dir, tmp, same, written)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not same:
            written += _copy_tokenizer(self.model_dir, model_dir)
        self.config["version"] = self.version + 1
        result.update({"model_dir": model_dir, "format": "hf", "lora": self.lora, "written": sorted(written),
                       "seconds": time.perf_counter() - t0, "version": self.config["version"], "full": False,
                       "onnx": False, "rl_steps": rl_steps, "sft_steps": self.sft_steps})
        extra = self._after_write(model_dir)  # the ONNX export of the written model (hf_export.py) hooks here
        if extra:
            result.update(extra)
        return result

    def _after_write(self, model_dir: str) -> Optional[Dict[str, Any]]:
        """Called at the end of every write (export/save), with the directory just written. When the directory
        has an ONNX export (`onnx/config.json`: the rollout side samples in-process), its weights are brought up
        to date (LoRA merged): in place when the graph fits, else a full export. Without one (the rollouts come
        from a server such as vLLM) nothing is exported. What it returns is added to the result."""
        from .hf_export import read_onnx_config, update_hf_onnx_weights

        if read_onnx_config(model_dir) is None:
            return None
        r = update_hf_onnx_weights(self.model, model_dir)
        return {"onnx": True, "onnx_version": r.get("version"), "onnx_seconds": r.get("seconds"),
                "onnx_full": r.get("full")}

    def _config_restored(self, base: nn.Module):
        """A context in which base.config holds its loaded values (use_cache, dropouts), for save_pretrained."""
        import contextlib

        @contextlib.contextmanager
        def ctx():
            cfg = base.config
            saved = {k: getattr(cfg, k) for k in self.restore if hasattr(cfg, k)}
            for k, v in self.restore.items():
                setattr(cfg, k, v)
            try:
                yield
            finally:
                for k, v in saved.items():
                    setattr(cfg, k, v)
        return ctx()

    def _write_full(self, model_dir: str, tmp: str, same: bool, written: List[str]) -> Dict[str, Any]:
        base = hf_base(self.model)
        dtype = _save_dtype(self.source_cfg, base)
        state = None
        if dtype != next(base.parameters()).dtype:
            # converted on the host, a tensor at a time (no second copy of the model on the GPU); tied weights
            # stay one tensor (save_pretrained stores them once)
            state, seen = {}, {}
            for k, v in base.state_dict().items():
                key = (v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.device)
                if key not in seen:
                    seen[key] = v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu()
                state[k] = seen[key]
        with self._config_restored(base):
            old = getattr(base.config, "dtype", None)
            try:
                if old is not None:
                    base.config.dtype = dtype
                kwargs: Dict[str, Any] = {"safe_serialization": True}
                if state is not None:
                    kwargs["state_dict"] = state
                base.save_pretrained(tmp, **kwargs)
            finally:
                if old is not None:
                    base.config.dtype = old
        if state is not None:  # save_pretrained writes the parameters' dtype into config.json: the file's instead
            path = os.path.join(tmp, "config.json")
            with open(path, "r", encoding="utf-8") as f:
                cfg = json.load(f)
            for k in ("dtype", "torch_dtype"):
                if k in cfg or k == "dtype":
                    cfg[k] = str(dtype).replace("torch.", "")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(cfg, f, indent=2, sort_keys=True)
        names = sorted(os.listdir(tmp))
        stale = [n for n in os.listdir(model_dir) if WEIGHT_FILE_RE.match(n) and n not in names]
        _atomic_move(tmp, model_dir, names)
        for n in stale:  # e.g. old shards when the new checkpoint is one file (the new index/file is in place)
            os.unlink(os.path.join(model_dir, n))
        written += names
        return {"dtype": str(dtype).replace("torch.", "")}

    def _write_lora(self, model_dir: str, tmp: str, same: bool, written: List[str]) -> Dict[str, Any]:
        if not same and not os.path.exists(os.path.join(model_dir, "config.json")):
            # a new directory: the base checkpoint beside the adapter (hard links where possible)
            for n in sorted(os.listdir(self.model_dir)):
                if n == "config.json" or n == "generation_config.json" or WEIGHT_FILE_RE.match(n):
                    _link_or_copy(os.path.join(self.model_dir, n), os.path.join(model_dir, n))
                    written.append(n)
        self.model.save_pretrained(tmp, safe_serialization=True)
        path = os.path.join(tmp, "adapter_config.json")
        with open(path, "r", encoding="utf-8") as f:
            acfg = json.load(f)
        acfg["base_model_name_or_path"] = os.path.abspath(model_dir)  # the base is the directory above
        with open(path, "w", encoding="utf-8") as f:
            json.dump(acfg, f, indent=2)
        adapter_dir = os.path.join(model_dir, ADAPTER_DIR)
        old = os.path.join(model_dir, f".adapter-old-{os.getpid()}")
        if os.path.exists(adapter_dir):
            os.replace(adapter_dir, old)
        os.replace(tmp, adapter_dir)
        shutil.rmtree(old, ignore_errors=True)
        written += [f"{ADAPTER_DIR}/{n}" for n in sorted(os.listdir(adapter_dir))]
        return {"adapter_dir": adapter_dir}

    # -- logprobs --

    def logprobs(self, a: Dict[str, Any]) -> Dict[str, Any]:
        seqs, starts = a["sequences"], a["starts"]
        check_sequences(seqs, starts, self.adapter.vocab_size, self.adapter.max_seq_len)
        temperature, top_k, top_p = a.get("temperature", 1.0), a.get("top_k", 0), a.get("top_p", 1.0)
        lps = score_sequences(self.model, self.adapter, seqs, starts, temperature, top_k, top_p, self._autocast)
        # -inf (a token outside the top-k / top-p set) is not JSON: null.
        return {"logprobs": [[x if math.isfinite(x) else None for x in row] for row in lps]}

    # -- SFT --

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
        from .sft import adapter_sft_step, train_sft

        steps, epochs = a.get("steps"), a.get("epochs", 1)
        lr = a.get("lr", SFT_LR_DEFAULTS["lora" if self.lora else "full"])
        batch_size, warmup, seed = a.get("batch_size", 32), a.get("warmup"), a.get("seed", 0)
        module = LogprobModule(self.model, self.adapter)
        device = next(self.model.parameters()).device

        def step_fn(batch):
            return adapter_sft_step(module, self.adapter, batch, device, MICRO_TOKENS, autocast=self._autocast)

        # save_epochs: the weights after each pass but the last, written as checkpoints DIR/epoch-<e> (the
        # last pass is the loaded model itself, written by export as usual).
        save_epochs = a.get("save_epochs")
        epoch_dirs: List[str] = []

        def on_epoch(e: int) -> None:
            d = os.path.join(save_epochs, f"epoch-{e}")
            self.write(d, True, 0)
            epoch_dirs.append(d)

        result = train_sft(self.model, examples, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr,
                           warmup=warmup, seed=seed, weight_decay=a.get("weight_decay", 0.01),
                           betas=tuple(a.get("betas", (0.9, 0.95))), grad_clip=a.get("grad_clip", 1.0),
                           min_lr_ratio=a.get("min_lr_ratio", 0.1), step_fn=step_fn, log_every=1,
                           on_epoch=on_epoch if save_epochs else None)
        self.sft_steps += result["steps"]
        result.update({"examples": len(examples), "lr": lr, "lora": self.lora, "epoch_dirs": epoch_dirs})
        return result


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
                sel = torch.cat([torch.arange(starts[b] - 1, len(seqs[b]) - 1) + st[j] for j, b in enumerate(g)])
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
