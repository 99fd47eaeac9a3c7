"""The mcp-gym learner: a small GPT (or a Hugging Face causal LM) trained with PyTorch (SFT and the
GRPO family), exported to ONNX for the TypeScript sampler.

See PROTOCOL.md beside this package and docs/architecture.md ("Contracts", "Algorithms").
`mcp-gym-learner serve` (or `python -m mcp_gym_learner serve`) speaks the JSON-lines protocol on
stdin/stdout (`--http` over HTTP); the contract it validates requests against is
protocol.schema.json, generated from src/trainers/protocol.ts.
"""

__version__ = "0.2.0"

__all__ = [
    # the contract and the serving
    "protocol", "service", "stdio_server", "http_server", "put_files",
    # the model's kinds
    "backend", "gpt_backend", "hf_backend", "config", "model", "export", "slot_decoder",
    # training
    "sft", "batch", "rl_config", "rl", "metrics", "losses", "reference", "checkpoint", "policy", "head",
    "logprobs",
    # processes
    "runtime", "distributed", "torchrun", "ddp_check",
]
