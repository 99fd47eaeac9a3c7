"""TRL's GRPOTrainer on mcp-gym tasks served by `mcp-gym serve-env` (OpenEnv): the rewards come from mcp-gym.

    npx mcp-gym serve-env --suite kv --port 8001 &
    .venv/bin/python examples/trl_openenv.py --url http://127.0.0.1:8001 --model MODEL_DIR --out OUT --steps 20

The environment TRL sees (`environment_factory`) is one OpenEnv session per rollout, through openenv-core's own
client: `reset` starts an mcp-gym episode (a task drawn from the row's `seed`) and returns its opening messages,
which TRL appends to the prompt; each of the task's MCP tools is a method TRL offers the model (its name, its
description and its JSON Schema's properties as typed, documented arguments), whose call is an OpenEnv step;
the reward function sends the model's last message as the episode's answer, and the episode's reward (the
server's `--reward`: the task's checks on the servers' state, the step and efficiency terms) is the reward GRPO
learns from. Tested with trl 1.16.0, transformers 5.24.0, openenv-core 0.3.0 (learner/requirements-trl.lock).

TRL parses tool calls only for chat templates it knows (trl.chat_template_utils.add_response_schema): a
Qwen3-family model whose template is an older Qwen3 revision gets TRL's Qwen3 template. Prints one JSON line:
the steps, the reward of each step (mean over its rollouts), and the episodes the server played.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from typing import Any, Dict, List, Optional, Union

from openenv.core.generic_client import GenericEnvClient

_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "array": list}


def _py_type(spec: Dict[str, Any]) -> Any:
    """A JSON Schema property as a Python type transformers' get_json_schema reads back (unions for anyOf)."""
    if "anyOf" in spec or "oneOf" in spec:
        kinds = [_py_type(s) for s in spec.get("anyOf", spec.get("oneOf", []))]
        kinds = list(dict.fromkeys(kinds))
        return kinds[0] if len(kinds) == 1 else Union[tuple(kinds)]  # type: ignore[return-value]
    t = spec.get("type")
    if isinstance(t, list):
        kinds = [_JSON_TYPES.get(x, str) for x in t if x != "null"]
        return kinds[0] if len(kinds) == 1 else Union[tuple(kinds)]  # type: ignore[return-value]
    return _JSON_TYPES.get(t, str)


def _tool_method(name: str, description: str, schema: Dict[str, Any]):
    """A method `name(self, **arguments) -> str` with a typed signature and a Google-style docstring."""
    props: Dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: Dict[str, Any] = {}
    doc = []
    for arg in sorted(props, key=lambda a: a not in required):  # required ones first
        spec = props[arg] if isinstance(props[arg], dict) else {}
        kind = _py_type(spec)
        default = inspect.Parameter.empty if arg in required else None
        if default is None:
            kind = Optional[kind]
        annotations[arg] = kind
        params.append(inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind))
        doc.append(f"    {arg}: {' '.join(str(spec.get('description') or arg).split())}")

    def method(self, *args, **kwargs):
        bound = inspect.signature(method).bind(self, *args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != "self" and v is not None}
        return self._call(name, arguments)

    method.__name__ = name
    method.__qualname__ = f"McpGymEnv.{name}"
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    text = " ".join((description or name).split())
    method.__doc__ = f"{text}\n\nArgs:\n" + ("\n".join(doc) if doc else "") + "\n\nReturns:\n    The tool's result.\n"
    if not doc:
        method.__doc__ = f"{text}\n\nReturns:\n    The tool's result.\n"
    return method


def environment_class(url: str, headers: Optional[Dict[str, str]] = None):
    """The environment class TRL instantiates per rollout, its tools those of the served tasks."""
    probe = GenericEnvClient(base_url=url).sync()
    with probe:
        tools = probe.reset(seed=0).observation["tools"]

    class McpGymEnv:
        """One OpenEnv session of mcp-gym serve-env: an episode per rollout."""

        episodes = 0

        def __init__(self):
            self.client = GenericEnvClient(base_url=url).sync()
            self.client.connect()
            self.done = False
            self.reward = 0.0

        def reset(self, **kwargs) -> str:
            seed = kwargs.get("seed")
            result = self.client.reset(seed=int(seed)) if seed is not None else self.client.reset()
            self.done, self.reward = False, 0.0
            McpGymEnv.episodes += 1
            return "\n\n".join(m["content"] for m in result.observation["messages"] if m["content"])

        def _call(self, name: str, arguments: Dict[str, Any]) -> str:
            if self.done:
                return "The episode is over: answer now."
            r = self.client.step({"type": "call_tool", "tool_name": name, "arguments": arguments})
            if r.done:
                self.done, self.reward = True, float(r.reward or 0.0)
            tr = r.observation.get("tool_result") or {}
            return tr.get("text", "")

        def _finish(self, answer: str) -> float:
            """The model's last message as the episode's answer; the episode's reward."""
            if not self.done:
                r = self.client.step({"type": "answer", "content": answer})
                self.done, self.reward = True, float(r.reward or 0.0)
            return self.reward

    for t in tools:
        setattr(McpGymEnv, t["name"], _tool_method(t["name"], t["description"], t["input_schema"]))
    return McpGymEnv


def _last_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    for m in reversed(completion):
        if m.get("role") == "assistant" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def mcp_gym_reward(completions: List[Any], environments: List[Any], **kwargs) -> List[float]:
    """The reward of each rollout's mcp-gym episode, its last message sent as the answer."""
    return [env._finish(_last_text(c)) for c, env in zip(completions, environments)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the serve-env server, http://HOST:PORT")
    ap.add_argument("--model", required=True, help="a Hugging Face checkpoint directory")
    ap.add_argument("--out", required=True, help="where the trained model is saved")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=64, help="rows of the dataset (seeds 0..N-1: the tasks drawn)")
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=4, help="per_device_train_batch_size (rollouts per step)")
    ap.add_argument("--max-completion-length", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--qwen3-template", action="store_true",
                    help="render with TRL's Qwen3 template (Hermes-style <tool_call> JSON) whatever the model's own: for "
                         "a model whose template TRL cannot parse tool calls of, e.g. SmolLM2 (ChatML tokens)")
    a = ap.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl import chat_template_utils as ctu

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="float32")
    if (a.qwen3_template or model.config.model_type == "qwen3") and tokenizer.chat_template != ctu.qwen3_chat_template:
        tokenizer.chat_template = ctu.qwen3_chat_template  # the Qwen3 template TRL parses tool calls of
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    Env = environment_class(a.url)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": ""}], "seed": i} for i in range(a.prompts)])
    config = GRPOConfig(
        output_dir=os.path.join(a.out, "trl"),
        max_steps=a.steps,
        per_device_train_batch_size=a.batch_size,
        num_generations=a.num_generations,
        max_completion_length=a.max_completion_length,
        learning_rate=a.lr,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=a.seed,
        temperature=1.0,
    )
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=data,
                          reward_funcs=[mcp_gym_reward], environment_factory=Env)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer.train()
    changed = sum(int(not (before[k] == v.detach()).all()) for k, v in trainer.model.named_parameters())
    trainer.save_model(a.out)
    tokenizer.save_pretrained(a.out)
    rewards = [h.get("reward") for h in trainer.state.log_history if "reward" in h]
    print(json.dumps({"steps": trainer.state.global_step, "step_rewards": rewards, "episodes": Env.episodes,
                      "tensors_changed": changed, "tensors": len(before), "out": a.out}))


if __name__ == "__main__":
    main()
