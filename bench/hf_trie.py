"""The Hugging Face learner on a real RL step (issue 49, point 5): one GRPO `train` call on sequences an RL step of the
real-model job sampled, with each micro-batch's rests laid out as a prefix tree (policy.HFAdapter.prefix_inputs, the
default: every run of tokens that several sequences share computed once, whole groups packed together by the tree's
size, so what every prompt opens with runs once per micro-batch) beside the same call with the rests side by
side (MCP_GYM_HF_TRIE=0, the layout before: each group a micro-batch of its own), on the same batch and the same weights, taking turns --reps times; prints
the seconds of each, seconds per 1k tokens as the job counts them (every token of the sequences kept, prompts
included), the tokens each layout computes, their ratio and the largest difference of the updated weights (the
gradients are the same; the updates agree to float32 rounding).

    .venv/bin/python bench/hf_trie.py MODEL_DIR TRAJECTORIES.jsonl [--groups 8] [--skip 0] [--reps 2] [--lr 2e-5]

TRAJECTORIES.jsonl: a run's trajectories (e.g. runs/<job>/rl/trajectories.jsonl); the first --groups groups after
--skip whose rewards differ (the job keeps only those: drop_zero_variance) make the batch, each sequence's tokens as
the job builds them (src/trainers/batch.ts sequenceOf: each turn's environment tokens, then its sampled tokens), its
advantage its reward minus its group's mean (GRPO without the std; the values do not change the time)."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "learner"))

import torch  # noqa: E402

from mcp_gym_learner import trie_layout  # noqa: E402
from mcp_gym_learner.batch import micro_batches_by_prompt, micro_batches_by_trie, parse_batch  # noqa: E402
from mcp_gym_learner.policy import MIN_SHARED_PREFIX, common_prefix_len  # noqa: E402
from mcp_gym_learner.service import LearnerService  # noqa: E402


def sequence(t):
    ids, mask, lps = [], [], []
    for turn in t["turns"]:
        env = turn.get("env_tokens") or []
        ids += env
        mask += [0] * len(env)
        lps += [0.0] * len(env)
        toks = turn.get("tokens") or []
        ids += toks
        mask += [1] * len(toks)
        lps += list(turn.get("logprobs") or [0.0] * len(toks))[: len(toks)]
    return ids, mask, lps


def load_batch(path, groups, skip):
    by = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                t = json.loads(line)
                by.setdefault(t["group_id"], []).append(t)
    batch = {"ids": [], "mask": [], "old_logprobs": [], "advantages": [], "group_ids": []}
    kept = 0
    for gid, ts in by.items():
        rewards = [float(t["reward"]) for t in ts]
        if len(ts) < 2 or max(rewards) == min(rewards) or any(not (t["turns"] and t["turns"][0].get("tokens")) for t in ts):
            continue
        if skip > 0:
            skip -= 1
            continue
        mean = sum(rewards) / len(rewards)
        for t, r in zip(ts, rewards):
            ids, mask, lps = sequence(t)
            batch["ids"].append(ids)
            batch["mask"].append(mask)
            batch["old_logprobs"].append(lps)
            batch["advantages"].append(r - mean)
            batch["group_ids"].append(gid)
        kept += 1
        if kept == groups:
            break
    if not kept:
        sys.exit(f"{path}: no group with sampled tokens and rewards that differ")
    return batch, kept


def computed_tokens(batch, vocab, budget=4096):
    """Tokens each layout runs through the decoder, micro-batch by micro-batch as the learner cuts them: side by
    side, each group its own micro-batch (its prompt once, then its rests); as a prefix tree, whole groups packed
    by the tree's size (batch.micro_batches_by_trie: what all prompts open with once per micro-batch)."""
    b = parse_batch(batch, vocab, 1 << 20)
    shared = common_prefix_len(b.ids)
    need = [int(b.pos[i].min()) - 1 for i in range(len(b))]

    def tokens(micros, tree):
        n = 0
        for mb in micros:
            seqs = [b.ids[i] for i in mb]
            P = min(common_prefix_len(seqs), min(need[i] for i in mb)) if len(mb) > 1 else 0
            P = P if P >= MIN_SHARED_PREFIX else 0
            if tree:
                segs, _ = trie_layout.build_trie([s.tolist() for s in seqs], P)
                n += P + sum(s.end - s.start for s in segs)
            else:
                n += P + sum(len(s) - P for s in seqs)
        return n

    everyone = list(range(len(b)))
    side = tokens(micro_batches_by_prompt(everyone, b, 64, budget, shared), False)
    tree = tokens(micro_batches_by_trie(everyone, b, 64, budget, shared), True)
    return side, tree


def arm(model, batch, lr, trie):
    os.environ["MCP_GYM_HF_TRIE"] = "1" if trie else "0"
    svc = LearnerService()
    r = svc.handle(json.dumps({"cmd": "load", "model_dir": model, "device": "cpu"}))
    assert r["ok"], r
    cfg = {"loss": "grpo", "lr": lr, "warmup_steps": 0, "beta": 0.0, "epochs": 1, "minibatch_size": 0, "micro_batch_size": 64}
    t = time.perf_counter()
    r = svc.handle(json.dumps({"cmd": "train", "batch": batch, "config": cfg}))
    dt = time.perf_counter() - t
    assert r["ok"], r
    w = torch.cat([p.detach().reshape(-1) for p in svc.backend.model.parameters()])
    return dt, w


def batch_args() -> argparse.ArgumentParser:
    """The arguments of a bench on one RL step's batch (this one, bench/hf_bf16_compute.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("trajectories")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-5)
    return ap


def main():
    a = batch_args().parse_args()
    torch.set_num_threads(int(os.environ.get("MCP_GYM_THREADS", "2")))
    batch, kept = load_batch(a.trajectories, a.groups, a.skip)
    tokens = sum(len(s) for s in batch["ids"])
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    side, tree = computed_tokens(batch, vocab)
    print(f"{kept} groups, {len(batch['ids'])} sequences, {tokens} tokens as the job counts them; the decoder runs "
          f"{side} side by side (each group's prompt once), {tree} as prefix trees ({side / tree:.2f}x fewer)")
    times = {False: [], True: []}
    weights = {}
    for r in range(a.reps):
        for trie in ((False, True) if r % 2 == 0 else (True, False)):
            dt, w = arm(a.model, batch, a.lr, trie)
            times[trie].append(dt)
            weights[trie] = w
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    diff = float((weights[False] - weights[True]).abs().max())
    print(f"{'layout':<34}{'seconds':>10}{'s per 1k tokens':>18}   runs")
    for k, name in ((False, "rests side by side (before)"), (True, "prefix tree")):
        print(f"{name:<34}{med[k]:>10.1f}{1000 * med[k] / tokens:>18.2f}   {', '.join(f'{x:.1f}' for x in times[k])}")
    print(f"ratio: {med[False] / med[True]:.2f}x; largest weight difference after the step: {diff:.2e}")
    print(json.dumps({"groups": kept, "sequences": len(batch["ids"]), "tokens": tokens, "computed_side": side,
                      "computed_tree": tree, "baseline_s": med[False], "subject_s": med[True],
                      "baseline_s_per_1k": 1000 * med[False] / tokens, "subject_s_per_1k": 1000 * med[True] / tokens,
                      "ratio": med[False] / med[True], "max_weight_diff": diff}))


if __name__ == "__main__":
    main()
