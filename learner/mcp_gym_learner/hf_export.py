"""ONNX export of a Hugging Face causal LM (Llama, Qwen2, Qwen3) for the rollout side's sampler: the graph of
hf_graph.py (a slot KV cache per row and a shared prefix), with the weights of hf_weights.py (a peft-wrapped
model's LoRA merged in: the training model is not modified).

Files, beside the checkpoint:

    <model_dir>/onnx/model.onnx        the graph (initializers stored externally)
    <model_dir>/onnx/model.onnx.data   every weight as little-endian float32, at the manifest's offsets
    <model_dir>/onnx/config.json       {"format": "mcp-gym-onnx/1", "version", "family", "architecture",
                                        "eos_token_ids", "graph", "data", "prefix", "manifest"} (written last)

`export_hf_onnx` traces the graph and writes all three; `update_hf_onnx_weights` rewrites only the data file
(temp file + rename) from the current (merged) weights and increments `version`, which the rollout side
(src/agents/onnx.ts) watches; it falls back to a full export when the manifest does not fit the model.

    python -m mcp_gym_learner.hf_export --model-dir DIR     (exports a checkpoint directory in place;
                                                            a PEFT adapter in DIR/adapter/ is merged in)
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .config import ONNX_DATA_FILE, ONNX_GRAPH_FILE, ONNX_OPSET, atomic_write_bytes
from .hf_graph import HfSlotDecoder, hf_io_names
from .hf_weights import FAMILIES, STATIC_ROPE, _spec, effective_weights, merged_state_dict  # noqa: F401 (re-exported)
from .slot_decoder import _KeepInitializers

FORMAT = "mcp-gym-onnx/1"
ONNX_DIR = "onnx"
ONNX_CONFIG_FILE = "config.json"


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Files


def onnx_dir(model_dir: str) -> str:
    return os.path.join(model_dir, ONNX_DIR)


def read_onnx_config(model_dir: str) -> Optional[Dict[str, Any]]:
    """<model_dir>/onnx/config.json, or None when it is missing or not ours."""
    try:
        with open(os.path.join(onnx_dir(model_dir), ONNX_CONFIG_FILE), "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) and cfg.get("format") == FORMAT else None


def _write_config(model_dir: str, cfg: Dict[str, Any]) -> None:
    atomic_write_bytes(os.path.join(onnx_dir(model_dir), ONNX_CONFIG_FILE),
                       (json.dumps(cfg, indent=1) + "\n").encode("utf-8"))


def _align(n: int, nbytes: int) -> int:
    a = 4096 if nbytes >= (1 << 20) else 64
    return (n + a - 1) // a * a


def _layout(proto, state: Dict[str, torch.Tensor], base_dir: str) -> List[Dict[str, Any]]:
    """Points every parameter initializer of the traced graph at its place in model.onnx.data (64-byte
    aligned, 4096 for tensors of 1 MiB or more) and turns the other initializers (constants the tracer made)
    into Constant nodes. Returns the manifest [{name, param, offset, length, shape}] in file order."""
    import onnx
    from onnx import numpy_helper

    manifest: List[Dict[str, Any]] = []
    constants = []
    used = set()
    offset = 0
    for init in list(proto.graph.initializer):
        shape = [int(d) for d in init.dims]
        param = init.name if init.name in state and list(state[init.name].shape) == shape else None
        if param is None and init.data_location != onnx.TensorProto.EXTERNAL:
            # an exporter that renamed a parameter: match by value
            arr = numpy_helper.to_array(init)
            for k, v in state.items():
                if k not in used and list(v.shape) == shape and np.array_equal(v.numpy(), arr):
                    param = k
                    break
        if param is None:
            constants.append(init)
            continue
        if param in used:
            raise RuntimeError(f"parameter {param} appears twice among the ONNX initializers")
        if init.data_type != onnx.TensorProto.FLOAT:
            raise RuntimeError(f"ONNX initializer {init.name} is not float32")
        used.add(param)
        length = 4 * int(np.prod(shape, dtype=np.int64))
        offset = _align(offset, length)
        for field in ("raw_data", "float_data"):
            init.ClearField(field)
        del init.external_data[:]
        init.data_location = onnx.TensorProto.EXTERNAL
        for k, v in (("location", ONNX_DATA_FILE), ("offset", str(offset)), ("length", str(length))):
            e = init.external_data.add()
            e.key, e.value = k, v
        manifest.append({"name": init.name, "param": param, "offset": offset, "length": length, "shape": shape})
        offset += length
    missing = sorted(set(state) - used)
    if missing:
        raise RuntimeError(f"weights missing from the ONNX initializers: {', '.join(missing[:5])}")
    for init in constants:
        value = numpy_helper.from_array(numpy_helper.to_array(init, base_dir=base_dir), init.name)
        proto.graph.initializer.remove(init)
        proto.graph.node.insert(0, onnx.helper.make_node("Constant", [], [init.name], value=value,
                                                         name=f"const_{init.name}"))
    return manifest


def _write_data(path: str, manifest: List[Dict[str, Any]], state: Dict[str, torch.Tensor]) -> None:
    """Writes each entry's weights as little-endian float32 at its offset into a temporary file beside
    `path` (gaps stay zero), fsyncs it and renames it over `path`."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            end = 0
            for e in sorted(manifest, key=lambda e: e["offset"]):
                t = state[e["param"]]
                if list(t.shape) != list(e["shape"]):
                    raise ValueError(f"{e['param']}: shape {list(t.shape)}, the graph's is {e['shape']}")
                raw = t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False).tobytes()
                if len(raw) != e["length"]:
                    raise ValueError(f"{e['param']}: {len(raw)} bytes, the graph expects {e['length']}")
                f.seek(e["offset"])
                f.write(raw)
                end = max(end, e["offset"] + len(raw))
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _trace(dec: HfSlotDecoder, path: str) -> None:
    inputs, outputs, axes = hf_io_names(dec.L)
    kwargs: Dict[str, Any] = dict(input_names=inputs, output_names=outputs, dynamic_axes=axes,
                                  opset_version=ONNX_OPSET, do_constant_folding=False, export_params=True)
    params = inspect.signature(torch.onnx.export).parameters
    if "dynamo" in params:  # keep the TorchScript exporter (dynamo became the default in torch 2.9)
        kwargs["dynamo"] = False
    if "keep_initializers_as_inputs" in params:
        kwargs["keep_initializers_as_inputs"] = False
    with torch.no_grad(), _KeepInitializers():
        torch.onnx.export(dec, dec.dummy_inputs(), path, **kwargs)


def _architecture(spec: Dict[str, Any]) -> Dict[str, Any]:
    return {k: spec[k] for k in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_seq_len")}


def export_hf_onnx(model, model_dir: str, verify: bool = True) -> Dict[str, Any]:
    """Traces the slot-cache graph of `model` (merged weights if peft-wrapped; the model is not modified)
    and writes <model_dir>/onnx/{model.onnx, model.onnx.data, config.json} (graph and data first, each by
    rename; config.json last, with `version` one more than the previous export's, or 1).
    Returns {"seconds", "full": True, "version", "config"}."""
    import onnx

    t0 = time.perf_counter()
    dec = HfSlotDecoder(model)
    state = {k: p.data for k, p in dec.w.items()}
    out_dir = onnx_dir(model_dir)
    os.makedirs(out_dir, exist_ok=True)
    old = read_onnx_config(model_dir)
    tmpdir = tempfile.mkdtemp(prefix=".export-", dir=out_dir)
    try:
        traced = os.path.join(tmpdir, "traced.onnx")
        _trace(dec, traced)
        proto = onnx.load(traced, load_external_data=False)
        manifest = _layout(proto, state, tmpdir)
        graph = os.path.join(tmpdir, ONNX_GRAPH_FILE)
        onnx.save_model(proto, graph)
        del proto
        data = os.path.join(tmpdir, ONNX_DATA_FILE)
        _write_data(data, manifest, state)
        if verify:
            onnx.checker.check_model(graph)
            names = [i.name for i in onnx.load(graph, load_external_data=False).graph.input]
            want, _, _ = hf_io_names(dec.L)
            if names != want:
                raise RuntimeError(f"ONNX inputs {names}, expected {want}")
        os.replace(data, os.path.join(out_dir, ONNX_DATA_FILE))
        os.replace(graph, os.path.join(out_dir, ONNX_GRAPH_FILE))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    spec = dec.spec
    cfg = {
        "format": FORMAT,
        "version": int(old.get("version", 0)) + 1 if old else 1,
        "family": spec["family"],
        "architecture": _architecture(spec),
        "eos_token_ids": spec["eos_token_ids"],
        "graph": ONNX_GRAPH_FILE,
        "data": ONNX_DATA_FILE,
        "opset": ONNX_OPSET,
        "cache": "slots",
        "prefix": True,  # the graph takes a shared prefix (hf_graph.py); exports without it are made again
        "manifest": manifest,
    }
    _write_config(model_dir, cfg)
    seconds = time.perf_counter() - t0
    _log(f"exported {spec['family']} to {out_dir} version {cfg['version']} ({len(manifest)} tensors, {seconds:.2f}s)")
    return {"seconds": seconds, "full": True, "version": cfg["version"], "config": cfg}


def _manifest_fits(cfg: Optional[Dict[str, Any]], state: Dict[str, torch.Tensor], spec: Dict[str, Any],
                   model_dir: str) -> Optional[str]:
    """None when the export at model_dir can take these weights in place, else why not."""
    if cfg is None:
        return "no onnx/config.json"
    entries = cfg.get("manifest")
    if not isinstance(entries, list) or not entries:
        return "no manifest"
    if cfg.get("family") != spec["family"] or cfg.get("architecture") != _architecture(spec):
        return "another architecture"
    if cfg.get("prefix") is not True:
        return "a graph without the shared-prefix inputs (an older export)"
    seen = set()
    for e in entries:
        p = e.get("param") if isinstance(e, dict) else None
        if p not in state or list(state[p].shape) != list(e.get("shape", [])):
            return f"manifest entry {p!r} does not match the model"
        seen.add(p)
    if seen != set(state):
        return "the manifest does not cover the model's weights"
    for f in (cfg.get("graph", ONNX_GRAPH_FILE), cfg.get("data", ONNX_DATA_FILE)):
        if not os.path.exists(os.path.join(onnx_dir(model_dir), f)):
            return f"onnx/{f} is missing"
    return None


def update_hf_onnx_weights(model, model_dir: str) -> Dict[str, Any]:
    """After a learner step: rewrites <model_dir>/onnx/model.onnx.data in place (temp file + rename) from
    the current (merged) weights per the manifest, then increments `version` in onnx/config.json (written
    last). Falls back to export_hf_onnx when there is no export or its manifest does not fit the model.
    Returns {"seconds", "full", "version", "config"}."""
    t0 = time.perf_counter()
    spec = _spec(model)
    state = merged_state_dict(model, spec)
    cfg = read_onnx_config(model_dir)
    why = _manifest_fits(cfg, state, spec, model_dir)
    if why is not None:
        _log(f"ONNX weights update: {why}; exporting the graph again")
        return export_hf_onnx(model, model_dir)
    assert cfg is not None
    _write_data(os.path.join(onnx_dir(model_dir), cfg.get("data", ONNX_DATA_FILE)), cfg["manifest"], state)
    cfg["version"] = int(cfg.get("version", 0)) + 1
    cfg["eos_token_ids"] = spec["eos_token_ids"]
    _write_config(model_dir, cfg)
    return {"seconds": time.perf_counter() - t0, "full": False, "version": cfg["version"], "config": cfg}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcp_gym_learner.hf_export",
                                description="Export a Llama / Qwen2 / Qwen3 checkpoint directory to ONNX "
                                            "(<dir>/onnx/) for the rollout side's sampler.")
    p.add_argument("--model-dir", required=True, help="a transformers checkpoint directory (written in place)")
    p.add_argument("--adapter", default=None,
                   help="a PEFT (LoRA) adapter directory to merge in (default: <model-dir>/adapter/ when it exists)")
    p.add_argument("--no-adapter", action="store_true", help="export the base weights even if <model-dir>/adapter/ exists")
    p.add_argument("--update", action="store_true",
                   help="rewrite only the weights when the existing export fits (else a full export)")
    a = p.parse_args(argv)
    import transformers

    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, torch_dtype=torch.float32)
    adapter = a.adapter
    default_adapter = os.path.join(a.model_dir, "adapter")
    if adapter is None and not a.no_adapter and os.path.exists(os.path.join(default_adapter, "adapter_config.json")):
        adapter = default_adapter
    if adapter is not None:
        import peft

        model = peft.PeftModel.from_pretrained(model, adapter)
    model.eval()
    try:
        r = update_hf_onnx_weights(model, a.model_dir) if a.update else export_hf_onnx(model, a.model_dir)
    except NotImplementedError as e:
        print(f"hf_export: {e}", file=sys.stderr)
        return 2
    cfg = r["config"]
    print(json.dumps({"model_dir": a.model_dir, "onnx_dir": onnx_dir(a.model_dir), "adapter": adapter,
                      "family": cfg["family"],
                      "version": r["version"], "full": r["full"], "seconds": round(r["seconds"], 3),
                      "architecture": cfg["architecture"], "eos_token_ids": cfg["eos_token_ids"],
                      "tensors": len(cfg["manifest"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
