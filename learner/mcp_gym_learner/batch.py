"""The TrainBatch of a `train` call (docs/architecture.md, "Contracts"): parsed, checked, and cut.

The schema (protocol.schema.json, train.batch) gives the batch's shape: five lists (six with the
optional `rewards` of PPO with GAE), their element types where that is cheap. The inner lists (token ids, masks, old logprobs, per-token advantages) are
deliberately shallow there; parse_batch checks them here, against the loaded model's vocabulary and
context length, with the rules between the lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from .protocol import RequestError, validate_part


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
    # PPO with GAE (a batch with `rewards`): the reward of each scored token (float64) and whether it starts a
    # turn (a run of mask 1 whose scored tokens are consecutive positions); None otherwise (gae.py)
    rewards: Optional[List[torch.Tensor]] = None
    turn_start: Optional[List[torch.Tensor]] = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _first_bad(values: Sequence[Any], ok) -> int:
    for i, v in enumerate(values):
        if not ok(v):
            return i
    return -1


def parse_batch(obj: Any, vocab_size: int, max_seq_len: Optional[int], name: str = "batch") -> Batch:
    """Validate a TrainBatch whole (the schema, then each sequence); RequestError names the first bad field."""
    obj = validate_part("train", ("batch",), obj, name)
    ids, mask, old, adv, gids = (obj[k] for k in ("ids", "mask", "old_logprobs", "advantages", "group_ids"))
    B = len(ids)
    if B == 0:
        raise RequestError(f"{name}.ids: the batch holds no sequence")
    for k, v in (("mask", mask), ("old_logprobs", old), ("advantages", adv), ("group_ids", gids)):
        if len(v) != B:
            raise RequestError(f"{name}.{k}: {len(v)} entries for {B} sequences")
    per_token = isinstance(adv[0], list)
    rewards = obj.get("rewards")
    if rewards is not None and len(rewards) != B:
        raise RequestError(f"{name}.rewards: {len(rewards)} entries for {B} sequences")
    out = Batch([], [], [], [], [], [])
    if rewards is not None:
        out.rewards, out.turn_start = [], []
    for b in range(B):
        s = ids[b]
        where = f"{name}.ids[{b}]"
        n = len(s)
        if n < 2:
            raise RequestError(f"{where}: needs at least 2 tokens, got {n}")
        if max_seq_len is not None and n > max_seq_len:
            raise RequestError(f"{where}: {n} tokens is more than max_seq_len {max_seq_len}")
        i = _first_bad(s, lambda t: type(t) is int and 0 <= t < vocab_size)
        if i >= 0:
            raise RequestError(f"{where}[{i}]: token id {s[i]!r} is out of range [0, {vocab_size})")
        m = mask[b]
        if len(m) != n:
            raise RequestError(f"{name}.mask[{b}]: must be a list of {n} values 0 or 1 (one per token), "
                               f"got a list of {len(m)}")
        i = _first_bad(m, lambda t: type(t) is int and (t == 0 or t == 1))
        if i >= 0:
            raise RequestError(f"{name}.mask[{b}][{i}]: must be 0 or 1, got {m[i]!r}")
        pos = [i for i in range(1, n) if m[i] == 1]
        if not pos:
            raise RequestError(f"{name}.mask[{b}]: no token with mask 1 after the first (nothing to train on)")
        o = old[b]
        if len(o) != n:
            raise RequestError(f"{name}.old_logprobs[{b}]: must be a list of {n} numbers (one per token)")
        for i in pos:
            v = o[i]
            if not _is_num(v):
                raise RequestError(f"{name}.old_logprobs[{b}][{i}]: must be a finite number (the sampler's logprob "
                                   f"of a policy token), got {v!r}")
            if v > 1e-3:
                raise RequestError(f"{name}.old_logprobs[{b}][{i}]: {v} is positive: not a logprob")
        a = adv[b]
        if per_token:  # the schema: all lists or all numbers
            if len(a) != n:
                raise RequestError(f"{name}.advantages[{b}]: must be a list of {n} numbers (per-token advantages, "
                                   "aligned with ids), like the others")
            for i in pos:
                if not _is_num(a[i]):
                    raise RequestError(f"{name}.advantages[{b}][{i}]: must be a finite number, got {a[i]!r}")
            av = torch.tensor([float(a[i]) for i in pos], dtype=torch.float64)
        else:
            av = torch.full((len(pos),), float(a), dtype=torch.float64)
        if rewards is not None:
            _gae_rewards(out, rewards[b], a, pos, m, n, b, name)
        t = torch.tensor(s, dtype=torch.long)
        p = torch.tensor(pos, dtype=torch.long)
        out.ids.append(t)
        out.pos.append(p)
        out.tgt.append(t[p])
        out.old.append(torch.tensor([float(o[i]) for i in pos], dtype=torch.float64))
        out.adv.append(av)
        out.group_ids.append(gids[b])
        out.lengths.append(n)
        out.scored.append(len(pos))
    return out


def _gae_rewards(out: Batch, r: Any, a: Any, pos: List[int], m: List[int], n: int, b: int, name: str) -> None:
    """The rewards of sequence b (PPO with GAE): a list aligned with ids, nonzero only on scored tokens, with
    advantages 0 (the learner computes them); appends its scored tokens' rewards and turn starts to `out`."""
    if not isinstance(r, list) or len(r) != n:
        raise RequestError(f"{name}.rewards[{b}]: must be a list of {n} numbers (one per token, aligned with ids)")
    i = _first_bad(r, _is_num)
    if i >= 0:
        raise RequestError(f"{name}.rewards[{b}][{i}]: must be a finite number, got {r[i]!r}")
    for i, v in enumerate(r):
        if v != 0 and (i == 0 or m[i] != 1):
            raise RequestError(f"{name}.rewards[{b}][{i}]: {v} on a token that is not scored (mask 0, or the "
                               "first token): rewards go on policy tokens (a turn's last)")
    if any(v != 0 for v in (a if isinstance(a, list) else [a])):
        raise RequestError(f"{name}.advantages[{b}]: must be 0 with batch.rewards (the learner computes the "
                           "advantages by GAE)")
    out.rewards.append(torch.tensor([float(r[i]) for i in pos], dtype=torch.float64))
    out.turn_start.append(torch.tensor([k == 0 or pos[k] != pos[k - 1] + 1 for k in range(len(pos))],
                                       dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# how a step cuts the batch


def mix_seed(*parts: int) -> int:
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = ((x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


def minibatches(B: int, size: int, seed: int, step: int, epoch: int) -> List[List[int]]:
    """The sequences of each optimizer step of an epoch: all of them (size 0), or a permutation drawn from
    (seed, step, epoch) cut into `size` sequences."""
    if size == 0 or size >= B:
        return [list(range(B))]
    g = torch.Generator().manual_seed(mix_seed(seed, step, epoch))
    perm = torch.randperm(B, generator=g).tolist()
    return [perm[i: i + size] for i in range(0, B, size)]


def micro_batches(shard: Sequence[int], batch: Batch, size: int, max_tokens: Optional[int] = None,
                  shared: int = 0) -> List[List[int]]:
    """Longest first (stable), at most `size` sequences each (rows of similar length share a padded micro-batch)
    and, with max_tokens, at most that many tokens beyond the `shared` first ones of each sequence (a prefix the
    adapter computes once per micro-batch; a longer sequence gets a micro-batch of its own)."""
    order = sorted(shard, key=lambda i: -batch.lengths[i])
    if not max_tokens:
        return [order[i: i + size] for i in range(0, len(order), size)]
    out: List[List[int]] = []
    cur: List[int] = []
    n = 0
    for i in order:
        cost = batch.lengths[i] - shared
        if cur and (len(cur) >= size or n + cost > max_tokens):
            out.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += cost
    if cur:
        out.append(cur)
    return out


def micro_batches_by_prompt(shard: Sequence[int], batch: Batch, size: int, max_tokens: int,
                            shared: int = 0) -> List[List[int]]:
    """micro_batches for an adapter that computes a micro-batch's common prefix once (share_prefix): the
    sequences that share their prompt (every token before the one that precedes their first scored token: a
    GRPO group's samples of one task) are cut into micro-batches of their own, each of which computes that
    prompt once (its budget counts the tokens after it); the sequences whose prompt no other one shares follow,
    as micro_batches cuts them (`shared`: the prefix the whole batch shares). Groups in order of first appearance,
    each longest first: deterministic for a given shard."""
    out: List[List[int]] = []
    singles: List[int] = []
    for plen, members in _prompt_groups(shard, batch):
        if len(members) == 1:
            singles.extend(members)
        else:
            out.extend(micro_batches(members, batch, size, max_tokens, max(shared, plen)))
    if singles:
        out.extend(micro_batches(singles, batch, size, max_tokens, shared))
    return out


def _prompt_groups(shard: Sequence[int], batch: Batch) -> List[Tuple[int, List[int]]]:
    """The sequences of `shard` grouped by their prompt (every token before the one that precedes their first
    scored token: a GRPO group's samples of one task), in order of first appearance: (prompt length, members)."""
    groups: dict = {}
    for i in shard:
        n = int(batch.pos[i].min()) - 1 if batch.scored[i] else int(batch.lengths[i])
        groups.setdefault(tuple(batch.ids[i][: max(0, n)].tolist()), []).append(i)
    return [(len(prompt), members) for prompt, members in groups.items()]


def micro_batches_by_trie(shard: Sequence[int], batch: Batch, size: int, max_tokens: int,
                          shared: int = 0) -> List[List[int]]:
    """micro_batches for an adapter that lays a micro-batch out as a prefix tree (HFAdapter with `trie`): each
    distinct run of tokens is computed once whichever sequences hold it, so a micro-batch's cost is its tree's
    size, and whole groups (the sequences that share their prompt) are packed together while the tree beyond the
    batch's `shared` prefix holds at most `max_tokens` tokens (and the micro-batch at most `size` sequences): the
    system turn and tool list that every prompt opens with then run once per micro-batch, not once per group. A
    group larger than that on its own is cut as micro_batches_by_prompt cuts it. Deterministic for a shard."""
    from .trie_layout import build_trie

    def cost(members: List[int]) -> int:
        segs, _ = build_trie([batch.ids[i].tolist() for i in members], shared)
        return sum(s.end - s.start for s in segs)

    out: List[List[int]] = []
    cur: List[int] = []
    for plen, members in _prompt_groups(shard, batch):
        members = sorted(members, key=lambda i: -batch.lengths[i])
        if len(members) > size or cost(members) > max_tokens:
            out.extend(micro_batches(members, batch, size, max_tokens, max(shared, plen)))
            continue
        if cur and (len(cur) + len(members) > size or cost(cur + members) > max_tokens):
            out.append(cur)
            cur = []
        cur = cur + members
    if cur:
        out.append(cur)
    return out


def rows_at(start: Union[int, torch.Tensor], positions: torch.Tensor) -> torch.Tensor:
    """The rows of an adapter's hidden states that hold a sequence's `positions`: `start` is the sequence's
    offset (row start + j) or, for a layout that shares runs of tokens between sequences, its row map."""
    if isinstance(start, torch.Tensor):
        return start[positions]
    return positions + start


def micro_inputs(batch: Batch, idx: Sequence[int], adapter: Any, device: torch.device):
    """The model inputs of sequences `idx` laid out by the adapter, the rows of their scored positions' hidden
    states (`sel`), the target tokens, each token's local sequence and each sequence's scored tokens."""
    seqs = [batch.ids[i] for i in idx]
    # the hidden states read start at the row before each sequence's first scored token
    need = [int(batch.pos[i].min()) - 1 if batch.scored[i] else int(batch.lengths[i]) for i in idx]
    inputs, starts = adapter.inputs(seqs, device, need_from=need)
    sel = torch.cat([rows_at(starts[j], batch.pos[i] - 1) for j, i in enumerate(idx)]).to(device)
    if sel.numel() and int(sel.min()) < 0:  # a row the layout did not compute (-1 would read the last row silently)
        raise RuntimeError("micro_inputs: a scored position has no row in the adapter's layout")
    targets = torch.cat([batch.tgt[i] for i in idx]).to(device)
    seq_index = torch.cat([torch.full((batch.scored[i],), j, dtype=torch.long) for j, i in enumerate(idx)])
    seq_tokens = torch.tensor([batch.scored[i] for i in idx], dtype=torch.long)
    return inputs, sel, targets, seq_index.to(device), seq_tokens.to(device)
