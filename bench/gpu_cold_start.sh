#!/usr/bin/env bash
# Issue 28's cold start on one H200: the pack on shapes no seed was measured for (4 layers,
# micro-batch 1, empty Triton and pack caches, the shipped seeds), three ways per shape:
# default (an unseen shape borrows the nearest stored pick), FL_GEMS_TUNE_UNSEEN=1 (tunes it,
# as before), and upstream (FL_PATCH=0) for the start-up megatron itself costs. Results:
# $OUT/cold/*.json and a summary line per run. Run as bench/gpu_session.sh says (wheels in .whl).
set -u
OUT=${OUT:-/tmp/gems_out}; mkdir -p "$OUT/cold"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore"
g=(python3 tests/support/flaggems/gems_gpt.py)
for sh in "2048 5504 4096 16 8" "2560 6848 2048 20 4" "3072 8064 8192 24 8"; do
  set -- $sh
  shape=(--mode throughput --layers 4 --hidden $1 --ffn $2 --seq $3 --heads $4 --groups $5 --mbs 1 --steps 6)
  for way in borrow tune upstream; do
    rm -rf /tmp/c
    case $way in
      borrow) extra=(MG_FL_PREFER=flaggems) ;;
      tune) extra=(MG_FL_PREFER=flaggems FL_GEMS_TUNE_UNSEEN=1) ;;
      upstream) extra=(FL_PATCH=0) ;;
    esac
    env "${extra[@]}" TRITON_CACHE_DIR=/tmp/c/t FL_GEMS_CACHE_DIR=/tmp/c/g timeout 120 "${g[@]}" "${shape[@]}" \
      --out "$OUT/cold/${way}_$1_$2_$3.json" || echo "FAILED $way $sh"
  done
done
python3 - "$OUT/cold" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(p))
    keys = ("first_step_s", "start_to_first_step_s", "step_s_median", "mfu_989", "fallbacks")
    print(os.path.basename(p)[:-5], {k: r.get(k) for k in keys})
PY
