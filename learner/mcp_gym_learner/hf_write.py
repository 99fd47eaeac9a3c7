"""Writing a loaded Hugging Face model back (`export` / `save`, PROTOCOL.md, "Hugging Face models"): full
fine-tuning as a standard checkpoint (model.safetensors or shards, config.json with the loaded config values,
in the loaded checkpoint's dtype), LoRA as the PEFT adapter in `<model_dir>/adapter/`; through a temporary
directory renamed into place, config.json last. `HFWriter` is HFBackend's (hf_backend.py) `write`, mixed into it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn

from .hf_lora import ADAPTER_DIR
from .policy import hf_base

# The tokenizer's files, copied beside a checkpoint written into another directory than the loaded one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")
# A full checkpoint's weight files (the stale ones are removed after a write that does not rewrite them).
WEIGHT_FILE_RE = re.compile(r"^(model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|"
                            r"pytorch_model(-\d+-of-\d+)?\.bin|pytorch_model\.bin\.index\.json)$")


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


class HFWriter:
    """HFBackend's `write` and its pieces: they use its model, model_dir, config, version, lora, sft_steps,
    restore (the config values changed for training) and source_cfg (the loaded config.json)."""

    def write(self, model_dir: str, full: Optional[bool], rl_steps: int, state=None) -> Dict[str, Any]:
        """Full fine-tuning: a standard checkpoint into model_dir (model.safetensors or shards, config.json,
        generation_config.json; the tokenizer files there stay, and are copied from the loaded directory when
        absent). LoRA: the PEFT adapter into <model_dir>/adapter/ (adapter_config.json,
        adapter_model.safetensors); the base weights are not touched (a model_dir without a checkpoint gets
        the loaded base's files, hard-linked where possible). Files are written into a temporary directory and
        renamed into place, config.json last. state: the model's full state dict (FSDP: gathered from the shards,
        on this rank), written instead of the model's own parameters."""
        t0 = time.perf_counter()
        os.makedirs(model_dir, exist_ok=True)
        same = os.path.realpath(model_dir) == os.path.realpath(self.model_dir)
        tmp = os.path.join(model_dir, f".write-tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        written: List[str] = []
        try:
            if self.lora:
                result = self._write_lora(model_dir, tmp, same, written, state)
            else:
                result = self._write_full(model_dir, tmp, same, written, state)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not same:
            written += _copy_tokenizer(self.model_dir, model_dir)
        self.config["version"] = self.version + 1
        result.update({"model_dir": model_dir, "format": "hf", "lora": self.lora, "written": sorted(written),
                       "seconds": time.perf_counter() - t0, "version": self.config["version"], "full": False,
                       "onnx": False, "rl_steps": rl_steps, "sft_steps": self.sft_steps})
        extra = self._after_write(model_dir, full_state=state)  # the ONNX export of the written model (hf_export.py) hooks here
        if extra:
            result.update(extra)
        return result

    def _after_write(self, model_dir: str, full_state: Optional[Dict[str, torch.Tensor]] = None
                     ) -> Optional[Dict[str, Any]]:
        """Called at the end of every write (export/save), with the directory just written. When the directory
        has an ONNX export (`onnx/config.json`: the rollout side samples in-process), its weights are brought up
        to date (LoRA merged): in place when the graph fits, else a full export. Without one (the rollouts come
        from a server such as vLLM) nothing is exported. What it returns is added to the result."""
        from .hf_export import read_onnx_config, update_hf_onnx_weights

        if read_onnx_config(model_dir) is None:
            return None
        # FSDP: the model is sharded; the gathered weights go into an unsharded copy on this rank's host
        model = self._unsharded(full_state) if full_state is not None else self.model
        r = update_hf_onnx_weights(model, model_dir)
        return {"onnx": True, "onnx_version": r.get("version"), "onnx_seconds": r.get("seconds"),
                "onnx_full": r.get("full")}

    def _unsharded(self, state: Dict[str, torch.Tensor]) -> nn.Module:
        """A float32 CPU model shaped like the loaded one (a peft model with the same adapter config under LoRA)
        holding `state` (the loaded model's keys): what the ONNX update reads under FSDP."""
        import transformers

        base = hf_base(self.model)
        copy = transformers.AutoModelForCausalLM.from_config(base.config)
        if self.lora:
            import peft

            copy = peft.get_peft_model(copy, self.model.peft_config["default"])
        copy.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True)
        copy.eval()
        return copy

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

    def _write_full(self, model_dir: str, tmp: str, same: bool, written: List[str],
                    full_state: Optional[Dict[str, torch.Tensor]] = None) -> Dict[str, Any]:
        base = hf_base(self.model)
        dtype = _save_dtype(self.source_cfg, base)
        state = None
        if full_state is not None:  # FSDP: gathered on the host already; tied weights stay one tensor
            state, seen = {}, {}
            for k, v in full_state.items():
                if id(v) not in seen:
                    seen[id(v)] = v.to(dtype) if v.is_floating_point() else v
                state[k] = seen[id(v)]
        elif dtype != next(base.parameters()).dtype:
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

    def _write_lora(self, model_dir: str, tmp: str, same: bool, written: List[str],
                    full_state: Optional[Dict[str, torch.Tensor]] = None) -> Dict[str, Any]:
        if not same and not os.path.exists(os.path.join(model_dir, "config.json")):
            # a new directory: the base checkpoint beside the adapter (hard links where possible)
            for n in sorted(os.listdir(self.model_dir)):
                if n == "config.json" or n == "generation_config.json" or WEIGHT_FILE_RE.match(n):
                    _link_or_copy(os.path.join(self.model_dir, n), os.path.join(model_dir, n))
                    written.append(n)
        kwargs: Dict[str, Any] = {"state_dict": full_state} if full_state is not None else {}
        self.model.save_pretrained(tmp, safe_serialization=True, **kwargs)
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
