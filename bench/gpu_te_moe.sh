#!/usr/bin/env bash
# Issue 26 on one H200: megatron's TE layer spec without TE on the FlagGems pack against the pack's local
# spec (same model), and MoE / MLA, against upstream where upstream can build the model. Throughput mode
# of tests/support/flaggems/gems_gpt.py (median of steps 5-14, bf16, megatron DDP + optimizer). Results:
# $OUT/te_moe/*.json and one summary line per run. Run as bench/gpu_session.sh says (wheels in .whl).
#   dense: the 0.85B GPT (16 layers, hidden 2048, GQA 16/4, SwiGLU 5632, seq 2048, micro-batch 4)
#   moe:   8 layers, hidden 2048, 8 experts top-2 (alltoall), expert SwiGLU 1408, seq 2048, micro-batch 2
#   mla:   the moe model with multi-latent attention (q/kv LoRA 1024, YaRN), TE spec only (upstream's
#          local spec cannot build MLA, and TE is not on the machine)
set -u
OUT=${OUT:-/tmp/gems_out}; mkdir -p "$OUT/te_moe"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore"
run() {  # run NAME ENV... -- FLAGS...
  local name=$1; shift; local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 240 python3 tests/support/flaggems/gems_gpt.py --mode throughput "$@" \
    --out "$OUT/te_moe/$name.json" > "$OUT/te_moe/$name.log" 2>&1 || echo "FAILED $name (tail: $(tail -3 "$OUT/te_moe/$name.log"))"
}
P=MG_FL_PREFER=flaggems; U=FL_PATCH=0
moe=(--layers 8 --experts 8 --topk 2 --moe-ffn 1408 --mbs 2)
for what in ${TE_MOE_RUNS:-dense moe mla}; do
  case $what in
    dense)
      run dense_upstream_local $U -- ; run dense_pack_local $P -- ; run dense_pack_te $P -- --spec te ;;
    moe)
      run moe_upstream_local $U -- "${moe[@]}"
      run moe_pack_local $P -- "${moe[@]}" --bias-act-fusion
      run moe_pack_te_sequential $P -- "${moe[@]}" --spec te --bias-act-fusion
      run moe_pack_te_grouped $P -- "${moe[@]}" --spec te --grouped-gemm --bias-act-fusion ;;
    mla)
      run mla_pack_te_grouped $P -- "${moe[@]}" --spec te --grouped-gemm --bias-act-fusion --mla ;;
  esac
done
python3 - "$OUT/te_moe" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(p))
    keys = ("step_s_median", "tokens_per_s", "tflops_6N", "mfu_989", "peak_mem_gb", "params", "active_params", "fallbacks")
    print(os.path.basename(p)[:-5], json.dumps({k: r.get(k) for k in keys}), "losses", [round(x, 3) for x in r["losses"][::4]])
PY
