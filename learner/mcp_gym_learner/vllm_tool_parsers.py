"""What vLLM's documented tool-call parsers return for a finished completion (the non-streaming
`extract_tool_calls` of `--tool-call-parser hermes` and `llama3_json`), written from their documented
behaviour so that mcp-gym's parser (src/agents/hf/tool-calls.ts) can be compared with them
(test/agents/tool-call-parity.test.ts) without vLLM, which does not run here:

- hermes: no `<tool_call>` in the text: no calls, the text is the content. Else every
  `<tool_call>(.*?)</tool_call>`, and a last `<tool_call>(.*)` left open, is read with json.loads and
  must have "name" and "arguments"; content is the text before the first `<tool_call>` (None if
  empty). Any failure: no calls at all, the whole text as content.
- llama3_json: neither `<|python_tag|>` nor `{` in the text: no calls. Else the first match of a
  regex for JSON objects nested at most two deep, several joined by `;`, is split at `;`, each part
  read with json.loads and must have "name" and "arguments" or "parameters"; content None. Any
  failure (or no match): no calls, the whole text as content.

    python -m mcp_gym_learner.vllm_tool_parsers < [{"family": "hermes"|"llama3_json", "text"}] > results
"""

from __future__ import annotations

import json
import re
import sys

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_LLAMA = re.compile(r"{[^{}]*(?:{[^{}]*}[^{}]*)*}(?:\s*;\s*{[^{}]*(?:{[^{}]*}[^{}]*)*})*", re.DOTALL)


def hermes(text: str) -> dict:
    if "<tool_call>" not in text:
        return {"called": False, "calls": [], "content": text}
    try:
        calls = []
        for a, b in _HERMES.findall(text):
            obj = json.loads(a if a else b)
            calls.append({"name": obj["name"], "arguments": json.dumps(obj["arguments"], ensure_ascii=False)})
        content = text[: text.find("<tool_call>")]
        return {"called": True, "calls": calls, "content": content or None}
    except Exception:
        return {"called": False, "calls": [], "content": text}


def llama3_json(text: str) -> dict:
    if not ("<|python_tag|>" in text or "{" in text):
        return {"called": False, "calls": [], "content": text}
    m = _LLAMA.search(text)
    if not m:
        return {"called": False, "calls": [], "content": text}
    try:
        calls = []
        for part in (p.strip() for p in m.group(0).split(";")):
            if not part:
                continue
            obj = json.loads(part)
            calls.append({"name": obj["name"], "arguments": json.dumps(obj["arguments"] if "arguments" in obj else obj["parameters"])})
        return {"called": True, "calls": calls, "content": None}
    except Exception:
        return {"called": False, "calls": [], "content": text}


def main() -> int:
    cases = json.load(sys.stdin)
    json.dump([hermes(c["text"]) if c["family"] == "hermes" else llama3_json(c["text"]) for c in cases], sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
