#!/usr/bin/env bash
# A diagnostic device call (results under $OUT, at most 8 files): the GPU tests named by GEMS_PYTEST_K,
# the host-cost and attention sections of bench/gpu_ops.py, then the 1.31B stand-in
# (gems_gpt.py --preset llama131) with the pack at micro-batch 1 (cold, with a profile of two steps),
# upstream and the pack at micro-batch 2, and the 0.85B GPT with the pack for 6 steps; every pack run
# shares one autotune store, copied to $OUT (the picks the pack ships as seeds).
# Run as bench/gpu_session.sh says, with: bash bench/support/gems_probe.sh 2>&1 | tee $OUT/log
set -u
OUT=${OUT:-/tmp/gems_out}
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
store=/tmp/gems_store
rm -rf "$store"
export FL_GEMS_CACHE_DIR=$store/gems TRITON_CACHE_DIR=$store/triton FL_GEMS_AUTOTUNE_SEED=0
stage() { echo "=== $1 start $(date +%T)"; shift; "$@"; echo "=== rc=$? end $(date +%T)"; }
gpt="python3 tests/support/flaggems/gems_gpt.py --mode throughput"
[ -n "${GEMS_SKIP_TESTS:-}" ] || stage tests timeout ${GEMS_TEST_TIMEOUT:-120} python3 -m pytest tests/impls/test_flaggems_gpu.py -v --tb=short -rfE \
  -p no:cacheprovider --junitxml="$OUT/tests.xml" --timeout=110 -n 12 -k "${GEMS_PYTEST_K:-persist or lean}"
[ -n "${GEMS_SKIP_OPS:-}" ] || stage ops timeout ${GEMS_OPS_TIMEOUT:-120} python3 bench/gpu_ops.py --out "$OUT/ops.json" --md /tmp/ops.md \
  --skip norms,swiglu,rope,qkv_rope,softmax,cross_entropy,gemm,attention_flaggems,attention_configs,optimizer
stage pack13_mbs1 env MG_FL_PREFER=flaggems TRITON_PRINT_AUTOTUNING=1 timeout 150 $gpt --preset llama131 \
  --profile "$OUT/profile_pack13_mbs1.txt" --out "$OUT/e2e13_pack_mbs1.json"
stage pack13_mbs2 env MG_FL_PREFER=flaggems timeout 120 $gpt --preset llama131 --mbs 2 --out "$OUT/e2e13_pack_mbs2.json"
stage up13_mbs2 env FL_PATCH=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 $gpt --preset llama131 --mbs 2 \
  --out "$OUT/e2e13_upstream_mbs2.json"
stage pack085 env MG_FL_PREFER=flaggems timeout 90 $gpt --preset gpt085 --steps 6 --out /tmp/e2e085.json
cp "$store"/gems/autotune-*.json "$OUT/" 2>/dev/null
echo "=== probe done $(date +%T)"
