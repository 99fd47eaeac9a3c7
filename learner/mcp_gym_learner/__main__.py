"""mcp-gym-learner (or python -m mcp_gym_learner) serve [--http --port N [--host H] [--token T]] | create DIR |
export DIR | sft DIR DATA. Under torchrun, `serve` runs one learner per rank (distributed.py)."""

from __future__ import annotations

import argparse
import json
import sys


def _run(service, req) -> int:
    resp = service.handle(json.dumps(req))
    print(json.dumps(resp, indent=2))
    return 0 if resp["ok"] else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mcp-gym-learner", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sv = sub.add_parser("serve", help="speak the JSON-lines protocol on stdin/stdout, or over HTTP (PROTOCOL.md)")
    sv.add_argument("--http", action="store_true", help="serve POST /rpc over HTTP instead of stdin/stdout")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8765, help="port (0: a free one; default 8765)")
    sv.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (default: $MCP_GYM_LEARNER_TOKEN)")
    sv.add_argument("--fsdp", action="store_true",
                    help="under torchrun: shard a Hugging Face model over the ranks with FSDP2 instead of DDP replicas "
                         "(MCP_GYM_PARALLEL=fsdp; docs/distributed.md)")
    c = sub.add_parser("create", help="write config.json and weights.pt with fresh weights")
    c.add_argument("model_dir")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--arch", action="append", default=[], metavar="KEY=INT",
                   help="architecture field, e.g. --arch d_model=64 (repeatable)")
    c.add_argument("--overwrite", action="store_true")
    c.add_argument("--export", action="store_true", help="also export the ONNX graph")
    e = sub.add_parser("export", help="(re)write weights.pt and the ONNX files of a model directory")
    e.add_argument("model_dir")
    e.add_argument("--full", action="store_true", help="re-export the graph")
    s = sub.add_parser("sft", help="supervised training on a JSONL file, then save (and export)")
    s.add_argument("model_dir")
    s.add_argument("data")
    s.add_argument("--epochs", type=int, default=1)
    s.add_argument("--steps", type=int)
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--lr", type=float, default=3e-3)
    s.add_argument("--warmup", type=float)
    s.add_argument("--seed", type=int, default=0)
    for q in (e, s):
        q.add_argument("--threads", type=int)
        q.add_argument("--device", choices=["cpu", "cuda"])
    args = p.parse_args(argv)

    if args.command == "serve":
        import os

        if args.fsdp:
            os.environ["MCP_GYM_PARALLEL"] = "fsdp"
        if args.http:

            from .http_server import serve_http
            return serve_http(args.host, args.port, args.token or os.environ.get("MCP_GYM_LEARNER_TOKEN") or None)
        from .stdio_server import serve
        return serve()

    from .runtime import tune_malloc
    from .service import LearnerService
    tune_malloc()
    service = LearnerService()
    if args.command == "create":
        arch = {}
        for kv in args.arch:
            k, _, v = kv.partition("=")
            arch[k] = int(v) if v.lstrip("-").isdigit() else v
        rc = _run(service, {"cmd": "create", "model_dir": args.model_dir, "architecture": arch, "seed": args.seed,
                            "overwrite": args.overwrite})
        if rc or not args.export:
            return rc
        rc = _run(service, {"cmd": "load", "model_dir": args.model_dir, "device": "cpu"})
        return rc or _run(service, {"cmd": "export", "full": True})
    load = {"cmd": "load", "model_dir": args.model_dir, "threads": args.threads, "device": args.device}
    rc = _run(service, {k: v for k, v in load.items() if v is not None})
    if rc:
        return rc
    if args.command == "export":
        return _run(service, {"cmd": "export", "full": args.full})
    req = {"cmd": "sft", "data": args.data, "epochs": args.epochs, "steps": args.steps,
           "batch_size": args.batch_size, "lr": args.lr, "warmup": args.warmup, "seed": args.seed}
    rc = _run(service, {k: v for k, v in req.items() if v is not None})
    return rc or _run(service, {"cmd": "export"})


if __name__ == "__main__":
    sys.exit(main())
