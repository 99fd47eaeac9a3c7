"""Request validation against protocol.schema.json (generated from src/trainers/protocol.ts): the schema is
found through the package and is valid JSON Schema 2020-12; refusals name the field by its path."""

import json

import pytest
from jsonschema import Draft202012Validator

from mcp_gym_learner import protocol
from mcp_gym_learner.protocol import COMMANDS, RequestError, decode_request, encode_response, validate_request
from mcp_gym_learner.service import LearnerService


def test_the_schema_is_the_packaged_contract():
    assert protocol.PROTOCOL_VERSION == protocol.SCHEMA["protocol"] >= 2
    for cmd, c in COMMANDS.items():
        assert c["summary"]
        Draft202012Validator.check_schema(c["request"])
        Draft202012Validator.check_schema(c["result"])
    # every command of the contract has its method, and nothing else is served
    assert list(LearnerService().handlers) == list(COMMANDS)


BATCH = {"ids": [[1, 2, 3], [4, 5]], "mask": [[0, 1, 1], [0, 1]], "old_logprobs": [[0, -1, -1], [0, -2]],
         "advantages": [0.5, -0.5], "group_ids": ["a", "a"]}


def _batch(**changes):
    return dict(BATCH, **changes)


@pytest.mark.parametrize("cmd,args,error", [
    ("state", {"verbose": True}, "verbose: unknown argument for state (expected: none)"),
    ("logprobs", {"sequences": [[1]], "starts": [1], "topk": 3},
     "topk: unknown argument for logprobs (expected: sequences, starts, temperature, top_k, top_p)"),
    ("logprobs", {"sequences": [[1]]}, "starts: missing"),
    ("logprobs", {"sequences": [[1]], "starts": [1], "temperature": 0}, "temperature: must be > 0, got 0"),
    ("logprobs", {"sequences": [[1]], "starts": [1], "top_k": 1.5}, "top_k: must be an integer, got 1.5"),
    ("logprobs", {"sequences": [1], "starts": [1]}, "sequences[0]: must be a list, got 1"),
    ("load", {"model_dir": "m", "device": "tpu"}, "device: must be one of cpu, cuda, got 'tpu'"),
    ("load", {"model_dir": ""}, "model_dir: must be a non-empty string, got ''"),
    ("load", {"model_dir": "m", "threads": 2000}, "threads: must be <= 1024, got 2000"),
    ("load", {"model_dir": "m", "hf": "yes"}, "hf: must be true or false, got 'yes'"),
    ("load", {"model_dir": "m", "lora": {"rank": 4}}, "lora.rank: unknown field (expected: r, alpha, dropout, "
                                                      "target_modules)"),
    ("load", {"model_dir": "m", "lora": {"target_modules": 5}},
     "lora.target_modules: must be a string or a list, got 5"),
    ("sft", {"data": "d", "betas": [0.9]}, "betas: must hold 2 items, got 1"),
    ("sft", {"data": "d", "betas": [0.9, 1.0]}, "betas[1]: must be < 1, got 1.0"),
    ("create", {"model_dir": "m", "architecture": {"type": "llama"}},
     "architecture.type: must be \"gpt\", got 'llama'"),
    ("put_files", {"dir": "d", "files": {"a": 5}}, "files.a: must be a string, got 5"),
    ("train", {}, "batch: missing"),
    ("train", {"batch": {}}, "batch.ids: missing"),
    ("train", {"batch": _batch(values=[1, 2])}, "batch.values: unknown field"),
    ("train", {"batch": _batch(rewards=[1, 2])}, "batch.rewards[0]: must be a list, got 1"),
    ("train", {"batch": _batch(advantages=[0.5, None])}, "batch.advantages[1]: must be a finite number, got None"),
    ("train", {"batch": _batch(advantages=[[0, 1, 1], 0.5])}, "batch.advantages[1]: must be a list, got 0.5"),
    ("train", {"batch": _batch(advantages="high")}, "batch.advantages: must be a list, got 'high'"),
    ("train", {"batch": _batch(group_ids=["a", ""])}, "batch.group_ids[1]: must be a non-empty string, got ''"),
    ("train", {"batch": BATCH, "config": {"clip_low": 2}}, "config.clip_low: must be <= 1, got 2"),
    ("train", {"batch": BATCH, "config": {"lr": 1e400}}, "config.lr: must be a finite number, got inf"),
    ("train", {"batch": BATCH, "config": {"betas": [0.9, 0.99]}}, "config.betas: unknown field"),
])
def test_refusals_name_the_field(cmd, args, error):
    with pytest.raises(RequestError) as e:
        validate_request(cmd, {"id": 1, "cmd": cmd, **args})
    assert str(e.value).startswith(error), str(e.value)


def test_null_means_absent_and_numbers_take_their_schema_type():
    a = validate_request("train", {"id": 1, "cmd": "train", "batch": BATCH,
                                   "config": {"lr": None, "epochs": 3.0, "clip_high": 1, "dr_grpo_constant": None}})
    assert a["config"] == {"epochs": 3, "clip_high": 1.0}
    assert type(a["config"]["epochs"]) is int and type(a["config"]["clip_high"]) is float
    assert validate_request("export", {"cmd": "export", "model_dir": None, "full": None}) == {}
    # free-form objects keep their nulls (a tokenizer's fields are the model's, not the protocol's)
    a = validate_request("create", {"cmd": "create", "model_dir": "m", "tokenizer": {"x": None}})
    assert a["tokenizer"] == {"x": None}
    with pytest.raises(RequestError, match="^model_dir: missing$"):
        validate_request("load", {"cmd": "load", "model_dir": None})


def test_json_lines():
    assert decode_request('{"id": 1, "cmd": "state"}') == {"id": 1, "cmd": "state"}
    for line, msg in (("{nope", "request: invalid JSON"), ("[1]", "request: must be a JSON object"),
                      ('{"x": NaN}', "request: invalid JSON")):
        with pytest.raises(RequestError, match=msg.replace("[", r"\[")):
            decode_request(line)
    assert json.loads(encode_response({"id": 1, "ok": True, "result": {"x": float("nan")}}))["ok"] is False
