#!/usr/bin/env bash
# Issue 28 on one H200: determinism (two runs each of upstream, the pack and the pack in
# deterministic mode; losses compared bit for bit; step cost), numerics (fp32 reference,
# upstream bf16, pack bf16 on fresh Markov data, per-step loss and grad norm) and cold start
# on held-out shapes (empty caches, shipped seeds). Results: $OUT/*.json; plot on the CPU with
# bench/plot_numerics.py. Run as bench/gpu_session.sh says (wheels in .whl), then
#   set -o pipefail; bash bench/gpu_determinism.sh 2>&1 | tee $OUT/log
set -u
OUT=${OUT:-/tmp/gems_out}; mkdir -p "$OUT/runs"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore"
g=(python3 tests/support/flaggems/gems_gpt.py)
W=(TRITON_CACHE_DIR=/tmp/w/triton FL_GEMS_CACHE_DIR=/tmp/w/gems)
STEPS=${DET_STEPS:-30}
for i in 1 2; do  # determinism: 0.85B-like GPT (8 layers), fresh data
  env FL_PATCH=0 timeout 60 "${g[@]}" --mode throughput --layers 8 --fresh-data --steps $STEPS --out $OUT/runs/up$i.json
  env MG_FL_PREFER=flaggems "${W[@]}" timeout 60 "${g[@]}" --mode throughput --layers 8 --fresh-data --steps $STEPS --out $OUT/runs/pack$i.json
  env MG_FL_PREFER=flaggems "${W[@]}" timeout 60 "${g[@]}" --mode throughput --layers 8 --fresh-data --steps $STEPS --deterministic --out $OUT/runs/packdet$i.json
done
N=${NUM_STEPS:-300}  # numerics: the curve GPT on fresh Markov data
env FL_PATCH=0 timeout 90 "${g[@]}" --mode curve --steps $N --fp32 --out $OUT/runs/num_fp32.json
env FL_PATCH=0 timeout 90 "${g[@]}" --mode curve --steps $N --out $OUT/runs/num_up_bf16.json
env MG_FL_PREFER=flaggems "${W[@]}" timeout 90 "${g[@]}" --mode curve --steps $N --out $OUT/runs/num_pack_bf16.json
# cold start, held-out shapes, 4 layers, empty caches, shipped seeds
for sh in "2048 5504 4096 16 8" "2560 6848 2048 20 4" "3072 8064 8192 24 8"; do
  set -- $sh; rm -rf /tmp/c
  env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=/tmp/c/t FL_GEMS_CACHE_DIR=/tmp/c/g timeout 100 "${g[@]}" --mode throughput \
    --layers 4 --hidden $1 --ffn $2 --seq $3 --heads $4 --groups $5 --mbs 1 --steps 6 --out $OUT/runs/cold_$1_$2_$3.json
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
o = sys.argv[1]; runs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob(o + "/runs/*.json"))}
json.dump(runs, open(o + "/det_numerics.json", "w"))
for a in ("up", "pack", "packdet"):
    if a + "1" in runs and a + "2" in runs:
        l1, l2 = runs[a + "1"]["losses"], runs[a + "2"]["losses"]
        print(a, "bit-identical:", l1 == l2, "max diff", max(abs(x - y) for x, y in zip(l1, l2)), "step", runs[a + "1"]["step_s_median"])
for k, r in runs.items():
    print(k, "first", r["first_step_s"], "start->first", r["start_to_first_step_s"], "median", r["step_s_median"], "fallbacks", r["fallbacks"])
PY
