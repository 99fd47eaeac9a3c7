"""The policy as the RL trainer sees it: the embedded GPT or a Hugging Face causal LM, behind one adapter.

An adapter lays a micro-batch of sequences out for its model (right padding, or packing into one row
when the attention kernel supports it, or a shared prefix computed once), returns the final hidden states of
every token as rows of a [M, D] matrix (token j of sequence b at row starts[b] + j, or at row starts[b][j] when
starts[b] is a row map: the embedded GPT's prefix tree, where sequences share rows; batch.rows_at reads both),
and names the LM head's weight and bias.

Shared prefix (HFAdapter, `share_prefix`): when the caller says from which token on each sequence's hidden
states are needed (`need_from`: the position before its first scored token), the sequences' longest common
prefix up to there (the chat template's system turn and tool list, a group's prompt) runs through the decoder
once (with its keys and values kept), and the rests of the sequences follow as a prefix tree (`trie`, as the
embedded GPT lays them out; or side by side) in rows whose mask lets each token see the prefix, the runs above
its own and its own run: the same logprobs and the same gradients as each sequence on its own (autograd sums a
shared run's gradient over its readers), at the cost of each distinct run once per micro-batch instead of once
per sequence. Rows before
`need_from` do not exist in the output (their `starts` offsets point before the row block of the sequence).
`LogprobModule` puts the forward and the chunked head (head.py) in one nn.Module, so that
DistributedDataParallel sees every use of the parameters inside its forward.
"""

from __future__ import annotations

import os
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from . import trie_layout
from .head import head_logprobs


class Adapter:
    kind = "?"
    vocab_size: int
    max_seq_len: Optional[int]
    pad_id: int = 0

    def inputs(self, seqs: Sequence[torch.Tensor], device,
               need_from: Optional[Sequence[int]] = None) -> Tuple[Dict[str, torch.Tensor], List[int]]:
        """need_from[b]: the first token of sequence b whose hidden state is read (None: all of them)."""
        raise NotImplementedError

    def hidden(self, model: nn.Module, inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def head(self, model: nn.Module) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError


def _pad_right(seqs: Sequence[torch.Tensor], pad_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    T = max(int(s.shape[0]) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : s.shape[0]] = s
    lengths = torch.tensor([int(s.shape[0]) for s in seqs], dtype=torch.long)
    return ids, lengths


class GPTAdapter(Adapter):
    """The embedded GPT (model.py): right padding, causal attention only (pads come after real tokens).

    Prefix tree (`share_prefix`, on by default): when the caller says from which token on the hidden states
    are read (`need_from`), the micro-batch is laid out as a trie (trie_layout.py): its longest common prefix up
    to there (the opening every calculator task shares) runs once and every row reads its keys and values; each
    other run of tokens that several sequences share (a group's prompt, a first turn or a whole episode that
    several members wrote alike) is computed once, the runs packed side by side into rows whose mask lets a
    token see exactly what it sees when its sequence runs alone. The same logprobs and gradients as without
    (autograd sums a shared run's gradient over its readers; test_gpt_shared_prefix), for each distinct prefix's
    tokens once per micro-batch. `starts` are then per-sequence row maps (a LongTensor: the hidden state of
    position j is row starts[b][j]), where the padded layout gives offsets (row starts[b] + j)."""

    kind = "gpt"

    def __init__(self, model, share_prefix: bool = True):
        arch = model.architecture
        self.vocab_size = arch["vocab_size"]
        self.max_seq_len = arch["max_seq_len"]
        from .config import PAD_ID

        self.pad_id = PAD_ID if PAD_ID < self.vocab_size else 0
        self.share_prefix = share_prefix

    def inputs(self, seqs, device, need_from=None):
        if self.share_prefix and need_from is not None and len(seqs) > 1:
            P = min(common_prefix_len(seqs), min(int(x) for x in need_from))
            if P < MIN_SHARED_PREFIX:
                P = 0
            if any(int(s.shape[0]) > P for s in seqs):
                t = trie_layout.layout(seqs, P, self.pad_id, TRIE_MAX_UNIT, TRIE_MIN_ROW)
                inputs = {"ids": t.ids.to(device), "pos": t.pos.to(device), "allowed": t.allowed.to(device)}
                if P:
                    inputs["prefix"] = seqs[0][:P].unsqueeze(0).to(device)
                return inputs, t.rows
        ids, lengths = _pad_right(seqs, self.pad_id)
        T = ids.shape[1]
        return {"ids": ids.to(device), "lengths": lengths.to(device)}, [r * T for r in range(len(seqs))]

    def _hidden_trie(self, model, inputs):
        ids, pos, allowed = inputs["ids"], inputs["pos"], inputs["allowed"]
        B, R = ids.shape
        k = v = None
        if "prefix" in inputs:
            prefix = inputs["prefix"]
            P = prefix.shape[1]
            ones = torch.ones((1, P), dtype=torch.long, device=ids.device)
            _, k, v = model.features(prefix, torch.arange(P, device=ids.device).unsqueeze(0), ones, causal_only=True)
            k, v = k.expand(-1, B, -1, -1, -1), v.expand(-1, B, -1, -1, -1)
        mask = torch.ones((B, allowed.shape[-1]), dtype=torch.long, device=ids.device)  # the shape; `allowed` rules
        h, _, _ = model.features(ids, pos, mask, k, v, return_cache=False, allowed=allowed)
        return h.reshape(B * R, h.shape[-1])

    def hidden(self, model, inputs):
        if "allowed" in inputs:
            return self._hidden_trie(model, inputs)
        ids, lengths = inputs["ids"], inputs["lengths"]
        B, T = ids.shape
        ar = torch.arange(T, device=ids.device)
        attn = (ar.unsqueeze(0) < lengths.unsqueeze(1)).long()
        pos = ar.unsqueeze(0).expand(B, T)
        h, _, _ = model.features(ids, pos, attn, causal_only=True, return_cache=False)
        return h.reshape(B * T, h.shape[-1])

    def head(self, model):
        return model.tok_emb.weight, None


# ---------------------------------------------------------------------------------------------
# Hugging Face transformers


def hf_base(model):
    """The transformers model under a peft wrapper (or the model itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


DEFAULT_PACK_TOKENS = 4096  # tokens per packed row when the attention kernel builds a dense [M, M] mask
MIN_SHARED_PREFIX = 32  # a common prefix shorter than this is not worth a pass of its own
TRIE_MAX_UNIT = 384  # GPTAdapter's prefix tree: a subtree of more tokens is split (rows' attention is dense)
TRIE_MIN_ROW = 256  # ... and its rows hold at least this many tokens (units packed side by side)
DEFAULT_REST_ROW_TOKENS = 512  # shared prefix: the rests of the sequences are laid in rows of this many tokens


def common_prefix_len(seqs: Sequence[torch.Tensor]) -> int:
    """The length of the longest prefix all of `seqs` share."""
    n = min(int(s.shape[0]) for s in seqs)
    first = seqs[0][:n]
    for s in seqs[1:]:
        diff = (s[:n] != first[:n]).nonzero()
        if diff.numel():
            n = int(diff[0, 0])
    return n


def pack_rows(lengths: Sequence[int], cap: Optional[int]) -> List[List[int]]:
    """First-fit packing of sequences (in the given order) into rows of at most `cap` tokens (None: one row);
    a sequence longer than `cap` gets a row of its own. Returns the sequence indices of each row, in order."""
    if cap is None:
        return [list(range(len(lengths)))]
    rows: List[List[int]] = []
    room: List[int] = []
    for i, n in enumerate(lengths):
        for r in range(len(rows)):
            if room[r] >= n:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max(0, cap - n))
    return rows


class HFAdapter(Adapter):
    """Any AutoModelForCausalLM: the decoder (`get_decoder()`) for the hidden states, `get_output_embeddings()`
    for the head.

    Packing (`pack`: `load` turns it on when the model passes hf_backend.check_packing; an adapter constructed
    bare packs only with flash_attention_2, or when told): the
    sequences of a micro-batch are laid end to end in a row, with position ids restarting at 0 at each sequence
    and no attention mask. transformers (5.x) reads the restarts: flash_attention_2 runs variable-length
    attention over one row; sdpa and eager get a block-diagonal causal mask built from the position ids (which
    needs `use_cache=False`: with a cache the restarts are ignored). sdpa/eager rows hold at most `pack_tokens`
    tokens (first-fit; a longer sequence has a row of its own), since their mask and attention are dense over a
    row ([rows, 1, M, M] booleans); the rows are right-padded with a pseudo-sequence (positions 0, 1, ...) whose
    outputs are not read. Without packing: right padding, and no attention mask when the rows are all the same
    length."""

    kind = "hf"

    def __init__(self, model, pack: Optional[bool] = None, pack_tokens: Optional[int] = None):
        base = hf_base(model)
        cfg = base.config
        self.vocab_size = int(base.get_output_embeddings().weight.shape[0])
        self.max_seq_len = getattr(cfg, "max_position_embeddings", None)
        pad = getattr(cfg, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) and 0 <= pad < self.vocab_size else 0
        attn = getattr(cfg, "_attn_implementation", None) or getattr(cfg, "attn_implementation", None)
        self.attn_implementation = attn
        self.pack = (attn == "flash_attention_2") if pack is None else bool(pack)
        self.pack_tokens = int(pack_tokens) if pack_tokens else DEFAULT_PACK_TOKENS
        self.share_prefix = False  # hf_backend.load turns it on when the model passes check_prefix_sharing
        self.rest_row_tokens = DEFAULT_REST_ROW_TOKENS  # shared prefix: the rests' tokens per row (trie off)
        # shared prefix: the rests as a prefix tree (MCP_GYM_HF_TRIE=0: side by side, the baseline of
        # bench/hf_trie.py), its units and rows as wide as the side-by-side rows
        self.trie = os.environ.get("MCP_GYM_HF_TRIE", "1") != "0"
        self.trie_max_unit = DEFAULT_REST_ROW_TOKENS
        self.trie_min_row = DEFAULT_REST_ROW_TOKENS
        self.model_ref = weakref.ref(model)  # its dtype, read when a mask is made (the model may be converted after)
        self.micro_tokens: Optional[int] = None  # hf_backend.load: tokens per micro-batch with a gradient

    def _row_cap(self) -> Optional[int]:
        return None if self.attn_implementation == "flash_attention_2" else self.pack_tokens

    def inputs(self, seqs, device, need_from=None):
        if self.share_prefix and need_from is not None and len(seqs) > 1:
            P = min(common_prefix_len(seqs), min(int(x) for x in need_from))
            if P >= MIN_SHARED_PREFIX:
                return self.prefix_inputs(seqs, P, device)
        if self.pack:
            return self.packed_inputs(seqs, device)
        ids, lengths = _pad_right(seqs, self.pad_id)
        T = ids.shape[1]
        out = {"input_ids": ids.to(device)}
        if int(lengths.min()) < T:
            out["attention_mask"] = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long().to(device)
        return out, [r * T for r in range(len(seqs))]

    def packed_inputs(self, seqs, device, cap: Optional[int] = -1):
        lengths = [int(s.shape[0]) for s in seqs]
        rows = pack_rows(lengths, self._row_cap() if cap == -1 else cap)
        M = max(sum(lengths[i] for i in row) for row in rows)
        ids = torch.full((len(rows), M), self.pad_id, dtype=torch.long)
        pos = torch.zeros((len(rows), M), dtype=torch.long)
        starts = [0] * len(seqs)
        for r, row in enumerate(rows):
            o = 0
            for i in row:
                n = lengths[i]
                ids[r, o: o + n] = seqs[i]
                pos[r, o: o + n] = torch.arange(n)
                starts[i] = r * M + o
                o += n
            pos[r, o:] = torch.arange(M - o)  # the tail: a pseudo-sequence of its own
        return {"input_ids": ids.to(device), "position_ids": pos.to(device)}, starts

    def prefix_inputs(self, seqs, P: int, device):
        """The shared-prefix layout: the first P tokens (common to all `seqs`) computed once, and the rests as a
        prefix tree (`trie`, the default: trie_layout.py, as the embedded GPT lays them out) or side by side
        (rest_inputs). Both give each sequence's hidden states as when it runs alone."""
        if not self.trie:
            return self.rest_inputs(seqs, P, device)
        t = trie_layout.layout(seqs, P, self.pad_id, self.trie_max_unit, self.trie_min_row)
        inputs = {"prefix_ids": seqs[0][:P].unsqueeze(0), "input_ids": t.ids, "position_ids": t.pos}
        return self._with_mask(inputs, t.allowed, device), t.rows

    def _with_mask(self, inputs, allowed, device):
        """`inputs` on the device with `allowed` ([R, 1, M, P + M] booleans) as the decoder's attention mask: boolean
        on CUDA (its dtype need not match the autocast dtype of the queries), else additive in the model's dtype
        (SDPA on the CPU misreads another, and converts a boolean one in every layer)."""
        dev = torch.device(device)
        if dev.type == "cuda":
            mask = allowed
        else:
            dtype = next(iter(hf_base(self.model_ref()).parameters())).dtype if self.model_ref() is not None else torch.float32
            mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
        out = {k: v.to(dev) for k, v in inputs.items()}
        out["attention_mask"] = mask.to(dev)
        return out

    def rest_inputs(self, seqs, P: int, device):
        """The layout with the first P tokens (common to all `seqs`) computed once: `prefix_ids` [1, P]; the
        sequences' rests laid end to end in R rows of at most `rest_row_tokens` (or the longest rest) each
        (`input_ids` [R, M], right-padded), their positions (P, P+1, ... each) and an [R, 1, M, P + M] attention mask:
        every token sees the whole prefix and, causally, its own sequence. Each row attends to a copy of the
        prefix's keys and values: short rows waste little on the masked blocks between sequences, and the copies
        are R, not one per sequence. Token j >= P of sequence b is at row starts[b] + j of the hidden states."""
        rests = [s[P:] for s in seqs]
        lengths = [int(r.shape[0]) for r in rests]
        rows = pack_rows(lengths, max(self.rest_row_tokens, max(lengths)))
        M = max(sum(lengths[i] for i in row) for row in rows)
        R = len(rows)
        ids = torch.full((R, M), self.pad_id, dtype=torch.long)
        pos = torch.full((R, M), P, dtype=torch.long)
        allowed = torch.zeros((R, M, P + M), dtype=torch.bool)
        allowed[:, :, :P] = True
        causal = torch.ones((M, M), dtype=torch.bool).tril()
        starts = [0] * len(seqs)
        for r, row in enumerate(rows):
            o = 0
            for i in row:
                n = lengths[i]
                ids[r, o: o + n] = rests[i]
                pos[r, o: o + n] = torch.arange(P, P + n)
                allowed[r, o: o + n, P + o: P + o + n] = causal[:n, :n]
                starts[i] = r * M + o - P
                o += n
            allowed[r, o:, P + o:] = causal[: M - o, : M - o]  # the padding: a pseudo-sequence whose outputs are not read
        inputs = {"prefix_ids": seqs[0][:P].unsqueeze(0), "input_ids": ids, "position_ids": pos}
        return self._with_mask(inputs, allowed.unsqueeze(1), device), starts

    def _hidden_shared(self, dec, inputs):
        from transformers.cache_utils import DynamicCache

        ids = inputs["input_ids"]
        R = ids.shape[0]
        first = dec(input_ids=inputs["prefix_ids"], use_cache=True)
        cache = first.past_key_values
        if R > 1:
            cache = DynamicCache(ddp_cache_data=[(layer.keys.expand(R, -1, -1, -1), layer.values.expand(R, -1, -1, -1))
                                                 for layer in cache.layers])
        out = dec(input_ids=ids, attention_mask=inputs["attention_mask"], position_ids=inputs["position_ids"],
                  past_key_values=cache, use_cache=True)
        h = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
        return h.reshape(-1, h.shape[-1])

    def hidden(self, model, inputs):
        dec = hf_base(model).get_decoder()
        if "prefix_ids" in inputs:
            return self._hidden_shared(dec, inputs)
        out = dec(**inputs, use_cache=False)  # no cache: packed position ids are read as sequence boundaries
        h = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
        return h.reshape(-1, h.shape[-1])

    def head(self, model):
        emb = hf_base(model).get_output_embeddings()
        return emb.weight, getattr(emb, "bias", None)


def make_adapter(model) -> Adapter:
    if hasattr(model, "features") and hasattr(model, "tok_emb"):
        return GPTAdapter(model)
    return HFAdapter(model)


class LogprobModule(nn.Module):
    """forward(inputs, sel, targets, ...) -> (lp, lp_t, ent) over the selected rows of the hidden states;
    return_hidden: (lp, lp_t, ent, hs), hs those rows (the value head's input, PPO with GAE)."""

    def __init__(self, model: nn.Module, adapter: Adapter):
        super().__init__()
        self.model = model
        self.adapter = adapter

    def forward(self, inputs: Dict[str, torch.Tensor], sel: torch.Tensor, targets: torch.Tensor,
                temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, chunk: Optional[int] = None,
                need_entropy: bool = True, return_hidden: bool = False):
        h = self.adapter.hidden(self.model, inputs)
        hs = h.index_select(0, sel)
        w, b = self.adapter.head(self.model)
        out = head_logprobs(hs, w, b, targets, temperature, top_k, top_p, chunk, need_entropy)
        return (*out, hs) if return_hidden else out
