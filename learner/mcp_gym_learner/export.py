"""ONNX export with a KV cache, the initializer manifest, and in-place weight updates (PROTOCOL.md)."""

from __future__ import annotations

import inspect
import io
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from .config import (ONNX_DATA_FILE, ONNX_GRAPH_FILE, ONNX_OPSET, WEIGHTS_FILE, ConfigError, atomic_write_bytes,
                     read_config, write_config)
from .model import GPT
from .slot_decoder import SlotDecoder, dummy_inputs, io_names


# Initializers that are not parameters (scalars some exporters emit) become Constant nodes if at most this big.
_MAX_CONSTANT_NUMEL = 64


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


def cpu_state_dict(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}


def save_weights_pt(model: torch.nn.Module, model_dir: str) -> None:
    buf = io.BytesIO()
    torch.save(cpu_state_dict(model), buf)
    atomic_write_bytes(os.path.join(model_dir, WEIGHTS_FILE), buf.getvalue())


def load_weights_pt(path: str) -> Dict[str, torch.Tensor]:
    kwargs: Dict[str, Any] = {"map_location": "cpu"}
    if "weights_only" in inspect.signature(torch.load).parameters:
        kwargs["weights_only"] = True
    return torch.load(path, **kwargs)


def _torch_export(model: GPT, f: io.BytesIO) -> None:
    """Traces the slot-cache decoder (slot_decoder.py: the graph the TypeScript sampler runs)."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    inputs, outputs, axes = io_names(model.n_layers)
    kwargs: Dict[str, Any] = dict(
        input_names=inputs, output_names=outputs, dynamic_axes=axes,
        opset_version=ONNX_OPSET, do_constant_folding=False, export_params=True,
    )
    params = inspect.signature(torch.onnx.export).parameters
    if "dynamo" in params:  # torch >= 2.5: keep the TorchScript exporter (dynamo became the default in 2.9)
        kwargs["dynamo"] = False
    if "keep_initializers_as_inputs" in params:
        kwargs["keep_initializers_as_inputs"] = False
    del g
    with torch.no_grad():
        torch.onnx.export(SlotDecoder(model), dummy_inputs(model), f, **kwargs)


def _map_initializers(proto, state: Dict[str, torch.Tensor]) -> List[Dict[str, Any]]:
    """Name each graph initializer's state_dict parameter; tiny non-parameter ones become Constant nodes."""
    import onnx
    from onnx import numpy_helper

    mapping: List[Dict[str, Any]] = []
    constants = []
    used = set()
    for init in list(proto.graph.initializer):
        arr = numpy_helper.to_array(init)
        shape = list(arr.shape)
        param = None
        if (init.name in state and list(state[init.name].shape) == shape
                and np.array_equal(state[init.name].numpy(), arr)):
            param = init.name
        else:  # an exporter that renamed a parameter: match by shape and value
            for k, v in state.items():
                if k not in used and list(v.shape) == shape and np.array_equal(v.numpy(), arr):
                    param = k
                    break
        if param is None:
            if arr.size > _MAX_CONSTANT_NUMEL:
                raise RuntimeError(f"ONNX initializer {init.name} {shape} is not a parameter of the model")
            constants.append(init)
            continue
        if init.data_type != onnx.TensorProto.FLOAT:
            raise RuntimeError(f"ONNX initializer {init.name} is not float32")
        if param in used:
            raise RuntimeError(f"parameter {param} appears twice among the ONNX initializers")
        used.add(param)
        mapping.append({"name": init.name, "param": param, "shape": shape})
    missing = sorted(set(state) - used)
    if missing:
        raise RuntimeError(f"parameters missing from the ONNX initializers: {', '.join(missing)}")
    for init in constants:
        proto.graph.initializer.remove(init)
        node = onnx.helper.make_node("Constant", [], [init.name], value=init, name=f"const_{init.name}")
        proto.graph.node.insert(0, node)
    return mapping


def _read_manifest(graph_path: str, mapping: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    import onnx

    proto = onnx.load(graph_path, load_external_data=False)
    by_name = {m["name"]: m for m in mapping}
    out = []
    for init in proto.graph.initializer:
        ext = {e.key: e.value for e in init.external_data}
        if init.data_location != onnx.TensorProto.EXTERNAL or ext.get("location") != ONNX_DATA_FILE:
            raise RuntimeError(f"ONNX initializer {init.name} is not stored in {ONNX_DATA_FILE}")
        m = by_name[init.name]
        offset = int(ext.get("offset", "0"))
        length = int(ext["length"])
        if length != 4 * int(np.prod(m["shape"], dtype=np.int64)):
            raise RuntimeError(f"ONNX initializer {init.name}: {length} bytes for shape {m['shape']}")
        out.append({"name": init.name, "param": m["param"], "offset": offset, "shape": m["shape"], "length": length})
    out.sort(key=lambda e: e["offset"])
    return out


def verify_onnx(model_dir: str, manifest: List[Dict[str, Any]], state: Dict[str, torch.Tensor]) -> None:
    """onnx.checker on the graph; each initializer read back (external data) equals its parameter."""
    import onnx
    from onnx import numpy_helper

    graph_path = os.path.join(model_dir, ONNX_GRAPH_FILE)
    onnx.checker.check_model(graph_path)
    proto = onnx.load(graph_path, load_external_data=True)
    inits = {i.name: i for i in proto.graph.initializer}
    if set(inits) != {m["name"] for m in manifest}:
        raise RuntimeError("ONNX initializers differ from the manifest")
    for m in manifest:
        arr = numpy_helper.to_array(inits[m["name"]])
        if not np.array_equal(arr, state[m["param"]].numpy()):
            raise RuntimeError(f"ONNX initializer {m['name']} differs from parameter {m['param']}")
    names = [i.name for i in proto.graph.input]
    outs = [o.name for o in proto.graph.output]
    want_in, want_out, _ = io_names(len([n for n in names if n.startswith("past_key_")]))
    if names != want_in or outs != want_out:
        raise RuntimeError(f"ONNX I/O names {names} -> {outs}")


def _verify_with_onnxruntime(graph_path: str, architecture: Dict[str, Any], state: Dict[str, torch.Tensor]) -> None:
    """When the Python onnxruntime is installed: a prefill with an empty cache against torch."""
    try:
        import onnxruntime as ort  # type: ignore
    except ImportError:
        return
    m = GPT(architecture)
    m.load_state_dict(state)
    m.eval()
    sess = ort.InferenceSession(graph_path, providers=["CPUExecutionProvider"])
    B, T = 2, 5
    ids = torch.randint(0, 256, (B, T))
    pos = torch.arange(T).unsqueeze(0).repeat(B, 1)
    mask = torch.ones(B, T, dtype=torch.long)
    with torch.no_grad():
        want, _, _ = m(ids, pos, mask)
    feeds = {"input_ids": ids.numpy(), "position_ids": pos.numpy(), "attention_mask": mask.float().numpy()}
    for i in range(m.n_layers):
        feeds[f"past_key_{i}"] = np.zeros((B, m.n_heads, m.head_dim, 0), np.float32)
        feeds[f"past_value_{i}"] = np.zeros((B, m.n_heads, 0, m.head_dim), np.float32)
    logits = sess.run(["logits"], feeds)[0]
    diff = float(np.abs(logits - want[:, -1].numpy()).max())
    if not diff < 1e-3:
        raise RuntimeError(f"onnxruntime and torch disagree on the exported graph (max abs diff {diff})")


def export_onnx(model: GPT, model_dir: str, verify: bool = True) -> Dict[str, Any]:
    """Write model.onnx (graph) and model.onnx.data (all initializers); return config.json's `onnx` section.

    Nothing else in model_dir changes; config.json is the caller's (see `export`).
    """
    import onnx

    state = cpu_state_dict(model)
    # Trace a copy whose parameters are all distinct random values: the exporter merges initializers with
    # equal values (a fresh model's zero biases, unit LayerNorm weights), and distinct values let every
    # initializer be matched to its parameter even if an exporter renames it. The real weights are
    # written into model.onnx.data afterwards, at the offsets of the manifest.
    g = torch.Generator().manual_seed(0x5EED)
    probe = {k: torch.rand(v.shape, generator=g) + 0.5 for k, v in state.items()}
    m = GPT(model.architecture)
    m.load_state_dict(probe)
    m.eval()
    buf = io.BytesIO()
    _torch_export(m, buf)
    proto = onnx.load_model_from_string(buf.getvalue())
    mapping = _map_initializers(proto, probe)
    tmpdir = tempfile.mkdtemp(prefix=".export-", dir=model_dir)
    try:
        tmp_graph = os.path.join(tmpdir, ONNX_GRAPH_FILE)
        onnx.save_model(proto, tmp_graph, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=ONNX_DATA_FILE, size_threshold=0, convert_attribute=False)
        manifest = _read_manifest(tmp_graph, mapping)
        tmp_data = os.path.join(tmpdir, ONNX_DATA_FILE)
        _write_data(tmp_data, manifest, state)
        if verify:
            verify_onnx(tmpdir, manifest, state)
            _verify_with_onnxruntime(tmp_graph, model.architecture, state)
        os.replace(tmp_data, os.path.join(model_dir, ONNX_DATA_FILE))
        os.replace(tmp_graph, os.path.join(model_dir, ONNX_GRAPH_FILE))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    inputs, outputs, _ = io_names(model.n_layers)
    return {"graph": ONNX_GRAPH_FILE, "data": ONNX_DATA_FILE, "opset": ONNX_OPSET, "cache": "slots",
            "inputs": inputs, "outputs": outputs, "initializers": manifest}


def _check_manifest(manifest: Any, state: Dict[str, torch.Tensor]) -> List[Dict[str, Any]]:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("initializers"), list):
        raise ConfigError("config.onnx: no initializer manifest (export with full=true first)")
    entries = manifest["initializers"]
    for i, e in enumerate(entries):
        p = e.get("param")
        if p not in state:
            raise ConfigError(f"config.onnx.initializers[{i}].param: {p!r} is not a parameter of the model")
        if list(state[p].shape) != list(e.get("shape", [])):
            raise ConfigError(f"config.onnx.initializers[{i}].shape: {e.get('shape')} but {p} is "
                              f"{list(state[p].shape)}")
    if {e["param"] for e in entries} != set(state):
        raise ConfigError("config.onnx.initializers: does not cover every parameter (export with full=true)")
    return entries


def _write_data(data_path: str, entries: List[Dict[str, Any]], state: Dict[str, torch.Tensor]) -> None:
    """Write each manifest entry's parameter as little-endian float32 at its offset (temp file + rename);
    bytes between entries (alignment padding, if any) are kept from the current file or zero."""
    size = max(e["offset"] + 4 * int(np.prod(e["shape"], dtype=np.int64)) for e in entries)
    try:
        with open(data_path, "rb") as f:
            old = f.read()
    except OSError:
        old = b""
    buf = bytearray(max(size, len(old)))
    buf[: len(old)] = old
    for e in entries:
        b = state[e["param"]].numpy().astype("<f4", copy=False).tobytes()
        buf[e["offset"]: e["offset"] + len(b)] = b
    atomic_write_bytes(data_path, bytes(buf))


def update_onnx_weights(model: torch.nn.Module, model_dir: str,
                        config_updates: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Rewrite model.onnx.data from the state_dict per config.json's manifest (temp file + rename), then
    increment `version` in config.json (written last, temp + rename). Returns the new config."""
    cfg = read_config(model_dir)
    state = cpu_state_dict(model)
    entries = _check_manifest(cfg.get("onnx"), state)
    _write_data(os.path.join(model_dir, cfg["onnx"].get("data", ONNX_DATA_FILE)), entries, state)
    if config_updates:
        cfg.update(config_updates)
    cfg["version"] = int(cfg.get("version", 0)) + 1
    write_config(model_dir, cfg)
    return cfg


def export(model: GPT, model_dir: str, full: Optional[bool] = None,
           config_updates: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write weights.pt, the ONNX weights, and config.json (version + 1, written last).

    full=True: re-export the graph. full=None: re-export only when there is no usable graph and manifest
    for this model, else rewrite model.onnx.data. full=False: rewrite model.onnx.data when there is a
    usable graph, else write weights.pt only. Returns {seconds, full, onnx, version}; onnx says whether
    the ONNX files now hold these weights.
    """
    t0 = time.perf_counter()
    cfg = read_config(model_dir)
    if cfg["architecture"] != model.architecture:
        raise ConfigError(f"model_dir: {model_dir} holds another architecture than the loaded model")
    state = cpu_state_dict(model)
    has_graph = (isinstance(cfg.get("onnx"), dict) and isinstance(cfg["onnx"].get("initializers"), list)
                 and os.path.exists(os.path.join(model_dir, cfg["onnx"].get("graph", ONNX_GRAPH_FILE)))
                 and os.path.exists(os.path.join(model_dir, cfg["onnx"].get("data", ONNX_DATA_FILE))))
    if has_graph:
        try:
            _check_manifest(cfg["onnx"], state)
        except ConfigError:
            has_graph = False
    if full is None:
        full = not has_graph
    save_weights_pt(model, model_dir)
    if not full and has_graph:
        cfg = update_onnx_weights(model, model_dir, config_updates)
        return {"seconds": time.perf_counter() - t0, "full": False, "onnx": True, "version": cfg["version"]}
    if full:
        cfg["onnx"] = export_onnx(model, model_dir)
    if config_updates:
        cfg.update(config_updates)
    cfg["version"] = int(cfg.get("version", 0)) + 1
    write_config(model_dir, cfg)
    seconds = time.perf_counter() - t0
    _log(f"wrote {model_dir} version {cfg['version']} ({'full export' if full else 'weights.pt only'}, {seconds:.3f}s)")
    return {"seconds": seconds, "full": bool(full), "onnx": bool(full), "version": cfg["version"]}
