"""The JSON-lines learner protocol on stdin/stdout (PROTOCOL.md, "The protocol").

stdout carries protocol lines only: at start the real stdout is kept for responses and file
descriptor 1 (and sys.stdout) are pointed at stderr, so a print or a C library's output cannot
corrupt the stream.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, IO, List, Optional

from .config import WEIGHTS_FILE, ConfigError, new_config, normalize_architecture, read_config, write_config
from .runtime import configure_threads, default_threads, tune_malloc

PROTOCOL_VERSION = 1


class RequestError(ValueError):
    """A request refused before anything changed; the message names the field."""


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# argument checking: every check runs before a command changes anything


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class Args:
    def __init__(self, req: Dict[str, Any], allowed: List[str]):
        self.req = req
        extra = [k for k in req if k not in ("id", "cmd") and k not in allowed]
        if extra:
            raise RequestError(f"{extra[0]}: unknown argument for {req['cmd']} "
                               f"(expected: {', '.join(allowed) if allowed else 'none'})")

    def has(self, name: str) -> bool:
        return self.req.get(name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        v = self.req.get(name)
        return default if v is None else v

    def _need(self, name: str, required: bool):
        if required and self.req.get(name) is None:
            raise RequestError(f"{name}: missing")

    def string(self, name: str, required: bool = True, default: Optional[str] = None) -> Optional[str]:
        self._need(name, required)
        v = self.raw(name, default)
        if v is not None and (not isinstance(v, str) or not v):
            raise RequestError(f"{name}: must be a non-empty string, got {v!r}")
        return v

    def integer(self, name: str, required: bool = True, default: Optional[int] = None, lo: Optional[int] = None,
                hi: Optional[int] = None) -> Optional[int]:
        self._need(name, required)
        v = self.raw(name, default)
        if v is None:
            return None
        if not _is_int(v):
            raise RequestError(f"{name}: must be an integer, got {v!r}")
        if lo is not None and v < lo:
            raise RequestError(f"{name}: must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise RequestError(f"{name}: must be <= {hi}, got {v}")
        return v

    def number(self, name: str, required: bool = True, default: Optional[float] = None,
               lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False) -> Optional[float]:
        self._need(name, required)
        v = self.raw(name, default)
        if v is None:
            return None
        if not _is_num(v):
            raise RequestError(f"{name}: must be a finite number, got {v!r}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise RequestError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v}")
        if hi is not None and v > hi:
            raise RequestError(f"{name}: must be <= {hi}, got {v}")
        return float(v)

    def boolean(self, name: str, default: bool = False) -> bool:
        v = self.raw(name, default)
        if not isinstance(v, bool):
            raise RequestError(f"{name}: must be true or false, got {v!r}")
        return v


# ---------------------------------------------------------------------------------------------


class Learner:
    """The state behind the protocol: at most one loaded model."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.model = None
        self.model_dir: Optional[str] = None
        self.config: Optional[Dict[str, Any]] = None
        self.device = "cpu"
        self.threads = default_threads()
        self.thread_info = configure_threads(self.threads)
        self.dirty = False  # weights changed since the last save/export
        self.sft_steps = 0
        self.last_sft: Optional[Dict[str, Any]] = None
        self.shutdown = False
        self.trainer = None  # rl.RLTrainer of the loaded model (optimizer, step, reference)
        self.hf = False  # the loaded model is a Hugging Face causal LM
        from .distributed import current

        self.rank, self.world, self.local_rank = current()
        self.handlers: Dict[str, Callable[[Dict[str, Any]], Any]] = {
            "create": lambda req: self._on_rank0(lambda: self.cmd_create(req)), "load": self.cmd_load,
            "sft": self.cmd_sft,
            "logprobs": self.cmd_logprobs, "train": self.cmd_train, "checkpoint_save": self.cmd_checkpoint_save,
            "checkpoint_load": self.cmd_checkpoint_load, "export": self.cmd_export, "save": self.cmd_save,
            "state": self.cmd_state, "shutdown": self.cmd_shutdown,
            "put_files": lambda req: self._on_rank0(lambda: self.cmd_put_files(req)),
        }

    # -- helpers --

    def _need_model(self) -> None:
        if self.model is None:
            raise RequestError("model: no model is loaded (send load first)")

    def _model_dir_arg(self, a: Args) -> str:
        d = a.string("model_dir", required=False)
        if d is None:
            self._need_model()
            return self.model_dir  # type: ignore[return-value]
        return d

    def _cuda_available(self) -> bool:
        try:
            return bool(self.torch.cuda.is_available())
        except Exception:  # pragma: no cover
            return False

    def _need_gpt(self, cmd: str) -> None:
        self._need_model()
        if self.hf:
            raise RequestError(f"model: {cmd} is for the embedded GPT; the loaded model is a Hugging Face model")

    def _on_rank0(self, fn: Callable[[], Any]) -> Any:
        """Under torchrun only rank 0 writes files; the others wait for it (and answer nothing)."""
        if self.world <= 1:
            return fn()
        from .distributed import barrier

        try:
            return fn() if self.rank == 0 else {"rank": self.rank}
        finally:
            barrier()

    def _torch_device(self, device: str) -> str:
        return f"cuda:{self.local_rank}" if device == "cuda" and self.world > 1 else device

    # -- commands --

    def cmd_create(self, req: Dict[str, Any]) -> Dict[str, Any]:
        a = Args(req, ["model_dir", "architecture", "seed", "name", "tokenizer", "chat_template", "overwrite"])
        model_dir = a.string("model_dir")
        arch_in = a.raw("architecture", {})
        if not isinstance(arch_in, dict):
            raise RequestError("architecture: must be an object")
        arch_in = dict(arch_in)
        seed = a.integer("seed", required=False)
        if seed is not None:
            arch_in["seed"] = seed
        try:
            arch = normalize_architecture(arch_in)
        except ConfigError as e:
            raise RequestError(str(e)) from None
        name = a.string("name", required=False, default=os.path.basename(os.path.normpath(model_dir)))
        tokenizer = a.raw("tokenizer")
        chat_template = a.raw("chat_template")
        for k, v in (("tokenizer", tokenizer), ("chat_template", chat_template)):
            if v is not None and not isinstance(v, dict):
                raise RequestError(f"{k}: must be an object")
        overwrite = a.boolean("overwrite", False)
        if os.path.exists(os.path.join(model_dir, "config.json")) and not overwrite:
            raise RequestError(f"model_dir: {model_dir} already holds a model (pass overwrite: true to replace it)")
        if os.path.exists(model_dir) and not os.path.isdir(model_dir):
            raise RequestError(f"model_dir: {model_dir} exists and is not a directory")

        from .export import save_weights_pt
        from .model import GPT

        model = GPT(arch)
        os.makedirs(model_dir, exist_ok=True)
        cfg = new_config(name, arch, tokenizer, chat_template)
        for stale in ("model.onnx", "model.onnx.data"):  # a replaced model's graph would not match
            try:
                os.unlink(os.path.join(model_dir, stale))
            except FileNotFoundError:
                pass
        save_weights_pt(model, model_dir)
        write_config(model_dir, cfg)
        return {"model_dir": model_dir, "version": cfg["version"], "params": model.num_params(),
                "architecture": arch}

    def cmd_load(self, req: Dict[str, Any]) -> Dict[str, Any]:
        a = Args(req, ["model_dir", "threads", "device", "hf", "dtype", "gradient_checkpointing", "lora",
                       "reference"])
        model_dir = a.string("model_dir")
        threads = a.integer("threads", required=False, lo=1, hi=1024)
        device = a.string("device", required=False)
        if device is None:
            device = "cuda" if self._cuda_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise RequestError(f"device: must be \"cpu\" or \"cuda\", got {device!r}")
        if device == "cuda" and not self._cuda_available():
            raise RequestError("device: cuda is not available to this torch")
        reference = a.string("reference", required=False, default="copy")
        if reference not in ("copy", "swap"):
            raise RequestError(f"reference: must be \"copy\" or \"swap\", got {reference!r}")
        from .policy import is_hf_dir

        hf = a.boolean("hf", False) if a.has("hf") else is_hf_dir(model_dir)
        if hf:
            return self._load_hf(a, model_dir, device, threads, reference)
        for k in ("dtype", "gradient_checkpointing", "lora"):
            if a.has(k):
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

        model = GPT(cfg["architecture"])
        try:
            state = load_weights_pt(wpath)
            model.load_state_dict(state)
        except Exception as e:
            raise RequestError(f"model_dir: {wpath} does not fit the architecture in config.json: {e}") from None
        model.to(self._torch_device(device))
        model.eval()
        if device == "cuda":
            try:  # TF32 matmuls on Ampere+ (a no-op elsewhere)
                self.torch.backends.cuda.matmul.allow_tf32 = True
                self.torch.backends.cudnn.allow_tf32 = True
            except Exception:  # pragma: no cover
                pass
        # Everything checked: switch.
        if threads is not None:
            self.threads = threads
            self.thread_info = configure_threads(threads)
        from .policy import GPTAdapter
        from .rl import RLTrainer

        self.trainer = None
        self.trainer = RLTrainer(model, GPTAdapter(model), reference=reference)  # the reference: these weights
        self.model, self.model_dir, self.config, self.device = model, model_dir, cfg, device
        self.hf = False
        self.dirty = False
        training = cfg.get("training") if isinstance(cfg.get("training"), dict) else {}
        self.last_sft = training.get("sft")
        self.sft_steps = 0
        return {"version": cfg.get("version", 0), "params": model.num_params(), "device": device,
                "threads": self.threads, "architecture": cfg["architecture"], "world_size": self.world}

    def _load_hf(self, a: Args, model_dir: str, device: str, threads: Optional[int], reference: str) -> Dict[str, Any]:
        from .policy import load_hf, peft_available, transformers_available

        if not transformers_available():
            raise RequestError("hf: transformers is not importable by this Python")
        dtype = a.string("dtype", required=False, default="auto")
        if dtype not in ("auto", "float32", "bfloat16"):
            raise RequestError(f"dtype: must be auto, float32 or bfloat16, got {dtype!r}")
        gc = a.boolean("gradient_checkpointing", False)
        lora = a.raw("lora")
        if lora is not None:
            if not isinstance(lora, dict):
                raise RequestError("lora: must be an object {r, alpha, dropout, target_modules}")
            unknown = [k for k in lora if k not in ("r", "alpha", "dropout", "target_modules")]
            if unknown:
                raise RequestError(f"lora.{unknown[0]}: unknown field (expected: r, alpha, dropout, target_modules)")
            if not peft_available():
                raise RequestError("lora: peft is not importable by this Python")
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            raise RequestError(f"model_dir: {os.path.join(model_dir, 'config.json')} does not exist")
        if threads is not None:
            self.threads = threads
            self.thread_info = configure_threads(threads)
        try:
            model, adapter = load_hf(model_dir, self._torch_device(device), dtype=dtype, gradient_checkpointing=gc,
                                     lora=lora)
        except (OSError, ValueError) as e:
            raise RequestError(f"model_dir: cannot load a Hugging Face model from {model_dir}: {e}") from None
        if device == "cuda":
            self.torch.backends.cuda.matmul.allow_tf32 = True
        autocast = None
        if device == "cuda" and dtype == "auto" and self.torch.cuda.is_bf16_supported():
            autocast = self.torch.bfloat16  # float32 master weights, bf16 matmuls
        from .rl import RLTrainer

        self.trainer = None
        self.trainer = RLTrainer(model, adapter, autocast_dtype=autocast,
                                 reference="swap" if (lora and reference == "copy") else reference)
        params = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.model, self.model_dir, self.device, self.hf = model, model_dir, device, True
        hf_info = {"dtype": dtype, "gradient_checkpointing": gc, "lora": lora,
                   "autocast": str(autocast) if autocast else None,
                   "attn_implementation": adapter.attn_implementation, "pack": adapter.pack}
        self.config = {"format": "hf", "version": 0, "hf": hf_info}
        self.dirty = False
        self.last_sft = None
        self.sft_steps = 0
        return {"version": 0, "params": params, "trainable_params": trainable, "device": device,
                "threads": self.threads, "hf": self.config["hf"], "vocab_size": adapter.vocab_size,
                "world_size": self.world}

    def cmd_sft(self, req: Dict[str, Any]) -> Dict[str, Any]:
        a = Args(req, ["data", "epochs", "steps", "batch_size", "lr", "warmup", "seed", "weight_decay",
                       "grad_clip", "min_lr_ratio", "betas"])
        self._need_gpt("sft")
        data = a.string("data")
        epochs = a.integer("epochs", required=False, default=1, lo=1)
        steps = a.integer("steps", required=False, lo=1)
        batch_size = a.integer("batch_size", required=False, default=32, lo=1)
        lr = a.number("lr", required=False, default=3e-3, lo=0, lo_open=True)
        warmup = a.number("warmup", required=False, lo=0)
        if warmup is not None and warmup >= 1 and warmup != int(warmup):
            raise RequestError(f"warmup: a step count (integer >= 1) or a fraction in [0, 1), got {warmup}")
        seed = a.integer("seed", required=False, default=0)
        weight_decay = a.number("weight_decay", required=False, default=0.01, lo=0)
        grad_clip = a.number("grad_clip", required=False, default=1.0, lo=0)
        min_lr_ratio = a.number("min_lr_ratio", required=False, default=0.1, lo=0, hi=1)
        betas = a.raw("betas", [0.9, 0.95])
        if (not isinstance(betas, list) or len(betas) != 2
                or not all(_is_num(b) and 0 <= b < 1 for b in betas)):
            raise RequestError(f"betas: must be two numbers in [0, 1), got {betas!r}")

        from .sft import load_jsonl, train_sft

        arch = self.model.architecture
        try:
            examples = load_jsonl(data, arch["vocab_size"], arch["max_seq_len"])
        except ConfigError as e:
            raise RequestError(str(e)) from None
        self.dirty = True
        result = train_sft(self.model, examples, epochs=epochs, steps=steps, batch_size=batch_size, lr=lr,
                           warmup=warmup, seed=seed, weight_decay=weight_decay, betas=tuple(betas),
                           grad_clip=grad_clip, min_lr_ratio=min_lr_ratio)
        if self.world > 1:  # every rank ran the same SFT: make sure they hold the same weights
            import torch.distributed as dist

            with self.torch.no_grad():
                for t in self.model.state_dict().values():
                    dist.broadcast(t, 0)
        self.sft_steps += result["steps"]
        self.last_sft = {"data": data, "examples": len(examples), "epochs": epochs if steps is None else None,
                         "steps": result["steps"], "batch_size": batch_size, "lr": lr, "warmup": warmup,
                         "seed": seed, "loss_first": result["loss_first"], "loss_last": result["loss_last"],
                         "tokens": result["tokens"], "seconds": round(result["seconds"], 3)}
        result["examples"] = len(examples)
        return result

    def cmd_logprobs(self, req: Dict[str, Any]) -> Dict[str, Any]:
        a = Args(req, ["sequences", "starts", "temperature", "top_k", "top_p"])
        self._need_gpt("logprobs")
        arch = self.model.architecture
        V, S = arch["vocab_size"], arch["max_seq_len"]
        seqs = a.raw("sequences")
        if seqs is None:
            raise RequestError("sequences: missing")
        if not isinstance(seqs, list):
            raise RequestError("sequences: must be a list of lists of token ids")
        for b, s in enumerate(seqs):
            if not isinstance(s, list):
                raise RequestError(f"sequences[{b}]: must be a list of token ids")
            if not 1 <= len(s) <= S:
                raise RequestError(f"sequences[{b}]: length {len(s)} is not in [1, max_seq_len {S}]")
            for i, t in enumerate(s):
                if not _is_int(t) or not 0 <= t < V:
                    raise RequestError(f"sequences[{b}][{i}]: token id {t!r} is out of range [0, {V})")
        starts = a.raw("starts")
        if starts is None:
            raise RequestError("starts: missing")
        if not isinstance(starts, list) or len(starts) != len(seqs):
            raise RequestError(f"starts: must be a list of {len(seqs)} integers (one per sequence)")
        for b, st in enumerate(starts):
            if not _is_int(st) or not 1 <= st <= len(seqs[b]):
                raise RequestError(f"starts[{b}]: must be an integer in [1, {len(seqs[b])}] "
                                   f"(the first scored token; token 0 has no context), got {st!r}")
        temperature = a.number("temperature", required=False, default=1.0, lo=0, lo_open=True)
        top_k = a.integer("top_k", required=False, default=0, lo=0)
        top_p = a.number("top_p", required=False, default=1.0, lo=0, hi=1, lo_open=True)

        from .logprobs import sequence_logprobs

        lps = sequence_logprobs(self.model, seqs, starts, temperature, top_k, top_p)
        # -inf (a token outside the top-k / top-p set) is not JSON: null.
        return {"logprobs": [[x if math.isfinite(x) else None for x in row] for row in lps]}

    def _write(self, req: Dict[str, Any], allowed: List[str], default_full: Optional[bool]) -> Dict[str, Any]:
        a = Args(req, allowed)
        self._need_model()
        model_dir = self._model_dir_arg(a)
        full = a.boolean("full", False) if "full" in allowed else False
        if self.hf:
            return self._on_rank0(lambda: self._write_hf(model_dir))
        return self._on_rank0(lambda: self._write_gpt(model_dir, full, default_full))

    def _write_hf(self, model_dir: str) -> Dict[str, Any]:
        from .policy import save_hf

        t0 = time.perf_counter()
        os.makedirs(model_dir, exist_ok=True)
        result = save_hf(self.model, model_dir)
        self.config["version"] = int(self.config.get("version", 0)) + 1
        self.dirty = False
        result.update({"seconds": time.perf_counter() - t0, "version": self.config["version"], "full": False,
                       "onnx": False})
        return result

    def _write_gpt(self, model_dir: str, full: bool, default_full: Optional[bool]) -> Dict[str, Any]:
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
        if self.trainer is not None and self.trainer.step > 0:
            training["rl_steps"] = self.trainer.step
        result = export(self.model, model_dir, full=True if full else default_full,
                        config_updates={"training": training})
        if same:
            self.config = read_config(model_dir)
        self.dirty = False
        result["model_dir"] = model_dir
        return result

    def cmd_export(self, req: Dict[str, Any]) -> Dict[str, Any]:
        # full=false still re-exports the graph when model_dir has none that fits.
        inline = bool(req.get("inline", False))
        if inline and self.hf:
            raise RequestError("inline: only for the project's GPT models (a Hugging Face model is not sampled through ONNX)")
        result = self._write({k: v for k, v in req.items() if k != "inline"}, ["model_dir", "full"], default_full=None)
        if inline:
            # The written files in the answer, for a caller that does not share this file system.
            d = result["model_dir"]
            names = ["config.json", WEIGHTS_FILE, "model.onnx.data"] + (["model.onnx"] if result.get("full") else [])
            result["files"] = {}
            for name in names:
                path = os.path.join(d, name)
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        result["files"][name] = base64.b64encode(f.read()).decode("ascii")
        return result

    FILES_ROOT = "mcp-gym-files"

    def cmd_put_files(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Writes files sent inline (base64) into a directory under <working dir>/mcp-gym-files, for a
        caller that does not share this file system (a run driving a learner on another machine)."""
        a = Args(req, ["dir", "files"])
        rel = a.string("dir")
        parts = rel.replace("\\", "/").split("/")
        if os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
            raise RequestError(f"dir: {rel!r} must be a relative path of plain names (not absolute, no '.' or '..')")
        files = a.raw("files")
        if not isinstance(files, dict) or not files:
            raise RequestError("files: must be an object {file name: base64 data} with at least one file")
        decoded = {}
        for name, data in files.items():
            if name in ("", ".", "..") or "/" in name or "\\" in name:
                raise RequestError(f"files: {name!r} is not a plain file name")
            if not isinstance(data, str):
                raise RequestError(f"files.{name}: must be base64 text")
            try:
                decoded[name] = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(f"files.{name}: not valid base64") from None
        d = os.path.join(os.getcwd(), self.FILES_ROOT, *parts)
        os.makedirs(d, exist_ok=True)
        for name, raw in decoded.items():
            tmp = os.path.join(d, name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(raw)
            os.replace(tmp, os.path.join(d, name))
        return {"dir": d, "files": sorted(decoded), "bytes": sum(len(r) for r in decoded.values())}

    def cmd_save(self, req: Dict[str, Any]) -> Dict[str, Any]:
        # weights.pt, and model.onnx.data when a graph is there; never a new graph.
        return self._write(req, ["model_dir"], default_full=False)

    def cmd_train(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """One RL step on a TrainBatch (rl.py); everything is validated before anything changes."""
        a = Args(req, ["batch", "config"])
        self._need_model()
        if self.trainer is None:
            raise RequestError("model: the last load did not finish (send load again)")
        from .rl import parse_batch, parse_config

        cfg = parse_config(a.raw("config"))
        if a.raw("batch") is None:
            raise RequestError("batch: missing")
        ad = self.trainer.adapter
        batch = parse_batch(a.raw("batch"), ad.vocab_size, ad.max_seq_len)
        result = self.trainer.train(batch, cfg)
        self.dirty = True
        return result

    def cmd_checkpoint_save(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Model, optimizer, schedule, step, reference and RNG states into a directory (temp dir + rename)."""
        a = Args(req, ["dir"])
        self._need_model()
        d = a.string("dir")
        from .rl import save_checkpoint

        extra = {"model_dir": os.path.abspath(self.model_dir) if self.model_dir else None, "hf": self.hf,
                 "sft_steps": self.sft_steps}
        if not self.hf:
            extra["architecture"] = self.model.architecture
        return save_checkpoint(self.trainer, d, extra)

    def cmd_checkpoint_load(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Restore a checkpoint_save of the same model (after load): training continues as if never stopped."""
        a = Args(req, ["dir"])
        self._need_model()
        d = a.string("dir")
        from .rl import load_checkpoint

        result = load_checkpoint(self.trainer, d)  # checks everything before it changes anything
        self.dirty = True
        return result

    def cmd_state(self, req: Dict[str, Any]) -> Dict[str, Any]:
        Args(req, [])
        torch = self.torch
        out: Dict[str, Any] = {
            "protocol": PROTOCOL_VERSION, "pid": os.getpid(), "loaded": self.model is not None,
            "model_dir": self.model_dir, "device": self.device, "threads": self.threads,
            "torch_threads": self.thread_info["torch_threads"], "blas": self.thread_info["blas"],
            "torch": torch.__version__, "cuda_available": self._cuda_available(),
            "dirty": self.dirty, "sft_steps": self.sft_steps,
            "rl_steps": self.trainer.step if self.trainer is not None else 0, "hf": self.hf,
            "world_size": self.world, "rank": self.rank,
        }
        if self.model is not None:
            out.update({"version": self.config.get("version", 0),
                        "params": sum(p.numel() for p in self.model.parameters())})
            if not self.hf:
                out["architecture"] = self.model.architecture
        return out

    def cmd_shutdown(self, req: Dict[str, Any]) -> Dict[str, Any]:
        Args(req, [])
        self.shutdown = True
        return {"dirty": self.dirty}

    # -- dispatch --

    def handle(self, line: str) -> Dict[str, Any]:
        try:
            req = json.loads(line, parse_constant=_reject_constant)
        except (json.JSONDecodeError, ValueError) as e:
            return {"id": None, "ok": False, "error": f"request: invalid JSON: {e}"}
        if not isinstance(req, dict):
            return {"id": None, "ok": False, "error": "request: must be a JSON object"}
        rid = req.get("id")
        cmd = req.get("cmd")
        if cmd is None:
            return {"id": rid, "ok": False, "error": "cmd: missing"}
        if cmd not in self.handlers:
            return {"id": rid, "ok": False,
                    "error": f"cmd: unknown command {cmd!r} (expected: {', '.join(self.handlers)})"}
        t0 = time.perf_counter()
        try:
            result = self.handlers[cmd](req)
        except (RequestError, ConfigError) as e:
            return {"id": rid, "ok": False, "error": str(e)}
        except Exception as e:  # a bug or an I/O failure: report it, keep serving
            _log(f"{cmd} failed:\n{traceback.format_exc()}")
            return {"id": rid, "ok": False, "error": f"{cmd}: {type(e).__name__}: {e}"}
        _log(f"{cmd} ok in {time.perf_counter() - t0:.3f}s")
        return {"id": rid, "ok": True, "result": result}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _encode(resp: Dict[str, Any]) -> str:
    try:
        return json.dumps(resp, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError) as e:
        return json.dumps({"id": resp.get("id"), "ok": False,
                           "error": f"result: cannot be encoded as JSON ({e})"}, separators=(",", ":"))


def _protocol_stream() -> IO[str]:
    """Keep the real stdout for protocol lines; send fd 1 and sys.stdout to stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(out_fd, "w", encoding="utf-8", newline="\n")


def make_dispatcher(learner: "Learner") -> Callable[[str], Dict[str, Any]]:
    """handle(line) on this process; under torchrun (rank 0) the line goes to every rank first."""
    if learner.world <= 1:
        return learner.handle
    from .distributed import broadcast_object

    def dispatch(line: str) -> Dict[str, Any]:
        broadcast_object(line)
        return learner.handle(line)

    return dispatch


def serve(stdin: Optional[IO[bytes]] = None) -> int:
    from .distributed import broadcast_object, follow, init_from_env, shutdown_group

    rank, world, _ = init_from_env()  # (0, 1, 0) unless started by torchrun
    if rank != 0:
        tune_malloc()
        learner = Learner()
        _log(f"rank {rank}/{world} following rank 0 (pid {os.getpid()})")
        follow(learner)
        shutdown_group()
        return 0
    out = _protocol_stream()
    tune_malloc()
    inp = stdin if stdin is not None else sys.stdin.buffer
    learner = Learner()
    dispatch = make_dispatcher(learner)
    _log(f"serving (pid {os.getpid()}, torch {learner.torch.__version__}, threads {learner.threads}"
         f"{f', rank 0 of {world}' if world > 1 else ''})")
    try:
        return _serve_lines(learner, dispatch, inp, out)
    finally:
        if world > 1:
            if not learner.shutdown:
                broadcast_object(None)  # the followers stop too
            shutdown_group()


def _serve_lines(learner: "Learner", dispatch, inp, out) -> int:
    while not learner.shutdown:
        raw = inp.readline()
        if not raw:
            break  # EOF: the client is gone
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        resp = dispatch(line)
        try:
            out.write(_encode(resp) + "\n")
            out.flush()
        except BrokenPipeError:
            _log("stdout closed: exiting")
            return 0
    _log("bye")
    return 0
