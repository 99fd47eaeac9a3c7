"""The optimizer steps of one RL `train` call (RLTrainer._train): the step's learning rate, the pre-passes
(rl_passes.py), then `epochs` passes over the batch in minibatches (one AdamW step each) cut into micro-batches
(gradient accumulation, DDP-synchronised on the last), the value head's gradient all-reduced by hand, clipping,
the ProRL reference reset and the step's metrics (metrics.py). `UpdateLoop` is mixed into RLTrainer (rl.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Dict, List, Optional

import torch

from .batch import Batch, minibatches
from .gae import ValueTargets
from .metrics import StepSums, summary
from .rl_config import RLConfig
from .rl_optim import lr_at


def _synced(device: torch.device) -> float:
    """perf_counter() once the device's queued work is done (a GPU runs kernels asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class UpdateLoop:
    """RLTrainer's update loop; it uses the trainer's model, engine, reference, value_head, device, dist, world, rank,
    step, optimizer, last_config, its passes (rl_passes.py), optimizer (rl_optim.py) and _forward (rl.py)."""

    def _all_reduce_head_grads(self) -> None:
        """Each rank's head gradient is world × its shard's (the loss is scaled by the world size, as DDP's mean
        expects): the sum over the ranks divided by the world size is the whole minibatch's."""
        for p in self.value_head.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self.dist.all_reduce(p.grad)
            p.grad.div_(self.world)

    def _max_over_ranks(self, n: int) -> int:
        t = torch.tensor([n], dtype=torch.int64, device=self.device if self.device.type == "cuda" else "cpu")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def _clip_grad_norm(self, params: List[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        """The gradient's norm before clipping (clipped to max_norm when it is > 0)."""
        if self.fsdp:  # sharded gradients: the global norm (fsdp.py)
            from .fsdp import grad_norm

            return grad_norm(params, max_norm)
        if max_norm > 0:
            return torch.nn.utils.clip_grad_norm_(params, max_norm)
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.device)
        if hasattr(torch, "_foreach_norm"):  # torch >= 1.13: one fused pass
            return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        return torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)  # pragma: no cover

    def _idle_sequences(self, batch: Batch, cfg: RLConfig, vt: Optional[ValueTargets], track: bool) -> set:
        """The sequences whose every loss term is 0, so that no forward or backward is spent on them: with no KL
        term, no entropy bonus and no value loss, a sequence whose advantages are all 0 (a group whose episodes
        all got the same reward) adds exactly 0 to every policy loss (PPO clip, GSPO, CISPO: each term is the
        advantage times a finite factor). Kept when its figures are wanted: the off-policy statistics (`track`)
        and under DDP (each rank must run each minibatch); MCP_GYM_SKIP_IDLE=0 keeps them all (bench/main-job.ts's
        old recipe)."""
        if cfg.beta != 0 or cfg.entropy_coef != 0 or vt is not None or track or self.dist:
            return set()
        if os.environ.get("MCP_GYM_SKIP_IDLE", "1") == "0":
            return set()
        return {i for i, a in enumerate(batch.adv) if not bool(a.any())}

    def _train(self, batch: Batch, cfg: RLConfig) -> Dict[str, Any]:
        B = len(batch)
        lr = lr_at(self.step, cfg.total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
        opt = self._optimizer_for(cfg)
        for i, g in enumerate(opt.param_groups):
            g["lr"] = lr * (cfg.vector_lr_scale if i == 1 else 1.0)  # group 1: the 1-D parameters
        self.model.train()
        self.sync_compute()
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
        t_fb = t_opt = 0.0  # seconds in the forwards and backwards, and in clipping and the optimizer steps
        idle = self._idle_sequences(batch, cfg, vt, track)
        for epoch in range(cfg.epochs):
            for mb in minibatches(B, cfg.minibatch_size, cfg.seed, self.step, epoch):
                n_tokens = sum(batch.scored[i] for i in mb)
                n_valued = float(sum(float(vt.valued[i].sum()) for i in mb)) if vt is not None else 0.0
                # the minibatch's normalisation (n_seqs, n_tokens) is the whole minibatch's: leaving out the
                # sequences whose loss terms are all 0 changes no gradient
                micro = self._micro([i for i in mb[self.rank::self.world] if i not in idle], batch, cfg)
                real = len(micro)
                dummy = not micro
                if dummy:  # this rank has no sequence of the minibatch: a zero-weight pass keeps DDP in step
                    micro = [[mb[0]]]
                if self.fsdp:  # every forward and backward gathers parameters: the same number on every rank
                    micro = micro + [[mb[0]]] * (self._max_over_ranks(len(micro)) - len(micro))
                opt.zero_grad(set_to_none=True)
                sums = StepSums(self.device)
                t = time.perf_counter()
                for j, m in enumerate(micro):
                    sync = j == len(micro) - 1
                    # DDP: one all-reduce, on the last micro-batch; FSDP reduce-scatters each one (sharded grads)
                    ctx = self.engine.no_sync() if (self.dist and not sync and not self.fsdp) \
                        else contextlib.nullcontext()
                    pad = dummy or j >= real  # a zero-weight pass (no sequence of this rank)
                    with ctx:
                        terms, iw = self._forward(batch, m, cfg, ref, len(mb), n_tokens, learner_old=learner_old,
                                                  importance=track and epoch == 0, vt=vt, n_valued=n_valued)
                        scale = 0.0 if pad else float(self.world)
                        (terms.loss * scale).backward()
                    if not pad:  # the off-policy statistics once: the first epoch covers every sequence once
                        sums.add(terms, iw if (track and epoch == 0) else None)
                if self.dist:
                    sums.all_reduce(self.dist)
                    if vt is not None:  # the value head is outside the DDP module: its gradient by hand
                        self._all_reduce_head_grads()
                t_fb += _synced(self.device) - t
                t = time.perf_counter()
                gn = self._clip_grad_norm(params, cfg.max_grad_norm)
                if not torch.isfinite(gn):
                    raise FloatingPointError(f"the gradient norm is {float(gn)} (epoch {epoch + 1}); "
                                             "the step is not applied")
                opt.step()
                self.sync_compute()
                records.append(sums.record(gn))
                t_opt += _synced(self.device) - t
        opt.zero_grad(set_to_none=True)
        self.step += 1
        reset = cfg.ref_reset_every > 0 and self.step % cfg.ref_reset_every == 0
        if reset:  # ProRL: the reference becomes the current policy, and the optimizer starts afresh
            self.reference.reset()
            self.optimizer = None
        self.last_config = cfg.to_json()
        losses = summary(records, cfg.beta, sampler=track, is_correction=cfg.is_correction, dual_clip=cfg.dual_clip,
                         gae=vt.stats if vt is not None else None)
        return {**losses, "idle_sequences": len(idle), "lr": lr, "tokens": batch.tokens,
                "scored_tokens": sum(batch.scored), "sequences": B, "groups": len(set(batch.group_ids)),
                "ref_reset": reset, "world_size": self.world,
                "forward_backward_seconds": t_fb, "optimizer_seconds": t_opt}
