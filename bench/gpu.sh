#!/usr/bin/env bash
# The GPU checks of the learner on Hugging Face models, as one command (issue 14, point 7).
#
#   bash bench/gpu.sh               a CUDA machine (torch 2.x + transformers [+ peft] [+ vllm]); about 16 min at most:
#                                   more than one 10-minute call, so split it with --only:
#   bash bench/gpu.sh --only=learner_gpu,hf_logprob_check,hf_lora_step     (about 8.5 min)
#   bash bench/gpu.sh --only=fsdp_check,vllm_fleet                         (about 8 min)
#   bash bench/gpu.sh --cpu-smoke   the same at tiny shapes on the CPU (a smoke test of the scripts; no vLLM)
#
# In order, each under its own timeout (GPU: 260 + 110 + 130 + 2 x 150 + 300 s, + 5 s each to kill):
#   1. learner_gpu      bench/learner_gpu.py --shape qwen2-0.5b --batch 16 --seq 1024: the learner's GRPO step
#                       against the naive Hugging Face step (tokens/s, MFU, peak memory, speedup)
#   2. hf_logprob_check bench/hf_logprob_check.py --shape qwen2-0.5b: the learner's logprobs (packed rows,
#                       chunked head, bf16 autocast; then float32) against a plain float32 transformers forward
#   3. hf_lora_step     bench/hf_lora_step.py --shape qwen2-0.5b --batch 16 --seq 1024: LoRA (r 16, alpha 32,
#                       all-linear) GRPO steps; the base weights must not change
#   4. fsdp_check       python -m mcp_gym_learner.fsdp_check --device cuda --world <GPUs> [--lora]: FSDP2 with NCCL
#                       and bf16 mixed precision against one process (loss, gradients, weights, resume, export);
#                       skipped (a JSON line says so) on fewer than 2 GPUs
#   5. vllm_fleet       bench/vllm_fleet.py: two vLLM servers sharing the GPU, sampling tokens/s on one against
#                       both, and a LoRA adapter pushed to both (skipped where vllm is not importable)
# Every JSON line the scripts print goes to $OUT/gpu-results.jsonl (OUT defaults to ./.tmp/gpu), tagged with
# "step"; then one line per step ({"bench": "gpu.sh", "step", "rc", "timed_out", "wall_s"}) and a summary
# line ({"bench": "gpu.sh", "summary": true, ...}). Each step's stdout / stderr: $OUT/<step>.out / .log.
#
# No network and no Node: random-initialised models (written once into a temporary directory, removed at
# the end), HF_HUB_OFFLINE=1. The naive baseline is $NAIVE, else ../shared/bench/naive_grpo_step.py, else
# shared/bench/naive_grpo_step.py (from the repository root); without one, learner_gpu.py runs its inline
# port of the same step and the summary says so.
# Python: $PYTHON, else (with --cpu-smoke) .venv/bin/python when it exists, else python3. When peft is not
# importable and .tmp/pydeps exists (pure-Python packages copied there), it is appended to PYTHONPATH.
# Exit status: 0 when every step ran and its checks passed, 1 otherwise (the speedup's acceptance, >= 1.5x,
# is in the summary line, not in the exit status).

set -u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODE=gpu
ONLY=""
ALL_STEPS="learner_gpu,hf_logprob_check,hf_lora_step,fsdp_check,vllm_fleet"
for arg in "$@"; do
  case "$arg" in
    --cpu-smoke) MODE=cpu ;;
    --only=*) ONLY="${arg#--only=}" ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "gpu.sh: unknown argument $arg (--cpu-smoke, --only=STEP[,STEP...] of $ALL_STEPS)" >&2; exit 2 ;;
  esac
done
for s in ${ONLY//,/ }; do
  case ",$ALL_STEPS," in *",$s,"*) ;; *) echo "gpu.sh: --only: unknown step $s (of $ALL_STEPS)" >&2; exit 2 ;; esac
done
wanted() { [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

OUT="${OUT:-./.tmp/gpu}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
RES="$OUT/gpu-results.jsonl"
: > "$RES"

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ "$MODE" = cpu ] && [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"
else PY=python3
fi
export PYTHONPATH="$REPO/learner${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import peft" >/dev/null 2>&1 && [ -d "$REPO/.tmp/pydeps" ]; then
  export PYTHONPATH="$PYTHONPATH:$REPO/.tmp/pydeps"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1

NAIVE_PATH=""
for c in "${NAIVE:-}" "$REPO/../shared/bench/naive_grpo_step.py" "$REPO/shared/bench/naive_grpo_step.py"; do
  if [ -n "$c" ] && [ -f "$c" ]; then NAIVE_PATH="$(cd "$(dirname "$c")" && pwd)/$(basename "$c")"; break; fi
done
if [ -z "$NAIVE_PATH" ]; then
  echo "gpu.sh: NO naive baseline found (\$NAIVE, ../shared/bench/naive_grpo_step.py, shared/bench/naive_grpo_step.py):" \
       "learner_gpu.py compares with its inline port of the naive step instead" >&2
fi

MODEL_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mcp-gym-gpu-model.XXXXXX")/model"
cleanup() { [ -z "${KEEP_MODEL:-}" ] && rm -rf "$(dirname "$MODEL_DIR")"; }
trap cleanup EXIT

if [ "$MODE" = gpu ]; then
  SHAPE=qwen2-0.5b; BATCH=16; SEQ=1024; DEV=cuda
  T1=260; T2=110; T3=130; T4=150; T5=300
  A_EXTRA=(--budget-s 250 --compile-cost-s 120)
  B_EXTRA=(--budget-s 100)
else
  SHAPE=tiny; BATCH=2; SEQ=64; DEV=cpu
  T1=300; T2=300; T3=300; T4=300; T5=300
  A_EXTRA=()
  B_EXTRA=(--modes auto)
fi
NAIVE_ARGS=()
[ -n "$NAIVE_PATH" ] && NAIVE_ARGS=(--naive "$NAIVE_PATH")

T_ALL=$(date +%s)

# environment line
"$PY" - "$MODE" "$NAIVE_PATH" "$PY" >>"$RES" 2>/dev/null <<'EOF' || echo '{"bench": "gpu.sh", "env": true, "error": "python/torch not importable"}' >>"$RES"
import importlib, json, sys
import torch
env = {"bench": "gpu.sh", "env": True, "mode": sys.argv[1], "naive": sys.argv[2] or None, "python": sys.argv[3],
       "torch": torch.__version__, "cuda": torch.cuda.is_available(),
       "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
for m in ("transformers", "peft", "accelerate", "flash_attn"):
    try:
        env[m] = getattr(importlib.import_module(m), "__version__", "?")
    except Exception:
        env[m] = None
print(json.dumps(env))
EOF
tail -n 1 "$RES"

FAILED=0
run_step() {  # name timeout cmd...
  local name="$1" limit="$2"; shift 2
  echo "=== $name (timeout ${limit} s): $*" >&2
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.log"
  rc=$?
  local wall
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  grep -v '^{' "$OUT/$name.out" >&2 || true
  if [ "$rc" -ne 0 ]; then
    FAILED=1
    echo "--- $name: exit status $rc$( { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo ' (TIMED OUT)'); the end of $OUT/$name.log:" >&2
    tail -n 15 "$OUT/$name.log" >&2
  fi
  "$PY" - "$name" "$OUT/$name.out" "$rc" "$wall" >>"$RES" <<'EOF'
import json, sys
name, path, rc, wall = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with open(path, "r", encoding="utf-8", errors="replace") as f:
    for line in f:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        d.setdefault("bench", name)
        d["step"] = name
        print(json.dumps(d))
print(json.dumps({"bench": "gpu.sh", "step": name, "rc": rc, "timed_out": rc in (124, 137), "wall_s": wall}))
EOF
  echo "=== $name: rc $rc, ${wall} s" >&2
}

wanted learner_gpu && run_step learner_gpu "$T1" "$PY" bench/learner_gpu.py --shape "$SHAPE" --batch "$BATCH" \
  --seq "$SEQ" --device "$DEV" ${NAIVE_ARGS[@]+"${NAIVE_ARGS[@]}"} ${A_EXTRA[@]+"${A_EXTRA[@]}"}
wanted hf_logprob_check && run_step hf_logprob_check "$T2" "$PY" bench/hf_logprob_check.py --shape "$SHAPE" \
  --device "$DEV" --model-dir "$MODEL_DIR" ${B_EXTRA[@]+"${B_EXTRA[@]}"}
wanted hf_lora_step && run_step hf_lora_step "$T3" "$PY" bench/hf_lora_step.py --shape "$SHAPE" --batch "$BATCH" \
  --seq "$SEQ" --device "$DEV" --model-dir "$MODEL_DIR"

# 4. FSDP2 (issue 36): mcp_gym_learner.fsdp_check on every GPU (NCCL, bf16 mixed precision) against one process,
#    full fine-tuning then LoRA; it needs 2 GPUs or more (with --cpu-smoke: 2 gloo ranks on the CPU).
if wanted fsdp_check; then
  NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  if [ "$MODE" = cpu ]; then
    run_step fsdp_check "$T4" "$PY" -m mcp_gym_learner.fsdp_check --world 2
    run_step fsdp_check_lora "$T4" "$PY" -m mcp_gym_learner.fsdp_check --world 2 --lora
  elif [ "$NGPU" -ge 2 ]; then
    run_step fsdp_check "$T4" "$PY" -m mcp_gym_learner.fsdp_check --device cuda --world "$NGPU"
    run_step fsdp_check_lora "$T4" "$PY" -m mcp_gym_learner.fsdp_check --device cuda --world "$NGPU" --lora
  else
    echo "{\"bench\": \"gpu.sh\", \"step\": \"fsdp_check\", \"skipped\": \"FSDP2 on GPUs needs 2 or more; this machine has $NGPU (npm test runs the 2-rank CPU check)\"}" >>"$RES"
    echo "=== fsdp_check: skipped, $NGPU GPU(s)" >&2
  fi
fi
# 5. Two vLLM servers on the GPU (issue 36): sampling tokens/s on one server against both, and a LoRA push to both
#    (bench/vllm_fleet.py; skipped where vllm is not importable, and with --cpu-smoke).
if wanted vllm_fleet && [ "$MODE" = gpu ]; then
  if [ ! -f "$MODEL_DIR/config.json" ]; then
    "$PY" -c "import sys; sys.path.insert(0, 'bench'); from hf_logprob_check import ensure_checkpoint; ensure_checkpoint(sys.argv[1], sys.argv[2], 'cuda')" "$MODEL_DIR" "$SHAPE" >&2
  fi
  run_step vllm_fleet "$T5" "$PY" bench/vllm_fleet.py --model-dir "$MODEL_DIR" --servers 2 --timeout-s $((T5 - 70))
fi

TOTAL=$(( $(date +%s) - T_ALL ))
"$PY" - "$RES" "$MODE" "$TOTAL" "$NAIVE_PATH" >>"$RES.summary" <<'EOF'
import json, sys
path, mode, total, naive = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
steps = {r["step"]: r for r in rows if r.get("bench") == "gpu.sh" and "rc" in r}
cmp_ = [r for r in rows if r.get("step") == "learner_gpu" and "speedup" in r]
last = cmp_[-1] if cmp_ else {}
lp = [r for r in rows if r.get("step") == "hf_logprob_check" and r.get("summary")]
lpm = [r for r in rows if r.get("step") == "hf_logprob_check" and "mode" in r]
lora = [r for r in rows if r.get("step") == "hf_lora_step" and "step_s" in r]
sp = last.get("speedup")
s = {"bench": "gpu.sh", "summary": True, "mode": mode, "total_s": total,
     "naive": naive or None, "naive_source": last.get("naive_source"),
     "speedup": sp, "speedup_eager": last.get("speedup_eager"), "compiled": last.get("compiled"),
     "tokens_per_s": last.get("tokens_per_s"), "naive_tokens_per_s": last.get("naive_tokens_per_s"),
     "mfu": last.get("mfu"), "naive_mfu": last.get("naive_mfu"), "peak_mem_gib": last.get("peak_mem_gib"),
     "naive_peak_mem_gib": last.get("naive_peak_mem_gib"), "loss_rel_diff": last.get("loss_rel_diff"),
     "accept_1_5x": (sp >= 1.5) if sp is not None else None, "goal_2x": (sp >= 2.0) if sp is not None else None,
     "logprob_pass": lp[-1]["pass"] if lp else None,
     "logprob": {r["mode"]: {"numerics": r["numerics"], "pack": r["pack"], "max": r["train_max_abs"],
                             "mean": r["train_mean_abs"], "tol_max": r["tol_max"], "tol_mean": r["tol_mean"],
                             "pass": r["pass"]} for r in lpm},
     "lora_pass": lora[-1]["pass"] if lora else None,
     "lora_step_s": lora[-1]["step_s"] if lora else None, "lora_tokens_per_s": lora[-1]["tokens_per_s"] if lora else None,
     "lora_trainable_params": lora[-1]["trainable_params"] if lora else None,
     "lora_peak_mem_gib": lora[-1]["peak_mem_gib"] if lora else None,
     "lora_base_unchanged": lora[-1]["base_unchanged"] if lora else None,
     "fsdp": {r["step"]: {"ok": r.get("ok"), "max_rel_diff": r.get("max_rel_diff"), "resume": r.get("resume"),
                          "world_size": r.get("world_size")}
              for r in rows if r.get("check") == "fsdp"} or [r.get("skipped") for r in rows
                                                               if r.get("step") == "fsdp_check" and "skipped" in r],
     "vllm_fleet": {r.get("phase") or "skipped": (r.get("tokens_per_s") or r.get("all_over_one") or r.get("seconds")
                                                 or r.get("skipped"))
                    for r in rows if r.get("step") == "vllm_fleet" and r.get("bench") == "vllm_fleet"},
     "steps": {k: {"rc": v["rc"], "timed_out": v["timed_out"], "wall_s": v["wall_s"]} for k, v in steps.items()}}
print(json.dumps(s))
EOF
cat "$RES.summary" >>"$RES"
rm -f "$RES.summary"
echo "=== summary ($RES):" >&2
tail -n 1 "$RES"
if [ "$MODE" = gpu ] && [ -z "$NAIVE_PATH" ]; then
  echo "gpu.sh: NOTE no naive_grpo_step.py was found: the speedup is against learner_gpu.py's inline port" >&2
fi
exit "$FAILED"
