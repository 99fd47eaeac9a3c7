"""The reference side of the sampling check (test/agents/sampling-parity.test.ts): the distribution
transformers' generation samples from, for given logits and settings, with its own warpers in the
order `GenerationMixin._get_logits_processor` applies them (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, MinPLogitsWarper; min_tokens_to_keep 1), in float64; and, where the learner supports
the settings (no min_p), the learner's own processed logprobs (logprobs.processed_logprobs).

    python -m mcp_gym_learner.sampling_reference < cases.json > out.json
    cases: [{"logits": [...], "temperature", "top_k", "top_p", "min_p"}]
    out:   [{"probs": [...], "learner": [...] | null}]   (probabilities; 0 for a removed token)
"""

from __future__ import annotations

import json
import sys

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .logprobs import processed_logprobs


def reference_probs(logits, temperature: float, top_k: int, top_p: float, min_p: float) -> list:
    scores = torch.tensor([logits], dtype=torch.float64)
    procs = LogitsProcessorList()
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k and top_k > 0:
        procs.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    if min_p and min_p > 0:
        procs.append(MinPLogitsWarper(min_p=min_p, min_tokens_to_keep=1))
    out = procs(torch.zeros((1, 1), dtype=torch.long), scores)
    return torch.softmax(out, dim=-1)[0].tolist()


def main() -> int:
    cases = json.load(sys.stdin)
    out = []
    for c in cases:
        t, k, p, m = float(c["temperature"]), int(c.get("top_k", 0)), float(c.get("top_p", 1.0)), float(c.get("min_p", 0.0))
        learner = None
        if m == 0:
            lp = processed_logprobs(torch.tensor([c["logits"]], dtype=torch.float64), t, k, p)[0]
            learner = torch.exp(lp).tolist()
        out.append({"probs": reference_probs(c["logits"], t, k, p, m), "learner": learner})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
