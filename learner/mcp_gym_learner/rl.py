"""The GRPO-family trainer behind the `train`, `checkpoint_save` and `checkpoint_load` commands (PROTOCOL.md).

One `train` call = one step of the run: the reference logprobs once (when beta > 0), then `epochs`
passes over the batch, each cut into minibatches (one optimizer step each), each cut into micro-batches
(gradient accumulation). Every loss is normalised by the counts of the whole minibatch (losses.py), so
the micro-batching and the DDP sharding change nothing but rounding. AdamW and the learning-rate
schedule (linear warm-up, then cosine to min_lr_ratio · lr at total_steps) persist across calls.

A batch or a config that fails validation raises ConfigError naming the field, before anything changes.
A step that fails part-way (a non-finite gradient, an exception) is rolled back when the model and the
optimizer state are small enough to snapshot (`SNAPSHOT_MAX_ELEMENTS`), so a batch is never half-applied.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .config import ConfigError
from .losses import LOSSES, loss_terms, token_weights
from .policy import Adapter, LogprobModule
from .runtime import adamw

CHECKPOINT_FORMAT = "mcp-gym-learner-checkpoint/1"
CHECKPOINT_FILE = "trainer.pt"
SNAPSHOT_MAX_ELEMENTS = 64 * 1024 * 1024  # model + optimizer state (elements) up to which a step is atomic


# ---------------------------------------------------------------------------------------------
# validation


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class RLConfig:
    loss: str = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.04
    entropy_coef: float = 0.0
    epochs: int = 2
    minibatch_size: int = 0
    micro_batch_size: int = 16
    max_grad_norm: float = 1.0
    lr: float = 1e-4
    warmup_steps: int = 0
    total_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    ref_reset_every: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    dr_grpo_constant: Optional[float] = None
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # Learning-rate multiplier of the 1-D parameters (norm gains and biases).
    vector_lr_scale: float = 1.0
    logit_chunk: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["betas"] = list(self.betas)
        return d


# (kind, lo, hi, lo_open): kind is "num", "int" or "enum"
_CONFIG_SPEC: Dict[str, Tuple[str, Any, Any, bool]] = {
    "loss": ("enum", None, None, False),
    "clip_low": ("num", 0.0, 1.0, False),
    "clip_high": ("num", 0.0, None, False),
    "beta": ("num", 0.0, None, False),
    "entropy_coef": ("num", 0.0, None, False),
    "epochs": ("int", 1, 1000, False),
    "minibatch_size": ("int", 0, None, False),
    "micro_batch_size": ("int", 1, None, False),
    "max_grad_norm": ("num", 0.0, None, False),
    "lr": ("num", 0.0, 10.0, True),
    "warmup_steps": ("int", 0, None, False),
    "total_steps": ("int", 0, None, False),
    "min_lr_ratio": ("num", 0.0, 1.0, False),
    "weight_decay": ("num", 0.0, None, False),
    "ref_reset_every": ("int", 0, None, False),
    "temperature": ("num", 0.0, None, True),
    "top_k": ("int", 0, None, False),
    "top_p": ("num", 0.0, 1.0, True),
    "seed": ("int", None, None, False),
    "dr_grpo_constant": ("num", 0.0, None, True),
    "betas": ("betas", None, None, False),
    "eps": ("num", 0.0, 1.0, True),
    "logit_chunk": ("int", 1, None, False),
    "vector_lr_scale": ("num", 0.0, 1000.0, True),
}


def parse_config(obj: Any, name: str = "config") -> RLConfig:
    """RLConfig from a JSON object; unknown fields and bad values raise ConfigError naming the field.
    Absent (or null) fields take the defaults of src/trainers/config.ts."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{name}: must be an object")
    cfg = RLConfig()
    for k, v in obj.items():
        if k not in _CONFIG_SPEC:
            raise ConfigError(f"{name}.{k}: unknown field (expected: {', '.join(_CONFIG_SPEC)})")
        if v is None:
            continue
        kind, lo, hi, lo_open = _CONFIG_SPEC[k]
        f = f"{name}.{k}"
        if kind == "enum":
            if v not in LOSSES:
                raise ConfigError(f"{f}: must be one of {', '.join(LOSSES)}, got {v!r}")
        elif kind == "betas":
            if not (isinstance(v, list) and len(v) == 2 and all(_is_num(b) and 0 <= b < 1 for b in v)):
                raise ConfigError(f"{f}: must be two numbers in [0, 1), got {v!r}")
            v = (float(v[0]), float(v[1]))
        else:
            if kind == "int" and not _is_int(v):
                raise ConfigError(f"{f}: must be an integer, got {v!r}")
            if kind == "num" and not _is_num(v):
                raise ConfigError(f"{f}: must be a finite number, got {v!r}")
            if lo is not None and (v <= lo if lo_open else v < lo):
                raise ConfigError(f"{f}: must be {'>' if lo_open else '>='} {lo}, got {v}")
            if hi is not None and v > hi:
                raise ConfigError(f"{f}: must be <= {hi}, got {v}")
            if kind == "num":
                v = float(v)
        setattr(cfg, k, v)
    return cfg


@dataclass
class Batch:
    """A validated TrainBatch, per sequence (CPU tensors). Position i of sequence b is scored when i >= 1 and
    mask[b][i] == 1: `pos[b]` holds those i, `tgt[b]` the tokens ids[b][i], `old[b]` / `adv[b]` their old
    logprobs and advantages (float64)."""

    ids: List[torch.Tensor]
    pos: List[torch.Tensor]
    tgt: List[torch.Tensor]
    old: List[torch.Tensor]
    adv: List[torch.Tensor]
    group_ids: List[str]
    lengths: List[int] = field(default_factory=list)
    scored: List[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def _first_bad(values: Sequence[Any], ok) -> int:
    for i, v in enumerate(values):
        if not ok(v):
            return i
    return -1


def parse_batch(obj: Any, vocab_size: int, max_seq_len: Optional[int], name: str = "batch") -> Batch:
    """Validate a TrainBatch (DESIGN.md) whole; ConfigError names the first bad field."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{name}: must be an object with ids, mask, old_logprobs, advantages, group_ids")
    fields = ("ids", "mask", "old_logprobs", "advantages", "group_ids")
    for k in obj:
        if k not in fields:
            raise ConfigError(f"{name}.{k}: unknown field (expected: {', '.join(fields)})")
    for k in fields:
        if obj.get(k) is None:
            raise ConfigError(f"{name}.{k}: missing")
        if not isinstance(obj[k], list):
            raise ConfigError(f"{name}.{k}: must be a list")
    ids, mask, old, adv, gids = (obj[k] for k in fields)
    B = len(ids)
    if B == 0:
        raise ConfigError(f"{name}.ids: the batch holds no sequence")
    for k, v in (("mask", mask), ("old_logprobs", old), ("advantages", adv), ("group_ids", gids)):
        if len(v) != B:
            raise ConfigError(f"{name}.{k}: {len(v)} entries for {B} sequences")
    per_token = None
    out = Batch([], [], [], [], [], [])
    for b in range(B):
        s = ids[b]
        where = f"{name}.ids[{b}]"
        if not isinstance(s, list):
            raise ConfigError(f"{where}: must be a list of token ids")
        n = len(s)
        if n < 2:
            raise ConfigError(f"{where}: needs at least 2 tokens, got {n}")
        if max_seq_len is not None and n > max_seq_len:
            raise ConfigError(f"{where}: {n} tokens is more than max_seq_len {max_seq_len}")
        i = _first_bad(s, lambda t: type(t) is int and 0 <= t < vocab_size)
        if i >= 0:
            raise ConfigError(f"{where}[{i}]: token id {s[i]!r} is out of range [0, {vocab_size})")
        m = mask[b]
        if not isinstance(m, list) or len(m) != n:
            raise ConfigError(f"{name}.mask[{b}]: must be a list of {n} values 0 or 1 (one per token), "
                              f"got {'a list of ' + str(len(m)) if isinstance(m, list) else type(m).__name__}")
        i = _first_bad(m, lambda t: type(t) is int and (t == 0 or t == 1))
        if i >= 0:
            raise ConfigError(f"{name}.mask[{b}][{i}]: must be 0 or 1, got {m[i]!r}")
        pos = [i for i in range(1, n) if m[i] == 1]
        if not pos:
            raise ConfigError(f"{name}.mask[{b}]: no token with mask 1 after the first (nothing to train on)")
        o = old[b]
        if not isinstance(o, list) or len(o) != n:
            raise ConfigError(f"{name}.old_logprobs[{b}]: must be a list of {n} numbers (one per token)")
        for i in pos:
            v = o[i]
            if not _is_num(v):
                raise ConfigError(f"{name}.old_logprobs[{b}][{i}]: must be a finite number (the sampler's logprob "
                                  f"of a policy token), got {v!r}")
            if v > 1e-3:
                raise ConfigError(f"{name}.old_logprobs[{b}][{i}]: {v} is positive: not a logprob")
        a = adv[b]
        if per_token is None:
            per_token = isinstance(a, list)
        if per_token:
            if not isinstance(a, list) or len(a) != n:
                raise ConfigError(f"{name}.advantages[{b}]: must be a list of {n} numbers (per-token advantages, "
                                  "aligned with ids), like the others")
            for i in pos:
                if not _is_num(a[i]):
                    raise ConfigError(f"{name}.advantages[{b}][{i}]: must be a finite number, got {a[i]!r}")
            av = torch.tensor([float(a[i]) for i in pos], dtype=torch.float64)
        else:
            if not _is_num(a):
                raise ConfigError(f"{name}.advantages[{b}]: must be a finite number (one advantage per "
                                  f"sequence, like the others), got {a!r}")
            av = torch.full((len(pos),), float(a), dtype=torch.float64)
        g = gids[b]
        if not isinstance(g, str) or not g:
            raise ConfigError(f"{name}.group_ids[{b}]: must be a non-empty string, got {g!r}")
        t = torch.tensor(s, dtype=torch.long)
        p = torch.tensor(pos, dtype=torch.long)
        out.ids.append(t)
        out.pos.append(p)
        out.tgt.append(t[p])
        out.old.append(torch.tensor([float(o[i]) for i in pos], dtype=torch.float64))
        out.adv.append(av)
        out.group_ids.append(g)
        out.lengths.append(n)
        out.scored.append(len(pos))
    return out


# ---------------------------------------------------------------------------------------------


def lr_at(step: int, total: int, lr: float, warmup: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine to lr · min_lr_ratio at step total - 1 (then flat);
    total 0: constant after the warm-up."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if total <= 0:
        return lr
    span = max(1, total - warmup - 1)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _dist():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except Exception:  # pragma: no cover
        pass
    return None


def _mix_seed(*parts: int) -> int:
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = ((x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


class Reference:
    """The frozen reference policy. mode "copy": a deep copy of the model (eval, no gradients);
    mode "swap": a copy of the trainable parameters only, swapped into the model for the reference forward
    (for LoRA: the base weights are shared)."""

    def __init__(self, model: torch.nn.Module, adapter: Adapter, mode: str = "copy"):
        if mode not in ("copy", "swap"):
            raise ValueError(f"reference mode: copy or swap, got {mode!r}")
        self.model, self.adapter, self.mode = model, adapter, mode
        self.module: Optional[LogprobModule] = None
        self.snapshot: Optional[List[torch.Tensor]] = None
        self.reset()

    def _trainable(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def reset(self) -> None:
        """The reference becomes the current weights."""
        with torch.no_grad():
            if self.mode == "copy":
                ref = copy.deepcopy(self.model)
                ref.eval()
                for p in ref.parameters():
                    p.requires_grad_(False)
                self.module = LogprobModule(ref, self.adapter)
            else:
                self.snapshot = [p.detach().clone() for p in self._trainable()]

    def state_dict(self) -> Dict[str, Any]:
        if self.mode == "copy":
            return {"mode": "copy", "state": {k: v.detach().cpu().clone() for k, v in
                                              self.module.model.state_dict().items()}}
        return {"mode": "swap", "params": [t.cpu().clone() for t in self.snapshot]}

    def check_state(self, st: Dict[str, Any]) -> None:
        if not isinstance(st, dict) or st.get("mode") != self.mode:
            raise ConfigError(f"dir: the checkpoint's reference is not a {self.mode!r} reference")
        if self.mode == "copy":
            want = self.module.model.state_dict()
            got = st.get("state", {})
            if set(want) != set(got) or any(tuple(want[k].shape) != tuple(got[k].shape) for k in want):
                raise ConfigError("dir: the checkpoint's reference weights do not fit the loaded model")
        else:
            ps = self._trainable()
            got = st.get("params", [])
            if len(got) != len(ps) or any(tuple(a.shape) != tuple(b.shape) for a, b in zip(got, ps)):
                raise ConfigError("dir: the checkpoint's reference parameters do not fit the loaded model")

    def load_state_dict(self, st: Dict[str, Any]) -> None:
        with torch.no_grad():
            if self.mode == "copy":
                self.module.model.load_state_dict(st["state"])
            else:
                self.snapshot = [t.to(p.device, p.dtype).clone() for t, p in zip(st["params"], self._trainable())]

    @contextlib.contextmanager
    def _swapped(self):
        ps = self._trainable()
        saved = [p.detach().clone() for p in ps]
        with torch.no_grad():
            for p, s in zip(ps, self.snapshot):
                p.copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(ps, saved):
                    p.copy_(s)

    def logprobs(self, inputs, sel, targets, temperature: float, chunk: Optional[int]) -> torch.Tensor:
        """Untruncated log_softmax(logits / T) of the targets (no gradient)."""
        with torch.no_grad():
            if self.mode == "copy":
                lp, _, _ = self.module(inputs, sel, targets, temperature, 0, 1.0, chunk, False)
                return lp
            with self._swapped():
                was = self.model.training
                self.model.eval()
                try:
                    lp, _, _ = LogprobModule(self.model, self.adapter)(inputs, sel, targets, temperature, 0, 1.0,
                                                                       chunk, False)
                finally:
                    self.model.train(was)
                return lp


class RLTrainer:
    """The state of RL training on one loaded model: optimizer, step, reference."""

    def __init__(self, model: torch.nn.Module, adapter: Adapter, autocast_dtype: Optional[torch.dtype] = None,
                 reference: str = "copy", ddp: Optional[bool] = None, find_unused_parameters: bool = False):
        self.model = model
        self.adapter = adapter
        self.device = next(model.parameters()).device
        self.autocast_dtype = autocast_dtype
        self.module = LogprobModule(model, adapter)
        d = _dist() if ddp is not False else None
        self.dist = d
        self.world = d.get_world_size() if d else 1
        self.rank = d.get_rank() if d else 0
        if d:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.engine = DDP(self.module, device_ids=ids, broadcast_buffers=False,
                              find_unused_parameters=find_unused_parameters)
        else:
            self.engine = self.module
        self.reference = Reference(model, adapter, reference)
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.step = 0
        self.last_config: Optional[Dict[str, Any]] = None

    # -- pieces --

    def params(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _autocast(self):
        if self.autocast_dtype is not None and self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    def _make_optimizer(self, cfg: RLConfig) -> torch.optim.Optimizer:
        decay, no_decay = [], []
        for p in self.params():
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return adamw(groups, self.device.type, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)

    def _optimizer_for(self, cfg: RLConfig) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = self._make_optimizer(cfg)
        groups = self.optimizer.param_groups  # hyper-parameters may change between calls
        for g in groups:
            g["betas"] = tuple(cfg.betas)
            g["eps"] = cfg.eps
        groups[0]["weight_decay"] = cfg.weight_decay
        return self.optimizer

    def _micro_inputs(self, batch: Batch, idx: Sequence[int]):
        seqs = [batch.ids[i] for i in idx]
        inputs, starts = self.adapter.inputs(seqs, self.device)
        sel = torch.cat([batch.pos[i] - 1 + starts[j] for j, i in enumerate(idx)]).to(self.device)
        targets = torch.cat([batch.tgt[i] for i in idx]).to(self.device)
        seq_index = torch.cat([torch.full((batch.scored[i],), j, dtype=torch.long) for j, i in enumerate(idx)])
        seq_tokens = torch.tensor([batch.scored[i] for i in idx], dtype=torch.long)
        return inputs, sel, targets, seq_index.to(self.device), seq_tokens.to(self.device)

    @staticmethod
    def _micro_batches(shard: Sequence[int], batch: Batch, size: int) -> List[List[int]]:
        """Longest first (stable), `size` sequences each: rows of similar length share a padded micro-batch."""
        order = sorted(shard, key=lambda i: -batch.lengths[i])
        return [order[i: i + size] for i in range(0, len(order), size)]

    def _minibatches(self, B: int, cfg: RLConfig, epoch: int) -> List[List[int]]:
        if cfg.minibatch_size == 0 or cfg.minibatch_size >= B:
            return [list(range(B))]
        g = torch.Generator().manual_seed(_mix_seed(cfg.seed, self.step, epoch))
        perm = torch.randperm(B, generator=g).tolist()
        return [perm[i: i + cfg.minibatch_size] for i in range(0, B, cfg.minibatch_size)]

    def _reference_logprobs(self, batch: Batch, cfg: RLConfig) -> List[torch.Tensor]:
        """The reference's logprobs of every scored token (rank r computes the sequences i with i % W == r,
        then one all-reduce shares them)."""
        B = len(batch)
        offsets = [0]
        for n in batch.scored:
            offsets.append(offsets[-1] + n)
        mine = [i for i in range(B) if i % self.world == self.rank]
        dtype = torch.float64 if next(self.model.parameters()).dtype == torch.float64 else torch.float32
        flat = torch.zeros(offsets[-1], dtype=dtype, device=self.device)
        for mb in self._micro_batches(mine, batch, cfg.micro_batch_size):
            inputs, sel, targets, _, _ = self._micro_inputs(batch, mb)
            with self._autocast():
                lp = self.reference.logprobs(inputs, sel, targets, cfg.temperature, cfg.logit_chunk)
            o = 0
            for i in mb:
                n = batch.scored[i]
                flat[offsets[i]: offsets[i] + n] = lp[o: o + n].to(dtype)
                o += n
        if self.dist:
            self.dist.all_reduce(flat)
        return [flat[offsets[i]: offsets[i + 1]] for i in range(B)]

    def _forward(self, batch: Batch, mb: Sequence[int], cfg: RLConfig, ref: Optional[List[torch.Tensor]],
                 n_seqs: int, n_tokens: int, constant: float, engine=None):
        inputs, sel, targets, seq_index, seq_tokens = self._micro_inputs(batch, mb)
        with self._autocast():
            lp, lp_t, ent = (engine or self.engine)(inputs, sel, targets, cfg.temperature, cfg.top_k, cfg.top_p,
                                                    cfg.logit_chunk, True)
        dev = lp.device
        old = torch.cat([batch.old[i] for i in mb]).to(dev)
        adv = torch.cat([batch.adv[i] for i in mb]).to(dev)
        r = torch.cat([ref[i] for i in mb]).to(dev) if ref is not None else None
        w = token_weights(cfg.loss, seq_index, seq_tokens, n_seqs, n_tokens, constant, lp.dtype)
        return loss_terms(cfg.loss, lp, lp_t, ent, old, adv, r, w, seq_index, seq_tokens, cfg.clip_low,
                          cfg.clip_high, cfg.beta, cfg.entropy_coef), lp

    # -- public --

    def score(self, batch: Batch, cfg: RLConfig) -> List[torch.Tensor]:
        """The current policy's processed logprobs of each sequence's scored tokens, computed exactly as the
        first epoch of `train` computes them (same micro-batches): on-policy old logprobs."""
        out: List[Optional[torch.Tensor]] = [None] * len(batch)
        was = self.model.training
        self.model.train()
        try:
            with torch.no_grad():
                for mb in self._minibatches(len(batch), cfg, 0):
                    for micro in self._micro_batches(mb[self.rank::self.world], batch, cfg.micro_batch_size):
                        inputs, sel, targets, _, _ = self._micro_inputs(batch, micro)
                        with self._autocast():
                            lp, _, _ = self.module(inputs, sel, targets, cfg.temperature, cfg.top_k, cfg.top_p,
                                                   cfg.logit_chunk, False)
                        o = 0
                        for i in micro:
                            out[i] = lp[o: o + batch.scored[i]].detach().cpu()
                            o += batch.scored[i]
        finally:
            self.model.train(was)
        return out  # type: ignore[return-value]

    def gradients(self, batch: Batch, cfg: RLConfig, minibatch: Optional[Sequence[int]] = None) -> Dict[str, float]:
        """Accumulate into .grad the gradient of one minibatch's loss (default: the whole batch), no step;
        returns the normalised loss parts. Single process (tests and tools)."""
        mb = list(range(len(batch))) if minibatch is None else list(minibatch)
        ref = self._reference_logprobs(batch, cfg) if cfg.beta > 0 else None
        constant = cfg.dr_grpo_constant or float(max(batch.lengths))
        n_tokens = sum(batch.scored[i] for i in mb)
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "ent": 0.0}
        for micro in self._micro_batches(mb[self.rank::self.world], batch, cfg.micro_batch_size):
            terms, _ = self._forward(batch, micro, cfg, ref, len(mb), n_tokens, constant, engine=self.module)
            terms.loss.backward()
            sums["loss"] += float(terms.loss.detach())
            sums["pg"] += float(terms.pg)
            sums["kl"] += float(terms.kl) if terms.kl is not None else 0.0
            sums["ent"] += float(terms.ent)
        return sums

    def _state_elements(self) -> int:
        n = sum(p.numel() for p in self.model.parameters())
        if self.optimizer is not None:
            for st in self.optimizer.state.values():
                n += sum(v.numel() for v in st.values() if torch.is_tensor(v))
        return n

    def _snapshot(self):
        if self._state_elements() > SNAPSHOT_MAX_ELEMENTS:
            return None
        return ({k: v.detach().clone() for k, v in self.model.state_dict().items()},
                copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
                self.optimizer is not None)

    def _restore(self, snap) -> None:
        model_state, opt_state, had = snap
        with torch.no_grad():
            self.model.load_state_dict(model_state)
        for p in self.model.parameters():
            p.grad = None
        if had and opt_state is not None:
            self.optimizer.load_state_dict(opt_state)
        elif not had:
            self.optimizer = None

    def train(self, batch: Batch, cfg: RLConfig) -> Dict[str, Any]:
        """One step of the run (see the module's docstring). Returns {"step", "metrics"}."""
        t0 = time.perf_counter()
        snap = self._snapshot()
        try:
            metrics = self._train(batch, cfg)
        except BaseException:
            if snap is not None:
                self._restore(snap)
            raise
        finally:
            self.model.eval()
        seconds = time.perf_counter() - t0
        metrics["seconds"] = seconds
        metrics["learner_tokens_per_s"] = batch.tokens * cfg.epochs / seconds if seconds > 0 else None
        for k, v in metrics.items():  # JSON has no NaN / Infinity
            if isinstance(v, float) and not math.isfinite(v):
                metrics[k] = None
        return {"step": self.step, "metrics": metrics}

    def _train(self, batch: Batch, cfg: RLConfig) -> Dict[str, Any]:
        B = len(batch)
        lr = lr_at(self.step, cfg.total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
        opt = self._optimizer_for(cfg)
        for i, g in enumerate(opt.param_groups):
            g["lr"] = lr * (cfg.vector_lr_scale if i == 1 else 1.0)  # group 1: the 1-D parameters
        self.model.train()
        ref = self._reference_logprobs(batch, cfg) if cfg.beta > 0 else None
        constant = cfg.dr_grpo_constant or float(max(batch.lengths))
        params = self.params()
        per_step: List[torch.Tensor] = []
        rmin, rmax = math.inf, -math.inf
        for epoch in range(cfg.epochs):
            for mb in self._minibatches(B, cfg, epoch):
                n_tokens = sum(batch.scored[i] for i in mb)
                micro = self._micro_batches(mb[self.rank::self.world], batch, cfg.micro_batch_size)
                dummy = not micro
                if dummy:  # this rank has no sequence of the minibatch: a zero-weight pass keeps DDP in step
                    micro = [[mb[0]]]
                opt.zero_grad(set_to_none=True)
                acc = torch.zeros(8, dtype=torch.float64, device=self.device)
                lo = torch.tensor([math.inf], dtype=torch.float64, device=self.device)
                hi = torch.tensor([-math.inf], dtype=torch.float64, device=self.device)
                for j, m in enumerate(micro):
                    sync = j == len(micro) - 1
                    ctx = self.engine.no_sync() if (self.dist and not sync) else contextlib.nullcontext()
                    with ctx:
                        terms, _ = self._forward(batch, m, cfg, ref, len(mb), n_tokens, constant)
                        scale = 0.0 if dummy else float(self.world)
                        (terms.loss * scale).backward()
                    if dummy:
                        continue
                    r = terms.ratio.to(torch.float64)
                    acc += torch.stack([terms.loss.detach().to(torch.float64), terms.pg.to(torch.float64),
                                        (terms.kl if terms.kl is not None else terms.pg * 0).to(torch.float64),
                                        terms.ent.to(torch.float64), terms.kl_old.to(torch.float64),
                                        torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device),
                                        terms.clipped.sum().to(torch.float64), r.sum()])
                    lo = torch.minimum(lo, r.min().reshape(1))
                    hi = torch.maximum(hi, r.max().reshape(1))
                if self.dist:
                    self.dist.all_reduce(acc)
                    self.dist.all_reduce(lo, op=self.dist.ReduceOp.MIN)
                    self.dist.all_reduce(hi, op=self.dist.ReduceOp.MAX)
                grads = [p.grad for p in params if p.grad is not None]
                if cfg.max_grad_norm > 0:
                    gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                elif not grads:
                    gn = torch.zeros((), device=self.device)
                elif hasattr(torch, "_foreach_norm"):  # torch >= 1.13: one fused pass
                    gn = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
                else:  # pragma: no cover
                    gn = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
                if not torch.isfinite(gn):
                    raise FloatingPointError(f"the gradient norm is {float(gn)} (epoch {epoch + 1}); "
                                             "the step is not applied")
                opt.step()
                per_step.append(torch.cat([acc, gn.detach().to(torch.float64).reshape(1).to(acc.device)]))
                rmin = min(rmin, float(lo))
                rmax = max(rmax, float(hi))
        opt.zero_grad(set_to_none=True)
        steps = torch.stack(per_step).cpu()
        mean = steps.mean(0)
        total = steps.sum(0)
        self.step += 1
        reset = cfg.ref_reset_every > 0 and self.step % cfg.ref_reset_every == 0
        if reset:  # ProRL: the reference becomes the current policy, and the optimizer starts afresh
            self.reference.reset()
            self.optimizer = None
        self.last_config = cfg.to_json()
        n = float(total[5])
        return {
            "loss": float(mean[0]), "pg_loss": float(mean[1]),
            "kl": float(mean[2]) if cfg.beta > 0 else None,
            "entropy": float(mean[3]), "kl_old": float(mean[4]),
            "clip_fraction": float(total[6]) / n if n else 0.0,
            "ratio_mean": float(total[7]) / n if n else None,
            "ratio_min": rmin if math.isfinite(rmin) else None,
            "ratio_max": rmax if math.isfinite(rmax) else None,
            "grad_norm": float(mean[8]), "grad_norm_max": float(steps[:, 8].max()),
            "lr": lr, "tokens": batch.tokens, "scored_tokens": sum(batch.scored), "sequences": B,
            "groups": len(set(batch.group_ids)), "optimizer_steps": int(steps.shape[0]),
            "ref_reset": reset, "world_size": self.world,
        }

    # -- checkpoints --

    def state_dict(self) -> Dict[str, Any]:
        rng: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        try:
            import numpy as np

            rng["numpy"] = np.random.get_state()
        except Exception:  # pragma: no cover
            pass
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "scheduler": {"step": self.step, "config": self.last_config},
            "reference": self.reference.state_dict(),
            "rng": rng,
            "world_size": self.world,
        }

    def check_state(self, st: Any) -> None:
        if not isinstance(st, dict) or st.get("format") != CHECKPOINT_FORMAT:
            raise ConfigError(f"dir: not a {CHECKPOINT_FORMAT} checkpoint")
        want = self.model.state_dict()
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
        self.reference.check_state(st.get("reference"))

    def load_state_dict(self, st: Dict[str, Any]) -> None:
        self.check_state(st)
        with torch.no_grad():
            self.model.load_state_dict(st["model"])
        self.reference.load_state_dict(st["reference"])
        self.step = int(st["step"])
        sched = st.get("scheduler") or {}
        self.last_config = sched.get("config")
        self.optimizer = None
        if st.get("optimizer") is not None:
            cfg = parse_config(self.last_config) if self.last_config else RLConfig()
            self.optimizer = self._make_optimizer(cfg)
            self.optimizer.load_state_dict(st["optimizer"])
        rng = st.get("rng") or {}
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


def save_checkpoint(trainer: RLTrainer, path: str, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write the trainer's state into directory `path`: a temporary sibling directory, fsynced, then renamed
    (a directory already there is replaced). Under DDP only rank 0 writes (all ranks must call it)."""
    t0 = time.perf_counter()
    st = trainer.state_dict()
    path = os.path.abspath(path)
    info = {"format": CHECKPOINT_FORMAT, "step": trainer.step, "dir": path, "torch": torch.__version__,
            "time": time.time(), **(extra or {})}
    if trainer.rank == 0:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            buf = io.BytesIO()
            torch.save(st, buf)
            for name, data in ((CHECKPOINT_FILE, buf.getvalue()),
                               ("meta.json", (json.dumps(info, indent=2) + "\n").encode())):
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            _fsync_dir(tmp)
            old = None
            if os.path.exists(path):
                old = f"{path}.old-{os.getpid()}"
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
            os.replace(tmp, path)
            _fsync_dir(parent)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if trainer.dist:
        trainer.dist.barrier()
    info["seconds"] = time.perf_counter() - t0
    info["bytes"] = os.path.getsize(os.path.join(path, CHECKPOINT_FILE)) if os.path.exists(
        os.path.join(path, CHECKPOINT_FILE)) else None
    return info


def read_checkpoint(path: str) -> Dict[str, Any]:
    f = os.path.join(path, CHECKPOINT_FILE)
    if not os.path.isdir(path):
        raise ConfigError(f"dir: {path} is not a directory")
    if not os.path.exists(f):
        raise ConfigError(f"dir: {f} does not exist")
    import inspect

    kwargs = {"map_location": "cpu"}
    if "weights_only" in inspect.signature(torch.load).parameters:
        kwargs["weights_only"] = False  # our own file: RNG states are Python objects
    try:
        return torch.load(f, **kwargs)
    except Exception as e:
        raise ConfigError(f"dir: {f} cannot be read: {type(e).__name__}: {e}") from None


def load_checkpoint(trainer: RLTrainer, path: str) -> Dict[str, Any]:
    st = read_checkpoint(path)
    trainer.load_state_dict(st)
    return {"step": trainer.step, "dir": os.path.abspath(path)}
