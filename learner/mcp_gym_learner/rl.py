"""One RL step of the GRPO family: the trainer behind `train` (PROTOCOL.md, "Training").

One `train` call = one step of the run: the reference logprobs once (when beta > 0), the learner's old
logprobs once (with an off-policy correction, when the call makes more than one optimizer step; with one
step they are the first forward's own logprobs, detached), then `epochs` passes over the batch, each cut
into minibatches (one optimizer step each), each cut into micro-batches (gradient accumulation). Every
loss is normalised by the counts of the whole minibatch (losses.py), so the micro-batching and the DDP
sharding change nothing but rounding. AdamW and the learning-rate schedule (linear warm-up, then cosine
to min_lr_ratio · lr at total_steps) persist across calls.

The batch and the config arrive validated (batch.py, rl_config.py). A step that fails part-way (a
non-finite gradient, an exception) is rolled back when the model and the optimizer state are small
enough to snapshot (`SNAPSHOT_MAX_ELEMENTS`: the trainable parameters, for LoRA the adapter only, and
the optimizer state), so a batch is never half-applied. Checkpoints of this
state: checkpoint.py.

PPO with GAE (a batch with `rewards`, gae.py): a value head on the final hidden states is created on the first
such call (zero), its values V_old of every scored token are computed once before the first optimizer step
(with the learner's old logprobs when those need a pre-pass: one forward gives both), the advantages come from
GAE over them, and every forward adds value_coef times the clipped value loss to the policy loss. The head is
one more parameter group of the same AdamW (no weight decay), clipped with the model's gradient, rolled back
with it; under DDP its gradient is all-reduced by hand (it is not inside the DDP module).

The trainer's pieces, each a mixin of RLTrainer: rl_passes.py (the no-gradient pre-passes: reference, old
logprobs, GAE values; micro-batching), rl_update.py (the optimizer steps of a call), rl_optim.py (parameters,
AdamW, the schedule), rl_atomic.py (snapshot, rollback, the weights' fingerprint). This module holds the trainer's
state, the loss of one micro-batch (`_forward`) and the entry points (`train`, `gradients`; `score`).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from .batch import Batch, micro_inputs
from .compute_copy import ComputeCopy
from .gae import ValueTargets, check_gae, value_terms
from .losses import ImportanceWeights, importance_weights, loss_terms, token_weights
from .policy import Adapter, LogprobModule
from .reference import Reference
from .rl_atomic import SNAPSHOT_MAX_ELEMENTS, AtomicSteps, weights_fingerprint
from .rl_config import RLConfig, check_config
from .rl_optim import Optimizing, lr_at
from .rl_passes import PrePasses
from .rl_update import UpdateLoop

# Batch and RLConfig too: what a caller that builds a step by hand needs (bench/learner_gpu.py).
__all__ = ["Batch", "RLConfig", "RLTrainer", "lr_at", "SNAPSHOT_MAX_ELEMENTS"]


def _dist():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except Exception:  # pragma: no cover
        pass
    return None


class RLTrainer(PrePasses, UpdateLoop, Optimizing, AtomicSteps):
    """The state of RL training on one loaded model: optimizer, step, reference."""

    def __init__(self, model: torch.nn.Module, adapter: Adapter, autocast_dtype: Optional[torch.dtype] = None,
                 reference: str = "copy", ddp: Optional[bool] = None, find_unused_parameters: bool = False,
                 parallel: str = "ddp", compute_dtype: Optional[torch.dtype] = None):
        self.model = model
        self.adapter = adapter
        self.device = next(model.parameters()).device
        self.autocast_dtype = autocast_dtype
        d = _dist() if ddp is not False else None
        # compute_dtype (compute_copy.py): forwards and backwards on a low-precision copy, AdamW on `model`
        self.compute: Optional[ComputeCopy] = None
        if compute_dtype is not None:
            if d:
                raise ValueError("compute_dtype: a compute copy is for one process (not DDP or FSDP)")
            self.compute = ComputeCopy(model, compute_dtype)
        self.module = LogprobModule(self.compute.model if self.compute else model, adapter)
        self.dist = d
        self.world = d.get_world_size() if d else 1
        self.rank = d.get_rank() if d else 0
        # FSDP2 (fsdp.py): the parameters sharded over the ranks; the reference is made before the model is sharded
        self.fsdp = bool(d) and parallel == "fsdp"
        self.fsdp_info: Optional[Dict[str, Any]] = None
        self.reference = Reference(model, adapter, reference)
        if self.fsdp:
            from .fsdp import shard

            # The shared prefix runs each decoder layer twice in one forward (the prefix, then the rests): FSDP2
            # frees a layer's gathered weights after each call, which the first call's backward still needs.
            if getattr(adapter, "share_prefix", False):
                adapter.share_prefix = False
            self.fsdp_info = shard(self.module, model, self.device)
            if self.reference.mode == "copy":
                shard(self.reference.module, self.reference.module.model, self.device)
                self.reference.sharded = True
            else:  # swap (LoRA): the snapshot of the trainable parameters, as shards; forwards through the root
                self.reference.reset()
                self.reference.root = self.module
            self.engine = self.module
        elif d:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.engine = DDP(self.module, device_ids=ids, broadcast_buffers=False,
                              find_unused_parameters=find_unused_parameters)
        else:
            self.engine = self.module
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.step = 0
        self.last_config: Optional[Dict[str, Any]] = None
        self.value_head: Optional[torch.nn.Linear] = None  # PPO with GAE (gae.py); never part of the model

    def _fingerprint_all(self, fp: tuple) -> tuple:
        """Under FSDP each rank fingerprints its own shards: the sums over the ranks (the same on every rank)."""
        if not self.fsdp:
            return fp
        words = torch.tensor([fp[0] % (1 << 40)], dtype=torch.int64)
        total = torch.tensor([fp[1]], dtype=torch.float64)
        if self.device.type == "cuda":
            words, total = words.to(self.device), total.to(self.device)
        self.dist.all_reduce(words)
        self.dist.all_reduce(total)
        return (int(words.item()), float(total.item()))

    def own_ratio(self) -> bool:
        """The PPO ratio's denominator is the learner's own old logprobs o_t even without an off-policy correction:
        with a compute copy, whose bf16 forward differs from the sampler's float32 logprobs by rounding alone
        (about 1e-2 nats, p99 0.3 on SmolLM2-135M), which would otherwise clip ~1% of the tokens for nothing."""
        return self.compute is not None

    def sync_compute(self) -> None:
        """The master weights into the compute copy, when there is one (before a call, after each step)."""
        if self.compute is not None:
            self.compute.sync()

    def _autocast(self):
        if self.autocast_dtype is not None and self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    # -- the loss of one micro-batch --

    def _forward(self, batch: Batch, mb: Sequence[int], cfg: RLConfig, ref: Optional[List[torch.Tensor]],
                 n_seqs: int, n_tokens: int, engine=None, learner_old: Optional[List[torch.Tensor]] = None,
                 importance: bool = False, vt: Optional[ValueTargets] = None, n_valued: float = 0.0):
        """The loss terms of micro-batch `mb`, and its off-policy statistics (ImportanceWeights) when there is
        a correction or `importance` asks for them (else None). learner_old: o_t from the pre-pass, or None:
        o_t = this forward's own logprobs (detached). vt: GAE's targets (the value loss is added, normalised by
        n_valued, the valued tokens of the whole minibatch)."""
        inputs, sel, targets, seq_index, seq_tokens = micro_inputs(batch, mb, self.adapter, self.device)
        with self._autocast():
            out = (engine or self.engine)(inputs, sel, targets, cfg.temperature, cfg.top_k, cfg.top_p,
                                          cfg.logit_chunk, True, return_hidden=vt is not None)
            lp, lp_t, ent = out[:3]
            values = self.value_head(out[3].to(self.value_head.weight.dtype)).reshape(-1) if vt is not None else None
        dev = lp.device
        old = torch.cat([batch.old[i] for i in mb]).to(dev)  # s_t: the sampler's
        adv = torch.cat([batch.adv[i] for i in mb]).to(dev)
        r = torch.cat([ref[i] for i in mb]).to(dev) if ref is not None else None
        w = token_weights(cfg.loss, seq_index, seq_tokens, n_seqs, n_tokens, cfg.dr_grpo_constant, lp.dtype)
        iw: Optional[ImportanceWeights] = None
        own = self.own_ratio()
        if cfg.is_correction != "none" or importance or own:
            o = torch.cat([learner_old[i] for i in mb]).to(dev) if learner_old is not None else lp.detach()
            iw = importance_weights(cfg.is_correction, o, old, seq_index, seq_tokens, cfg.is_min, cfg.is_cap)
            if cfg.is_correction != "none" or own:
                old = o  # the PPO ratio against the learner's old policy
        terms = loss_terms(cfg.loss, lp, lp_t, ent, old, adv, r, w, seq_index, seq_tokens, cfg.clip_low,
                           cfg.clip_high, cfg.beta, cfg.entropy_coef,
                           is_weight=iw.weight if iw is not None else None, dual_clip=cfg.dual_clip)
        if vt is not None:
            valued = torch.cat([vt.valued[i] for i in mb]).to(dev)
            vsum, vclipped = value_terms(values.to(lp.dtype), torch.cat([vt.v_old[i] for i in mb]).to(dev),
                                         torch.cat([vt.returns[i] for i in mb]).to(dev),
                                         valued / max(float(n_valued), 1.0), cfg.value_clip)
            terms.loss = terms.loss + cfg.value_coef * vsum
            terms.value = vsum.detach()
            terms.value_clipped = vclipped.sum()
            terms.valued = valued.sum()
        return terms, iw

    # -- public --

    def gradients(self, batch: Batch, cfg: RLConfig, minibatch: Optional[Sequence[int]] = None,
                  learner_old: Optional[List[torch.Tensor]] = None) -> Dict[str, float]:
        """Accumulate into .grad the gradient of one minibatch's loss (default: the whole batch), no step;
        returns the normalised loss parts. learner_old: the o_t to use (per sequence; default: as `train`
        gets them at the start of a call: its pre-pass, or each forward's own logprobs when the config makes
        one optimizer step). Single process (tests and tools)."""
        check_config(cfg)
        check_gae(batch, cfg)
        self.sync_compute()
        mb = list(range(len(batch))) if minibatch is None else list(minibatch)
        ref = self._reference_logprobs(batch, cfg) if cfg.beta > 0 else None
        vt = None
        if batch.rewards is not None:  # GAE: V_old and the advantages from the current weights
            self.ensure_value_head("gradients() of a batch with rewards")
            batch, vt, pre = self._gae(batch, cfg)
            learner_old = learner_old if learner_old is not None else pre
        if learner_old is None:
            learner_old = self._learner_old(batch, cfg)
        n_tokens = sum(batch.scored[i] for i in mb)
        n_valued = float(sum(float(vt.valued[i].sum()) for i in mb)) if vt is not None else 0.0
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "ent": 0.0, "value": 0.0}
        for micro in self._micro(mb[self.rank::self.world], batch, cfg):
            terms, _ = self._forward(batch, micro, cfg, ref, len(mb), n_tokens, engine=self.module,
                                     learner_old=learner_old, vt=vt, n_valued=n_valued)
            terms.loss.backward()
            sums["loss"] += float(terms.loss.detach())
            sums["pg"] += float(terms.pg)
            sums["kl"] += float(terms.kl) if terms.kl is not None else 0.0
            sums["ent"] += float(terms.ent)
            sums["value"] += float(terms.value) if terms.value is not None else 0.0
        if vt is not None:
            sums.update(vt.stats)
        return sums

    def train(self, batch: Batch, cfg: RLConfig) -> Dict[str, Any]:
        """One step of the run (see the module's docstring). Returns {"step", "metrics"}."""
        check_config(cfg)
        check_gae(batch, cfg)
        t0 = time.perf_counter()
        c0 = time.process_time()
        fresh = batch.rewards is not None and self.ensure_value_head(
            "the first call with rewards" if self.step == 0 else f"step {self.step} has none (a checkpoint "
            "or calls without one)")  # before the snapshot: the optimizer has its group either way
        snap = self._snapshot()
        before = weights_fingerprint(self.params())
        try:
            metrics = self._train(batch, cfg)
        except BaseException:
            if snap is not None:
                self._restore(snap)
            raise
        finally:
            self.model.eval()
        seconds = time.perf_counter() - t0
        if batch.rewards is not None:
            metrics["value_head_fresh"] = bool(fresh)
        # Updates too small for the weights' precision (bf16 with a tiny lr), a zero lr, no gradient: the
        # caller stops a run whose steps leave the weights as they were (mcp-gym's no-signal check).
        metrics["weights_changed"] = self._fingerprint_all(weights_fingerprint(self.params())) != \
            self._fingerprint_all(before)
        metrics["seconds"] = seconds
        metrics["cpu_seconds"] = time.process_time() - c0  # all the learner process's threads
        metrics["learner_tokens_per_s"] = batch.tokens * cfg.epochs / seconds if seconds > 0 else None
        for k, v in metrics.items():  # JSON has no NaN / Infinity
            if isinstance(v, float) and not math.isfinite(v):
                metrics[k] = None
        return {"step": self.step, "metrics": metrics}
