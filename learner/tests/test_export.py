import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from mcp_gym_learner.config import new_config, read_config, write_config
from mcp_gym_learner.export import export, update_onnx_weights
from mcp_gym_learner.model import positions_from_mask

from _helpers import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_NODE = os.path.join(REPO, "node_modules", "onnxruntime-node")


def _model_dir(tmp_path, m):
    d = str(tmp_path / "m")
    os.makedirs(d)
    write_config(d, new_config("t", m.architecture))
    return d


def _read_data(d, cfg):
    raw = open(os.path.join(d, cfg["onnx"]["data"]), "rb").read()
    out = {}
    for e in cfg["onnx"]["initializers"]:
        n = int(np.prod(e["shape"]))
        out[e["param"]] = np.frombuffer(raw, dtype="<f4", count=n, offset=e["offset"]).reshape(e["shape"])
    return out


def test_export_manifest_and_external_data_round_trip(tmp_path):
    import onnx
    from onnx import numpy_helper

    m = tiny_model(5)
    d = _model_dir(tmp_path, m)
    r = export(m, d)  # no graph yet: a full export
    assert r["full"] and r["version"] == 1
    cfg = read_config(d)
    assert cfg["onnx"]["opset"] == 14 and cfg["onnx"]["graph"] == "model.onnx"
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    inits = cfg["onnx"]["initializers"]
    assert sorted(e["param"] for e in inits) == sorted(state)  # one each: the tied head is not separate
    for e in inits:
        assert list(state[e["param"]].shape) == e["shape"] and e["length"] == 4 * state[e["param"]].size
    for k, arr in _read_data(d, cfg).items():
        assert np.array_equal(arr, state[k])
    onnx.checker.check_model(os.path.join(d, "model.onnx"))
    proto = onnx.load(os.path.join(d, "model.onnx"), load_external_data=True)
    L = m.n_layers
    assert [i.name for i in proto.graph.input] == ["input_ids", "position_ids", "attention_mask"] + \
        [f"past_key_{i}" for i in range(L)] + [f"past_value_{i}" for i in range(L)]
    assert [o.name for o in proto.graph.output] == ["logits", "new_keys", "new_values"]
    by_name = {e["name"]: e["param"] for e in inits}
    assert len(proto.graph.initializer) == len(state)
    for init in proto.graph.initializer:
        assert np.array_equal(numpy_helper.to_array(init), state[by_name[init.name]])
    assert sorted(os.listdir(d)) == ["config.json", "model.onnx", "model.onnx.data", "weights.pt"]


def test_update_onnx_weights_and_timing(tmp_path):
    from mcp_gym_learner.model import GPT

    m = GPT()  # the default 0.96M-parameter model, for the timing note
    d = _model_dir(tmp_path, m)
    t0 = time.perf_counter()
    export(m, d, full=True)
    t_full = time.perf_counter() - t0
    graph = open(os.path.join(d, "model.onnx"), "rb").read()
    v0 = read_config(d)["version"]
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    t0 = time.perf_counter()
    cfg = update_onnx_weights(m, d)
    t_update = time.perf_counter() - t0
    assert cfg["version"] == v0 + 1 == read_config(d)["version"]
    assert open(os.path.join(d, "model.onnx"), "rb").read() == graph
    for k, arr in _read_data(d, read_config(d)).items():
        assert np.array_equal(arr, m.state_dict()[k].numpy())
    r = export(m, d)  # a graph is there: weights only
    assert not r["full"] and r["version"] == v0 + 2
    assert not [f for f in os.listdir(d) if f.startswith(".")]  # no temporary files left
    print(f"\n[timing] default model ({m.num_params()} params): full export {t_full:.3f}s, "
          f"weight update {t_update * 1000:.1f}ms", file=sys.stderr)
    assert t_update < t_full


def test_export_refuses_another_architecture(tmp_path):
    from mcp_gym_learner.config import ConfigError

    m = tiny_model(0)
    d = _model_dir(tmp_path, tiny_model(0, d_model=16))
    with pytest.raises(ConfigError, match="another architecture"):
        export(m, d)


@pytest.mark.skipif(not (shutil.which("node") and os.path.isdir(ORT_NODE)), reason="node + onnxruntime-node")
def test_onnxruntime_node_matches_torch(tmp_path):
    """The exported graph in onnxruntime-node (the TypeScript sampler's runtime): a left-padded prefill with
    an empty past, then decode steps feeding the presents back, against one torch forward pass."""
    m = tiny_model(6)
    d = _model_dir(tmp_path, m)
    export(m, d, full=True)
    L, H, Dh = 2, 4, 8
    g = torch.Generator().manual_seed(1)
    B, T, steps = 3, 6, 4
    ids = torch.randint(0, 256, (B, T + steps), generator=g)
    mask = torch.ones(B, T + steps, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :5] = 0
    ids[mask == 0] = 263
    pos = positions_from_mask(mask)

    def run_ort():
        case = {"model": os.path.join(d, "model.onnx"), "B": B, "T": T, "L": L, "H": H, "Dh": Dh,
                "input_ids": ids[:, :T].flatten().tolist(), "position_ids": pos[:, :T].flatten().tolist(),
                "attention_mask": mask[:, :T].flatten().tolist(),
                "steps": [{"input_ids": ids[:, T + s].tolist(), "position_ids": pos[:, T + s].tolist()}
                          for s in range(steps)]}
        cp, op = tmp_path / "case.json", tmp_path / "out.json"
        cp.write_text(json.dumps(case))
        subprocess.run(["node", os.path.join(os.path.dirname(__file__), "ort_run.mjs"), str(cp), str(op)],
                       check=True, timeout=60, capture_output=True)
        out = json.loads(op.read_text())
        assert out["inputs"] == ["input_ids", "position_ids", "attention_mask"] + \
            [f"past_key_{i}" for i in range(L)] + [f"past_value_{i}" for i in range(L)]
        assert out["outputs"] == ["logits", "new_keys", "new_values"]
        assert out["new_dims"][0] == [L, B, H, T, Dh] and out["new_dims"][-1] == [L, B, H, 1, Dh]
        pre = torch.tensor(out["prefill"]).reshape(B, 1, 264)  # the last prompt position
        dec = torch.stack([torch.tensor(s).reshape(B, 264) for s in out["steps"]], 1)
        return torch.cat([pre, dec], 1)

    def check():
        with torch.no_grad():
            want, _, _ = m(ids, pos, mask)
        got = run_ort()  # logits at positions T-1, T, ..., T+steps-1
        assert (got - want[:, T - 1:T + steps - 1 + 1][:, :got.shape[1]]).abs().max() < 1e-4
        assert torch.isfinite(got).all()

    check()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    update_onnx_weights(m, d)  # new weights, same graph
    check()
