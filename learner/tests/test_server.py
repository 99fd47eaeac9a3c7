import json
import os
import select
import subprocess
import sys

import pytest
import torch
from jsonschema import Draft202012Validator

from mcp_gym_learner.protocol import COMMANDS

LEARNER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "max_seq_len": 64}


class Client:
    def __init__(self, cwd):
        env = dict(os.environ, PYTHONPATH=LEARNER)
        self.p = subprocess.Popen([sys.executable, "-m", "mcp_gym_learner", "serve"], cwd=cwd, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.next_id = 0

    def send_raw(self, line, timeout=60):
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, "no response"
        out = self.p.stdout.readline()
        assert out.endswith(b"\n")
        return json.loads(out)

    def call(self, cmd, **args):
        self.next_id += 1
        resp = self.send_raw(json.dumps({"id": self.next_id, "cmd": cmd, **args}))
        assert resp["id"] == self.next_id
        return resp

    def ok(self, cmd, **args):
        resp = self.call(cmd, **args)
        assert resp["ok"], resp
        assert set(resp) == {"id", "ok", "result"}
        Draft202012Validator(COMMANDS[cmd]["result"]).validate(resp["result"])  # the answer the contract says
        return resp["result"]

    def err(self, cmd, **args):
        resp = self.call(cmd, **args)
        assert not resp["ok"] and set(resp) == {"id", "ok", "error"}, resp
        return resp["error"]


@pytest.fixture
def client(tmp_path):
    c = Client(str(tmp_path))
    yield c
    if c.p.poll() is None:
        c.p.kill()
        c.p.wait()


def test_server_session(client, tmp_path):
    c = client
    st = c.ok("state")
    assert st["loaded"] is False and st["protocol"] == 2
    assert c.err("logprobs", sequences=[[1, 2]], starts=[1]) == "model: no model is loaded (send load first)"

    r = c.ok("create", model_dir="models/tiny", architecture=TINY, seed=1)
    assert r["params"] > 0 and r["architecture"]["seed"] == 1 and r["architecture"]["vocab_size"] == 264
    assert sorted(os.listdir(tmp_path / "models/tiny")) == ["config.json", "weights.pt"]
    assert c.err("create", model_dir="models/tiny").startswith("model_dir: models/tiny already holds a model")
    assert c.err("create", model_dir="x", architecture={"d_model": 30}) == \
        "architecture.n_heads: d_model 30 is not divisible by n_heads 4"
    assert c.err("create", model_dir="x", architecture={"depth": 3}).startswith("architecture.depth: unknown")
    assert not os.path.exists(tmp_path / "x")

    r = c.ok("load", model_dir="models/tiny", threads=1, device="cpu")
    assert r["version"] == 0 and r["device"] == "cpu" and r["params"] > 0

    seqs = [[256, 72, 105, 258, 72], [257, 1, 2]]
    lp = c.ok("logprobs", sequences=seqs, starts=[3, 1], temperature=1.0, top_k=0, top_p=1.0)["logprobs"]
    assert [len(x) for x in lp] == [2, 2] and all(v < 0 for row in lp for v in row)
    # the same numbers in-process, from weights.pt
    from mcp_gym_learner.config import read_config
    from mcp_gym_learner.logprobs import sequence_logprobs
    from mcp_gym_learner.model import GPT
    m = GPT(read_config(str(tmp_path / "models/tiny"))["architecture"])
    m.load_state_dict(torch.load(str(tmp_path / "models/tiny/weights.pt")))
    want = sequence_logprobs(m, seqs, [3, 1])
    assert max(abs(a - b) for x, y in zip(lp, want) for a, b in zip(x, y)) < 1e-5
    # outside top-k: null (JSON has no -Infinity)
    lp1 = c.ok("logprobs", sequences=[list(range(20))], starts=[1], top_k=1)["logprobs"][0]
    assert any(v is None for v in lp1) and all(v is None or v == 0.0 for v in lp1)

    # malformed requests: refused, naming the field; the process keeps serving
    assert c.err("logprobs", sequences=[[1, 2], [3, 4, 5, 6, 7, 999]], starts=[1, 1]) == \
        "sequences[1][5]: token id 999 is out of range [0, 264)"
    assert c.err("logprobs", sequences=[[1, 2]]) == "starts: missing"
    assert c.err("logprobs", sequences=[[1, 2]], starts=[0]) == "starts[0]: must be >= 1, got 0"
    assert c.err("logprobs", sequences=[[1, 2]], starts=[3]).startswith("starts[0]: must be an integer in [1, 2]")
    assert c.err("logprobs", sequences=[[1, 2]], starts=[1], temperature=0).startswith("temperature: must be > 0")
    assert c.err("logprobs", sequences=[[1, 2]], starts=[1], topk=3).startswith("topk: unknown argument")
    assert c.err("sft").startswith("data: missing")
    assert c.err("bogus").startswith("cmd: unknown command 'bogus'")
    bad = c.send_raw("{not json")
    assert bad["id"] is None and not bad["ok"] and bad["error"].startswith("request: invalid JSON")

    data = tmp_path / "sft.jsonl"
    rows = [{"ids": [256, 97 + i % 5, 98, 260, 97 + i % 5, 98, 262], "mask": [0, 0, 0, 0, 1, 1, 1]}
            for i in range(40)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    baddata = tmp_path / "bad.jsonl"
    baddata.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"ids": [1, 2, 300], "mask": [0, 1, 1]}) + "\n")
    assert c.err("sft", data=str(baddata), steps=3) == \
        "data: line 2: ids[2]: token id 300 is out of range [0, 264)"
    assert c.ok("state")["dirty"] is False  # refused: nothing changed
    assert c.err("sft", data=str(data), steps=3, save_epochs=str(tmp_path / "e")) == \
        "save_epochs: only a Hugging Face model writes a checkpoint per epoch"
    assert c.ok("logprobs", sequences=seqs, starts=[3, 1])["logprobs"] == lp

    r = c.ok("sft", data=str(data), steps=20, batch_size=8, lr=1e-2, warmup=2, seed=0)
    assert r["steps"] == 20 and r["loss_last"] < r["loss_first"] and r["tokens_per_s"] > 0
    assert c.ok("state")["dirty"] is True

    r = c.ok("export")  # no graph yet: full
    assert r["full"] is True and r["version"] == 1
    d = tmp_path / "models/tiny"
    assert {"model.onnx", "model.onnx.data", "weights.pt", "config.json"} <= set(os.listdir(d))
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["version"] == 1 and cfg["training"]["sft"]["steps"] == 20 and cfg["onnx"]["initializers"]
    r = c.ok("export")
    assert r["full"] is False and r["version"] == 2
    r = c.ok("export", full=True)
    assert r["full"] is True and r["version"] == 3
    r = c.ok("save")
    assert r["full"] is False and r["onnx"] is True and r["version"] == 4
    st = c.ok("state")
    assert st["loaded"] and st["version"] == 4 and st["dirty"] is False and st["sft_steps"] == 20
    # reload: the trained weights
    assert c.ok("load", model_dir="models/tiny")["version"] == 4
    assert c.ok("logprobs", sequences=seqs, starts=[3, 1])["logprobs"] != lp

    assert c.ok("shutdown") == {"dirty": False}
    assert c.p.wait(timeout=30) == 0
    assert c.p.stdout.read() == b""  # nothing but responses on stdout
    assert b"serving" in c.p.stderr.read()


def test_server_survives_exceptions_and_exits_on_eof(client, tmp_path):
    c = client
    assert c.err("load", model_dir="does/not/exist") == "model_dir: does/not/exist/config.json does not exist"
    c.ok("create", model_dir="m", architecture=TINY)
    (tmp_path / "m" / "weights.pt").write_bytes(b"garbage")
    assert c.err("load", model_dir="m").startswith("model_dir: m/weights.pt does not fit")
    c.ok("create", model_dir="m", architecture=TINY, overwrite=True)
    c.ok("load", model_dir="m")
    (tmp_path / "afile").write_text("")
    # not a validation error: an exception inside the command becomes an error response
    assert c.err("export", model_dir="afile/sub").startswith("export: ")
    assert c.ok("state")["loaded"] is True
    c.p.stdin.close()
    assert c.p.wait(timeout=30) == 0


def test_put_files_and_inline_export_for_a_caller_on_another_file_system(client, tmp_path):
    """A run that shares no file system with the learner sends the model directory inline and gets
    each export back inline; put_files writes only under <cwd>/mcp-gym-files."""
    import base64

    c = client
    c.ok("create", model_dir="src/tiny", architecture=TINY, seed=2)
    c.ok("load", model_dir="src/tiny")
    c.ok("export", model_dir="src/tiny", full=True)
    src = tmp_path / "src/tiny"
    files = {n: base64.b64encode((src / n).read_bytes()).decode() for n in os.listdir(src)}
    put = c.ok("put_files", dir="runs/r1/model", files=files)
    assert put["dir"] == str(tmp_path / "mcp-gym-files/runs/r1/model")
    assert sorted(os.listdir(put["dir"])) == sorted(files)
    c.ok("load", model_dir=put["dir"])
    out = c.ok("export", model_dir=put["dir"], inline=True)
    assert {"config.json", "weights.pt", "model.onnx.data"} <= set(out["files"])
    back = base64.b64decode(out["files"]["model.onnx.data"])
    assert back == (tmp_path / "mcp-gym-files/runs/r1/model/model.onnx.data").read_bytes()
    assert json.loads(base64.b64decode(out["files"]["config.json"]))["version"] == out["version"]
    # Path tricks and bad data are refused, and nothing is written outside the files root.
    for bad in ("../escape", "/abs/dir", "runs/../../x", "runs//x", "./x"):
        assert c.err("put_files", dir=bad, files={"a": "AA=="}).startswith("dir: ")
    assert c.err("put_files", dir="ok", files={"../a": "AA=="}).startswith("files: ")
    assert c.err("put_files", dir="ok", files={"a": "not base64!"}) == "files.a: not valid base64"
    assert c.err("put_files", dir="ok", files={}).startswith("files: must be an object")
    assert not os.path.exists(tmp_path / "escape") and not os.path.exists(tmp_path / "x")
