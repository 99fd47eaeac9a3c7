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
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import dataclasses

import torch

from .batch import Batch, micro_batches, micro_inputs, minibatches
from .gae import ValueTargets, check_gae, log, make_value_head, value_targets, value_terms
from .losses import ImportanceWeights, importance_weights, loss_terms, token_weights
from .metrics import StepSums, summary
from .policy import Adapter, LogprobModule, common_prefix_len
from .reference import Reference
from .rl_config import RLConfig, check_config
from .runtime import adamw

# trainable parameters + optimizer state (elements) up to which a step is atomic
SNAPSHOT_MAX_ELEMENTS = 64 * 1024 * 1024

# Batch and RLConfig too: what a caller that builds a step by hand needs (bench/learner_gpu.py).
__all__ = ["Batch", "RLConfig", "RLTrainer", "lr_at", "SNAPSHOT_MAX_ELEMENTS"]


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


def weights_fingerprint(params) -> tuple:
    """An exact fingerprint of the parameters' bits: per dtype width, the sum of the tensors' words as
    integers (a changed bit changes its word, so the sum, unless changes cancel exactly), and the float64
    sum of the values. Equal before and after a step: the step left the weights as they were."""
    words = 0
    total = 0.0
    with torch.no_grad():
        for p in params:
            t = p.detach().contiguous()
            view = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
            if view is not None:
                words += int(t.view(view).sum(dtype=torch.int64))
            total += float(t.sum(dtype=torch.float64))
    return (words, total)


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
        self.value_head: Optional[torch.nn.Linear] = None  # PPO with GAE (gae.py); never part of the model

    # -- the value head --

    def value_dim(self) -> int:
        """The width of the final hidden states (the LM head's input)."""
        w, _ = self.adapter.head(self.model)
        return int(w.shape[1])

    def ensure_value_head(self, reason: Optional[str] = None) -> bool:
        """The value head, created (zero) when there is none yet; an optimizer that exists gets it as one
        more parameter group. reason: logged when a head is created. True when it was created."""
        if self.value_head is not None:
            return False
        w, _ = self.adapter.head(self.model)
        self.value_head = make_value_head(int(w.shape[1]), self.device, w.dtype)
        if reason is not None:
            log(f"value head: a fresh one ({int(w.shape[1])} -> 1, zero) for GAE: {reason}")
        if self.optimizer is not None:
            self.optimizer.add_param_group(self._value_group(self.optimizer.param_groups[0]))
        return True

    def _value_group(self, like: Dict[str, Any]) -> Dict[str, Any]:
        g = {k: v for k, v in like.items() if k not in ("params", "weight_decay")}
        return {**g, "params": list(self.value_head.parameters()), "weight_decay": 0.0}

    # -- pieces --

    def model_params(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def params(self) -> List[torch.nn.Parameter]:
        """What a step trains: the model's trainable parameters, and the value head's when there is one."""
        return self.model_params() + (list(self.value_head.parameters()) if self.value_head is not None else [])

    def _autocast(self):
        if self.autocast_dtype is not None and self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    def make_optimizer(self, cfg: RLConfig) -> torch.optim.Optimizer:
        """AdamW over two groups: the matrices (with weight decay) and the 1-D parameters (without); a third, the
        value head's (without), when there is one."""
        decay, no_decay = [], []
        for p in self.model_params():
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "weight_decay": 0.0})
        return adamw(groups, self.device.type, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps)

    def _optimizer_for(self, cfg: RLConfig) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = self.make_optimizer(cfg)
        groups = self.optimizer.param_groups  # hyper-parameters may change between calls
        for g in groups:
            g["betas"] = (cfg.adam_beta1, cfg.adam_beta2)
            g["eps"] = cfg.adam_eps
        groups[0]["weight_decay"] = cfg.weight_decay
        return self.optimizer

    def _micro(self, shard: Sequence[int], batch: Batch, cfg: RLConfig) -> List[List[int]]:
        """micro_batch_size sequences at most; for an adapter with a token budget (a Hugging Face model), at most
        that many tokens beyond the batch's shared prefix too."""
        budget = getattr(self.adapter, "micro_tokens", None)
        shared = 0
        if budget and getattr(self.adapter, "share_prefix", False) and len(batch) > 1:
            shared = common_prefix_len(batch.ids)
        return micro_batches(shard, batch, cfg.micro_batch_size, budget, shared)

    def _share_scored(self, batch: Batch, micros: Sequence[Sequence[int]],
                      compute: Callable[[Sequence[int]], torch.Tensor], share: bool = True,
                      cols: int = 0) -> List[torch.Tensor]:
        """Per-token values of every scored token: this rank computes the sequences of `micros` (one call of
        `compute` per micro-batch, no gradient); with `share` (every rank must call it then) one all-reduce
        of the flat vector (zeros elsewhere) gives every rank all of them. cols > 0: `compute` gives [n, cols]."""
        B = len(batch)
        offsets = [0]
        for n in batch.scored:
            offsets.append(offsets[-1] + n)
        dtype = torch.float64 if next(self.model.parameters()).dtype == torch.float64 else torch.float32
        flat = torch.zeros((offsets[-1], cols) if cols else offsets[-1], dtype=dtype, device=self.device)
        with torch.no_grad():
            for mb in micros:
                lp = compute(mb)
                o = 0
                for i in mb:
                    n = batch.scored[i]
                    flat[offsets[i]: offsets[i] + n] = lp[o: o + n].to(dtype)
                    o += n
        if share and self.dist:
            self.dist.all_reduce(flat)
        return [flat[offsets[i]: offsets[i + 1]] for i in range(B)]

    def _reference_logprobs(self, batch: Batch, cfg: RLConfig) -> List[torch.Tensor]:
        """The reference's logprobs of every scored token (rank r computes the sequences i with i % W == r,
        then one all-reduce shares them)."""
        mine = [i for i in range(len(batch)) if i % self.world == self.rank]

        def compute(mb):
            inputs, sel, targets, _, _ = micro_inputs(batch, mb, self.adapter, self.device)
            with self._autocast():
                return self.reference.logprobs(inputs, sel, targets, cfg.temperature, cfg.logit_chunk)

        return self._share_scored(batch, self._micro(mine, batch, cfg), compute)

    def _first_epoch_micros(self, batch: Batch, cfg: RLConfig) -> List[List[int]]:
        """This rank's micro-batches of the first epoch, in order (all its minibatches)."""
        return [m for mb in minibatches(len(batch), cfg.minibatch_size, cfg.seed, self.step, 0)
                for m in self._micro(mb[self.rank::self.world], batch, cfg)]

    def _policy_logprobs(self, batch: Batch, cfg: RLConfig, share: bool = True) -> List[torch.Tensor]:
        """The current weights' processed logprobs (temperature, top-k, top-p) of the scored tokens, computed
        as the first epoch of `train` computes them (the same micro-batches, the same forward, train mode):
        o_t, the learner's old logprobs. share: every rank gets every sequence (one all-reduce)."""
        was = self.model.training
        self.model.train()

        def compute(mb):
            inputs, sel, targets, _, _ = micro_inputs(batch, mb, self.adapter, self.device)
            with self._autocast():
                lp, _, _ = self.module(inputs, sel, targets, cfg.temperature, cfg.top_k, cfg.top_p,
                                       cfg.logit_chunk, True)
            return lp

        try:
            return self._share_scored(batch, self._first_epoch_micros(batch, cfg), compute, share)
        finally:
            self.model.train(was)

    def _values_pass(self, batch: Batch, cfg: RLConfig, with_logprobs: bool):
        """V_old of every scored token (every rank gets every sequence), and, with_logprobs, o_t from the same
        forward (as _policy_logprobs computes them): before the first optimizer step of the call."""
        was = self.model.training
        self.model.train()
        head = self.value_head

        def compute(mb):
            inputs, sel, targets, _, _ = micro_inputs(batch, mb, self.adapter, self.device)
            with self._autocast():
                lp, _, _, hs = self.module(inputs, sel, targets, cfg.temperature, cfg.top_k, cfg.top_p,
                                           cfg.logit_chunk, True, return_hidden=True)
                v = head(hs).reshape(-1)
            return torch.stack([lp.to(torch.float64), v.to(torch.float64)], -1)  # stored in the model's precision

        try:
            both = self._share_scored(batch, self._first_epoch_micros(batch, cfg), compute, True, cols=2)
        finally:
            self.model.train(was)
        values = [x[:, 1] for x in both]
        return ([x[:, 0] for x in both] if with_logprobs else None), values

    def _gae(self, batch: Batch, cfg: RLConfig):
        """(the batch with the GAE advantages, its ValueTargets, o_t or None): one pre-pass, no gradient."""
        want_lp = cfg.is_correction != "none" and not self.one_optimizer_step(cfg, len(batch))
        lps, values = self._values_pass(batch, cfg, want_lp)
        vt = value_targets(values, batch.rewards, batch.turn_start, cfg)
        return dataclasses.replace(batch, adv=vt.adv), vt, lps

    @staticmethod
    def one_optimizer_step(cfg: RLConfig, n_seqs: int) -> bool:
        """The call makes one optimizer step (one epoch, one minibatch): the first forward of each micro-batch
        comes before any step, so its own logprobs (detached) are the learner's old logprobs o_t."""
        return cfg.epochs == 1 and (cfg.minibatch_size == 0 or cfg.minibatch_size >= n_seqs)

    def _learner_old(self, batch: Batch, cfg: RLConfig) -> Optional[List[torch.Tensor]]:
        """o_t by a pass before the first optimizer step when the loss needs it and no forward gives it free."""
        if cfg.is_correction == "none" or self.one_optimizer_step(cfg, len(batch)):
            return None
        return self._policy_logprobs(batch, cfg)

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
            values = self.value_head(out[3]).reshape(-1) if vt is not None else None
        dev = lp.device
        old = torch.cat([batch.old[i] for i in mb]).to(dev)  # s_t: the sampler's
        adv = torch.cat([batch.adv[i] for i in mb]).to(dev)
        r = torch.cat([ref[i] for i in mb]).to(dev) if ref is not None else None
        w = token_weights(cfg.loss, seq_index, seq_tokens, n_seqs, n_tokens, cfg.dr_grpo_constant, lp.dtype)
        iw: Optional[ImportanceWeights] = None
        if cfg.is_correction != "none" or importance:
            o = torch.cat([learner_old[i] for i in mb]).to(dev) if learner_old is not None else lp.detach()
            iw = importance_weights(cfg.is_correction, o, old, seq_index, seq_tokens, cfg.is_min, cfg.is_cap)
            if cfg.is_correction != "none":
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

    def score(self, batch: Batch, cfg: RLConfig) -> List[torch.Tensor]:
        """The current policy's processed logprobs of each sequence's scored tokens, computed exactly as the
        first epoch of `train` computes them (same micro-batches): on-policy old logprobs. Under DDP, this
        rank's sequences only (the others None)."""
        lps = self._policy_logprobs(batch, cfg, share=False)
        mine = {i for m in self._first_epoch_micros(batch, cfg) for i in m}
        return [lps[i].detach().cpu() if i in mine else None for i in range(len(batch))]  # type: ignore[misc]

    def gradients(self, batch: Batch, cfg: RLConfig, minibatch: Optional[Sequence[int]] = None,
                  learner_old: Optional[List[torch.Tensor]] = None) -> Dict[str, float]:
        """Accumulate into .grad the gradient of one minibatch's loss (default: the whole batch), no step;
        returns the normalised loss parts. learner_old: the o_t to use (per sequence; default: as `train`
        gets them at the start of a call: its pre-pass, or each forward's own logprobs when the config makes
        one optimizer step). Single process (tests and tools)."""
        check_config(cfg)
        check_gae(batch, cfg)
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

    # -- atomic steps --

    def _state_elements(self) -> int:
        """Elements a step can change: the trainable parameters (LoRA: the adapter only) and AdamW's state."""
        n = sum(p.numel() for p in self.params())
        if self.optimizer is not None:
            for st in self.optimizer.state.values():
                n += sum(v.numel() for v in st.values() if torch.is_tensor(v))
        return n

    def _snapshot(self):
        if self._state_elements() > SNAPSHOT_MAX_ELEMENTS:
            return None
        params = self.params()
        return (params, [p.detach().clone() for p in params],
                copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
                self.optimizer is not None)

    def _restore(self, snap) -> None:
        params, values, opt_state, had = snap
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        for p in list(self.model.parameters()) + params:
            p.grad = None
        if had and opt_state is not None:
            self.optimizer.load_state_dict(opt_state)
        elif not had:
            self.optimizer = None

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
        metrics["weights_changed"] = weights_fingerprint(self.params()) != before
        metrics["seconds"] = seconds
        metrics["cpu_seconds"] = time.process_time() - c0  # all the learner process's threads
        metrics["learner_tokens_per_s"] = batch.tokens * cfg.epochs / seconds if seconds > 0 else None
        for k, v in metrics.items():  # JSON has no NaN / Infinity
            if isinstance(v, float) and not math.isfinite(v):
                metrics[k] = None
        return {"step": self.step, "metrics": metrics}

    def _all_reduce_head_grads(self) -> None:
        """Each rank's head gradient is world × its shard's (the loss is scaled by the world size, as DDP's mean
        expects): the sum over the ranks divided by the world size is the whole minibatch's."""
        for p in self.value_head.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self.dist.all_reduce(p.grad)
            p.grad.div_(self.world)

    def _clip_grad_norm(self, params: List[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        """The gradient's norm before clipping (clipped to max_norm when it is > 0)."""
        if max_norm > 0:
            return torch.nn.utils.clip_grad_norm_(params, max_norm)
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.device)
        if hasattr(torch, "_foreach_norm"):  # torch >= 1.13: one fused pass
            return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        return torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)  # pragma: no cover

    def _train(self, batch: Batch, cfg: RLConfig) -> Dict[str, Any]:
        B = len(batch)
        lr = lr_at(self.step, cfg.total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
        opt = self._optimizer_for(cfg)
        for i, g in enumerate(opt.param_groups):
            g["lr"] = lr * (cfg.vector_lr_scale if i == 1 else 1.0)  # group 1: the 1-D parameters
        self.model.train()
        ref = self._reference_logprobs(batch, cfg) if cfg.beta > 0 else None
        vt: Optional[ValueTargets] = None
        if batch.rewards is not None:  # GAE: V_old (and o_t when needed) before any optimizer step of the call
            batch, vt, learner_old = self._gae(batch, cfg)
        else:
            learner_old = self._learner_old(batch, cfg)  # before any optimizer step of the call
        # the off-policy statistics: with a correction, or when o_t comes free (one optimizer step)
        track = cfg.is_correction != "none" or self.one_optimizer_step(cfg, B)
        params = self.params()
        records: List[Dict[str, torch.Tensor]] = []
        for epoch in range(cfg.epochs):
            for mb in minibatches(B, cfg.minibatch_size, cfg.seed, self.step, epoch):
                n_tokens = sum(batch.scored[i] for i in mb)
                n_valued = float(sum(float(vt.valued[i].sum()) for i in mb)) if vt is not None else 0.0
                micro = self._micro(mb[self.rank::self.world], batch, cfg)
                dummy = not micro
                if dummy:  # this rank has no sequence of the minibatch: a zero-weight pass keeps DDP in step
                    micro = [[mb[0]]]
                opt.zero_grad(set_to_none=True)
                sums = StepSums(self.device)
                for j, m in enumerate(micro):
                    sync = j == len(micro) - 1
                    ctx = self.engine.no_sync() if (self.dist and not sync) else contextlib.nullcontext()
                    with ctx:
                        terms, iw = self._forward(batch, m, cfg, ref, len(mb), n_tokens, learner_old=learner_old,
                                                  importance=track and epoch == 0, vt=vt, n_valued=n_valued)
                        scale = 0.0 if dummy else float(self.world)
                        (terms.loss * scale).backward()
                    if not dummy:  # the off-policy statistics once: the first epoch covers every sequence once
                        sums.add(terms, iw if (track and epoch == 0) else None)
                if self.dist:
                    sums.all_reduce(self.dist)
                    if vt is not None:  # the value head is outside the DDP module: its gradient by hand
                        self._all_reduce_head_grads()
                gn = self._clip_grad_norm(params, cfg.max_grad_norm)
                if not torch.isfinite(gn):
                    raise FloatingPointError(f"the gradient norm is {float(gn)} (epoch {epoch + 1}); "
                                             "the step is not applied")
                opt.step()
                records.append(sums.record(gn))
        opt.zero_grad(set_to_none=True)
        self.step += 1
        reset = cfg.ref_reset_every > 0 and self.step % cfg.ref_reset_every == 0
        if reset:  # ProRL: the reference becomes the current policy, and the optimizer starts afresh
            self.reference.reset()
            self.optimizer = None
        self.last_config = cfg.to_json()
        losses = summary(records, cfg.beta, sampler=track, is_correction=cfg.is_correction, dual_clip=cfg.dual_clip,
                         gae=vt.stats if vt is not None else None)
        return {**losses, "lr": lr, "tokens": batch.tokens, "scored_tokens": sum(batch.scored), "sequences": B,
                "groups": len(set(batch.group_ids)), "ref_reset": reset, "world_size": self.world}
