#!/usr/bin/env bash
# One call on the GPU machine: op bench, end-to-end GPT step with and without the
# FlagGems pack, then the GPU tests (ops vs torch autograd, impls vs upstream, loss
# curves). Each stage has its own time limit so one failure or hang still leaves the
# others' results. Results go to $OUT (at most 8 files come back):
#   log (the caller tees stdout there), ops.json, ops.md, e2e_upstream.json,
#   e2e_pack.json, e2e_pack_fused.json, tests.xml, curves.json
# Run as (wheels carried in .whl, see shared/device/README.md):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH || exit
#   set -o pipefail; bash bench/gpu_session.sh 2>&1 | tee $OUT/log
# GEMS_STAGES (default "tests ops e2e e2e_fused") picks stages ("e2e13": the 1.31B stand-in at seq 4096,
# upstream, then the pack with empty triton and autotune caches (cold), then again with them (warm);
# "e2e13_triton": the pack with FL_GEMS_BACKEND=attention=triton); GEMS_OPS_TIMEOUT (default 200 s) bounds the op bench; GEMS_PYTEST_K is pytest's -k expression
# (e.g. "loss_curves or other_mask"); GEMS_PYTEST_ARGS adds other pytest args (word-split).
# The GPU tests are compile-bound (each case specializes kernels anew: about 6 s a test in
# one process), so they run in GEMS_TEST_WORKERS pytest-xdist workers (default 12).
set -u
OUT=${OUT:-/tmp/gems_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
STAGES=${GEMS_STAGES:-tests ops e2e e2e_fused}
BUDGET=${GEMS_BUDGET_S:-0}  # >0: skip a stage that would not fit in what is left of this many seconds
START=$SECONDS
stage() {
  local name=$1
  shift
  echo "=== $name start $(date +%T)"
  "$@"
  echo "=== $name rc=$? end $(date +%T)"
}
fits() {  # fits SECONDS: whether a stage needing that long still fits the budget
  [ "$BUDGET" -le 0 ] || [ $((BUDGET - (SECONDS - START))) -ge "$1" ] || {
    echo "=== skipping $2: $((BUDGET - (SECONDS - START))) s left of GEMS_BUDGET_S=$BUDGET"
    return 1
  }
}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
for s in $STAGES; do
  case $s in
    ops)
      stage ops timeout ${GEMS_OPS_TIMEOUT:-200} python3 bench/gpu_ops.py --out "$OUT/ops.json" --md "$OUT/ops.md" ${GEMS_OPS_ARGS:-}
      ;;
    e2e)
      fits 60 e2e || continue
      stage e2e_upstream env FL_PATCH=0 timeout 40 python3 tests/support/gems_gpt.py --mode throughput --out "$OUT/e2e_upstream.json"
      left=120
      [ "$BUDGET" -le 0 ] || left=$((BUDGET - (SECONDS - START)))
      [ "$left" -gt 5 ] && stage e2e_pack env MG_FL_PREFER=flaggems timeout "$left" python3 tests/support/gems_gpt.py --mode throughput --out "$OUT/e2e_pack.json"
      ;;
    e2e_fused)  # the pack with megatron's fused_single_qkv_rope path (query and key rotated in one launch)
      fits 40 e2e_fused || continue
      stage e2e_pack_fused env MG_FL_PREFER=flaggems timeout 120 python3 tests/support/gems_gpt.py --mode throughput --fused-qkv-rope --out "$OUT/e2e_pack_fused.json"
      ;;
    e2e13)  # gems_gpt.py --preset llama131: upstream, the pack cold (empty caches), the pack warm (caches from cold)
      fits 200 e2e13 || continue
      cold=/tmp/gems_cold
      rm -rf "$cold"
      stage e2e13_upstream env FL_PATCH=0 timeout 120 python3 tests/support/gems_gpt.py --mode throughput --preset llama131 --out "$OUT/e2e13_upstream.json"
      stage e2e13_pack_cold env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=$cold/triton FL_GEMS_CACHE_DIR=$cold/gems TRITON_PRINT_AUTOTUNING=1 \
        timeout 200 python3 tests/support/gems_gpt.py --mode throughput --preset llama131 --out "$OUT/e2e13_pack_cold.json"
      stage e2e13_pack_warm env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=$cold/triton FL_GEMS_CACHE_DIR=$cold/gems TRITON_PRINT_AUTOTUNING=1 \
        timeout 120 python3 tests/support/gems_gpt.py --mode throughput --preset llama131 --out "$OUT/e2e13_pack_warm.json"
      cp "$cold"/gems/autotune-*.json "$OUT/" 2>/dev/null
      ;;
    e2e13_triton)
      fits 60 e2e13_triton || continue
      stage e2e13_pack_triton env MG_FL_PREFER=flaggems FL_GEMS_BACKEND=attention=triton TRITON_CACHE_DIR=/tmp/gems_cold/triton \
        FL_GEMS_CACHE_DIR=/tmp/gems_cold/gems timeout 150 python3 tests/support/gems_gpt.py --mode throughput --preset llama131 \
        --out "$OUT/e2e13_pack_triton.json"
      ;;
    tests)
      stage tests env GEMS_CURVE_OUT="$OUT/curves.json" timeout ${GEMS_TEST_TIMEOUT:-200} python3 -m pytest tests/test_flaggems_gpu.py \
        -v --tb=short -rfE -p no:cacheprovider --junitxml="$OUT/tests.xml" \
        -o faulthandler_timeout=100 --timeout=170 -n ${GEMS_TEST_WORKERS:-12} -k "${GEMS_PYTEST_K:-}" ${GEMS_PYTEST_ARGS:-}
      ;;
  esac
done
echo "=== session done $(date +%T)"
