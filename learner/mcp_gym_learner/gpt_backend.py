"""The project's embedded GPT behind the commands (PROTOCOL.md, "The model directory"): create, load,
export and save (weights.pt, the ONNX graph and its weights), logprobs and SFT.
"""

from __future__ import annotations

import base64
import math
import os
from typing import Any, Dict, List, Optional

import torch

from .backend import Backend, check_sequences
from .config import WEIGHTS_FILE, ConfigError, new_config, normalize_architecture, read_config, write_config
from .protocol import RequestError


def create(a: Dict[str, Any]) -> Dict[str, Any]:
    """`create`: config.json and weights.pt with fresh weights in a directory (no ONNX yet); does not load."""
    model_dir = a["model_dir"]
    arch_in = dict(a.get("architecture", {}))
    if "seed" in a:
        arch_in["seed"] = a["seed"]
    try:
        arch = normalize_architecture(arch_in)
    except ConfigError as e:
        raise RequestError(str(e)) from None
    name = a.get("name", os.path.basename(os.path.normpath(model_dir)))
    if os.path.exists(os.path.join(model_dir, "config.json")) and not a.get("overwrite", False):
        raise RequestError(f"model_dir: {model_dir} already holds a model (pass overwrite: true to replace it)")
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise RequestError(f"model_dir: {model_dir} exists and is not a directory")

    from .export import save_weights_pt
    from .model import GPT

    model = GPT(arch)
    os.makedirs(model_dir, exist_ok=True)
    cfg = new_config(name, arch, a.get("tokenizer"), a.get("chat_template"))
    for stale in ("model.onnx", "model.onnx.data"):  # a replaced model's graph would not match
        try:
            os.unlink(os.path.join(model_dir, stale))
        except FileNotFoundError:
            pass
    save_weights_pt(model, model_dir)
    write_config(model_dir, cfg)
    return {"model_dir": model_dir, "version": cfg["version"], "params": model.num_params(), "architecture": arch}


class GPTBackend(Backend):
    name = "gpt"
    supports = frozenset({"sft", "logprobs", "inline"})

    def __init__(self, model, adapter, model_dir: str, config: Dict[str, Any]):
        super().__init__(model, adapter, model_dir, config)
        training = config.get("training") if isinstance(config.get("training"), dict) else {}
        self.last_sft: Optional[Dict[str, Any]] = training.get("sft")  # written back into config.json

    @classmethod
    def load(cls, model_dir: str, a: Dict[str, Any], device: str, torch_device: str) -> "GPTBackend":
        for k in ("dtype", "gradient_checkpointing", "lora", "compute_dtype"):
            if k in a:
                raise RequestError(f"{k}: only for a Hugging Face model (hf: true)")
        try:
            cfg = read_config(model_dir)
        except ConfigError as e:
            raise RequestError(str(e)) from None
        wpath = os.path.join(model_dir, WEIGHTS_FILE)
        if not os.path.exists(wpath):
            raise RequestError(f"model_dir: {wpath} does not exist")

        from .export import load_weights_pt
        from .model import GPT
        from .policy import GPTAdapter

        model = GPT(cfg["architecture"])
        try:
            model.load_state_dict(load_weights_pt(wpath))
        except Exception as e:
            raise RequestError(f"model_dir: {wpath} does not fit the architecture in config.json: {e}") from None
        model.to(torch_device)
        model.eval()
        if device == "cuda":
            try:  # TF32 matmuls on Ampere+ (a no-op elsewhere)
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            except Exception:  # pragma: no cover
                pass
        # MCP_GYM_GPT_SHARE_PREFIX=0: every sequence laid out whole (the layout before the shared prefix;
        # bench/main-job.ts runs the old recipe so)
        share = os.environ.get("MCP_GYM_GPT_SHARE_PREFIX", "1") != "0"
        return cls(model, GPTAdapter(model, share_prefix=share), model_dir, cfg)

    def load_result(self) -> Dict[str, Any]:
        return {"version": self.version, "params": self.model.num_params(), "architecture": self.config["architecture"]}

    def describe(self) -> Dict[str, Any]:
        return {"architecture": self.model.architecture}

    # -- export / save --

    def write(self, model_dir: str, full: Optional[bool], rl_steps: int, state=None) -> Dict[str, Any]:
        same = os.path.realpath(model_dir) == os.path.realpath(self.model_dir)
        if not same:
            if not os.path.isdir(model_dir):
                os.makedirs(model_dir, exist_ok=True)
            if not os.path.exists(os.path.join(model_dir, "config.json")):
                # Writing to another directory: a copy of the loaded config.
                cfg = dict(self.config)
                cfg.pop("onnx", None)
                cfg["name"] = os.path.basename(os.path.normpath(model_dir))
                write_config(model_dir, cfg)
        try:
            cfg = read_config(model_dir)
        except ConfigError as e:
            raise RequestError(str(e)) from None
        if cfg["architecture"] != self.model.architecture:
            raise RequestError(f"model_dir: {model_dir} holds another architecture than the loaded model")

        from .export import export

        training = dict(cfg.get("training") or {})
        training["sft"] = self.last_sft
        training.setdefault("rl_steps", 0)
        if rl_steps > 0:
            training["rl_steps"] = rl_steps
        result = export(self.model, model_dir, full=full, config_updates={"training": training})
        if same:
            self.config = read_config(model_dir)
        result["model_dir"] = model_dir
        return result

    @staticmethod
    def inline_files(result: Dict[str, Any]) -> Dict[str, str]:
        """The files an export wrote, base64, for a caller that does not share this file system."""
        d = result["model_dir"]
        names = ["config.json", WEIGHTS_FILE, "model.onnx.data"] + (["model.onnx"] if result.get("full") else [])
        files = {}
        for name in names:
            path = os.path.join(d, name)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    files[name] = base64.b64encode(f.read()).decode("ascii")
        return files

    # -- logprobs --

    def logprobs(self, a: Dict[str, Any]) -> Dict[str, Any]:
        V, S = self.model.architecture["vocab_size"], self.model.architecture["max_seq_len"]
        seqs, starts = a["sequences"], a["starts"]
        check_sequences(seqs, starts, V, S)

        from .logprobs import sequence_logprobs

        lps = sequence_logprobs(self.model, seqs, starts, a.get("temperature", 1.0), a.get("top_k", 0),
                                a.get("top_p", 1.0))
        # -inf (a token outside the top-k / top-p set) is not JSON: null.
        return {"logprobs": [[x if math.isfinite(x) else None for x in row] for row in lps]}

    # -- SFT --

    def sft_examples(self, a: Dict[str, Any]) -> List[Any]:
        """The checks of an `sft` request the schema cannot make, and its data, validated whole."""
        warmup = a.get("warmup")
        if warmup is not None and warmup >= 1 and warmup != int(warmup):
            raise RequestError(f"warmup: a step count (integer >= 1) or a fraction in [0, 1), got {warmup}")
        if a.get("save_epochs") is not None:
            raise RequestError("save_epochs: only a Hugging Face model writes a checkpoint per epoch")
        if a.get("prompt_grad") is False:
            raise RequestError("prompt_grad: false is for Hugging Face models (the embedded GPT trains through the prompt)")
        if a.get("train_layers") is not None:
            raise RequestError("train_layers is for Hugging Face models (the embedded GPT trains every layer)")
        from .sft import load_jsonl

        arch = self.model.architecture
        try:
            return load_jsonl(a["data"], arch["vocab_size"], arch["max_seq_len"])
        except ConfigError as e:
            raise RequestError(str(e)) from None

    def sft(self, a: Dict[str, Any], examples: List[Any]) -> Dict[str, Any]:
        from .sft import train_sft

        steps, epochs = a.get("steps"), a.get("epochs", 1)
        batch_size, lr, warmup, seed = a.get("batch_size", 32), a.get("lr", 3e-3), a.get("warmup"), a.get("seed", 0)
        result = train_sft(self.model, examples, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr,
                           warmup=warmup, seed=seed, weight_decay=a.get("weight_decay", 0.01),
                           betas=tuple(a.get("betas", (0.9, 0.95))), grad_clip=a.get("grad_clip", 1.0),
                           min_lr_ratio=a.get("min_lr_ratio", 0.1))
        self.sft_steps += result["steps"]
        self.last_sft = {"data": a["data"], "examples": len(examples), "epochs": epochs if steps is None else None,
                         "steps": result["steps"], "batch_size": batch_size, "lr": lr, "warmup": warmup,
                         "seed": seed, "loss_first": result["loss_first"], "loss_last": result["loss_last"],
                         "tokens": result["tokens"], "seconds": round(result["seconds"], 3)}
        result["examples"] = len(examples)
        return result
