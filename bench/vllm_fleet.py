"""Two vLLM OpenAI-compatible servers on one GPU machine: sampling tokens/s on one server against both, and the time
to push a LoRA adapter to every server (bench/gpu.sh's `vllm_fleet` step; docs/scaling.md uses the figures).

    python bench/vllm_fleet.py --model-dir DIR [--servers 2] [--requests 96] [--max-tokens 128] [--timeout-s 230]

DIR: a Hugging Face checkpoint (gpu.sh's random Qwen2; it has no tokenizer, so the servers run with
--skip-tokenizer-init and the prompts are token ids). The servers share the GPU (each --gpu-memory-utilization
0.8 / servers, --enforce-eager to start fast), with runtime LoRA updating on. Prints JSON lines: one per phase
({"phase": "one_server" | "all_servers", "tokens_per_s", ...}), the ratio, and the push ({"phase": "lora_push",
"seconds", "per_server_s"}). Without vllm it prints {"skipped": ...} and exits 0. The request pattern is the fleet's:
each request to the server with the fewest in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float = 120.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text}


def _wait(base: str, proc: subprocess.Popen, deadline: float) -> None:
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm_fleet: the server for {base} exited ({proc.returncode}) before it answered")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(1.0)
    raise SystemExit(f"vllm_fleet: {base} did not answer /health in time")


def _sample(bases, model: str, n: int, max_tokens: int, vocab: int, concurrency: int):
    """n completions of random token-id prompts, each to the server with the fewest in flight; (tokens, seconds)."""
    inflight = [0] * len(bases)
    lock = threading.Lock()
    tokens = [0]
    errors = []
    todo = list(range(n))
    rng = random.Random(0)
    prompts = [[rng.randrange(vocab) for _ in range(256)] for _ in range(n)]

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
                k = min(range(len(bases)), key=lambda j: (inflight[j], j))
                inflight[k] += 1
            try:
                r = _post(bases[k] + "/v1/completions", {"model": model, "prompt": prompts[i], "max_tokens": max_tokens,
                                                         "min_tokens": max_tokens, "temperature": 1.0,
                                                         "ignore_eos": True})
                with lock:
                    tokens[0] += int((r.get("usage") or {}).get("completion_tokens") or 0)
            except Exception as e:  # counted, not fatal: the figure says how many failed
                errors.append(f"{bases[k]}: {type(e).__name__}: {e}")
            finally:
                with lock:
                    inflight[k] -= 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0], time.perf_counter() - t0, errors


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--requests", type=int, default=96)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight over all servers")
    p.add_argument("--timeout-s", type=float, default=230.0, help="seconds for the servers to start")
    a = p.parse_args(argv)
    try:
        import vllm  # noqa: F401
    except Exception as e:
        print(json.dumps({"bench": "vllm_fleet", "skipped": f"vllm is not importable ({type(e).__name__})"}))
        return 0
    import peft
    import transformers

    cfg = json.load(open(os.path.join(a.model_dir, "config.json"), encoding="utf-8"))
    vocab = int(cfg["vocab_size"])
    tmp = tempfile.mkdtemp(prefix="vllm-fleet-")
    adapter = os.path.join(tmp, "adapter")
    base = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir)
    peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")).save_pretrained(adapter)
    del base
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    procs, bases = [], []
    util = round(0.8 / a.servers, 3)
    try:
        for i in range(a.servers):
            port = _port()
            cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", a.model_dir, "--host",
                   "127.0.0.1", "--port", str(port), "--gpu-memory-utilization", str(util), "--enforce-eager",
                   "--skip-tokenizer-init", "--enable-lora", "--max-lora-rank", "8", "--max-model-len", "2048",
                   "--served-model-name", "policy"]
            log = open(os.path.join(tmp, f"server{i}.log"), "w")
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            bases.append(f"http://127.0.0.1:{port}")
        deadline = time.time() + a.timeout_s
        t0 = time.perf_counter()
        for b, pr in zip(bases, procs):
            _wait(b, pr, deadline)
        print(json.dumps({"bench": "vllm_fleet", "phase": "start", "servers": a.servers, "seconds": time.perf_counter() - t0,
                          "gpu_memory_utilization": util}), flush=True)
        _sample(bases[:1], "policy", 8, 16, vocab, 8)  # warm-up
        rows = {}
        for name, bs in (("one_server", bases[:1]), ("all_servers", bases)):
            tok, sec, err = _sample(bs, "policy", a.requests, a.max_tokens, vocab, a.concurrency)
            rows[name] = tok / sec if sec > 0 else None
            print(json.dumps({"bench": "vllm_fleet", "phase": name, "servers": len(bs), "requests": a.requests,
                              "completion_tokens": tok, "seconds": sec, "tokens_per_s": rows[name],
                              "errors": len(err), "first_error": err[0] if err else None}), flush=True)
        one, both = rows["one_server"], rows["all_servers"]
        print(json.dumps({"bench": "vllm_fleet", "phase": "ratio", "all_over_one": both / one if one and both else None}))
        per = {}
        t0 = time.perf_counter()

        def push(b):
            s = time.perf_counter()
            _post(b + "/v1/load_lora_adapter", {"lora_name": "policy-v1", "lora_path": adapter})
            per[b] = time.perf_counter() - s

        ts = [threading.Thread(target=push, args=(b,)) for b in bases]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        seconds = time.perf_counter() - t0
        tok, _, err = _sample(bases, "policy-v1", len(bases) * 2, 8, vocab, len(bases) * 2)
        print(json.dumps({"bench": "vllm_fleet", "phase": "lora_push", "servers": len(bases), "seconds": seconds,
                          "per_server_s": list(per.values()), "pushed": len(per), "sampled_after": tok,
                          "errors_after": len(err)}), flush=True)
        return 0 if len(per) == len(bases) and not err else 1
    finally:
        for pr in procs:
            try:
                os.killpg(pr.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pr in procs:
            try:
                pr.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(pr.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
