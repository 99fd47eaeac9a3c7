#!/usr/bin/env python3
"""The learner's log-probabilities on a Hugging Face model against a plain transformers forward.

    python3 bench/hf_logprob_check.py --shape qwen2-0.5b                 (a CUDA machine: torch 2.x + transformers)
    python3 bench/hf_logprob_check.py --shape tiny --device cpu          (a CPU smoke test)

A random-initialised Qwen2ForCausalLM of the shape (no download: written once into --model-dir as a
standard checkpoint, bf16 weights like the published ones, and reused) is loaded the way the learner's
`load` loads it (hf_backend.HFBackend.load: float32 parameters, bf16 autocast on CUDA, the packing check,
packed sequences when it passes). A batch of sequences of different lengths (the first quarter of each is
prompt: not scored) is scored

- "train":    by RLTrainer.score, i.e. exactly as the first epoch of `train` computes the new logprobs
              (micro_inputs -> HFAdapter packed rows -> decoder -> chunked head, under the trainer's autocast),
- "logprobs": by the `logprobs` command (HFBackend.logprobs),

and both are compared with the reference: a second load of the same checkpoint by plain transformers
(AutoModelForCausalLM, float32, --ref-attn attention, TF32 off), right-padded rows with an attention mask,
full logits, log_softmax in float32, gather.

--modes auto,float32 (the default on CUDA) checks the learner twice: "auto" (what `load` does by default:
bf16 autocast on CUDA) and "float32" (dtype float32: no autocast; TF32 is turned off after the load so the
comparison is strict). On the CPU both are float32.

Tolerances on |learner - reference| over every scored token (override with --tol-mean / --tol-max):
    bf16 autocast (CUDA, mode auto):   mean 2e-2, max 2.5e-1  (bf16 logits: 8-bit mantissa, 24 layers)
    float32 on CUDA (TF32 off):        mean 1e-4, max 2e-3    (different kernels and reduction orders)
    float32 on the CPU:                mean 1e-5, max 1e-4
A leak control is printed beside them: how much the reference's logprobs of one sequence move when another
sequence precedes it in the same row without a position restart (what a packing bug would look like). A
check whose tolerance is above the leak control could not see such a bug: the float32 mode can.

Output: one JSON line per mode, then a summary line {"bench": "hf_logprob_check", "pass": ...} and a
PASS/FAIL line; the exit status is 1 on FAIL.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "learner"))

import torch  # noqa: E402

# Qwen2-0.5B's published shape (random weights); "tiny" for a CPU smoke test.
SHAPES = {
    "qwen2-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2),
    "qwen2-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2),
    "tiny": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
}
DEFAULT_LENGTHS = {"tiny": "64,57,41,30,17,9,5,2", "qwen2-0.5b": "1024,901,777,640,512,300,129,33",
                   "qwen2-1.5b": "1024,901,777,640,512,300,129,33"}
TOL = {  # (mean, max)
    "bf16": (2e-2, 2.5e-1),
    "float32-cuda": (1e-4, 2e-3),
    "float32-cpu": (1e-5, 1e-4),
}


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def default_model_dir(shape):
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"mcp-gym-random-qwen2-{shape}")


def _shape_of(cfg):
    return {k: cfg.get(k) for k in SHAPES["tiny"]}


def ensure_checkpoint(model_dir, shape, device, seed=0):
    """A random-initialised Qwen2ForCausalLM of the shape in model_dir (bf16 safetensors + config.json), made
    once and reused while its config matches. Returns (model_dir, seconds spent making it, 0 when reused)."""
    want = SHAPES[shape]
    cfg_path = os.path.join(model_dir, "config.json")
    if os.path.exists(cfg_path):
        try:
            with open(cfg_path, "r", encoding="utf-8") as f:
                if _shape_of(json.load(f)) == want:
                    return model_dir, 0.0
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kwargs = dict(want, max_position_embeddings=32768, tie_word_embeddings=True, rms_norm_eps=1e-6,
                  use_sliding_window=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    try:
        cfg = Qwen2Config(**kwargs, rope_theta=1000000.0)
    except TypeError:  # pragma: no cover (a transformers that only takes rope_parameters)
        cfg = Qwen2Config(**kwargs)
    torch.manual_seed(seed)
    dev = torch.device(device)
    try:  # initialise on the device when possible (fast on a GPU), save from there
        with dev:
            model = Qwen2ForCausalLM(cfg)
    except Exception:  # pragma: no cover
        model = Qwen2ForCausalLM(cfg)
    model = model.to(torch.bfloat16).cpu()
    tmp = model_dir.rstrip("/") + f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(model_dir)), exist_ok=True)
    os.replace(tmp, model_dir)
    seconds = time.perf_counter() - t0
    log(f"wrote a random {shape} Qwen2 checkpoint into {model_dir} ({seconds:.1f} s)")
    return model_dir, seconds


def load_learner(model_dir, device, dtype="auto", lora=None):
    """The model as the learner's `load` makes it: (backend, RLTrainer) — service.cmd_load's two lines."""
    from mcp_gym_learner.hf_backend import HFBackend
    from mcp_gym_learner.rl import RLTrainer

    a = {"dtype": dtype}
    if lora is not None:
        a["lora"] = lora
    backend = HFBackend.load(model_dir, a, device, device)
    trainer = RLTrainer(backend.model, backend.adapter, autocast_dtype=backend.autocast_dtype,
                        reference=backend.reference_mode("copy"))
    return backend, trainer


def make_sequences(lengths, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, vocab, (n,), generator=g) for n in lengths]
    starts = [max(1, n // 4) for n in lengths]  # the first scored token; the first quarter is prompt
    return seqs, starts


def make_batch(seqs, starts):
    from mcp_gym_learner.rl import Batch

    pos = [torch.arange(st, len(s)) for s, st in zip(seqs, starts)]
    return Batch(ids=list(seqs), pos=pos, tgt=[s[st:] for s, st in zip(seqs, starts)],
                 old=[torch.zeros(len(p), dtype=torch.float64) for p in pos],
                 adv=[torch.zeros(len(p), dtype=torch.float64) for p in pos],
                 group_ids=[f"g{i // 4}" for i in range(len(seqs))], lengths=[len(s) for s in seqs],
                 scored=[len(p) for p in pos])


@contextlib.contextmanager
def no_tf32():
    m, c = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = m, c


def load_plain(model_dir, device, attn):
    from transformers import AutoModelForCausalLM

    kw = {"local_files_only": True}
    for dkw in ("dtype", "torch_dtype"):
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn,
                                                         **{dkw: torch.float32}, **kw)
            break
        except TypeError:
            continue
    return model.to(device).eval()


@torch.no_grad()
def plain_logprobs(model, seqs, starts, device, rows=4):
    """Right-padded rows with an attention mask, full float32 logits, log_softmax, gather (no autocast)."""
    out = [None] * len(seqs)
    with no_tf32():
        for r0 in range(0, len(seqs), rows):
            chunk = list(range(r0, min(len(seqs), r0 + rows)))
            T = max(len(seqs[i]) for i in chunk)
            ids = torch.zeros(len(chunk), T, dtype=torch.long)
            mask = torch.zeros(len(chunk), T, dtype=torch.long)
            for j, i in enumerate(chunk):
                ids[j, : len(seqs[i])] = seqs[i]
                mask[j, : len(seqs[i])] = 1
            ids, mask = ids.to(device), mask.to(device)
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
            lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            for j, i in enumerate(chunk):
                out[i] = lp[j, starts[i] - 1: len(seqs[i]) - 1].cpu()
            del logits, lp
    return out


@torch.no_grad()
def leak_control(model, seqs, starts, device):
    """Mean |change| of the reference's logprobs of the second-longest sequence when the longest one precedes
    it in one row with continuous positions (no restart): what a packing bug would show."""
    a, b = seqs[0], seqs[1]
    alone = plain_logprobs(model, [b], [starts[1]], device)[0]
    joint = torch.cat([a, b])
    with no_tf32():
        logits = model(input_ids=joint.unsqueeze(0).to(device), use_cache=False).logits.float()[0]
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, joint[1:, None].to(device)).squeeze(-1).cpu()
    leaked = lp[len(a) + starts[1] - 1:]
    return float((leaked - alone).abs().mean())


def diff(a, b):
    d = torch.cat([(x.double() - y.double()).abs() for x, y in zip(a, b)])
    finite = bool(torch.isfinite(d).all())
    return (float(d.max()) if finite else float("inf")), (float(d.mean()) if finite else float("inf"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2-0.5b", choices=sorted(SHAPES))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--lengths", help="comma-separated sequence lengths (default: by shape)")
    p.add_argument("--modes", help="learner dtypes to check, comma-separated: auto, float32 "
                                    "(default: auto,float32 on CUDA, auto on the CPU)")
    p.add_argument("--micro-batch", type=int, default=0, help="the trainer's micro_batch_size (0: all sequences)")
    p.add_argument("--ref-attn", default="eager", help="attn_implementation of the plain reference (eager, sdpa)")
    p.add_argument("--model-dir", help="where the random checkpoint is written / reused "
                                       "(default: $TMPDIR/mcp-gym-random-qwen2-<shape>)")
    p.add_argument("--tol-mean", type=float)
    p.add_argument("--tol-max", type=float)
    p.add_argument("--threads", type=int)
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="wall-clock budget (0: none): a mode after the first is skipped (reported, not a failure) "
                        "when less than --mode-cost-s is left")
    p.add_argument("--mode-cost-s", type=float, default=30.0)
    a = p.parse_args()
    t_start = time.perf_counter()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available to this torch")
    device = a.device
    lengths = [int(x) for x in (a.lengths or DEFAULT_LENGTHS[a.shape]).split(",")]
    if min(lengths) < 2:
        p.error("--lengths: every sequence needs at least 2 tokens")
    lengths.sort(reverse=True)
    modes = (a.modes or ("auto,float32" if device == "cuda" else "auto")).split(",")
    model_dir, make_s = ensure_checkpoint(a.model_dir or default_model_dir(a.shape), a.shape, device)
    V = SHAPES[a.shape]["vocab_size"]
    seqs, starts = make_sequences(lengths, V)

    import transformers

    t0 = time.perf_counter()
    plain = load_plain(model_dir, device, a.ref_attn)
    ref = plain_logprobs(plain, seqs, starts, device)
    leak = leak_control(plain, seqs, starts, device)
    ref_s = time.perf_counter() - t0
    del plain
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()

    from mcp_gym_learner.rl import RLConfig

    results = []
    skipped = []
    for k, mode in enumerate(modes):
        left = a.budget_s - (time.perf_counter() - t_start) if a.budget_s > 0 else float("inf")
        if k > 0 and left < a.mode_cost_s:
            skipped.append(mode)
            print(json.dumps({"bench": "hf_logprob_check", "mode": mode, "skipped": True,
                              "why": f"budget: {left:.0f} s left of --budget-s {a.budget_s:g}"}), flush=True)
            print(f"SKIPPED {mode} (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        backend, trainer = load_learner(model_dir, device, dtype=mode)
        if device == "cuda" and backend.autocast_dtype is None:
            # HFBackend.load turns TF32 on for CUDA; the float32 mode is the strict check: off
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        batch = make_batch(seqs, starts)
        cfg = RLConfig(micro_batch_size=a.micro_batch or len(seqs))
        lp_train = trainer.score(batch, cfg)
        lp_cmd = backend.logprobs({"sequences": [s.tolist() for s in seqs], "starts": starts})["logprobs"]
        lp_cmd = [torch.tensor([float("nan") if x is None else x for x in row]) for row in lp_cmd]
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        bf16 = backend.autocast_dtype is not None and device == "cuda"
        kind = "bf16" if bf16 else f"float32-{device}"
        tol_mean, tol_max = TOL[kind]
        tol_mean = a.tol_mean if a.tol_mean is not None else tol_mean
        tol_max = a.tol_max if a.tol_max is not None else tol_max
        tr_max, tr_mean = diff(lp_train, ref)
        cm_max, cm_mean = diff(lp_cmd, ref)
        per_seq = [round(float((x.double() - y.double()).abs().max()), 6) for x, y in zip(lp_train, ref)]
        ok = tr_max <= tol_max and tr_mean <= tol_mean and cm_max <= tol_max and cm_mean <= tol_mean
        res = {"bench": "hf_logprob_check", "mode": mode, "shape": a.shape, "device": device,
               "numerics": ("bf16-autocast" if bf16 else "float32"), "pack": bool(backend.adapter.pack),
               "pack_tokens": getattr(backend.adapter, "pack_tokens", None),
               "attn_implementation": backend.adapter.attn_implementation, "ref_attn": a.ref_attn,
               "sequences": len(seqs), "lengths": lengths, "scored_tokens": sum(batch.scored),
               "micro_batch_size": cfg.micro_batch_size,
               "train_max_abs": tr_max, "train_mean_abs": tr_mean,
               "logprobs_max_abs": cm_max, "logprobs_mean_abs": cm_mean, "train_max_abs_per_seq": per_seq,
               "ref_mean_logprob": float(torch.cat(ref).mean()), "leak_control_mean": leak,
               "tol_mean": tol_mean, "tol_max": tol_max, "pass": ok,
               "leak_visible": leak > tol_mean, "seconds": round(time.perf_counter() - t0, 2)}
        print(json.dumps(res), flush=True)
        print(f"{'PASS' if ok else 'FAIL'} {mode} ({res['numerics']}, pack={res['pack']}, "
              f"{res['attn_implementation']}): train max {tr_max:.3g} mean {tr_mean:.3g}; logprobs max {cm_max:.3g} "
              f"mean {cm_mean:.3g}; tolerance max {tol_max:g} mean {tol_mean:g}; leak control {leak:.3g}",
              flush=True)
        results.append(res)
        del backend, trainer
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    ok = all(r["pass"] for r in results)
    print(json.dumps({"bench": "hf_logprob_check", "summary": True, "pass": ok,
                      "modes": [r["mode"] for r in results], "skipped_modes": skipped,
                      "shape": a.shape, "device": device, "model_dir": model_dir,
                      "make_checkpoint_s": round(make_s, 1), "reference_s": round(ref_s, 1),
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "seconds": round(time.perf_counter() - t_start, 1)}), flush=True)
    print("PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
