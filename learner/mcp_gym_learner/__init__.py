"""The mcp-gym learner: a small GPT trained with PyTorch, exported to ONNX for the TypeScript sampler.

See ../PROTOCOL.md. `python3 -m mcp_gym_learner serve` speaks the JSON-lines protocol.
"""

__all__ = ["config", "model", "logprobs", "sft", "export", "server"]
