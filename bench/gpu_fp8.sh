#!/usr/bin/env bash
# Issue 48 on one Hopper GPU (H100 or H200: the log's first lines name it): fp8 training without Transformer Engine
# on the FlagGems pack. Each stage has its own time limit, so one failure or hang leaves the others' results.
# FP8_STAGES picks stages (default: all, in this order):
#   tests      GPU tests of the fp8 ops (tests/impls/test_flaggems_fp8.py -k on_the_gpu): every recipe against bf16, the casts
#              against torch's, the block-scaled GEMM's check
#   tests_te   the TE-spec GPU tests the fp8 change touches (tests/impls/test_flaggems_gpu.py: TE spec, MoE, MLA, autotune store)
#   sweep      bench/gpu_fp8_ops.py --sweep-cast: the per-tensor cast kernels' candidate tiles timed (and checked against
#              torch's bytes); the fastest is exported as FL_GEMS_FP8_CAST_TILE for every later stage
#   sweep_swiglu  bench/gpu_fp8_ops.py --sweep-swiglu: the SwiGLU kernels that make the fp8 casts, per candidate tile,
#              against the separate kernels (bytes checked equal); the fastest forward and backward tiles are exported
#              as FL_GEMS_FP8_SWIGLU_TILE / FL_GEMS_FP8_SWIGLU_BWD_TILE for every later stage
#   ops        bench/gpu_fp8_ops.py: GEMM TFLOP/s bf16 vs fp8, the cast kernels' bandwidth, one linear fwd+bwd bf16 vs fp8
#   e2e131     the 1.31B Llama-style model (25 layers, hidden 2048, GQA 16/8, SwiGLU 5632, seq 4096), 8 x 4 sequences a
#              step, megatron's full-iteration CUDA graph, gradient accumulation fusion, fused QKV RoPE, TE spec: bf16 and
#              fp8 tensorwise (the same model, batch and machine); e2e131_more: fp8 blockwise and delayed;
#              e2e131_delayed: fp8 delayed only; e2e131_before: fp8 tensorwise with the cast kernels as they were
#              before the hardware conversion and the tile sweep (FL_GEMS_FP8_CAST_CONVERT=integer, tile 64,128,8);
#              e2e131_swiglu_off: fp8 tensorwise and delayed without the SwiGLU kernels' casts (FL_GEMS_FP8_SWIGLU_CAST=0:
#              the casts of fc2's input and fc1's output gradient run as separate kernels, as before fp8_swiglu.py);
#              e2e131_swiglu_all: fp8 delayed with them (FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed; not the default);
#              ab_swiglu_delayed: fp8 delayed without and with them, alternated FP8_AB_REPEATS times (default 3);
#              ab_wgrad: fp8 tensorwise with the weight gradients added into main_grad by a separate kernel
#              (FL_GEMS_FP8_WGRAD_ACCUMULATE=0, as before cublaslt.py) and by cuBLASLt's GEMM itself (the default),
#              alternated FP8_AB_REPEATS times;
#              e2e131_norm_off: fp8 tensorwise without the norms' amax (FL_GEMS_FP8_NORM_CAST=0: the QKV projection's
#              and fc1's input casts run their own amax pass, as before fp8_norm.py)
#   profile131 the 1.31B eager (no graph: the profiler sees each kernel), 8 x 2 sequences, torch.profiler tables of two
#              steps into $OUT/prof_*.txt: fp8 tensorwise and delayed, with the SwiGLU kernels' casts and without;
#              profile131_norm: fp8 tensorwise with the norms' amax and without (FL_GEMS_FP8_NORM_CAST=1 / 0)
#   e2e281     the 2.81B (26 layers, hidden 3072, GQA 24/8, SwiGLU 8192, seq 4096), 2 x 4 sequences: bf16, fp8 tensorwise;
#              e2e281_1x8: the same at 1 x 8 sequences (fp8 at 2 x 4 does not fit an 80 GB card)
#   cold       a shape no seed was measured for (hidden 2560, SwiGLU 6848, seq 2048, 4 layers), empty caches: the shipped
#              seeds (read by SM family), and no seeds at all (FL_GEMS_AUTOTUNE_SEED=0: the tuning budget bounds it)
#   tests_curves  the fp8 loss-curve and CUDA-graph GPU tests (small GPT, 150 / 60 steps)
#   curves131, curves281  loss curves on fresh Markov data (1.31B and 2.81B at seq 1024, 4 sequences a step), bf16,
#              fp8 tensorwise and fp32 (FP8_CURVE_STEPS; FP8_FP32_STEPS for the 1.31B, FP8_FP32_STEPS_281 for the
#              2.81B, default 0: fp32 is 10-20x slower, so fewer steps)
#   seeds      the 1.31B's 300-step curve (as curves131) at other weight seeds (FP8_SEEDS, default "7 99"), bf16 and fp8
#              tensorwise each: how far runs that differ only in the seed part, against how far fp8 parts from bf16
#   optable    bench/fp8_op_table.py on the GPU: every fp8 linear's first call of one step of a small TE-spec GPT, forward,
#              dgrad and wgrad against float64 and bf16, for hybrid and e4m3 tensorwise, hybrid delayed, e4m3 blockwise
#              (all four tables in $OUT/op_table.json)
#   zipf131, zipf281  the curve as the published fp8 comparisons train: Zipf-distributed tokens (a Markov chain whose
#              tokens follow Zipf's law, as words in text: gems_gpt.py --data zipf), warm-up (30 steps) and cosine decay
#              of a 3e-4 peak, 300 steps, seq 1024, 4 sequences a step; bf16 and fp8 tensorwise (hybrid) at each seed of
#              FP8_ZIPF_SEEDS (default "1234 7"; FP8_ZIPF_PAIRS=0: none), a bf16 rerun of the first (FP8_ZIPF_RERUN=0:
#              none), and fp32 for FP8_ZIPF_FP32_STEPS steps (default 0) of the same schedule. Gaps:
#              python bench/fp8_seed_gaps.py curves.json --data zipf [--hidden 3072]
#   variants   the same curve at the default seed with other fp8 settings (FP8_VARIANTS, default
#              "e4m3:tensorwise e4m3:blockwise hybrid:delayed"): which part of hybrid tensorwise moves the curve
#   example    examples/train_gpt_gpu.py (the user's recipe: graph, capture stream, graph-safe RNG, fp8), 4 layers, 8 steps
#   pretrain   Megatron-LM's own pretrain_gpt.py (core_v0.19.0 in $MEGATRON_LM), TE spec, no TE, --fp8-format hybrid
#              --fp8-recipe tensorwise, and --fp8-recipe mxfp8 (refused by name at build)
# FP8_BUDGET_S (default 0: none) skips a stage that would not fit in what is left. Results in $OUT (8 files at most):
# fp8_tests.txt, ops.json, e2e.json (every gems_gpt run merged), curves.json, op_table.json, pretrain.txt, and the
# caller's log.
# Run as (the wheels of flag-gems and liger-kernel in .whl; docs/gpu_pack.md, "fp8 training", has the exact commands):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD/src:$PWD:$PYTHONPATH || exit
#   set -o pipefail; OUT=$OUT bash bench/gpu_fp8.sh 2>&1 | tee $OUT/log.txt
set -u
OUT=${OUT:-/tmp/fp8_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
STAGES=${FP8_STAGES:-tests sweep e2e131 e2e281 ops curves131 cold e2e131_more pretrain example tests_curves curves281 tests_te}
BUDGET=${FP8_BUDGET_S:-0}
START=$SECONDS
RUNS=/tmp/fp8_runs
CURVES=/tmp/fp8_curves
mkdir -p "$RUNS" "$CURVES"
BUDGET_NAME=FP8_BUDGET_S
source "$(dirname "$0")/support/stages.sh"  # stage, fits
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,power.max_limit --format=csv
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
WORKERS=$(python3 -c "import xdist" 2>/dev/null && echo "-n ${FP8_TEST_WORKERS:-6}" || echo "")
gpt=(python3 tests/support/flaggems/gems_gpt.py --mode throughput)
pack=(MG_FL_PREFER=flaggems TRITON_CACHE_DIR=/tmp/fp8_warm/triton FL_GEMS_CACHE_DIR=/tmp/fp8_warm/gems)
run() {  # run NAME SECONDS GEMS_GPT_FLAGS...: one gems_gpt run into $RUNS/NAME.json, its log tail into the log
  local name=$1 limit=$2
  shift 2
  env "${pack[@]}" timeout "$limit" "${gpt[@]}" "$@" --out "$RUNS/$name.json" > "/tmp/$name.log" 2>&1
  local rc=$?
  echo "--- $name rc=$rc"
  grep -v "Warning\|warn\|DEPRECATED" "/tmp/$name.log" | tail -4 | cut -c1-400
}
# 32 sequences a step: 8 x 4 where the card holds it (an H200: the 55% MFU runs), else 4 x 8 (an H100's 80 GB)
GB=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)")
if [ "$GB" -ge 100 ]; then split=(--mbs 8 --microbatches 4); else split=(--mbs 4 --microbatches 8); fi
# --gpu-clocks: the SM clock, power and throttle reasons over the timed steps (nvidia-smi), in each run's JSON
l131=(--preset llama131 --spec te "${split[@]}" --steps 10 --cuda-graph --grad-accum-fusion --fused-qkv-rope --manual-gc --gpu-clocks)
m281=(--preset llama131 --layers 26 --hidden 3072 --heads 24 --groups 8 --ffn 8192)
b3=("${m281[@]}" --spec te --mbs 2 --microbatches 4 --steps 12 --cuda-graph --grad-accum-fusion --fused-qkv-rope --manual-gc --gpu-clocks)
for s in $STAGES; do
  case $s in
    tests)
      fits 150 tests || continue
      stage tests timeout 150 python3 -m pytest -o addopts="" -p no:cacheprovider -q $WORKERS tests/impls/test_flaggems_fp8.py \
        -m gpu -k on_the_gpu 2>&1 | tail -25 | tee -a "$OUT/fp8_tests.txt" ;;
    tests_te)
      fits 200 tests_te || continue
      stage tests_te timeout 300 python3 -m pytest -o addopts="" -p no:cacheprovider -q $WORKERS tests/impls/test_flaggems_gpu.py \
        -k "te_spec or moe_te or grouped_gemm or mla_with or autotune_picks or cuda_graph" 2>&1 | tail -25 | tee -a "$OUT/fp8_tests.txt" ;;
    sweep)
      fits 150 sweep || continue
      stage sweep timeout 240 python3 bench/gpu_fp8_ops.py --sweep-cast --out "$OUT/sweep.json" --repeat 15 | tee /tmp/sweep.txt
      best=$(tail -1 /tmp/sweep.txt)
      if [[ $best =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then export FL_GEMS_FP8_CAST_TILE=$best; echo "=== FL_GEMS_FP8_CAST_TILE=$best"; fi ;;
    sweep_swiglu)
      fits 120 sweep_swiglu || continue
      stage sweep_swiglu timeout 240 python3 bench/gpu_fp8_ops.py --sweep-swiglu --out "$OUT/sweep_swiglu.json" --repeat 15 \
        | tee /tmp/sweep_swiglu.txt
      read -r fwd bwd < <(tail -1 /tmp/sweep_swiglu.txt)
      if [[ $fwd =~ ^[0-9]+,[0-9]+,[0-9]+$ && $bwd =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then
        export FL_GEMS_FP8_SWIGLU_TILE=$fwd FL_GEMS_FP8_SWIGLU_BWD_TILE=$bwd
        echo "=== FL_GEMS_FP8_SWIGLU_TILE=$fwd FL_GEMS_FP8_SWIGLU_BWD_TILE=$bwd"
      fi ;;
    ops)
      fits 150 ops || continue
      stage ops timeout 200 python3 bench/gpu_fp8_ops.py --out "$OUT/ops.json" --repeat 15 ;;
    e2e131)  # the same settings, bf16 and fp8 tensorwise, one after the other on one machine
      fits 130 e2e131 || continue
      stage e2e131 bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_bf16 150 \"\${l131[@]}\"; run l131_fp8_tensorwise 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise"
      if [ ! -f "$RUNS/l131_bf16.json" ]; then  # the graph failed: the same pair eager, so a comparison comes back
        l131=("${l131[@]/--cuda-graph/}")
        fits 100 e2e131_eager && stage e2e131_eager bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
          run l131_eager_bf16 150 \"\${l131[@]}\"; run l131_eager_fp8 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise"
      fi ;;
    e2e131_more)  # the other two recipes at the same settings
      fits 130 e2e131_more || continue
      stage e2e131_more bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_fp8_blockwise 150 \"\${l131[@]}\" --fp8 e4m3 --fp8-recipe blockwise; \
        run l131_fp8_delayed 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max" ;;
    e2e131_delayed)
      fits 70 e2e131_delayed || continue
      stage e2e131_delayed bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_fp8_delayed 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max" ;;
    e2e131_before)
      fits 70 e2e131_before || continue
      stage e2e131_before bash -c "export FL_GEMS_FP8_CAST_TILE=64,128,8 FL_GEMS_FP8_CAST_CONVERT=integer; \
        $(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_fp8_tensorwise_before 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise" ;;
    ab_swiglu_delayed)  # fp8 delayed without and with the SwiGLU's fp8 writes, alternated three times (FP8_AB_REPEATS)
      fits 200 ab_swiglu_delayed || continue
      for i in $(seq "${FP8_AB_REPEATS:-3}"); do
        stage "ab_swiglu_delayed_$i" bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
          run l131_ab${i}_delayed 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 \
            --fp8-amax-compute-algo max; \
          FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed run l131_ab${i}_delayed_swiglu_on 150 \"\${l131[@]}\" --fp8 hybrid \
            --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max"
      done ;;
    ab_wgrad)  # fp8 tensorwise, main_grad's additions by a separate kernel, then by the GEMM (FP8_AB_REPEATS times)
      fits 140 ab_wgrad || continue
      for i in $(seq "${FP8_AB_REPEATS:-3}"); do
        stage "ab_wgrad_$i" bash -c "$(declare -f run); $(declare -p gpt pack l131 RUNS); \
          FL_GEMS_FP8_WGRAD_ACCUMULATE=0 run l131_ab${i}_wgrad_add_kernel 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise; \
          run l131_ab${i}_wgrad_in_gemm 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise"
      done ;;
    e2e131_swiglu_all)
      fits 70 e2e131_swiglu_all || continue
      stage e2e131_swiglu_all bash -c "export FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed; $(declare -f run); \
        $(declare -p gpt pack l131 RUNS); run l131_fp8_delayed_swiglu_on 150 \"\${l131[@]}\" --fp8 hybrid \
        --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max" ;;
    profile131)
      fits 200 profile131 || continue
      p131=(--preset llama131 --spec te --mbs 8 --microbatches 2 --steps 9 --grad-accum-fusion --fused-qkv-rope --manual-gc)
      for v in tensorwise:tensorwise delayed:delayed tensorwise:0 delayed:0; do
        r=${v%%:*}; on=${v##*:}; tag=on; [ "$on" = 0 ] && tag=off
        stage "profile_${r}_swiglu_$tag" bash -c "export FL_GEMS_FP8_SWIGLU_CAST=$on; $(declare -f run); \
          $(declare -p gpt pack p131 RUNS); run prof_${r}_swiglu_$tag 150 \"\${p131[@]}\" --fp8 hybrid --fp8-recipe $r \
          --profile $OUT/prof_${r}_swiglu_$tag.txt"
      done ;;
    profile131_norm)  # the same profile, fp8 tensorwise with the norms' amax and without (FL_GEMS_FP8_NORM_CAST)
      fits 130 profile131_norm || continue
      p131=(--preset llama131 --spec te --mbs 8 --microbatches 2 --steps 9 --grad-accum-fusion --fused-qkv-rope --manual-gc)
      for on in 1 0; do
        tag=on; [ "$on" = 0 ] && tag=off
        stage "profile_tensorwise_norm_$tag" bash -c "export FL_GEMS_FP8_NORM_CAST=$on; $(declare -f run); \
          $(declare -p gpt pack p131 RUNS); run prof_tensorwise_norm_$tag 150 \"\${p131[@]}\" --fp8 hybrid \
          --fp8-recipe tensorwise --profile $OUT/prof_tensorwise_norm_$tag.txt"
      done ;;
    e2e131_swiglu_off)
      fits 130 e2e131_swiglu_off || continue
      stage e2e131_swiglu_off bash -c "export FL_GEMS_FP8_SWIGLU_CAST=0; $(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_fp8_tensorwise_swiglu_off 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise; \
        run l131_fp8_delayed_swiglu_off 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 \
          --fp8-amax-compute-algo max" ;;
    e2e131_norm_off)
      fits 70 e2e131_norm_off || continue
      stage e2e131_norm_off bash -c "export FL_GEMS_FP8_NORM_CAST=0; $(declare -f run); $(declare -p gpt pack l131 RUNS); \
        run l131_fp8_tensorwise_norm_off 150 \"\${l131[@]}\" --fp8 hybrid --fp8-recipe tensorwise" ;;
    seeds)
      curve=(--preset llama131 --spec te --seq 1024 --mbs 4 --fresh-data --manual-gc --steps ${FP8_CURVE_STEPS:-300})
      for seed in ${FP8_SEEDS:-7 99}; do
        fits 160 "seed $seed" || break
        stage "seed_$seed" bash -c "$(declare -f run); $(declare -p gpt pack curve); RUNS=$CURVES; \
          run seed${seed}_bf16 200 \"\${curve[@]}\" --seed $seed; \
          run seed${seed}_fp8 200 \"\${curve[@]}\" --seed $seed --fp8 hybrid --fp8-recipe tensorwise"
      done ;;
    optable)  # bench/fp8_op_table.py on the GPU (the pack's cast kernels and cuBLASLt's fp8 GEMMs), the four recipes
      fits 120 optable || continue
      rm -rf /tmp/fp8_optable && mkdir -p /tmp/fp8_optable
      for v in hybrid:tensorwise e4m3:tensorwise hybrid:delayed e4m3:blockwise; do
        stage "optable_$v" env MG_FL_PREFER=flaggems timeout 150 python3 -m fl_patch bench/fp8_op_table.py \
          --format ${v%%:*} --recipe ${v##*:} --json /tmp/fp8_optable/${v%%:*}_${v##*:}.json 2>&1 | tail -16
      done
      python3 -c "import glob, json, os, sys; json.dump({os.path.basename(p)[:-5]: json.load(open(p)) for p in \
        sorted(glob.glob('/tmp/fp8_optable/*.json'))}, open(sys.argv[1], 'w'), indent=1)" "$OUT/op_table.json" ;;
    zipf131|zipf281)  # the gap at DeepSeek-V3's scale: Zipf-distributed data, warm-up and cosine decay (no plateau)
      if [ $s = zipf131 ]; then model=(--preset llama131); name=z131; per=60; else model=("${m281[@]}"); name=z281; per=110; fi
      zipf=("${model[@]}" --spec te --seq 1024 --mbs 4 --fresh-data --data zipf --lr 3e-4 --warmup-steps 30
        --lr-decay cosine --manual-gc --steps ${FP8_CURVE_STEPS:-300})
      seeds=(${FP8_ZIPF_SEEDS:-1234 7})
      for seed in "${seeds[@]}"; do
        [ "${FP8_ZIPF_PAIRS:-1}" = 1 ] || break
        fits $((2 * per)) "$s seed $seed" || break
        stage "${s}_seed_$seed" bash -c "$(declare -f run); $(declare -p gpt pack zipf); RUNS=$CURVES; \
          run ${name}_s${seed}_bf16 $((3 * per)) \"\${zipf[@]}\" --seed $seed; \
          run ${name}_s${seed}_fp8 $((3 * per)) \"\${zipf[@]}\" --seed $seed --fp8 hybrid --fp8-recipe tensorwise"
      done
      # the same bf16 run again (how far a run parts from itself), and fp32 for a few steps (the reference)
      if [ "${FP8_ZIPF_RERUN:-1}" = 1 ] && fits $per "$s bf16 rerun"; then
        stage "${s}_rerun" bash -c "$(declare -f run); $(declare -p gpt pack zipf); RUNS=$CURVES; \
          run ${name}_s${seeds[0]}_bf16_rerun $((3 * per)) \"\${zipf[@]}\" --seed ${seeds[0]}"
      fi
      fp32_steps=${FP8_ZIPF_FP32_STEPS:-0}
      if [ "$fp32_steps" -gt 0 ] && fits $((fp32_steps * 2 + 40)) "$s fp32"; then
        stage "${s}_fp32" bash -c "$(declare -f run); $(declare -p gpt pack zipf); RUNS=$CURVES; \
          run ${name}_s${seeds[0]}_fp32 $((fp32_steps * 5 + 120)) \"\${zipf[@]}\" --seed ${seeds[0]} --fp32 \
          --steps $fp32_steps --lr-decay-steps ${FP8_CURVE_STEPS:-300}"
      fi ;;
    variants)
      curve=(--preset llama131 --spec te --seq 1024 --mbs 4 --fresh-data --manual-gc --steps ${FP8_CURVE_STEPS:-300})
      for v in ${FP8_VARIANTS:-e4m3:tensorwise e4m3:blockwise hybrid:delayed}; do
        fits 100 "variant $v" || break
        history=""; [ "${v##*:}" = delayed ] && history="--fp8-amax-history-len 16 --fp8-amax-compute-algo max"
        stage "variant_$v" bash -c "$(declare -f run); $(declare -p gpt pack curve); RUNS=$CURVES; \
          run l131_curve_${v%%:*}_${v##*:} 200 \"\${curve[@]}\" --fp8 ${v%%:*} --fp8-recipe ${v##*:} $history"
      done ;;
    e2e281_1x8)
      b3x8=("${m281[@]}" --spec te --mbs 1 --microbatches 8 --steps 8 --cuda-graph
        --grad-accum-fusion --fused-qkv-rope --manual-gc --gpu-clocks)
      fits 150 e2e281_1x8 || continue
      stage e2e281_1x8 bash -c "$(declare -f run); $(declare -p gpt pack b3x8 RUNS); \
        run b3_mbs1_bf16 150 \"\${b3x8[@]}\"; run b3_mbs1_fp8 150 \"\${b3x8[@]}\" --fp8 hybrid --fp8-recipe tensorwise" ;;
    e2e281)
      fits 150 e2e281 || continue
      stage e2e281 bash -c "$(declare -f run); $(declare -p gpt pack b3 RUNS); \
        run b3_bf16 150 \"\${b3[@]}\"; run b3_fp8_tensorwise 150 \"\${b3[@]}\" --fp8 hybrid --fp8-recipe tensorwise" ;;
    cold)  # empty triton and pack caches each run
      fits 120 cold || continue
      for way in noseeds seeds; do
        rm -rf /tmp/fp8_cold
        extra=(); [ $way = noseeds ] && extra=(FL_GEMS_AUTOTUNE_SEED=0)
        stage "cold_$way" env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=/tmp/fp8_cold/t FL_GEMS_CACHE_DIR=/tmp/fp8_cold/g \
          "${extra[@]}" timeout 120 "${gpt[@]}" --layers 4 --hidden 2560 --ffn 6848 --seq 2048 --heads 20 --groups 4 \
          --mbs 1 --steps 3 --out "$RUNS/cold_${way}_2560_6848_2048.json" > "/tmp/cold_$way.log" 2>&1
        grep -v "Warning\|warn\|DEPRECATED" "/tmp/cold_$way.log" | grep -i "autotun\|budget\|first_step" | tail -5 | cut -c1-600
      done ;;
    tests_curves)
      fits 240 tests_curves || continue
      stage tests_curves timeout 420 python3 -m pytest -o addopts="" -p no:cacheprovider -q $WORKERS \
        tests/impls/test_flaggems_fp8.py -m gpu -k "loss_curve or cuda_graph" 2>&1 | tail -25 | tee -a "$OUT/fp8_tests.txt" ;;
    curves131|curves281)
      if [ $s = curves131 ]; then model=(--preset llama131); name=l131; else model=("${m281[@]}"); name=b3; fi
      steps=${FP8_CURVE_STEPS:-150}; fp32_steps=${FP8_FP32_STEPS:-60}
      [ $s = curves281 ] && fp32_steps=${FP8_FP32_STEPS_281:-0}  # 0: no fp32 run (about 4 s a step at 2.81B)
      fits ${FP8_CURVE_NEEDS:-200} "$s" || continue
      curve=(--spec te --seq 1024 --mbs 4 --fresh-data --manual-gc)
      stage "$s" bash -c "$(declare -f run); $(declare -p gpt pack RUNS model curve steps fp32_steps name); RUNS=$CURVES; \
        run \${name}_curve_bf16 200 \"\${model[@]}\" \"\${curve[@]}\" --steps \$steps; \
        run \${name}_curve_fp8 200 \"\${model[@]}\" \"\${curve[@]}\" --steps \$steps --fp8 hybrid --fp8-recipe tensorwise; \
        [ \$fp32_steps -gt 0 ] && run \${name}_curve_fp32 240 \"\${model[@]}\" \"\${curve[@]}\" --steps \$fp32_steps --fp32" ;;
    pretrain)  # upstream's pretrain_gpt.py (MEGATRON_LM: a core_v0.19.0 checkout's pretrain_gpt.py, gpt_builders.py,
      # model_provider.py), under python -m fl_patch, one GPU, TE spec (its default), no TE installed
      fits 100 pretrain || continue
      mkdir -p /tmp/fp8_pretrain && cp "$MEGATRON_LM"/{pretrain_gpt.py,gpt_builders.py,model_provider.py} /tmp/fp8_pretrain/
      base=(--mock-data --tokenizer-type NullTokenizer --vocab-size 32000 --num-layers 4 --hidden-size 1024
        --num-attention-heads 8 --group-query-attention --num-query-groups 4 --ffn-hidden-size 2816 --seq-length 2048
        --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 16 --train-iters 30 --lr 3e-4
        --lr-warmup-iters 5 --log-interval 5 --eval-interval 30 --eval-iters 2 --num-workers 0 --bf16
        --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights)
      for recipe in tensorwise mxfp8; do
        stage "pretrain_$recipe" bash -c "cd /tmp/fp8_pretrain && MG_FL_PREFER=flaggems timeout 150 python3 -m fl_patch \
          -m torch.distributed.run --standalone --nproc-per-node 1 pretrain_gpt.py ${base[*]} --fp8-format hybrid \
          --fp8-recipe $recipe" > "/tmp/pretrain_$recipe.log" 2>&1
        { echo "=== $recipe"; grep -v "Warning\|warn\|DEPRECATED" "/tmp/pretrain_$recipe.log" \
          | grep -i "lm loss\|fp8\|TEFeatureError\|error\|Traceback" | grep -v "^  fp8\|^  .*fp8.*\.\.\." | tail -16 | cut -c1-500; } \
          | tee -a "$OUT/pretrain.txt"
      done ;;
    example)
      fits 60 example || continue
      stage example env MG_FL_PREFER=flaggems timeout 120 python3 -m fl_patch examples/train_gpt_gpu.py --layers 4 \
        --mbs 2 --microbatches 2 --steps 8 --fp8 hybrid 2>&1 | grep "^step\|Error\|fp8" | tail -12 | tee -a "$OUT/pretrain.txt" ;;
  esac
done
[ -n "$(ls $RUNS 2>/dev/null)" ] && python3 bench/support/merge_gems_runs.py "$RUNS" "$OUT/e2e.json" --loss-every 4
[ -n "$(ls $CURVES 2>/dev/null)" ] && python3 bench/support/merge_gems_runs.py "$CURVES" "$OUT/curves.json" --loss-every 10
echo "=== done in $((SECONDS - START)) s"
