"""The step time of one synchronous RL step for N inference servers and M learner GPUs (issue 36; docs/scaling.md).

    python3 bench/scaling_model.py                         # the tables: 0.6B, 8B, 32B on H100 SXM
    python3 bench/scaling_model.py --assumptions           # every assumption, its number and its source
    python3 bench/scaling_model.py --json                  # one JSON line per (model, N, M)
    python3 bench/scaling_model.py --calibrate OUT         # check the formulas against bench/scaling.ts's CPU figures

A calculation, not a measurement: no timing, no randomness, the standard library only; the same arguments give
the same output. A step is  sampling(N) + learner(M) + push(N, M)  (synchronous: each waits for the one before):

  sampling  each server gets ceil(R / N) of the step's R = groups x group rollouts. Prefill: a group's prompt
            once (prefix caching), 2 N_c FLOPs a token + attention, at peak x prefill_mfu. Decode: batches of
            b = min(rollouts per server, max_batch, what the KV cache holds) rows, each decode step
            max(bytes / (HBM x bw_eff), FLOPs / (peak x decode_mfu)) with bytes = the weights (P x 2) + the
            KV cache the rows read, FLOPs = 2 N_c b + attention; completion_tokens steps per wave.
  learner   R x (prompt + completion) tokens x (6 N_c + 12 L d_attn S) FLOPs (PaLM's count, as
            bench/learner_gpu.py; + a forward per extra pass: reference, old logprobs, activation
            recomputation) / (M x peak x mfu); plus FSDP's communication: per micro-batch a parameter
            all-gather for the forward and one for the backward (bf16) and a gradient reduce-scatter (float32),
            (2 + 2 + 4) x P bytes x (M - 1) / M per GPU, over NVLink within a node and InfiniBand across nodes,
            not overlapped with compute unless --overlap says so.
  push      full weights: gathered to one rank, P x 2 bytes written to shared storage, read by every server
            (the storage's aggregate bandwidth shared), copied host -> GPU; or a LoRA adapter (its own size);
            or --push nccl: one broadcast over the interconnect.

N_c: the parameters a token's matmuls use (all but the input embedding lookup; the LM head counted once).
"""
import argparse
import json
import math
import sys
from typing import Any, Dict, List, Optional, Tuple

GB = 1e9

# ---------------------------------------------------------------------------------------------------------
# Assumptions: each with its number, its unit and where it comes from (kind of source). Flags override them.

ASSUMPTIONS: Dict[str, Tuple[float, str, str]] = {
    # name: (value, unit, source)
    "peak_tflops": (989.0, "TFLOP/s", "H100 SXM bf16 dense tensor-core peak (NVIDIA datasheet; 1979 is with 2:4 sparsity)"),
    "hbm_tbps": (3.35, "TB/s", "H100 SXM HBM3 bandwidth (NVIDIA datasheet)"),
    "gpu_mem_gb": (80.0, "GB", "H100 SXM memory (NVIDIA datasheet; informational: usable_mem_gb is what the model uses)"),
    "usable_mem_gb": (76.0, "GB", "assumed: 80 GB less CUDA context, NCCL buffers, allocator fragmentation"),
    "nvlink_gbps": (450.0, "GB/s per GPU per direction", "H100 SXM NVLink 4: 900 GB/s bidirectional (NVIDIA datasheet)"),
    "ib_gbps": (50.0, "GB/s per GPU per direction", "400 Gb/s InfiniBand NDR per GPU, one NIC per GPU (DGX H100 layout)"),
    "link_eff": (0.8, "fraction", "assumed: NCCL all-gather / reduce-scatter reach ~80% of the link's bandwidth"),
    "gpus_per_node": (8, "GPUs", "an HGX/DGX H100 node"),
    "pcie_gbps": (25.0, "GB/s", "assumed host -> GPU copy: about 40% of PCIe Gen5 x16's 64 GB/s (pageable memory)"),
    "mfu": (0.40, "fraction", "assumed learner MFU: the middle of the 35-45% usually planned for FSDP training on H100 (not measured here)"),
    "prefill_mfu": (0.50, "fraction", "assumed: prefill is large matmuls, above training's MFU"),
    "decode_mfu": (0.50, "fraction", "assumed: the compute roof of a large decode batch"),
    "bw_eff": (0.70, "fraction", "assumed: decode reaches ~70% of HBM bandwidth (inference engines at batch > 1)"),
    "storage_gbps": (2.0, "GB/s per client", "assumed shared file system (NFS-class) read or write by one host"),
    "storage_aggregate_gbps": (10.0, "GB/s", "assumed: what the shared file system serves to all clients at once"),
    "max_batch": (256, "rows", "a server's row limit (vLLM's default max_num_seqs is 256)"),
    "micro_tokens": (16384, "tokens", "tokens per learner micro-batch (the learner's MCP_GYM_HF_MICRO_TOKENS default)"),
    "workspace_gb": (3.0, "GB", "assumed learner workspace: logits chunk, allocator slack, temporaries"),
    "reduce_bytes": (4, "bytes", "gradient reduce-scatter in float32 (the learner's FSDP2 MixedPrecisionPolicy, docs/distributed.md)"),
}

# The three models: the published config.json of Qwen3-0.6B, Qwen3-8B, Qwen3-32B (kind: model cards' configs).
ARCHS: Dict[str, Dict[str, Any]] = {
    "0.6b": {"name": "Qwen3-0.6B", "L": 28, "d": 1024, "heads": 16, "kv_heads": 8, "head_dim": 128, "ffn": 3072, "vocab": 151936, "tied": True},
    "8b": {"name": "Qwen3-8B", "L": 36, "d": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 12288, "vocab": 151936, "tied": False},
    "32b": {"name": "Qwen3-32B", "L": 64, "d": 5120, "heads": 64, "kv_heads": 8, "head_dim": 128, "ffn": 25600, "vocab": 151936, "tied": False},
}


def layer_linears(a: Dict[str, Any]) -> List[Tuple[int, int]]:
    """(in, out) of every linear layer of one decoder layer: q, k, v, o, gate, up, down."""
    d, qd, kvd, f = a["d"], a["heads"] * a["head_dim"], a["kv_heads"] * a["head_dim"], a["ffn"]
    return [(d, qd), (d, kvd), (d, kvd), (qd, d), (d, f), (d, f), (f, d)]


def counts(a: Dict[str, Any]) -> Dict[str, float]:
    """Parameter counts: total P, the per-token matmul parameters N_c, one layer's, the KV bytes a token holds."""
    per_layer = sum(i * o for i, o in layer_linears(a)) + 2 * a["d"] + 2 * a["head_dim"]  # + 2 RMSNorms, q/k norms
    emb = a["vocab"] * a["d"]
    total = a["L"] * per_layer + emb * (1 if a["tied"] else 2) + a["d"]
    n_c = a["L"] * per_layer + emb  # the LM head's matmul once; the input embedding is a lookup
    return {
        "P": total,
        "N_c": n_c,
        "layer": per_layer,
        "kv_bytes_per_token": 2 * a["L"] * a["kv_heads"] * a["head_dim"] * 2,  # K and V, bf16
        "d_attn": a["heads"] * a["head_dim"],
        "lora_params_per_rank": a["L"] * sum(i + o for i, o in layer_linears(a)),  # all-linear: r x (in + out) each
    }


# ---------------------------------------------------------------------------------------------------------
# The three phases.

def sampling(a: Dict[str, Any], c: Dict[str, float], x: argparse.Namespace, n: int) -> Dict[str, Any]:
    """One server's share of the step's rollouts: prefill, then decode in waves of b rows."""
    rollouts = x.groups * x.group_size
    per = math.ceil(rollouts / n)
    groups_per = math.ceil(x.groups / n)
    peak = x.peak_tflops * 1e12 * x.server_gpus
    hbm = x.hbm_tbps * 1e12 * x.server_gpus * x.bw_eff
    weights = c["P"] * 2
    kv_budget = x.usable_mem_gb * GB * x.server_gpus - weights
    seq = x.prompt_tokens + x.completion_tokens
    fits_kv = int(kv_budget // (c["kv_bytes_per_token"] * seq)) if kv_budget > 0 else 0
    if fits_kv < 1:
        return {"fits": False, "why": f"weights {weights / GB:.0f} GB leave no room for one sequence's KV cache"}
    b = min(per, int(x.max_batch), fits_kv)
    waves = math.ceil(per / b)
    # Prefill: a group's prompt once (prefix caching), else every rollout's.
    prefill_seqs = groups_per if x.prefix_cache else per
    # PaLM's count as for the learner (attention over the whole prompt, no causal discount).
    prefill_flops = prefill_seqs * x.prompt_tokens * (2 * c["N_c"] + 4 * a["L"] * c["d_attn"] * x.prompt_tokens)
    t_prefill = prefill_flops / (peak * x.prefill_mfu)
    # Decode: the rows' mean context over the completion.
    ctx = x.prompt_tokens + x.completion_tokens / 2
    step_bytes = weights + b * ctx * c["kv_bytes_per_token"]
    step_flops = b * (2 * c["N_c"] + 4 * a["L"] * c["d_attn"] * ctx)
    t_mem, t_comp = step_bytes / hbm, step_flops / (peak * x.decode_mfu)
    t_step = max(t_mem, t_comp)
    t_decode = waves * x.completion_tokens * t_step
    return {
        "fits": True, "rollouts_per_server": per, "batch": b, "kv_rows": fits_kv, "waves": waves,
        "decode_step_ms": t_step * 1e3, "decode_bound": "memory" if t_mem >= t_comp else "compute",
        "decode_tok_s_per_server": b / t_step, "prefill_s": t_prefill, "decode_s": t_decode,
        "seconds": t_prefill + t_decode + x.tool_seconds,
    }


def learner_memory(a: Dict[str, Any], c: Dict[str, float], x: argparse.Namespace, m: int, recompute: bool) -> float:
    """GB per learner GPU under FSDP (full shard), mixed precision."""
    P = c["P"]
    if x.lora_rank:
        lora = x.lora_rank * c["lora_params_per_rank"]
        states = 2 * P / m + 16 * lora / m  # bf16 base (sharded) + the adapter's fp32 weights, grads, Adam
    else:
        states = 16 * P / m  # fp32 weights 4 + grads 4 + Adam m, v 8 bytes a parameter, sharded
    if x.beta > 0 and not x.lora_rank:
        states += 2 * P / m  # a bf16 reference, sharded (LoRA's reference is the adapter swapped)
    gathered = 2 * 2 * c["layer"]  # bf16 all-gathered layers: the current one and the prefetched next
    t = x.micro_tokens
    per_layer_act = t * (6 * a["d"] + 2 * a["kv_heads"] * a["head_dim"] + 4 * a["ffn"]) * 2  # bf16, flash attention
    act = t * a["d"] * 2 * a["L"] + per_layer_act if recompute else per_layer_act * a["L"]
    return (states + gathered + act) / GB + x.workspace_gb


def learner(a: Dict[str, Any], c: Dict[str, float], x: argparse.Namespace, m: int) -> Dict[str, Any]:
    seq = x.prompt_tokens + x.completion_tokens
    tokens = x.groups * x.group_size * seq
    recompute = x.checkpointing == "on"
    mem = learner_memory(a, c, x, m, recompute)
    if x.checkpointing == "auto" and mem > x.usable_mem_gb:
        recompute = True
        mem = learner_memory(a, c, x, m, True)
    fwd = 2 * c["N_c"] + 4 * a["L"] * c["d_attn"] * seq  # one forward pass, per token
    # Full fine-tuning: forward + backward = 3 forwards (6 N_c + 12 L d S). LoRA: no weight gradients for the
    # frozen base (forward + activation gradients: 4 N_c), attention's backward whole (it has no weights:
    # 8 L d S); the adapter's own FLOPs (r << d) left out.
    per_token = 3 * fwd if not x.lora_rank else 4 * c["N_c"] + 12 * a["L"] * c["d_attn"] * seq
    extra = (1 if x.beta > 0 else 0) + (1 if x.old_logprob_pass else 0) + (1 if recompute else 0)
    per_token += extra * fwd
    flops = tokens * per_token
    compute = flops / (m * x.peak_tflops * 1e12 * x.mfu)
    # FSDP2 (reshard after forward, gradients reduced every micro-batch): per micro-batch a bf16 all-gather of
    # the parameters for the forward, another for the backward, and a reduce-scatter of the gradients.
    micro = math.ceil(tokens / (m * x.micro_tokens))
    intra = m <= x.gpus_per_node
    bw = (x.nvlink_gbps if intra else x.ib_gbps) * GB * x.link_eff
    if x.lora_rank:
        volume = micro * (2 * c["P"] * 2 + x.lora_rank * c["lora_params_per_rank"] * x.reduce_bytes)  # base gathers; adapter grads
    else:
        volume = micro * c["P"] * (2 * 2 + x.reduce_bytes)
    comm = 0.0 if m == 1 else volume * (m - 1) / m / bw
    seconds = compute + comm - x.overlap * min(compute, comm)
    return {
        "fits": mem <= x.usable_mem_gb, "mem_gb": mem, "recompute": recompute, "tokens": tokens,
        "tflop": flops / 1e12, "compute_s": compute, "comm_s": comm, "micro_batches_per_gpu": micro,
        "link": "-" if m == 1 else ("nvlink" if intra else "infiniband"), "seconds": seconds,
    }


def push(a: Dict[str, Any], c: Dict[str, float], x: argparse.Namespace, n: int, m: int) -> Dict[str, Any]:
    if x.lora_rank:
        nbytes = x.lora_rank * c["lora_params_per_rank"] * 2  # bf16 adapter
        what = "lora"
    else:
        nbytes = c["P"] * 2  # bf16 weights
        what = "full"
    intra = m <= x.gpus_per_node
    link = (x.nvlink_gbps if intra else x.ib_gbps) * GB * x.link_eff
    gather = 0.0 if m == 1 or x.lora_rank else nbytes * (m - 1) / m / link
    if x.push == "nccl":
        # One pipelined broadcast from the learner's rank 0 to the N servers over InfiniBand (the servers are other nodes).
        send = nbytes / (x.ib_gbps * GB * x.link_eff)
        return {"what": what, "bytes": nbytes, "gather_s": gather, "write_s": 0.0, "read_s": send, "h2d_s": 0.0,
                "seconds": gather + send}
    write = nbytes / (x.storage_gbps * GB)
    read = nbytes / (min(x.storage_gbps, x.storage_aggregate_gbps / n) * GB)
    h2d = nbytes / (x.pcie_gbps * GB)
    return {"what": what, "bytes": nbytes, "gather_s": gather, "write_s": write, "read_s": read, "h2d_s": h2d,
            "seconds": gather + write + read + h2d}


def step(a, c, x, n, m) -> Dict[str, Any]:
    s, l, p = sampling(a, c, x, n), learner(a, c, x, m), push(a, c, x, n, m)
    if not s["fits"] or not l["fits"]:
        return {"fits": False, "sampling": s, "learner": l, "push": p}
    parts = {"sampling": s["seconds"], "learner": l["seconds"], "push": p["seconds"]}
    return {"fits": True, "seconds": sum(parts.values()), "bottleneck": max(parts, key=parts.get),
            "sampling": s, "learner": l, "push": p}


# ---------------------------------------------------------------------------------------------------------
# Output.

def fmt_s(v: float) -> str:
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def tables(x: argparse.Namespace) -> str:
    out: List[str] = []
    seq = x.prompt_tokens + x.completion_tokens
    rollouts = x.groups * x.group_size
    out.append(f"A step: {x.groups} groups x {x.group_size} rollouts = {rollouts} rollouts of {x.prompt_tokens} prompt + "
               f"{x.completion_tokens} completion tokens ({rollouts * seq:,} tokens); "
               f"{'LoRA r' + str(x.lora_rank) if x.lora_rank else 'full fine-tuning'}, beta {x.beta}, "
               f"push by {x.push}, FSDP communication overlap {x.overlap:.0%}; H100 SXM (--assumptions).")
    for key in x.models:
        a = ARCHS[key]
        c = counts(a)
        out.append("")
        out.append(f"## {a['name']}: P = {c['P'] / 1e9:.2f}B parameters (N_c = {c['N_c'] / 1e9:.2f}B a token), "
                   f"bf16 weights {c['P'] * 2 / GB:.1f} GB, KV cache {c['kv_bytes_per_token'] / 1e3:.0f} KB a token")
        out.append("")
        out.append("| servers N | rollouts / server | batch b | decode step ms (bound) | decode tok/s / server | prefill s | decode s | sampling s | push s |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for n in x.servers:
            s = sampling(a, c, x, n)
            p = push(a, c, x, n, 1)
            if not s["fits"]:
                out.append(f"| {n} | does not fit: {s['why']} | | | | | | | |")
                continue
            out.append(f"| {n} | {s['rollouts_per_server']} | {s['batch']} (KV holds {s['kv_rows']}) | {s['decode_step_ms']:.1f} ({s['decode_bound']}) | "
                       f"{s['decode_tok_s_per_server']:,.0f} | {fmt_s(s['prefill_s'])} | {fmt_s(s['decode_s'])} | {fmt_s(s['seconds'])} | {fmt_s(p['seconds'])} |")
        out.append("")
        out.append("| learner GPUs M | memory / GPU GB | fits 76 GB | recompute | compute s | FSDP comm s (link) | learner s |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        for m in x.learner_gpus:
            l = learner(a, c, x, m)
            out.append(f"| {m} | {l['mem_gb']:.1f} | {'yes' if l['fits'] else '**no**'} | {'yes' if l['recompute'] else 'no'} | "
                       f"{fmt_s(l['compute_s'])} | {fmt_s(l['comm_s'])} ({l['link']}, {l['micro_batches_per_gpu']} micro-batches) | {fmt_s(l['seconds'])} |")
        out.append("")
        out.append("Step seconds (bottleneck: S sampling, L learner, P push; 'no fit': the learner's memory per GPU), and "
                   "which doubling saves more from there (>S: servers, >L: learner GPUs, = within 5%):")
        out.append("")
        out.append("| M \\ N | " + " | ".join(str(n) for n in x.servers) + " |")
        out.append("| --- | " + " | ".join("---" for _ in x.servers) + " |")
        for m in x.learner_gpus:
            cells = []
            for n in x.servers:
                r = step(a, c, x, n, m)
                if not r["fits"]:
                    why = (f"{r['learner']['mem_gb']:.0f} GB" if not r["learner"]["fits"] else "server")
                    cells.append(f"no fit ({why})")
                    continue
                rs = step(a, c, x, 2 * n, m)
                rl = step(a, c, x, n, 2 * m)
                gs = r["seconds"] - rs["seconds"] if rs["fits"] else 0.0
                gl = r["seconds"] - rl["seconds"] if rl["fits"] else 0.0
                hint = "=" if abs(gs - gl) <= 0.05 * r["seconds"] else (">S" if gs > gl else ">L")
                cells.append(f"{fmt_s(r['seconds'])} {r['bottleneck'][0].upper()} {hint}")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
        out.append(f"The fastest step on at most G GPUs (N servers x {x.server_gpus} + M learner GPUs, over the grid above):")
        out.append("")
        out.append("| G | " + " | ".join(str(g) for g in x.budgets) + " |")
        out.append("| --- | " + " | ".join("---" for _ in x.budgets) + " |")
        cells = []
        for g in x.budgets:
            best = None
            for m in x.learner_gpus:
                for n in x.servers:
                    if n * x.server_gpus + m > g:
                        continue
                    r = step(a, c, x, n, m)
                    if r["fits"] and (best is None or r["seconds"] < best[0]):
                        best = (r["seconds"], n, m, r["bottleneck"])
            cells.append("none fits" if best is None else f"{fmt_s(best[0])} s: N {best[1]}, M {best[2]} ({best[3][0].upper()})")
        out.append("| step | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def assumptions_text(x: argparse.Namespace) -> str:
    rows = ["| assumption | value | unit | source |", "| --- | --- | --- | --- |"]
    for k, (_, unit, src) in ASSUMPTIONS.items():
        rows.append(f"| {k} (--{k.replace('_', '-')}) | {getattr(x, k)} | {unit} | {src} |")
    rows.append("")
    rows.append("| model | layers | d | heads / kv heads x head_dim | ffn | vocab | tied | P | N_c | KV bytes / token | LoRA params / rank |")
    rows.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, a in ARCHS.items():
        c = counts(a)
        rows.append(f"| {a['name']} | {a['L']} | {a['d']} | {a['heads']} / {a['kv_heads']} x {a['head_dim']} | {a['ffn']} | {a['vocab']} | "
                    f"{a['tied']} | {c['P'] / 1e9:.3f}B | {c['N_c'] / 1e9:.3f}B | {c['kv_bytes_per_token']:,} | {c['lora_params_per_rank']:,} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Calibration against bench/scaling.ts's JSON lines (measured on a CPU).

def calibrate(path: str) -> str:
    rows: List[Dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError as e:
        raise SystemExit(f"--calibrate: cannot read {path}: {e.strerror}")
    ceil = [r for r in rows if r.get("kind") == "cpu_ceiling"]
    models = [r for r in rows if r.get("kind") == "model"]
    if not ceil or not models:
        raise SystemExit(f"--calibrate: {path} has no cpu_ceiling or model lines of bench/scaling.ts "
                         f"(run: npx tsx bench/scaling.ts | tee {path})")

    def best(key: str, threads: int) -> Optional[float]:
        """The fastest single run at that thread count: the ceiling with the least of the machine's other load in it."""
        v = [float(x) for r in ceil if r.get("threads") == threads for x in r.get(key + "_runs", [r.get(key)])]
        return max(v) if v else None

    p1, bw1 = best("matmul_gflops", 1), best("copy_gbps", 1)
    out = ["Calibration on this CPU (float32 everywhere: 4 bytes a parameter). Ceilings: the fastest single run of "
           f"bench/scaling_cpu.py in the file: 1 thread {p1} GFLOP/s, {bw1} GB/s"
           + "".join(f"; {t} threads {best('matmul_gflops', t)} GFLOP/s" for t in sorted({r.get('threads') for r in ceil}) if t != 1) + ".",
           "Per CPU-second figures divide by the CPU time the process got (all its threads), so the machine's other load "
           "changes them less than the wall-clock ones; they are compared with the 1-thread ceiling.", ""]
    out.append("| model | learner tok/s (wall): median, best step | FLOPs / token (6 N_c + 12 L d S) | MFU (wall, vs threads x the 1-thread ceiling): median, best | learner tok / CPU-s | MFU per CPU-s (vs 1 thread) |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for r in models:
        L = int(r["n_layers"])
        d_attn = int(r["n_heads"]) * float(r["head_dim"])
        lt = r.get("learner_threads")
        if not (r.get("learner_tokens_per_s") and r.get("compute_params")):
            out.append(f"| {r['model']} | (no learner) | | | | |")
            continue
        n_c = float(r["compute_params"])
        S = int(r["learner_seq_len"])
        fpt = 6 * n_c + 12 * L * d_attn * S
        pk = p1 * lt if p1 and lt else None  # the cores the learner was given, at the 1-thread ceiling each
        wall = float(r["learner_tokens_per_s"]) * fpt / 1e9
        best_tok = float(r.get("learner_tokens_per_s_best") or r["learner_tokens_per_s"])
        wall_best = best_tok * fpt / 1e9
        cpu = r.get("learner_tokens_per_cpu_s")
        cells = [r["model"], f"{r['learner_tokens_per_s']:.1f}, {best_tok:.1f}", f"{fpt / 1e6:.1f} M",
                 f"{wall / pk:.1%}, {wall_best / pk:.1%} ({wall:.1f}, {wall_best:.1f} of {pk:.0f} GFLOP/s)" if pk else "?",
                 f"{cpu:.1f}" if cpu else "?",
                 f"{cpu * fpt / 1e9 / p1:.1%} ({cpu * fpt / 1e9:.1f} of {p1:.0f})" if cpu and p1 else "?"]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("Decode on one server (--server-threads 1), against the roofline of the same formula as the GPU model, "
               "max(bytes / bandwidth, FLOPs / peak) a step with every request in flight as one batch b (an upper "
               "bound: the measured time also holds prefill, HTTP, JSON, sampling in JavaScript):")
    out.append("")
    out.append("| model | b | context | roofline tok/s (bound) | measured tok/s, 1 server (wall) | wall / roofline | tok / server CPU-s (1 server) | CPU-s / roofline |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in models:
        n_c = float(r.get("compute_params") or 0)
        if not (n_c and p1 and bw1):
            continue
        L = int(r["n_layers"])
        d_attn = int(r["n_heads"]) * float(r["head_dim"])
        kv_tok = 2 * L * int(r["n_kv_heads"]) * float(r["head_dim"]) * 4
        b = max(1, int(r["sampling_clients"]))
        ctx = float(r.get("prompt_tokens_per_request") or 0) + float(r["completion_tokens_per_request"]) / 2
        step_bytes = 4 * n_c + b * ctx * kv_tok
        step_flops = b * (2 * n_c + 4 * L * d_attn * ctx)
        t_mem, t_comp = step_bytes / (bw1 * GB), step_flops / (p1 * 1e9)
        roof = b / max(t_mem, t_comp)
        meas = float(r["sampling_tok_s_1_server"])
        per_cpu = r.get("sampling_tok_per_server_cpu_s_1")
        out.append(f"| {r['model']} | {b} | {ctx:.0f} | {roof:,.0f} ({'memory' if t_mem >= t_comp else 'compute'}) | {meas:,.1f} | {meas / roof:.1%} | "
                   + (f"{per_cpu:,.1f} | {per_cpu / roof:.1%} |" if per_cpu else "? | ? |"))
    out.append("")
    out.append("Push on this CPU (the learner's export writes the weight files, float32; then POST /v1/reload answered):")
    out.append("")
    out.append("| model | bytes written | export s | effective write GB/s | reload s (per server) | served bytes / reload s |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for r in models:
        if not r.get("export_wall_seconds"):
            continue
        nbytes = float(r["push_weight_bytes"])
        served = 4 * float(r.get("params") or 0)
        out.append(f"| {r['model']} | {nbytes / 1e6:.1f} MB | {r['export_wall_seconds']:.2f} | {nbytes / GB / r['export_wall_seconds']:.2f} | "
                   f"{r['reload_seconds']:.2f} | {served / GB / r['reload_seconds']:.2f} GB/s |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------

def parse_list(text: str, flag: str, allowed: Optional[List[str]] = None) -> List[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SystemExit(f"{flag}: empty list")
    if allowed is not None:
        bad = [t for t in items if t not in allowed]
        if bad:
            raise SystemExit(f"{flag}: unknown {', '.join(bad)} (known: {', '.join(allowed)})")
        return items
    try:
        vals = [int(t) for t in items]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated positive integers, got {text!r}")
    if any(v < 1 for v in vals):
        raise SystemExit(f"{flag}: every entry must be at least 1, got {text!r}")
    return vals


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="0.6b,8b,32b", help="comma-separated: " + ", ".join(ARCHS) + " (default all)")
    ap.add_argument("--servers", default="1,2,4,8", help="N: inference servers, one H100 each unless --server-gpus (default 1,2,4,8)")
    ap.add_argument("--learner-gpus", default="1,2,4,8,16", help="M: learner H100s, FSDP (default 1,2,4,8,16)")
    ap.add_argument("--budgets", default="2,4,8,16,24", help="GPU totals for the best-split line (default 2,4,8,16,24)")
    ap.add_argument("--groups", type=int, default=64, help="groups (tasks) per step (default 64)")
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per group (default 8)")
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="prompt tokens per rollout, shared by a group (default 1024)")
    ap.add_argument("--completion-tokens", type=int, default=1024, help="sampled tokens per rollout (default 1024)")
    ap.add_argument("--server-gpus", type=int, default=1, help="GPUs per server (tensor parallel; bandwidth, FLOPs and memory scale, its communication is left out) (default 1)")
    ap.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false", help="prefill every rollout's prompt (default: a group's once)")
    ap.add_argument("--tool-seconds", type=float, default=0.0, help="seconds a rollout waits on tools, added to sampling (default 0)")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA rank on all linear layers (default 0: full fine-tuning)")
    ap.add_argument("--beta", type=float, default=0.0, help="KL weight: > 0 adds the reference's forward (and its memory) (default 0)")
    ap.add_argument("--old-logprob-pass", action="store_true", help="one more forward for the learner's old logprobs (several optimizer steps a batch)")
    ap.add_argument("--checkpointing", choices=["auto", "on", "off"], default="auto", help="activation recomputation: auto (when it does not fit otherwise)")
    ap.add_argument("--overlap", type=float, default=0.0, help="fraction of FSDP communication hidden behind compute, 0-1 (default 0: none)")
    ap.add_argument("--push", choices=["storage", "nccl"], default="storage", help="how weights reach the servers (default storage: a directory each server reloads)")
    for k, (v, unit, _) in ASSUMPTIONS.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v, help=f"{unit} (default {v})")
    ap.add_argument("--assumptions", action="store_true", help="print the assumptions and the models' shapes, then exit")
    ap.add_argument("--json", action="store_true", help="one JSON line per (model, N, M) instead of the tables")
    ap.add_argument("--calibrate", metavar="FILE", help="compare with bench/scaling.ts's JSON lines in FILE (CPU), then exit")
    x = ap.parse_args(argv)
    x.models = parse_list(x.models, "--models", list(ARCHS))
    x.servers = parse_list(x.servers, "--servers")
    x.learner_gpus = parse_list(x.learner_gpus, "--learner-gpus")
    x.budgets = parse_list(x.budgets, "--budgets")
    for k in ("groups", "group_size", "prompt_tokens", "completion_tokens", "server_gpus", "max_batch", "micro_tokens", "gpus_per_node", "reduce_bytes"):
        if getattr(x, k) < 1:
            raise SystemExit(f"--{k.replace('_', '-')}: must be at least 1, got {getattr(x, k)}")
    if not 0 <= x.overlap <= 1:
        raise SystemExit(f"--overlap: must be in [0, 1], got {x.overlap}")
    if x.lora_rank < 0 or x.beta < 0 or x.tool_seconds < 0:
        raise SystemExit("--lora-rank, --beta and --tool-seconds must be >= 0")
    for k in ("mfu", "prefill_mfu", "decode_mfu", "bw_eff", "link_eff"):
        if not 0 < getattr(x, k) <= 1:
            raise SystemExit(f"--{k.replace('_', '-')}: a fraction in (0, 1], got {getattr(x, k)}")
    if x.calibrate:
        sys.stdout.write(calibrate(x.calibrate))
        return 0
    if x.assumptions:
        sys.stdout.write(assumptions_text(x))
        return 0
    if x.json:
        for key in x.models:
            a = ARCHS[key]
            c = counts(a)
            for m in x.learner_gpus:
                for n in x.servers:
                    r = step(a, c, x, n, m)
                    print(json.dumps({"model": a["name"], "servers": n, "learner_gpus": m, **r}, sort_keys=True))
        return 0
    sys.stdout.write(tables(x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
