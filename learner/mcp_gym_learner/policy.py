"""The policy as the RL trainer sees it: the embedded GPT or a Hugging Face causal LM, behind one adapter.

An adapter lays a micro-batch of sequences out for its model (right padding, or packing into one row
when the attention kernel supports it), returns the final hidden states of every token as rows of a
[M, D] matrix (token j of sequence b at row starts[b] + j), and names the LM head's weight and bias.
`LogprobModule` puts the forward and the chunked head (head.py) in one nn.Module, so that
DistributedDataParallel sees every use of the parameters inside its forward.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .head import head_logprobs


class Adapter:
    kind = "?"
    vocab_size: int
    max_seq_len: Optional[int]
    pad_id: int = 0

    def inputs(self, seqs: Sequence[torch.Tensor], device) -> Tuple[Dict[str, torch.Tensor], List[int]]:
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
    """The embedded GPT (model.py): right padding, causal attention only (pads come after real tokens)."""

    kind = "gpt"

    def __init__(self, model):
        arch = model.architecture
        self.vocab_size = arch["vocab_size"]
        self.max_seq_len = arch["max_seq_len"]
        from .config import PAD_ID

        self.pad_id = PAD_ID if PAD_ID < self.vocab_size else 0

    def inputs(self, seqs, device):
        ids, lengths = _pad_right(seqs, self.pad_id)
        T = ids.shape[1]
        return {"ids": ids.to(device), "lengths": lengths.to(device)}, [r * T for r in range(len(seqs))]

    def hidden(self, model, inputs):
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

    def _row_cap(self) -> Optional[int]:
        return None if self.attn_implementation == "flash_attention_2" else self.pack_tokens

    def inputs(self, seqs, device):
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

    def hidden(self, model, inputs):
        dec = hf_base(model).get_decoder()
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
