"""A micro-batch laid out as a prefix tree (the embedded GPT's training layout, policy.py GPTAdapter).

The sequences of an RL micro-batch repeat each other: every calculator task opens the same way, the members of
a group share their prompt, and a trained policy often writes the same first turn (or the whole episode) in
several members of a group. Each distinct prefix is computed once here:

- the micro-batch's common prefix (its first `P` tokens) runs once on its own; every row reads its keys and
  values as its past;
- the rest forms a trie whose edges are *segments* (runs of tokens shared by the same sequences); a sequence
  is the path of segments from the root to its last token;
- a subtree of the trie (its segments in depth-first order, after copies of the segments above it) is a
  *unit*, and units are packed side by side into rows; a token attends to the past, to the segments above its
  own (ancestors), and causally to its own segment: exactly what it attends to when its sequence runs alone.
  So every hidden state, logprob and gradient is the one of each sequence laid out alone (autograd sums a
  shared segment's gradient over the sequences that read it).

A unit larger than `max_unit` tokens is split into its children's subtrees, each after its own copy of the
segments above (the attention of a row is dense, quadratic in the row's length); a sequence that ends inside
a split segment goes with its first child's unit, which holds that copy.

`layout()` returns the tensors and, per sequence, the row of its hidden state at each position (-1 where it is
not computed: before P).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import torch


@dataclass
class Segment:
    seq: int  # a sequence holding the segment's tokens
    start: int  # its first position
    end: int  # one past its last position
    parent: int  # the segment above (-1: the common prefix)
    children: List[int] = field(default_factory=list)
    ending: List[int] = field(default_factory=list)  # the sequences whose last token is in this segment
    size: int = 0  # tokens of its subtree (itself included)


def build_trie(lists: Sequence[List[int]], P: int) -> Tuple[List[Segment], List[List[int]]]:
    """The segments of the sequences' trie below position P (all share their first P tokens), and each
    sequence's path (its segments, top first)."""
    segs: List[Segment] = []
    paths: List[List[int]] = [[] for _ in lists]
    # (members, depth, parent): members share their first `depth` tokens
    todo = [(list(range(len(lists))), P, -1)]
    while todo:
        members, depth, parent = todo.pop()
        first = lists[members[0]]
        end = min(len(lists[m]) for m in members)
        L = depth
        if len(members) == 1:
            L = end
        else:
            while L < end and all(lists[m][L] == first[L] for m in members):
                L += 1
        here = parent
        if L > depth:
            here = len(segs)
            segs.append(Segment(members[0], depth, L, parent))
            if parent >= 0:
                segs[parent].children.append(here)
            for m in members:
                paths[m].append(here)
        kids: Dict[int, List[int]] = {}
        for m in members:
            if len(lists[m]) > L:
                kids.setdefault(lists[m][L], []).append(m)
            elif here >= 0:
                segs[here].ending.append(m)
        for group in reversed(list(kids.values())):  # depth-first, first branch first
            todo.append((group, L, here))
    for i in reversed(range(len(segs))):  # children come after their parent
        s = segs[i]
        s.size += s.end - s.start
        if s.parent >= 0:
            segs[s.parent].size += s.size
    return segs, paths


@dataclass
class Unit:
    chain: List[int]  # copies of the segments above, top first
    root: int  # the subtree's root segment
    extra: List[int]  # sequences ending in a chain segment that this unit carries
    tokens: int


def make_units(segs: List[Segment], max_unit: int) -> List[Unit]:
    """The trie cut into units of at most max_unit tokens (copies of the segments above included) where it can
    be: a segment with no children is a unit however long."""
    units: List[Unit] = []

    def visit(root: int, chain: List[int], chain_len: int, extra: List[int]) -> None:
        s = segs[root]
        if chain_len + s.size <= max_unit or not s.children:
            units.append(Unit(chain, root, extra, chain_len + s.size))
            return
        below = chain + [root]
        n = chain_len + s.end - s.start
        for j, c in enumerate(s.children):
            visit(c, below, n, (extra + s.ending) if j == 0 else [])

    for i, s in enumerate(segs):
        if s.parent < 0:
            visit(i, [], 0, [])
    return units


def subtree(segs: List[Segment], root: int) -> List[int]:
    """The segments of root's subtree in depth-first order."""
    out, todo = [], [root]
    while todo:
        i = todo.pop()
        out.append(i)
        todo.extend(reversed(segs[i].children))
    return out


@dataclass
class TrieLayout:
    ids: torch.Tensor  # [B, R]
    pos: torch.Tensor  # [B, R] (pads: 0)
    allowed: torch.Tensor  # [B, 1, R, P + R] bool
    rows: List[torch.Tensor]  # per sequence: the flat row (b * R + r) of each position's hidden state, or -1
    tokens: int  # real tokens laid out (P not counted)


def layout(seqs: Sequence[torch.Tensor], P: int, pad_id: int, max_unit: int, min_row: int) -> TrieLayout:
    lists = [s.tolist() for s in seqs]
    segs, paths = build_trie(lists, P)
    units = make_units(segs, max_unit)
    W = max([min_row] + [u.tokens for u in units])
    order = sorted(range(len(units)), key=lambda u: -units[u].tokens)
    row_of: List[List[int]] = []
    room: List[int] = []
    for u in order:  # first fit, largest first
        for r in range(len(row_of)):
            if room[r] >= units[u].tokens:
                row_of[r].append(u)
                room[r] -= units[u].tokens
                break
        else:
            row_of.append([u])
            room.append(W - units[u].tokens)
    R = max(W - r for r in room)
    B = len(row_of)
    ids = torch.full((B, R), pad_id, dtype=torch.long)
    pos = torch.zeros((B, R), dtype=torch.long)
    inst = torch.zeros((B, R), dtype=torch.long)  # instance index + 1 (0: pad)
    parents: List[int] = [-1]  # per instance + 1; the pad "instance" 0 has none
    rows = [torch.full((len(s),), -1, dtype=torch.long) for s in lists]
    for b, us in enumerate(row_of):
        o = 0
        for u in us:
            unit = units[u]
            where: Dict[int, Tuple[int, int]] = {}  # segment -> its instance and flat row in this unit
            body = subtree(segs, unit.root)
            for sid in unit.chain + body:
                s = segs[sid]
                n = s.end - s.start
                ids[b, o: o + n] = seqs[s.seq][s.start: s.end]
                pos[b, o: o + n] = torch.arange(s.start, s.end)
                k = len(parents)
                parents.append(where[s.parent][0] if s.parent >= 0 else 0)
                inst[b, o: o + n] = k
                where[sid] = (k, b * R + o)
                o += n
            ending = list(unit.extra)
            for sid in body:
                ending.extend(segs[sid].ending)
            for m in ending:
                for sid in paths[m]:
                    s = segs[sid]
                    flat = where[sid][1]
                    rows[m][s.start: s.end] = torch.arange(flat, flat + s.end - s.start)
    # instance k sees instance j iff j is k or above it
    n_inst = len(parents)
    anc = torch.zeros((n_inst, n_inst), dtype=torch.bool)
    for k in range(1, n_inst):
        j = k
        while j > 0:
            anc[k, j] = True
            j = parents[j]
    ar = torch.arange(R)
    causal = ar.unsqueeze(1) >= ar.unsqueeze(0)  # [R (query), R (key)]
    within = anc[inst.unsqueeze(2), inst.unsqueeze(1)] & causal.unsqueeze(0)  # [B, R, R]
    allowed = torch.cat([torch.ones((B, R, P), dtype=torch.bool), within], 2).unsqueeze(1)
    return TrieLayout(ids, pos, allowed, rows, sum(s.end - s.start for s in segs))

