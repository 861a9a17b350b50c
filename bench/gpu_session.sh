#!/usr/bin/env bash
# One call on the GPU machine: the GPU tests (ops vs torch autograd, impls vs upstream, loss
# curves), the op bench, end-to-end GPT steps with and without the FlagGems pack. Each stage
# has its own time limit so one failure or hang still leaves the others' results. Results go
# to $OUT (at most 8 files come back): log (the caller tees stdout there), tests.xml,
# curves.json, ops.json, ops.md, e2e.json (every end-to-end run, merged),
# profile_llama131_mbs1.txt, the warm runs' autotune store (autotune-<device>.json).
# Run as (the wheels of flag-gems and liger-kernel in .whl, from `pip download -d .whl flag-gems liger-kernel` on a machine with internet):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH || exit
#   set -o pipefail; bash bench/gpu_session.sh 2>&1 | tee $OUT/log
# GEMS_STAGES (default "tests ops e2e e2e_fused e2e13 e2e13_mbs2") picks stages (e2e: the 0.85B GPT;
# e2e13, e2e13_mbs2: the 1.31B stand-in at seq 4096, micro-batch 1 and 2; each stage's comment says
# more); GEMS_OPS_TIMEOUT (default 200 s) bounds the op bench; GEMS_PYTEST_K is pytest's -k expression
# (e.g. "loss_curves or other_mask"); GEMS_PYTEST_ARGS adds other pytest args (word-split).
# The GPU tests are compile-bound (each case specializes kernels anew: about 6 s a test in
# one process), so they run in GEMS_TEST_WORKERS pytest-xdist workers (default 12).
set -u
OUT=${OUT:-/tmp/gems_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
STAGES=${GEMS_STAGES:-tests ops e2e e2e_fused e2e13 e2e13_mbs2}
BUDGET=${GEMS_BUDGET_S:-0}  # >0: skip a stage that would not fit in what is left of this many seconds
START=$SECONDS
BUDGET_NAME=GEMS_BUDGET_S
source "$(dirname "$0")/support/stages.sh"  # stage, fits
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
E2E=/tmp/gems_e2e                 # every end-to-end run's JSON, merged into $OUT/e2e.json at the end
WARM=/tmp/gems_warm               # the triton and autotune caches the warm pack runs share
COLD=/tmp/gems_cold
mkdir -p "$E2E"
gpt=(python3 tests/support/flaggems/gems_gpt.py --mode throughput)
warm=(MG_FL_PREFER=flaggems TRITON_CACHE_DIR=$WARM/triton FL_GEMS_CACHE_DIR=$WARM/gems)
for s in $STAGES; do
  case $s in
    ops)
      stage ops env FL_GEMS_CACHE_DIR=$WARM/gems timeout ${GEMS_OPS_TIMEOUT:-200} python3 bench/gpu_ops.py --out "$OUT/ops.json" --md "$OUT/ops.md" ${GEMS_OPS_ARGS:-}
      ;;
    e2e)  # the 0.85B GPT (the issue's ~1B baseline), upstream and the pack
      fits 60 e2e || continue
      stage e2e_upstream env FL_PATCH=0 timeout 60 "${gpt[@]}" --out "$E2E/gpt085_upstream.json"
      stage e2e_pack env "${warm[@]}" timeout 90 "${gpt[@]}" --out "$E2E/gpt085_pack.json"
      ;;
    e2e_fused)  # the pack with megatron's fused_single_qkv_rope path (query and key rotated in one launch)
      fits 40 e2e_fused || continue
      stage e2e_pack_fused env "${warm[@]}" timeout 90 "${gpt[@]}" --fused-qkv-rope --out "$E2E/gpt085_pack_fused.json"
      ;;
    e2e13)  # the 1.31B stand-in, micro-batch 1: upstream; the pack cold (empty caches) without and with the
            # shipped autotune seeds; the pack warm, with a profile of two steps
      fits 150 e2e13 || continue
      stage e2e13_upstream env FL_PATCH=0 timeout 60 "${gpt[@]}" --preset llama131 --out "$E2E/llama131_mbs1_upstream.json"
      rm -rf "$COLD"
      stage e2e13_cold_noseed env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=$COLD/a/triton FL_GEMS_CACHE_DIR=$COLD/a/gems \
        FL_GEMS_AUTOTUNE_SEED=0 timeout 120 "${gpt[@]}" --preset llama131 --out "$E2E/llama131_mbs1_pack_cold_noseed.json"
      stage e2e13_cold_seed env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=$COLD/b/triton FL_GEMS_CACHE_DIR=$COLD/b/gems \
        timeout 90 "${gpt[@]}" --preset llama131 --out "$E2E/llama131_mbs1_pack_cold_seed.json"
      stage e2e13_warm env "${warm[@]}" timeout 90 "${gpt[@]}" --preset llama131 --out "$E2E/llama131_mbs1_pack_warm0.json"
      stage e2e13_warm env "${warm[@]}" timeout 90 "${gpt[@]}" --preset llama131 --profile "$OUT/profile_llama131_mbs1.txt" \
        --out "$E2E/llama131_mbs1_pack_warm.json"
      ;;
    e2e13_mbs2)  # the stand-in at micro-batch 2: upstream, the pack, the pack with the Triton attention
      fits 120 e2e13_mbs2 || continue
      stage e2e13_mbs2_upstream env FL_PATCH=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 70 "${gpt[@]}" \
        --preset llama131 --mbs 2 --out "$E2E/llama131_mbs2_upstream.json"
      stage e2e13_mbs2_pack env "${warm[@]}" timeout 90 "${gpt[@]}" --preset llama131 --mbs 2 --out "$E2E/llama131_mbs2_pack.json"
      stage e2e13_mbs2_triton env "${warm[@]}" FL_GEMS_BACKEND=attention=triton timeout 120 "${gpt[@]}" --preset llama131 --mbs 2 \
        --out "$E2E/llama131_mbs2_pack_triton_attention.json"
      ;;
    e2e13_pack)  # the stand-in with the pack only, micro-batch 1 and 2 (upstream's step does not change with the pack)
      fits 60 e2e13_pack || continue
      stage e2e13_pack_mbs1 env "${warm[@]}" timeout 90 "${gpt[@]}" --preset llama131 --out "$E2E/llama131_mbs1_pack.json"
      stage e2e13_pack_mbs2 env "${warm[@]}" timeout 90 "${gpt[@]}" --preset llama131 --mbs 2 --out "$E2E/llama131_mbs2_pack.json"
      ;;
    tests)
      stage tests env GEMS_CURVE_OUT="$OUT/curves.json" timeout ${GEMS_TEST_TIMEOUT:-200} python3 -m pytest tests/impls/test_flaggems_gpu.py \
        -v --tb=short -rfE -p no:cacheprovider --junitxml="$OUT/tests.xml" \
        -o faulthandler_timeout=100 --timeout=170 -n ${GEMS_TEST_WORKERS:-12} -k "${GEMS_PYTEST_K:-}" ${GEMS_PYTEST_ARGS:-}
      ;;
  esac
done
python3 - "$E2E" "$OUT/e2e.json" <<'PY'
import glob, json, os, sys
runs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/*.json"))}
if runs:
    json.dump(runs, open(sys.argv[2], "w"), indent=1)
    for name, r in runs.items():
        print(f"{name:40s} {r['step_s_median']:.4f} s/step {r['tokens_per_s']:>9,.0f} tokens/s first step {r['first_step_s']:.2f} s "
              f"start->first {r['start_to_first_step_s']:.1f} s peak {r['peak_mem_gb']:.1f} GB fallbacks {len(r['fallbacks'])}")
PY
cp "$WARM"/gems/autotune-*.json "$OUT/" 2>/dev/null
echo "=== session done $(date +%T)"
