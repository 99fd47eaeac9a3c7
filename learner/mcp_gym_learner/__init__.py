"""The mcp-gym learner: a small GPT (or a Hugging Face causal LM) trained with PyTorch (SFT and the
GRPO family), exported to ONNX for the TypeScript sampler.

See ../PROTOCOL.md. `python3 -m mcp_gym_learner serve` speaks the JSON-lines protocol (`--http` over HTTP).
"""

__all__ = ["config", "model", "logprobs", "sft", "export", "server", "rl", "losses", "head", "policy",
           "http_server", "distributed", "ddp_check", "torchrun"]
