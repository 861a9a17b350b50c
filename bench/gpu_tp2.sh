#!/usr/bin/env bash
# The FlagGems pack at tensor-parallel size 2 on a machine with two GPUs (kind nvidia-h200-x2):
# the curve GPT of tests/impls/test_flaggems_gpu.py (4 layers, hidden 512, seq 512, 300 bf16 steps on a
# Markov-chain language) with upstream at TP=2, the pack at TP=2 and the pack at TP=2 with sequence
# parallelism (upstream's torch norms refuse it), then tokens/s of the 1.31B stand-in
# (gems_gpt.py --preset llama131, micro-batch 2) the same three ways; a comparison of the curves last.
# Results under $OUT (at most 8 files): log (tee it), tp2_curve_{upstream,pack,pack_sp}.json,
# tp2_step_{upstream,pack,pack_sp}.json. Run as (the wheels of flag-gems and liger-kernel in .whl, from `pip download -d .whl flag-gems liger-kernel`):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH || exit
#   set -o pipefail; bash bench/gpu_tp2.sh 2>&1 | tee $OUT/log
# NCCL's NVLink multicast stays off (the machine sets NCCL_NVLS_ENABLE=0; kept here too).
set -u
OUT=${OUT:-/tmp/gems_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
nvidia-smi --query-gpu=index,name,memory.total --format=csv
python3 -c "import torch; print('gpus', torch.cuda.device_count())"
tp2=(python3 -m torch.distributed.run --standalone --nproc-per-node 2 tests/support/flaggems/gems_gpt.py)
for mode in upstream pack pack_sp; do
  case $mode in
    upstream) env=(FL_PATCH=0); extra=() ;;
    pack) env=(MG_FL_PREFER=flaggems); extra=() ;;
    pack_sp) env=(MG_FL_PREFER=flaggems); extra=(--sp) ;;
  esac
  echo "=== curve $mode $(date +%T)"
  env "${env[@]}" timeout ${GEMS_TP2_CURVE_TIMEOUT:-240} "${tp2[@]}" --mode curve --tp 2 ${extra[@]+"${extra[@]}"} \
    --out "$OUT/tp2_curve_$mode.json"
  echo "=== step $mode $(date +%T)"
  env "${env[@]}" timeout ${GEMS_TP2_STEP_TIMEOUT:-150} "${tp2[@]}" --mode throughput --preset llama131 --mbs 2 --tp 2 \
    ${extra[@]+"${extra[@]}"} --out "$OUT/tp2_step_$mode.json"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda name: json.load(open(f"{out}/{name}.json"))
try:
    up = load("tp2_curve_upstream")["losses"]
except OSError as exc:
    sys.exit(f"no upstream curve: {exc}")
for mode in ("pack", "pack_sp"):
    try:
        got = load(f"tp2_curve_{mode}")["losses"]
    except OSError as exc:
        print(mode, "no curve:", exc)
        continue
    windows = [abs(sum(got[i:i + 10]) - sum(up[i:i + 10])) / sum(up[i:i + 10]) for i in range(0, len(up), 10)]
    tail = abs(sum(got[-50:]) - sum(up[-50:])) / sum(up[-50:])
    print(f"{mode}: loss step 1 {got[0]:.4f} vs {up[0]:.4f}, last {got[-1]:.4f} vs {up[-1]:.4f}; "
          f"largest 10-step window difference {max(windows):.3%}, last-50 mean difference {tail:.3%}")
for mode in ("upstream", "pack", "pack_sp"):
    try:
        step = load(f"tp2_step_{mode}")
        print(f"{mode}: {step['step_s_median']:.4f} s/step, {step['tokens_per_s']:,.0f} tokens/s, "
              f"peak {step['peak_mem_gb']:.1f} GB, fallbacks {step['fallbacks']}")
    except OSError as exc:
        print(mode, "no step:", exc)
PY
echo "=== tp2 done $(date +%T)"
