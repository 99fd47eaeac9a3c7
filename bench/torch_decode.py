"""PyTorch eager decoding of the embedded model, for bench/policy-decode.ts (the baseline).

Samples with the KV cache (GPT.forward with past keys/values) at temperature 1; driven by
requests on stdin (see main), one timed run at a time.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))

import torch  # noqa: E402

from mcp_gym_learner.model import GPT  # noqa: E402


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = GPT(cfg["architecture"])
    model.load_state_dict(torch.load(os.path.join(model_dir, "weights.pt"), map_location="cpu"))
    return model.eval()


@torch.no_grad()
def generate(model, prompts, new_tokens, gen):
    B = len(prompts)
    P = max(len(p) for p in prompts)
    ids = torch.full((B, P), 263, dtype=torch.long)
    mask = torch.zeros(B, P, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = torch.tensor(p)
        mask[b, P - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, k, v = model(ids, pos, mask)
    last = logits[:, -1]
    nxt_pos = pos[:, -1:] + 1
    for _ in range(new_tokens):
        tok = torch.multinomial(torch.softmax(last, -1), 1, generator=gen)
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
        logits, k, v = model(tok, nxt_pos, mask, k, v)
        last = logits[:, -1]
        nxt_pos = nxt_pos + 1
    return B * new_tokens


def matmul_gflops():
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    reps = 40
    for _ in range(reps):
        a @ b
    return 2 * 512 ** 3 * reps / (time.perf_counter() - t) / 1e9


def main():
    """One JSON request per line on stdin, one JSON answer per line on stdout:
    {"model_dir", "prompts", "threads"} loads (answers {"torch"}); {"batch": B, "new_tokens": N}
    runs one timed decode of the first B prompts (a warm-up first time per B; answers
    {"tok_s"}); {"matmul": true} answers {"matmul_gflops"}. The caller alternates these runs
    with its own, so that both sides are timed in the same minutes."""
    model = None
    prompts = []
    gen = torch.Generator().manual_seed(0)
    warm = set()
    for line in sys.stdin:
        req = json.loads(line)
        if "model_dir" in req:
            torch.set_num_threads(int(req.get("threads", 1)))
            model = load(req["model_dir"])
            prompts = req["prompts"]
            out = {"torch": torch.__version__}
        elif "batch" in req:
            B = int(req["batch"])
            if B not in warm:
                generate(model, prompts[:B], 4, gen)
                warm.add(B)
            t = time.perf_counter()
            n = generate(model, prompts[:B], int(req["new_tokens"]), gen)
            out = {"tok_s": n / (time.perf_counter() - t)}
        elif req.get("matmul"):
            out = {"matmul_gflops": matmul_gflops()}
        else:
            out = {"error": f"unknown request {req!r}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
