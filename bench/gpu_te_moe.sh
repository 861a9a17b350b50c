#!/usr/bin/env bash
# Issue 26 on one H200: megatron's TE layer spec without TE on the FlagGems pack against the pack's local
# spec (same model), and MoE / MLA, against upstream where upstream can build the model. Throughput mode
# of tests/support/flaggems/gems_gpt.py (median of steps 5 on, bf16, megatron DDP + optimizer). Every run's
# JSON is merged into $OUT/te_moe.json, with one summary line per run on stdout. Run as
# bench/gpu_session.sh says (wheels in .whl).
#   dense: the 0.85B GPT (16 layers, hidden 2048, GQA 16/4, SwiGLU 5632, seq 2048, micro-batch 4), 30 steps,
#          the pack's local spec and TE spec alternated twice (their run-to-run spread is ~10%), then once
#          each with the garbage collector frozen (--manual-gc)
#   moe:   8 layers, hidden 2048, 8 experts top-2 (alltoall), expert SwiGLU 1408, seq 2048, micro-batch 2:
#          upstream's local spec (SequentialMLP), the pack's local spec, the pack's TE spec with grouped
#          experts, and the same with the pack's four TE targets disabled (TE modules' plain torch maths)
#   mla:   the moe model with multi-latent attention (q/kv LoRA 1024, YaRN), TE spec only (upstream's
#          local spec cannot build MLA, and TE is not on the machine)
#   moe_fusion: the moe model, TE spec, grouped experts on the pack, with and without --moe-fusion
#          (moe_permute_fusion + moe_router_fusion: the pack's permute/unpermute kernels), alternated twice,
#          the garbage collector frozen; and 64 experts top-8 (DeepSeek-like routing, expert SwiGLU 256) the same
#          two ways
set -u
OUT=${OUT:-/tmp/gems_out}; RUNS=/tmp/te_moe; mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore"
run() {  # run NAME ENV... -- FLAGS...
  local name=$1; shift; local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 240 python3 tests/support/flaggems/gems_gpt.py --mode throughput "$@" \
    --out "$RUNS/$name.json" > "$RUNS/$name.log" 2>&1 || echo "FAILED $name: $(tail -3 "$RUNS/$name.log")"
}
P=MG_FL_PREFER=flaggems; U=FL_PATCH=0
TE_OFF=FL_PATCH_DISABLE=$(python3 -c "from fl_patch.impls.flaggems.registry import TE_PATCHES as t; print(','.join(x for x, *_ in t))")
moe=(--layers 8 --experts 8 --topk 2 --moe-ffn 1408 --mbs 2)
for what in ${TE_MOE_RUNS:-dense moe mla}; do
  case $what in
    dense)
      for i in 1 2; do run dense_pack_local_$i $P -- --steps 30; run dense_pack_te_$i $P -- --spec te --steps 30; done
      # the same pair with the garbage collector frozen (the TE spec's module tree has more Python objects)
      run dense_pack_local_gc $P -- --steps 30 --manual-gc; run dense_pack_te_gc $P -- --spec te --steps 30 --manual-gc ;;
    moe)
      run moe_upstream_local $U -- "${moe[@]}"
      run moe_pack_local $P -- "${moe[@]}"
      run moe_pack_te_grouped $P -- "${moe[@]}" --spec te --grouped-gemm --bias-act-fusion
      run moe_pack_te_grouped_plain $P "$TE_OFF" -- "${moe[@]}" --spec te --grouped-gemm --bias-act-fusion ;;
    mla)
      run mla_pack_te_grouped $P -- "${moe[@]}" --spec te --grouped-gemm --bias-act-fusion --mla ;;
    moe_fusion)
      g=(--spec te --grouped-gemm --bias-act-fusion --manual-gc --steps 30)
      for i in 1 2; do
        run moe_pack_te_grouped_unfused_$i $P -- "${moe[@]}" "${g[@]}"
        run moe_pack_te_grouped_fused_$i $P -- "${moe[@]}" "${g[@]}" --moe-fusion
      done
      e64=(--layers 8 --experts 64 --topk 8 --moe-ffn 256 --mbs 2)
      run moe64_pack_te_grouped_unfused $P -- "${e64[@]}" "${g[@]}"
      run moe64_pack_te_grouped_fused $P -- "${e64[@]}" "${g[@]}" --moe-fusion ;;
  esac
done
python3 bench/support/merge_gems_runs.py "$RUNS" "$OUT/te_moe.json" --loss-every 4
