"""The learner's contract: the JSON Schema of every command, request validation, the JSON lines.

The contract is written once, as zod schemas in src/trainers/protocol.ts, and emitted as JSON Schema
into `protocol.schema.json` beside this file (found through the package, not the repository):
`{"protocol": N, "commands": {cmd: {"summary", "request", "result"}}}`. A request's arguments (the
request minus `id` and `cmd`, minus the fields whose value is null: null means absent) are validated
against `commands[cmd].request` by one Draft 2020-12 validator per command, built once. A refusal
names the field: `batch.advantages[2]: must be a finite number, got None`.

What the schema cannot know (token ids against the loaded model, lengths that must agree, paths)
is checked by the code that needs it, and raises RequestError the same way.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from typing import Any, Dict, Iterable, List, Optional, Sequence

from jsonschema import Draft202012Validator, validators

from .config import ConfigError

SCHEMA_FILE = "protocol.schema.json"


class RequestError(ConfigError):
    """A request refused before anything changed; the message names the field."""


def _load_schema() -> Dict[str, Any]:
    text = importlib.resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


SCHEMA: Dict[str, Any] = _load_schema()
PROTOCOL_VERSION: int = SCHEMA["protocol"]
COMMANDS: Dict[str, Dict[str, Any]] = SCHEMA["commands"]


def _finite_number(checker: Any, value: Any) -> bool:
    # JSON has no NaN or Infinity, but 1e400 parses to inf: not a number the learner takes.
    return (Draft202012Validator.TYPE_CHECKER.is_type(value, "number")
            and not (isinstance(value, float) and not math.isfinite(value)))


Validator = validators.extend(
    Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number))

_VALIDATORS = {cmd: Validator(c["request"]) for cmd, c in COMMANDS.items()}


def request_schema(cmd: str, *path: str) -> Dict[str, Any]:
    """The schema of command `cmd`'s arguments, or of the argument at `path` (e.g. "train", "config")."""
    schema = COMMANDS[cmd]["request"]
    for name in path:
        schema = schema["properties"][name]
    return schema


def defaults(schema: Dict[str, Any]) -> Dict[str, Any]:
    """{property: its schema's default (None where there is none)} of an object schema."""
    return {k: prepare(p.get("default"), p, coerce=True) for k, p in schema.get("properties", {}).items()}


# ---------------------------------------------------------------------------------------------
# validation


def prepare(value: Any, schema: Dict[str, Any], coerce: bool = False) -> Any:
    """Drops the null fields of the objects the schema describes (null means absent). With `coerce` (on
    a valid value): makes the values the schema types "integer" ints (2.0 is an integer in JSON) and
    those it types "number" floats."""
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            return value
        return {k: prepare(v, props.get(k, {}), coerce) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        prefix, items = schema.get("prefixItems"), schema.get("items")
        if prefix:
            return [prepare(v, prefix[i], coerce) if i < len(prefix) else v for i, v in enumerate(value)]
        if isinstance(items, dict) and ("type" in items or "properties" in items):
            return [prepare(v, items, coerce) for v in value]
        return value
    if not coerce or isinstance(value, bool):
        return value
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, float):
        return int(value)
    if kind == "number" and isinstance(value, int):
        return float(value)
    return value


def validate_request(cmd: str, req: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments of request `req` for command `cmd`, prepared and validated (RequestError otherwise)."""
    args = {k: v for k, v in req.items() if k not in ("id", "cmd")}
    return _check(_VALIDATORS[cmd], COMMANDS[cmd]["request"], args, "", cmd)


_PART_VALIDATORS: Dict[tuple, Any] = {}


def validate_part(cmd: str, path: Sequence[str], value: Any, name: Optional[str] = None) -> Any:
    """One argument (at `path` in command `cmd`'s arguments) prepared and validated on its own, for the
    code that takes it directly (parse_config, parse_batch): the same checks and messages as a request's."""
    key = (cmd, *path)
    schema = request_schema(cmd, *path)
    if key not in _PART_VALIDATORS:
        _PART_VALIDATORS[key] = Validator(schema)
    return _check(_PART_VALIDATORS[key], schema, value, name if name is not None else ".".join(path), cmd)


def _check(validator: Any, schema: Dict[str, Any], value: Any, where: str, cmd: str) -> Any:
    value = prepare(value, schema)
    errors = list(validator.iter_errors(value))
    if errors:
        raise RequestError(describe(_first(errors), where, cmd))
    return prepare(value, schema, coerce=True)


_FIRST = {"additionalProperties": 0, "required": 1}


def _first(errors: Iterable[Any]) -> Any:
    """The error to report: the shallowest, unknown fields then missing ones first (else schema order)."""
    return min(errors, key=lambda e: (len(e.absolute_path), _FIRST.get(e.validator, 2)))


def field_path(parts: Iterable[Any], base: str = "") -> str:
    """`config.clip_low`, `batch.ids[3]`: names joined by dots, array indexes in brackets."""
    out = base
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out = f"{out}.{p}" if out else str(p)
    return out


def _show(v: Any, limit: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


_TYPE_WORDS = {"number": "a finite number", "integer": "an integer", "string": "a string", "boolean": "true or false",
               "object": "an object", "array": "a list", "null": "null"}


def _types(names: Any) -> str:
    names = [names] if isinstance(names, str) else list(names)
    words: List[str] = []
    for n in names:
        w = _TYPE_WORDS.get(n, n)
        if w not in words:
            words.append(w)
    return " or ".join(words)


def _anyof(e: Any) -> Any:
    """The branch of a failed anyOf/oneOf that came closest (the fewest errors; on a tie, the one whose first
    error comes later in the value: the shape its first elements set), or the anyOf error itself when every
    branch failed on the value's own type (then `_message` lists the types)."""
    if all(c.validator == "type" and len(c.absolute_path) == len(e.absolute_path) for c in e.context):
        return e
    branches: Dict[Any, List[Any]] = {}
    for c in e.context:
        branches.setdefault(c.relative_schema_path[0], []).append(c)

    def reach(errors: List[Any]) -> int:
        first = list(errors[0].relative_path)
        return first[0] if first and isinstance(first[0], int) else 0

    return _first(min(branches.values(), key=lambda errors: (len(errors), -reach(errors))))


def describe(e: Any, where: str, cmd: str) -> str:
    """`<field path>: <message>` for one jsonschema error (`where`: the path of the validated value)."""
    while e.validator in ("anyOf", "oneOf") and e.context:
        nxt = _anyof(e)
        if nxt is e:
            break
        e = nxt
    path = field_path(e.absolute_path, where)
    v, want, got = e.validator, e.validator_value, e.instance
    if v == "additionalProperties" and isinstance(got, dict):
        known = list(e.schema.get("properties", {}))
        extra = next(k for k in got if k not in known)
        what = f"unknown argument for {cmd}" if not path else "unknown field"
        return f"{field_path([extra], path)}: {what} (expected: {', '.join(known) if known else 'none'})"
    if v == "required" and isinstance(got, dict):
        missing = next(k for k in want if k not in got)
        return f"{field_path([missing], path)}: missing"
    return f"{path or 'request'}: {_message(e, v, want, got)}"


def _message(e: Any, v: str, want: Any, got: Any) -> str:
    if v == "type":
        return f"must be {_types(want)}, got {_show(got)}"
    if v in ("anyOf", "oneOf"):
        return f"must be {_types([c.validator_value for c in e.context])}, got {_show(got)}"
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if v in bounds:
        return f"must be {bounds[v]} {want}, got {_show(got)}"
    if v == "enum":
        return f"must be one of {', '.join(str(x) for x in want)}, got {_show(got)}"
    if v == "const":
        return f"must be {json.dumps(want)}, got {_show(got)}"
    if v == "minLength" and want == 1:
        return f"must be a non-empty string, got {_show(got)}"
    if v in ("minItems", "maxItems", "items") and isinstance(got, list):
        lo, hi = e.schema.get("minItems"), e.schema.get("maxItems")
        if lo is not None and lo == hi:
            size = str(lo)
        elif v == "minItems":
            size = f"at least {lo}"
        else:
            size = f"at most {hi if hi is not None else len(e.schema.get('prefixItems', []))}"
        return f"must hold {size} items, got {len(got)}"
    return e.message


# ---------------------------------------------------------------------------------------------
# JSON lines


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_request(line: str) -> Dict[str, Any]:
    """One request line as a dict; RequestError (`request: ...`) for a line that is not a JSON object."""
    try:
        req = json.loads(line, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as e:
        raise RequestError(f"request: invalid JSON: {e}") from None
    if not isinstance(req, dict):
        raise RequestError("request: must be a JSON object")
    return req


def encode_response(resp: Dict[str, Any]) -> str:
    """One response line (no NaN or Infinity: a result that has one becomes an error response)."""
    try:
        return json.dumps(resp, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError) as e:
        return json.dumps({"id": resp.get("id"), "ok": False,
                           "error": f"result: cannot be encoded as JSON ({e})"}, separators=(",", ":"))
