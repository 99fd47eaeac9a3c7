"""PyTorch eager decoding of the embedded model, for bench/policy-decode.ts (the baseline).

Reads {"model_dir", "prompts": [[ids]], "batch_sizes": [1, 16], "new_tokens", "threads", "reps"} on stdin,
samples with the KV cache (GPT.forward with past keys/values) at temperature 1 (the median of
`reps` timed runs), and prints one
JSON line: {"tok_s": {"1": x, "16": y}, "matmul_gflops": z}.
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


def main():
    req = json.loads(sys.stdin.read())
    torch.set_num_threads(int(req.get("threads", 1)))
    model = load(req["model_dir"])
    gen = torch.Generator().manual_seed(0)
    out = {}
    for B in req["batch_sizes"]:
        prompts = req["prompts"][:B]
        generate(model, prompts, 4, gen)  # warm-up
        rates = []
        for _ in range(int(req.get("reps", 1))):
            t = time.perf_counter()
            n = generate(model, prompts, req["new_tokens"], gen)
            rates.append(n / (time.perf_counter() - t))
        out[str(B)] = sorted(rates)[len(rates) // 2]  # the median
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    reps = 40
    for _ in range(reps):
        a @ b
    gflops = 2 * 512 ** 3 * reps / (time.perf_counter() - t) / 1e9
    print(json.dumps({"tok_s": out, "matmul_gflops": gflops, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
