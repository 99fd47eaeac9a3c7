"""Plays mcp-gym tasks served by `mcp-gym serve-env` with OpenEnv's own Python client (openenv-core).

    npx mcp-gym serve-env --suite kv --port 8001 &
    .venv/bin/python examples/openenv_client.py --url http://127.0.0.1:8001 --policy random --episodes 20

--policy expert needs --solutions FILE: a JSON object {task_id: {"calls": [{"tool", "arguments"}], "answer"}}
(the tasks' reference solutions; test/env/openenv-client.test.ts writes one). Prints one JSON line: episodes,
success rate, mean reward, and what each check found. --check-http also drives the HTTP routes and validates every
answer with openenv-core's own pydantic models; --concurrent N plays N sessions at once (asyncio) and checks that
each ends with its own task's state (--concurrent-task: all on one stateful task, whose state they must not share).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from typing import Any, Dict, List, Optional

import requests
from openenv.core.env_server.types import (EnvironmentMetadata, HealthResponse, ResetResponse, SchemaResponse,
                                           StepResponse)
from openenv.core.generic_client import GenericEnvClient


def expert_actions(solution: Dict[str, Any]) -> List[Dict[str, Any]]:
    calls = [{"type": "call_tool", "tool_name": c["tool"], "arguments": c["arguments"]} for c in solution["calls"]]
    return calls + [{"type": "answer", "content": solution["answer"]}]


def random_action(rng: random.Random, tools: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A tool with arguments drawn from its schema's property types, or a random answer."""
    if not tools or rng.random() < 0.3:
        return {"type": "answer", "content": rng.choice([str(rng.randint(0, 999)), "done", "I do not know"])}
    tool = rng.choice(tools)
    args: Dict[str, Any] = {}
    for name, prop in (tool["input_schema"].get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        args[name] = rng.randint(-9, 99) if kind in ("integer", "number") else "".join(
            rng.choice("abcxyz019 ") for _ in range(rng.randint(1, 8)))
    return {"type": "call_tool", "tool_name": tool["name"], "arguments": args}


def play(env: Any, policy: str, task_id: Optional[str], seed: int, solutions: Dict[str, Any]) -> Dict[str, Any]:
    """One episode over a synchronous GenericEnvClient; its end (observation, reward)."""
    result = env.reset(task_id=task_id) if task_id else env.reset(seed=seed)
    obs = result.observation
    rng = random.Random(seed)
    planned = expert_actions(solutions[obs["task_id"]]) if policy == "expert" else None
    turn = 0
    while not result.done:
        action = planned[turn] if planned is not None and turn < len(planned) else random_action(rng, obs["tools"])
        result = env.step(action)
        obs = {**obs, **result.observation}
        turn += 1
    state = env.state()
    return {"task_id": obs["task_id"], "reward": result.reward, "success": bool(result.observation.get("success")),
            "reward_parts": result.observation.get("reward_parts"), "step_count": state["step_count"],
            "finish": result.observation.get("finish")}


async def play_async(url: str, solution: Dict[str, Any], task_id: str) -> Dict[str, Any]:
    """One expert episode over the async client, step by step (other sessions interleave)."""
    async with GenericEnvClient(base_url=url) as env:
        result = await env.reset(task_id=task_id)
        for action in expert_actions(solution):
            result = await env.step(action)
            await asyncio.sleep(0)
        state = await env.state()
        return {"task_id": task_id, "success": bool(result.observation.get("success")), "state_task": state["task_id"],
                "reward": result.reward}


def check_http(url: str, solutions: Dict[str, Any]) -> Dict[str, Any]:
    """The HTTP routes, each answer validated with openenv-core's models; one expert episode by session id."""
    HealthResponse.model_validate(requests.get(f"{url}/health", timeout=30).json())
    meta = EnvironmentMetadata.model_validate(requests.get(f"{url}/metadata", timeout=30).json())
    schema = SchemaResponse.model_validate(requests.get(f"{url}/schema", timeout=30).json())
    task_id = next(iter(solutions))
    r = requests.post(f"{url}/reset", json={"task_id": task_id}, timeout=60)
    r.raise_for_status()
    first = ResetResponse.model_validate(r.json())
    sid = r.headers["x-session-id"]
    last = None
    for action in expert_actions(solutions[task_id]):
        s = requests.post(f"{url}/step", json={"action": action, "session_id": sid}, timeout=60)
        s.raise_for_status()
        last = StepResponse.model_validate(s.json())
    bad = requests.post(f"{url}/step", json={"action": {"type": "call_tool"}, "session_id": sid}, timeout=30)
    requests.post(f"{url}/close", json={"session_id": sid}, timeout=30)
    return {"metadata_name": meta.name, "schema_keys": sorted(schema.model_dump().keys()),
            "first_task": first.observation["task_id"], "done": last.done if last else None,
            "reward": last.reward if last else None, "success": bool(last.observation.get("success")) if last else None,
            "bad_status": bad.status_code}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--policy", choices=["expert", "random"], default="random")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--solutions", help="JSON {task_id: {calls, answer}} (the expert's)")
    ap.add_argument("--concurrent", type=int, default=0, help="also play this many expert sessions at once")
    ap.add_argument("--concurrent-task", help="the task all the concurrent sessions play (default: a task each)")
    ap.add_argument("--check-http", action="store_true")
    a = ap.parse_args()
    solutions: Dict[str, Any] = {}
    if a.solutions:
        with open(a.solutions) as f:
            solutions = json.load(f)
    if a.policy == "expert" and not solutions:
        sys.exit("--policy expert needs --solutions FILE")
    ids = list(solutions)
    out: Dict[str, Any] = {"policy": a.policy}
    with GenericEnvClient(base_url=a.url).sync() as env:
        eps = [play(env, a.policy, ids[i % len(ids)] if a.policy == "expert" else None, i, solutions)
               for i in range(a.episodes)]
    out.update(episodes=len(eps), success_rate=sum(e["success"] for e in eps) / max(1, len(eps)),
               mean_reward=sum(e["reward"] or 0 for e in eps) / max(1, len(eps)),
               finishes=sorted({e["finish"] for e in eps}), rewards=[e["reward"] for e in eps])
    if a.concurrent:
        async def all_at_once():
            chosen = [a.concurrent_task or ids[i % len(ids)] for i in range(a.concurrent)]
            return await asyncio.gather(*[play_async(a.url, solutions[t], t) for t in chosen])
        runs = asyncio.run(all_at_once())
        out["concurrent"] = {"sessions": len(runs), "success": sum(r["success"] for r in runs),
                             "own_task": sum(r["state_task"] == r["task_id"] for r in runs)}
    if a.check_http:
        out["http"] = check_http(a.url, solutions)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
