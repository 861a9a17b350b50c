#!/usr/bin/env bash
# Issue 28 on one H200: micro-batch 1 of the 1.31B stand-in (gems_gpt.py --preset llama131: 25 layers, hidden
# 2048, GQA 16/8, SwiGLU 5632, seq 4096, bf16, megatron DDP + Adam), eager and under megatron-core's own
# full-iteration CUDA graph (FullCudaGraphWrapper, --cuda-graph: forward+backward captured at step 4 and
# replayed after; the optimizer step stays eager), upstream (FL_PATCH=0) and the pack (MG_FL_PREFER=flaggems).
# 34 steps a run: the median of steps 5-34 (30 steps). The pack with the graph three times (steadiness).
# mfu: the 1.31B at micro-batch 2, and a ~2.8B Llama-style model (26 layers, hidden 3072, GQA 24/8, SwiGLU 8192,
# seq 4096) at micro-batch 1 and 2, eager and with the graph (MFU: 6N plus attention FLOPs over 989 TFLOP/s).
# ga: the same models at the batch sizes training runs use, gradient accumulation (--microbatches: several
# micro-batches a step, one optimizer step), 1.31B at 8 sequences a step (mb 1 x 8, 2 x 4, 4 x 2), 2.81B at 2 x 4.
# MFU counts FLOPs as Megatron-LM's num_floating_point_operations does (no FLOPs for the input embedding lookup).
# gaf: gradient accumulation fusion (fl_patch's stand-in for Apex's extension) and batches of 32 sequences;
# gaf_qkv: with megatron's fused_single_qkv_rope too, up to 64 sequences a step; mfu131: the 1.31B at 32 and 64 sequences,
# fused QKV RoPE on and off on one machine; gaf_profile: a profile of the 1.31B at 4 x 2.
# Then FlagGems' own global mode (flag_gems.enable()) on upstream megatron-core, the docs' repro.
# Every run's JSON merges into $OUT/cuda_graph.json; each run's log tail into $OUT/cuda_graph_logs.txt.
# Run as bench/gpu_session.sh says (wheels in .whl).
set -u
OUT=${OUT:-/tmp/gems_out}; RUNS=/tmp/cuda_graph; mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="ignore"
run() {  # run NAME SECONDS ENV... -- FLAGS...
  local name=$1 limit=$2; shift 2; local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "=== $name $(date +%T)"
  env "${envs[@]}" timeout "$limit" python3 tests/support/flaggems/gems_gpt.py --mode throughput "$@" \
    --out "$RUNS/$name.json" > "$RUNS/$name.log" 2>&1
  local rc=$?
  { echo "=== $name rc=$rc"; grep -v "Warning\|warn" "$RUNS/$name.log" | tail -25; } >> "$OUT/cuda_graph_logs.txt"
  [ $rc -eq 0 ] || echo "FAILED $name rc=$rc: $(tail -2 "$RUNS/$name.log")"
}
P=MG_FL_PREFER=flaggems; U=FL_PATCH=0
mb1=(--preset llama131 --mbs 1 --steps 34)
b3=(--preset llama131 --layers 26 --hidden 3072 --heads 24 --groups 8 --ffn 8192 --steps 24)
for what in ${CUDA_GRAPH_RUNS:-mb1 global}; do
  case $what in
    mb1)
      run up_eager 200 $U -- "${mb1[@]}"
      run pack_eager 200 $P -- "${mb1[@]}"
      run pack_graph_1 200 $P -- "${mb1[@]}" --cuda-graph
      run up_graph 200 $U -- "${mb1[@]}" --cuda-graph
      run pack_graph_2 200 $P -- "${mb1[@]}" --cuda-graph
      run pack_graph_3 200 $P -- "${mb1[@]}" --cuda-graph ;;
    mfu)
      run l131_mb2_pack_eager 200 $P -- --preset llama131 --mbs 2 --steps 24
      run l131_mb2_pack_graph 200 $P -- --preset llama131 --mbs 2 --steps 24 --cuda-graph
      run b3_mb1_up_eager 240 $U -- "${b3[@]}" --mbs 1
      run b3_mb1_pack_eager 200 $P -- "${b3[@]}" --mbs 1
      run b3_mb1_pack_graph 200 $P -- "${b3[@]}" --mbs 1 --cuda-graph
      run b3_mb2_pack_graph 200 $P -- "${b3[@]}" --mbs 2 --cuda-graph ;;
    ga)
      run l131_mb2x4_pack_graph 200 $P -- --preset llama131 --mbs 2 --microbatches 4 --steps 16 --cuda-graph
      run l131_mb2x4_pack_eager 200 $P -- --preset llama131 --mbs 2 --microbatches 4 --steps 16
      run l131_mb4x2_pack_graph 200 $P -- --preset llama131 --mbs 4 --microbatches 2 --steps 16 --cuda-graph
      run l131_mb1x8_pack_graph 200 $P -- --preset llama131 --mbs 1 --microbatches 8 --steps 16 --cuda-graph
      run b3_mb2x4_pack_graph 240 $P -- "${b3[@]}" --mbs 2 --microbatches 4 --steps 14 --cuda-graph
      run l131_mb2x4_up_eager 200 $U -- --preset llama131 --mbs 2 --microbatches 4 --steps 10 ;;
    gaf)  # gradient accumulation fusion (--grad-accum-fusion: the weight gradient into the fp32 main_grad by the GEMM)
      # and training batches of 8 and 32 sequences; the 4 x 2 baseline again in the same call (run-to-run spread)
      run l131_mb4x2_graph 200 $P -- --preset llama131 --mbs 4 --microbatches 2 --steps 16 --cuda-graph
      run l131_mb4x2_graph_gaf 200 $P -- --preset llama131 --mbs 4 --microbatches 2 --steps 16 --cuda-graph --grad-accum-fusion
      run l131_mb4x8_graph_gaf 200 $P -- --preset llama131 --mbs 4 --microbatches 8 --steps 12 --cuda-graph --grad-accum-fusion
      run l131_mb4x8_graph 200 $P -- --preset llama131 --mbs 4 --microbatches 8 --steps 12 --cuda-graph
      run l131_mb8x4_graph_gaf 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion
      run b3_mb2x4_graph_gaf 240 $P -- "${b3[@]}" --mbs 2 --microbatches 4 --steps 14 --cuda-graph --grad-accum-fusion ;;
    gaf_qkv)  # the same with megatron's fused_single_qkv_rope (--fused-qkv-rope: query and key rotated in one launch from
      # the unsplit QKV, the pack's kernel), and a batch of 64 sequences
      run l131_mb4x2_graph_gaf_qkv 200 $P -- --preset llama131 --mbs 4 --microbatches 2 --steps 16 --cuda-graph --grad-accum-fusion --fused-qkv-rope
      run l131_mb8x4_graph_gaf_qkv 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion --fused-qkv-rope
      run l131_mb8x4_graph_gaf 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion
      run l131_mb8x8_graph_gaf_qkv 200 $P -- --preset llama131 --mbs 8 --microbatches 8 --steps 9 --cuda-graph --grad-accum-fusion --fused-qkv-rope
      run b3_mb2x4_graph_gaf_qkv 240 $P -- "${b3[@]}" --mbs 2 --microbatches 4 --steps 14 --cuda-graph --grad-accum-fusion --fused-qkv-rope ;;
    mfu131)  # the 1.3B goal: fused QKV RoPE on and off on one machine (interleaved), and 64 sequences a step
      run l131_mb8x4_graph_gaf_qkv 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion --fused-qkv-rope
      run l131_mb8x4_graph_gaf 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion
      run l131_mb8x4_graph_gaf_qkv_2 200 $P -- --preset llama131 --mbs 8 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion --fused-qkv-rope
      run l131_mb8x8_graph_gaf_qkv 200 $P -- --preset llama131 --mbs 8 --microbatches 8 --steps 9 --cuda-graph --grad-accum-fusion --fused-qkv-rope ;;
    gaf_profile)  # where the GPU time of a 4 x 2 step goes (eager: the profiler sees every kernel)
      run l131_mb4x2_eager_gaf_profile 200 $P -- --preset llama131 --mbs 4 --microbatches 2 --steps 10 --grad-accum-fusion \
        --profile "$OUT/profile_llama131_mb4x2_gaf.txt" ;;
    global)
      run gems_global 150 $U -- --layers 2 --steps 3 --flaggems-global ;;
  esac
done
python3 bench/support/merge_gems_runs.py "$RUNS" "$OUT/cuda_graph.json" --loss-every 6
