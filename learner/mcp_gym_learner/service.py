"""The command service: the learner's state (at most one loaded model, its trainer) and one method per
command of the contract (PROTOCOL.md). `handle(line)` takes one request line and returns its response.

Every request is validated against its command's schema (protocol.py) before the command runs; a
command then checks what the schema cannot (semantic rules, the loaded model) before it changes
anything. The model's kind is a backend (gpt_backend.py, hf_backend.py); the RL step is rl.py's.
Under torchrun every rank handles every request; files are written by rank 0 alone.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, Optional

import torch

from .backend import Backend
from .config import ConfigError
from .protocol import COMMANDS, PROTOCOL_VERSION, RequestError, decode_request, validate_request
from .runtime import configure_threads, default_threads, trim_after_calls, trim_heap

Arguments = Dict[str, Any]


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


def cuda_available() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


class LearnerService:
    """The state behind the protocol: at most one loaded model (a Backend) and its RL trainer."""

    def __init__(self) -> None:
        from .distributed import current

        self.backend: Optional[Backend] = None
        self.trainer = None  # rl.RLTrainer of the loaded model (optimizer, step, reference)
        self.device = "cpu"
        self.threads = default_threads()
        self.thread_info = configure_threads(self.threads)
        self.dirty = False  # weights changed since the last save/export
        self.shutdown = False
        self.trim = trim_after_calls()  # MCP_GYM_LEARNER_TRIM=1 (runtime.trim_after_calls)
        self.rank, self.world, self.local_rank = current()
        from .fsdp import requested

        # under torchrun: DDP replicas, or FSDP2 shards (`serve --fsdp`, MCP_GYM_PARALLEL=fsdp; fsdp.py)
        self.parallel = requested() if self.world > 1 else "none"
        missing = [cmd for cmd in COMMANDS if not hasattr(self, f"cmd_{cmd}")]
        if missing:
            raise RuntimeError(f"protocol.schema.json has commands this learner does not implement: {missing}")
        self.handlers: Dict[str, Callable[[Arguments], Any]] = {cmd: getattr(self, f"cmd_{cmd}") for cmd in COMMANDS}

    @property
    def model(self) -> Optional[torch.nn.Module]:
        return self.backend.model if self.backend is not None else None

    # -- helpers --

    def _loaded(self, what: Optional[str] = None) -> Backend:
        """The loaded model's backend; with `what`, one that supports it."""
        if self.backend is None:
            raise RequestError("model: no model is loaded (send load first)")
        if what is not None:
            self.backend.require(what)
        return self.backend

    def _on_rank0(self, fn: Callable[[], Any]) -> Any:
        """Under torchrun only rank 0 writes files; the others wait for it (and answer nothing)."""
        if self.world <= 1:
            return fn()
        from .distributed import barrier

        try:
            return fn() if self.rank == 0 else {"rank": self.rank}
        except Exception as e:
            e.ranks_in_step = True  # the barrier below still runs on every rank: rank 0 answers the error
            raise
        finally:
            barrier()

    def _torch_device(self, device: str) -> str:
        return f"cuda:{self.local_rank}" if device == "cuda" and self.world > 1 else device

    # -- commands --

    def cmd_create(self, a: Arguments) -> Dict[str, Any]:
        from .gpt_backend import create

        return self._on_rank0(lambda: create(a))

    def cmd_load(self, a: Arguments) -> Dict[str, Any]:
        from .gpt_backend import GPTBackend
        from .hf_backend import HFBackend, is_hf_dir
        from .rl import RLTrainer

        model_dir = a["model_dir"]
        device = a.get("device") or ("cuda" if cuda_available() else "cpu")
        if device == "cuda" and not cuda_available():
            raise RequestError("device: cuda is not available to this torch")
        hf = a["hf"] if "hf" in a else is_hf_dir(model_dir)
        if self.parallel == "fsdp":
            from .fsdp import available

            if not hf:
                raise RequestError("model_dir: FSDP (--fsdp) shards Hugging Face models; the project's GPT models "
                                   "train under DDP (torchrun without --fsdp)")
            if not available():
                raise RequestError(f"FSDP (--fsdp) needs torch.distributed.fsdp.fully_shard (torch >= 2.6); this "
                                   f"torch is {torch.__version__}")
        if a.get("compute_dtype") is not None and self.world > 1:
            raise RequestError("compute_dtype: a compute copy is for one process (not under torchrun)")
        backend = (HFBackend if hf else GPTBackend).load(model_dir, a, device, self._torch_device(device))
        # Everything checked: switch.
        if "threads" in a:
            self.threads = a["threads"]
            self.thread_info = configure_threads(self.threads)
        self.trainer = None  # the old reference goes before the new one is copied
        self.trainer = RLTrainer(backend.model, backend.adapter, autocast_dtype=backend.autocast_dtype,
                                 reference=backend.reference_mode(a.get("reference", "copy")),
                                 parallel=self.parallel, compute_dtype=backend.compute_dtype)
        backend.compute = self.trainer.compute  # sft trains through the same copy
        self.backend, self.device, self.dirty = backend, device, False
        out = {**backend.load_result(), "device": device, "threads": self.threads, "world_size": self.world}
        if self.world > 1:
            out["parallel"] = self.parallel
            if self.trainer.fsdp_info is not None:
                out["fsdp"] = self.trainer.fsdp_info
                if isinstance(out.get("hf"), dict):  # FSDP turned the shared prefix off (rl.py)
                    out["hf"]["share_prefix"] = self.backend.adapter.share_prefix
        return out

    def _not_sharded(self, what: str) -> None:
        if self.trainer is not None and self.trainer.fsdp:
            raise RequestError(f"{what}: not available under FSDP (the model is sharded over the ranks); run it in "
                               "one process or under DDP, e.g. on the exported checkpoint")

    def cmd_sft(self, a: Arguments) -> Dict[str, Any]:
        backend = self._loaded("sft")
        self._not_sharded("sft")
        examples = backend.sft_examples(a)  # validated whole before training starts
        self.dirty = True
        result = backend.sft(a, examples)
        if self.world > 1:  # every rank ran the same SFT: make sure they hold the same weights
            import torch.distributed as dist

            with torch.no_grad():
                for t in backend.model.state_dict().values():
                    dist.broadcast(t, 0)
        return result

    def cmd_logprobs(self, a: Arguments) -> Dict[str, Any]:
        backend = self._loaded("logprobs")
        self._not_sharded("logprobs")
        return backend.logprobs(a)

    def cmd_train(self, a: Arguments) -> Dict[str, Any]:
        """One RL step on a TrainBatch (rl.py); everything is validated before anything changes."""
        self._loaded()
        if self.trainer is None:
            raise RequestError("model: the last load did not finish (send load again)")
        from .batch import parse_batch
        from .rl_config import parse_config

        cfg = parse_config(a.get("config"))
        ad = self.trainer.adapter
        batch = parse_batch(a["batch"], ad.vocab_size, ad.max_seq_len)
        result = self.trainer.train(batch, cfg)
        self.dirty = True
        return result

    def cmd_checkpoint_save(self, a: Arguments) -> Dict[str, Any]:
        backend = self._loaded()
        from .checkpoint import save_checkpoint

        extra = {"model_dir": os.path.abspath(backend.model_dir), "hf": backend.name == "hf",
                 "sft_steps": backend.sft_steps, **backend.describe()}
        return save_checkpoint(self.trainer, a["dir"], extra)

    def cmd_checkpoint_load(self, a: Arguments) -> Dict[str, Any]:
        self._loaded()
        from .checkpoint import load_checkpoint

        result = load_checkpoint(self.trainer, a["dir"])  # checks everything before it changes anything
        self.dirty = True
        return result

    def _write(self, a: Arguments, full: Optional[bool], inline: bool = False) -> Dict[str, Any]:
        backend = self._loaded("inline" if inline else None)
        model_dir = a.get("model_dir", backend.model_dir)
        rl_steps = self.trainer.step if self.trainer is not None else 0

        state = None
        if self.trainer is not None and self.trainer.fsdp:  # every rank gathers; rank 0 writes the full weights
            if inline:
                raise RequestError("inline: not available under FSDP")
            from .distributed import broadcast_object
            from .fsdp import full_model_state
            from .hf_export import read_onnx_config

            # LoRA without an ONNX export to update: the adapter alone is gathered (not the frozen base, GBs a step);
            # rank 0 decides (the others may not see model_dir), every rank gathers the same
            adapter_only = broadcast_object(bool(backend.lora) and read_onnx_config(model_dir) is None
                                            if self.rank == 0 else None)
            state = full_model_state(self.trainer, trainable_only=adapter_only)

        def write() -> Dict[str, Any]:
            result = backend.write(model_dir, full, rl_steps, state=state)
            if inline:  # the written files in the answer, for a caller that does not share this file system
                result["files"] = backend.inline_files(result)
            return result

        result = self._on_rank0(write)
        self.dirty = False
        return result

    def cmd_export(self, a: Arguments) -> Dict[str, Any]:
        # full=false still re-exports the graph when model_dir has none that fits.
        return self._write(a, True if a.get("full") else None, inline=a.get("inline", False))

    def cmd_save(self, a: Arguments) -> Dict[str, Any]:
        # weights.pt, and model.onnx.data when a graph is there; never a new graph.
        return self._write(a, False)

    def cmd_put_files(self, a: Arguments) -> Dict[str, Any]:
        from .put_files import put_files

        return self._on_rank0(lambda: put_files(a))

    def cmd_state(self, a: Arguments) -> Dict[str, Any]:
        b = self.backend
        out: Dict[str, Any] = {
            "protocol": PROTOCOL_VERSION, "pid": os.getpid(), "loaded": b is not None,
            "model_dir": b.model_dir if b is not None else None, "device": self.device, "threads": self.threads,
            "torch_threads": self.thread_info["torch_threads"], "blas": self.thread_info["blas"],
            "torch": torch.__version__, "cuda_available": cuda_available(),
            "dirty": self.dirty, "sft_steps": b.sft_steps if b is not None else 0,
            "rl_steps": self.trainer.step if self.trainer is not None else 0,
            "hf": b is not None and b.name == "hf", "world_size": self.world, "rank": self.rank,
        }
        if b is not None:
            out.update({"version": b.version, "params": b.params(), **b.describe()})
        return out

    def cmd_shutdown(self, a: Arguments) -> Dict[str, Any]:
        self.shutdown = True
        return {"dirty": self.dirty}

    # -- dispatch --

    def handle(self, line: str) -> Dict[str, Any]:
        """One request line -> its response {id, ok, result | error}; never raises."""
        try:
            req = decode_request(line)
        except RequestError as e:
            return {"id": None, "ok": False, "error": str(e)}
        rid = req.get("id")
        cmd = req.get("cmd")
        if cmd is None:
            return {"id": rid, "ok": False, "error": "cmd: missing"}
        if not isinstance(cmd, str) or cmd not in self.handlers:
            return {"id": rid, "ok": False,
                    "error": f"cmd: unknown command {cmd!r} (expected: {', '.join(self.handlers)})"}
        t0 = time.perf_counter()
        try:
            result = self.handlers[cmd](validate_request(cmd, req))
        except ConfigError as e:  # RequestError too: refused, nothing changed
            return {"id": rid, "ok": False, "error": str(e)}
        except Exception as e:  # a bug or an I/O failure: report it, keep serving
            _log(f"{cmd} failed:\n{traceback.format_exc()}")
            if self.world > 1 and not isinstance(e, FloatingPointError) and not getattr(e, "ranks_in_step", False):
                # Under torchrun such a failure may be this rank's alone (out of memory, a file only it writes): the
                # others would wait for it in their next collective for ever. Exit: torchrun stops every rank, and
                # the caller restarts the learner from its last checkpoint. (A non-finite gradient norm is
                # all-reduced first: every rank raises it together and the step is rolled back everywhere.)
                _log(f"rank {self.rank}: exiting so that torchrun stops every rank (the ranks could not stay in step)")
                sys.stderr.flush()
                os._exit(1)
            return {"id": rid, "ok": False, "error": f"{cmd}: {type(e).__name__}: {e}"}
        if self.trim and cmd in ("train", "sft", "logprobs"):
            trim_heap()  # MCP_GYM_LEARNER_TRIM=1: the freed heap back to the OS while this learner waits
        _log(f"{cmd} ok in {time.perf_counter() - t0:.3f}s")
        return {"id": rid, "ok": True, "result": result}
