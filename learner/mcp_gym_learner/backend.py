"""What the command service needs of a loaded model, whatever its kind: a Backend.

One backend per kind of model: gpt_backend.py (the project's embedded GPT: model directory, ONNX
export, SFT, logprobs) and hf_backend.py (a Hugging Face causal LM through transformers and peft).
A backend says what it supports beyond loading, training and writing (`supports`); the service asks
it with `require`, which refuses the others with a message that says why.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional

import torch

from .policy import Adapter
from .protocol import RequestError


def check_sequences(seqs: List[Any], starts: List[Any], vocab_size: int, max_seq_len: Optional[int]) -> None:
    """The `logprobs` command's sequences and starts, checked with messages that name the entry."""
    V, S = vocab_size, max_seq_len
    for b, s in enumerate(seqs):
        if len(s) < 1 or (S is not None and len(s) > S):
            raise RequestError(f"sequences[{b}]: length {len(s)} is not in [1, max_seq_len {S}]")
        for i, t in enumerate(s):
            if type(t) is not int or not 0 <= t < V:
                raise RequestError(f"sequences[{b}][{i}]: token id {t!r} is out of range [0, {V})")
    if len(starts) != len(seqs):
        raise RequestError(f"starts: must be a list of {len(seqs)} integers (one per sequence)")
    for b, st in enumerate(starts):
        if not st <= len(seqs[b]):
            raise RequestError(f"starts[{b}]: must be an integer in [1, {len(seqs[b])}] "
                               f"(the first scored token; token 0 has no context), got {st!r}")


class Backend:
    name = "?"
    # Optional capabilities: the commands "sft" and "logprobs", and "inline" (export's files in the answer).
    supports: FrozenSet[str] = frozenset()
    autocast_dtype: Optional[torch.dtype] = None
    compute_dtype: Optional[torch.dtype] = None  # a low-precision compute copy (compute_copy.py; HF on the CPU)

    def __init__(self, model: torch.nn.Module, adapter: Adapter, model_dir: str, config: Dict[str, Any]):
        self.model = model
        self.adapter = adapter
        self.model_dir = model_dir
        self.config = config  # config.json's contents (embedded GPT), or what the load was (HF)
        self.sft_steps = 0

    def require(self, what: str) -> None:
        if what not in self.supports:
            raise RequestError(self.refusal(what))

    def refusal(self, what: str) -> str:
        return f"model: {what} is not supported by the loaded {self.name} model"

    @property
    def version(self) -> int:
        return int(self.config.get("version", 0))

    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def reference_mode(self, requested: str) -> str:
        """How the trainer keeps the frozen reference ("copy" or "swap")."""
        return requested

    def load_result(self) -> Dict[str, Any]:
        """What `load` answers about the model (the service adds device, threads, world_size)."""
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """What `state` and checkpoints' meta.json add about the model."""
        return {}

    def write(self, model_dir: str, full: Optional[bool], rl_steps: int, state=None) -> Dict[str, Any]:
        """export / save into model_dir (`full`: True a new graph, False never one, None when needed)."""
        raise NotImplementedError
