"""The no-gradient passes of an RL `train` call, before its first optimizer step, and the micro-batching they share
with the optimizer steps: the reference's logprobs (the KL term, when beta > 0), the learner's old logprobs o_t
(the off-policy correction, when no forward gives them free), GAE's values V_old and advantages (a batch with
rewards), and `score` (the current policy's logprobs as the first epoch computes them). Each rank computes its
share of the sequences; one all-reduce gives every rank all of them. `PrePasses` is mixed into RLTrainer (rl.py).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, List, Optional, Sequence

import torch

from .batch import Batch, micro_batches, micro_batches_by_prompt, micro_batches_by_trie, micro_inputs, minibatches
from .gae import value_targets
from .policy import common_prefix_len
from .rl_config import RLConfig


class PrePasses:
    """RLTrainer's scoring passes; they use its model, adapter, module, reference, device, dist, world, rank, step,
    value_head and _autocast()."""

    def _micro(self, shard: Sequence[int], batch: Batch, cfg: RLConfig) -> List[List[int]]:
        """micro_batch_size sequences at most; for an adapter with a token budget (a Hugging Face model), at most
        that many tokens beyond the shared prefix too. An adapter that computes a micro-batch's common prefix
        once gets the sequences of one prompt (a group) together (batch.micro_batches_by_prompt): the prompt
        runs once per group instead of once per sequence, with the same logprobs and gradients; one that lays
        the rests out as a prefix tree gets whole groups packed by the tree's size (batch.micro_batches_by_trie):
        what all prompts open with runs once per micro-batch."""
        budget = getattr(self.adapter, "micro_tokens", None)
        shared = 0
        if budget and getattr(self.adapter, "share_prefix", False) and len(batch) > 1:
            shared = common_prefix_len(batch.ids)
            # a prefix tree (HFAdapter.trie): whole groups together, as many as its budget of distinct tokens holds
            if getattr(self.adapter, "trie", False):
                return micro_batches_by_trie(shard, batch, cfg.micro_batch_size, budget, shared)
            # MCP_GYM_HF_GROUP_PROMPTS=0: length order only (the baseline of bench/rl_group_prompts.py)
            if os.environ.get("MCP_GYM_HF_GROUP_PROMPTS", "1") != "0":
                return micro_batches_by_prompt(shard, batch, cfg.micro_batch_size, budget, shared)
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
            if getattr(self, "fsdp", False):  # every forward gathers parameters: the same number on every rank
                for _ in range(self._max_over_ranks(len(micros)) - len(micros)):
                    compute([micros[0][0] if micros else 0])
            for mb in micros:
                lp = compute(mb)
                o = 0
                for i in mb:
                    n = batch.scored[i]
                    flat[offsets[i]: offsets[i] + n] = lp[o: o + n].to(dtype)
                    o += n
            if getattr(self, "fsdp", False):  # FSDP keeps the root unit gathered after a forward (for the backward
                self.module.reshard()  # that follows): with no backward here, shard it again
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
                v = head(hs.to(head.weight.dtype)).reshape(-1)
            return torch.stack([lp.to(torch.float64), v.to(torch.float64)], -1)  # stored in the model's precision

        try:
            both = self._share_scored(batch, self._first_epoch_micros(batch, cfg), compute, True, cols=2)
        finally:
            self.model.train(was)
        values = [x[:, 1] for x in both]
        return ([x[:, 0] for x in both] if with_logprobs else None), values

    def _gae(self, batch: Batch, cfg: RLConfig):
        """(the batch with the GAE advantages, its ValueTargets, o_t or None): one pre-pass, no gradient."""
        want_lp = (cfg.is_correction != "none" or self.own_ratio()) and not self.one_optimizer_step(cfg, len(batch))
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
        if (cfg.is_correction == "none" and not self.own_ratio()) or self.one_optimizer_step(cfg, len(batch)):
            return None
        return self._policy_logprobs(batch, cfg)

    def score(self, batch: Batch, cfg: RLConfig) -> List[torch.Tensor]:
        """The current policy's processed logprobs of each sequence's scored tokens, computed exactly as the
        first epoch of `train` computes them (same micro-batches): on-policy old logprobs. Under DDP, this
        rank's sequences only (the others None)."""
        self.sync_compute()
        lps = self._policy_logprobs(batch, cfg, share=False)
        mine = {i for m in self._first_epoch_micros(batch, cfg) for i in m}
        return [lps[i].detach().cpu() if i in mine else None for i in range(len(batch))]  # type: ignore[misc]
