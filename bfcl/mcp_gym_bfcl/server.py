"""One BFCL entry's functions as an MCP server over stdio (the official Python MCP SDK, lowlevel).

Started once per episode (mcp-gym gives a stdio server a process per episode), so every episode
has its own state:
- single-turn categories: the entry's functions are listed; a call is acknowledged, not run
  (BFCL grades the calls themselves, by its AST checker, as it does for every model);
- multi-turn categories: BFCL's backend classes (GorillaFileSystem, TwitterAPI, ...) are created
  and loaded with the entry's initial_config by BFCL's own executor, and each call is run by it,
  so the agent reads exactly the results BFCL's inference loop would give it. Functions BFCL holds
  back until a later turn (multi_turn_miss_func) are listed only after the control tool
  `mcp_gym_reveal_functions` (marked `_meta: {"mcp-gym/control": true}`, never shown to the agent)
  was called for that turn; the server then sends notifications/tools/list_changed.

Calls are checked before they run: the tool must be listed now, and every argument name must be a
Python identifier (BFCL's executor eval()s the call text it builds).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import uuid

from .runtime import prepare

from .data import CONTROL_TOOL


class EntryState:
    """The tools visible now and, for multi-turn entries, the backend instances."""

    def __init__(self, entry: dict):
        self.entry = entry
        self.tools = {t["name"]: t for t in entry["tools"]}
        self.missed = entry.get("missed", {})
        self.revealed: set[str] = set()
        self.multi = entry["multi_turn"]
        # A name of our own for BFCL's executor's instance table: one per process.
        self.model = "mcpgym_" + uuid.uuid4().hex[:12]
        if self.multi:
            self._execute([])  # creates and loads the instances from initial_config

    def _execute(self, calls: list[str]) -> list[str]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        results, _ = execute_multi_turn_func_call(
            calls,
            self.entry["initial_config"],
            self.entry["involved_classes"],
            self.model,
            self.entry["id"],
            long_context=self.entry.get("long_context", False),
            is_evaL_run=False,
        )
        return results

    def reveal(self, turn: int) -> list[str]:
        added = []
        for t in self.missed.get(str(turn), []):
            if t["name"] not in self.tools:
                self.tools[t["name"]] = t
                added.append(t["name"])
        self.revealed.add(str(turn))
        return added

    def call(self, name: str, arguments: dict) -> tuple[str, bool]:
        from .data import safe_call_text

        if name not in self.tools:
            return f"Error: unknown function '{name}'", True
        if not self.multi:
            return f"Recorded the call to {name}.", False
        try:
            text = safe_call_text(name, arguments)
        except ValueError as err:
            return f"Error: {err}", True
        result = self._execute([text])[0]
        return result, result.startswith("Error during execution")


def load_entry(category: str, entry_id: str, tasks_file: str | None) -> dict:
    if tasks_file:
        with open(tasks_file, encoding="utf8") as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    if e["id"] == entry_id:
                        return e
        raise SystemExit(f"no entry '{entry_id}' in {tasks_file}")
    from .data import export_category

    for e in export_category(category):
        if e["id"] == entry_id:
            return e
    raise SystemExit(f"no entry '{entry_id}' in BFCL category {category}")


def serve(entry: dict) -> None:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.stdio import stdio_server

    state = EntryState(entry)

    async def list_tools(ctx, params):
        tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"]) for t in state.tools.values()]
        for t in state.entry.get("control_tools", []):
            tools.append(types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"], _meta=t["_meta"]))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
        args = params.arguments or {}
        if params.name == CONTROL_TOOL and state.missed:
            added = state.reveal(int(args.get("turn", -1)))
            if added:
                await ctx.session.send_tool_list_changed()
            return types.CallToolResult(content=[types.TextContent(text=json.dumps({"added": added}))])
        text, is_error = state.call(params.name, args)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)

    server = Server("bfcl-" + re.sub(r"[^A-Za-z0-9_-]", "_", entry["id"]), version="bfcl-eval 2026.3.23", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))

    anyio.run(main)


def main(argv: list[str]) -> None:
    prepare()
    p = argparse.ArgumentParser(prog="python -m mcp_gym_bfcl serve", description="One BFCL entry's functions as an MCP server over stdio.")
    p.add_argument("--category", required=True)
    p.add_argument("--id", required=True, help="the entry's id, e.g. multi_turn_base_0")
    p.add_argument("--tasks", help="the exported entries (JSON lines, `export`): read instead of BFCL's data, faster")
    a = p.parse_args(argv)
    from .data import check_category

    try:
        check_category(a.category)
    except ValueError as err:
        print(str(err), file=sys.stderr)
        raise SystemExit(2)
    serve(load_entry(a.category, a.id, a.tasks))
