#!/usr/bin/env python3
"""One GRPO training step of the mcp-gym learner against the naive Hugging Face step, side by side.

    python3 bench/learner_gpu.py --shape qwen2-0.5b --batch 16 --seq 1024          (a CUDA machine:
        torch 2.x + transformers; runs ../shared/bench/naive_grpo_step.py at the same shape first)
    python3 bench/learner_gpu.py --shape tiny --batch 2 --seq 64 --device cpu       (a CPU smoke test)

The same loss on both sides: PPO clip (epsilon 0.2) + beta · k3 KL to a frozen reference, masked mean
per sequence then mean over the batch, the reference's forward included in the step, fp32 AdamW
(lr 1e-6, no gradient clipping), bf16 autocast on CUDA. The same models (random-initialised
LlamaForCausalLM of the shape, policy and reference built in the same order from seed 0), the same
token ids, mask (the first quarter is prompt: no loss) and advantages. The learner's step is
`RLTrainer.train` (learner/mcp_gym_learner/rl.py): logprobs through the chunked head for the scored
positions only, bf16 logits kept at most once, fused AdamW; its old logprobs come from the learner
itself (on-policy, like the naive step's).

Every side prints one JSON line; the last line is the comparison:
    {"tokens_per_s", "naive_tokens_per_s", "speedup", "mfu", "peak_mem_gib", "loss", "naive_loss", ...}
MFU uses the naive script's formula (tokens · (8 · params + 16 · L · seq · d) against a measured bf16
matmul ceiling). Without transformers (or with --model gpt) the model is the embedded GPT, and
without CUDA or without the naive script the naive step is the same code run inline here.

On CUDA the learner is timed twice: eager, then with its decoder layers compiled (torch.compile); the
comparison uses the faster. With --budget-s (bench/gpu.sh runs this under a timeout) the compiled pass is
skipped when less than --compile-cost-s is left, and when it runs, the eager comparison is printed first
("partial": true), so a run stopped during compilation still has a comparison line.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "learner"))

import torch  # noqa: E402

FALLBACK_SHAPES = {
    "llama-125m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=12),
    "qwen2-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2),
    "qwen2-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2),
}
TINY = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


def find_naive(path):
    cands = [path] if path else []
    cands += [os.path.join(REPO, "..", "shared", "bench", "naive_grpo_step.py"),
              os.path.join(REPO, "shared", "bench", "naive_grpo_step.py")]
    for c in cands:
        if c and os.path.exists(c):
            return os.path.abspath(c)
    return None


def load_module(path):
    spec = importlib.util.spec_from_file_location("naive_grpo_step", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def have_transformers():
    return importlib.util.find_spec("transformers") is not None


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# models


def build_models(a, shapes, device):
    """(policy, reference, kind, info): built like the naive script (seed 0, policy first, then reference)."""
    if a.model == "hf":
        from transformers import LlamaConfig, LlamaForCausalLM

        shape = TINY if a.shape == "tiny" else shapes[a.shape]
        kwargs = dict(shape, max_position_embeddings=max(2048, a.seq), tie_word_embeddings=True)
        try:
            cfg = LlamaConfig(**kwargs, attn_implementation=a.attn)
        except TypeError:  # pragma: no cover (old transformers)
            cfg = LlamaConfig(**kwargs)
        torch.manual_seed(0)
        policy = LlamaForCausalLM(cfg).to(device)
        reference = LlamaForCausalLM(cfg).to(device).eval().requires_grad_(False)
        info = {"L": cfg.num_hidden_layers, "d": cfg.hidden_size, "V": cfg.vocab_size,
                "attn_implementation": getattr(cfg, "_attn_implementation", a.attn)}
        return policy, reference, "hf-llama", info
    from mcp_gym_learner.model import GPT

    arch = {"max_seq_len": max(1024, a.seq)}
    torch.manual_seed(0)
    policy = GPT(dict(arch, seed=0)).to(device)
    reference = GPT(dict(arch, seed=1)).to(device).eval().requires_grad_(False)
    info = {"L": policy.n_layers, "d": policy.d_model, "V": policy.vocab_size, "attn_implementation": "embedded"}
    return policy, reference, "embedded-gpt", info


def full_logits(model, ids):
    if hasattr(model, "features"):
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device).unsqueeze(0).expand(B, T)
        return model(ids, pos, torch.ones_like(ids))[0]
    return model(ids).logits


# ---------------------------------------------------------------------------------------------
# timing


def timer(device):
    if device.type == "cuda":
        def run(fn, repeats, warmup):
            for _ in range(warmup):
                fn()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(repeats):
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return sorted(times)[len(times) // 2]
        return run

    def run_cpu(fn, repeats, warmup):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]
    return run_cpu


def matmul_ceiling(device, naive_mod):
    if device.type == "cuda":
        if naive_mod is not None:
            return naive_mod.matmul_ceiling()
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        return 2 * 8192 ** 3 / timer(device)(lambda: a @ b, 10, 3)
    n = 1024  # a CPU's float32 matmul ceiling (MFU on a CPU is a rough figure)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def flops_per_step(tokens, params, L, seq, d):
    return tokens * (8 * params + 16 * L * seq * d)  # the naive script's count: train 6N, reference 2N, attention


# ---------------------------------------------------------------------------------------------
# the naive step (a port of naive_grpo_step.py's, for any model and device)


def naive_inline(a, policy, reference, ids, adv, device, params, info, peak):
    def autocast():
        if device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        import contextlib
        return contextlib.nullcontext()

    def token_logprobs(model, x):
        logits = full_logits(model, x)[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None]).squeeze(-1)

    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    mask = torch.ones(a.batch, a.seq - 1, device=device)
    mask[:, : a.seq // 4] = 0
    with torch.no_grad(), autocast():
        old = token_logprobs(policy, ids)
    last = {}

    def step():
        with autocast():
            with torch.no_grad():
                ref = token_logprobs(reference, ids)
            new = token_logprobs(policy, ids)
            ratio = torch.exp(new - old)
            clipped = torch.clamp(ratio, 1 - a.epsilon, 1 + a.epsilon)
            pg = -torch.min(ratio * adv, clipped * adv)
            kl = torch.exp(ref - new) - (ref - new) - 1
            loss = (((pg + a.beta * kl) * mask).sum(-1) / mask.sum(-1)).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last["loss"] = loss.item()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = timer(device)(step, a.repeats, a.warmup)
    tokens = a.batch * a.seq
    return {"impl": "naive-inline", "step_s": round(seconds, 4), "tokens_per_s": round(tokens / seconds),
            "mfu": round(flops_per_step(tokens, params, info["L"], a.seq, info["d"]) / seconds / peak, 4),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if device.type == "cuda" else None,
            "loss": last["loss"]}


def naive_script(path, a):
    cmd = [sys.executable, path, "--shape", a.shape, "--batch", str(a.batch), "--seq", str(a.seq),
           "--repeats", str(a.repeats), "--epsilon", str(a.epsilon), "--beta", str(a.beta)]
    log("running " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        log(f"the naive script failed ({p.returncode}): {p.stderr[-2000:]}")
        return {"impl": "naive-hf-eager", "error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    lines = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("{")]
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------------------------


def naive_batch(ids, adv, seq):
    """The naive step's batch as the learner takes it (rl.Batch): every row of `ids` [batch, seq] scored
    after its first quarter (no loss there), one advantage per row (`adv` [batch]), groups of 4."""
    from mcp_gym_learner.rl import Batch

    B = ids.shape[0]
    start = seq // 4 + 1
    pos = torch.arange(start, seq)
    return Batch(ids=[ids[b] for b in range(B)], pos=[pos] * B, tgt=[ids[b, start:] for b in range(B)],
                 old=[torch.zeros(len(pos), dtype=torch.float64)] * B,
                 adv=[adv[b].double().expand(len(pos)).clone() for b in range(B)],
                 group_ids=[f"g{b // 4}" for b in range(B)], lengths=[seq] * B, scored=[len(pos)] * B)


def comparison(ours, eager, compiled, naive, mode, peak, partial=False):
    """The last line: the learner's best measurement against the naive step."""
    n_tps = naive.get("tokens_per_s") if naive else None
    n_loss = naive.get("loss") if naive else None
    out = dict(ours)
    out.update({
        "naive_impl": naive.get("impl") if naive else None, "naive_source": mode if naive else None,
        "naive_tokens_per_s": n_tps, "naive_mfu": naive.get("mfu") if naive else None,
        "naive_peak_mem_gib": naive.get("peak_mem_gib") if naive else None, "naive_loss": n_loss,
        "naive_error": naive.get("error") if naive else None,
        "speedup": round(ours["tokens_per_s"] / n_tps, 3) if n_tps else None,
        "speedup_eager": round(eager["tokens_per_s"] / n_tps, 3) if n_tps else None,
        "tokens_per_s_eager": eager["tokens_per_s"],
        "tokens_per_s_compiled": compiled.get("tokens_per_s") if compiled else None,
        "compile_error": compiled.get("error") if compiled else None,
        # the loss after the same number of steps as the naive run: the eager measurement's
        "loss": eager["loss"], "loss_after_compiled_run": compiled.get("loss") if compiled else None,
        "loss_rel_diff": (abs(eager["loss"] - n_loss) / max(1e-12, abs(n_loss))
                          if (n_loss is not None and eager["loss"] is not None) else None),
        "compiled": compiled is not None and ours is compiled,
        "matmul_ceiling_tflops": round(peak / 1e12, 3),
        "partial": partial,  # true: printed before the compiled pass (a later line supersedes it)
    })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2-0.5b", help="tiny, llama-125m, qwen2-0.5b, qwen2-1.5b")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", choices=["auto", "hf", "gpt"], default="auto",
                   help="hf: LlamaForCausalLM of the shape (needs transformers); gpt: the embedded GPT")
    p.add_argument("--attn", default="sdpa", help="attn_implementation of the HF model (the naive uses sdpa)")
    p.add_argument("--micro-batch", type=int, default=0, help="sequences per forward/backward (0: the batch)")
    p.add_argument("--naive", help="path of naive_grpo_step.py (default: ../shared/bench/naive_grpo_step.py)")
    p.add_argument("--naive-mode", choices=["auto", "script", "inline", "off"], default="auto",
                   help="auto: the script on CUDA with transformers and an HF shape, else inline")
    p.add_argument("--compile-model", choices=["auto", "on", "off"], default="auto",
                   help="also time the learner with its decoder layers compiled (torch.compile); auto: on CUDA "
                        "with torch >= 2, after the eager measurement (a failure is reported, not fatal)")
    p.add_argument("--threads", type=int, help="CPU threads")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="wall-clock budget of the whole run (0: none): the compiled pass is skipped when less than "
                        "--compile-cost-s is left after the eager one (bench/gpu.sh runs this under a timeout)")
    p.add_argument("--compile-cost-s", type=float, default=150.0,
                   help="what the compiled pass is expected to take at most (compilation + the timed steps)")
    a = p.parse_args()
    t_start = time.perf_counter()
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.model == "auto":
        a.model = "hf" if have_transformers() else "gpt"
    naive_path = find_naive(a.naive)
    naive_mod = None
    if naive_path and device.type == "cuda":
        try:
            naive_mod = load_module(naive_path)
        except Exception as e:  # pragma: no cover
            log(f"cannot import {naive_path}: {e}")
    shapes = dict(FALLBACK_SHAPES)
    if naive_mod is not None:
        shapes.update(getattr(naive_mod, "SHAPES", {}))
    if a.shape != "tiny" and a.shape not in shapes:
        p.error(f"--shape: one of tiny, {', '.join(sorted(shapes))}")
    if a.model == "hf" and not have_transformers():
        p.error("--model hf: transformers is not importable")

    mode = a.naive_mode
    if mode == "auto":
        mode = ("script" if (device.type == "cuda" and naive_path and a.model == "hf" and a.shape != "tiny")
                else "inline")
    naive = None
    if mode == "script":
        if not naive_path:
            p.error("--naive-mode script: naive_grpo_step.py not found (pass --naive PATH)")
        naive = naive_script(naive_path, a)  # first, alone on the GPU
        print(json.dumps(naive), flush=True)

    from mcp_gym_learner.policy import GPTAdapter, HFAdapter
    from mcp_gym_learner.rl import Batch, RLConfig, RLTrainer

    policy, reference, kind, info = build_models(a, shapes, device)
    params = sum(t.numel() for t in policy.parameters())
    ids = torch.randint(0, info["V"], (a.batch, a.seq), device=device)
    adv = torch.randn(a.batch, 1, device=device)
    peak = matmul_ceiling(device, naive_mod)
    if mode == "inline":
        naive = naive_inline(a, copy.deepcopy(policy), reference, ids, adv, device, params, info, peak)
        print(json.dumps(naive), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    adapter = GPTAdapter(policy) if kind == "embedded-gpt" else HFAdapter(policy)
    autocast = torch.bfloat16 if device.type == "cuda" else None
    trainer = RLTrainer(policy, adapter, autocast_dtype=autocast)
    with torch.no_grad():  # the naive step's reference: a second random model, not a copy of the policy
        trainer.reference.module.model.load_state_dict(reference.state_dict())
    del reference
    batch = naive_batch(ids.cpu(), adv.cpu().reshape(-1), a.seq)  # the naive mask: no loss on the first quarter
    cfg = RLConfig(loss="grpo", clip_low=a.epsilon, clip_high=a.epsilon, beta=a.beta, entropy_coef=0.0, epochs=1,
                   minibatch_size=0, micro_batch_size=a.micro_batch or a.batch, max_grad_norm=0.0, lr=1e-6,
                   weight_decay=0.01, total_steps=0, warmup_steps=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    batch.old = [t.double() for t in trainer.score(batch, cfg)]  # on-policy, like the naive step's `old`
    tokens = a.batch * a.seq

    def measure(label):
        last = {}

        def step():
            last.update(trainer.train(batch, cfg)["metrics"])

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seconds = timer(device)(step, a.repeats, a.warmup)
        res = {"impl": f"mcp-gym-learner{label}", "model": kind, "shape": a.shape, "params_M": round(params / 1e6, 1),
               "batch": a.batch, "seq": a.seq, "device": str(device), "step_s": round(seconds, 4),
               "tokens_per_s": round(tokens / seconds),
               "mfu": round(flops_per_step(tokens, params, info["L"], a.seq, info["d"]) / seconds / peak, 4),
               "peak_mem_gib": (round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if device.type == "cuda"
                                else None),
               "loss": last.get("loss"), "kl": last.get("kl"), "ratio_mean": last.get("ratio_mean"),
               "attn_implementation": info["attn_implementation"], "micro_batch_size": cfg.micro_batch_size,
               "torch": torch.__version__}
        print(json.dumps(res), flush=True)
        return res

    ours = eager = measure("")
    compiled = None
    skipped = None
    want_compile = a.compile_model == "on" or (a.compile_model == "auto" and device.type == "cuda")
    if want_compile and kind == "hf-llama" and hasattr(torch, "compile"):
        left = a.budget_s - (time.perf_counter() - t_start) if a.budget_s > 0 else float("inf")
        if left < a.compile_cost_s:
            skipped = (f"budget: {left:.0f} s left of --budget-s {a.budget_s:g}, "
                       f"the compiled pass needs ~{a.compile_cost_s:g}")
            log("compiled pass skipped (" + skipped + ")")
        else:
            # the eager comparison first: a run stopped during compilation still has it
            print(json.dumps(comparison(eager, eager, None, naive, mode, peak, partial=True)), flush=True)
            try:  # the same trainer, its policy's and its reference's decoder layers compiled
                for m in (policy, trainer.reference.module.model):
                    for layer in m.get_decoder().layers:
                        layer.forward = torch.compile(layer.forward)
                t0 = time.perf_counter()
                compiled = measure("+compiled-layers")
                compiled["wall_s_with_compile"] = round(time.perf_counter() - t0, 1)
                if compiled["tokens_per_s"] > eager["tokens_per_s"]:
                    ours = compiled
            except Exception as e:  # reported, not fatal
                log(f"torch.compile of the layers failed: {type(e).__name__}: {e}")
                compiled = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    out = comparison(ours, eager, compiled, naive, mode, peak)
    out["compile_skipped"] = skipped
    out["wall_s"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

