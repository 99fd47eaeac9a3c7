"""PyTorch eager decoding of a Hugging Face checkpoint with transformers' own `generate`: the baseline of
bench/hf-sampling.ts (onnxruntime-node's sampler on the same weights).

Float32 on the CPU, `generate(do_sample=True, temperature=1, top_k=0, top_p=1, use_cache=True,
max_new_tokens=N, min_new_tokens=N)`: every row samples exactly N tokens from the whole vocabulary (the
same distribution as OnnxModel.generate with temperature 1, topK 0, topP 1, and no stop token). The batch is
the same prompt repeated B times (no padding). Attention: "eager" (the baseline of the issue) or "sdpa",
switched on the one loaded model (`set_attn_implementation`).

Timing, from a streamer that transformers calls with the prompt (before the prefill) and then with each
sampled token: prefill = prompt -> first sampled token (the prompt's forward pass and the first sample);
decode = first -> last sampled token (N - 1 forward passes over one new token per row, N - 1 samples).
`decode_tok_s` = B · (N - 1) / decode seconds, `total_tok_s` = B · N / the whole call's seconds.

Driven by bench/hf-sampling.ts: one JSON request per line on stdin, one JSON answer per line on stdout.
    {"model_dir", "threads"}                  loads (float32, eager); answers versions, params, RSS
    {"batch": B, "new_tokens": N, "attn": A, "prompt": [ids]}   one timed run (a short warm-up first
                                              time per (B, A)); answers the figures above
    {"parts": true, "batch": B, "prompt": [ids], "attn": A, "reps": R}   where a decode step's time goes:
                                              the model's forward over one new token per row (KV cache of
                                              the prompt), the LM head's matmul alone, the sampling (softmax +
                                              multinomial over [B, V]); medians of R, in ms
    {"rss": true}                             answers {"rss_mb", "peak_rss_mb"}
"""

import inspect
import json
import resource
import sys
import time

import torch


def rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Clock:
    """A transformers streamer that keeps the time of each `put` (the prompt first, then each new token)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def load(model_dir):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                              attn_implementation="eager", local_files_only=True)
    return model.eval()


@torch.no_grad()
def generate(model, prompt, batch, new_tokens, seed):
    ids = torch.tensor([prompt] * batch, dtype=torch.long)
    clock = Clock()
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                         top_p=1.0, use_cache=True, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         streamer=clock)
    t1 = time.perf_counter()
    got = out.shape[1] - ids.shape[1]
    if got != new_tokens:
        raise RuntimeError(f"generate returned {got} new tokens per row, not {new_tokens}")
    ts = clock.times  # [prompt, token 1, ..., token N]
    if len(ts) != new_tokens + 1:
        raise RuntimeError(f"the streamer heard {len(ts)} puts, not {new_tokens + 1}")
    prefill = ts[1] - t0
    decode = ts[-1] - ts[1]
    return {"tok_s": batch * (new_tokens - 1) / decode, "total_tok_s": batch * new_tokens / (t1 - t0),
            "prefill_s": prefill, "decode_s": decode, "total_s": t1 - t0}


def median_ms(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2] * 1e3


@torch.no_grad()
def parts(model, prompt, batch, reps):
    """A decode step's pieces at batch B, after a prefill of the prompt (the cache is cropped back after each
    step, so every step sees the same context)."""
    ids = torch.tensor([prompt] * batch, dtype=torch.long)
    out = model(ids, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    P = ids.shape[1]
    tok = ids[:, -1:]
    mask = torch.ones(batch, P + 1, dtype=torch.long)
    pos = torch.full((batch, 1), P, dtype=torch.long)

    # transformers 5.x renames past_key_values to cache (the old name warns)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def step():
        model(tok, attention_mask=mask, position_ids=pos, use_cache=True, **{key: cache})
        cache.crop(-1)

    hidden = torch.randn(batch, model.config.hidden_size)
    W = model.get_output_embeddings().weight
    logits = torch.randn(batch, W.shape[0])
    return {"forward_ms": median_ms(step, reps), "head_ms": median_ms(lambda: hidden @ W.T, reps),
            "sample_ms": median_ms(lambda: torch.multinomial(torch.softmax(logits, -1), 1), reps)}


def main():
    model = None
    warm = set()
    seed = 0
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "model_dir" in req:
                import transformers

                torch.set_num_threads(int(req.get("threads", 1)))
                torch.set_num_interop_threads(1)
                model = load(req["model_dir"])
                attn = model.config._attn_implementation
                out = {"torch": torch.__version__, "transformers": transformers.__version__,
                       "params": sum(p.numel() for p in model.parameters()), "attn": attn,
                       "torch_threads": torch.get_num_threads(), "rss_mb": rss_mb()}
            elif req.get("parts"):
                attn = req.get("attn", "eager")
                if model.config._attn_implementation != attn:
                    model.set_attn_implementation(attn)
                out = parts(model, req["prompt"], int(req["batch"]), int(req.get("reps", 10)))
            elif "batch" in req:
                B, N, attn = int(req["batch"]), int(req["new_tokens"]), req.get("attn", "eager")
                if model.config._attn_implementation != attn:
                    model.set_attn_implementation(attn)
                if (B, attn) not in warm:
                    generate(model, req["prompt"], B, 4, 12345)
                    warm.add((B, attn))
                seed += 1
                out = generate(model, req["prompt"], B, N, seed)
                out["attn"] = model.config._attn_implementation
            elif req.get("rss"):
                out = {"rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()}
            else:
                out = {"error": f"unknown request {req!r}"}
        except Exception as e:  # reported to the caller, which stops
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
