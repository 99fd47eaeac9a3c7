"""BFCL's entries as mcp-gym's task material, read with BFCL's own loaders and converters.

`export_category(category)` yields one dict per entry:
  id, category, multi_turn, question (BFCL's turns of messages), tools (the functions as MCP tool
  schemas: BFCL's `convert_to_tool` for OpenAI function calling, the schema its OpenAI handlers
  send), missed ({turn: tools} held back until that turn, multi_turn_miss_func), involved_classes,
  long_context, and expert: per user turn, the calls of a reference solution (from BFCL's possible
  answers or its multi-turn ground truth) as {name, arguments} with the tool names the model sees.
"""
from __future__ import annotations

import ast
import copy
import inspect
import importlib
import keyword
from typing import Any, Iterator

from . import CATEGORIES


def _added_functions_prompt() -> str:
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    return DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def _bfcl():
    from bfcl_eval import utils
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.model_handler.utils import convert_to_tool

    return utils, ModelStyle, GORILLA_TO_OPENAPI, convert_to_tool


ADDED_FUNCTIONS_PROMPT = ""

# The multi-turn server's control tool (server.py): reveals the functions BFCL holds back until a
# turn. Exported with the entry, so that mcp-gym knows the server's first tool list without starting it.
CONTROL_TOOL = "mcp_gym_reveal_functions"
CONTROL_TOOL_DOC = {
    "name": CONTROL_TOOL,
    "description": "mcp-gym's control call: lists the functions BFCL holds back until the given turn.",
    "inputSchema": {"type": "object", "properties": {"turn": {"type": "integer"}}, "required": ["turn"]},
    "_meta": {"mcp-gym/control": True},
}

# Entries no output can pass: their possible answer contradicts their own function doc, so BFCL's
# checker refuses even the ground truth (the error BFCL gives, checked by learner-side tests in
# bfcl/tests). They stay in the suites (they count as failures for every model, as in BFCL);
# the expert is not expected to pass them.
UNPASSABLE = {
    "simple_java_36": "'parts' is an ArrayList of type 'any', whose elements BFCL's Java converter reads as strings, while the possible answer holds the number 42 and the boolean true",
    "simple_java_65": "'params' is an ArrayList of type 'any', whose elements BFCL's Java converter reads as strings, while the possible answer holds the boolean true",
    "simple_java_64": "value_error:dict_value: the possible answer of 'meta' is {\"format\": \"epoch_millis\"}, not a list of accepted values, so the checker expects one of its characters",
    "live_simple_106-63-0": "simple_function_checker:missing_required: the possible answer omits 'auto_loan_payment_start', which the function doc requires",
    "live_simple_112-68-0": "simple_function_checker:missing_required: the possible answer omits 'acc_routing_start', which the function doc requires",
    "live_multiple_507-149-4": "simple_function_checker:missing_required: the possible answer of 'origin_airport' is only '' (left out), which the function doc requires",
    "live_multiple_862-181-3": "simple_function_checker:unexpected_param: the possible answer passes 'journey_start_time' to Trains_1_FindTrains, whose doc has no such parameter",
    "live_multiple_964-207-0": "simple_function_checker:missing_required: the possible answer passes 'question' to transfer_to_human_agent, whose doc requires 'statement'",
}


def check_category(category: str) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category '{category}'; the categories: {', '.join(CATEGORIES)}")


def mcp_tools(functions: list[dict]) -> list[dict]:
    """BFCL function docs -> MCP tools, by BFCL's own converter for OpenAI function calling."""
    _utils, ModelStyle, GORILLA_TO_OPENAPI, convert_to_tool = _bfcl()
    out = []
    for t in convert_to_tool(copy.deepcopy(functions), GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS):
        f = t["function"]
        out.append({"name": f["name"], "description": f.get("description", ""), "inputSchema": f["parameters"]})
    return out


def load_entries(category: str, hints: bool = True) -> list[dict]:
    """The category's entries as BFCL loads them: with the language hints for inference (hints=True),
    without them for evaluation (as BFCL's evaluate does)."""
    check_category(category)
    utils = _bfcl()[0]
    return utils.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=hints)


def load_ground_truth(category: str) -> list[dict] | None:
    """The possible answers aligned with the entries by index (BFCL aligns them so), or None for
    the relevance and irrelevance categories, which have none."""
    utils = _bfcl()[0]
    if utils.is_relevance_or_irrelevance(category):
        return None
    return utils.load_ground_truth_entry(category)


# ---- reference solutions -------------------------------------------------------------------------


def _placeholder(schema: dict) -> Any:
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(schema.get("type"), "example")


def _pick(values: Any, required: bool = False) -> tuple[bool, Any]:
    """One accepted value of a possible answer's list: (omit, value). '' means an optional parameter
    may be left out; a required one takes the first other value."""
    if isinstance(values, list):
        if not required and ("" in values or not values):
            return True, None
        rest = [v for v in values if v != ""]
        if not rest:
            return True, None
        v = rest[0]
    else:
        v = values
    if isinstance(v, dict):
        inner = {}
        for k, vs in v.items():
            omit, x = _pick(vs)
            if not omit:
                inner[k] = x
        return False, inner
    if isinstance(v, list):
        return False, [_pick([x], True)[1] if isinstance(x, dict) else x for x in v]
    return False, v


def _java_scalar(v: Any, type_: str | None) -> list[str]:
    """Java source texts a scalar may be written as, for BFCL's Java type converter."""
    if isinstance(v, bool):
        return ["true" if v else "false"]
    if isinstance(v, str):
        return [v, f'"{v}"']
    if type_ == "float":
        return [f"{v}f", f"{float(v)}f"]
    if type_ == "long":
        return [f"{v}L"]
    if type_ == "double":
        return [repr(float(v)), str(v)]
    return [str(v), repr(v)]


def _java_candidates(v: Any, spec: dict) -> list[str]:
    type_ = spec.get("type")
    nested = (spec.get("items") or {}).get("type")
    if type_ == "ArrayList" and isinstance(v, list):
        if not v:
            return ["new ArrayList<>()"]
        return [f"new ArrayList<>(Arrays.asList({', '.join(_java_scalar(x, nested)[k % 2] if len(_java_scalar(x, nested)) > 1 else _java_scalar(x, nested)[0] for x in v)}))" for k in (0, 1)]
    if type_ == "Array" and isinstance(v, list):
        t = {"integer": "int", "String": "String", "float": "float", "double": "double", "long": "long", "boolean": "boolean"}.get(nested or "", "Object")
        return [f"new {t}[]{{{', '.join(_java_scalar(x, nested)[k % 2] if len(_java_scalar(x, nested)) > 1 else _java_scalar(x, nested)[0] for x in v)}}}" for k in (0, 1)]
    if type_ == "HashMap" and isinstance(v, dict):
        if not v:
            return ["new HashMap<>()"]
        outs = []
        for k in (1, 0):
            puts = " ".join(f'put("{key}", {_java_scalar(x, None)[k % 2] if len(_java_scalar(x, None)) > 1 else _java_scalar(x, None)[0]});' for key, x in v.items())
            outs.append(f"new HashMap<String, Object>() {{{{ {puts} }}}}")
        return outs
    return _java_scalar(v, type_)


def _java_text(values: Any, spec: dict) -> str | None:
    """The Java source text of an accepted value that BFCL's own Java type converter reads back as
    that value (checked by running the converter), or None."""
    from bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter import java_type_converter

    for v in [x for x in (values if isinstance(values, list) else [values]) if x != ""]:
        v = _pick([v], True)[1]  # a dict's own values are lists of accepted values too
        for text in _java_candidates(v, spec):
            try:
                got = java_type_converter(text, spec.get("type"), (spec.get("items") or {}).get("type"))
            except Exception:
                continue
            if got == v or (isinstance(v, str) and got == v):
                return text
    return None


def _js_text(value: Any) -> str:
    """A value as the JavaScript source text BFCL's type converter reads back."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_js_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def single_turn_expert(entry: dict, raw_functions: list[dict], ground_truth: dict | None, category: str, tools: list[dict]) -> list[dict]:
    """The calls of a correct answer to a single-turn entry (raw_functions: the docs without the
    language hints, whose parameter types BFCL's checker converts Java and JavaScript values by)."""
    if "irrelevance" in category:
        return []
    if ground_truth is None:  # live_relevance: any well-formed call passes
        tool = tools[0]
        params = tool["inputSchema"].get("properties", {})
        required = tool["inputSchema"].get("required", [])
        return [{"name": tool["name"], "arguments": {p: _placeholder(params.get(p, {})) for p in required}}]
    java = "java" in category and "javascript" not in category
    js = "javascript" in category
    docs = {f["name"]: f for f in raw_functions}
    calls = []
    for item in ground_truth["ground_truth"]:
        ((func, params),) = item.items()
        doc = docs.get(func, {}).get("parameters", {})
        required = set(doc.get("required", []))
        props = doc.get("properties", {})
        args = {}
        for p, values in params.items():
            omit, v = _pick(values, p in required)
            if omit:
                continue
            if java:
                text = _java_text(values, props.get(p, {}))
                args[p] = text if text is not None else str(v)
            elif js:
                args[p] = _js_text(v)
            else:
                args[p] = v
        calls.append({"name": func.replace(".", "_"), "arguments": args})
    return calls


def _method_params(involved_classes: list[str], name: str) -> list[str]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    for class_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        method = getattr(cls, name, None)
        if method is not None and not name.startswith("_"):
            return [p for p in inspect.signature(method).parameters if p != "self"]
    raise ValueError(f"no backend method '{name}' in {involved_classes}")


def parse_call(text: str, involved_classes: list[str]) -> dict:
    """A ground-truth call string ("mv(source='a', destination='b')", positional arguments too) as
    {name, arguments}, the positional ones named by the backend method's signature."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text}")
    name = node.func.id
    args: dict[str, Any] = {}
    if node.args:
        names = _method_params(involved_classes, name)
        for i, a in enumerate(node.args):
            args[names[i]] = ast.literal_eval(a)
    for kw in node.keywords:
        args[kw.arg] = ast.literal_eval(kw.value)
    return {"name": name, "arguments": args}


def export_category(category: str) -> Iterator[dict]:
    utils = _bfcl()[0]
    global ADDED_FUNCTIONS_PROMPT
    ADDED_FUNCTIONS_PROMPT = _added_functions_prompt()
    entries = load_entries(category, hints=True)
    raw = load_entries(category, hints=False)
    truths = load_ground_truth(category)
    multi = utils.is_multi_turn(category)
    for i, entry in enumerate(entries):
        truth = truths[i] if truths is not None else None
        tools = mcp_tools(entry["function"])
        out: dict[str, Any] = {
            "id": entry["id"],
            "category": category,
            "multi_turn": multi,
            "question": entry["question"],
            "tools": tools,
        }
        # The user's message of each later turn; a turn BFCL leaves empty (multi_turn_miss_func's
        # turn where held-back functions appear) gets BFCL's own message for it.
        out["followups"] = [" ".join(m["content"] for m in turn) if turn else ADDED_FUNCTIONS_PROMPT for turn in entry["question"][1:]]
        if multi:
            out["involved_classes"] = entry["involved_classes"]
            out["initial_config"] = entry.get("initial_config", {})
            out["long_context"] = "long_context" in category
            out["missed"] = {t: mcp_tools(docs) for t, docs in entry.get("missed_function", {}).items()}
            out["control_tools"] = [CONTROL_TOOL_DOC] if out["missed"] else []
            out["expert"] = [[parse_call(c, entry["involved_classes"]) for c in turn] for turn in truth["ground_truth"]]
        else:
            out["expert"] = [single_turn_expert(entry, raw[i]["function"], truth, category, tools)]
        yield out


def safe_call_text(name: str, arguments: dict) -> str:
    """A call as BFCL's executor runs it (BFCL's own convert_to_function_call), refused when the name
    or an argument name is not a Python identifier: BFCL's executor eval()s the text."""
    from bfcl_eval.model_handler.utils import convert_to_function_call

    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"'{name}' is not a function name")
    for k in arguments:
        if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k):
            raise ValueError(f"'{k}' is not a parameter name")
    return convert_to_function_call([{name: arguments}])[0]
