"""Checkpoints of RL training (PROTOCOL.md, "Checkpoints"): `checkpoint_save` and `checkpoint_load`.

`dir/trainer.pt` (torch.save) holds the model's state_dict, AdamW's state, the schedule's step and
last config, the step, the reference, the value head of PPO with GAE (or None) and the torch / CUDA / Python /
NumPy RNG states; `dir/meta.json`
describes it. Both are written into `dir.tmp-<pid>`, fsynced, then renamed to `dir`: a kill leaves the
previous checkpoint or the new one. Loading checks that the checkpoint fits the loaded model before it
changes anything.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import shutil
import time
from typing import Any, Dict, Optional

import torch

from .config import ConfigError
from .state_dict import cpu_state
from .rl import RLTrainer
from .rl_config import RLConfig, config_from_checkpoint

CHECKPOINT_FORMAT = "mcp-gym-learner-checkpoint/1"
CHECKPOINT_FILE = "trainer.pt"


def _rng_state() -> Dict[str, Any]:
    rng: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        rng["numpy"] = np.random.get_state()
    except Exception:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def _set_rng_state(rng: Dict[str, Any]) -> None:
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "python" in rng:
        random.setstate(rng["python"])
    if "numpy" in rng:
        try:
            import numpy as np

            np.random.set_state(rng["numpy"])
        except Exception:  # pragma: no cover
            pass
    if "cuda" in rng and torch.cuda.is_available():
        try:
            torch.cuda.set_rng_state_all(rng["cuda"])
        except Exception:  # pragma: no cover (another number of devices)
            pass


def trainer_state(trainer: RLTrainer) -> Dict[str, Any]:
    if trainer.fsdp:  # the model, AdamW and the reference are in the sharded part (fsdp.py)
        from .fsdp import FSDP_DIR

        return {
            "format": CHECKPOINT_FORMAT,
            "step": trainer.step,
            "sharded": FSDP_DIR,
            "optimizer_saved": trainer.optimizer is not None,
            "reference_mode": trainer.reference.mode,
            "scheduler": {"step": trainer.step, "config": trainer.last_config},
            "value_head": (cpu_state(trainer.value_head.state_dict())
                           if trainer.value_head is not None else None),
            "rng": _rng_state(),
            "world_size": trainer.world,
        }
    return {
        "format": CHECKPOINT_FORMAT,
        "step": trainer.step,
        "model": cpu_state(trainer.model.state_dict()),
        "optimizer": trainer.optimizer.state_dict() if trainer.optimizer is not None else None,
        "scheduler": {"step": trainer.step, "config": trainer.last_config},
        "reference": trainer.reference.state_dict(),
        # PPO with GAE: the value head (not part of the model: exports never see it); None without one
        "value_head": (cpu_state(trainer.value_head.state_dict())
                       if trainer.value_head is not None else None),
        "rng": _rng_state(),
        "world_size": trainer.world,
    }


def check_trainer_state(trainer: RLTrainer, st: Any) -> None:
    """ConfigError (`dir: ...`) unless `st` is a checkpoint of a model shaped like the loaded one."""
    if not isinstance(st, dict) or st.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"dir: not a {CHECKPOINT_FORMAT} checkpoint")
    want = trainer.model.state_dict()
    got = st.get("model") or {}
    if set(want) != set(got):
        missing = sorted(set(want) - set(got))[:3]
        extra = sorted(set(got) - set(want))[:3]
        raise ConfigError(f"dir: the checkpoint's model does not fit the loaded model (missing {missing}, "
                          f"unexpected {extra})")
    for k, v in want.items():
        if tuple(v.shape) != tuple(got[k].shape):
            raise ConfigError(f"dir: the checkpoint's {k} is {list(got[k].shape)}, the loaded model's "
                              f"{list(v.shape)}")
    trainer.reference.check_state(st.get("reference"))
    head = st.get("value_head")
    if head is not None:
        dim = trainer.value_dim()
        w = head.get("weight") if isinstance(head, dict) else None
        if w is None or tuple(w.shape) != (1, dim) or tuple(head.get("bias", torch.zeros(0)).shape) != (1,):
            raise ConfigError(f"dir: the checkpoint's value head is {list(w.shape) if w is not None else '?'}, the "
                              f"loaded model's hidden states need [1, {dim}]")


def _restore_sharded(trainer: RLTrainer, st: Dict[str, Any], path: str) -> None:
    """A checkpoint written under FSDP (any world size) into this trainer (FSDP on any world size, or one
    process): DCP reshards the model, AdamW's state and the reference."""
    from .fsdp import load_sharded

    if st.get("reference_mode") != trainer.reference.mode:
        raise ConfigError(f"dir: the checkpoint's reference is not a {trainer.reference.mode!r} reference")
    saved = (st.get("scheduler") or {}).get("config")
    cfg = config_from_checkpoint(saved) if saved else RLConfig()
    head = st.get("value_head")
    trainer.value_head = None
    if head is not None:
        trainer.ensure_value_head()
        with torch.no_grad():
            trainer.value_head.load_state_dict(head)
    trainer.optimizer = trainer.make_optimizer(cfg) if st.get("optimizer_saved") else None
    try:
        load_sharded(trainer, os.path.join(path, st["sharded"]), trainer.optimizer is not None)
    except Exception as e:  # not a ConfigError: DCP loads in place, so the trainer may be half-restored
        raise RuntimeError(f"dir: the sharded checkpoint {os.path.join(path, st['sharded'])} could not be restored "
                           f"({type(e).__name__}: {str(e)[:500]}); the loaded model may be partly overwritten: send "
                           "load again") from None
    trainer.step = int(st["step"])
    trainer.last_config = cfg.to_json() if saved else None
    _set_rng_state(st.get("rng") or {})


def restore_trainer(trainer: RLTrainer, st: Dict[str, Any], path: Optional[str] = None) -> None:
    """The trainer (weights, reference, step, optimizer, schedule) and the RNGs as `st` holds them."""
    if st.get("format") == CHECKPOINT_FORMAT and st.get("sharded"):
        if path is None:
            raise ConfigError("dir: a sharded checkpoint is restored from its directory")
        return _restore_sharded(trainer, st, path)
    if trainer.fsdp:
        raise ConfigError("dir: a checkpoint of one process or of DDP (its weights whole in trainer.pt): an FSDP "
                          "learner resumes from the checkpoints FSDP writes; resume this one without --fsdp")
    check_trainer_state(trainer, st)
    saved = (st.get("scheduler") or {}).get("config")
    cfg = config_from_checkpoint(saved) if saved else RLConfig()  # checked before anything changes
    with torch.no_grad():
        trainer.model.load_state_dict(st["model"])
    trainer.reference.load_state_dict(st["reference"])
    # the value head as saved: restored, or none (a checkpoint without one: the next GAE call makes a fresh one,
    # logged); before the optimizer, whose groups include it
    trainer.value_head = None
    if st.get("value_head") is not None:
        trainer.ensure_value_head()
        with torch.no_grad():
            trainer.value_head.load_state_dict(st["value_head"])
    trainer.step = int(st["step"])
    trainer.last_config = cfg.to_json() if saved else None
    trainer.optimizer = None
    if st.get("optimizer") is not None:
        trainer.optimizer = trainer.make_optimizer(cfg)
        trainer.optimizer.load_state_dict(st["optimizer"])
    _set_rng_state(st.get("rng") or {})


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_dir(path: str, files: Dict[str, Any]) -> None:
    """`files` into directory `path`: a temporary sibling, fsynced, then renamed (replacing `path`)."""
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        _write_files(tmp, files)
        _replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_files(directory: str, files: Dict[str, Any]) -> None:
    """Each file's bytes, or a state torch.save writes straight into the file (no copy of it in memory)."""
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            if isinstance(data, (bytes, bytearray)):
                f.write(data)
            else:
                torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())
    _fsync_dir(directory)


def _replace_dir(tmp: str, path: str) -> None:
    """The complete directory `tmp` renamed to `path` (the one there first moved aside, then removed)."""
    old = None
    if os.path.exists(path):
        old = f"{path}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))
    if old:
        shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(trainer: RLTrainer, path: str, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write the trainer's state into directory `path` (see the module's docstring). Under DDP only rank 0
    writes (all ranks must call it)."""
    t0 = time.perf_counter()
    st = trainer_state(trainer)
    path = os.path.abspath(path)
    info = {"format": CHECKPOINT_FORMAT, "step": trainer.step, "dir": path, "torch": torch.__version__,
            "time": time.time(), **(extra or {})}
    if trainer.fsdp:
        _save_sharded(trainer, st, path, info)
    elif trainer.rank == 0:
        _write_dir(path, {CHECKPOINT_FILE: st, "meta.json": (json.dumps(info, indent=2) + "\n").encode()})
    if trainer.dist:
        trainer.dist.barrier()
    info["seconds"] = time.perf_counter() - t0
    f = os.path.join(path, CHECKPOINT_FILE)
    info["bytes"] = os.path.getsize(f) if os.path.exists(f) else None
    return info


def _save_sharded(trainer: RLTrainer, st: Dict[str, Any], path: str, info: Dict[str, Any]) -> None:
    """FSDP: every rank writes its shards into `path.tmp-sharded/dcp` (torch.distributed.checkpoint), rank 0 adds
    trainer.pt (the rest of the state) and meta.json, fsyncs, and renames the directory into place."""
    from .fsdp import save_sharded

    info.update({"sharded": st["sharded"], "world_size": trainer.world})
    tmp = f"{path}.tmp-sharded"

    def prepare() -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)

    _on_rank0_together(trainer, prepare)
    save_sharded(trainer, os.path.join(tmp, st["sharded"]))
    trainer.dist.barrier()
    _on_rank0_together(trainer, lambda: _finish_sharded(st, path, tmp, info))


def _on_rank0_together(trainer: RLTrainer, fn) -> None:
    """fn() on rank 0, then every rank learns whether it failed (one all-reduce) and all raise together: a failure of
    rank 0's files must not leave the other ranks in the next collective while rank 0 answers the error."""
    err: Optional[BaseException] = None
    if trainer.rank == 0:
        try:
            fn()
        except Exception as e:
            err = e
    flag = torch.tensor([1 if err is not None else 0], dtype=torch.int64,
                        device=trainer.device if trainer.device.type == "cuda" else "cpu")
    trainer.dist.all_reduce(flag)
    if err is not None:
        err.ranks_in_step = True  # every rank raises here: the learner stays usable
        raise err
    if int(flag.item()):
        e = RuntimeError("checkpoint_save: rank 0 could not write the checkpoint's files (its answer says why)")
        e.ranks_in_step = True
        raise e


def _finish_sharded(st: Dict[str, Any], path: str, tmp: str, info: Dict[str, Any]) -> None:
    """Rank 0: trainer.pt and meta.json beside the shards, everything fsynced, the directory renamed into place."""
    _write_files(tmp, {CHECKPOINT_FILE: st, "meta.json": (json.dumps(info, indent=2) + "\n").encode()})
    for root, _, names in os.walk(os.path.join(tmp, st["sharded"])):  # the shards each rank wrote
        for n in names:
            fd = os.open(os.path.join(root, n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(os.path.join(tmp, st["sharded"]))
    _replace_dir(tmp, path)


def read_checkpoint(path: str) -> Dict[str, Any]:
    f = os.path.join(path, CHECKPOINT_FILE)
    if not os.path.isdir(path):
        raise ConfigError(f"dir: {path} is not a directory")
    if not os.path.exists(f):
        raise ConfigError(f"dir: {f} does not exist")
    kwargs: Dict[str, Any] = {"map_location": "cpu"}
    if "weights_only" in inspect.signature(torch.load).parameters:
        kwargs["weights_only"] = False  # our own file: RNG states are Python objects
    try:
        return torch.load(f, **kwargs)
    except Exception as e:
        raise ConfigError(f"dir: {f} cannot be read: {type(e).__name__}: {e}") from None


def load_checkpoint(trainer: RLTrainer, path: str) -> Dict[str, Any]:
    st = read_checkpoint(path)
    restore_trainer(trainer, st, os.path.abspath(path))
    return {"step": trainer.step, "dir": os.path.abspath(path)}
